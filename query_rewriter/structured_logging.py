"""JSON log lines: what the proxy decided for each rewrite, machine-readable."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

# Characters JSON leaves as they are that a reader splitting on Unicode's line boundaries
# (Python's splitlines, some log shippers) takes for a line's end: a query holding one
# wrote a second line of its own choosing, a forged log entry.
_LINE_BREAKS = {ord(c): f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"}


# Longest text of any one value in a line: what a rewrite logs holds callers' words
# (their query is bounded where it is read, but a field a caller names, or one a newer part
# of the explain adds, need not be), and one line of megabytes is written on the event loop.
VALUE_CHARS = 8_192


def _clipped(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return value if len(value) <= VALUE_CHARS else f"{value[:VALUE_CHARS]}... (clipped)"
    if depth > 16:
        return "... (nested deeper)"
    if isinstance(value, dict):
        return {_clipped(str(k), depth + 1): _clipped(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clipped(item, depth + 1) for item in value]
    return value


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "message": _clipped(record.getMessage()),
        }
        facts = getattr(record, "kgqr", None)
        if facts:
            line["kgqr"] = _clipped(facts)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str).translate(_LINE_BREAKS)


def configure(level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("kgqr")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
