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
from dataclasses import dataclass
from typing import Any

import yaml
from starlette.responses import Response

from query_rewriter.engine.filter_path import filtered

FORMAT_PARAMS = ("pretty", "format", "filter_path")
BINARY_FORMATS = ("cbor", "smile")


def opensearch_flag(value: str) -> bool:
    """OpenSearch's reading of a URL flag (`?pretty`, `?lenient`): present and empty
    means true."""
    return value.lower() not in ("false", "0", "no", "off")


@dataclass(frozen=True)
class AnswerFormat:
    pretty: bool = False
    yaml: bool = False
    filter_path: tuple[str, ...] = ()

    @classmethod
    def of(cls, params: dict[str, str]) -> AnswerFormat:
        paths = params.get("filter_path", "")
        return cls(
            pretty=opensearch_flag(params["pretty"]) if "pretty" in params else False,
            yaml=params.get("format", "").lower() == "yaml",
            filter_path=tuple(path.strip() for path in paths.split(",") if path.strip()),
        )

    @property
    def is_plain_json(self) -> bool:
        """OpenSearch's JSON answer may then be sent on as its bytes."""
        return not (self.pretty or self.yaml or self.filter_path)

    def response(
        self,
        content: Any,
        status_code: int,
        explain_at: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """`content` filtered, in the caller's format, with `headers`. `explain_at`: where
        kgqr put an explain the caller asked for (`kgqr`, `responses.kgqr`), kept by any
        filter. An error is never filtered, as the engine never filters one (`{}` would
        hide it)."""
        if self.filter_path and status_code < 400:
            kept = (explain_at,) if explain_at and _includes(self.filter_path) else ()
            content = filtered(content, (*self.filter_path, *kept))
        if self.yaml:
            text = yaml.safe_dump(content, explicit_start=True, sort_keys=False, allow_unicode=True)
            return Response(
                text, status_code=status_code, headers=headers, media_type="application/yaml"
            )
        indent = 2 if self.pretty else None
        separators = None if self.pretty else (",", ":")
        body = json.dumps(content, ensure_ascii=False, indent=indent, separators=separators)
        return Response(
            body + ("\n" if self.pretty else ""),
            status_code=status_code,
            headers=headers,
            media_type="application/json",
        )


def _includes(filter_path: tuple[str, ...]) -> bool:
    return any(not path.startswith("-") for path in filter_path)


def json_params(params: dict[str, str]) -> dict[str, str]:
    """The parameters for what kgqr asks OpenSearch itself: its answer in plain JSON."""
    return {k: v for k, v in params.items() if k not in FORMAT_PARAMS}


def binary_format(params: dict[str, str]) -> str | None:
    """`cbor` or `smile` when the caller asked for one (their searches pass through)."""
    asked = params.get("format", "").lower()
    return asked if asked in BINARY_FORMATS else None
