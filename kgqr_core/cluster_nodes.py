"""Every node of the OpenSearch cluster kgqr may send a request to, so losing the one in
KGQR_OPENSEARCH_URL does not take searches down.

The list is the configured URL first, then KGQR_OPENSEARCH_OTHER_URLS, then the nodes the
engine itself reports (`_nodes/http`, read with kgqr's account when it may). A node that
refused a connection goes to the back of the order for DOWN_S, then is tried again. Only
what is safe is retried: any request whose connection was refused (nothing was sent), and
a search a node answered with 502/503/504 (a search changes nothing).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from kgqr_core.settings import Settings

DOWN_S = 10.0
# Requests that read and change nothing, which another node may answer after a 5xx.
# (Not a scroll's next page: sent again after a dropped connection, it can skip one.)
SEARCH_PATH = re.compile(r"/_(search|msearch|count)(/template)?/?$")
RETRIED_STATUSES = frozenset({502, 503, 504})


def configured_urls(settings: Settings) -> list[str]:
    others = [url.strip() for url in settings.opensearch.other_urls.split(",") if url.strip()]
    return _distinct([settings.opensearch.url, *others])


def reported_urls(nodes_http: dict[str, Any], scheme: str) -> list[str]:
    """The nodes' HTTP addresses in a `_nodes/http` answer, as URLs of `scheme`
    (a publish address may read `host/ip:port`: the part after the slash is dialled)."""
    found = []
    for node in (nodes_http.get("nodes") or {}).values():
        address = ((node or {}).get("http") or {}).get("publish_address")
        if address:
            found.append(f"{scheme}://{str(address).rsplit('/', 1)[-1]}")
    return found


def is_search(method: str, path: str) -> bool:
    if "/_search/scroll" in path:
        return False
    return method in ("GET", "HEAD") or bool(SEARCH_PATH.search(path))


def _distinct(urls: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(url.rstrip("/") for url in urls))


class ClusterNodes:
    """The nodes in the order to try them: those not recently down first, in the order
    they were learnt (the configured URL first)."""

    def __init__(self, urls: Iterable[str]) -> None:
        self._urls = _distinct(urls)
        self._down_until: dict[str, float] = {}

    @classmethod
    def of(cls, settings: Settings) -> ClusterNodes:
        return cls(configured_urls(settings))

    @property
    def urls(self) -> list[str]:
        return list(self._urls)

    def learn(self, urls: Iterable[str]) -> None:
        self._urls = _distinct([*self._urls, *urls])

    def in_order(self) -> list[str]:
        now = time.monotonic()
        up = [url for url in self._urls if self._down_until.get(url, 0.0) <= now]
        return up + [url for url in self._urls if url not in up]

    def failed(self, url: str) -> None:
        self._down_until[url] = time.monotonic() + DOWN_S

    def worked(self, url: str) -> None:
        self._down_until.pop(url, None)

    @staticmethod
    def address(url: str) -> tuple[str, str, int]:
        """(scheme, host, port) of a node URL."""
        parts = urlsplit(url)
        default = 443 if parts.scheme == "https" else 80
        return parts.scheme, parts.hostname or "", parts.port or default
