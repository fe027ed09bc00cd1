"""Shared by the benchmark scripts: where results go and what machine produced them."""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "node": platform.node()}


def save(name: str, figures: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    stamp = dt.datetime.now(dt.UTC)
    record = {"benchmark": name, "date": stamp.isoformat(), "machine": machine(), **figures}
    path = RESULTS / f"{name}-{stamp:%Y%m%dT%H%M%S}.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"saved {path}")
    return path
