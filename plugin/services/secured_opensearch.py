"""A second local OpenSearch node with the security plugin: TLS, users, roles and
document-level security, for proving kgqr never widens a caller's access.

It is the plain node's distribution and plugins plus `opensearch-security` from Maven
Central, with its own config folder, data and port (`KGQR_SECURED_OPENSEARCH_PORT`). The
TLS certificates are made here at first start with `openssl` (never downloaded), and the
admin and kgqr service passwords are generated then too, kept in a 0600 file beside the
node's data unless `KGQR_SECURED_ADMIN_PASSWORD` / `KGQR_SECURED_KGQR_PASSWORD` name them.
`kgqr services up opensearch-secured` starts it; plain `kgqr services up` does not.
"""

from __future__ import annotations

import json
import secrets
import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from plugin.connections import basic_authorization
from plugin.schema import JUDGMENTS_INDEX, META_INDEX, QUERY_LOG_INDEX, TUNE_RUNS_INDEX
from plugin.services import maven
from plugin.services.errors import ServiceError
from plugin.services.http_probe import request_json
from plugin.services.opensearch_node import OpenSearchNode
from plugin.services.process import run_checked
from plugin.services.service_user import hand_over, running_as_root

ADMIN_DN = "CN=kgqr-admin,O=kgqr local"
NODE_DN = "CN=kgqr-node,O=kgqr local"
# Maven Central has no checksum files for the security zip; recorded on first download.
SECURITY_SHA256 = {
    "2.19.1.0": "94a04f12ac6033902209fac1e4e512618d45beee604bbf0e42c3ed79c55220cf",
}
SERVICE_ROLE = "kgqr_service"
# kgqr's own account: its bookkeeping indices and the definitions the proxy installs.
SERVICE_ROLE_DEFINITION = {
    "cluster_permissions": [
        "cluster_monitor",
        "cluster_manage_index_templates",
        "cluster_manage_pipelines",
        "cluster:admin/search/pipeline/*",
        "indices:data/write/bulk",
    ],
    "index_permissions": [
        {
            "index_patterns": [
                META_INDEX,
                f"{QUERY_LOG_INDEX}*",
                f"{JUDGMENTS_INDEX}*",
                f"{TUNE_RUNS_INDEX}*",
            ],
            "allowed_actions": ["crud", "create_index", "manage"],
        }
    ],
}


@dataclass(frozen=True)
class SecuredCredentials:
    """Who may do what on the secured node: the admin (all_access) and kgqr's service user."""

    admin_password: str
    kgqr_password: str
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

    @property
    def port(self) -> int:
        return self.settings.secured_opensearch_port

    @property
    def install_dir(self) -> Path:
        return super().install_dir.with_name(super().install_dir.name + "-security")

    @property
    def data_dir(self) -> Path:
        return self._base / "data" / "opensearch-secured"

    @property
    def config_dir(self) -> Path:
        return self.data_dir / "config"

    @property
    def credentials_file(self) -> Path:
        return self.data_dir / "credentials.json"

    def _artifacts(self) -> tuple[maven.MavenArtifact, list[maven.MavenArtifact]]:
        distribution, plugins = super()._artifacts()
        version = self.settings.opensearch_plugin_version
        security = maven.MavenArtifact(
            "org.opensearch.plugin",
            "opensearch-security",
            version,
            sha256=SECURITY_SHA256.get(version),
        )
        return distribution, [*plugins, security]

    def prepare(self) -> None:
        super().prepare()
        if not (self.config_dir / ".kgqr-configured").is_file():
            self._configure()
        if running_as_root():
            hand_over(self.data_dir)

    def _configure(self) -> None:
        """A config folder of the node's own: the distribution's, plus certificates, the
        security settings, and the users and roles the security index starts from."""
        shutil.rmtree(self.config_dir, ignore_errors=True)
        shutil.copytree(self.install_dir / "config", self.config_dir)
        certs = self.config_dir / "certs"
        _make_certificates(certs)
        credentials = self._credentials(create=True)
        security = self.config_dir / "opensearch-security"
        (security / "internal_users.yml").write_text(
            _internal_users(credentials.admin_password, credentials.kgqr_password)
        )
        with (security / "roles.yml").open("a") as roles:
            roles.write("\n" + yaml.safe_dump({SERVICE_ROLE: SERVICE_ROLE_DEFINITION}))
        with (security / "roles_mapping.yml").open("a") as mapping:
            mapping.write("\n" + yaml.safe_dump({SERVICE_ROLE: {"users": ["kgqr"]}}))
        settings = {
            "plugins.security.ssl.transport.pemcert_filepath": "certs/node.pem",
            "plugins.security.ssl.transport.pemkey_filepath": "certs/node-key.pem",
            "plugins.security.ssl.transport.pemtrustedcas_filepath": "certs/root-ca.pem",
            "plugins.security.ssl.transport.enforce_hostname_verification": False,
            "plugins.security.ssl.http.enabled": True,
            "plugins.security.ssl.http.pemcert_filepath": "certs/node.pem",
            "plugins.security.ssl.http.pemkey_filepath": "certs/node-key.pem",
            "plugins.security.ssl.http.pemtrustedcas_filepath": "certs/root-ca.pem",
            "plugins.security.allow_default_init_securityindex": True,
            "plugins.security.authcz.admin_dn": [ADMIN_DN],
            "plugins.security.nodes_dn": [NODE_DN],
            "plugins.security.restapi.roles_enabled": ["all_access"],
            "plugins.security.audit.type": "noop",
            "plugins.security.check_snapshot_restore_write_privileges": True,
        }
        with (self.config_dir / "opensearch.yml").open("a") as yml:
            yml.write("\n# kgqr: the security plugin, set up by kgqr services\n")
            for key, value in settings.items():
                yml.write(f"{key}: {json.dumps(value)}\n")
        (self.config_dir / ".kgqr-configured").write_text("ok\n")

    def _credentials(self, create: bool = False) -> SecuredCredentials:
        stored: dict[str, str] = {}
        if self.credentials_file.is_file():
            stored = json.loads(self.credentials_file.read_text())
        elif not create:
            raise ServiceError(
                self.name, "not set up yet: run `kgqr services up opensearch-secured`"
            )
        s = self.settings
        admin = s.secured_admin_password.get_secret_value() if s.secured_admin_password else None
        kgqr = s.secured_kgqr_password.get_secret_value() if s.secured_kgqr_password else None
        values = {
            "admin_password": admin or stored.get("admin_password") or _password(),
            "kgqr_password": kgqr or stored.get("kgqr_password") or _password(),
        }
        if values != stored:
            self.credentials_file.parent.mkdir(parents=True, exist_ok=True)
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
        return ["-E", f"transport.port={self.port + 100}"]

    def node_environment(self) -> dict[str, str]:
        return {"OPENSEARCH_PATH_CONF": str(self.config_dir)}

    def call(self, method: str, path: str, timeout_s: float = 3.0) -> Any | None:
        """As the admin, over TLS checked against the node's own CA."""
        if not self.credentials_file.is_file():
            return None
        credentials = self._credentials()
        return request_json(
            method,
            credentials.url + path,
            headers={"Authorization": credentials.admin_authorization},
            context=ssl.create_default_context(cafile=str(credentials.ca_file)),
            timeout_s=timeout_s,
        )


def _password() -> str:
    return secrets.token_urlsafe(18)


def _hash(password: str) -> str:
    import bcrypt

    # The security plugin's own tool writes $2y$; the same algorithm as Python's $2b$.
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=12)).decode()
    return "$2y$" + hashed[4:]


def _internal_users(admin_password: str, kgqr_password: str) -> str:
    users = {
        "_meta": {"type": "internalusers", "config_version": 2},
        "admin": {"hash": _hash(admin_password), "reserved": True, "backend_roles": ["admin"]},
        "kgqr": {"hash": _hash(kgqr_password), "reserved": False},
    }
    return json.dumps(users, indent=2) + "\n"


def _make_certificates(folder: Path) -> None:
    """A root CA, a node certificate (for 127.0.0.1 and localhost) and an admin client
    certificate, all with PKCS#8 keys as the security plugin wants them."""
    folder.mkdir(parents=True, exist_ok=True)

    def openssl(*args: str) -> None:
        run_checked("opensearch-secured", ["openssl", *args], cwd=folder)

    if shutil.which("openssl") is None:
        raise ServiceError("opensearch-secured", "`openssl` is needed to make its certificates")
    openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
            "-out", "root-ca-key.pem")  # fmt: skip
    openssl("req", "-x509", "-new", "-key", "root-ca-key.pem", "-sha256", "-days", "3650",
            "-subj", "/O=kgqr local/CN=kgqr local root CA", "-out", "root-ca.pem")  # fmt: skip
    for name, subject, extensions in (
        ("node", "/O=kgqr local/CN=kgqr-node",
         "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth"),
        ("admin", "/O=kgqr local/CN=kgqr-admin", "extendedKeyUsage=clientAuth"),
    ):  # fmt: skip
        openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                "-out", f"{name}-key.pem")  # fmt: skip
        openssl("req", "-new", "-key", f"{name}-key.pem", "-subj", subject,
                "-out", f"{name}.csr")  # fmt: skip
        (folder / f"{name}.ext").write_text(extensions + "\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "root-ca.pem",
                "-CAkey", "root-ca-key.pem", "-CAcreateserial", "-sha256", "-days", "3650",
                "-extfile", f"{name}.ext", "-out", f"{name}.pem")  # fmt: skip
    for leftover in folder.glob("*.csr"):
        leftover.unlink()
    subprocess.run(["chmod", "600", *map(str, folder.glob("*-key.pem"))], check=True)
