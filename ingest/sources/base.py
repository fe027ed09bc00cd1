"""The contract every source meets."""

from __future__ import annotations

import abc
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ijson
from pydantic import ValidationError

from ingest.records import Record, Rejected
from kgqr_core.text_files import TEXT_ENCODING
from plugin.kb_meta import DocumentStructure


class SourceError(ValueError):
    """A source that cannot be read to its end."""


def set_aside_unless_valid(
    where: str, raw: Any, make: Callable[..., Record], **values: Any
) -> Record:
    """`make(**values)`, or, where a value breaks a record's rules (a title over 1,024
    characters or none, a type name without letters or digits), that record set aside
    saying where and why: raised inside a loader, it stopped the whole ingest."""
    try:
        return make(**values)
    except ValidationError as exc:
        return Rejected(reason=f"{where}: {first_problem(exc)}"[:500], raw=repr(raw)[:4000])


def first_problem(exc: ValidationError) -> str:
    """A validation error's first problem as `field: why`: pydantic's own text names the
    model, not the file or record, and runs over several lines."""
    error = exc.errors()[0]
    field = ".".join(str(part) for part in error["loc"]) or "record"
    return f"{field}: {error['msg']}"


class Source(abc.ABC):
    kind: str
    # Passages without a graph ask ingest tasks to extract triples with the LLM.
    extract_triples: bool = False
    # What PATH may be: a folder holding `folder_files`, and/or one file.
    folder_files: tuple[str, ...] = ()
    reads_a_folder: bool = True
    reads_a_file: bool = False

    def __init__(self, path: Path, limit: int | None = None) -> None:
        self.path = path
        self.limit = limit
        self._check_path()

    def _check_path(self) -> None:
        """Refuse a PATH this source cannot read before any job starts: a folder without
        its files used to end `kgqr ingest` on a FileNotFoundError traceback."""
        if self.path.is_dir():
            if not self.reads_a_folder:
                raise FileNotFoundError(f"{self.path} is a folder: {self.kind} reads one file")
            missing = [name for name in self.folder_files if not (self.path / name).is_file()]
            if missing:
                raise FileNotFoundError(
                    f"{self.path} is not a {self.kind} folder: missing {', '.join(missing)}"
                )
        elif not self.reads_a_file:
            raise FileNotFoundError(
                f"{self.path} is a file: {self.kind} reads a folder holding "
                f"{', '.join(self.folder_files)}"
            )

    @abc.abstractmethod
    def records(self) -> Iterator[Record]:
        """Documents first, then what refers to them; Rejected for lines that don't parse."""

    def read_records(self) -> Iterator[Record]:
        """records(), with a loader's own failure (a passage without a title, a truncated
        corpus.json, an edge type STaRK does not list) said as the source's, with where it
        stopped: it ended `kgqr ingest` on a KeyError or ijson traceback naming no file."""
        count = 0
        try:
            for record in self.records():
                yield record
                count += 1
        except (KeyError, IndexError, TypeError, ValueError, ijson.JSONError) as exc:
            raise SourceError(
                f"{self.kind}:{self.path}: reading stopped after {count} records: "
                f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:1000]
                + " (the chunks sent before it have landed; fix the source and run again)"
            ) from exc

    @abc.abstractmethod
    def structure(self) -> DocumentStructure:
        """The document types and fields, as far as known before streaming."""

    def files(self) -> list[Path]:
        return (
            sorted(p for p in self.path.rglob("*") if p.is_file())
            if self.path.is_dir()
            else [self.path]
        )

    def check_unchanged(self) -> None:
        """Raise where the source changed since its job was cut, so that a stalled job's
        chunks, cut again, would not be the chunks their numbers name (files: a changed
        file is another job, by its fingerprint)."""
        return None

    def fingerprint(self) -> str:
        """Identifies this exact input (files, sizes, mtimes, limit): the same input gives
        the same job id, so a re-run resumes instead of starting over."""
        digest = hashlib.sha1(f"{self.kind}|{self.limit}".encode())
        for file in self.files():
            stat = file.stat()
            digest.update(f"|{file.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
        return digest.hexdigest()[:16]


@dataclass(frozen=True)
class JsonLine:
    """One non-blank line of a JSONL file: its value, or why it has none."""

    number: int
    raw: str  # as read (bytes that are not UTF-8 shown replaced), for the dead letters
    value: Any = None
    error: str | None = None

    def rejected(self, file: str, why: str | None = None) -> Rejected:
        """This line set aside, saying where it is and why (its own error by default)."""
        return Rejected(
            reason=f"{file}:{self.number}: {why or self.error}"[:500], raw=self.raw[:4000]
        )


# Deeper than any record kgqr reads needs; a record nested some 256 levels down could not be
# written as JSON into a chunk, and that stopped the whole ingest at it.
MAX_NESTING = 64
TOO_DEEP = f"nested deeper than {MAX_NESTING} levels"


def nesting_exceeds(value: Any, limit: int) -> bool:
    """Whether `value` nests lists and objects more than `limit` deep (walked without
    recursion, as such a value is what recursion fails on)."""
    below: list[tuple[Any, int]] = [(value, 0)]
    while below:
        item, depth = below.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            below.extend((child, depth + 1) for child in children)
    return False


def json_lines(path: Path, limit: int | None = None) -> Iterator[JsonLine]:
    """Each non-blank line of a JSONL file, parsed, the first `limit` of them.

    A byte-order mark (Windows editors and Excel's "UTF-8" write one) is not part of the
    first line: it made the first record "Unexpected UTF-8 BOM" and set it aside. A line
    that is not UTF-8 is an error of its own: decoded with replacements, a Latin-1 export's
    "Café" was ingested as "Caf\ufffd" and nothing said so."""
    kept = 0
    with path.open("rb") as stream:
        for number, data in enumerate(stream, start=1):
            error = None
            try:
                line = data.decode(TEXT_ENCODING)
            except UnicodeDecodeError as bad:
                byte = data[bad.start : bad.start + 1]
                error = f"not UTF-8 (byte {bad.start} is {byte!r}): save the file as UTF-8"
                line = data.decode(TEXT_ENCODING, "replace")
            if not line.strip():
                continue
            if limit is not None and kept >= limit:
                return
            kept += 1
            if error is not None:
                yield JsonLine(number, line, error=error)
                continue
            try:
                parsed = json.loads(line)
            except json.JSONDecodeError as exc:
                yield JsonLine(number, line, error=str(exc))
                continue
            except RecursionError:  # Python's parser recurses: a line of 1,000 `[`
                yield JsonLine(number, line[:4000], error=TOO_DEEP)
                continue
            if nesting_exceeds(parsed, MAX_NESTING):
                yield JsonLine(number, line[:4000], error=TOO_DEEP)
                continue
            yield JsonLine(number, line, parsed)
