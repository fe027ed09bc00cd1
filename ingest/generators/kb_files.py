"""What a generator builds: documents and relations in the generic JSONL layout, written
the way `kgqr ingest jsonl:DIR` reads them."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class GeneratedKb:
    types: dict[str, list[str]]
    relations: list[str]
    documents: list[dict[str, Any]] = field(default_factory=list)
    edges: list[dict[str, str]] = field(default_factory=list)

    def document(
        self, id_: str, type_: str, title: str, text: str, fields: dict[str, Any] | None = None
    ) -> None:
        self.documents.append(
            {"id": id_, "type": type_, "title": title, "text": text, "fields": fields or {}}
        )

    def relation(self, source: str, type_: str, target: str) -> None:
        self.edges.append({"source": source, "type": type_, "target": target})

    def write(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        for name, rows in (("documents", self.documents), ("relations", self.edges)):
            with (directory / f"{name}.jsonl").open("w", encoding="utf-8") as out:
                out.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        structure = {"types": self.types, "relations": self.relations}
        (directory / "structure.json").write_text(json.dumps(structure, indent=1) + "\n")


@dataclass(frozen=True)
class Syllables:
    """Made-up names from syllables: unique, pronounceable, and unlike any real word, so a
    question naming one can only be answered by finding that entity."""

    parts: tuple[str, ...]

    def names(self, rng: random.Random, count: int) -> list[str]:
        seen: set[str] = set()
        names: list[str] = []
        while len(names) < count:
            name = "".join(rng.choice(self.parts) for _ in range(rng.randint(2, 3))).capitalize()
            if name not in seen:
                seen.add(name)
                names.append(name)
        return names
