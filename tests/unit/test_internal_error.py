"""A fault inside kgqr still answers in OpenSearch's shape: clients parse the error body."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from kgqr_core.settings import Settings
from query_rewriter import metrics
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
