"""A hyperlink-like graph for passage corpora that ship none: passage A `links_to` passage B
when A's text names B's title.

HotpotQA's bridge questions were written along Wikipedia hyperlinks between two passages,
and its corpus keeps the titles but drops the links; naming a title is what a link's
anchor text mostly does, so title matches recover much of that graph without an LLM.
A title's trailing disambiguation ("Up (film)") is dropped only when what is left still
has two words, so one common word ("United") never becomes a link.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

RELATION = "links_to"
_DISAMBIGUATION = re.compile(r"\s*\([^()]*\)$")


def surface_forms(title: str) -> set[str]:
    """How a passage's text may name the passage titled `title`."""
    forms = {title.strip()}
    bare = _DISAMBIGUATION.sub("", title).strip()
    if bare != title.strip() and len(bare.split()) >= 2:
        forms.add(bare)
    return {form for form in forms if form}


class TitleLinker:
    """Finds, in one pass per text, every other passage whose title the text names.

    One alternation of all surface forms, longest first, so a text naming "Metallica
    discography" links there and not also to "Metallica" for the same words. Built for
    corpora of thousands of titles; a Wikipedia-sized one would want an Aho-Corasick
    automaton instead of one regular expression.
    """

    def __init__(self, titles: Iterable[tuple[str, str]]) -> None:
        """`titles`: (passage id, title) pairs; a title several passages share links to all."""
        self._ids_by_form: dict[str, set[str]] = {}
        self._titles: dict[str, str] = {}
        for passage_id, title in titles:
            self._titles[passage_id] = title
            for form in surface_forms(title):
                self._ids_by_form.setdefault(form, set()).add(passage_id)
        forms = sorted(self._ids_by_form, key=len, reverse=True)
        self._pattern = (
            re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, forms)) + r")(?!\w)")
            if forms
            else None
        )

    def title(self, passage_id: str) -> str:
        return self._titles[passage_id]

    def targets(self, passage_id: str, text: str) -> Iterator[str]:
        """Ids of the passages `text` names, once each, never `passage_id` itself."""
        if self._pattern is None:
            return
        seen = {passage_id}
        for match in self._pattern.finditer(text):
            for target in sorted(self._ids_by_form[match.group(0)] - seen):
                seen.add(target)
                yield target
