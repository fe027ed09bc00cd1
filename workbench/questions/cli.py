"""`kgqr queries`: judged query sets made from a knowledge base itself."""

from __future__ import annotations

import json
from pathlib import Path

import click

from kgqr_core.settings import get_settings
from kgqr_ops.cli_options import kb_option


@click.group("queries")
def queries() -> None:
    """Judged query sets: `synthesize` builds relational questions for a KB."""


@queries.command("synthesize")
@kb_option("Knowledge base to ask about.")
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for train.jsonl, val.jsonl, test.jsonl and synthesis.json.",
)
@click.option("--count", type=click.IntRange(min=1), default=320, show_default=True,
              help="Questions to make (about).")  # fmt: skip
@click.option("--shapes", "n_shapes", type=click.IntRange(min=1), default=4, show_default=True,
              help="Question shapes (relation + condition kinds) to spread them over.")  # fmt: skip
@click.option("--seed", default=0, show_default=True, help="Same KB and seed: same questions.")
@click.option("--llm-phrasing", is_flag=True,
              help="Have the LLM re-phrase each question (kept only when it keeps the names "
              "and numbers; one LLM call a question, seconds each on a CPU).")  # fmt: skip
def synthesize_command(
    kb: str, out: Path, count: int, n_shapes: int, seed: int, llm_phrasing: bool
) -> None:
    """Write STaRK-style relational questions about KB with their exact answers.

    Shapes come from the KB's structure and real edges ("Which products are made by
    BRAND with price below 40?", two hops, a categorical value, a word of the text); each
    answer set is computed on the whole KB and kept when it holds 1-20 documents. Output
    is JSONL judgments that `kgqr eval run jsonl:OUT/test.jsonl` and `kgqr agent
    optimize` read, split per shape 40/20/40 into train/val/test."""
    from tqdm import tqdm

    from kgqr_core import connections
    from plugin import kb_meta
    from workbench.questions.kb_snapshot import load_snapshot
    from workbench.questions.synthesis import synthesize

    settings = get_settings()
    opensearch = connections.opensearch_client(settings)
    meta = kb_meta.load(opensearch, kb)
    if meta is None:
        raise click.ClickException(f"no knowledge base {kb!r}: ingest it first")
    click.echo(f"reading {kb} ...")
    with connections.neo4j_driver(settings) as neo4j:
        snapshot = load_snapshot(opensearch, neo4j, kb, meta.structure.relations)
    click.echo(f"{len(snapshot.documents)} documents, {len(snapshot.edges)} edges")
    with tqdm(total=count, desc="questions", unit="q") as bar:
        chosen, made = synthesize(
            snapshot, meta.structure.types, count, n_shapes, seed, progress=bar.update
        )
    if not made:
        raise click.ClickException(f"{kb}: no relation gives small answer sets to ask about")
    if llm_phrasing:
        from kgqr_core.llm import LlmClient
        from workbench.questions.phrasing import phrase

        with tqdm(total=len(made), desc="phrasing", unit="q") as bar:
            names = {q.anchor: snapshot.documents[q.anchor].title for q in made}
            # LLM answers cached in Redis: the same KB and seed give the same paraphrases.
            llm = LlmClient(settings, redis=connections.redis_client(settings))
            made, kept = phrase(made, names, llm, progress=bar.update)
        click.echo(f"{kept} of {len(made)} questions re-phrased by the LLM, the rest kept")
    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "val", "test"):
        rows = [q.as_json() for q in made if q.split == split]
        with (out / f"{split}.jsonl").open("w", encoding="utf-8") as stream:
            stream.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        click.echo(f"{out / f'{split}.jsonl'}: {len(rows)} questions")
    per_shape = {s.name: sum(q.category == s.name for q in made) for s in chosen}
    summary = {"kb": kb, "seed": seed, "count": len(made), "shapes": per_shape}
    (out / "synthesis.json").write_text(json.dumps(summary, indent=1) + "\n")
    for name, n in per_shape.items():
        click.echo(f"  {name}: {n}")
