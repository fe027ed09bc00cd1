"""The nginx front's stub_status, parsed and rendered for kgqr's /_kgqr/metrics."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from query_rewriter.proxy.front_status import (
    FrontCounters,
    parse_stub_status,
    read_fronts,
    render_fronts,
)

# As nginx 1.22 writes it, trailing spaces included.
PAGE = (
    "Active connections: 2 \n"
    "server accepts handled requests\n"
    " 16 15 31 \n"
    "Reading: 0 Writing: 1 Waiting: 1 \n"
)


def test_the_stub_status_page_is_read_field_by_field() -> None:
    assert parse_stub_status(PAGE) == FrontCounters(
        accepted=16, handled=15, requests=31, active=2, reading=0, writing=1, waiting=1
    )


def test_a_page_that_is_not_stub_status_is_refused() -> None:
    with pytest.raises(ValueError, match="stub_status"):
        parse_stub_status("<html>502 Bad Gateway</html>")


def test_each_front_is_labelled_by_its_port() -> None:
    text = render_fronts(
        {"9202": parse_stub_status(PAGE), "9302": FrontCounters(1, 1, 5, 1, 0, 1, 0)}
    ).decode()
    assert 'kgqr_front_requests_total{front_port="9202"} 31.0' in text
    assert 'kgqr_front_requests_total{front_port="9302"} 5.0' in text
    assert 'kgqr_front_connections_total{front_port="9202",outcome="handled"} 15.0' in text
    assert 'kgqr_front_open_connections{front_port="9202",state="waiting"} 1.0' in text


def test_without_a_front_nothing_is_added() -> None:
    assert render_fronts({}) == b""


def test_a_socket_nobody_listens_on_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "9202.sock").touch()  # what a killed front can leave behind
    assert asyncio.run(read_fronts(tmp_path)) == {}
    assert asyncio.run(read_fronts(tmp_path / "missing")) == {}
