"""The configuration reference is the settings model's own, so it cannot drift from it."""

from __future__ import annotations

from pathlib import Path

from kgqr_core.config_reference import render
from kgqr_core.settings import FLAT

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_committed_reference_is_what_the_settings_model_renders() -> None:
    assert DOC.read_text() == render(), (
        "docs/configuration.md is stale: run `python -m kgqr_core.config_reference > "
        "docs/configuration.md`"
    )


def test_every_setting_has_a_row() -> None:
    text = render()
    for name in FLAT:
        assert f"`KGQR_{name.upper()}`" in text
