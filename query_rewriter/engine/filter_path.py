"""OpenSearch's `filter_path` response filtering, for the answers kgqr writes itself.

kgqr asks OpenSearch for whole answers (it needs each hit's id and score to fuse rankings,
the totals to put back the caller's, each item of an msearch), so the caller's filter is
applied here, to the answer as it leaves kgqr. Passed on instead, it broke them: a fused
search filtered to `took` had no hits left to fuse (a 500), and an msearch's
`responses.hits.hits._id` matched nothing in each item's own answer.

The rules are OpenSearch's (checked against 2.19): comma-separated dotted paths, `*`
within a key, `**` for any number of keys (none too), `-` before a path to exclude it;
includes apply first, then excludes; arrays are looked through, and an element or object
left with nothing matched is dropped (an msearch item included), `{}` if nothing is left.
"""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase
from typing import Any

Path = tuple[str, ...]
_NOTHING = object()  # what is left of a value no include path matched


def filtered(answer: Any, filter_path: Sequence[str]) -> Any:
    interned: dict[tuple[Path, ...], _Paths] = {}
    includes = [tuple(path.split(".")) for path in filter_path if path and path[0] != "-"]
    excludes = [tuple(path[1:].split(".")) for path in filter_path if path[1:] and path[0] == "-"]
    if includes:
        answer = _include(answer, _Paths.of(includes, interned))
        if answer is _NOTHING:
            answer = {}
    return _exclude(answer, _Paths.of(excludes, interned)) if excludes else answer


class _Paths:
    """The paths left at one place in the answer, each step below it worked out once.

    A caller may list hundreds of paths (as many as fit in the URL), and an answer repeats
    the same few keys in every hit and floats by the hundred in every vector: stepping each
    key through every path again, and scanning them all for each float, cost the answer's
    size times the paths' number (a quarter of a second for 600 paths over ten hits). Once
    per distinct (paths, key), the rest is a dictionary lookup."""

    __slots__ = ("_below", "_interned", "paths", "whole")

    def __init__(self, paths: tuple[Path, ...], interned: dict[tuple[Path, ...], _Paths]) -> None:
        self.paths = paths
        self.whole = () in paths  # an empty path matches the whole value
        self._below: dict[str, _Paths] = {}
        self._interned = interned

    @classmethod
    def of(cls, paths: Sequence[Path], interned: dict[tuple[Path, ...], _Paths]) -> _Paths:
        key = tuple(dict.fromkeys(paths))
        if (found := interned.get(key)) is None:
            found = interned[key] = cls(key, interned)
        return found

    def below(self, key: str) -> _Paths:
        if (found := self._below.get(key)) is None:
            found = self._below[key] = _Paths.of(_below(self.paths, key), self._interned)
        return found


def _below(paths: Sequence[Path], key: str) -> list[Path]:
    """What is left of each path under `key`; an empty one matches the whole value.

    Each path left is kept once: a `**` path both stays and yields its rest at every
    level, so kept with repeats the list doubled with each level of nesting (2.8 s for
    an answer 16 levels deep). Once each, it never holds more than the suffixes of the
    caller's paths, and filtering stays linear in the answer's size."""
    left: dict[Path, None] = {}
    for path in paths:
        head, rest = path[0], path[1:]
        if head == "**":
            left[path] = None  # `**` may match this key and more below it
            if not rest:
                left[()] = None
            elif fnmatchcase(key, rest[0]):
                left[rest[1:]] = None  # or match no key at all
        elif fnmatchcase(key, head):
            left[rest] = None
    return list(left)


def _include(value: Any, paths: _Paths) -> Any:
    if paths.whole:
        return value
    if isinstance(value, dict):
        kept = {}
        for key, inner in value.items():
            below = paths.below(str(key))
            if below.paths and (found := _include(inner, below)) is not _NOTHING:
                kept[key] = found
        return kept or _NOTHING
    if isinstance(value, list):
        items = [found for item in value if (found := _include(item, paths)) is not _NOTHING]
        return items or _NOTHING
    return _NOTHING


def _exclude(value: Any, paths: _Paths) -> Any:
    if isinstance(value, dict):
        kept = {}
        for key, inner in value.items():
            below = paths.below(str(key))
            if below.whole:
                continue
            kept[key] = _exclude(inner, below) if below.paths else inner
        return kept
    if isinstance(value, list):
        return [_exclude(item, paths) for item in value]
    return value
