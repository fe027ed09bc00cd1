"""The Dashboards saved objects: valid NDJSON, every field they aggregate on exists in the
query-log mapping, every reference resolves; and the import request Dashboards expects."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from plugin import schema
from plugin.dashboards_import import DashboardsImportError, import_saved_objects, saved_objects


def _objects() -> list[dict[str, Any]]:
    lines = saved_objects().decode().splitlines()
    assert all(line.strip() for line in lines), "no blank lines in NDJSON"
    return [json.loads(line) for line in lines]


def _mapped_fields(properties: dict[str, Any], prefix: str = "") -> set[str]:
    fields = set()
    for name, spec in properties.items():
        path = f"{prefix}{name}"
        fields.add(path)
        fields |= {f"{path}.{sub}" for sub in spec.get("fields", {})}
        fields |= _mapped_fields(spec.get("properties", {}), f"{path}.")
    return fields


QUERY_LOG_TEMPLATE = schema.proxy_index_templates()["kgqr-query-log"]
MAPPED = _mapped_fields(QUERY_LOG_TEMPLATE["template"]["mappings"]["properties"])


def test_every_object_is_a_well_formed_saved_object() -> None:
    objects = _objects()
    assert {o["type"] for o in objects} == {"index-pattern", "visualization", "dashboard"}
    assert len({o["id"] for o in objects}) == len(objects)
    for obj in objects:
        assert obj["attributes"]["title"]
        assert isinstance(obj["references"], list)


def test_index_pattern_matches_the_query_log_index_and_its_time_field() -> None:
    [pattern] = [o for o in _objects() if o["type"] == "index-pattern"]
    assert pattern["attributes"]["title"] in QUERY_LOG_TEMPLATE["index_patterns"]
    assert schema.QUERY_LOG_INDEX in QUERY_LOG_TEMPLATE["index_patterns"]
    assert pattern["attributes"]["timeFieldName"] in MAPPED


def test_visualisations_aggregate_only_on_mapped_fields() -> None:
    visualisations = [o for o in _objects() if o["type"] == "visualization"]
    titles = " ".join(v["attributes"]["title"] for v in visualisations)
    for topic in ("latency", "fallback rate", "zero-hit rate"):
        assert topic in titles
    for vis in visualisations:
        state = json.loads(vis["attributes"]["visState"])
        fields = [a["params"]["field"] for a in state["aggs"] if "field" in a["params"]]
        assert fields, vis["id"]
        assert set(fields) <= MAPPED, f"{vis['id']} uses unmapped {set(fields) - MAPPED}"
        source = json.loads(vis["attributes"]["kibanaSavedObjectMeta"]["searchSourceJSON"])
        assert source["indexRefName"] in {r["name"] for r in vis["references"]}


def test_references_resolve_within_the_file() -> None:
    objects = _objects()
    by_id = {o["id"]: o["type"] for o in objects}
    for obj in objects:
        for ref in obj["references"]:
            assert by_id.get(ref["id"]) == ref["type"], f"{obj['id']} -> {ref}"
    [dashboard] = [o for o in objects if o["type"] == "dashboard"]
    panels = json.loads(dashboard["attributes"]["panelsJSON"])
    names = {r["name"] for r in dashboard["references"]}
    assert len(panels) == sum(o["type"] == "visualization" for o in objects)
    assert all(p["panelRefName"] in names for p in panels)


def test_import_posts_the_ndjson_with_the_xsrf_header() -> None:
    seen: list[httpx.Request] = []

    def dashboards(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"success": True, "successCount": len(_objects())})

    with httpx.Client(transport=httpx.MockTransport(dashboards)) as client:
        assert import_saved_objects(client, "http://dash:5601/") == len(_objects())
    [request] = seen
    assert request.url.path == "/api/saved_objects/_import"
    assert request.url.params["overwrite"] == "true"
    assert request.headers["osd-xsrf"] == "true"
    body = request.read()
    assert b'name="file"; filename="kgqr-query-log.ndjson"' in body
    assert saved_objects() in body


def test_a_refused_import_says_why() -> None:
    def dashboards(request: httpx.Request) -> httpx.Response:
        errors = [{"id": "kgqr-overview", "error": {"type": "missing_references"}}]
        return httpx.Response(200, json={"success": False, "errors": errors})

    with (
        httpx.Client(transport=httpx.MockTransport(dashboards)) as client,
        pytest.raises(DashboardsImportError, match="missing_references"),
    ):
        import_saved_objects(client, "http://dash:5601")
