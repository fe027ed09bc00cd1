"""Redis from the OS packages: Celery's broker and result backend, and the rewrite cache.

It answers only with a password, made on first start and kept readable by its owner only
(kgqr_core.settings.local_redis_password_file); every kgqr client on this machine reads
it from there. The password reaches redis-server through a config file, never its command
line, where any local user's `ps` would show it.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from kgqr_core.settings import local_redis_password, local_redis_password_file
from kgqr_ops.services.local_service import LocalService, port_of
from kgqr_ops.services.os_packages import ensure_installed


class RedisServer(LocalService):
    name = "redis"
    startup_timeout_s = 30.0

    @property
    def port(self) -> int:
        return port_of(self.settings.redis.url, 6379)

    @property
    def config_file(self) -> Path:
        return self.layout.data(self.name) / "redis.conf"

    @property
    def password(self) -> str | None:
        """The configured password, else the local one; None until `up` makes it (a
        `status` made and wrote one)."""
        if self.settings.redis.password is not None:
            return self.settings.redis.password.get_secret_value()
        return local_redis_password(self.settings.home)

    def _password_to_serve(self) -> str:
        """The password the server is started with: the known one, else one made now."""
        known = self.password
        if known:
            return known
        made = secrets.token_urlsafe(24)
        _private_file(local_redis_password_file(self.settings.home), made)
        return made

    def prepare(self) -> None:
        ensure_installed(self.name, "redis-server", "redis-server")
        # Its snapshot holds the queued ingest tasks and the cached rewrites: its owner's.
        self.layout.data(self.name).mkdir(parents=True, exist_ok=True)
        self.layout.data(self.name).chmod(0o700)

    def command(self) -> tuple[list[str], dict[str, str]]:
        # Only the password goes through the file: the options stay in the command, whose
        # change is what makes `kgqr services up` restart the server.
        _private_file(self.config_file, f'requirepass "{self._password_to_serve()}"\n')
        argv = [
            "redis-server", str(self.config_file),
            "--bind", self.host, "--port", str(self.port),
            "--dir", str(self.layout.data(self.name)),
            "--daemonize", "no", "--save", "300 10", "--appendonly", "no",
            # Bounded: the caches (every key with a TTL) give way; queues never do.
            "--maxmemory", f"{self.settings.redis.maxmemory_mb}mb",
            "--maxmemory-policy", "volatile-lru",
        ]  # fmt: skip
        return argv, {}

    def _client(self):  # type: ignore[no-untyped-def]
        import redis

        return redis.Redis(host=self.host, port=self.port, password=self.password, socket_timeout=2)

    def is_healthy(self) -> bool:
        import redis

        try:
            return bool(self._client().ping())
        except (redis.RedisError, OSError):
            return False

    def version(self) -> str | None:
        import redis

        try:
            return str(self._client().info("server")["redis_version"])
        except (redis.RedisError, OSError, KeyError):
            return None


def _private_file(path: Path, text: str) -> None:
    """`text` in a file only its owner may read, never readable by others in between."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    os.chmod(path, 0o600)
