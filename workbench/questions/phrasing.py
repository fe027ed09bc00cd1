"""Questions re-phrased by the LLM, STaRK's step after the template: what users type
reads less like the template a plan could be fitted to. A paraphrase is kept only when it
still holds the anchor's name and every number of the template question; otherwise (or
when the LLM fails) the template question stands, so the answers stay exact."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from kgqr_core.llm import LlmClient, LlmRequest, parse_json_object
from kgqr_core.prompts import render
from workbench.questions.synthesis import SynthesizedQuery


def keeps_facts(original: str, paraphrase: str, anchor_name: str) -> bool:
    lowered = paraphrase.lower()
    numbers = re.findall(r"\d+(?:\.\d+)?", original)
    return anchor_name.lower() in lowered and all(
        re.search(rf"(?<![\d.]){re.escape(n)}(?![\d.])", paraphrase) for n in numbers
    )


def phrase(
    questions: list[SynthesizedQuery],
    anchor_names: dict[str, str],
    llm: LlmClient,
    progress: Callable[[int], None] = lambda _: None,
) -> tuple[list[SynthesizedQuery], int]:
    """The questions, paraphrased where the paraphrase keeps the facts; and how many were."""
    phrased, kept = [], 0
    for question in questions:
        anchor = anchor_names.get(question.anchor)
        text = question.query
        try:
            prompt = render("synthesize_phrase", question=text)
            request = LlmRequest.user(prompt, json_mode=True, max_tokens=120, temperature=0.7)
            answer = llm.complete(request)
            parsed = parse_json_object(answer.texts[0]) or {}
            candidate = str(parsed.get("question", "")).strip()
        except Exception:  # an LLM that fails leaves the template question
            candidate = ""
        if candidate and anchor is not None and keeps_facts(text, candidate, anchor):
            text, kept = candidate, kept + 1
        phrased.append(replace(question, query=text))
        progress(1)
    return phrased, kept
