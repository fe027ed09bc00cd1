"""Leases of the chunks being written, so that a drop waits for them.

A drop forgets a knowledge base's jobs first, and a chunk looks for its job before it
writes, so a queued chunk writes nothing. One already writing would write after the
drop's delete and make the KB's index again. So a chunk takes a lease on its KB in the
same step as that look (one Lua script: no drop comes between them), renews it while it
runs, and gives it back when it ends; the drop empties the stores once the KB holds no
live lease. Leases live in Redis, not in what workers answer to a broadcast: a busy or
stopping worker misses a broadcast and looks idle. A worker killed mid-chunk stops
renewing, and its lease lapses within LEASE_S instead of holding every drop back.
A re-embed (ingest.reembed), which runs in its own process and not as chunks, writes
under the same leases, with its state in Redis for the record a drop deletes first.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from redis.exceptions import RedisError

# Renewed every quarter of it while the chunk runs: a renewal may come 15 s late (a
# worker starved of CPU, Redis restarting) before a drop stops waiting for the chunk,
# and a drop after a worker was killed waits at most this long for its lease to lapse.
LEASE_S = 20.0
SETTLE_S = 300.0  # how long a drop waits for live leases before it says which it left
PRUNED_AFTER = 5  # lease lengths after its lapse a lease is removed by the next claim

# KEYS: the writer's record (its job's, or a re-embed's state), the KB's leases;
# ARGV: expiry, token, the time before which lapsed leases go. The leases' key has no
# expiry: the local Redis evicts keys that have one (volatile-lru), and an evicted key let
# a drop go on while a chunk still wrote. Leases lapsed long ago (a killed worker's) go as
# the next is taken: not those lapsed just now, whose renewal may be late or whose
# worker's clock behind (a renewal only renews, it never adds one back); a KB's last one
# given back empties the set, and Redis removes an empty set; a drop removes the rest.
# (`persist`: an older kgqr set a TTL.)
_CLAIM = """
if redis.call('exists', KEYS[1]) == 0 then return 0 end
redis.call('zremrangebyscore', KEYS[2], '-inf', '(' .. ARGV[3])
redis.call('zadd', KEYS[2], ARGV[1], ARGV[2])
redis.call('persist', KEYS[2])
return 1
"""


def _leases_key(kb: str) -> str:
    return f"kgqr:writing:{kb}"


class WriteLeases:
    def __init__(self, redis: Any, lease_s: float = LEASE_S) -> None:
        self.redis = redis
        self.lease_s = lease_s

    @contextlib.contextmanager
    def writing(self, record_key: str, kb: str, token: str) -> Iterator[bool]:
        """Whether the writer may write: its record (`record_key`: a chunk's job, a
        re-embed's state), which a drop deletes first, was there when it took the lease.
        The lease is given back on the way out, held or not: a task re-delivered after
        its worker died reuses its id, and so clears the lease the dead run left."""
        key = _leases_key(kb)
        lapsed_long_ago = time.time() - PRUNED_AFTER * self.lease_s
        held = bool(self.redis.eval(_CLAIM, 2, record_key, key, self._expiry(), token,
                                    lapsed_long_ago))  # fmt: skip
        stop = threading.Event()
        renewer = threading.Thread(target=self._renew, args=(key, token, stop), daemon=True)
        if held:
            renewer.start()
        try:
            yield held
        finally:
            stop.set()
            if held:
                renewer.join()
            # Redis away at the end of a written chunk: the lease lapses by itself, and
            # the chunk, recorded done, is not retried for it.
            with contextlib.suppress(RedisError):
                self.redis.zrem(key, token)

    def forget(self, kb: str) -> None:
        """A dropped KB's leases lapsed long ago (they stayed, without expiry), as a claim
        prunes them: not the whole set, since a chunk of an ingest started after the drop's
        wait holds a live one, nor those lapsed just now (a late renewal). Redis removes
        the set once it is empty."""
        lapsed_long_ago = time.time() - PRUNED_AFTER * self.lease_s
        self.redis.zremrangebyscore(_leases_key(kb), "-inf", f"({lapsed_long_ago}")

    def live(self, kb: str) -> list[str]:
        """Tokens of the leases still renewed: chunks of the KB being written now."""
        found = self.redis.zrangebyscore(_leases_key(kb), time.time(), "+inf")
        return [token.decode() for token in found]

    def wait_until_none(
        self, kb: str, say: Callable[[str], None], timeout_s: float = SETTLE_S, poll_s: float = 0.2
    ) -> list[str]:
        """Wait until no chunk of the KB is being written; returns the leases still live
        when `timeout_s` ran out (a chunk whose triples an LLM extracts can take longer)."""
        deadline = time.monotonic() + timeout_s
        live = self.live(kb)
        if live:
            say(f"waiting for {len(live)} chunks of {kb} still being written "
                f"(at most {timeout_s:.0f} s)")  # fmt: skip
        while live and time.monotonic() < deadline:
            time.sleep(poll_s)
            live = self.live(kb)
        return live

    def _renew(self, key: str, token: str, stop: threading.Event) -> None:
        while not stop.wait(self.lease_s / 4):
            # Redis away: the lease lapses as a dead worker's would, and the chunk's own
            # writes to Redis fail and retry it anyway.
            with contextlib.suppress(RedisError):
                self.redis.zadd(key, {token: self._expiry()}, xx=True)

    def _expiry(self) -> float:
        return time.time() + self.lease_s
