"""Finding a JDK both OpenSearch 2.19 and Neo4j 5.26 run on (17 or 21)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from kgqr_ops.services.errors import ServiceError

SUPPORTED_MAJORS = (17, 21)


def java_major(java_home: Path) -> int | None:
    java = java_home / "bin" / "java"
    if not java.is_file():
        return None
    result = subprocess.run([str(java), "-version"], capture_output=True, text=True)
    match = re.search(r'version "(\d+)', result.stderr)
    return int(match.group(1)) if match else None


def find_java_home(configured: Path | None) -> Path:
    """The configured JDK, else JAVA_HOME, else one under /usr/lib/jvm, of a supported major."""
    candidates: list[Path] = []
    if configured is not None:
        candidates.append(configured)
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]))
    jvm_root = Path("/usr/lib/jvm")
    if jvm_root.is_dir():
        candidates.extend(sorted(path for path in jvm_root.iterdir() if path.is_dir()))
    seen: list[str] = []
    for candidate in candidates:
        major = java_major(candidate)
        if major in SUPPORTED_MAJORS:
            return candidate
        seen.append(f"{candidate} (java {major})" if major else str(candidate))
    raise ServiceError(
        "java",
        f"no JDK {' or '.join(map(str, SUPPORTED_MAJORS))} found (looked at: "
        f"{', '.join(seen) or 'nothing'}). Install one, e.g. `apt-get install "
        "openjdk-17-jdk-headless`, or set KGQR_JAVA_HOME.",
    )
