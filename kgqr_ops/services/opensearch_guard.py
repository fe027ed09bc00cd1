"""kgqr's engine guard, compiled into the local node's plugins (see KgqrEngineGuard.java).

The node kgqr runs has k-NN without native libraries, so one client call mapping a vector
on faiss or nmslib would take it down for good. The guard refuses such mappings with a 400
before they exist; it is built from source at install time against the node's own jars.
"""

from __future__ import annotations

import hashlib
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from kgqr_ops.services.process import run_checked

GUARD_NAME = "kgqr-engine-guard"
GUARD_CLASS = "kgqr.opensearch.KgqrEngineGuard"
RUNNABLE_ENGINE = "lucene"
STRUCTURAL_KEYS = {"properties", "mapping", "fields", "dynamic_templates"}
DESCRIPTOR = """\
description=Refuses k-NN mappings this node cannot run (no native engines): kgqr
version=1.0.0
name={name}
classname={classname}
java.version=17
opensearch.version={version}
extended.plugins=
has.native.controller=false
"""


def guard_source() -> Path:
    return Path(str(resources.files("plugin.opensearch").joinpath("KgqrEngineGuard.java")))


def guard_digest() -> str:
    """Part of the install's recipe: an edited guard rebuilds the install."""
    return hashlib.sha256(guard_source().read_bytes()).hexdigest()[:12]


def add_engine_guard(home: Path, java_home: Path, version: str) -> None:
    """Compile the guard against home's jars and place it in home/plugins."""
    folder = home / "plugins" / GUARD_NAME
    folder.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as scratch:
        classes = Path(scratch)
        run_checked(
            "opensearch",
            [str(java_home / "bin" / "javac"), "--release", "17", "-proc:none",
             "-cp", f"{home / 'lib'}/*", "-d", str(classes), str(guard_source())],
        )  # fmt: skip
        run_checked(
            "opensearch",
            [str(java_home / "bin" / "jar"), "cf", str(folder / f"{GUARD_NAME}.jar"),
             "-C", str(classes), "."],
        )  # fmt: skip
    (folder / "plugin-descriptor.properties").write_text(
        DESCRIPTOR.format(name=GUARD_NAME, classname=GUARD_CLASS, version=version)
    )


def unrunnable_fields(mapping: Any, knn_enabled: bool, path: str = "") -> list[str]:
    """The knn_vector fields of a mapping this node cannot run, as the guard judges them
    (KgqrEngineGuard.fieldProblem): for indices made before the guard was installed."""
    found: list[str] = []
    if isinstance(mapping, dict):
        if mapping.get("type") == "knn_vector":
            method = mapping.get("method")
            engine = method.get("engine") if isinstance(method, dict) else None
            if engine is not None:
                if str(engine).lower() != RUNNABLE_ENGINE:
                    found.append(f"{path or '?'} (engine {engine})")
            elif "model_id" in mapping or knn_enabled:
                found.append(f"{path or '?'} (engine faiss)")
        for key, value in mapping.items():
            inner = key in STRUCTURAL_KEYS
            found += unrunnable_fields(value, knn_enabled, path if inner else _join(path, key))
    elif isinstance(mapping, list):
        for item in mapping:
            found += unrunnable_fields(item, knn_enabled, path)
    return found


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key
