"""A second local OpenSearch node with the security plugin: TLS, users, roles and
document-level security, for proving kgqr never widens a caller's access.

It is the plain node's distribution and plugins plus `opensearch-security` from Maven
Central, with its own config folder, data and port (`KGQR_SECURED_OPENSEARCH_PORT`). The
TLS certificates are made at first start with `openssl` (never downloaded) by
plugin/opensearch/security/configure.sh, the script docker/compose.yml runs too. The admin,
kgqr, kgqr-ingest and Dashboards passwords are generated then, kept in a 0600 file among
the node's keys (outside its data, which the node's user owns) unless
`KGQR_SECURED_ADMIN_PASSWORD` / `KGQR_SECURED_KGQR_PASSWORD` name the first two.
`kgqr services up opensearch-secured` starts it; plain `kgqr services up` does not.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import ssl
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from kgqr_core.connections import basic_authorization
from kgqr_core.settings import Settings
from kgqr_ops.services import maven
from kgqr_ops.services.errors import ServiceError
from kgqr_ops.services.http_probe import request_json
from kgqr_ops.services.java import find_java_home
from kgqr_ops.services.opensearch_cluster import ClusterMember, members
from kgqr_ops.services.opensearch_node import OpenSearchNode
from kgqr_ops.services.process import run_checked
from kgqr_ops.services.service_user import hand_over, running_as_root
from plugin.security_roles import RoleNotPut, put_kgqr_roles

# Maven Central has no checksum files for the security zip; recorded on first download.
SECURITY_SHA256 = {
    "2.19.1.0": "94a04f12ac6033902209fac1e4e512618d45beee604bbf0e42c3ed79c55220cf",
}
# The one site whose pages may call the secured node from a browser (CORS).
BROWSER_APP_ORIGIN = "https://search-app.example"
# REST impersonation (header `opendistro_security_impersonate_as`): this user may act as
# that one, as a support desk checks what a customer sees. Test users of these names are
# made by the tests.
IMPERSONATOR, IMPERSONATED = "reader", "restricted"


@dataclass(frozen=True)
class SecuredCredentials:
    """Who may do what on the secured node: the admin (all_access), kgqr's service user,
    the ingest user and Dashboards' server user."""

    admin_password: str
    kgqr_password: str
    ingest_password: str  # kgqr-ingest: writes knowledge bases (role kgqr_ingest)
    dashboards_password: str  # kibanaserver: OpenSearch Dashboards' server user
    ca_file: Path
    url: str

    @property
    def admin_authorization(self) -> str:
        return basic_authorization("admin", self.admin_password)


class SecuredOpenSearchNode(OpenSearchNode):
    name = "opensearch-secured"
    cluster_name = "kgqr-secured"
    startup_timeout_s = 240.0
    optional = True  # started only when named

    @classmethod
    def cluster(cls, settings: Settings) -> list[ClusterMember]:
        """Always one node of its own (its transport port is set by node_options)."""
        port = settings.opensearch.secured_port
        return members(cls.name, cls.cluster_name, 1, port, 0, port + 100, cls.data_root(settings))

    @property
    def install_dir(self) -> Path:
        return super().install_dir.with_name(super().install_dir.name + "-security")

    @property
    def config_dir(self) -> Path:
        return self.data_dir / "config"

    @property
    def credentials_file(self) -> Path:
        """The admin password passes every role: kept with the keys, not in the data folder
        handed to the node's user."""
        return self.keys_dir / "credentials.json"

    def move_credentials_out_of_data(self) -> None:
        """From where kgqr kept them until 2026-12-01, inside the data folder: at their
        first read, so that a status before the next `up` finds them too."""
        earlier = self.data_dir / "credentials.json"
        if earlier.is_file() and not self.credentials_file.is_file():
            self._make_keys_dir()
            earlier.replace(self.credentials_file)
            self.credentials_file.chmod(0o600)
            os.chown(self.credentials_file, os.getuid(), os.getgid())  # was the node user's

    def _make_keys_dir(self) -> None:
        self.keys_dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _artifacts(self) -> tuple[maven.MavenArtifact, list[maven.MavenArtifact]]:
        distribution, plugins = super()._artifacts()
        version = self.settings.opensearch.plugin_version
        security = maven.MavenArtifact(
            "org.opensearch.plugin",
            "opensearch-security",
            version,
            sha256=SECURITY_SHA256.get(version),
        )
        return distribution, [*plugins, security]

    @property
    def keys_dir(self) -> Path:
        """The CA's and the admin certificate's keys, outside the config folder the node
        reads (configure.sh says why), and beside its data folder, which is handed to the
        user the node runs as: made by root, they stay root's."""
        return self.data_dir.with_name(f"{self.data_dir.name}-keys")

    def prepare(self) -> None:
        super().prepare()
        if not self._configured():
            # A config folder of the node's own: the distribution's, made a secured node's.
            if shutil.which("openssl") is None:
                raise ServiceError(self.name, "`openssl` is needed to make its certificates")
            shutil.rmtree(self.config_dir, ignore_errors=True)
            shutil.copytree(self.install_dir / "config", self.config_dir)
            self._configure()
        if running_as_root():
            hand_over(self.data_dir)

    def _configured(self) -> bool:
        return (self.config_dir / ".kgqr-configured").is_file()

    def _configure(self) -> None:
        """The script docker/compose.yml runs in the OpenSearch image: on a folder it
        configured before, it only moves out the keys an older kgqr left there."""
        credentials = self._credentials(create=True)
        script = resources.files("plugin.opensearch.security").joinpath("configure.sh")
        run_checked(
            self.name,
            ["bash", str(script)],
            env={
                "PATH": "/usr/bin:/bin",
                "OPENSEARCH_JAVA_HOME": str(find_java_home(self.settings.java_home)),
                "OPENSEARCH_HOME": str(self.install_dir),
                "OPENSEARCH_PATH_CONF": str(self.config_dir),
                "KGQR_SECURITY_ADMIN_PASSWORD": credentials.admin_password,
                "KGQR_SECURITY_KGQR_PASSWORD": credentials.kgqr_password,
                "KGQR_SECURITY_INGEST_PASSWORD": credentials.ingest_password,
                "KGQR_SECURITY_DASHBOARDS_PASSWORD": credentials.dashboards_password,
                "KGQR_SECURITY_HOSTS": "localhost",
                "KGQR_SECURITY_KEYS_OUT": str(self.keys_dir),
            },
        )

    def _credentials(self, create: bool = False) -> SecuredCredentials:
        self.move_credentials_out_of_data()
        stored: dict[str, str] = {}
        if self.credentials_file.is_file():
            stored = json.loads(self.credentials_file.read_text())
        elif not create:
            raise ServiceError(
                self.name, "not set up yet: run `kgqr services up opensearch-secured`"
            )
        s = self.settings
        admin = (
            s.opensearch.secured_admin_password.get_secret_value()
            if s.opensearch.secured_admin_password
            else None
        )
        kgqr = (
            s.opensearch.secured_kgqr_password.get_secret_value()
            if s.opensearch.secured_kgqr_password
            else None
        )
        values = {
            "admin_password": admin or stored.get("admin_password") or _password(),
            "kgqr_password": kgqr or stored.get("kgqr_password") or _password(),
            "ingest_password": stored.get("ingest_password") or _password(),
            "dashboards_password": stored.get("dashboards_password") or _password(),
        }
        if values != stored:
            self._make_keys_dir()
            self.credentials_file.touch(mode=0o600)
            self.credentials_file.write_text(json.dumps(values))
        return SecuredCredentials(
            ca_file=self.config_dir / "certs" / "root-ca.pem",
            # By name: nginx (the front) checks a certificate's DNS names, not its IP ones.
            url=f"https://localhost:{self.port}",
            **values,
        )

    def credentials(self) -> SecuredCredentials:
        """The running node's URL, CA file and passwords (for tests and users)."""
        return self._credentials()

    def node_options(self) -> list[str]:
        """Its own transport port; CORS on for one origin, as a cluster that serves a
        browser search app is set up (what kgqr must not break: the browser's preflight);
        one user allowed to impersonate another."""
        return [
            "-E", f"transport.port={self.port + 100}",
            "-E", "http.cors.enabled=true",
            "-E", f"http.cors.allow-origin={BROWSER_APP_ORIGIN}",
            "-E", "http.cors.allow-credentials=true",
            "-E", "http.cors.allow-headers=Authorization,Content-Type,X-Opaque-Id",
            "-E", f"plugins.security.authcz.rest_impersonation_user.{IMPERSONATOR}={IMPERSONATED}",
        ]  # fmt: skip

    def node_environment(self) -> dict[str, str]:
        return {"OPENSEARCH_PATH_CONF": str(self.config_dir)}

    def up(self) -> str:
        what = super().up()
        if self._configured():  # keys an older kgqr left in it go, the node running or not
            self._configure()
        self._apply_kgqr_roles()
        return what

    def _apply_kgqr_roles(self) -> None:
        """kgqr's roles as kgqr-roles.yml has them now (plugin/security_roles.py says why)."""
        try:
            put_kgqr_roles(lambda method, path, body: self.call(method, path, body=body))
        except RoleNotPut as exc:
            raise ServiceError(self.name, str(exc)) from exc

    def call(
        self, method: str, path: str, timeout_s: float = 3.0, body: Any | None = None
    ) -> Any | None:
        """As the admin, over TLS checked against the node's own CA; None before its set-up."""
        try:
            credentials = self._credentials()
        except ServiceError:
            return None
        return request_json(
            method,
            credentials.url + path,
            headers={"Authorization": credentials.admin_authorization},
            context=ssl.create_default_context(cafile=str(credentials.ca_file)),
            timeout_s=timeout_s,
            body=body,
        )


def _password() -> str:
    return secrets.token_urlsafe(18)
