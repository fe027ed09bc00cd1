"""Tiny blocking HTTP probes for health checks (the services CLI is not async)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def get_json(url: str, timeout_s: float = 2.0) -> Any | None:
    """The JSON body of a 200 answer, or None for anything else."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            if response.status != 200:
                return None
            return json.loads(response.read())
    except (urllib.error.URLError, TimeoutError, ConnectionError, ValueError):
        return None
