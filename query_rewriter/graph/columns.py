"""Strings, and where each one is, as flat arrays: what lets a graph copy be a handful of
arrays that one process writes to files and every other maps (graph/shared_copies.py).

A list of a million Python strings and a dict over them held most of a copy's memory, and
neither can be shared between processes. A UTF-8 blob with offsets, and a sorted table of
64-bit hashes, can; a search decodes only the few strings its answer shows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np


def key_hash(text: str) -> int:
    """A hash that is the same in every process (Python's own `hash` of a str is not)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


@dataclass(frozen=True)
class StringColumn:
    """String i is blob[offsets[i]:offsets[i + 1]]; `missing` marks the Nones."""

    blob: np.ndarray  # uint8
    offsets: np.ndarray  # int64, one more than there are strings
    missing: np.ndarray  # bool

    @classmethod
    def of(cls, values: Sequence[str | None]) -> StringColumn:
        encoded = [(value or "").encode() for value in values]
        offsets = np.zeros(len(encoded) + 1, np.int64)
        offsets[1:] = np.cumsum(np.fromiter(map(len, encoded), np.int64, count=len(encoded)))
        return cls(
            blob=np.frombuffer(b"".join(encoded), np.uint8),
            offsets=offsets,
            missing=np.fromiter((value is None for value in values), bool, count=len(values)),
        )

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, number: int) -> str:
        return bytes(self.blob[self.offsets[number] : self.offsets[number + 1]]).decode()

    def get(self, number: int) -> str | None:
        return None if self.missing[number] else self[number]

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        return {f"{name}.blob": self.blob, f"{name}.offsets": self.offsets,
                f"{name}.missing": self.missing}  # fmt: skip

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], name: str) -> StringColumn:
        return cls(arrays[f"{name}.blob"], arrays[f"{name}.offsets"], arrays[f"{name}.missing"])


@dataclass(frozen=True)
class KeyIndex:
    """The number of each string of a column, found by its hash: `hashes` sorted, and
    `numbers` the string each hash is of (a collision is told apart by the string)."""

    keys: StringColumn
    hashes: np.ndarray  # uint64, sorted
    numbers: np.ndarray  # int64

    @classmethod
    def of(cls, keys: StringColumn, texts: Iterable[str]) -> KeyIndex:
        hashes = np.fromiter(map(key_hash, texts), np.uint64, count=len(keys))
        order = np.argsort(hashes, kind="stable")
        return cls(keys, hashes[order], order.astype(np.int64))

    def find(self, key: str) -> int | None:
        wanted = np.uint64(key_hash(key))
        at = int(np.searchsorted(self.hashes, wanted))
        while at < len(self.hashes) and self.hashes[at] == wanted:
            number = int(self.numbers[at])
            if self.keys[number] == key:
                return number
            at += 1
        return None

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        return {f"{name}.hashes": self.hashes, f"{name}.numbers": self.numbers}

    @classmethod
    def from_arrays(cls, keys: StringColumn, arrays: dict[str, np.ndarray], name: str) -> KeyIndex:
        return cls(keys, arrays[f"{name}.hashes"], arrays[f"{name}.numbers"])
