from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest.chunking import chunks
from ingest.records import CorpusTriple, Document, Mention, Rejected, Relation
from ingest.sources import open_source
from tests.fixtures.stark_layout import EDGES, NODES, write_stark_layout
from tests.shared_data import SHARED_DATA, needs_shared_data

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def _by_kind(records: list) -> dict[type, list]:
    grouped: dict[type, list] = {}
    for record in records:
        grouped.setdefault(type(record), []).append(record)
    return grouped


def test_jsonl_source_yields_documents_then_relations() -> None:
    records = list(open_source(f"jsonl:{FIXTURES / 'tiny_kb'}").records())
    kinds = [type(r) for r in records]
    assert kinds == [Document] * 8 + [Relation] * 9
    heat = records[0]
    assert isinstance(heat, Document)
    assert heat.title == "Heat" and heat.fields["year"] == 1995
    assert "plot: A group of professional bank robbers" in heat.body()


def test_jsonl_source_rejects_bad_lines_with_reasons() -> None:
    grouped = _by_kind(list(open_source(f"jsonl:{FIXTURES / 'broken_kb'}").records()))
    assert [d.id for d in grouped[Document]] == ["ok1", "ok2", "ok3", "ok4"]
    assert len(grouped[Relation]) == 2
    reasons = [r.reason for r in grouped[Rejected]]
    assert len(reasons) == 6
    assert any("documents.jsonl:3" in r for r in reasons)  # truncated JSON
    assert any("documents.jsonl:4" in r and "id" in r for r in reasons)  # missing id
    assert any("colour" in r for r in reasons)  # unknown key
    assert any("relations.jsonl:3" in r for r in reasons)


@pytest.mark.parametrize("kind", ["jsonl", "passages"])
def test_a_windows_export_lands_and_a_latin1_line_is_set_aside_saying_why(
    tmp_path: Path, kind: str
) -> None:
    """A byte-order mark set the first record aside ("Unexpected UTF-8 BOM"), and a line
    that is not UTF-8 landed with its letters replaced, unreported."""
    lines = [
        '{"id": "a", "type": "note", "title": "Café", "text": "Crème brûlée"}'.encode(),
        '{"id": "b", "type": "note", "title": "Café", "text": "Latin-1"}'.encode("latin-1"),
        b'{"id": "c", "type": "note", "title": "Last", "text": "after"}',
    ]
    path = tmp_path / "documents.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b"\r\n".join(lines) + b"\r\n")
    grouped = _by_kind(list(open_source(f"{kind}:{path}").records()))
    assert [(d.id, d.title) for d in grouped[Document]] == [("a", "Café"), ("c", "Last")]
    assert "Crème brûlée" in grouped[Document][0].body()
    (rejected,) = grouped[Rejected]
    assert "documents.jsonl:2" in rejected.reason and "not UTF-8 (byte 41" in rejected.reason
    assert "\ufffd" in rejected.raw


def test_limit_caps_documents() -> None:
    records = list(open_source(f"jsonl:{FIXTURES / 'tiny_kb'}", limit=3).records())
    assert sum(isinstance(r, Document) for r in records) == 3


def test_unknown_source_kind_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="jsonl, stark, musique"):
        open_source("csv:/tmp")


def test_stark_layout_becomes_typed_documents_and_relations(tmp_path: Path) -> None:
    source = open_source(f"stark:{write_stark_layout(tmp_path / 'prime')}")
    grouped = _by_kind(list(source.records()))
    documents = {d.id: d for d in grouped[Document]}
    assert len(documents) == len(NODES)
    assert documents["4"].type == "drug" and documents["4"].title == "adalimumab"
    assert "TNF-blocking" in documents["4"].body()
    relations = {(r.source, r.type, r.target) for r in grouped[Relation]}
    assert len(relations) == len(EDGES)
    assert ("4", "indication", "1") in relations
    assert source.structure().relations == ["associated with", "target", "indication"]


def test_stark_limit_keeps_only_relations_between_kept_nodes(tmp_path: Path) -> None:
    source = open_source(f"stark:{write_stark_layout(tmp_path / 'prime')}", limit=3)
    grouped = _by_kind(list(source.records()))
    assert {d.id for d in grouped[Document]} == {"0", "1", "2"}
    assert {(r.source, r.target) for r in grouped[Relation]} == {("0", "2"), ("1", "2")}


def test_stark_folder_missing_files_is_explained(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"node_info\.pkl"):
        open_source(f"stark:{tmp_path}")


@pytest.mark.parametrize(
    ("kind", "shape", "said"),
    [
        ("musique", "folder", "is not a musique folder: missing corpus.json"),
        ("hotpotqa", "folder", "is not a hotpotqa folder: missing corpus.json"),
        ("hotpotqa-kg", "folder", "is not a hotpotqa-kg folder: missing corpus.json"),
        ("jsonl", "folder", "is not a jsonl folder: missing documents.jsonl"),
        ("passages", "folder", "is a folder: passages reads one file"),
        ("musique", "file", "is a file: musique reads a folder holding corpus.json"),
    ],
)
def test_a_path_a_source_cannot_read_is_refused_when_opened(
    tmp_path: Path, kind: str, shape: str, said: str
) -> None:
    """Found only when the job read its records, these ended `kgqr ingest` on a
    FileNotFoundError or IsADirectoryError traceback."""
    path = tmp_path
    if shape == "file":
        path = tmp_path / "notes.jsonl"
        path.write_text("{}\n")
    with pytest.raises(FileNotFoundError, match=said):
        open_source(f"{kind}:{path}")


@needs_shared_data("musique100")
def test_musique_passages_keyed_by_position_with_openie_graph() -> None:
    grouped = _by_kind(
        list(open_source(f"musique:{SHARED_DATA / 'musique100'}", limit=5).records())
    )
    assert [d.id for d in grouped[Document]] == ["p0", "p1", "p2", "p3", "p4"]
    assert grouped[Document][0].title == "Journal of Mathematical Physics"
    triples = grouped[CorpusTriple]
    assert {t.passage_id for t in triples} <= {"p0", "p1", "p2", "p3", "p4"}
    assert any(
        (t.head, t.relation, t.tail)
        == ("Journal of Mathematical Physics", "published by", "American Institute of Physics")
        for t in triples
    )
    assert any(m.entity == "Jan Philip Solovej" for m in grouped[Mention])


@needs_shared_data("hotpotqa100")
def test_hotpotqa_sentences_joined_into_passages() -> None:
    first = next(open_source(f"hotpotqa:{SHARED_DATA / 'hotpotqa100'}", limit=2).records())
    assert isinstance(first, Document)
    assert first.title == "Demon Dice"
    assert first.body().startswith("Demon Dice, originally published as Chaos Progenitus")


def test_array_items_stop_before_trailing_nan() -> None:
    import io

    from ingest.sources.corpus_qa import array_items

    raw = b'{"docs": [{"a": [1, {"b": 2}]}, {"a": []}, 3], "avg": NaN}'
    assert list(array_items(io.BytesIO(raw), "docs")) == [{"a": [1, {"b": 2}]}, {"a": []}, 3]


def test_chunks_take_many_graph_only_records_per_embedded_one() -> None:
    from ingest.chunking import GRAPH_ONLY_PER_EMBEDDED, chunks
    from ingest.records import Document, Relation

    class Records:
        def __init__(self, records: list[Document | Relation]) -> None:
            self._records = records

        def read_records(self) -> list[Document | Relation]:
            return self._records

    docs = [Document(id=f"d{i}", type="note", title=f"d{i}") for i in range(10)]
    rels = [Relation(source="d0", type="cites", target=f"d{i}") for i in range(100)]
    assert [len(c) for c in chunks(Records(docs), 4)] == [4, 4, 2]  # type: ignore[arg-type]
    per_chunk = 2 * GRAPH_ONLY_PER_EMBEDDED
    relation_only = [len(c) for c in chunks(Records(rels * 3), 2)]  # type: ignore[arg-type]
    assert relation_only == [per_chunk, per_chunk, 300 - 2 * per_chunk]
    mixed = [len(c) for c in chunks(Records([*rels[:5], *docs[:3]]), 2)]  # type: ignore[arg-type]
    assert mixed == [7, 1]


class _RunsCode:
    """What a crafted pickle looks like: loading it calls a function of the author's."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        import os

        return (os.system, ("touch /tmp/kgqr-pwned",))


def test_a_crafted_stark_pickle_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    import pickle

    from ingest.sources.stark import UnsafePickleError

    folder = write_stark_layout(tmp_path / "crafted")
    marker = Path("/tmp/kgqr-pwned")
    marker.unlink(missing_ok=True)
    with (folder / "node_type_dict.pkl").open("wb") as out:
        pickle.dump({0: _RunsCode()}, out)
    with pytest.raises(UnsafePickleError, match=r"posix\.system|os\.system"):
        open_source(f"stark:{folder}").structure()
    assert not marker.exists()


def test_a_source_its_loader_cannot_read_to_the_end_is_said_with_where(tmp_path: Path) -> None:
    """A truncated corpus.json ended `kgqr ingest` on an ijson traceback naming no file."""
    from ingest.chunking import chunks
    from ingest.sources.base import SourceError

    (tmp_path / "corpus.json").write_text('[{"title": "A", "text": "x"}, {"title": "B", "te')
    with pytest.raises(SourceError) as raised:
        list(chunks(open_source(f"musique:{tmp_path}"), 10))
    assert str(raised.value).startswith(f"musique:{tmp_path}: reading stopped after 1 records")
    assert "IncompleteJSONError" in str(raised.value) and "\n" not in str(raised.value)


def test_a_passage_that_breaks_a_records_rules_is_set_aside_and_the_rest_read(
    tmp_path: Path,
) -> None:
    """A passage without a title (a KeyError) or with one over 1,024 characters (a
    pydantic error) stopped the whole ingest instead of being set aside."""
    corpus = [{"title": "A", "text": "x"}, {"text": "no title"},
              {"title": "T" * 2000, "text": "y"}, {"title": "D", "text": "z"}]  # fmt: skip
    (tmp_path / "corpus.json").write_text(json.dumps(corpus))
    # Each passage's OpenIE graph: one set aside gets none (its node would have no document).
    docs = [{"extracted_entities": [f"e{i}"], "extracted_triples": [[f"e{i}", "r", "x"]]}
            for i in range(4)]  # fmt: skip
    (tmp_path / "openie_test.json").write_text(json.dumps({"docs": docs}))
    records = list(open_source(f"musique:{tmp_path}").records())
    assert [r.id for r in records if isinstance(r, Document)] == ["p0", "p3"]
    reasons = [r.reason for r in records if isinstance(r, Rejected)]
    assert reasons[0].startswith("corpus.json item 1: title: ") and len(reasons) == 2
    assert reasons[1].startswith("corpus.json item 2: title: ")
    graphed = {r.passage_id for r in records if isinstance(r, Mention | CorpusTriple)}
    assert graphed == {"p0", "p3"}


def test_an_openie_name_no_record_can_hold_is_set_aside_and_the_rest_read(
    tmp_path: Path,
) -> None:
    """An entity over 512 characters stopped the whole read, and an item that is not an
    object was an AttributeError; so did a HotpotQA title over 512 (a passage's may be
    1,024) as a KG-CQR entity."""
    corpus = [{"title": f"T{i}", "text": "x"} for i in range(3)]
    (tmp_path / "corpus.json").write_text(json.dumps(corpus))
    docs = [{"extracted_entities": ["e0", "e" * 600, ["x"]],
             "extracted_triples": [["e0", "r", "x"]]},
            "not an object", {"extracted_entities": ["e2"], "extracted_triples": 7}]  # fmt: skip
    (tmp_path / "openie_test.json").write_text(json.dumps({"docs": docs}))
    records = list(open_source(f"musique:{tmp_path}").records())
    assert sorted(r.entity for r in records if isinstance(r, Mention)) == ["e0", "e2"]
    reasons = [r.reason for r in records if isinstance(r, Rejected)]
    assert len(reasons) == 4 and reasons[0] == "p0: OpenIE entity is not a string"
    assert reasons[1].startswith("p0: entity: ")
    assert reasons[2:] == ["p1: OpenIE item is not an object",
                           "p2: OpenIE extracted_triples is not a list"]  # fmt: skip
    long_title = "Heat " + "x" * 600
    hotpot = tmp_path / "hotpot"
    hotpot.mkdir()
    (hotpot / "corpus.json").write_text(json.dumps({"Heat": ["A film."], long_title: ["B."],
                                                    "Pacino": ["He was in Heat."]}))  # fmt: skip
    made = list(open_source(f"hotpotqa-kg:{hotpot}").records())
    assert [r.id for r in made if isinstance(r, Document)] == ["p0", "p1", "p2"]
    assert any(isinstance(r, Rejected) and r.reason.startswith("p1: title: ") for r in made)
    assert ("Pacino", "Heat") in [(t.head, t.tail) for t in made if isinstance(t, CorpusTriple)]


def test_a_hotpotqa_passage_set_aside_is_linked_to_by_none(tmp_path: Path) -> None:
    """Its title still fed the title linker: links pointed at a node with no document."""
    long_title = "Heat " + "x" * 2000
    corpus = {"Heat": ["A film."], long_title: ["Another."],
              "Pacino": ["He starred in Heat and in " + long_title + "."]}  # fmt: skip
    (tmp_path / "corpus.json").write_text(json.dumps(corpus))
    records = list(open_source(f"hotpotqa:{tmp_path}").records())
    assert [r.id for r in records if isinstance(r, Document)] == ["p0", "p2"]
    links = [(r.source, r.target) for r in records if isinstance(r, Relation)]
    assert links == [("p2", "p0")]


def test_a_record_nested_too_deep_is_set_aside_and_the_rest_land(tmp_path: Path) -> None:
    """300 levels could not be written into a chunk as JSON, and 2,000 were a
    RecursionError in the parser: either stopped the whole ingest, naming no line."""
    deep = {"fields": {"x": json.loads("[" * 300 + "]" * 300)}}
    lines = [
        '{"id": "a", "type": "note", "title": "First", "text": "one"}',
        json.dumps({"id": "b", "type": "note", "title": "Deep", **deep}),
        '{"id": "c", "type": "note", "title": "Deeper", "fields": {"x": '
        + "[" * 2000
        + "]" * 2000
        + "}}",
        '{"id": "d", "type": "note", "title": "Last", "text": "two"}',
    ]
    path = tmp_path / "documents.jsonl"
    path.write_text("\n".join(lines) + "\n")
    source = open_source(f"jsonl:{path}")
    grouped = _by_kind(list(source.records()))
    assert [d.id for d in grouped[Document]] == ["a", "d"]
    reasons = sorted(r.reason for r in grouped[Rejected])
    assert len(reasons) == 2 and all("nested deeper than 64 levels" in r for r in reasons)
    assert "documents.jsonl:2" in reasons[0] and "documents.jsonl:3" in reasons[1]
    assert sum(len(chunk) for chunk in chunks(source, 256)) == 4  # every chunk writable
