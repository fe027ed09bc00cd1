"""The nginx front's own counters in kgqr's /_kgqr/metrics.

With the front, requests kgqr does not rewrite go straight to OpenSearch and never reach
kgqr's counters. nginx's stub_status still sees every request, so each front serves it on
a unix socket in a folder named after the kgqr port it forwards to, and /_kgqr/metrics reads
every socket there. Nothing is exposed on the network; a front that has gone away leaves
at most a dead socket, which is skipped.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kgqr_core.layout import ServiceLayout
from kgqr_core.settings import Settings

log = logging.getLogger("kgqr.front")

READ_TIMEOUT_S = 1.0
STUB_STATUS = re.compile(
    r"Active connections:\s*(?P<active>\d+)\s+server accepts handled requests\s+"
    r"(?P<accepted>\d+)\s+(?P<handled>\d+)\s+(?P<requests>\d+)\s+"
    r"Reading:\s*(?P<reading>\d+)\s+Writing:\s*(?P<writing>\d+)\s+Waiting:\s*(?P<waiting>\d+)"
)


@dataclass(frozen=True)
class FrontCounters:
    """One nginx front's stub_status: counters since it started, connections right now."""

    accepted: int
    handled: int
    requests: int
    active: int
    reading: int
    writing: int
    waiting: int


def status_folder(settings: Settings, kgqr_port: int) -> Path:
    """Where the fronts of the kgqr listening on `kgqr_port` put their status sockets."""
    return ServiceLayout(settings.home).run / "front-status" / str(kgqr_port)


def status_socket(settings: Settings, kgqr_port: int, front_port: int) -> Path:
    return status_folder(settings, kgqr_port) / f"{front_port}.sock"


def parse_stub_status(text: str) -> FrontCounters:
    match = STUB_STATUS.search(text)
    if match is None:
        raise ValueError(f"not an nginx stub_status page: {text[:80]!r}")
    return FrontCounters(**{name: int(value) for name, value in match.groupdict().items()})


def _sockets_in(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.sock")) if folder.is_dir() else []


async def read_fronts(folder: Path) -> dict[str, FrontCounters]:
    """Counters of every live front whose socket is in `folder`, by front port."""
    fronts: dict[str, FrontCounters] = {}
    # Listing a folder is file-system I/O: off the event loop, like every other blocking call.
    for socket in await anyio.to_thread.run_sync(_sockets_in, folder):
        transport = httpx.AsyncHTTPTransport(uds=str(socket))
        try:
            async with httpx.AsyncClient(transport=transport, timeout=READ_TIMEOUT_S) as client:
                response = await client.get("http://front/")
            fronts[socket.stem] = parse_stub_status(response.text)
        except (httpx.HTTPError, ValueError) as exc:
            detail = {"socket": str(socket), "error": str(exc)}
            log.debug("front status unreadable", extra={"kgqr": detail})
    return fronts


class _FrontCollector(Collector):
    def __init__(self, fronts: dict[str, FrontCounters]) -> None:
        self.fronts = fronts

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "kgqr_front_requests",
            "Requests the nginx front received, pass-through and kgqr's alike (and its own "
            "status reads for this page)",
            labels=["front_port"],
        )
        connections = CounterMetricFamily(
            "kgqr_front_connections",
            "Client connections the nginx front accepted and handled",
            labels=["front_port", "outcome"],
        )
        current = GaugeMetricFamily(
            "kgqr_front_open_connections",
            "The nginx front's client connections right now, by state",
            labels=["front_port", "state"],
        )
        for port, counters in self.fronts.items():
            requests.add_metric([port], counters.requests)
            connections.add_metric([port, "accepted"], counters.accepted)
            connections.add_metric([port, "handled"], counters.handled)
            for state in ("active", "reading", "writing", "waiting"):
                current.add_metric([port, state], getattr(counters, state))
        yield from (requests, connections, current)


def render_fronts(fronts: dict[str, FrontCounters]) -> bytes:
    """Prometheus text for the fronts; empty when there are none, so /_kgqr/metrics is unchanged."""
    if not fronts:
        return b""
    registry = CollectorRegistry()
    registry.register(_FrontCollector(fronts))
    return generate_latest(registry)
