"""`kgqr eval` and `kgqr eval sweep` end to end: a small knowledge base ingested for real,
judged queries in the generic JSONL format, searches through a real kgqr proxy."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kgqr_core.settings import Settings, get_settings
from kgqr_ops.background_proxy import free_port, running_proxy
from kgqr_ops.cli import main
from plugin.schema import documents_index
from tests.integration.ingest_helpers import TINY_KB, ingested
from tests.integration.recording_llm import recording_llm
from tests.integration.search_helpers import explained_search

# In the edit-test loop (scripts/test-quick.sh): it needs only the always-on services.
pytestmark = pytest.mark.quick

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
KB = "eval-movies"
JUDGED = FIXTURES / "movie_judgments.jsonl"  # three queries, also used by quickstart.sh
QUERIES = len(JUDGED.read_text().splitlines())


@pytest.fixture(scope="module")
def judged(settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any,
           ingest_worker: Any) -> Iterator[Path]:  # fmt: skip
    with ingested(settings, opensearch, neo4j_driver, redis_client, TINY_KB, KB):
        yield JUDGED


@pytest.fixture(scope="module")
def proxy(settings: Settings) -> Iterator[str]:
    with running_proxy(settings.replaced({"rewrite_cache_ttl_s": 0})) as url:
        yield url


def _eval(*args: str) -> Any:
    result = CliRunner().invoke(main, ["eval", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_eval_scores_two_strategies_and_a_rerun_costs_no_llm_time(
    judged: Path, proxy: str, llm_settings: Settings, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    result = _eval(f"jsonl:{judged}", "--kb", KB, "--strategies", "base,hyde", "--proxy", proxy,
                   "--out", str(out))  # fmt: skip
    assert "Hit@1" in result.output and "hyde" in result.output
    report = json.loads(out.with_suffix(".json").read_text())
    by_strategy = {s["strategy"]: s for s in report["strategies"]}
    assert set(by_strategy) == {"base", "hyde"}
    base = by_strategy["base"]
    # Each query names its movie plainly: the plain hybrid search finds every one first.
    assert base["metrics"]["Hit@1"] == 1.0
    assert base["metrics"]["MRR"] == 1.0
    assert base["llm_calls"] == 0 and base["fallbacks"] == 0
    assert by_strategy["hyde"]["llm_calls"] == QUERIES
    assert by_strategy["hyde"]["fallbacks"] == 0
    assert report["config"]["settings"]["llm_model"]
    heist = next(
        q for q in report["queries"] if q["query_id"] == "heist" and q["strategy"] == "base"
    )
    assert heist["ranked"][0] == "m1"
    assert heist["stages_ms"]["search"] > 0  # where each query's time went
    csv_lines = out.with_suffix(".csv").read_text().splitlines()
    assert csv_lines[0].startswith("strategy,Hit@1,Hit@5,R@2")
    assert len(csv_lines) == 3
    # hyde against base, query by query, on every metric: the table, the JSON and the CSV.
    assert f"against base, paired over {QUERIES} queries" in result.output
    compared = {c["metric"]: c for c in report["comparisons"]}
    assert set(compared) == set(base["metrics"])
    assert {c["strategy"] for c in report["comparisons"]} == {"hyde"}
    mrr = compared["MRR"]
    hyde_mrr = by_strategy["hyde"]["metrics"]["MRR"]
    assert mrr["difference"] == pytest.approx(hyde_mrr - base["metrics"]["MRR"])
    assert mrr["low"] <= mrr["difference"] <= mrr["high"] and 0 < mrr["p_value"] <= 1
    assert mrr["wins"] + mrr["losses"] <= QUERIES and mrr["verdict"]
    header = csv_lines[0].split(",")
    assert {"MRR diff", "MRR low", "MRR high", "MRR p", "MRR wins", "MRR losses"} <= set(header)

    again = _eval(f"jsonl:{judged}", "--kb", KB, "--strategies", "hyde", "--proxy", proxy,
                  "--out", str(tmp_path / "again"))  # fmt: skip
    [hyde] = json.loads((tmp_path / "again.json").read_text())["strategies"]
    assert hyde["cached_llm_calls"] == hyde["llm_calls"] == QUERIES
    assert f"LLM calls {QUERIES}, of which {QUERIES} answered from the cache" in (again.output)


def test_a_resumed_run_searches_only_what_the_earlier_run_lacks(
    judged: Path, proxy: str, tmp_path: Path
) -> None:
    first = tmp_path / "first"
    _eval(f"jsonl:{judged}", "--kb", KB, "--strategies", "base", "--limit", "2",
          "--proxy", proxy, "--out", str(first))  # fmt: skip
    assert not first.with_suffix(".partial.jsonl").exists()  # removed once the report is out
    earlier = json.loads(first.with_suffix(".json").read_text())["queries"]
    second = tmp_path / "second"
    result = _eval(f"jsonl:{judged}", "--kb", KB, "--strategies", "base", "--proxy", proxy,
                   "--resume", str(first.with_suffix(".json")), "--out", str(second))  # fmt: skip
    assert "2 results reused from earlier runs" in result.output
    report = json.loads(second.with_suffix(".json").read_text())
    assert report["config"]["reused_results"] == 2
    assert len(report["queries"]) == QUERIES
    # The reused two carry the earlier run's own timings; the third was searched now.
    assert report["queries"][:2] == earlier
    assert report["strategies"][0]["metrics"]["MRR"] == 1.0

    # A run whose proxy dies keeps what it has in a checkpoint, and a run resumed from
    # that checkpoint completes.
    stopped = tmp_path / "stopped"
    dead = CliRunner().invoke(main, ["eval", f"jsonl:{judged}", "--kb", KB, "--strategies",
                                     "base", "--proxy", f"http://127.0.0.1:{free_port()}",
                                     "--resume", str(first.with_suffix(".json")),
                                     "--out", str(stopped)])  # fmt: skip
    assert dead.exit_code == 1, dead.output
    assert "evaluation stopped: the kgqr proxy at" in dead.output
    assert "Traceback" not in dead.output
    checkpoint = stopped.with_suffix(".partial.jsonl")
    assert f"results so far are in {checkpoint}" in dead.output
    assert len(checkpoint.read_text().splitlines()) == 1 + 2  # config + the two reused
    _eval(f"jsonl:{judged}", "--kb", KB, "--strategies", "base", "--proxy", proxy,
          "--resume", str(checkpoint), "--out", str(stopped))  # fmt: skip
    assert not checkpoint.exists()
    resumed = json.loads(stopped.with_suffix(".json").read_text())
    assert resumed["config"]["reused_results"] == 2 and len(resumed["queries"]) == QUERIES

    other = CliRunner().invoke(main, ["eval", f"jsonl:{judged}", "--kb", KB, "--strategies",
                                      "base", "--param", "alpha=0.5", "--proxy", proxy,
                                      "--resume", str(first.with_suffix(".json"))])  # fmt: skip
    assert other.exit_code == 2, other.output
    assert "another configuration: params: {} then, {'alpha': 0.5} now" in other.output


@pytest.fixture
def scripted_llm(kgqr_env: Callable[..., None]) -> Iterator[list[str]]:
    """A stand-in LLM for the proxies `kgqr eval` starts itself, under a model name of
    its own (so nothing from an earlier run is in the cache); yields the prompts it saw.
    Each answer numbers its call, so no two draws are the same text."""
    calls = iter(range(1000))

    def script(prompt: str) -> str:
        return json.dumps({"documents": [f"A crime film about bank robbers ({next(calls)})."]})

    with recording_llm(script) as (url, prompts):
        kgqr_env(KGQR_LLM_BASE_URL=url, KGQR_LLM_MODEL=f"scripted-{uuid.uuid4().hex[:8]}")
        yield prompts


def test_samples_ask_the_llm_afresh_for_each_draw_and_report_the_spread(
    judged: Path, scripted_llm: list[str], tmp_path: Path
) -> None:
    """HyDE samples its passage (temperature 0.7): its second draw asks the same prompts
    again instead of reading the first draw's cached answers; base, with no LLM, runs
    once. A re-run of both draws is answered from the cache, each draw from its own."""
    out = tmp_path / "drawn"
    args = [f"jsonl:{judged}", "--kb", KB, "--strategies", "base,hyde", "--samples", "2"]
    result = _eval(*args, "--out", str(out))
    assert len(scripted_llm) == 2 * QUERIES
    assert sorted(scripted_llm[:QUERIES]) == sorted(scripted_llm[QUERIES:])
    report = json.loads(out.with_suffix(".json").read_text())
    runs = [(s["strategy"], s["sample"], s["llm_calls"], s["fallbacks"])
            for s in report["strategies"]]  # fmt: skip
    assert runs == [("base", 0, 0, 0), ("hyde", 0, QUERIES, 0), ("hyde", 1, QUERIES, 0)]
    assert report["config"]["samples"] == 2 and len(report["queries"]) == 3 * QUERIES
    mrr = [s["metrics"]["MRR"] for s in report["strategies"] if s["strategy"] == "hyde"]
    spread = report["sample_spread"]
    assert list(spread) == ["hyde"]
    assert spread["hyde"]["MRR"] == {"mean": sum(mrr) / 2, "min": min(mrr), "max": max(mrr)}
    assert "hyde #2" in result.output and "hyde over 2 draws, mean (min-max): " in result.output
    assert [line.split(",")[0] for line in out.with_suffix(".csv").read_text().splitlines()] == [
        "strategy", "base", "hyde", "hyde #2",
    ]  # fmt: skip

    again = _eval(*args, "--out", str(tmp_path / "again"))
    assert len(scripted_llm) == 2 * QUERIES
    rerun = json.loads((tmp_path / "again.json").read_text())
    assert [(s["sample"], s["cached_llm_calls"]) for s in rerun["strategies"][1:]] == [
        (0, QUERIES), (1, QUERIES),
    ]  # fmt: skip
    assert [q["ranked"] for q in rerun["queries"]] == [q["ranked"] for q in report["queries"]]
    assert f"LLM calls {2 * QUERIES}, of which {2 * QUERIES} answered" in again.output


def test_a_proxy_on_another_draw_never_serves_a_rewrite_cached_from_the_first(
    judged: Path, scripted_llm: list[str]
) -> None:
    cached = get_settings().replaced({"rewrite_cache_ttl_s": 600})
    index = documents_index(KB)
    for sample, prompts in ((0, 1), (0, 1), (1, 2)):
        with running_proxy(cached.replaced({"llm_sample": sample})) as url:
            response = explained_search(url, index, "hyde", "a heist with bank robbers")
        assert response.status_code == 200, response.text[:300]
        assert len(scripted_llm) == prompts, f"sample {sample}"


def test_sweep_writes_a_plot_per_parameter(judged: Path, proxy: str, tmp_path: Path) -> None:
    result = _eval("sweep", "--dataset", f"{KB}=jsonl:{judged}", "--strategy", "prf",
                   "--grid", "alpha=0.3,1.0", "--grid", "prf_docs=1,3", "--proxy", proxy,
                   "--out", str(tmp_path))  # fmt: skip
    for param in ("alpha", "prf_docs"):
        png = (tmp_path / f"{param}.png").read_bytes()
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
    points = json.loads((tmp_path / "sweep.json").read_text())["points"]
    assert [(p["param"], p["value"]) for p in points] == [
        ("alpha", 0.3), ("alpha", 1.0), ("prf_docs", 1.0), ("prf_docs", 3.0),
    ]  # fmt: skip
    assert all(p["dataset"] == KB and 0 < p["metrics"]["MRR"] <= 1 for p in points)
    assert "R@5" in result.output
    # Each point against base, and the setting chosen on training folds scored on the rest.
    for point in points:
        assert {c["metric"] for c in point["against_baseline"]} == {"R@5", "MRR"}
    validated = json.loads((tmp_path / "sweep.json").read_text())["cross_validated"][KB]
    assert validated["folds"] == QUERIES  # five asked, as many as there are queries
    assert sum(validated["chosen"].values()) == QUERIES
    assert set(validated["chosen"]) <= {"configured", "alpha=0.3", "alpha=1", "prf_docs=1",
                                        "prf_docs=3"}  # fmt: skip
    assert 0 < validated["held_out"]["MRR"] <= 1
    assert f"{KB}: cross-validated over {QUERIES} folds, chosen on R@5" in result.output


def test_a_stopped_sweep_goes_on_from_the_points_it_finished(
    settings: Settings, judged: Path, proxy: str, tmp_path: Path
) -> None:
    """Points were kept in memory: a Ctrl-C or a failed search at point N lost every point
    before it, of the tool's longest job."""
    from workbench.evaluation.cli import run_config
    from workbench.evaluation.query_sets import load_query_set
    from workbench.evaluation.sweep import Dataset, PointCheckpoints, run_sweep

    spec = f"jsonl:{judged}"
    dataset = Dataset(KB, KB, load_query_set(spec), query_set=spec)
    grid = {"rewrite.alpha": [0.3, 1.0]}

    def sweep(checkpoints: PointCheckpoints, on_point: Any) -> Any:
        return asyncio.run(run_sweep(proxy, [dataset], "prf", grid, {}, baseline="base",
                                     size=20, concurrency=1, on_point=on_point,
                                     checkpoints=checkpoints))  # fmt: skip

    class Stopped(Exception):
        pass

    def stop(point: Any) -> None:
        raise Stopped(point.setting)

    identity = run_config(settings, split=None, limit=None)
    first = PointCheckpoints(tmp_path / "points", identity)
    with pytest.raises(Stopped, match=r"rewrite\.alpha=0\.3"):
        sweep(first, stop)
    kept = sorted((tmp_path / "points").iterdir())
    assert len(kept) == 2  # the configured strategy and base, then the first point
    again = PointCheckpoints(tmp_path / "points", identity)
    swept = sweep(again, None)
    assert again.reused == 3 * QUERIES  # prf and base as configured, prf at alpha 0.3
    assert [point.setting for point in swept.points] == ["rewrite.alpha=0.3", "rewrite.alpha=1"]
    # Another configuration's checkpoints are searched afresh, not mixed in.
    shaped = {**identity["settings"], "rewrite_knn_k": identity["settings"]["rewrite_knn_k"] + 1}
    other = PointCheckpoints(tmp_path / "points", {**identity, "settings": shaped})
    sweep(other, None)
    assert other.reused == 0


def test_bad_query_sets_and_parameters_are_usage_errors(judged: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    bad_param = runner.invoke(main, ["eval", f"jsonl:{judged}", "--kb", KB, "--param", "beta=1"])
    assert bad_param.exit_code == 2 and "beta=1" in bad_param.output
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"query": "ok"}\n{oops\n')
    bad_file = runner.invoke(main, ["eval", f"jsonl:{broken}", "--kb", KB])
    assert bad_file.exit_code == 2 and "broken.jsonl:2: not JSON" in bad_file.output
    bad_strategy = runner.invoke(main, ["eval", f"jsonl:{judged}", "--kb", KB,
                                        "--strategies", "base,magic"])  # fmt: skip
    assert bad_strategy.exit_code == 2 and "magic" in bad_strategy.output
    unrun = runner.invoke(main, ["eval", f"jsonl:{judged}", "--kb", KB, "--strategies",
                                 "base,graph", "--baseline", "hyde"])  # fmt: skip
    assert unrun.exit_code == 2 and "not among --strategies" in unrun.output
    no_llm = runner.invoke(main, ["eval", f"jsonl:{judged}", "--kb", KB, "--strategies",
                                  "base,graph", "--samples", "3"])  # fmt: skip
    assert no_llm.exit_code == 2 and "every draw would be the same" in no_llm.output
    elsewhere = runner.invoke(main, ["eval", f"jsonl:{judged}", "--kb", KB, "--strategies",
                                     "hyde", "--samples", "2", "--proxy", "http://x"])  # fmt: skip
    assert elsewhere.exit_code == 2 and "leave out --proxy" in elsewhere.output


def test_a_knowledge_base_never_ingested_is_a_clear_error(judged: Path, proxy: str) -> None:
    result = CliRunner().invoke(main, ["eval", f"jsonl:{judged}", "--kb", "never-ingested",
                                       "--strategies", "base", "--proxy", proxy])  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "no index 'kgqr-never-ingested-documents'" in result.output
    assert "kgqr ingest" in result.output and "Traceback" not in result.output


def test_a_run_that_reads_the_graph_starts_once_the_proxy_reads_its_copy(
    judged: Path, settings: Settings, tmp_path: Path
) -> None:
    """A fresh proxy expands in Neo4j until its graph copy is loaded; the run waits for the
    copy (else its first searches would read Neo4j's hub cap, the rest the copy's) and
    says where its graph reads went. A run that reads no graph does not wait."""
    with running_proxy(settings.replaced({"rewrite_cache_ttl_s": 0})) as fresh:
        _eval(f"jsonl:{judged}", "--kb", KB, "--strategies", "base,graph", "--proxy", fresh,
              "--out", str(tmp_path / "graph"))  # fmt: skip
    config = json.loads((tmp_path / "graph.json").read_text())["config"]
    assert config["graph_source"].startswith("snapshot v")
    _eval(f"jsonl:{judged}", "--kb", KB, "--strategies", "base", "--out", str(tmp_path / "plain"))
    assert "graph_source" not in json.loads((tmp_path / "plain.json").read_text())["config"]
