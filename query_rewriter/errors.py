"""Errors in OpenSearch's own shape, so clients parse kgqr's errors like the engine's."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse


class RewriteRequestError(Exception):
    """A request kgqr refuses before forwarding it (bad JSON, unknown strategy, too big)."""

    def __init__(self, status: int, error_type: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.error_type, self.reason = status, error_type, reason


def opensearch_error_body(status: int, error_type: str, reason: str) -> dict[str, Any]:
    cause = {"type": error_type, "reason": reason}
    return {"error": {"root_cause": [cause], **cause}, "status": status}


def error_response(exc: RewriteRequestError) -> JSONResponse:
    return JSONResponse(
        opensearch_error_body(exc.status, exc.error_type, exc.reason), status_code=exc.status
    )
