"""Putting back on their queues the chunks an ended ingest worker held.

A worker acknowledges a chunk only when it is done (acks late). With Redis as broker, a
chunk taken and never acknowledged waits in kombu's unacknowledged set until the broker's
visibility timeout (an hour) has passed since it was taken. A worker killed, or ended by
the kombu error ingest.worker_supervisor describes, leaves its chunks there: its job could
finish only after that hour, or after `kgqr ingest`'s stall re-send (120 s without
progress). Called between a worker's end and its replacement's start, this puts them back
at once.

Every unacknowledged chunk is put back: one a live worker shares the broker with is queued
again too and runs twice, which is harmless (ingest is idempotent, and a chunk done
meanwhile is skipped).

Not seen here: a message the worker took off its queue but died before recording as
unacknowledged (kombu's Redis transport does the two in turn). Only a re-send of the
chunks not done brings that one back (`kgqr ingest`'s, or running the command again).
"""

from __future__ import annotations

from collections.abc import Callable

import kombu


def restore_held_chunks(redis_url: str) -> int:
    """Put every unacknowledged message back on its queue; how many there were."""
    # A visibility timeout of zero makes every unacknowledged message "visible" again.
    with kombu.Connection(redis_url, transport_options={"visibility_timeout": 0}) as connection:
        channel = connection.default_channel
        qos = channel.qos
        if not hasattr(qos, "restore_visible"):  # a broker that returns them by itself
            return 0
        with channel.conn_or_acquire() as client:
            held = int(client.zcard(qos.unacked_index_key))
        if held:
            qos.restore_visible(num=held)
        return held


def put_back_held_chunks(redis_url: str, say: Callable[[str], None]) -> Callable[[], None]:
    """A supervisor's `before_restart`: restore_held_chunks, saying how many it put back."""

    def put_back() -> None:
        held = restore_held_chunks(redis_url)
        if held:
            say(f"put {held} chunks the ended ingest worker held back on their queues")

    return put_back
