from __future__ import annotations

from click.testing import CliRunner

from kgqr_ops.cli import main


def test_top_level_help_lists_every_command() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for command in ("services", "ingest", "eval", "serve", "plugin"):
        assert command in result.output


def test_ingest_source_is_the_default_subcommand() -> None:
    result = CliRunner().invoke(main, ["ingest", "nosuchkind:/tmp", "--kb", "x"])
    assert result.exit_code == 2
    assert "must be KIND:PATH" in result.output


def test_ingest_missing_path_is_reported_before_any_connection() -> None:
    result = CliRunner().invoke(main, ["ingest", "jsonl:/definitely/not/here", "--kb", "x"])
    assert result.exit_code == 2
    assert "does not exist" in result.output


def test_ingest_subcommands_stay_reachable() -> None:
    result = CliRunner().invoke(main, ["ingest", "status", "--help"])
    assert result.exit_code == 0 and "JOB_ID" in result.output
    run_help = CliRunner().invoke(main, ["ingest", "run", "--help"])
    assert "stark:DIR" in run_help.output and "--restart" in run_help.output


def test_eval_query_set_is_the_default_subcommand_and_sweep_stays_reachable() -> None:
    result = CliRunner().invoke(main, ["eval", "trec:/tmp/x", "--kb", "x"])
    assert result.exit_code == 2 and "KIND:PATH" in result.output
    sweep_help = CliRunner().invoke(main, ["eval", "sweep", "--help"])
    assert sweep_help.exit_code == 0 and "--grid" in sweep_help.output
    bad_grid = CliRunner().invoke(
        main, ["eval", "sweep", "--dataset", "x=jsonl:/nope", "--grid", "alpha=high"]
    )
    assert bad_grid.exit_code == 2 and "alpha=high" in bad_grid.output
