"""Prompt templates, one text file each; ``$name`` placeholders (string.Template), so JSON
examples inside a prompt need no escaping."""

from __future__ import annotations

from importlib import resources
from string import Template


def render(name: str, **values: object) -> str:
    """The named template with every placeholder filled; a missing value is an error."""
    text = resources.files(__name__).joinpath(f"{name}.txt").read_text(encoding="utf-8")
    return Template(text).substitute({key: str(value) for key, value in values.items()})
