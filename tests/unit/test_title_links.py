from __future__ import annotations

import json
from pathlib import Path

from ingest.records import Document, Rejected, Relation
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


def test_hotpotqa_source_yields_documents_then_title_links(tmp_path: Path) -> None:
    corpus = {
        "Kill Bill": ["Kill Bill is a film ", "by Quentin Tarantino."],
        "Quentin Tarantino": ["Quentin Tarantino directed Kill Bill."],
        "Broken": "not a list of sentences",
        "Uma Thurman": ["An actress."],
    }
    (tmp_path / "corpus.json").write_text(json.dumps(corpus))
    records = list(open_source(f"hotpotqa:{tmp_path}").records())
    kinds = [Document, Document, Rejected, Document, Relation, Relation]
    assert [type(r) for r in records] == kinds
    assert records[0].body() == "Kill Bill is a film by Quentin Tarantino."
    assert [(r.source, r.type, r.target) for r in records[4:]] == [
        ("p0", "links_to", "p1"),
        ("p1", "links_to", "p0"),
    ]
    limited = list(open_source(f"hotpotqa:{tmp_path}", limit=1).records())
    assert [type(r) for r in limited] == [Document]  # the title it names is past the limit
