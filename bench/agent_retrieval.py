"""The agent retriever on generated semi-structured KBs, end to end through the CLI.

Per schema (catalog: 20k documents / 106k relations; library: 8k / 47k): generate and
ingest the KB if it is missing, synthesize relational questions (train/val/test), then on
the test split, each through `kgqr eval run` in one session:
- `base` (hybrid search), and `kar` with the local LLM on a subset of --kar-limit test
  questions taken evenly from each category (every agent row is re-scored on the same
  subset from its own full run);
- `agent` un-optimised (the stored plan is the start: search the question's text);
- `agent` optimised by the LLM alone (`--no-paths`);
- `agent` optimised by the LLM shown the graph paths of missed questions (AvaTaR-style
  feedback only: `--paths --no-path-candidates`);
- `agent` optimised by the LLM with graph-path feedback and path candidates (`--paths`).
Prints Hit@1, Hit@5, R@20, MRR and p50 per row, and each row's difference from `base`;
everything (reports, stored plans, questions) lands in --out.

    python -m bench.agent_retrieval --schemas catalog,library --rounds 4 --kar-limit 30
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from bench.bench_common import machine, save

CACHE = Path(os.environ.get("KGQR_HOME", Path.home() / ".cache" / "kgqr")) / "generated"


def kgqr(*args: str, capture: bool = False) -> str:
    print("$ kgqr", " ".join(args), flush=True)
    done = subprocess.run(
        ["kgqr", *args], check=True, text=True, stdout=subprocess.PIPE if capture else None
    )
    return done.stdout or ""


def kb_exists(kb: str) -> bool:
    from kgqr_core import connections
    from kgqr_core.settings import get_settings
    from plugin import kb_meta

    return kb_meta.load(connections.opensearch_client(get_settings()), kb) is not None


def ensure_kb(schema: str, kb: str, rebuild: bool) -> None:
    folder = CACHE / schema
    if rebuild or not (folder / "documents.jsonl").is_file():
        kgqr("ingest", "generate", schema, str(folder))
    if rebuild or not kb_exists(kb):
        kgqr("ingest", "drop", "--kb", kb, "--yes")
        kgqr("ingest", f"jsonl:{folder}", "--kb", kb)


def restore_plans(kb: str, saved: Path) -> None:
    """Store a variant's plans (as `kgqr agent show` printed them) back into the KB's meta."""
    from kgqr_core import connections
    from kgqr_core.settings import get_settings
    from plugin import kb_meta

    client = connections.opensearch_client(get_settings())
    meta = kb_meta.load(client, kb)
    assert meta is not None
    kb_meta.record(client, meta.kb, {"agent_plans": saved.read_text()})


def evaluate(
    queries: Path, kb: str, strategies: str, out: Path, *extra: str
) -> list[dict[str, Any]]:
    kgqr("eval", "run", f"jsonl:{queries}", "--kb", kb, "--strategies", strategies,
         "--out", str(out), *extra)  # fmt: skip
    return list(json.loads(out.with_suffix(".json").read_text())["strategies"])


def row(name: str, report: dict[str, Any]) -> dict[str, Any]:
    metrics = report["metrics"]
    return {
        "row": name,
        "queries": report["queries"],
        "Hit@1": round(100 * metrics["Hit@1"], 1),
        "Hit@5": round(100 * metrics["Hit@5"], 1),
        "R@20": round(100 * metrics["R@20"], 1),
        "MRR": round(100 * metrics["MRR"], 1),
        "p50_ms": round(report["latency"]["p50_ms"], 1),
        "fallbacks": report["fallbacks"],
        "llm_calls": report["llm_calls"],
    }


VARIANTS = (
    ("agent un-optimised", ["--rounds", "0", "--no-paths"]),
    ("agent optimised (LLM)", ["--no-paths"]),
    ("agent optimised (LLM, shown graph paths)", ["--paths", "--no-path-candidates"]),
    ("agent optimised (LLM + graph paths)", ["--paths"]),
)


def stem_of(name: str) -> str:
    return name.replace(" ", "-").replace(",", "").replace("(", "").replace(")", "").replace(
        "+", "plus")  # fmt: skip


def even_subset(test: Path, size: int, out: Path) -> set[str]:
    """`size` questions of `test`, the same number from each category, written to `out`."""
    rows = [json.loads(line) for line in test.read_text().splitlines() if line.strip()]
    categories = sorted({row["category"] for row in rows})
    share = max(size // len(categories), 1)
    chosen = [r for c in categories for r in [r for r in rows if r["category"] == c][:share]]
    out.write_text("".join(json.dumps(row) + "\n" for row in chosen))
    return {row["id"] for row in chosen}


def subset_row(name: str, report: Path, ids: set[str]) -> dict[str, Any]:
    """A row from a full run's per-question results, on the subset only."""
    results = [q for q in json.loads(report.read_text())["queries"] if q["query_id"] in ids]
    mean = {k: sum(q["scores"][k] for q in results) / len(results)
            for k in ("Hit@1", "Hit@5", "R@20", "MRR")}  # fmt: skip
    seconds = sorted(q["seconds"] for q in results)
    summary = {
        "queries": len(results),
        "metrics": mean,
        "fallbacks": sum(q["fallback"] is not None for q in results),
        "llm_calls": sum(q["llm_calls"] for q in results),
        "latency": {"p50_ms": 1000 * seconds[len(seconds) // 2]},
    }
    return row(name, summary)


def paraphrased_rows(kb: str, test: Path, out: Path) -> list[dict[str, Any]]:
    """base and the stored agent plans on the test questions as the LLM re-phrased them
    (where a paraphrase kept the anchor's name and numbers): plans fitted to template
    questions, asked in other words."""
    from kgqr_core import connections
    from kgqr_core.llm import LlmClient
    from kgqr_core.settings import get_settings
    from plugin.schema import documents_index
    from workbench.questions.phrasing import phrase
    from workbench.questions.synthesis import SynthesizedQuery

    settings = get_settings()
    rows = [json.loads(line) for line in test.read_text().splitlines() if line.strip()]
    questions = [SynthesizedQuery(r["id"], r["query"], r["relevant"], r["category"],
                                  r["anchor"], r["split"]) for r in rows]  # fmt: skip
    client = connections.opensearch_client(settings)

    found = client.mget(
        index=documents_index(kb), body={"ids": sorted({q.anchor for q in questions})}
    )
    names = {doc["_id"]: doc["_source"]["title"] for doc in found["docs"] if doc.get("found")}
    llm = LlmClient(settings, redis=connections.redis_client(settings))  # the same paraphrases
    phrased, kept = phrase(questions, names, llm)
    out.write_text("".join(json.dumps(q.as_json()) + "\n" for q in phrased))
    print(f"{kept} of {len(phrased)} test questions re-phrased", flush=True)
    reports = evaluate(out, kb, "base,agent", out.with_name(f"{kb}-{out.stem}"))
    return [row(f"{r['strategy']} ({out.stem}, {kept} re-phrased)", r) for r in reports]


def run_schema(schema: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    kb = schema
    ensure_kb(schema, kb, args.rebuild)
    questions = out / f"{schema}-queries"
    kgqr("queries", "synthesize", "--kb", kb, "--out", str(questions), "--seed", "0")
    test, train = questions / "test.jsonl", questions / "train.jsonl"
    rows = [row("base", evaluate(test, kb, "base", out / f"{schema}-base")[0])]
    optimise_s = {}
    for name, flags in VARIANTS:
        if args.variants and name not in args.variants.split(";"):
            continue
        stem = stem_of(name)
        saved = out / f"{schema}-{stem}-plans.json"
        if args.reuse_plans and saved.is_file():
            restore_plans(kb, saved)
        else:
            started = time.perf_counter()
            kgqr("agent", "optimize", "--kb", kb, "--queries", str(train), "--rounds",
                 str(args.rounds), *flags)  # fmt: skip
            optimise_s[name] = round(time.perf_counter() - started)
            saved.write_text(kgqr("agent", "show", "--kb", kb, capture=True))
        rows.append(row(name, evaluate(test, kb, "agent", out / f"{schema}-{stem}")[0]))
    # kar costs an LLM call per question: its own run on an even subset, the other rows
    # re-scored on exactly those questions from their full runs.
    if args.kar_limit:
        subset = out / f"{schema}-queries" / "test-kar-subset.jsonl"
        ids = even_subset(test, args.kar_limit, subset)
        small = evaluate(subset, kb, "base,kar", out / f"{schema}-kar")
        rows += [row(f"{r['strategy']} (subset of {len(ids)})", r) for r in small]
        for name, _ in VARIANTS:
            report = out / f"{schema}-{stem_of(name)}.json"
            if report.is_file():
                rows.append(subset_row(f"{name} (subset of {len(ids)})", report, ids))
    if args.paraphrased:
        split = args.paraphrase_split
        rows += paraphrased_rows(
            kb, questions / f"{split}.jsonl", questions / f"{split}-paraphrased.jsonl"
        )
    return {"kb": kb, "rows": rows, "optimise_s": optimise_s,
            "questions": json.loads((questions / "synthesis.json").read_text())}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schemas", default="catalog,library")
    parser.add_argument("--rounds", type=int, default=4, help="LLM revisions per category")
    parser.add_argument("--kar-limit", type=int, default=30, help="0: no kar run")
    parser.add_argument("--rebuild", action="store_true", help="Generate and ingest afresh.")
    parser.add_argument("--variants", default="", help="Only these agent rows (';'-separated)")
    parser.add_argument(
        "--reuse-plans", action="store_true", help="Evaluate plans an earlier run saved in --out"
    )
    parser.add_argument(
        "--paraphrased",
        action="store_true",
        help="Also: base and the last stored plans on LLM-paraphrased test questions",
    )
    parser.add_argument("--paraphrase-split", default="test", help="train, val or test")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path("bench/results") / f"agent-{time.strftime('%Y%m%dT%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {"machine": machine(), "rounds": args.rounds, "schemas": {}}
    for schema in args.schemas.split(","):
        figures["schemas"][schema] = run_schema(schema, args, out)
    for schema, result in figures["schemas"].items():
        base = result["rows"][0]
        print(f"\n{schema}: {result['questions']['count']} questions, test split")
        print(f"{'row':44} {'Hit@1':>6} {'Δ':>6} {'Hit@5':>6} {'R@20':>6} {'MRR':>6} {'p50 ms':>7}")
        for r in result["rows"]:
            gain = r["Hit@1"] - base["Hit@1"]
            print(f"{r['row']:44} {r['Hit@1']:6.1f} {gain:+6.1f} {r['Hit@5']:6.1f} "
                  f"{r['R@20']:6.1f} {r['MRR']:6.1f} {r['p50_ms']:7.1f}")  # fmt: skip
    print(f"\nsaved {save('agent_retrieval', {**figures, 'out': str(out)})}")


if __name__ == "__main__":
    main()
