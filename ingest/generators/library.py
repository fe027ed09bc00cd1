"""A small academic graph, the second schema (after STaRK-MAG): papers, authors,
institutions, venues and fields of study, with abstracts that carry the methods and
topics a question may ask for. Deterministic for a seed, JSONL layout."""

from __future__ import annotations

import random

from ingest.generators.kb_files import GeneratedKb, Syllables

FIELDS = {
    "Machine learning": ("graph neural network", "contrastive learning", "transformer",
                         "reinforcement learning", "active learning", "federated learning"),
    "Databases": ("query optimisation", "columnar storage", "transaction processing",
                  "data lake", "index tuning", "stream processing"),
    "Biology": ("gene expression", "protein folding", "single cell sequencing",
                "microbiome", "crispr screening", "phylogenetics"),
    "Physics": ("quantum error correction", "dark matter", "superconductivity",
                "gravitational waves", "plasma confinement", "topological insulators"),
    "Economics": ("labour markets", "auction design", "monetary policy", "trade networks",
                  "behavioural nudges", "housing prices"),
    "Linguistics": ("morphology", "language acquisition", "speech prosody", "code switching",
                    "dialect variation", "semantic change"),
}  # fmt: skip
FINDINGS = ("improves accuracy", "reduces cost", "scales to large data", "is robust to noise",
            "needs less supervision", "explains its predictions")  # fmt: skip
CITIES = ("Oslo", "Lyon", "Graz", "Porto", "Turku", "Leiden", "Kyoto", "Austin", "Perth",
          "Quito", "Tartu", "Cork", "Brno", "Pune", "Accra", "Malmo")  # fmt: skip
PEOPLE = Syllables(("an", "be", "ca", "do", "el", "fa", "gi", "ho", "ka", "li", "mo", "na",
                    "ri", "so", "ta", "vu", "ze", "yo"))  # fmt: skip
VENUES = Syllables(("com", "sig", "ver", "lex", "pro", "ica", "dat", "neu"))


def library(documents: int = 8_000, seed: int = 11) -> GeneratedKb:
    """About `documents` documents: 70% papers, 25% authors, the rest institutions and
    venues; each paper 2-4 authors, a venue, 1-2 fields and up to 5 citations."""
    rng = random.Random(seed)
    kb = GeneratedKb(
        types={"paper": ["year", "citations"], "author": ["h_index"], "institution": [],
               "venue": [], "field": []},
        relations=["written_by", "affiliated_with", "published_in", "about", "cites"],
    )  # fmt: skip
    fields = list(FIELDS)
    for number, name in enumerate(fields):
        kb.document(f"field-{number}", "field", name, f"{name}: a field of study.")
    institutions = [f"institution-{n}" for n in range(len(CITIES) * 2)]
    for number, institution in enumerate(institutions):
        city = CITIES[number % len(CITIES)]
        kind = "University" if number < len(CITIES) else "Institute of Technology"
        kb.document(institution, "institution", f"{city} {kind}", f"A research body in {city}.")
    venues = []
    for number, name in enumerate(VENUES.names(rng, 40)):
        field = rng.randrange(len(fields))
        venues.append((f"venue-{number}", field))
        kb.document(f"venue-{number}", "venue", name.upper(), f"{name.upper()}: a venue "
                    f"for {fields[field].lower()} research.")  # fmt: skip
    authors: list[tuple[str, int]] = []
    author_count = documents // 4
    first, last = PEOPLE.names(rng, 400), PEOPLE.names(rng, 900)
    seen: set[str] = set()
    while len(authors) < author_count:
        name = f"{rng.choice(first)} {rng.choice(last)}"
        if name in seen:
            continue
        seen.add(name)
        author_id = f"author-{len(authors)}"
        field = rng.randrange(len(fields))
        kb.document(author_id, "author", name, f"{name} works on {fields[field].lower()}.",
                    {"h_index": rng.randint(1, 60)})  # fmt: skip
        kb.relation(author_id, "affiliated_with", rng.choice(institutions))
        authors.append((author_id, field))
    by_field: dict[int, list[str]] = {}
    for author_id, field in authors:
        by_field.setdefault(field, []).append(author_id)
    papers = [f"paper-{n}" for n in range(documents - len(kb.documents))]
    for paper_id in papers:
        field = rng.randrange(len(fields))
        topics = rng.sample(FIELDS[fields[field]], 2)
        venue_id = rng.choice([v for v, f in venues if f == field] or [venues[0][0]])
        year = rng.randint(1995, 2025)
        kind = rng.choice(("a study", "a survey", "new results", "a method"))
        title = f"{topics[0].capitalize()} meets {topics[1]}: {kind}"
        finding = rng.choice(FINDINGS)
        text = (f"We study {topics[0]} with {topics[1]} and show that the approach {finding}. "
                f"Published {year}.")  # fmt: skip
        kb.document(paper_id, "paper", title, text,
                    {"year": year, "citations": int(rng.paretovariate(1.2)) - 1})  # fmt: skip
        for author_id in rng.sample(by_field[field], rng.randint(2, 4)):
            kb.relation(paper_id, "written_by", author_id)
        kb.relation(paper_id, "published_in", venue_id)
        kb.relation(paper_id, "about", f"field-{field}")
    for position, paper_id in enumerate(papers[1:], start=1):
        for cited in rng.sample(papers[:position], min(position, rng.randint(0, 5))):
            kb.relation(paper_id, "cites", cited)
    return kb
