"""Neo4j 5.26 LTS with its Bolt server, run from a small Java launcher.

Neo4j's server distribution is not on Maven Central; the embedded kernel and the Bolt
connector are. Maven resolves them, javac compiles ``KgqrNeo4jLauncher.java`` with kgqr's
procedures from ``plugin/neo4j`` (once per version of the sources), and the launcher serves
Bolt on 127.0.0.1 with the procedures registered. Auth is disabled in embedded mode, so any
credentials the driver sends are accepted.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path

from kgqr_core.connections import neo4j_driver
from kgqr_ops.services import maven
from kgqr_ops.services.java import find_java_home
from kgqr_ops.services.local_service import LocalService, port_of
from kgqr_ops.services.process import port_is_open, run_checked

LAUNCHER_CLASS = "KgqrNeo4jLauncher"


def _packaged(name: str) -> Path:
    """A file shipped beside this module in ``kgqr_ops/services/neo4j``."""
    return Path(str(resources.files("kgqr_ops.services.neo4j").joinpath(name)))


def _java_sources() -> list[Path]:
    """The launcher and the procedures it registers (``plugin/neo4j``: what kgqr installs
    into Neo4j)."""
    procedures = Path(str(resources.files("plugin.neo4j")))
    return [_packaged(f"{LAUNCHER_CLASS}.java"), *sorted(procedures.glob("*.java"))]


class Neo4jServer(LocalService):
    name = "neo4j"
    startup_timeout_s = 120.0

    @property
    def port(self) -> int:
        return port_of(self.settings.neo4j.uri, 7687)

    @property
    def install_dir(self) -> Path:
        return self.layout.installs / f"neo4j-{self.settings.neo4j.version}"

    def prepare(self) -> None:
        java_home = find_java_home(self.settings.java_home)
        maven.resolve_jars(
            _packaged("pom.xml"),
            {"neo4j.version": self.settings.neo4j.version},
            self.install_dir / "lib",
            self.layout.maven_repo,
            self.name,
        )
        classes = self.classes_dir()
        if not (classes / f"{LAUNCHER_CLASS}.class").is_file():
            classes.mkdir(parents=True, exist_ok=True)
            run_checked(
                self.name,
                [str(java_home / "bin" / "javac"), "-cp", f"{self.install_dir / 'lib'}/*",
                 "-d", str(classes), *map(str, _java_sources())],
            )  # fmt: skip
        self.layout.data(self.name).mkdir(parents=True, exist_ok=True)

    def classes_dir(self) -> Path:
        """One directory per version of the Java sources: an edited launcher or procedure is
        compiled again, and the changed classpath makes `services up` restart the server."""
        digest = hashlib.sha256(b"".join(p.read_bytes() for p in _java_sources())).hexdigest()[:12]
        return self.install_dir / "classes" / digest

    def command(self) -> tuple[list[str], dict[str, str]]:
        java_home = find_java_home(self.settings.java_home)
        s = self.settings
        classpath = f"{self.classes_dir()}:{self.install_dir / 'lib'}/*"
        argv = [
            str(java_home / "bin" / "java"),
            f"-Xms{s.neo4j.heap_mb}m", f"-Xmx{s.neo4j.heap_mb}m",
            "-cp", classpath, LAUNCHER_CLASS,
            str(self.layout.data(self.name)), self.host, str(self.port),
            str(s.neo4j.pagecache_mb),
        ]  # fmt: skip
        return argv, {}

    def is_healthy(self) -> bool:
        return port_is_open(self.host, self.port) and self.version() is not None

    def version(self) -> str | None:
        from neo4j.exceptions import Neo4jError, ServiceUnavailable

        try:
            with neo4j_driver(self.settings, connection_timeout=2.0) as driver:
                records, _, _ = driver.execute_query(
                    "CALL dbms.components() YIELD name, versions, edition "
                    "RETURN name, versions[0] AS version, edition"
                )
        except (ServiceUnavailable, Neo4jError, OSError):
            return None
        return ", ".join(f"{r['name']} {r['version']} {r['edition']}" for r in records)
