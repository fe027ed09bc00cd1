"""Tiny blocking HTTP calls for health checks and repairs (the services CLI is not async)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any


def request_json(
    method: str,
    url: str,
    headers: dict[str, str] | None = None,
    context: ssl.SSLContext | None = None,
    timeout_s: float = 2.0,
) -> Any | None:
    """The JSON body of a 200 answer, or None for anything else."""
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
            if response.status != 200:
                return None
            return json.loads(response.read())
    except (urllib.error.URLError, TimeoutError, ConnectionError, ValueError, ssl.SSLError):
        return None


def get_json(url: str, timeout_s: float = 2.0) -> Any | None:
    return request_json("GET", url, timeout_s=timeout_s)
