"""The Debian root filesystem every kgqr image starts from, made without a registry.

No container registry can be reached where kgqr is built, so the base is made with
debootstrap from the Debian mirror apt already uses, and imported as an image, its
packages brought up to Debian's security and stable updates. Made once; `kgqr images
build --refresh-base` makes it again, with the updates released since.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from kgqr_ops.images.engine import SERVICE, ContainerEngine
from kgqr_ops.services.errors import ServiceError
from kgqr_ops.services.os_packages import ensure_installed

BASE_TAG = "localhost/kgqr-debian:bookworm"
BOOTSTRAPPED_TAG = "localhost/kgqr-debian:bookworm-bootstrapped"  # before its updates
SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
SOURCES = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]


def debian_mirror(sources: list[Path] = SOURCES, archive: str = "debian") -> str:
    """The first Debian `archive` in apt's sources (`debian`, or `debian-security`), one-line
    (`deb URL suite ...`) or deb822 (`URIs: URL`) style; else deb.debian.org's."""
    for source in sources:
        try:
            lines = source.read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            words = line.split("#", 1)[0].split()
            if words[:1] == ["deb"]:
                urls = [w for w in words[1:] if "://" in w][:1]
            elif words[:1] == ["URIs:"]:
                urls = words[1:]
            else:
                continue
            for url in urls:
                if url.rstrip("/").endswith(f"/{archive}"):
                    return url.rstrip("/")
    return DEFAULT_MIRROR.removesuffix("/debian") + f"/{archive}"


def apt_sources(mirror: str, security: str) -> str:
    """The base's own apt sources: debootstrap writes the release's alone, so each image's
    packages were the point release's, weeks or months behind Debian's security fixes."""
    return (
        f"deb {mirror} {SUITE} main\n"
        f"deb {mirror} {SUITE}-updates main\n"
        f"deb {security} {SUITE}-security main\n"
    )


def ensure_base_image(engine: ContainerEngine, refresh: bool = False) -> bool:
    """Makes the base image unless it exists; True when it was made now."""
    if engine.image_id(BASE_TAG) and not refresh:
        return False
    debootstrap = ensure_installed(SERVICE, "debootstrap", "debootstrap")
    with tempfile.TemporaryDirectory(prefix="kgqr-rootfs-") as scratch:
        rootfs = Path(scratch) / "rootfs"
        made = subprocess.run(
            [debootstrap, "--variant=minbase", SUITE, str(rootfs), debian_mirror()],
            capture_output=True,
            text=True,
        )
        if made.returncode != 0:
            raise ServiceError(SERVICE, f"debootstrap failed: {made.stderr.strip()[-2000:]}")
        sources = apt_sources(debian_mirror(), debian_mirror(archive="debian-security"))
        (rootfs / "etc/apt/sources.list").write_text(sources)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        with tar.stdout:  # closed here too: an import that stops reading ends tar (EPIPE)
            imported = engine.run(["import", "-", BOOTSTRAPPED_TAG], stdin=tar.stdout,
                                  capture=True, check=False)  # fmt: skip
        tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise ServiceError(SERVICE, f"importing the base image failed: {imported.stderr}")
    _with_updates(engine)
    return True


def _with_updates(engine: ContainerEngine) -> None:
    """BASE_TAG: the bootstrapped image with every update its sources hold (committed from
    a container that ran apt-get upgrade, so no Containerfile and no registry are needed).
    The base in use is replaced only once this worked."""
    container = "kgqr-base-updating"
    engine.run(["rm", "-f", container], capture=True, check=False)
    # apt-get update answers 0 when a source cannot be read ("W: Failed to fetch"): the base
    # would be made without the updates it exists for.
    upgrade = (
        "apt-get update > /tmp/update.log 2>&1; status=$?; cat /tmp/update.log; "
        "[ $status = 0 ] && ! grep -qE '^(Err:|W: Failed)' /tmp/update.log "
        "&& apt-get -y upgrade && apt-get clean && rm -rf /var/lib/apt/lists/* /tmp/*"
    )
    try:
        ran = engine.run(["run", "--network", "host", "--name", container, BOOTSTRAPPED_TAG,
                          "sh", "-c", upgrade], capture=True, check=False)  # fmt: skip
        if ran.returncode != 0:
            raise ServiceError(SERVICE, f"updating the base image failed: {ran.stderr[-2000:]}")
        # Its command reset: committed, the image's default would be the upgrade's.
        committed = engine.run(["commit", "--change", 'CMD ["bash"]', container, BASE_TAG],
                               capture=True, check=False)  # fmt: skip
        if committed.returncode != 0:
            raise ServiceError(SERVICE, f"committing the base image failed: {committed.stderr}")
    finally:
        engine.run(["rm", "-f", container], capture=True, check=False)
        engine.run(["rmi", BOOTSTRAPPED_TAG], capture=True, check=False)
