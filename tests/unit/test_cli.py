from __future__ import annotations

from click.testing import CliRunner

from plugin.cli import main


def test_top_level_help_lists_every_command() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for command in ("services", "ingest", "plugin"):
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
