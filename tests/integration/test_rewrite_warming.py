"""`kgqr rewrites warm`: the query log's frequent queries, and warming them through a proxy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import running_proxy
from kgqr_ops.cli import main
from plugin import schema
from query_rewriter.search.warming import frequent_logged_queries, warm_queries

# In the edit-test loop (scripts/test-quick.sh): it needs only the always-on services.
pytestmark = pytest.mark.quick

# The knowledge base of the movies_kb fixture (tests/integration/conftest.py).
KB = "proxy-movies"


def _search(url: str, index: str, text: str) -> None:
    response = httpx.post(
        f"{url}/{index}/_search",
        params={"kgqr.strategy": "prf"},
        json={"query": {"match": {"text": text}}},
        timeout=300,
    )
    assert response.status_code == 200


def test_frequent_logged_queries_are_warmed_once(
    settings: Settings, opensearch: Any, movies_kb: str, unique_name: str, tmp_path: Path
) -> None:
    often, once, new = (f"heat pacino {unique_name} {n}" for n in ("often", "once", "new"))
    with running_proxy(settings.replaced({"query_log_enabled": True})) as url:
        for text in (often, often, often, once):
            _search(url, movies_kb, text)
    opensearch.indices.refresh(index=schema.QUERY_LOG_INDEX)
    logged = frequent_logged_queries(opensearch, KB, 10_000)
    assert often in logged and once in logged
    assert logged.index(often) < logged.index(once)  # most frequent first

    with running_proxy(settings) as url:
        first = warm_queries(url, movies_kb, "prf", [often, new], {})
        assert (first.already_cached, first.computed, first.fell_back) == (1, 1, [])
        listed = tmp_path / "queries.txt"
        listed.write_text(f'{often}\n\n{{"query": "{new}"}}\n{often}\n')
        result = CliRunner().invoke(
            main,
            ["rewrites", "warm", "--kb", KB, "--strategy", "prf", "--file", str(listed),
             "--proxy", url],
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "0 rewritten and cached, 2 already cached" in result.output


def test_warm_needs_exactly_one_source_of_queries() -> None:
    result = CliRunner().invoke(main, ["rewrites", "warm", "--kb", KB])
    assert result.exit_code == 2 and "exactly one of --from-log N and --file FILE" in result.output


def test_warming_a_kb_that_is_not_there_or_through_what_is_not_kgqr_says_so(
    settings: Settings, tmp_path: Path
) -> None:
    """A mistyped --kb with --file, or a proxy that refuses (a secured cluster without
    --user, a URL that is OpenSearch's), ended in a traceback."""
    listed = tmp_path / "queries.txt"
    listed.write_text("heat\n")
    typo = CliRunner().invoke(
        main, ["rewrites", "warm", "--kb", "no-such-kb", "--file", str(listed)]
    )
    assert typo.exit_code == 1 and "no knowledge base 'no-such-kb'" in typo.output, typo.output
    engine = CliRunner().invoke(main, ["rewrites", "warm", "--kb", KB, "--file", str(listed),
                                       "--proxy", settings.opensearch.url])  # fmt: skip
    assert engine.exit_code == 1, engine.output
    refused = f"the proxy answered a search of {schema.documents_index(KB)} with 400"
    assert refused in engine.output, engine.output
