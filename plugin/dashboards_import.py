"""Imports kgqr's OpenSearch Dashboards saved objects (index pattern, visualisations and
the overview dashboard over the kgqr-query-log index) through the saved-objects API."""

from __future__ import annotations

from importlib import resources

import httpx

SAVED_OBJECTS = "kgqr-query-log.ndjson"


class DashboardsImportError(RuntimeError):
    """Dashboards refused the import; the message carries its reasons."""


def saved_objects() -> bytes:
    return resources.files("plugin.dashboards").joinpath(SAVED_OBJECTS).read_bytes()


def import_saved_objects(client: httpx.Client, dashboards_url: str) -> int:
    """POST the NDJSON to ``/api/saved_objects/_import?overwrite=true`` (re-importing
    replaces kgqr's objects, so upgrades need no clean-up); returns how many landed."""
    response = client.post(
        f"{dashboards_url.rstrip('/')}/api/saved_objects/_import",
        params={"overwrite": "true"},
        headers={"osd-xsrf": "true"},
        files={"file": (SAVED_OBJECTS, saved_objects(), "application/ndjson")},
    )
    try:
        answer = response.json()
    except ValueError:
        answer = {}
    if response.status_code != 200 or not answer.get("success"):
        errors = answer.get("errors") or answer.get("message") or response.text[:500]
        raise DashboardsImportError(f"HTTP {response.status_code}: {errors}")
    return int(answer.get("successCount", 0))
