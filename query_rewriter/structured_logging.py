"""JSON log lines: what the proxy decided for each rewrite, machine-readable."""

from __future__ import annotations

import json
import logging
import sys

# Characters JSON leaves as they are that a reader splitting on Unicode's line boundaries
# (Python's splitlines, some log shippers) takes for a line's end: a query holding one
# wrote a second line of its own choosing, a forged log entry.
_LINE_BREAKS = {ord(c): f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        facts = getattr(record, "kgqr", None)
        if facts:
            line["kgqr"] = facts
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
