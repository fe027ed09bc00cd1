"""Judged query sets: each loader yields `JudgedQuery` with ids that match what ingest
wrote for the same source, so a ranked list from OpenSearch can be scored directly.

A query set is named ``KIND:PATH`` like an ingest source:

- ``stark:DIR``    STaRK QA (``stark_qa.csv`` + split files ``{train,val,test}.index``;
                   split ``human`` is ``stark_qa_human_generated_eval.csv``); answer ids
                   are STaRK node ids, as the ``stark:`` ingest source keys documents.
- ``musique:DIR``  ``queries_{split}.json``; gold = ``is_supporting`` paragraphs, matched
                   to corpus passages by exact (title, text) since titles repeat.
- ``hotpotqa:DIR`` ``queries_{split}.json``; gold = the titles in ``supporting_facts``.
- ``jsonl:FILE``   one judged query per line (see docs/architecture.md, "Judgments").
"""

from __future__ import annotations

import ast
import csv
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ijson

from kgqr_core.ids import passage_id
from kgqr_core.text_files import TEXT_ENCODING


class QuerySetError(ValueError):
    """A query set that cannot be read; the message says which file and line."""


@dataclass(frozen=True)
class JudgedQuery:
    id: str
    text: str
    judgments: dict[str, float] = field(default_factory=dict)  # doc id -> grade (> 0 relevant)

    def as_jsonl_line(self) -> str:
        """The line `jsonl` reads back as this query (every grade written, 0 included)."""
        record = {"id": self.id, "query": self.text, "grades": dict(sorted(self.judgments.items()))}
        return json.dumps(record, ensure_ascii=False) + "\n"


def _existing(path: Path) -> Path:
    if not path.is_file():
        raise QuerySetError(f"{path}: no such file")
    return path


def _read_json(path: Path) -> Any:
    _existing(path)
    try:
        return json.loads(path.read_text(encoding=TEXT_ENCODING))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise QuerySetError(f"{path}: not JSON ({exc})") from exc


def _split_file(directory: Path, split: str) -> Path:
    return directory / f"queries_{split}.json"


def musique(directory: Path, split: str = "dev") -> Iterator[JudgedQuery]:
    with _existing(directory / "corpus.json").open("rb") as corpus:
        position = {
            (p["title"], p["text"]): passage_id(i)
            for i, p in enumerate(ijson.items(corpus, "item"))
        }
    for q in _read_json(_split_file(directory, split)):
        gold = {}
        for paragraph in q["paragraphs"]:
            if not paragraph["is_supporting"]:
                continue
            key = (paragraph["title"], paragraph["paragraph_text"])
            if key not in position:
                raise QuerySetError(f"{q['id']}: gold paragraph {key[0]!r} is not in the corpus")
            gold[position[key]] = 1.0
        yield JudgedQuery(str(q["id"]), q["question"], gold)


def hotpotqa(directory: Path, split: str = "dev") -> Iterator[JudgedQuery]:
    with _existing(directory / "corpus.json").open("rb") as corpus:
        position = {title: passage_id(i) for i, (title, _) in enumerate(ijson.kvitems(corpus, ""))}
    for q in _read_json(_split_file(directory, split)):
        titles = dict.fromkeys(title for title, _sentence in q["supporting_facts"])
        missing = [t for t in titles if t not in position]
        if missing:
            raise QuerySetError(f"{q['_id']}: supporting titles not in the corpus: {missing}")
        yield JudgedQuery(str(q["_id"]), q["question"], {position[t]: 1.0 for t in titles})


STARK_SPLITS = ("train", "val", "test", "human")


def stark(directory: Path, split: str = "test") -> Iterator[JudgedQuery]:
    if split not in STARK_SPLITS:
        raise QuerySetError(f"STaRK split must be one of {', '.join(STARK_SPLITS)}, not {split!r}")
    if split == "human":
        rows_file, wanted = directory / "stark_qa_human_generated_eval.csv", None
    else:
        rows_file = directory / "stark_qa.csv"
        index_file = next(
            (
                p
                for p in (directory / f"{split}.index", directory / "split" / f"{split}.index")
                if p.is_file()
            ),
            None,
        )
        if index_file is None:
            raise QuerySetError(f"{directory}: no {split}.index split file")
        lines = index_file.read_text(encoding=TEXT_ENCODING).splitlines()
        wanted = {line.strip() for line in lines if line.strip()}
    with _existing(rows_file).open(newline="", encoding=TEXT_ENCODING) as stream:
        for line, row in enumerate(csv.DictReader(stream), start=2):
            if wanted is not None and row["id"] not in wanted:
                continue
            try:
                answers = ast.literal_eval(row["answer_ids"])
            except (ValueError, SyntaxError) as exc:
                raise QuerySetError(f"{rows_file}:{line}: answer_ids is not a list") from exc
            yield JudgedQuery(row["id"], row["query"], {str(a): 1.0 for a in answers})


def jsonl(path: Path, split: str | None = None) -> Iterator[JudgedQuery]:
    """``{"id": "q1", "query": "...", "relevant": ["d1", "d2"], "grades": {"d1": 2}}``;
    ``id`` defaults to the line number, ``grades`` to 1 for each relevant id."""
    with _existing(path).open(encoding=TEXT_ENCODING) as stream:
        for line_no, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            where = f"{path}:{line_no}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise QuerySetError(f"{where}: not JSON ({exc.msg})") from exc
            if not isinstance(record, dict) or not isinstance(record.get("query"), str):
                raise QuerySetError(f"{where}: needs a string field 'query'")
            relevant = record.get("relevant", [])
            grades = record.get("grades", {})
            if not isinstance(relevant, list) or not isinstance(grades, dict):
                raise QuerySetError(f"{where}: 'relevant' must be a list, 'grades' an object")
            judgments = {str(doc): 1.0 for doc in relevant}
            try:
                judgments.update({str(doc): float(g) for doc, g in grades.items()})
            except (TypeError, ValueError) as exc:
                raise QuerySetError(f"{where}: grades must be numbers") from exc
            yield JudgedQuery(str(record.get("id", line_no)), record["query"], judgments)


LOADERS: dict[str, tuple[Callable[[Path, str], Iterator[JudgedQuery]], str]] = {
    "stark": (stark, "test"),
    "musique": (musique, "dev"),
    "hotpotqa": (hotpotqa, "dev"),
    "jsonl": (jsonl, ""),
}


def load_query_set(
    spec: str, split: str | None = None, limit: int | None = None
) -> list[JudgedQuery]:
    """The judged queries of ``KIND:PATH`` (see the module docstring), first `limit` only."""
    kind, _, path = spec.partition(":")
    if kind not in LOADERS or not path:
        raise QuerySetError(
            f"query set must be KIND:PATH with KIND one of {', '.join(LOADERS)}; got {spec!r}"
        )
    loader, default_split = LOADERS[kind]
    try:
        where = Path(path).expanduser()
    except RuntimeError as exc:  # `~nosuchuser/...`
        raise QuerySetError(f"{path}: {exc}") from None
    queries: list[JudgedQuery] = []
    seen: set[str] = set()
    for query in _read_as(kind, spec, loader(where, split or default_split)):
        if limit is not None and len(queries) >= limit:
            break
        if query.id in seen:
            # Comparisons pair queries by id: the second silently replaced the first there,
            # while the table averaged both.
            raise QuerySetError(f"{spec}: query id {query.id!r} is given twice; ids must differ")
        seen.add(query.id)
        queries.append(query)
    return queries


def _read_as(kind: str, spec: str, queries: Iterator[JudgedQuery]) -> Iterator[JudgedQuery]:
    """`queries`, a file of another kind (or encoding) said in one line: a MuSiQue folder
    read as HotpotQA, a CSV without its column, ended in a traceback."""
    try:
        yield from queries
    except KeyError as exc:
        raise QuerySetError(f"{spec}: not a {kind} query set (no field {exc})") from exc
    except (TypeError, AttributeError) as exc:
        raise QuerySetError(f"{spec}: not a {kind} query set ({exc})") from exc
    except (UnicodeDecodeError, ijson.JSONError, csv.Error) as exc:
        raise QuerySetError(f"{spec}: cannot be read as a {kind} query set ({exc})") from exc
