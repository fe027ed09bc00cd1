"""OpenSearch's `filter_path` response filtering, for the answers kgqr writes itself.

kgqr asks OpenSearch for whole answers (it needs each hit's id and score to fuse rankings,
the totals to put back the caller's, each item of an msearch), so the caller's filter is
applied here, to the answer as it leaves kgqr. Passed on instead, it broke them: a fused
search filtered to `took` had no hits left to fuse (a 500), and an msearch's
`responses.hits.hits._id` matched nothing in each item's own answer.

The rules are OpenSearch's (checked against 2.19): comma-separated dotted paths, `*`
within a key (its only wildcard), `**` for one key or more, `-` before a path to exclude it;
includes apply first, then excludes; arrays are looked through, and an element or object
left with nothing matched is dropped (an msearch item included), `{}` if nothing is left.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase
from typing import Any

Path = tuple[str, ...]
_NOTHING = object()  # what is left of a value no include path matched


def filtered(answer: Any, filter_path: Sequence[str]) -> Any:
    interned: dict[Any, Any] = {}
    includes = [_parsed(path) for path in filter_path if path and path[0] != "-"]
    excludes = [_parsed(path[1:]) for path in filter_path if path[1:] and path[0] == "-"]
    if includes:
        answer = _include(answer, _Paths.of(includes, interned))
        if answer is _NOTHING:
            answer = {}
    return _exclude(answer, _Paths.of(excludes, interned)) if excludes else answer


def _parsed(path: str) -> Path:
    """A path's key patterns, with `**` below meaning *no key or more*. The engine's `**` is
    one key or more (`**.took` keeps no top-level `took`, `hits.**.**` no `max_score`),
    so it is read as `*` then `**`; at the end, `**` is the whole value, which no more
    keys need to reach."""
    keys: list[str] = []
    for key in path.split("."):
        keys.extend(("*", "**") if key == "**" else (key,))
    while keys[-1:] == ["**"]:
        keys.pop()
    return tuple(keys)


class _Steps:
    """Paths indexed by the key pattern each must match next: a pattern without `*` is
    looked up, only the others are matched one by one. A caller may list hundreds of paths
    (as many as fit in the URL); matching each new key against all of them cost the
    answer's distinct keys times the paths (0.9 s for 519 `**.zN` paths over 4,000
    aggregations)."""

    __slots__ = ("_exact", "_patterns")

    def __init__(self, pairs: Iterable[tuple[str, Path]]) -> None:
        self._exact: dict[str, list[Path]] = {}
        self._patterns: list[tuple[str, Path]] = []
        for pattern, rest in pairs:
            if "*" in pattern:
                self._patterns.append((_glob(pattern), rest))
            else:
                self._exact.setdefault(pattern, []).append(rest)

    def after(self, key: str) -> list[Path]:
        """What is left of the paths whose next pattern matches `key`."""
        found = list(self._exact.get(key, ()))
        found += [rest for pattern, rest in self._patterns if fnmatchcase(key, pattern)]
        return found


def _glob(pattern: str) -> str:
    """`pattern` for fnmatch with `*` its only wildcard, as OpenSearch's."""
    return pattern.replace("[", "[[]").replace("?", "[?]")


class _Stars:
    """The `**` paths at one place. Each stays at every level below it, so they are kept
    as one group, stepped as one: the same object below every key that starts no new one."""

    __slots__ = ("paths", "steps")

    def __init__(self, paths: tuple[Path, ...]) -> None:
        self.paths = paths
        self.steps = _Steps((path[1], path[2:]) for path in paths if len(path) > 1)

    @classmethod
    def of(cls, paths: Iterable[Path], interned: dict[Any, Any]) -> _Stars:
        key = ("**", tuple(dict.fromkeys(paths)))
        if (found := interned.get(key)) is None:
            found = interned[key] = cls(key[1])
        return found


class _Paths:
    """The paths left at one place in the answer, each step below it worked out once.

    An answer repeats the same few keys in every hit and floats by the hundred in every
    vector: stepping each key again for every hit cost the answer's size times the paths'
    number. Once per distinct (paths, key), the rest is a dictionary lookup."""

    __slots__ = ("_below", "_interned", "any", "others", "stars", "steps", "whole")

    def __init__(self, stars: _Stars, others: tuple[Path, ...], interned: dict[Any, Any]) -> None:
        self.stars = stars
        self.others = others  # the paths that do not start with `**`
        self.whole = () in others  # an empty path matches the whole value
        self.any = bool(stars.paths or others)
        self.steps = _Steps((path[0], path[1:]) for path in others if path)
        self._below: dict[str, _Paths] = {}
        self._interned = interned

    @classmethod
    def of(cls, paths: Iterable[Path], interned: dict[Any, Any]) -> _Paths:
        listed = list(dict.fromkeys(paths))
        stars = _Stars.of((path for path in listed if path[:1] == ("**",)), interned)
        return cls._interned_as(
            stars, tuple(path for path in listed if path[:1] != ("**",)), interned
        )

    @classmethod
    def _interned_as(
        cls, stars: _Stars, others: tuple[Path, ...], interned: dict[Any, Any]
    ) -> _Paths:
        key = (id(stars), others)
        if (found := interned.get(key)) is None:
            found = interned[key] = cls(stars, others, interned)
        return found

    def below(self, key: str) -> _Paths:
        if (found := self._below.get(key)) is None:
            found = self._below[key] = _below(self, key)
        return found


def _below(paths: _Paths, key: str) -> _Paths:
    """What is left of each path under `key`: a `**` path stays (it may match this key and
    more below it) and its rest steps on as if `**` matched no key at all.

    Each path left is kept once: a `**` path both stays and yields its rest at every
    level, so kept with repeats the list doubled with each level of nesting (2.8 s for
    an answer 16 levels deep)."""
    stars = paths.stars
    left = list(dict.fromkeys(stars.steps.after(key) + paths.steps.after(key)))
    started = [path for path in left if path[:1] == ("**",)]
    if started and not set(started) <= set(stars.paths):
        stars = _Stars.of([*stars.paths, *started], paths._interned)
    others = tuple(path for path in left if path[:1] != ("**",))
    return _Paths._interned_as(stars, others, paths._interned)


def _include(value: Any, paths: _Paths) -> Any:
    if paths.whole:
        return value
    if isinstance(value, dict):
        kept = {}
        for key, inner in value.items():
            below = paths.below(str(key))
            if below.any and (found := _include(inner, below)) is not _NOTHING:
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
            kept[key] = _exclude(inner, below) if below.any else inner
        return kept
    if isinstance(value, list):
        return [_exclude(item, paths) for item in value]
    return value
