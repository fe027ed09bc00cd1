"""`kgqr agent`: optimise the agent strategy's plan templates for a knowledge base."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import click

from kgqr_core.settings import get_settings
from kgqr_core.text_files import TEXT_ENCODING
from kgqr_ops.cli_options import judged_queries, kb_option, known_kb
from workbench.evaluation.query_sets import JudgedQuery


@click.group("agent")
def agent() -> None:
    """The agent strategy: `optimize` writes a KB's plan templates, `show` prints them,
    `clear` removes them."""


@agent.command("optimize")
@kb_option("Knowledge base the plans run on.")
@click.option(
    "--queries",
    "train_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Training questions (JSONL judgments; a `category` field groups them).",
)
@click.option(
    "--val",
    "val_path",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Validation questions (default: val.jsonl beside --queries).",
)
@click.option("--rounds", type=click.IntRange(min=0), default=4, show_default=True,
              help="LLM revisions per category (0: store the un-optimised plan).")  # fmt: skip
@click.option("--batch", type=click.IntRange(min=1), default=20, show_default=True,
              help="Training questions each candidate plan is scored on.")  # fmt: skip
@click.option("--paths/--no-paths", default=True, show_default=True,
              help="Show the LLM how missed questions reach their answers over the graph, "
              "and score the common paths as candidate plans beside its proposals.")  # fmt: skip
@click.option("--path-candidates/--no-path-candidates", default=True, show_default=True,
              help="With --paths: also score the common paths as plans (else they are only "
              "shown to the LLM).")  # fmt: skip
def optimize(
    kb: str, train_path: Path, val_path: Path | None, rounds: int, batch: int, paths: bool,
    path_candidates: bool,
) -> None:  # fmt: skip
    """Optimise one plan template per question category with the LLM (STaRK's loop with
    AvaTaR's feedback: scores, questions answered and missed), keep the better of the
    start and the best revision on the validation questions, and store them, versioned,
    in the KB's meta. The `agent` strategy uses them from the next minute on."""
    import asyncio

    from kgqr_core import connections
    from plugin import kb_meta
    from query_rewriter.strategies.agent.plan_book import PlanBook, book_of
    from workbench.agent_plans.optimizer import CategoryOptimizer
    from workbench.agent_plans.session import PlanSession
    from workbench.questions.kb_snapshot import relation_signatures

    val_path = val_path or train_path.with_name("val.jsonl")
    if not val_path.is_file():
        raise click.BadParameter(f"{val_path} does not exist", param_hint="--val")
    train, val = (  # read before anything connects: a bad line is the user's to fix first
        _by_category(path, judged_queries(f"jsonl:{path}", hint))
        for path, hint in ((train_path, "--queries"), (val_path, "--val"))
    )
    settings = get_settings()
    opensearch = connections.opensearch_client(settings)
    meta = known_kb(opensearch, kb)
    with connections.neo4j_driver(settings) as neo4j:
        signatures = relation_signatures(neo4j, kb, meta.structure.relations)
    relations = "\n".join(f"- {s} -{r}-> {t} ({n} edges)" for s, r, t, n in signatures)

    previous = book_of(meta)
    book = PlanBook(version=(previous.version + 1) if previous else 1,
                    llm_model=settings.llm.model)  # fmt: skip

    def store(finished: bool) -> None:
        """The book so far, stored as each category ends (a failed LLM call, or Ctrl-C,
        lost every category finished before it): until the last, with the earlier book's
        plans of the categories still to come, so the agent keeps serving them."""
        kept = [] if finished or previous is None else [
            entry for entry in previous.entries
            if entry.category not in {done.category for done in book.entries}
        ]  # fmt: skip
        stored = book.model_copy(update={"entries": [*book.entries, *kept]})
        kb_meta.record(opensearch, kb, {"agent_plans": stored.model_dump_json()})

    async def run_all() -> None:
        async with PlanSession.open(settings, kb, meta) as session:
            for category, questions in sorted(train.items()):
                if not val.get(category):
                    click.echo(f"{category}: no validation questions, skipped")
                    continue
                optimizer = CategoryOptimizer(
                    meta.structure, relations, session.run, session.propose, session.describe,
                    rounds=rounds, batch=batch, evidence=session.evidence if paths else None,
                    path_candidates=path_candidates, say=click.echo,
                )  # fmt: skip
                click.echo(f"{category}: {len(questions)} training questions, {rounds} rounds")
                try:
                    entry = await optimizer.optimize(category, questions, val[category])
                except Exception as exc:  # the LLM or a store failed: what finished stays
                    kept = (f"the {len(book.entries)} categories finished before it are "
                            f"stored as plans version {book.version}") if book.entries else (
                            "nothing was stored")  # fmt: skip
                    raise click.ClickException(
                        f"{category}: stopped ({type(exc).__name__}: {str(exc)[:300]}); {kept}"
                    ) from exc
                book.entries.append(entry)
                store(finished=False)
                val_score, start = entry.scores["val"], entry.scores["val_start"]
                click.echo(f"  kept: {json.dumps(entry.template)}")
                click.echo(
                    f"  val Hit@1 {val_score['hit1']} (start {start['hit1']}), "
                    f"Recall@20 {val_score['recall20']} (start {start['recall20']})"
                )

    asyncio.run(run_all())
    store(finished=True)
    click.echo(f"{kb}: plans version {book.version} stored ({len(book.entries)} categories)")


@agent.command("show")
@kb_option("Knowledge base whose plans to print.")
def show(kb: str) -> None:
    """Print the KB's stored plan templates with their scores and history, as JSON."""
    from kgqr_core import connections
    from query_rewriter.strategies.agent.plan_book import book_of

    book = book_of(known_kb(connections.opensearch_client(get_settings()), kb))
    if book is None:
        raise click.ClickException(f"{kb}: no plans (run `kgqr agent optimize`)")
    click.echo(book.model_dump_json(indent=1))


@agent.command("clear")
@kb_option("Knowledge base whose plans to remove.")
def clear(kb: str) -> None:
    """Remove the KB's stored plan templates: the `agent` strategy answers with `base`
    (and says so in its explain) until `optimize` stores new ones."""
    from kgqr_core import connections
    from plugin import kb_meta

    client = connections.opensearch_client(get_settings())
    known_kb(client, kb)
    if kb_meta.clear_agent_plans(client, kb):
        click.echo(f"{kb}: plans removed")
    else:
        click.echo(f"{kb}: no plans stored")


def _by_category(path: Path, judged: list[JudgedQuery]) -> dict[str, list[JudgedQuery]]:
    """The questions grouped by the `category` of their JSONL line ("all" without one)."""
    categories = {}
    for number, line in enumerate(path.read_text(encoding=TEXT_ENCODING).splitlines(), start=1):
        if line.strip():
            record = json.loads(line)
            categories[str(record.get("id", number))] = str(record.get("category", "all"))
    grouped: dict[str, list[JudgedQuery]] = defaultdict(list)
    for query in judged:
        grouped[categories.get(query.id, "all")].append(query)
    return dict(grouped)
