"""STaRK semi-structured knowledge bases in their published ``processed`` layout.

The folder holds ``node_info.pkl`` (node id -> dict of fields), ``node_types.pt`` (type id
per node), ``node_type_dict.pkl`` (type id -> name), ``edge_index.pt`` (2 x E source and
target ids), ``edge_types.pt`` (type id per edge) and ``edge_type_dict.pkl``. Pickles and
tensors cannot be read in pieces, so they are loaded whole; records are still yielded
one at a time, so memory holds the source once, not twice.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ingest.records import Document, Record, Rejected, Relation
from ingest.sources.base import Source, set_aside_unless_valid
from plugin.kb_meta import DocumentStructure

REQUIRED_FILES = (
    "node_info.pkl",
    "node_types.pt",
    "node_type_dict.pkl",
    "edge_index.pt",
    "edge_types.pt",
    "edge_type_dict.pkl",
)
TITLE_FIELDS = ("name", "title")


# What STaRK's published pickles are made of: dicts, lists, strings and numbers, which need
# no class at all, and these few containers and scalar types.
SAFE_GLOBALS = frozenset(
    {
        ("builtins", "set"),
        ("builtins", "frozenset"),
        ("builtins", "list"),
        ("builtins", "dict"),
        ("builtins", "str"),
        ("builtins", "int"),
        ("builtins", "float"),
        ("collections", "OrderedDict"),
        ("collections", "defaultdict"),
    }
)


class UnsafePickleError(ValueError):
    """A pickle that names a class or function a STaRK knowledge base never holds."""


class _DataOnlyUnpickler(pickle.Unpickler):
    """pickle.load runs whatever callable a file names; this admits only the data types
    above, so a crafted `.pkl` in a folder someone hands kgqr cannot run code."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in SAFE_GLOBALS:
            raise UnsafePickleError(
                f"refusing to load {module}.{name}: a STaRK pickle holds only plain data"
            )
        return super().find_class(module, name)


def _load_pickle(path: Path) -> Any:
    with path.open("rb") as stream:
        try:
            return _DataOnlyUnpickler(stream).load()
        except UnsafePickleError as exc:
            raise UnsafePickleError(f"{path}: {exc}") from None


def _load_tensor(path: Path) -> list[Any]:
    import torch

    return torch.load(path, map_location="cpu", weights_only=True).tolist()  # type: ignore[no-any-return]


class StarkSource(Source):
    kind = "stark"
    folder_files = REQUIRED_FILES

    def structure(self) -> DocumentStructure:
        node_types = _load_pickle(self.path / "node_type_dict.pkl")
        edge_types = _load_pickle(self.path / "edge_type_dict.pkl")
        return DocumentStructure(
            types={str(name): [] for name in node_types.values()},
            relations=[str(name) for name in edge_types.values()],
        )

    def records(self) -> Iterator[Record]:
        node_info: dict[int, dict[str, Any]] = _load_pickle(self.path / "node_info.pkl")
        node_types = _load_tensor(self.path / "node_types.pt")
        type_names = _load_pickle(self.path / "node_type_dict.pkl")
        kept: set[int] = set()
        for node_id, info in node_info.items():
            if self.limit is not None and len(kept) >= self.limit:
                break
            try:
                type_name = type_names[node_types[int(node_id)]]
            except (IndexError, KeyError, ValueError) as exc:
                yield Rejected(reason=f"node {node_id}: no type ({exc!r})", raw=repr(info)[:4000])
                continue
            made = set_aside_unless_valid(
                f"node {node_id}", info, _document,
                node_id=int(node_id), type_name=str(type_name), info=info,
            )  # fmt: skip
            if isinstance(made, Document):  # a node set aside gets no edges either
                kept.add(int(node_id))
            yield made
        del node_info
        yield from self._relations(kept)

    def _relations(self, kept: set[int]) -> Iterator[Record]:
        sources, targets = _load_tensor(self.path / "edge_index.pt")
        edge_types = _load_tensor(self.path / "edge_types.pt")
        edge_names = _load_pickle(self.path / "edge_type_dict.pkl")
        for source, target, type_id in zip(sources, targets, edge_types, strict=True):
            if source in kept and target in kept:
                where, raw = f"edge {source}->{target}", repr((source, target, type_id))
                if type_id not in edge_names:
                    unknown = f"{where}: edge type {type_id} is not in edge_type_dict.pkl"
                    yield Rejected(reason=unknown, raw=raw)
                    continue
                yield set_aside_unless_valid(
                    where, raw, Relation,
                    source=str(source), type=str(edge_names[type_id]), target=str(target),
                )  # fmt: skip


def _document(node_id: int, type_name: str, info: dict[str, Any]) -> Document:
    title = next((str(info[key]) for key in TITLE_FIELDS if info.get(key)), str(node_id))
    fields = {
        key: value
        for key, value in info.items()
        if key not in TITLE_FIELDS and key != "type" and value not in (None, "", [], {})
    }
    return Document(id=str(node_id), type=type_name, title=title, fields=_jsonable(fields))


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_jsonable(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)
