"""kgqr's packages point one way (docs/architecture.md, "Layers"):

    kgqr_core  <-  plugin  <-  ingest, query_rewriter  <-  workbench  <-  kgqr_ops, every `cli`

The core (settings, connections, the LLM and embedder clients, prompts, ids) imports none
of the others; plugin (what is installed into the engines) only the core; the write and
read paths only the core and plugin, never each other; the relevance workbench
(evaluation, the tuning page, question synthesis, plan optimisation) may call the read
path, which never imports it; the ops layer (local services, the nginx front, the served
app, smoke checks) and the command-line modules anything. Checked over every import
statement, including those inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("kgqr_core", "plugin", "ingest", "query_rewriter", "workbench", "kgqr_ops")
MAY_IMPORT = {
    "kgqr_core": {"kgqr_core"},
    "plugin": {"kgqr_core", "plugin"},
    "ingest": {"kgqr_core", "plugin", "ingest"},
    "query_rewriter": {"kgqr_core", "plugin", "query_rewriter"},
    "workbench": {"kgqr_core", "plugin", "query_rewriter", "workbench"},
    "kgqr_ops": set(PACKAGES),
    "cli": set(PACKAGES),
}


def _layer(module: str) -> str:
    last = module.rsplit(".", 1)[-1]
    return "cli" if last == "cli" or last.endswith("_cli") else module.split(".", 1)[0]


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {name for name in found if name.split(".", 1)[0] in PACKAGES}


def _modules(root: Path = REPO) -> list[tuple[str, Path]]:
    return [
        (".".join(path.relative_to(root).with_suffix("").parts), path)
        for package in PACKAGES
        if (root / package).is_dir()
        for path in sorted((root / package).rglob("*.py"))
    ]


def _violations(modules: list[tuple[str, Path]]) -> list[str]:
    wrong = []
    for module, path in modules:
        allowed = MAY_IMPORT[_layer(module)]
        wrong += [f"{module} -> {target}" for target in sorted(_imports(path))
                  if target.split(".", 1)[0] not in allowed]  # fmt: skip
    return wrong


def _tree(root: Path, files: dict[str, str]) -> Path:
    """A checkout of `files` (path: source) under `root`, for the checks to read."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_imports_only_the_layers_below_it(package: str) -> None:
    modules = [(m, p) for m, p in _modules() if m.split(".", 1)[0] == package]
    assert modules, f"no modules found in {package}"
    wrong = _violations(modules)
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_the_check_catches_imports_against_the_layers(tmp_path: Path) -> None:
    files = {
        "kgqr_core/settings.py": "from plugin import schema\n",
        "ingest/tasks.py": "def f():\n    from query_rewriter.proxy.app import create_app\n",
        "query_rewriter/cli.py": "from kgqr_ops.nginx_front import running_front\n",
        "query_rewriter/search/service.py": "from workbench.tuning import routes\n",
        "workbench/evaluation/runner.py": "from query_rewriter.strategies import STRATEGIES\n",
        "plugin/schema.py": "import kgqr_core.settings\n",
    }
    assert sorted(_violations(_modules(_tree(tmp_path, files)))) == [
        "ingest.tasks -> query_rewriter.proxy.app",
        "kgqr_core.settings -> plugin",
        "query_rewriter.search.service -> workbench.tuning",
    ]


# The read path's floors, along a search's way down: a module imports only its own floor
# and those below it (the top-level `metrics` and `structured_logging` are the ground).
READ_PATH_FLOORS = ("engine", "graph", "strategies", "search", "proxy")


def _floor(module: str) -> int:
    parts = module.split(".")
    if len(parts) < 3 or parts[1] not in READ_PATH_FLOORS:
        return -1  # query_rewriter.metrics, .structured_logging: the ground
    return READ_PATH_FLOORS.index(parts[1])


def _upward(modules: list[tuple[str, Path]]) -> list[str]:
    wrong = []
    for module, path in modules:
        if module.split(".")[0] != "query_rewriter" or _layer(module) == "cli":
            continue
        above = [t for t in _imports(path) if t.startswith("query_rewriter.")
                 and _floor(t) > _floor(module)]  # fmt: skip
        wrong += [f"{module} -> {target}" for target in sorted(above)]
    return wrong


def test_no_import_of_the_read_path_runs_back_up() -> None:
    assert not _upward(_modules()), "imports running up the read path:\n" + "\n".join(
        _upward(_modules())
    )


def test_the_floor_check_catches_an_import_running_up(tmp_path: Path) -> None:
    files = {
        "query_rewriter/engine/gateway.py": "from query_rewriter.search.plan import SearchPlan\n",
        "query_rewriter/search/service.py": "from query_rewriter.engine.gateway import Engine\n",
        "query_rewriter/graph/store.py": "from query_rewriter import metrics\n",
    }
    assert _upward(_modules(_tree(tmp_path, files))) == [
        "query_rewriter.engine.gateway -> query_rewriter.search.plan"
    ]
