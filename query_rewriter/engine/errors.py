"""Errors in OpenSearch's own shape, so clients parse kgqr's errors like the engine's."""

from __future__ import annotations

import logging
import os
import re
import sysconfig
import traceback
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

# URLs, and host:port pairs as connection errors print them ("127.0.0.1:9200", "[::1]:7687").
# Each alternative starts only where its run of characters starts (the lookbehinds):
# unanchored, a long word was retried from each of its letters and scanned to its end each
# time, so scrubbing a 16 KB upstream error took over a second.
ADDRESS = re.compile(
    r"(?<![a-z0-9+.-])[a-z][a-z0-9+.-]*://[^\s'\"]+|(?<![\w.:\[\]-])\[?[\w.:-]+\]?:\d{2,5}\b",
    re.IGNORECASE,
)


def redact_addresses(text: str) -> str:
    """Text for a client (an explain, a fallback reason) with URLs and host:port removed."""
    return ADDRESS.sub("<address>", text)


# Where the interpreter's and the installed libraries' files lie, and kgqr's own (which an
# image installs among the libraries).
_LIBRARIES = tuple(
    {
        str(Path(sysconfig.get_paths()[name]).resolve()) + os.sep
        for name in ("stdlib", "purelib", "platlib")
    }
)
_KGQR = tuple(
    str(Path(__file__).resolve().parents[2] / package) + os.sep
    for package in ("query_rewriter", "kgqr_core", "workbench", "plugin", "ingest", "kgqr_ops")
)


def failure_reason(exc: BaseException) -> str:
    """What a client is told of a failure that cost it its rewrite (a fallback's reason,
    in the explain and the X-Kgqr-Fallback header of every such answer). A library's
    message may say what kgqr's network and accounts are (the Neo4j driver names the
    addresses it resolved, an LLM gateway its key's last letters and its deployments):
    of an exception raised inside one, only its kind; so too where kgqr's own message
    quotes the library's it was raised from. kgqr's own words are written for callers.
    The log keeps every message whole."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    if _raised_in_library(exc):
        return f"{_library_kind(exc)} (kgqr's log has its message)"
    message = f"{type(exc).__name__}: {exc}"
    cause = exc.__cause__
    if cause is not None and _raised_in_library(cause) and (quoted := str(cause)):
        message = message.replace(quoted, f"{_library_kind(cause)}, in kgqr's log")
    return redact_addresses(message)


def _raised_in_library(exc: BaseException) -> bool:
    frames = traceback.extract_tb(exc.__traceback__)
    raised_in = str(Path(frames[-1].filename).resolve()) if frames else ""
    return raised_in.startswith(_LIBRARIES) and not raised_in.startswith(_KGQR)


def _library_kind(exc: BaseException) -> str:
    """An exception's kind, its library and an HTTP status: what failed, naming nothing
    (a 404 model, a 429)."""
    library = type(exc).__module__.partition(".")[0]
    source = "" if library == "builtins" else f" from {library}"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    answered = f", answered {status}" if isinstance(status, int) else ""
    return f"{type(exc).__name__}{source}{answered}"


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


def upstream_unreachable(exc: Exception) -> RewriteRequestError:
    """A 502 that says why (a certificate that does not verify, a refused connection) but
    names no host or URL: clients need not learn kgqr's network. The log keeps it whole."""
    logging.getLogger("kgqr.proxy").warning(
        "OpenSearch could not be reached", extra={"kgqr": {"error": str(exc)}}
    )
    reason = redact_addresses(str(exc)) or type(exc).__name__
    return RewriteRequestError(
        502, "kgqr_upstream_exception", f"OpenSearch could not be reached: {reason}"
    )


def kgqr_failure(exc: Exception) -> RewriteRequestError:
    """A fault in kgqr itself, as a 500 clients parse like the engine's errors; the body
    names only the kind of fault, the log keeps the traceback."""
    return RewriteRequestError(500, "kgqr_exception", f"kgqr failed: {type(exc).__name__}")


async def internal_error(request: Request, exc: Exception) -> JSONResponse:
    """The last resort, for endpoints beside the proxy's own (the tune page, metrics):
    an OpenSearch-shaped 500 where the server would answer plain-text "Internal Server
    Error". The server still logs the traceback."""
    return error_response(kgqr_failure(exc))
