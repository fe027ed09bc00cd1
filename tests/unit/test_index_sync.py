"""Where `kgqr kb sync` reads each shard of an attached index from."""

from __future__ import annotations

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
