"""The agent picks the stored plan whose training questions a query is most like."""

from __future__ import annotations

import asyncio
import re

import numpy as np

from query_rewriter.strategies.agent.plan_book import PlanBook, PlanEntry, Router
from query_rewriter.strategies.agent.strategy import plan_order_boosts

VOCABULARY = ["brand", "made", "country", "based", "category", "described", "price", "year"]


async def bag_of_words(texts: list[str]) -> np.ndarray:
    """A stand-in encoder: counts of a few words, normalised (the router only needs
    vectors whose cosine follows word overlap)."""
    rows = []
    for text in texts:
        words = re.findall(r"\w+", text.lower())
        row = np.array([words.count(w) for w in VOCABULARY], dtype=float) + 1e-3
        rows.append(row / np.linalg.norm(row))
    return np.vstack(rows)


def _entry(category: str, *examples: str) -> PlanEntry:
    return PlanEntry(category=category, template={"steps": []}, examples=list(examples))


def test_a_query_goes_to_the_category_of_its_kind_of_question() -> None:
    book = PlanBook(
        version=3,
        entries=[
            _entry("by brand", "Which products are made by Varnok with year above 2010?",
                   "Which products are made by Tessly with price below 30?"),
            _entry("by country", "Which products are made by a brand based in Chile?",
                   "Which products are made by a brand based in Peru with price above 9?"),
            _entry("by category", "Which products are in category Tent described as green?"),
        ],
    )  # fmt: skip
    router = Router()

    def choose(query: str) -> str:
        vector = asyncio.run(bag_of_words([query]))[0]
        entry, _ = asyncio.run(router.choose(book, ("kb", "model"), vector, bag_of_words))
        return entry.category

    assert choose("Which products are made by a brand based in Japan?") == "by country"
    assert choose("Which products are in category Kettle described as cordless?") == "by category"
    assert choose("Which products are made by Ordax with year below 2001?") == "by brand"


def test_a_book_optimised_again_under_an_earlier_books_version_is_routed_by_its_own() -> None:
    """After `kgqr agent clear` (or two optimisations at once) a book numbers itself as an
    earlier one did: the router kept the earlier book's centroids for the process's life."""
    by_brand = _entry("by brand", "Which products are made by Varnok?")
    by_country = _entry("by country", "Which products are made by a brand based in Chile?")
    earlier = PlanBook(version=1, entries=[by_brand, by_country])
    later = PlanBook(version=1, entries=[by_country, by_brand])
    assert earlier.fingerprint() != later.fingerprint()
    router = Router()
    query = asyncio.run(bag_of_words(["Which products are made by Ordax?"]))[0]
    for book in (earlier, later):
        entry, _ = asyncio.run(router.choose(book, ("kb", "m"), query, bag_of_words))
        assert entry.category == "by brand"


def test_a_single_plan_needs_no_routing() -> None:
    book = PlanBook(entries=[_entry("all")])

    async def no_encoder(texts: list[str]) -> np.ndarray:
        raise AssertionError("a single plan must not embed its examples")

    entry, similarity = asyncio.run(Router().choose(book, ("kb", "m"), np.ones(3), no_encoder))
    assert entry.category == "all" and similarity == 1.0


def test_the_plans_first_answer_stays_first_and_every_answer_keeps_a_boost() -> None:
    boosts = plan_order_boosts([f"d{i}" for i in range(30)], 20, ["anchor"])
    assert len(boosts) == 21 and boosts["d0"] == 1.0 > boosts["d1"] > boosts["d19"] > boosts["d20"]
    low, share = min(boosts.values()), 0.7  # min-max normalised as the engine does
    normalised = {node: (b - low) / (1.0 - low) for node, b in boosts.items()}
    assert share * (normalised["d0"] - normalised["d1"]) > 1 - share  # text cannot pass d0
    assert share * normalised["d19"] > 0.2
    # Fewer answers than asked: a document the plan searched takes the floor.
    few = plan_order_boosts(["a", "b", "c"], 20, ["a", "anchor"])
    assert list(few) == ["a", "b", "c", "anchor"] and few["anchor"] < few["c"]
    assert plan_order_boosts(["a"], 20, []) == {"a": 1.0}
