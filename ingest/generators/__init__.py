"""Knowledge bases built in code (deterministic for a seed), for tests and benchmarks that
need a semi-structured KB of real size without checked-in data."""

from __future__ import annotations

from collections.abc import Callable

from ingest.generators.catalog import catalog
from ingest.generators.kb_files import GeneratedKb
from ingest.generators.library import library

GENERATORS: dict[str, Callable[..., GeneratedKb]] = {
    "catalog": catalog,
    "library": library,
}
