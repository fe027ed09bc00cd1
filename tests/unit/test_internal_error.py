"""A fault inside kgqr still answers in OpenSearch's shape: clients parse the error body."""

from __future__ import annotations

import json

import httpx
import neo4j
import pytest
from starlette.testclient import TestClient

from kgqr_core.settings import Settings
from query_rewriter import metrics
from query_rewriter.engine.errors import failure_reason
from query_rewriter.proxy.app import create_app

pytestmark = pytest.mark.unit


def test_a_fault_in_kgqr_answers_an_opensearch_shaped_500() -> None:
    # Without its lifespan the app has no state, so the metrics endpoint faults
    # (AttributeError): a stand-in for any bug that escapes a handler.
    client = TestClient(create_app(Settings()), raise_server_exceptions=False)
    answer = client.get(metrics.PATH)
    assert answer.status_code == 500
    error = answer.json()["error"]
    assert error["type"] == error["root_cause"][0]["type"] == "kgqr_exception"
    assert error["reason"] == "kgqr failed: AttributeError" and answer.json()["status"] == 500


def test_a_fallback_names_a_librarys_failure_by_its_kind_only() -> None:
    """The Neo4j driver's message names the addresses it resolved (and an LLM gateway's
    its key's last letters), which reach every caller in the X-Kgqr-Fallback header."""
    try:
        json.loads("{")
    except ValueError as exc:  # raised inside the standard library
        assert failure_reason(exc) == "JSONDecodeError from json (kgqr's log has its message)"
    driver = neo4j.GraphDatabase.driver("bolt://127.0.0.1:1", auth=("kgqr", "secret"))
    try:
        driver.verify_connectivity()
    except neo4j.exceptions.ServiceUnavailable as exc:  # raised inside the driver
        shown = failure_reason(exc)
        assert shown == "ServiceUnavailable from neo4j (kgqr's log has its message)", shown
        assert "127.0.0.1" in str(exc)
    finally:
        driver.close()
    assert failure_reason(TimeoutError()) == "timed out"
    try:
        httpx.Response(429, request=httpx.Request("POST", "http://llm:8080/v1")).raise_for_status()
    except httpx.HTTPStatusError as exc:
        assert failure_reason(exc) == (
            "HTTPStatusError from httpx, answered 429 (kgqr's log has its message)"
        )
    try:
        raise ValueError("the LLM returned no usable documents")
    except ValueError as exc:  # kgqr's own words, written for callers
        assert failure_reason(exc) == "ValueError: the LLM returned no usable documents"
    # kgqr's own words quoting the library's they were raised from (the embedder's
    # ConfigurationError wraps a loader's OSError): the library's part by its kind only.
    try:
        try:
            json.loads("{ at http://10.1.2.3:8080")
        except ValueError as exc:
            raise RuntimeError(f"embedder 'x' could not load: {exc}") from exc
    except RuntimeError as wrapped:
        shown = failure_reason(wrapped)
        assert shown == (
            "RuntimeError: embedder 'x' could not load: JSONDecodeError from json, in kgqr's log"
        ), shown
