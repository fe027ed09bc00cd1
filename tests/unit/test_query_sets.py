"""Query-set loaders on small fixtures built here, and on the shared dev files."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest

from kgqr_ops.cli_options import judged_queries
from query_rewriter.search.warming import queries_from_file
from tests.shared_data import SHARED_DATA, needs_shared_data
from workbench.evaluation.query_sets import JudgedQuery, QuerySetError, load_query_set


def test_musique_gold_is_matched_by_title_and_text_not_title_alone(tmp_path: Path) -> None:
    corpus = [
        {"title": "Paris", "text": "Paris is in Texas."},
        {"title": "Paris", "text": "Paris is the capital of France."},
        {"title": "Seine", "text": "The Seine flows through Paris."},
    ]
    (tmp_path / "corpus.json").write_text(json.dumps(corpus))
    paragraph = lambda t, x, s: {"title": t, "paragraph_text": x, "is_supporting": s}  # noqa: E731
    queries = [
        {
            "id": "q1",
            "question": "Which river flows through the capital of France?",
            "paragraphs": [
                paragraph("Paris", "Paris is the capital of France.", True),
                paragraph("Paris", "Paris is in Texas.", False),
                paragraph("Seine", "The Seine flows through Paris.", True),
            ],
        }
    ]
    (tmp_path / "queries_dev.json").write_text(json.dumps(queries))
    [query] = load_query_set(f"musique:{tmp_path}")
    assert query.id == "q1"
    assert query.judgments == {"p1": 1.0, "p2": 1.0}


def test_hotpotqa_gold_is_the_supporting_titles(tmp_path: Path) -> None:
    corpus = {"Lilu": ["Lilu is a demon."], "Gallu": ["Gallu is a demon."], "Other": ["x"]}
    (tmp_path / "corpus.json").write_text(json.dumps(corpus))
    queries = [
        {
            "_id": "h1",
            "question": "What is Lilu?",
            "supporting_facts": [["Gallu", 0], ["Lilu", 0], ["Lilu", 1]],
        }
    ]
    (tmp_path / "queries_dev.json").write_text(json.dumps(queries))
    [query] = load_query_set(f"hotpotqa:{tmp_path}")
    assert query.judgments == {"p1": 1.0, "p0": 1.0}


def _stark_fixture(directory: Path) -> None:
    (directory / "stark_qa.csv").write_text(
        'id,query,answer_ids\n7,"red shoes, size 9","[11, 12]"\n8,blue hats,[13]\n9,green,[14]\n'
    )
    (directory / "test.index").write_text("7\n9\n")
    (directory / "stark_qa_human_generated_eval.csv").write_text(
        'id,query,answer_ids,answer_ids_source\n0,a human query,"[5, 6]",[5]\n'
    )


def test_stark_split_selects_its_query_ids(tmp_path: Path) -> None:
    _stark_fixture(tmp_path)
    queries = load_query_set(f"stark:{tmp_path}", "test")
    assert [(q.id, q.text, q.judgments) for q in queries] == [
        ("7", "red shoes, size 9", {"11": 1.0, "12": 1.0}),
        ("9", "green", {"14": 1.0}),
    ]
    [human] = load_query_set(f"stark:{tmp_path}", "human")
    assert human.judgments == {"5": 1.0, "6": 1.0}
    with pytest.raises(QuerySetError, match=r"no val\.index"):
        load_query_set(f"stark:{tmp_path}", "val")


def test_jsonl_judgments_with_grades_and_limit(tmp_path: Path) -> None:
    path = tmp_path / "judged.jsonl"
    path.write_text(
        '{"id": "a", "query": "first", "relevant": ["d1", "d2"], "grades": {"d2": 3}}\n'
        "\n"
        '{"query": "second", "grades": {"d7": 2, "d8": 0}}\n'
        '{"query": "third", "relevant": ["d9"]}\n'
    )
    queries = load_query_set(f"jsonl:{path}", limit=2)
    assert [(q.id, q.judgments) for q in queries] == [
        ("a", {"d1": 1.0, "d2": 3.0}),
        ("3", {"d7": 2.0, "d8": 0.0}),
    ]


def test_a_judged_query_written_as_a_line_reads_back_the_same(tmp_path: Path) -> None:
    """The tune page's download writes these lines; `kgqr eval jsonl:` reads them."""
    written = [
        JudgedQuery("q1", "films by Michael Mann — «Heat»", {"m1": 1.0, "m3": 0.0}),
        JudgedQuery("q2", 'a "quoted" query\nover two lines', {"d": 2.0}),
    ]
    path = tmp_path / "judged.jsonl"
    path.write_text("".join(query.as_jsonl_line() for query in written), encoding="utf-8")
    assert list(load_query_set(f"jsonl:{path}")) == written


def test_files_saved_by_windows_tools_load(tmp_path: Path) -> None:
    """A byte-order mark (Excel's "CSV UTF-8", Notepad) made the CSV's first column
    "\ufeffid" (a KeyError) and the first JSON line "not JSON"; a warm file's first query
    began with it."""
    _stark_fixture(tmp_path)
    for name in ("stark_qa.csv", "test.index"):
        path = tmp_path / name
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes().replace(b"\n", b"\r\n"))
    assert [q.id for q in load_query_set(f"stark:{tmp_path}", "test")] == ["7", "9"]
    judged = tmp_path / "judged.jsonl"
    judged.write_bytes('\ufeff{"id": "a", "query": "first", "relevant": ["d1"]}\r\n'.encode())
    assert [q.text for q in load_query_set(f"jsonl:{judged}")] == ["first"]
    warm = tmp_path / "queries.txt"
    warm.write_bytes('\ufeffwho directed heat\r\n{"query": "second"}\r\n'.encode())
    assert queries_from_file(warm) == ["who directed heat", "second"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "judged.jsonl:2: not JSON"),
        ('{"relevant": ["d1"]}', "judged.jsonl:2: needs a string field 'query'"),
        ('{"query": "q", "relevant": "d1"}', "'relevant' must be a list"),
        ('{"query": "q", "grades": {"d1": "high"}}', "grades must be numbers"),
    ],
)
def test_jsonl_errors_name_the_line(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "judged.jsonl"
    path.write_text('{"query": "fine"}\n' + line + "\n")
    with pytest.raises(QuerySetError, match=message):
        load_query_set(f"jsonl:{path}")


def test_bad_specs_and_missing_files_say_so(tmp_path: Path) -> None:
    with pytest.raises(QuerySetError, match="KIND:PATH"):
        load_query_set("trec:/x")
    with pytest.raises(QuerySetError, match="no such file"):
        load_query_set(f"musique:{tmp_path}")


def test_a_query_set_of_another_kind_or_encoding_is_said_in_one_line(tmp_path: Path) -> None:
    """A MuSiQue folder read as HotpotQA, a CSV without its column, a corpus that is not
    JSON: each ended in a traceback."""
    musique = tmp_path / "musique"
    musique.mkdir()
    (musique / "corpus.json").write_text(json.dumps({"Paris": ["Paris is in France."]}))
    (musique / "queries_dev.json").write_text(json.dumps([{"id": "q1", "question": "Where?"}]))
    with pytest.raises(QuerySetError, match=r"not a musique query set \(no field 'paragraphs'\)"):
        load_query_set(f"musique:{musique}")
    with pytest.raises(QuerySetError, match="not a hotpotqa query set"):
        load_query_set(f"hotpotqa:{musique}")
    (musique / "corpus.json").write_text("{not json")
    with pytest.raises(QuerySetError, match="cannot be read as a hotpotqa query set"):
        load_query_set(f"hotpotqa:{musique}")
    stark = tmp_path / "stark"
    stark.mkdir()
    (stark / "stark_qa.csv").write_text("id,query\n7,red shoes\n")
    (stark / "test.index").write_text("7\n")
    with pytest.raises(QuerySetError, match="no field 'answer_ids'"):
        load_query_set(f"stark:{stark}")
    lines = tmp_path / "latin1.jsonl"
    lines.write_bytes(b'{"query": "caf\xe9", "relevant": ["d1"]}\n')
    with pytest.raises(QuerySetError, match="cannot be read as a jsonl query set"):
        load_query_set(f"jsonl:{lines}")


@needs_shared_data()
@pytest.mark.parametrize("kind", ["musique", "hotpotqa"])
def test_shared_dev_sets_load_with_gold_in_the_corpus(kind: str) -> None:
    queries = load_query_set(f"{kind}:{SHARED_DATA / f'{kind}100'}")
    assert len(queries) == 50
    assert all(2 <= len(q.judgments) <= 4 for q in queries)
    assert all(doc.startswith("p") for q in queries for doc in q.judgments)


@needs_shared_data("stark_qa")
@pytest.mark.parametrize("dataset", ["amazon", "mag", "primekg"])
def test_shared_stark_splits_load(dataset: str) -> None:
    folder = SHARED_DATA / "stark_qa" / dataset
    wanted = {
        line.strip() for line in (folder / "val.index").read_text().splitlines() if line.strip()
    }
    queries = load_query_set(f"stark:{folder}", "val")
    assert {q.id for q in queries} == wanted
    assert all(q.judgments for q in queries)
    assert load_query_set(f"stark:{folder}", "human", limit=5)


def test_a_query_id_given_twice_is_refused(tmp_path: Path) -> None:
    """Comparisons pair queries by id: the second replaced the first there, while the
    table averaged both."""
    path = tmp_path / "judged.jsonl"
    path.write_text('{"id": "7", "query": "one", "relevant": ["a"]}\n'
                    '{"id": "7", "query": "another", "relevant": ["b"]}\n')  # fmt: skip
    with pytest.raises(QuerySetError, match="query id '7' is given twice"):
        load_query_set(f"jsonl:{path}")


def test_queries_without_a_relevant_document_are_left_out_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tune page's download writes queries judged only non-relevant; scored as zeros
    they were ties in every comparison, and `tune auto` chose on more queries than the
    page did."""
    path = tmp_path / "judged.jsonl"
    path.write_text('{"id": "a", "query": "one", "grades": {"d1": 1}}\n'
                    '{"id": "b", "query": "two", "grades": {"d2": 0}}\n')  # fmt: skip
    assert [q.id for q in judged_queries(f"jsonl:{path}", "--queries")] == ["a"]
    assert "1 of 2 queries have no relevant document judged" in capsys.readouterr().err
    path.write_text('{"id": "b", "query": "two", "grades": {"d2": 0}}\n')
    with pytest.raises(click.BadParameter, match="no queries with a relevant document"):
        judged_queries(f"jsonl:{path}", "--queries")
