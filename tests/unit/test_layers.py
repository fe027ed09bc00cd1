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
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert sorted(_violations(_modules(tmp_path))) == [
        "ingest.tasks -> query_rewriter.proxy.app",
        "kgqr_core.settings -> plugin",
        "query_rewriter.search.service -> workbench.tuning",
    ]
