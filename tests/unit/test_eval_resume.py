"""Checkpoints and resumed evaluations: which earlier results are reused, and which not."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from kgqr_core.settings import Settings
from workbench.evaluation.cli import run_config
from workbench.evaluation.query_sets import JudgedQuery
from workbench.evaluation.report import output_path
from workbench.evaluation.resume import (
    Checkpoint,
    ResumeError,
    load_earlier_run,
    reusable_results,
)
from workbench.evaluation.runner import QueryResult

CONFIG: dict[str, Any] = {
    "kb": "movies",
    "query_set": "jsonl:judged.jsonl",
    "split": None,
    "params": {"alpha": 0.5},
    "size": 20,
    "limit": 2,
    "settings": {"rewrite_alpha": 0.7, "rewrite_timeout_s": 90.0, "kar_hops": 2},
}
QUERIES = [JudgedQuery("q1", "heist film", {"m1": 1.0}), JudgedQuery("q2", "space", {"m2": 1.0})]


def _result(query_id: str, strategy: str = "hyde", ranked: tuple[str, ...] = ("m9", "m1"),
            fallback: str | None = None) -> QueryResult:  # fmt: skip
    # Scores deliberately wrong: a reused result is rescored from its ranking.
    return QueryResult(query_id, strategy, list(ranked), 41.5, {"MRR": 0.0}, fallback, 2, 0)


def _checkpoint(tmp_path: Path, results: list[QueryResult], config: dict[str, Any] = CONFIG,
                finished: bool = False) -> Path:  # fmt: skip
    checkpoint = Checkpoint(tmp_path / "run", config)
    for result in results:
        checkpoint.add(result)
    path = checkpoint.path
    checkpoint.close(finished=finished)
    return path


def test_a_stopped_runs_checkpoint_is_reused_and_rescored(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path, [_result("q1"), _result("q2", "base")])
    assert path.name == "run.partial.jsonl" and path.exists()
    reused = reusable_results([load_earlier_run(path)], CONFIG, QUERIES, ["hyde"])
    assert list(reused) == [("hyde", 0, "q1")]  # base was not asked for this time
    q1 = reused[("hyde", 0, "q1")]
    assert q1.scores["MRR"] == 0.5 and q1.scores["Hit@1"] == 0.0
    assert q1.seconds == 41.5 and q1.llm_calls == 2


def test_a_torn_last_line_is_skipped_but_a_torn_middle_is_an_error(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path, [_result("q1"), _result("q2")])
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:20])
    assert len(load_earlier_run(path).results) == 1
    path.write_text("\n".join([lines[0], lines[1][:20], lines[2]]) + "\n")
    with pytest.raises(ResumeError, match=r"run.partial.jsonl:2: not JSON"):
        load_earlier_run(path)


def test_a_finished_checkpoint_is_removed_and_its_report_reused(tmp_path: Path) -> None:
    assert not _checkpoint(tmp_path, [_result("q1")], finished=True).exists()
    report = tmp_path / "run.json"
    report.write_text(json.dumps({"config": CONFIG, "queries": [asdict(_result("q2"))]}))
    reused = reusable_results([load_earlier_run(report)], CONFIG, QUERIES, ["hyde"])
    assert reused[("hyde", 0, "q2")].scores["R@2"] == 0.0


def test_a_run_stopped_before_any_result_leaves_no_checkpoint(tmp_path: Path) -> None:
    checkpoint = Checkpoint(tmp_path / "run", CONFIG)
    assert checkpoint.close(finished=False) is False
    assert not checkpoint.path.exists()


def test_results_that_fell_back_are_searched_again(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path, [_result("q1", fallback="llm: timed out"), _result("q2")])
    reused = reusable_results([load_earlier_run(path)], CONFIG, QUERIES, ["hyde"])
    assert list(reused) == [("hyde", 0, "q2")]


def test_a_later_file_wins(tmp_path: Path) -> None:
    first = _checkpoint(tmp_path / "a", [_result("q1", ranked=("m9", "m1"))])
    second = _checkpoint(tmp_path / "b", [_result("q1", ranked=("m1",))])
    runs = [load_earlier_run(first), load_earlier_run(second)]
    assert reusable_results(runs, CONFIG, QUERIES, ["hyde"])[("hyde", 0, "q1")].ranked == ["m1"]


def test_a_result_is_reused_for_its_own_draw_of_the_llms_answers(tmp_path: Path) -> None:
    """A report from before samples existed holds no sample: its results are the first
    draw's. A second draw's result never stands in for the first's."""
    second_draw = asdict(_result("q1"))
    second_draw["sample"] = 1
    before_samples = {key: value for key, value in asdict(_result("q2")).items() if key != "sample"}
    report = tmp_path / "run.json"
    report.write_text(json.dumps({"config": CONFIG, "queries": [second_draw, before_samples]}))
    reused = reusable_results([load_earlier_run(report)], CONFIG, QUERIES, ["hyde"])
    assert sorted(reused) == [("hyde", 0, "q2"), ("hyde", 1, "q1")]


def test_time_budgets_and_limits_may_differ_but_rankings_settings_may_not(
    tmp_path: Path,
) -> None:
    path = _checkpoint(tmp_path, [_result("q1")])
    run = [load_earlier_run(path)]
    # A time budget is not among the settings a run records now; an earlier run that
    # recorded it is compared on the rest.
    assert (
        "rewrite_timeout_s" not in run_config(Settings.of({"rewrite_timeout_s": 400}))["settings"]
    )
    recorded_now = {k: v for k, v in CONFIG["settings"].items() if k != "rewrite_timeout_s"}
    budget = {**CONFIG, "limit": 50, "settings": recorded_now}
    assert reusable_results(run, budget, QUERIES, ["hyde"])
    alpha = {**CONFIG, "settings": {**CONFIG["settings"], "rewrite_alpha": 1.0}}
    with pytest.raises(ResumeError, match=r"setting rewrite_alpha: 0.7 then, 1.0 now"):
        reusable_results(run, alpha, QUERIES, ["hyde"])
    other_kb = {**CONFIG, "kb": "music", "params": {}}
    with pytest.raises(ResumeError, match=r"kb: 'movies' then, 'music' now; params"):
        reusable_results(run, other_kb, QUERIES, ["hyde"])


@pytest.mark.parametrize(
    ("content", "message"),
    [("[1, 2]", "not a `kgqr eval` JSON report"), ("{oops", "not a `kgqr eval` JSON report")],
)
def test_a_file_that_is_no_report_is_refused(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "other.json"
    path.write_text(content)
    with pytest.raises(ResumeError, match=message):
        load_earlier_run(path)


def test_a_jsonl_without_a_config_line_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "judged.jsonl"
    path.write_text('{"query": "heist film", "relevant": ["m1"]}\n')
    with pytest.raises(ResumeError, match="no config line"):
        load_earlier_run(path)


def test_a_report_made_before_the_settings_had_sections_is_still_comparable() -> None:
    """Reports record settings by their flat names, as they did when the settings were one
    flat class: a report of that time (bench/results/page-depth/), its settings read back
    by those names, records the same block, so `--resume` can reuse it."""
    from workbench.evaluation.resume import config_differences

    report = Path(__file__).resolve().parents[2] / "bench/results/page-depth"
    earlier = json.loads((report / "eval-musique-dev50-base-graph.json").read_text())["config"]
    now = run_config(Settings.of(earlier["settings"]), queries=50)
    # Settings added since (a later strategy's) are not the report's to compare.
    read_back = {name: now["settings"][name] for name in earlier["settings"]}
    assert read_back == earlier["settings"]
    assert config_differences(earlier, {**earlier, "settings": read_back}) == []


def test_runs_whose_stems_differ_after_a_dot_keep_their_own_files(tmp_path: Path) -> None:
    """`--out kar-alpha0.3` and `--out kar-alpha0.5` both wrote kar-alpha0.json (and the
    same checkpoint, opened anew): the second run's wrote over the first's."""
    paths = {Checkpoint(tmp_path / f"kar-alpha{a}", CONFIG).path.name for a in ("0.3", "0.5")}
    assert paths == {"kar-alpha0.3.partial.jsonl", "kar-alpha0.5.partial.jsonl"}
    assert output_path(tmp_path / "kar-alpha0.5", ".json").name == "kar-alpha0.5.json"
    assert output_path(tmp_path / "run.json", ".csv").name == "run.csv"  # OUT named as the file
