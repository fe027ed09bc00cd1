"""Where the benchmark data lies, as the README and the quickstart find it: KGQR_DATA_DIR,
else a shared/data beside the checkout. Never in the repository: tests that read it skip,
naming the folder they looked for, where it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED_DATA = Path(
    os.environ.get("KGQR_DATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data"
)


def needs_shared_data(folder: str = "") -> pytest.MarkDecorator:
    """Skip unless SHARED_DATA holds `folder` (a clone elsewhere skipped the loaders'
    only real-data checks silently: KGQR_DATA_DIR was not read)."""
    path = SHARED_DATA / folder
    return pytest.mark.skipif(not path.is_dir(), reason=f"{path} is absent (set KGQR_DATA_DIR)")
