"""Where `kgqr kb sync` reads each shard of an attached index from."""

from __future__ import annotations

import click
import pytest

from ingest.index_sync import OVERLAP, read_from

pytestmark = pytest.mark.unit


def test_a_shard_reads_on_from_its_checkpoint_less_the_overlap() -> None:
    since, restarted = read_from({"team/0": 5_000, "team/1": 40}, {"team/0": 6_000, "team/1": 41})
    assert since == {"team/0": 5_000 - OVERLAP, "team/1": -1} and restarted == []


def test_an_index_made_again_is_read_from_its_start_whatever_its_numbers_say() -> None:
    """Its uuid told: written past the old checkpoint, its numbers alone read on from it."""
    synced, now = {"team/0": 5_000, "team/1": 5_000}, {"team/0": 9_000, "team/1": 10}
    assert read_from(synced, now, made_again=True) == ({}, ["team/0", "team/1"])
    since, restarted = read_from(synced, now)  # no uuid to tell: the numbers, shard by shard
    assert since == {"team/0": 5_000 - OVERLAP} and restarted == ["team/1"]


def test_ctrl_c_between_follows_syncs_ends_the_command_cleanly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C is how `kb sync --follow` ends; it printed "Aborted!" and exited 1, as if a
    sync had failed."""
    import time

    from click.testing import CliRunner

    from ingest import kb_cli

    synced: list[bool] = []

    def sync_once(_name: str, full: bool, _worker: str) -> None:
        synced.append(full)
        if len(synced) == 2:  # a store restarting: the follow outlives it
            raise ConnectionError("Neo4j is unavailable")

    def interrupted(_seconds: float) -> None:
        if len(synced) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(kb_cli, "_sync_once", sync_once)
    monkeypatch.setattr(time, "sleep", interrupted)
    result = CliRunner().invoke(kb_cli.kb, ["sync", "shop", "--full", "--follow"])
    assert result.exit_code == 0, result.output
    assert synced == [True, False, False]  # only the first reads the whole index
    assert (
        "sync of shop failed (ConnectionError: Neo4j is unavailable); trying again in 10s"
    ) in result.stderr
    assert "stopped following shop" in result.output


def test_a_follows_first_sync_that_fails_ends_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name that is not attached, a setup's mistake, is not retried every interval."""
    from click.testing import CliRunner

    from ingest import kb_cli

    def sync_once(_name: str, _full: bool, _worker: str) -> None:
        raise click.ClickException("'shop' is kgqr's own knowledge base")

    monkeypatch.setattr(kb_cli, "_sync_once", sync_once)
    result = CliRunner().invoke(kb_cli.kb, ["sync", "shop", "--follow"])
    assert result.exit_code == 1 and "kgqr's own" in result.output
