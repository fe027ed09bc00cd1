from __future__ import annotations

import json
from pathlib import Path

from ingest.records import CorpusTriple, Document, Mention, Rejected, Relation
from ingest.sources import open_source
from ingest.title_links import TitleLinker, surface_forms


def test_disambiguation_dropped_only_when_two_words_remain() -> None:
    assert surface_forms("Lars Ulrich (drummer)") == {"Lars Ulrich (drummer)", "Lars Ulrich"}
    assert surface_forms("United (Marian Gold album)") == {"United (Marian Gold album)"}
    assert surface_forms("Metallica") == {"Metallica"}


def test_links_prefer_the_longest_title_and_skip_the_passage_itself() -> None:
    linker = TitleLinker(
        [("p0", "Metallica"), ("p1", "Metallica discography"), ("p2", "Lars Ulrich (drummer)")]
    )
    text = "The Metallica discography lists albums. Lars Ulrich co-founded Metallica."
    assert list(linker.targets("p9", text)) == ["p1", "p2", "p0"]
    assert list(linker.targets("p0", "Metallica, a band; see Metallica discography.")) == ["p1"]


def test_whole_words_only_and_shared_titles_link_to_every_holder() -> None:
    linker = TitleLinker([("p0", "Ra"), ("p1", "Dune"), ("p2", "Dune")])
    assert list(linker.targets("p9", "Rather dunes than Dunes, said Ra of Dune.")) == [
        "p0", "p1", "p2",
    ]  # fmt: skip
    assert list(TitleLinker([]).targets("p0", "anything")) == []


def _write_corpus(folder: Path) -> None:
    corpus = {
        "Kill Bill": ["Kill Bill is a film ", "by Quentin Tarantino.", " Quentin Tarantino."],
        "Quentin Tarantino": ["Quentin Tarantino directed Kill Bill."],
        "Broken": "not a list of sentences",
        "Uma Thurman": ["An actress."],
    }  # fmt: skip
    (folder / "corpus.json").write_text(json.dumps(corpus))


def test_hotpotqa_source_yields_documents_then_title_links(tmp_path: Path) -> None:
    _write_corpus(tmp_path)
    records = list(open_source(f"hotpotqa:{tmp_path}").records())
    kinds = [Document, Document, Rejected, Document, Relation, Relation]
    assert [type(r) for r in records] == kinds
    first, links = records[0], [r for r in records[4:] if isinstance(r, Relation)]
    assert isinstance(first, Document)
    assert first.body().startswith("Kill Bill is a film by Quentin Tarantino. Quentin")
    assert [(r.source, r.type, r.target) for r in links] == [
        ("p0", "links_to", "p1"),
        ("p1", "links_to", "p0"),
    ]
    # Read from the source passage's text: only a caller shown that text may follow it.
    assert [r.properties for r in links] == [{"passage_id": "p0"}, {"passage_id": "p1"}]
    limited = list(open_source(f"hotpotqa:{tmp_path}", limit=1).records())
    assert [type(r) for r in limited] == [Document]  # the title it names is past the limit


def test_hotpotqa_kg_writes_each_link_once_as_a_triple_with_its_sentence(tmp_path: Path) -> None:
    _write_corpus(tmp_path)
    records = list(open_source(f"hotpotqa-kg:{tmp_path}").records())
    assert [type(r) for r in records[:4]] == [Document, Document, Rejected, Document]
    graph = records[4:]
    assert not [r for r in graph if isinstance(r, Relation)]
    mentions = [(r.passage_id, r.entity) for r in graph if isinstance(r, Mention)]
    assert mentions == [
        ("p0", "Kill Bill"), ("p0", "Quentin Tarantino"),
        ("p1", "Quentin Tarantino"), ("p1", "Kill Bill"),
        ("p3", "Uma Thurman"),
    ]  # fmt: skip
    triples = [r for r in graph if isinstance(r, CorpusTriple)]
    assert [(t.passage_id, t.head, t.relation, t.tail, t.ttr, t.ttr_source) for t in triples] == [
        ("p0", "Kill Bill", "mentions", "Quentin Tarantino",
         "Kill Bill: by Quentin Tarantino.", "given"),
        ("p1", "Quentin Tarantino", "mentions", "Kill Bill",
         "Quentin Tarantino: Quentin Tarantino directed Kill Bill.", "given"),
    ]  # fmt: skip


def test_hotpotqa_kg_makes_no_self_loop_or_repeat_from_a_shared_title(tmp_path: Path) -> None:
    # A streamed JSON object may repeat a key: two passages, one title, one entity.
    (tmp_path / "corpus.json").write_text(
        '{"Dune": ["Dune names Dune and Ra."], "Ra": ["Ra names Dune."], "Dune": ["Novel."]}'
    )
    records = list(open_source(f"hotpotqa-kg:{tmp_path}").records())
    triples = [(t.passage_id, t.head, t.tail) for t in records if isinstance(t, CorpusTriple)]
    assert triples == [("p0", "Dune", "Ra"), ("p1", "Ra", "Dune")]
