"""The shape a caller asked its answer in (`?filter_path`, `?pretty`, `?format=yaml`),
for answers kgqr writes itself.

kgqr reads OpenSearch's answer to a rewritten search (to put back the caller's totals and
facets, fuse rankings, add an explain), so it asks OpenSearch for whole, plain JSON
answers and writes the answer in the shape the caller asked for. It used to pass these on:
`format=yaml` answers were read as JSON (a 500), `pretty` was lost (curl users' habit),
and `filter_path` broke fusion and msearch (query_rewriter/engine/filter_path.py). The binary
formats (`cbor`, `smile`) are not written here: those searches pass through.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import yaml
from starlette.responses import Response

from query_rewriter.engine import json_codec
from query_rewriter.engine.errors import RewriteRequestError
from query_rewriter.engine.filter_path import filtered
from query_rewriter.engine.forwarding import (
    about_the_request,
    answer_content,
    bytes_to_read,
    to_response,
)
from query_rewriter.engine.off_loop import off_the_loop_if_large

FORMAT_PARAMS = ("pretty", "format", "filter_path")
BINARY_FORMATS = ("cbor", "smile")


def opensearch_flag(value: str) -> bool | None:
    """OpenSearch's reading of a URL flag (`?pretty`, `?lenient`): present and empty, or
    `true`, is true, `false` false, blanks None (the flag's default), and anything else
    its 400 (`?pretty=maybe` was read as true, a search the engine refuses)."""
    if value in ("", "true", "false"):
        return value != "false"
    if not value.strip():
        return None
    raise RewriteRequestError(
        400,
        "illegal_argument_exception",
        f"Failed to parse value [{value}] as only [true] or [false] are allowed.",
    )


@dataclass(frozen=True)
class AnswerFormat:
    pretty: bool = False
    yaml: bool = False
    filter_path: tuple[str, ...] = ()
    # `cbor` or `smile` when the caller asked for one: only the engine writes those, so
    # such searches pass through.
    binary: str | None = None

    @classmethod
    def of(cls, params: Mapping[str, str]) -> AnswerFormat:
        paths = params.get("filter_path", "")
        asked = params.get("format", "").lower()
        return cls(
            pretty="pretty" in params and bool(opensearch_flag(params["pretty"])),
            yaml=asked == "yaml",
            filter_path=tuple(path.strip() for path in paths.split(",") if path.strip()),
            binary=asked if asked in BINARY_FORMATS else None,
        )

    async def written(
        self, upstream: httpx.Response, explain: Mapping[str, object] | None
    ) -> Response:
        """The engine's answer in the caller's format, with kgqr's explain when one was
        asked for; plain JSON without one is sent on as its bytes."""
        if self.is_plain_json and explain is None:
            return to_response(upstream)
        read = bytes_to_read(upstream)
        return await self.response(
            await off_the_loop_if_large(read, lambda: with_explain(upstream, explain)),
            upstream.status_code,
            explain_at="kgqr" if explain is not None else None,
            headers=about_the_request(upstream),
            size=len(upstream.content),  # what writing it back costs
        )

    @property
    def is_plain_json(self) -> bool:
        """OpenSearch's JSON answer may then be sent on as its bytes."""
        return not (self.pretty or self.yaml or self.filter_path)

    async def response(
        self,
        content: Any,
        status_code: int,
        explain_at: str | None = None,
        headers: dict[str, str] | None = None,
        size: int = 0,
    ) -> Response:
        """`content` filtered, in the caller's format, with `headers`. `explain_at`: where
        kgqr put an explain the caller asked for (`kgqr`, `responses.kgqr`), kept by any
        filter. An error is never filtered, as the engine never filters one (`{}` would
        hide it). `size`: the bytes `content` was read from.

        Filtered, pretty or YAML, on a worker thread: YAML took 126 ms for ten hits with
        their vectors, and every other search would wait for it on the event loop. Plain
        JSON too, where `size` is large."""
        body: str | bytes
        if self.is_plain_json:
            body = await off_the_loop_if_large(size, lambda: json_codec.dumps(content))
            media_type = "application/json"
        else:
            body, media_type = await anyio.to_thread.run_sync(
                self._formatted, content, status_code, explain_at
            )
        return Response(body, status_code=status_code, headers=headers, media_type=media_type)

    def _formatted(
        self, content: Any, status_code: int, explain_at: str | None
    ) -> tuple[str | bytes, str]:
        if self.filter_path and status_code < 400:
            kept = (explain_at,) if explain_at and _includes(self.filter_path) else ()
            content = filtered(content, (*self.filter_path, *kept))
        if self.yaml:
            text = yaml.safe_dump(content, explicit_start=True, sort_keys=False, allow_unicode=True)
            return text, "application/yaml"
        if self.pretty:
            return json.dumps(content, ensure_ascii=False, indent=2) + "\n", "application/json"
        return json_codec.dumps(content), "application/json"


def _includes(filter_path: tuple[str, ...]) -> bool:
    return any(not path.startswith("-") for path in filter_path)


def json_params(params: dict[str, str]) -> dict[str, str]:
    """The parameters for what kgqr asks OpenSearch itself: its answer in plain JSON."""
    return {k: v for k, v in params.items() if k not in FORMAT_PARAMS}


def with_explain(upstream: httpx.Response, explain: Mapping[str, object] | None) -> dict[str, Any]:
    """OpenSearch's JSON answer, with the explain when one was asked for."""
    try:
        result = answer_content(upstream)
    except ValueError:
        result = {"error": upstream.text}
    if isinstance(result, dict) and explain is not None:
        result = {**result, "kgqr": explain}
    return dict(result)
