"""A single-node OpenSearch with k-NN and neural-search, assembled from Maven Central.

The minimal distribution on Maven Central (``integ-test-zip``) has no plugins and only one
module; the standard modules are added from their jars (``opensearch_modules.py``).
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

from kgqr_core.layout import ServiceLayout
from kgqr_core.settings import Settings
from kgqr_ops.services import maven
from kgqr_ops.services.archives import extract_zip, replace_dir
from kgqr_ops.services.http_probe import request_json
from kgqr_ops.services.java import find_java_home
from kgqr_ops.services.local_service import LocalService, port_of
from kgqr_ops.services.opensearch_cluster import ClusterMember, members
from kgqr_ops.services.opensearch_guard import add_engine_guard, guard_digest
from kgqr_ops.services.opensearch_modules import MODULES, add_missing_modules
from kgqr_ops.services.process import run_checked
from kgqr_ops.services.service_user import (
    UNPRIVILEGED_ROOT,
    as_service_user,
    ensure_service_user,
    hand_over,
    running_as_root,
)
from kgqr_ops.services.unrunnable_indices import red_because_of_unrunnable

# Maven Central has no checksum files for the neural-search zips; these were recorded on
# first download and must be added here when the plugin version changes.
NEURAL_SEARCH_SHA256 = {
    "2.19.1.0": "b17ca1d774692902c58cbae102bf463970740c31d81446866e8eabd336e285aa",
}


class OpenSearchNode(LocalService):
    name = "opensearch"
    startup_timeout_s = 180.0
    cluster_name = "kgqr-local"

    def __init__(self, settings: Settings, member: ClusterMember | None = None) -> None:
        self.member = member or self.cluster(settings)[0]
        self.name = self.member.service  # before LocalService names its process after it
        super().__init__(settings)

    @staticmethod
    def base_dir(settings: Settings) -> Path:
        """Installs and data: under the service user's root when we run as root."""
        return UNPRIVILEGED_ROOT if running_as_root() else ServiceLayout(settings.home).root

    @classmethod
    def data_root(cls, settings: Settings) -> Path:
        """Where every local node keeps its data folder."""
        return cls.base_dir(settings) / "data"

    @classmethod
    def cluster(cls, settings: Settings) -> list[ClusterMember]:
        """The main cluster's nodes: `settings.opensearch.nodes` of them."""
        port = port_of(settings.opensearch.url, 9200)
        return members(
            cls.name, cls.cluster_name, settings.opensearch.nodes, port,
            settings.opensearch.extra_node_base_port, port + 100, cls.data_root(settings),
        )  # fmt: skip

    @property
    def port(self) -> int:
        return self.member.http_port

    @property
    def install_dir(self) -> Path:
        s = self.settings
        return (
            self.base_dir(s)
            / "installs"
            / f"opensearch-{s.opensearch.version}-plugins-{s.opensearch.plugin_version}"
        )

    @property
    def data_dir(self) -> Path:
        return self.member.data_dir

    def _artifacts(self) -> tuple[maven.MavenArtifact, list[maven.MavenArtifact]]:
        s = self.settings
        distribution = maven.MavenArtifact(
            "org.opensearch.distribution.integ-test-zip", "opensearch", s.opensearch.version
        )
        plugins = [
            maven.MavenArtifact(
                "org.opensearch.plugin", "opensearch-knn", s.opensearch.plugin_version
            ),
            maven.MavenArtifact(
                "org.opensearch.plugin",
                "neural-search",
                s.opensearch.plugin_version,
                sha256=NEURAL_SEARCH_SHA256.get(s.opensearch.plugin_version),
            ),
        ]
        return distribution, plugins

    def prepare(self) -> None:
        self.install()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if running_as_root():
            ensure_service_user()
            hand_over(self.install_dir)
            hand_over(self.data_dir)

    def install(self) -> Path:
        """The assembled distribution (`kgqr images build` copies it into an image too)."""
        java_home = find_java_home(self.settings.java_home)
        marker = self.install_dir / ".kgqr-installed"
        recipe = self._recipe()
        if not marker.is_file() or marker.read_text() != recipe:
            distribution, plugins = self._artifacts()
            dist_zip = maven.fetch(
                distribution, self.layout.downloads, self.layout.maven_repo, self.name
            )
            plugin_zips = [
                maven.fetch(p, self.layout.downloads, self.layout.maven_repo, self.name)
                for p in plugins
            ]
            with tempfile.TemporaryDirectory(dir=self.layout.root) as scratch:
                home = extract_zip(dist_zip, Path(scratch))
                add_missing_modules(
                    home,
                    self.settings.opensearch.version,
                    self.layout.downloads,
                    self.layout.maven_repo,
                )
                for plugin_zip in plugin_zips:
                    run_checked(
                        self.name,
                        [str(home / "bin" / "opensearch-plugin"), "install", "--batch",
                         plugin_zip.as_uri()],
                        env={"OPENSEARCH_JAVA_HOME": str(java_home), "PATH": "/usr/bin:/bin"},
                    )  # fmt: skip
                add_engine_guard(home, java_home, self.settings.opensearch.version)
                (home / ".kgqr-installed").write_text(recipe)
                replace_dir(home, self.install_dir)
        return self.install_dir

    def startup_problem(self) -> str | None:
        return red_because_of_unrunnable(self)

    def _recipe(self) -> str:
        """What an install holds; an install made by another recipe is rebuilt (data kept)."""
        modules = ",".join(module.name for module in MODULES)
        return f"modules: {modules}\nengine guard: {guard_digest()}\n"

    def node_options(self) -> list[str]:
        """Further `-E` options of a node kind (the secured node's transport port)."""
        return []

    def node_environment(self) -> dict[str, str]:
        """Further environment of a node kind (the secured node's own config folder)."""
        return {}

    def command(self) -> tuple[list[str], dict[str, str]]:
        java_home = find_java_home(self.settings.java_home)
        heap = self.settings.opensearch.heap_mb
        argv = as_service_user([
            str(self.install_dir / "bin" / "opensearch"),
            *self.member.options(),
            "-E", f"network.host={self.host}",
            "-E", f"http.port={self.port}",
            *self.node_options(),
            "-E", f"path.data={self.data_dir / 'data'}",
            "-E", f"path.logs={self.data_dir / 'logs'}",
            # A developer disk that is 90% full must not turn every index read-only.
            "-E", "cluster.routing.allocation.disk.threshold_enabled=false",
        ])  # fmt: skip
        env = {
            "OPENSEARCH_JAVA_HOME": str(java_home),
            "OPENSEARCH_JAVA_OPTS": f"-Xms{heap}m -Xmx{heap}m",
            # What the install holds (the engine guard's source among it): a running node
            # of another recipe is started again by `up`, where it kept an edited guard
            # out until something else restarted it.
            "KGQR_INSTALL_RECIPE": hashlib.sha256(self._recipe().encode()).hexdigest()[:12],
            **self.node_environment(),
        }
        return argv, env

    def call(self, method: str, path: str, timeout_s: float = 2.0) -> Any | None:
        """The JSON of a 2xx answer, else None (probes and repairs)."""
        return request_json(method, f"http://{self.host}:{self.port}{path}", timeout_s=timeout_s)

    def get(self, path: str) -> Any | None:
        return self.call("GET", path)

    def is_healthy(self) -> bool:
        health = self.get("/_cluster/health") or {}
        return health.get("status") in {"green", "yellow"}

    def version(self) -> str | None:
        root = self.get("/")
        plugins = self.get("/_cat/plugins?format=json") or []
        if not root:
            return None
        names = ", ".join(f"{p['component']} {p['version']}" for p in plugins)
        health = self.get("/_cluster/health") or {}
        cluster = (
            f"; cluster {health['status']}, {health['number_of_nodes']} nodes, "
            f"{health['unassigned_shards']} unassigned shards"
            if self.member.nodes > 1 and health
            else ""
        )
        return f"{root['version']['number']} ({names or 'no plugins'}){cluster}"
