"""Redis from the OS packages: Celery's broker and result backend, and the rewrite cache."""

from __future__ import annotations

from kgqr_ops.services.local_service import LocalService, port_of
from kgqr_ops.services.os_packages import ensure_installed


class RedisServer(LocalService):
    name = "redis"
    startup_timeout_s = 30.0

    @property
    def port(self) -> int:
        return port_of(self.settings.redis_url, 6379)

    def prepare(self) -> None:
        ensure_installed(self.name, "redis-server", "redis-server")
        self.layout.data(self.name).mkdir(parents=True, exist_ok=True)

    def command(self) -> tuple[list[str], dict[str, str]]:
        argv = [
            "redis-server",
            "--bind", self.host, "--port", str(self.port),
            "--dir", str(self.layout.data(self.name)),
            "--daemonize", "no", "--save", "300 10", "--appendonly", "no",
            # Bounded: the caches (every key with a TTL) give way; queues never do.
            "--maxmemory", f"{self.settings.redis_maxmemory_mb}mb",
            "--maxmemory-policy", "volatile-lru",
        ]  # fmt: skip
        return argv, {}

    def _client(self):  # type: ignore[no-untyped-def]
        import redis

        return redis.Redis(host=self.host, port=self.port, socket_timeout=2)

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
