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
    body: Any | None = None,
) -> Any | None:
    """The JSON body of a 2xx answer, or None for anything else. `body` is sent as JSON."""
    headers = dict(headers or {})
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
            if not 200 <= response.status < 300:
                return None
            return json.loads(response.read())
    except (urllib.error.URLError, TimeoutError, ConnectionError, ValueError, ssl.SSLError):
        return None


def get_json(url: str, timeout_s: float = 2.0) -> Any | None:
    return request_json("GET", url, timeout_s=timeout_s)
