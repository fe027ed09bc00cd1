"""The tuning page in a real headless Chromium (Debian's chromium + chromium-driver,
driven by Selenium): compare two strategies, judge hits, see the metrics change."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from kgqr_core.settings import Settings
from kgqr_ops.background_proxy import running_proxy
from kgqr_ops.cli import main
from plugin import schema
from tests.integration.ingest_helpers import TINY_KB, ingested
from workbench.evaluation import query_sets

KB = "tune-movies"
TESTS = Path(__file__).resolve().parents[1]
QUERY = "professional bank robbers chased by the police"
CHROMEDRIVER = "/usr/bin/chromedriver"


def _forget_judgments(opensearch: Any) -> None:
    """This KB's judgments and rankings deleted one by one (the minimal OpenSearch build
    has no reindex module, so no _delete_by_query)."""
    for index in (schema.JUDGMENTS_INDEX, schema.TUNE_RUNS_INDEX):
        if not opensearch.indices.exists(index=index):
            continue
        found = opensearch.search(index=index, body={"query": {"term": {"kb": KB}}, "size": 10_000})
        for hit in found["hits"]["hits"]:
            opensearch.delete(index=index, id=hit["_id"], refresh=True)


@pytest.fixture(scope="module")
def tuning_url(settings: Settings, opensearch: Any, neo4j_driver: Any, redis_client: Any,
               ingest_worker: Any) -> Iterator[str]:  # fmt: skip
    _forget_judgments(opensearch)
    with (
        ingested(settings, opensearch, neo4j_driver, redis_client, TINY_KB, KB),
        running_proxy(settings) as url,
    ):
        yield url
    _forget_judgments(opensearch)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not shutil.which("chromium") or not Path(CHROMEDRIVER).exists():
        pytest.fail("headless Chromium is missing: `apt-get install chromium chromium-driver` "
                    "(scripts/test.sh installs it)")  # fmt: skip
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or ""
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1400,1000"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _metric(browser: Any, strategy: str, metric: str) -> str:
    """Read in one script call: the page re-renders the metrics table whenever a judgment
    lands, so a cell found first and read after can already be gone (stale element)."""
    selector = f'#metrics tr[data-strategy="{strategy}"] td[data-metric="{metric}"]'
    text = browser.execute_script(
        "const cell = document.querySelector(arguments[0]);"
        "return cell ? cell.textContent.trim() : '';",
        selector,
    )
    return str(text)


def test_judging_a_hit_updates_each_strategys_metrics(
    tuning_url: str, browser: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ready
    from selenium.webdriver.support.ui import Select, WebDriverWait

    wait = WebDriverWait(browser, 60)
    browser.get(f"{tuning_url}/_kgqr/tune")
    wait.until(ready.presence_of_element_located((By.CSS_SELECTOR, f'#kb option[value="{KB}"]')))
    Select(browser.find_element(By.ID, "kb")).select_by_value(KB)
    # Offered first and pre-selected: base and the default (base here, so `graph`); the
    # baselines and ablations in rows of their own; an LLM strategy says what it costs.
    boxes = browser.find_elements(By.CSS_SELECTOR, "input[name=strategy]")
    assert sorted(b.get_attribute("value") for b in boxes if b.is_selected()) == ["base", "graph"]
    rows = browser.find_elements(By.CSS_SELECTOR, "#strategies .kind")
    assert [r.get_attribute("class") for r in rows] == [
        "kind strategy", "kind baseline", "kind ablation"
    ]  # fmt: skip
    first, baselines, ablations = (" ".join(row.text.split()) for row in rows)
    assert "hyde" in baselines and "kar_no_kg" in ablations and "hyde" not in first
    assert "kar (2 LLM calls)" in first and "graph (" not in first
    for box in browser.find_elements(By.CSS_SELECTOR, "input[name=strategy]"):
        if box.is_selected() != (box.get_attribute("value") in ("base", "prf")):
            box.click()
    browser.find_element(By.ID, "query").send_keys(QUERY)
    browser.find_element(By.ID, "compare").click()
    wait.until(ready.text_to_be_present_in_element((By.ID, "status"), "2 of 2 strategies done"))
    columns = browser.find_elements(By.CSS_SELECTOR, "article.column")
    assert sorted(c.get_attribute("data-strategy") for c in columns) == ["base", "prf"]
    base = browser.find_element(By.CSS_SELECTOR, 'article[data-strategy="base"]')
    first, second = base.find_elements(By.CSS_SELECTOR, "li[data-doc]")[:2]
    assert first.get_attribute("data-doc") == "m1"  # Heat answers the query
    assert "ms" in base.find_element(By.CSS_SELECTOR, ".timing").text
    assert "No judged queries yet." in browser.find_element(By.ID, "scoreboard-note").text

    # The second hit is marked relevant first: base then finds its only relevant hit at 2.
    second.find_element(By.CSS_SELECTOR, "button.mark-relevant").click()
    wait.until(lambda _: _metric(browser, "base", "MRR") == "50.0")
    assert "relevant" in second.get_attribute("class").split()
    assert _metric(browser, "base", "Hit@1") == "0.0"
    assert _metric(browser, "prf", "MRR") != ""  # both strategies are scored

    # Heat marked relevant too: base now has both relevant hits at ranks 1 and 2.
    first.find_element(By.CSS_SELECTOR, "button.mark-relevant").click()
    wait.until(lambda _: _metric(browser, "base", "MRR") == "100.0")
    assert _metric(browser, "base", "R@2") == "100.0"
    # ... and marking it not relevant takes that back.
    first.find_element(By.CSS_SELECTOR, "button.mark-not-relevant").click()
    wait.until(lambda _: _metric(browser, "base", "MRR") == "50.0")
    assert "not-relevant" in first.get_attribute("class").split()
    browser.save_screenshot(str(tmp_path / "tuning-page.png"))

    # The judgments are in OpenSearch, not only in the page.
    saved = httpx.get(f"{tuning_url}/_kgqr/tune/judgments",
                      params={"kb": KB, "query": QUERY}).json()["judgments"]  # fmt: skip
    assert saved == {"m1": 0.0, second.get_attribute("data-doc"): 1.0}

    # ... and the page's download is a query set `kgqr eval` scores with them.
    link = browser.find_element(By.ID, "download-judgments").get_attribute("href")
    download = httpx.get(link)
    assert download.headers["content-type"] == "application/x-ndjson"
    judged = tmp_path / "judged.jsonl"
    judged.write_bytes(download.content)
    (loaded,) = query_sets.jsonl(judged)
    assert (loaded.text, loaded.judgments) == (QUERY, saved)
    out = tmp_path / "eval"
    args = ["--kb", KB, "--strategies", "base", "--proxy", tuning_url, "--out", str(out)]
    result = CliRunner().invoke(main, ["eval", f"jsonl:{judged}", *args])
    assert result.exit_code == 0, result.output
    (row,) = json.loads(out.with_suffix(".json").read_text())["strategies"]
    assert row["metrics"]["MRR"] == pytest.approx(0.5)  # the relevant hit was base's second


def test_tuning_endpoints_reject_bad_input_like_opensearch(tuning_url: str) -> None:
    as_json = {"content-type": "application/json"}
    bad_json = httpx.post(f"{tuning_url}/_kgqr/tune/judgments", content=b"{oops", headers=as_json)
    assert bad_json.status_code == 400
    assert bad_json.json()["error"]["type"] == "json_parse_exception"
    # Read as the searches are: nested past the stack, it was a 500 (RecursionError).
    deep = httpx.post(f"{tuning_url}/_kgqr/tune/judgments", content=b'{"a":' * 100_000,
                      headers=as_json)  # fmt: skip
    assert deep.status_code == 400 and "nests deeper" in deep.json()["error"]["reason"]
    missing = httpx.post(f"{tuning_url}/_kgqr/tune/judgments", json={"kb": KB, "query": QUERY})
    assert missing.status_code == 400 and "[doc_id]" in missing.json()["error"]["reason"]
    unknown = httpx.post(f"{tuning_url}/_kgqr/tune/search",
                         json={"kb": KB, "query": QUERY, "strategy": "magic"})  # fmt: skip
    assert unknown.status_code == 400 and "magic" in unknown.json()["error"]["reason"]
    for size in (None, [5], "5", 1.5, True, 0, 51):  # null and [5] were a plain-text 500
        asked = {"kb": KB, "query": QUERY, "strategy": "base", "size": size}
        sized = httpx.post(f"{tuning_url}/_kgqr/tune/search", json=asked)
        assert sized.status_code == 400, size
        assert "[size] must be a whole number from 1 to 50" in sized.json()["error"]["reason"]
    assert httpx.get(f"{tuning_url}/_kgqr/tune/static/routes.py").status_code == 404
    page = httpx.get(f"{tuning_url}/_kgqr/tune")  # only its own script; framed by no site
    assert page.headers["content-security-policy"] == "default-src 'self'; frame-ancestors 'none'"
    assert page.headers["x-content-type-options"] == "nosniff"
    assert page.headers["x-frame-options"] == "DENY"
    bad_kb = httpx.get(f"{tuning_url}/_kgqr/tune/metrics", params={"kb": "<svg onload=1>"})
    assert bad_kb.status_code == 400 and "invalid knowledge-base name" in bad_kb.text
    assert bad_kb.headers["x-content-type-options"] == "nosniff"  # it echoes the markup
    no_query = httpx.get(f"{tuning_url}/_kgqr/tune/judgments", params={"kb": KB})
    assert no_query.status_code == 400 and "[query]" in no_query.text
    # Kept as a keyword of 2,048 characters at most: a longer one was stored, never found.
    long_query = {"kb": KB, "query": "q" * 2049, "doc_id": "m1", "relevant": True}
    too_long = httpx.post(f"{tuning_url}/_kgqr/tune/judgments", json=long_query)
    assert too_long.status_code == 400 and "2048 characters" in too_long.text
    # A browser posts text/plain to any site without asking; JSON it does not.
    judgment = json.dumps({"kb": KB, "query": QUERY, "doc_id": "m1", "relevant": True})
    for media_type in ("text/plain", "application/x-www-form-urlencoded", None):
        sent = httpx.post(f"{tuning_url}/_kgqr/tune/judgments", content=judgment.encode(),
                          headers={"content-type": media_type} if media_type else {})  # fmt: skip
        assert sent.status_code == 415, media_type
        assert sent.json()["error"]["type"] == "media_type_header_exception"


def test_a_fused_run_keeps_the_plain_top_and_is_scored_as_its_own_row(tuning_url: str) -> None:
    def run(strategy: str, fuse: bool) -> dict[str, Any]:
        asked = {"kb": KB, "query": QUERY, "strategy": strategy, "fuse": fuse}
        answer = httpx.post(f"{tuning_url}/_kgqr/tune/search", json=asked, timeout=120)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    plain, fused = run("base", False), run("prf", True)
    assert fused["strategy"] == "prf fused" and fused["recorded"]
    assert fused["hits"][0]["id"] == plain["hits"][0]["id"]  # the plain query's first hit
    judged = {"kb": KB, "query": QUERY, "doc_id": plain["hits"][0]["id"], "relevant": True}
    assert httpx.post(f"{tuning_url}/_kgqr/tune/judgments", json=judged).status_code == 200
    rows = httpx.get(f"{tuning_url}/_kgqr/tune/metrics", params={"kb": KB}).json()
    assert "prf fused" in {row["strategy"] for row in rows["strategies"]}
    asked = {"kb": KB, "query": QUERY, "strategy": "base", "fuse": "yes"}
    refused = httpx.post(f"{tuning_url}/_kgqr/tune/search", json=asked)
    assert refused.status_code == 400 and "[fuse]" in refused.json()["error"]["reason"]


def test_the_page_promotes_a_default_by_tune_autos_rule(tuning_url: str, opensearch: Any) -> None:
    """Judged queries, each run through base and prf: the rule over what the page showed.
    On two, too few to choose on, nothing is recorded (the KB keeps the default it has);
    on ten, prf cannot beat base's first hits, so base is what it records."""
    from plugin import kb_meta

    few = httpx.post(f"{tuning_url}/_kgqr/tune/promote", json={"kb": KB, "metric": "MRR"})
    assert few.status_code == 400 and "[metric] must be one of" in few.json()["error"]["reason"]
    queries = {QUERY: "m1", "a taxi driver taken hostage by a killer": "m2"}
    documents = (TESTS / "fixtures" / "tiny_kb" / "documents.jsonl").read_text().splitlines()
    titles = {document["title"]: document["id"] for document in map(json.loads, documents)}

    def judge(judged_queries: dict[str, str]) -> None:
        for query, relevant in judged_queries.items():
            for strategy in ("base", "prf"):
                asked = {"kb": KB, "query": query, "strategy": strategy}
                assert httpx.post(f"{tuning_url}/_kgqr/tune/search", json=asked,
                                  timeout=120).status_code == 200  # fmt: skip
            judged = {"kb": KB, "query": query, "doc_id": relevant, "relevant": True}
            assert httpx.post(f"{tuning_url}/_kgqr/tune/judgments", json=judged).status_code == 200

    judge(queries)
    two = httpx.post(f"{tuning_url}/_kgqr/tune/promote", json={"kb": KB}, timeout=120)
    assert two.status_code == 400 and "too few to choose on" in two.json()["error"]["reason"]
    untouched = kb_meta.load(opensearch, KB)
    assert untouched is not None and untouched.default is None
    judge(titles)
    promoted = httpx.post(f"{tuning_url}/_kgqr/tune/promote", json={"kb": KB}, timeout=120)
    assert promoted.status_code == 200, promoted.text
    answer = promoted.json()
    assert answer["default"]["strategy"] == "base" and answer["default"]["set_by"] == "tune page"
    assert (
        answer["evidence"]["queries"] >= 2 and "no setting beat base" in answer["default"]["reason"]
    )
    meta = kb_meta.load(opensearch, KB)
    assert meta is not None and meta.default is not None
    assert meta.default.version == answer["default"]["version"]
