"""nginx in front of `kgqr serve`, so traffic kgqr does not rewrite skips Python.

Every request through the Python proxy pays for an HTTP parse and a second HTTP request
(~1.5 ms on a 2-core machine, 1.4x a small search); nginx forwards in ~0.2 ms. The front
sends kgqr only what concerns it (see ``kgqr_ops/nginx/nginx.conf``) and the rest straight to
OpenSearch; kgqr's /_kgqr/metrics still counts the front's requests (``front_status.py``). What
it cannot see: an ``ext.kgqr`` object in the body of a search on an index kgqr does not
manage reaches OpenSearch as sent, where `kgqr serve` alone would drop it.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import signal
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from urllib.parse import urlparse

from kgqr_core.child_process import terminate_child
from kgqr_core.cluster_nodes import ClusterNodes, configured_urls
from kgqr_core.connections import cluster_node_urls, reported_node_urls
from kgqr_core.settings import Settings
from kgqr_ops.services.errors import ServiceError
from kgqr_ops.services.os_packages import ensure_installed
from kgqr_ops.services.process import port_is_open
from query_rewriter.engine.caller import credential_headers, service_authorization
from query_rewriter.proxy.front_status import status_socket

SERVICE = "front"
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
ROUTES_FILE = "attached-routes.conf"
ROUTES_REFRESH_S = 10.0
log = logging.getLogger("kgqr.front")


def attached_routes(indices: Iterable[str]) -> str:
    """nginx `map` lines sending every request on an attached index (alone, first in a
    list, or with a path after it) to kgqr, its name spelt as sent or percent-encoded."""
    return "".join(f'    "~^/{_as_sent(index)}(/|,|\\?|$)" kgqr;\n' for index in sorted(indices))


def _as_sent(index: str) -> str:
    """A pattern for the index name in a raw request URI: each character other than a
    letter, digit, `-`, `_` or `.` literally or as its UTF-8 bytes percent-encoded (a
    client may encode `+` as %2B, in either case)."""
    parts = []
    for char in index:
        if char.isascii() and (char.isalnum() or char in "-_."):
            parts.append(re.escape(char))
            continue
        encoded = "".join(f"%(?:{b:02X}|{b:02x})" for b in char.encode())
        parts.append(f"(?:{re.escape(char)}|{encoded})")
    return "".join(parts)


def attached_index_names(settings: Settings) -> list[str] | None:
    """The indices attached as knowledge bases, read from kgqr-meta with kgqr's account
    (bookkeeping); None when they cannot be read (the front keeps the routes it has)."""
    from kgqr_core import connections
    from plugin.schema import META_INDEX, META_READ_SIZE

    try:
        client = connections.opensearch_client(settings)
        body = {"size": META_READ_SIZE, "_source": ["attached.index"], "query": {"match_all": {}}}
        hits = client.search(index=META_INDEX, body=body)["hits"]["hits"]
    except Exception as exc:  # no kgqr-meta yet, or the engine away: keep what we have
        log.info("attached indices not read: %s", exc)
        return None
    return [
        str(hit["_source"]["attached"]["index"]) for hit in hits if hit["_source"].get("attached")
    ]


def render_config(
    settings: Settings,
    listen: str,
    kgqr: str,
    run_dir: Path,
    status: Path,
    nodes: list[str] | None = None,
) -> str:
    """The nginx configuration: `listen` and `kgqr` as host:port, `status` the unix socket
    for its counters, `nodes` the cluster's node URLs (default: the configured ones)."""
    upstream = urlparse(settings.opensearch.url)  # an http(s) URL with a host: settings check it
    assert upstream.hostname is not None
    # Callers without credentials reach OpenSearch without any, unless the opt-in lends them
    # kgqr's account (query_rewriter/engine/caller.py).
    lent = (
        service_authorization(settings) if settings.proxy.anonymous_uses_service_account else None
    )
    tls = upstream.scheme == "https"
    template = resources.files("kgqr_ops.nginx").joinpath("nginx.conf").read_text()
    values = {
        "RUN_DIR": str(run_dir),
        "LISTEN_ADDRESS": listen,
        "KGQR_ADDRESS": kgqr,
        "OPENSEARCH_SERVERS": "\n    ".join(
            f"server {host}:{port} max_fails=1 fail_timeout=10s;"
            for _, host, port in map(ClusterNodes.address, nodes or configured_urls(settings))
        ),
        "OPENSEARCH_SCHEME": upstream.scheme,
        "OPENSEARCH_TLS": _tls_directives(settings, upstream.hostname) if tls else "",
        "DEFAULT_AUTHORIZATION": lent or "",
        "CREDENTIAL_HEADERS": "|".join(
            f"$http_{name.replace('-', '_')}" for name in sorted(credential_headers(settings))
        ),
        "STATUS_SOCKET": str(status),
        "MAX_HEADER_BYTES": str(settings.proxy.max_header_bytes),
        "MAX_LINE_BYTES": str(settings.proxy.max_initial_line_bytes),
        # nginx refuses buffers below its connection_pool_size (512): the front did not start.
        "HEADER_BUFFER_BYTES": str(
            max(settings.proxy.max_header_bytes, settings.proxy.max_initial_line_bytes, 1024)
        ),
    }
    for name, value in values.items():
        template = template.replace(f"@{name}@", value)
    return template


def _tls_directives(settings: Settings, host: str) -> str:
    """nginx's side of `connections.opensearch_ssl_context`: the same CA file (else the
    system's) and the same verification. The upstream is named "opensearch" in the config,
    so the name to send and check is set to the real host."""
    ca_file = settings.opensearch.ca_certs or ssl.get_default_verify_paths().cafile
    directives = [
        "proxy_ssl_server_name on;",
        f"proxy_ssl_name {host};",
        "proxy_ssl_session_reuse on;",
        f"proxy_ssl_verify {'on' if settings.opensearch.verify_certs else 'off'};",
    ]
    if settings.opensearch.verify_certs:
        if not ca_file or not Path(ca_file).is_file():
            raise ServiceError(
                SERVICE,
                "no CA file to check OpenSearch's certificate; set KGQR_OPENSEARCH_CA_CERTS",
            )
        directives += [f"proxy_ssl_trusted_certificate {ca_file};", "proxy_ssl_verify_depth 4;"]
    return "\n      ".join(directives)


@contextmanager
def running_front(
    settings: Settings,
    host: str,
    port: int,
    kgqr_port: int,
    on_exit: Callable[[int | None], None] | None = None,
) -> Iterator[str]:
    """nginx listening on host:port for as long as the block runs; yields its URL.
    `on_exit`: told nginx's exit code, should it exit before the block ends."""
    if port_is_open(host, port):
        raise ServiceError(SERVICE, f"{host}:{port} is already in use")
    # Left behind only by a front that was killed; the port check above says it is gone.
    status = status_socket(settings, kgqr_port, port)
    status.parent.mkdir(parents=True, exist_ok=True)
    status.unlink(missing_ok=True)
    stop = threading.Event()

    def config_with(run_dir: Path, nodes: list[str]) -> str:
        listen, kgqr = f"{host}:{port}", f"127.0.0.1:{kgqr_port}"
        return render_config(settings, listen, kgqr, run_dir, status, nodes)

    def config_for(run_dir: Path) -> str:
        (run_dir / ROUTES_FILE).write_text(attached_routes(attached_index_names(settings) or []))
        nodes = cluster_node_urls(settings)
        log.info("front: OpenSearch nodes %s", ", ".join(nodes))
        return config_with(run_dir, nodes)

    try:
        with running_nginx(config_for, host, port) as (process, run_dir):
            keeper = threading.Thread(
                target=_keep_front,
                args=(settings, run_dir, process, stop, config_with, on_exit),
                daemon=True,
            )
            keeper.start()
            yield f"http://{host}:{port}"
    finally:
        stop.set()
        status.unlink(missing_ok=True)


def _keep_front(
    settings: Settings,
    run_dir: Path,
    process: subprocess.Popen[bytes],
    stop: threading.Event,
    config_with: Callable[[Path, list[str]], str],
    on_exit: Callable[[int | None], None] | None,
) -> None:
    """Keep the front's config current, and the front itself running:
    - the attached indices' routes, when kgqr-meta's list changes;
    - the OpenSearch nodes, when the engine reports others: nginx resolves its upstreams
      once, at a load, so a node made again on another address (a container recreated)
      answered every pass-through 502 until kgqr restarted;
    - an nginx that exits is told to `on_exit` (`kgqr serve` stops, for whatever
      supervises it to start both again: the proxy ran on with no front).
    nginx reloads on SIGHUP: new workers take the new config; requests in flight finish."""
    routes, config = run_dir / ROUTES_FILE, run_dir / "nginx.conf"
    while not stop.wait(ROUTES_REFRESH_S):
        if process.poll() is not None:
            log.error("front (nginx) exited with code %s", process.returncode)
            if on_exit is not None:
                on_exit(process.returncode)
            return
        try:
            changed = _front_changes(settings, run_dir, routes, config, config_with)
        except Exception as exc:  # the next look tries again; the front runs as it was
            log.warning("front config not refreshed: %s", exc)
            continue
        if changed:
            process.send_signal(signal.SIGHUP)
            log.info("front reloaded: %s", "; ".join(changed))


def _front_changes(
    settings: Settings,
    run_dir: Path,
    routes: Path,
    config: Path,
    config_with: Callable[[Path, list[str]], str],
) -> list[str]:
    """What changed in the front's files since the last look, written. The nodes only
    from an answer of the engine's: one it could not give (the node asked is down) named
    the configured nodes alone, and the front dropped the others it had found."""
    changed = []
    names = attached_index_names(settings)
    wanted = attached_routes(names) if names is not None else None
    if wanted is not None and wanted != routes.read_text():
        routes.write_text(wanted)
        changed.append(f"routes to kgqr for attached indices {', '.join(sorted(names or []))}")
    nodes = reported_node_urls(settings)
    if nodes is not None and (rendered := config_with(run_dir, nodes)) != config.read_text():
        _write_config(config, rendered)
        changed.append(f"OpenSearch nodes {', '.join(nodes)}")
    return changed


def _write_config(path: Path, text: str) -> None:
    """Readable by its owner only: it may hold kgqr's own credentials (lent to anonymous
    callers, KGQR_ANONYMOUS_USES_SERVICE_ACCOUNT), and nginx's master, which reads it,
    runs as that owner."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)  # before writing: a file an older kgqr wrote kept its mode
    with os.fdopen(descriptor, "w") as file:
        file.write(text)


@contextmanager
def running_nginx(
    config_for: Callable[[Path], str], host: str, port: int
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """nginx with the config `config_for(run_dir)` renders, until the block ends, once it
    listens on host:port; yields its process and run_dir. run_dir is fresh and removed
    afterwards; the config must put its pid file and temp folders there (nginx's defaults
    are system paths)."""
    nginx = ensure_installed(SERVICE, "nginx", "nginx-light")
    # Removed on every way out, a config that cannot be rendered included.
    with tempfile.TemporaryDirectory(prefix="kgqr-front-") as tmp:
        run_dir = Path(tmp)
        # nginx started by root serves from unprivileged workers, which need into this dir.
        run_dir.chmod(0o755)
        config = run_dir / "nginx.conf"
        _write_config(config, config_for(run_dir))
        # nginx's own messages go to our stderr, next to kgqr's logs.
        process = subprocess.Popen(
            [nginx, "-c", str(config), "-p", str(run_dir), "-e", "stderr"],
            stdout=subprocess.DEVNULL,
            preexec_fn=_stop_with_parent,
        )
        try:
            _wait_for_port(process, host, port)
            yield process, run_dir
        finally:
            terminate_child(process, timeout_s=10)


def _stop_with_parent() -> None:
    """Runs in the child before exec. uvicorn re-raises SIGTERM once it has shut down, so
    `kgqr serve` can end without reaching the cleanup above; the kernel then sends nginx a
    SIGTERM too (PR_SET_PDEATHSIG), so no front outlives its proxy."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _wait_for_port(process: subprocess.Popen[bytes], host: str, port: int) -> None:
    deadline = time.monotonic() + 10
    while not port_is_open(host, port):
        if process.poll() is not None:
            raise ServiceError(SERVICE, f"nginx exited with code {process.returncode}; see above")
        if time.monotonic() > deadline:
            raise ServiceError(SERVICE, f"nginx did not listen on {host}:{port} within 10 s")
        time.sleep(0.05)
