"""`kgqr eval`: score strategies on judged queries; `kgqr eval sweep`: parameter sweeps."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kgqr_core.cli_groups import DefaultRunGroup
from kgqr_core.settings import FLAT, Settings, get_settings
from kgqr_ops.cli_options import (
    caller_option,
    checked_kb_name,
    judged_queries,
    kb_option,
    strategy_names,
    strategy_params,
)
from query_rewriter.strategies import menu
from workbench.evaluation.cross_validation import DEFAULT_FOLDS

if TYPE_CHECKING:
    from plugin.field_map import FieldMap
from workbench.evaluation.metrics import METRIC_NAMES

QUERY_SET_HELP = """\b
QUERY_SET is KIND:PATH:
  musique:DIR    MuSiQue queries_dev.json + corpus.json (../shared/data/musique100)
  hotpotqa:DIR   HotpotQA queries_dev.json + corpus.json (../shared/data/hotpotqa100)
  stark:DIR      STaRK QA stark_qa.csv + {train,val,test}.index (split "human" too)
  jsonl:FILE     your own judgments, one query a line (see docs/architecture.md, "Judgments")
"""

RUN_HELP = f"""Run QUERY_SET against knowledge base --kb through each strategy and print
Hit@1/5, Recall@2/5/10/20, MRR, mAP, nDCG@10 and latency p50/p95 per strategy.

{QUERY_SET_HELP}
Searches go through a kgqr proxy: --proxy URL, or one started in this process with the
rewrite cache off (LLM answers stay cached in Redis, so a re-run costs no LLM time; the
table says how many calls were answered from the cache). Writes OUT.json and OUT.csv.

An LLM that samples (temperature above 0) gives another rewrite on another draw, and one
draw's figures can differ from the next's by more than a setting moves them. --samples N
runs each LLM strategy on N draws (samples KGQR_LLM_SAMPLE, 0 by default, and the N-1
after it; rows say "kar" for sample 0, "kar #2" for sample 1) and prints each metric's mean
and range over them; strategies without an LLM run once.

\b
  kgqr eval musique:../shared/data/musique100 --kb musique --strategies base,graph
  kgqr eval jsonl:judged.jsonl --kb shop --strategies base,graph_walk --baseline base
"""


@contextlib.contextmanager
def proxy_url(url: str | None, settings: Settings) -> Iterator[str]:
    """The proxy to evaluate through: the given one, or one in this process that does not
    reuse earlier rewrites (so latencies are those of real rewrites), nor logs its searches
    in the query log (every judged query once a strategy and a sample: the dashboards'
    rates, and the queries `rewrites warm --from-log` takes as the most asked)."""
    if url:
        yield url.rstrip("/")
        return
    from kgqr_ops.background_proxy import ProxyDidNotStart, running_proxy

    # No budget either: a budgeted LLM strategy would be scored on the budget strategy's
    # answers, its own finished in the background for no one.
    evaluating = settings.replaced(
        {"rewrite_cache_ttl_s": 0, "query_log_enabled": False, "rewrite_budget_ms": None}
    )
    with contextlib.ExitStack() as stack:
        try:
            started = stack.enter_context(
                running_proxy(evaluating, say=lambda line: click.echo(line, err=True))
            )
        except ProxyDidNotStart as exc:
            raise click.ClickException(str(exc)) from exc
        yield started


def run_config(settings: Settings, **extra: Any) -> dict[str, Any]:
    """What a reader needs to reproduce a figure: date, models, every setting a strategy
    declares it reads (strategies.SHAPING_SETTINGS) and the hybrid search's."""
    from query_rewriter.strategies import SHAPING_SETTINGS

    hybrid = {name for name in FLAT if name.startswith("hybrid_")}
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        **extra,
        # Settings as set, not derived (hybrid.bm25's default comes from hybrid_weights):
        # an earlier report's settings are compared key by key (resume.py).
        "settings": settings.values(name for name in SHAPING_SETTINGS | hybrid if name in FLAT),
    }


def eval_target(kb: str) -> Any:
    """Where `kb`'s judged queries are searched (runner.EvalTarget): an attached index in
    its own fields, as kgqr-meta records them; else kgqr's own documents index. With
    kgqr-meta unreadable by these credentials, kgqr's own index."""
    import opensearchpy

    from kgqr_core import connections
    from plugin import kb_meta

    try:
        meta = kb_meta.load(connections.opensearch_client(get_settings()), kb)
    except opensearchpy.exceptions.TransportError:
        meta = None
    return target_of(kb, meta.attached if meta is not None else None)


def target_of(kb: str, attached: FieldMap | None) -> Any:
    """runner.EvalTarget.of, its refusal (an attached index with no text field) one line."""
    from workbench.evaluation.runner import EvalError, EvalTarget

    try:
        return EvalTarget.of(kb, attached)
    except EvalError as exc:
        raise click.ClickException(str(exc)) from exc


def _baseline(chosen: str | None, names: list[str]) -> str:
    if chosen is None:
        return "base" if "base" in names else names[0]
    if chosen not in names:
        raise click.BadParameter(
            f"{chosen!r} is not among --strategies ({', '.join(names)}): a comparison pairs "
            "runs of the same queries",
            param_hint="--baseline",
        )
    return chosen


def _stamp() -> str:
    return dt.datetime.now().strftime("%Y%m%d-%H%M%S")


def _draws(names: list[str], samples: int, proxy: str | None) -> list[list[str]]:
    """The strategies run on each draw of the LLM's answers: all on the first, the LLM
    ones on the rest (the others' figures would only repeat)."""
    from query_rewriter.strategies import STRATEGIES

    if samples == 1:
        return [names]
    sampled = [name for name in names if STRATEGIES[name].uses_llm]
    if not sampled:
        raise click.BadParameter(
            f"none of {', '.join(names)} asks an LLM at search time, so every draw "
            "would be the same",
            param_hint="--samples",
        )
    if proxy:
        raise click.BadParameter(
            "a draw is the proxy's KGQR_LLM_SAMPLE, which this command sets only on the "
            "proxy it starts: leave out --proxy, or run once per sample against proxies "
            "started with KGQR_LLM_SAMPLE=0, 1, ...",
            param_hint="--samples",
        )
    return [names, *([sampled] * (samples - 1))]


@dataclass(frozen=True)
class EvalOptions:
    """The options `run` and `sweep` share, parsed."""

    split: str | None
    limit: int | None
    params: dict[str, float]
    size: int
    concurrency: int
    proxy: str | None
    out: Path | None
    caller: dict[str, str]  # the credential headers searches carry (--user)

    @property
    def pacing(self) -> dict[str, Any]:
        """What each search asks for, how many are in flight and as whom, as evaluate()
        takes them."""
        return {"size": self.size, "concurrency": self.concurrency, "headers": self.caller}


def common_options(out_help: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Adds the shared options to a command, which receives them as `options`."""

    def decorate(function: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(function)
        def command(*args: Any, split: str | None, limit: int | None, params: tuple[str, ...],
                    size: int, concurrency: int, proxy: str | None, out: Path | None,
                    caller: dict[str, str], **kwargs: Any) -> None:  # fmt: skip
            from workbench.evaluation.runner import EvalError

            options = EvalOptions(
                split, limit, strategy_params(params), size, concurrency, proxy, out, caller
            )
            try:
                function(*args, options=options, **kwargs)
            except EvalError as exc:  # a refused search is the user's to fix, not a crash
                raise click.ClickException(f"evaluation stopped: {exc}") from exc

        decorators = [
            click.option(
                "--split",
                default=None,
                help="Query split: musique and hotpotqa read queries_SPLIT.json (default "
                "dev); STaRK train, val, test (default) or human; jsonl has none.",
            ),
            click.option(
                "--limit",
                type=click.IntRange(min=1),
                default=None,
                help="Only the first N queries.",
            ),
            click.option(
                "--param",
                "params",
                multiple=True,
                metavar="NAME=VALUE",
                help="Strategy parameter override, e.g. rewrite.alpha=0.5, knn.k=10, kar.h=1.",
            ),
            click.option(
                "--size",
                type=click.IntRange(1, 10_000),
                default=20,
                show_default=True,
                help="Hits retrieved per query.",
            ),
            click.option(
                "--concurrency",
                type=click.IntRange(min=1),
                default=1,
                show_default=True,
                help="Searches in flight (the local LLM serves one at a time).",
            ),
            click.option("--proxy", default=None, help="Evaluate through this running kgqr proxy."),
            click.option("--out", type=click.Path(path_type=Path), default=None, help=out_help),
            caller_option(
                "The OpenSearch user to search as, whose judged queries these are (needed on a "
                "secured cluster)."
            ),
        ]
        for decorator in reversed(decorators):
            command = decorator(command)
        return command

    return decorate


@click.group("eval", cls=DefaultRunGroup)
def eval_group() -> None:
    """Score strategies on judged queries: `kgqr eval QUERY_SET --kb NAME` (see `kgqr eval
    run --help`), and sweep parameters with `kgqr eval sweep`."""


@eval_group.command("run", help=RUN_HELP)
@click.argument("query_set")
@kb_option("Knowledge base the queries are judged against.")
@click.option(
    "--strategies",
    default="base,graph",
    show_default=True,
    help=f"Comma-separated; {menu()}. Each LLM call takes 15-80 s on a 2-core CPU.",
)
@click.option(
    "--samples",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Draws of the LLM's answers each LLM strategy is run on (see above).",
)
@click.option(
    "--baseline",
    default=None,
    help="The strategy every other is compared to, query by query (paired difference, 95% "
    "bootstrap interval, randomization p-value, wins/losses). Default: base when run, else "
    "the first of --strategies.",
)
@click.option(
    "--resume",
    "resume_from",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Reuse the results of an earlier run with the same configuration instead of "
    "searching again: its OUT.json, or the OUT.partial.jsonl checkpoint a stopped run left "
    "behind. Repeatable; a later file wins.",
)
@common_options(
    "Output stem (default eval-results/KB-DATE); .json and .csv are added. Results are "
    "checkpointed to STEM.partial.jsonl while the run lasts."
)
def run(
    query_set: str,
    kb: str,
    strategies: str,
    samples: int,
    baseline: str | None,
    resume_from: tuple[Path, ...],
    options: EvalOptions,
) -> None:
    from tqdm import tqdm

    from workbench.evaluation.report import format_table, write_outputs
    from workbench.evaluation.resume import (
        Checkpoint,
        ResumeError,
        load_earlier_run,
        reusable_results,
    )
    from workbench.evaluation.runner import evaluate, merge_samples, run_identity

    names = strategy_names(strategies, "--strategies")
    compared_to = _baseline(baseline, names)
    target = eval_target(kb)
    draws = _draws(names, samples, options.proxy)
    queries = judged_queries(query_set, "QUERY_SET", options.split, options.limit)
    settings = get_settings()
    config = run_config(settings, query_set=query_set, split=options.split, limit=options.limit)
    matching = run_identity(kb, options.params, options.size, config)
    try:
        earlier = [load_earlier_run(path) for path in resume_from]
        reuse = reusable_results(earlier, matching, queries, names)
    except ResumeError as exc:
        raise click.BadParameter(str(exc), param_hint="--resume") from exc
    if resume_from:
        config.update(resumed_from=[str(p) for p in resume_from], reused_results=len(reuse))
    config["baseline"] = compared_to
    stem = options.out or Path("eval-results") / f"{kb}-{_stamp()}"
    checkpoint = Checkpoint(stem, matching)
    searches = sum(len(draw) for draw in draws) * len(queries)
    reports = []
    try:
        with tqdm(total=searches, unit="query", desc="eval") as bar:

            def advance(result: Any) -> None:
                checkpoint.add(result)
                bar.set_postfix(strategy=result.strategy, sample=result.sample, refresh=False)
                bar.update()

            for sample, drawn in enumerate(draws, start=settings.llm.sample):
                drawing = settings.replaced({"llm_sample": sample})
                with proxy_url(options.proxy, drawing) as url:
                    drawing_run = evaluate(url, kb, queries, drawn, options.params,
                                           **options.pacing, on_result=advance, config=config,
                                           reuse=reuse, sample=sample, target=target)  # fmt: skip
                    reports.append(asyncio.run(drawing_run))
        report = reports[0] if samples == 1 else merge_samples(reports)
    except BaseException:  # Ctrl-C included: say where the finished part is
        if checkpoint.close(finished=False):
            click.echo(f"results so far are in {checkpoint.path}; --resume it to go on", err=True)
        raise
    click.echo(format_table(report))
    if "graph_source" in report.config:
        click.echo(f"graph read from: {report.config['graph_source'] or 'no graph'}")
    json_path, csv_path = write_outputs(report, stem)
    checkpoint.close(finished=True)
    click.echo(f"wrote {json_path} and {csv_path}")


def _parse_grid(values: tuple[str, ...], strategy: str) -> dict[str, list[float]]:
    from query_rewriter.strategies import ALL_PARAMS, STRATEGIES
    from workbench.evaluation.sweep import DEFAULT_GRID

    reads = STRATEGIES[strategy].declared()
    if not values:
        return {name: grid for name, grid in DEFAULT_GRID.items() if name in reads}
    named = {param.legacy: param.name for param in ALL_PARAMS if param.legacy}
    grid = {}
    for item in values:
        name, _, numbers = item.partition("=")
        try:
            grid[name] = [float(x) for x in numbers.split(",") if x]
        except ValueError:
            grid[name] = []
        if not grid[name]:  # swept over nothing, the run ended on a missing folder
            raise click.BadParameter(f"{item!r}: expected NAME=V1,V2,...", param_hint="--grid")
        strategy_params(tuple(f"{name}={v}" for v in grid[name]), param_hint="--grid")
        if named.get(name, name) not in reads:  # every point would rank alike
            raise click.BadParameter(f"{item!r}: {strategy} does not read {name}",
                                     param_hint="--grid")  # fmt: skip
    return grid


@eval_group.command("sweep")
@click.option(
    "--dataset",
    "datasets",
    multiple=True,
    required=True,
    metavar="KB=QUERY_SET",
    help="A knowledge base and its query set, e.g. musique=musique:../shared/data/musique100",
)
@click.option("--strategy", default="kar", show_default=True, help="The strategy swept.")
@click.option(
    "--grid",
    multiple=True,
    metavar="NAME=V1,V2",
    help="Values of one parameter (default: those of rewrite.alpha 0.3-1.0, knn.k 10-100, "
    "kar.k 3-40, kar.h 1-2, rewrite.n 1-3, graph.damping 0.3-0.7, graph.weight 0.2-0.8, "
    "graph.walk_share 0.25-0.75, graph.bridges 1-5 the strategy reads).",
)
@click.option(
    "--metric",
    "metrics",
    type=click.Choice(METRIC_NAMES),
    multiple=True,
    default=("R@5", "MRR"),
    show_default=True,
    help="Metric plotted (repeatable); checked before the sweep runs, not after.",
)
@click.option(
    "--baseline",
    default="base",
    show_default=True,
    help="The strategy each point, and the cross-validated choice, are compared to.",
)
@click.option(
    "--folds",
    type=click.IntRange(min=2),
    default=DEFAULT_FOLDS,
    show_default=True,
    help="Folds of the cross-validation (at most the number of queries).",
)
@common_options(
    "Output folder (default eval-results/sweep-DATE). Each point is checkpointed in its "
    "points/ folder until sweep.json is written: a stopped sweep run again with the same "
    "--out reuses the points it finished."
)
def sweep(
    datasets: tuple[str, ...],
    strategy: str,
    grid: tuple[str, ...],
    metrics: tuple[str, ...],
    baseline: str,
    folds: int,
    options: EvalOptions,
) -> None:
    """Vary one parameter at a time over its grid, for each dataset; write a PNG per
    parameter (metric against value, one line per dataset) and sweep.json. Each point is
    compared, query by query, to --baseline. The sweep's result is cross-validated: on each
    of --folds folds, the setting (the configured one or a point) with the best first
    --metric on the other folds is scored on that fold; those held-out scores, and their
    comparison to the baseline, are what it reports."""
    from tqdm import tqdm

    from workbench.evaluation.sweep import Dataset, PointCheckpoints, plot_parameter, run_sweep

    [strategy] = strategy_names(strategy, "--strategy", single=True)
    [baseline] = strategy_names(baseline, "--baseline", single=True)
    values = _parse_grid(grid, strategy)
    loaded: list[Dataset] = []
    for item in datasets:
        kb, sep, spec = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r}: expected KB=QUERY_SET", param_hint="--dataset")
        checked_kb_name(kb, param_hint="--dataset")
        if any(earlier.kb == kb for earlier in loaded):
            # Points, baselines and checkpoints are kept by KB: a second set would be
            # scored against the first's baseline, pairing other questions by id.
            twice = f"{kb} is named twice: one query set a knowledge base (join the files)"
            raise click.BadParameter(twice, param_hint="--dataset")
        loaded.append(
            Dataset(
                name=kb,
                kb=kb,
                queries=judged_queries(spec, "--dataset", options.split, options.limit),
                target=eval_target(kb),
                query_set=spec,
            )
        )
    settings = get_settings()
    folder = options.out or Path("eval-results") / f"sweep-{_stamp()}"
    identity = run_config(settings, split=options.split, limit=options.limit)
    checkpoints = PointCheckpoints(folder / "points", identity)
    steps = sum(len(v) for v in values.values()) * len(loaded)
    with (
        proxy_url(options.proxy, settings) as url,
        tqdm(total=steps, unit="point", desc="sweep") as bar,
    ):

        def advance(point: Any) -> None:
            bar.set_postfix(
                param=point.param, value=point.value, dataset=point.dataset, refresh=False
            )
            bar.update()

        sweeping = run_sweep(url, loaded, strategy, values, options.params, **options.pacing,
                             baseline=baseline, on_point=advance,
                             checkpoints=checkpoints)  # fmt: skip
        try:
            swept = asyncio.run(sweeping)
        except BaseException:  # Ctrl-C included: say where the finished points are
            if checkpoints.folder.exists():
                click.echo(f"the points so far are in {checkpoints.folder}: the same command "
                           f"with --out {folder} goes on from them", err=True)  # fmt: skip
            raise
    if checkpoints.reused:
        click.echo(f"{checkpoints.reused} results reused from {checkpoints.folder}")
    points = swept.points
    compared = swept.point_comparisons(metrics)
    click.echo(f"each point against {baseline}: difference [95% interval] p, wins/losses")
    for param in values:
        click.echo(f"wrote {plot_parameter(points, param, metrics, folder / f'{param}.png')}")
        for number, point in enumerate(points):
            if point.param == param:
                shown = "  ".join(f"{c.metric} {100 * point.report.metrics[c.metric]:5.1f} "
                                  f"({c.as_text()})" for c in compared[number])  # fmt: skip
                click.echo(f"  {point.dataset:>12}  {point.setting}  {shown}")
    validated = {}
    for dataset in loaded:
        if len(dataset.queries) < 2:
            click.echo(f"{dataset.name}: one query cannot be cross-validated")
            continue
        k = min(folds, len(dataset.queries))
        chosen = swept.cross_validated(dataset.name, metrics[0], k)
        held_out = swept.against_baseline(dataset.name, chosen.per_query, metrics)
        validated[dataset.name] = {
            "folds": k, "chosen_on": metrics[0], "chosen": chosen.chosen(),
            "fold_choices": [asdict(f) for f in chosen.folds],
            "held_out": {m: chosen.mean(m) for m in metrics},
            "against_baseline": [c.as_json() for c in held_out],
        }  # fmt: skip
        picks = ", ".join(f"{name} ({n} of {k})" for name, n in chosen.chosen().items())
        click.echo(f"{dataset.name}: cross-validated over {k} folds, chosen on "
                   f"{metrics[0]}: {picks}")  # fmt: skip
        for c in held_out:
            click.echo(f"  held-out {c.metric} {100 * chosen.mean(c.metric):5.1f}, against "
                       f"{baseline}: {c.as_text()}")  # fmt: skip
    summary = {
        "config": run_config(
            settings,
            strategy=strategy,
            grid=values,
            split=options.split,
            limit=options.limit,
            datasets=list(datasets),
        ),
        "points": [
            {"dataset": p.dataset, "param": p.param, "value": p.value, **asdict(p.report),
             "against_baseline": [c.as_json() for c in compared[number]]}
            for number, p in enumerate(points)
        ],
        "cross_validated": validated,
    }  # fmt: skip
    (folder / "sweep.json").write_text(json.dumps(summary, indent=1) + "\n")
    checkpoints.remove()
    click.echo(f"wrote {folder / 'sweep.json'}")
