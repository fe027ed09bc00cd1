"""`kgqr tune auto`: set a knowledge base's default from its judged queries, on evidence."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import click
import httpx

from kgqr_core.settings import get_settings
from kgqr_ops.cli_options import judged_queries, kb_option, strategy_names
from workbench.evaluation.cli import (
    EvalOptions,
    common_options,
    eval_target,
    proxy_url,
    run_config,
)
from workbench.evaluation.cross_validation import DEFAULT_FOLDS

TUNE_PAGE = "tune"


@click.group("tune")
def tune() -> None:
    """Choose a knowledge base's default strategy from judged queries (`kgqr tune auto`);
    judge hits by hand on the proxy's /_kgqr/tune page."""


@tune.command("auto")
@kb_option("The knowledge base whose default is chosen.")
@click.option(
    "--queries",
    default=TUNE_PAGE,
    show_default=True,
    help="Judged queries: KIND:PATH as `kgqr eval run` takes them, or `tune` for the "
    "judgments saved on the proxy's /_kgqr/tune page for --kb.",
)
@click.option(
    "--strategies",
    default="base,graph,graph_walk,graph_mix,prf",
    show_default=True,
    help="LLM-free strategies to choose among (base is always one).",
)
@click.option(
    "--metric",
    type=click.Choice(["R@5", "nDCG@10"]),
    default="R@5",
    show_default=True,
    help="What a setting must beat base on, with a 95% interval above 0.",
)
@click.option(
    "--folds", type=click.IntRange(min=2), default=DEFAULT_FOLDS, show_default=True,
    help="Folds of the cross-validation (at most the number of queries).",
)  # fmt: skip
@click.option("--dry-run", is_flag=True, help="Print the evidence; record no default.")
@common_options("Folder for the judgments used and the evidence (default eval-results/tune-KB).")
def auto(
    kb: str, queries: str, strategies: str, metric: str, folds: int, dry_run: bool,
    options: EvalOptions,
) -> None:  # fmt: skip
    """Score every LLM-free strategy, at its configured parameters and at each value of its
    main parameters, on --kb's judged queries through a kgqr proxy; cross-validate the
    choice (chosen on the other folds, scored on each held-out one); and record as the
    KB's default the setting best on all queries only if the held-out scores beat base
    with a 95% interval above 0 (and p < 0.05) on --metric and MRR's interval is not
    wholly below 0. Otherwise
    base is recorded, with the evidence that nothing beat it; on fewer than 10 judged
    queries, nothing is.

    \b
      kgqr tune auto --kb shop --queries tune --dry-run
      kgqr tune auto --kb musique --queries musique:../shared/data/musique100
    """
    from tqdm import tqdm

    from plugin import kb_meta
    from workbench.tuning.auto import BASELINE, candidate_settings, decide, score_settings

    names = strategy_names(strategies, "--strategies")
    unfit = [name for name in names if _asks_an_llm(name)]
    if unfit:
        raise click.BadParameter(f"{', '.join(unfit)} ask an LLM at search time: a default "
                                 "must be LLM-free", param_hint="--strategies")  # fmt: skip
    settings = get_settings()
    # A query set given as a file is read first: a bad one is a usage error before any
    # folder is made or proxy started.
    given = None if queries == TUNE_PAGE else judged_queries(
        queries, "--queries", options.split, options.limit
    )  # fmt: skip
    folder = options.out or Path("eval-results") / f"tune-{kb}"
    folder.mkdir(parents=True, exist_ok=True)
    candidates = candidate_settings([BASELINE, *names])
    with proxy_url(options.proxy, settings) as url:
        judged = given if given is not None else _tune_page_judgments(url, kb, options, folder)
        if len(judged) < 2:
            raise click.ClickException(f"{len(judged)} judged query: too few to choose on")
        with tqdm(total=len(candidates), unit="setting", desc="tune auto") as bar:
            scoring = score_settings(url, kb, judged, candidates, options.params,
                                     options.pacing, eval_target(kb),
                                     on_scored=lambda _: bar.update())  # fmt: skip
            scored = asyncio.run(scoring)
    decision = decide(scored, metric, min(folds, len(judged)))
    click.echo(f"{decision.candidates} settings on {decision.queries} judged queries of {kb}")
    picks = ", ".join(f"{name} ({n})" for name, n in decision.validated.chosen().items())
    click.echo(f"chosen on the training folds ({metric}): {picks}")
    for compared in decision.against_base:
        held_out = decision.validated.mean(compared.metric)
        click.echo(f"  held-out {compared.metric} {100 * held_out:5.1f}, against base: "
                   f"{compared.as_text()}")  # fmt: skip
    click.echo(f"best on all queries: {decision.best_overall.name}")
    click.echo(decision.reason())
    config = run_config(settings, kb=kb, folds=folds, params=options.params)
    evidence = {**decision.evidence(), "judged_from": queries, "config": config}
    (folder / "tune-auto.json").write_text(json.dumps(evidence, indent=1) + "\n")
    if dry_run or decision.promoted is None:
        click.echo(f"{'dry run: ' if dry_run else ''}no default recorded")
        return
    from kgqr_core import connections
    from workbench.evaluation.runner import read_by

    # As it was scored: --param's values under the setting's own.
    promoted = decision.promoted
    params = read_by(promoted.strategy, {**options.params, **promoted.params})
    chosen = kb_meta.set_default(
        connections.opensearch_client(settings), kb, promoted.strategy, params, decision.reason(),
        kb_meta.set_by("kgqr tune auto", settings.opensearch.user), evidence,
    )  # fmt: skip
    click.echo(f"{kb}: default {chosen.describe()}")


def _asks_an_llm(name: str) -> bool:
    from query_rewriter.strategies import STRATEGIES

    return STRATEGIES[name].uses_llm


def _tune_page_judgments(url: str, kb: str, options: EvalOptions, folder: Path) -> list[Any]:
    """The queries judged on the tune page for `kb`, read through the proxy as the caller
    and kept beside the evidence."""
    answer = httpx.get(f"{url}/_kgqr/tune/judgments.jsonl", params={"kb": kb},
                       headers=options.caller, timeout=60)  # fmt: skip
    if answer.status_code != 200:
        raise click.ClickException(f"the tune page's judgments of {kb} could not be read: "
                                   f"HTTP {answer.status_code} {answer.text[:300]}")  # fmt: skip
    saved = folder / "judgments.jsonl"
    saved.write_bytes(answer.content)
    if not answer.content.strip():
        raise click.ClickException(f"nothing is judged for {kb} on the tune page yet")
    return judged_queries(f"jsonl:{saved}", "--queries", options.split, options.limit)
