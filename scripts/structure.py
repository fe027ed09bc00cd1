"""Measure the read path's structure as docs/architecture.md reports it: per folder, its
rooms (modules and sub-folders; a package's face that only hands names on is no room),
the import arrows between them, and the arrows that run back up (an import that closes a
cycle, so no floor order can hold it). Imports inside functions count too.

    python scripts/structure.py                  # query_rewriter and workbench
    python scripts/structure.py query_rewriter/strategies
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("kgqr_core", "plugin", "ingest", "query_rewriter", "workbench", "kgqr_ops")


def _module(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts)


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] in PACKAGES}


def _is_face(path: Path) -> bool:
    """An __init__.py that defines nothing: it only hands names on."""
    if path.name != "__init__.py":
        return False
    tree = ast.parse(path.read_text())
    defines = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign, ast.AnnAssign)
    return not any(isinstance(node, defines) for node in tree.body)


def _room(folder: Path, module: str) -> str | None:
    """The room of `folder` that `module` lies in: a module of it, or a sub-folder."""
    prefix = _module(folder / "__init__.py").removesuffix(".__init__")
    if not module.startswith(prefix + "."):
        return None
    return module.removeprefix(prefix + ".").split(".")[0]


def measure(folder: Path) -> dict[str, object]:
    files = sorted(folder.rglob("*.py"))
    rooms = {p.relative_to(folder).parts[0].removesuffix(".py") for p in files
             if not (p.parent == folder and _is_face(p))}  # fmt: skip
    arrows: dict[str, set[str]] = defaultdict(set)
    for path in files:
        source = _room(folder, _module(path))
        for target in _imports(path):
            room = _room(folder, target)
            if source and room and room in rooms and room != source:
                arrows[source].add(room)
    return {
        "rooms": len(rooms),
        "arrows": sum(len(t) for t in arrows.values()),
        "back_up": _closing_cycles(arrows),
    }


def _closing_cycles(arrows: dict[str, set[str]]) -> list[str]:
    """The arrows that close a cycle (found depth first): without them the rooms stand
    in floors."""
    state: dict[str, int] = {}
    closing: list[str] = []

    def visit(room: str) -> None:
        state[room] = 1
        for target in sorted(arrows.get(room, ())):
            if state.get(target) == 1:
                closing.append(f"{room} -> {target}")
            elif target not in state:
                visit(target)
        state[room] = 2

    for room in sorted(arrows):
        if room not in state:
            visit(room)
    return closing


def folders(top: Path) -> list[Path]:
    return [top, *sorted(p.parent for p in top.rglob("*/__init__.py"))]


def main(argv: list[str]) -> int:
    tops = [REPO / arg for arg in argv] or [REPO / "query_rewriter", REPO / "workbench"]
    print(f"{'folder':40} {'rooms':>5} {'arrows':>6} {'back up':>7}")
    worst = 0
    for top in tops:
        for folder in folders(top) if not argv else [top]:
            figures = measure(folder)
            back_up = figures["back_up"]
            assert isinstance(back_up, list) and isinstance(figures["rooms"], int)
            worst = max(worst, figures["rooms"])
            name = str(folder.relative_to(REPO)) + "/"
            print(f"{name:40} {figures['rooms']:>5} {figures['arrows']:>6} {len(back_up):>7}")
            for arrow in back_up:
                print(f"    runs back up: {arrow}")
    print(f"largest folder: {worst} rooms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
