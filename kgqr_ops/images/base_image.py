"""The Debian root filesystem every kgqr image starts from, made without a registry.

No container registry can be reached where kgqr is built, so the base is made with
debootstrap from the Debian mirror apt already uses, and imported as an image. Made once;
`kgqr images build --refresh-base` makes it again (for Debian's security updates).
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from kgqr_ops.images.engine import SERVICE, ContainerEngine
from kgqr_ops.services.errors import ServiceError
from kgqr_ops.services.os_packages import ensure_installed

BASE_TAG = "localhost/kgqr-debian:bookworm"
SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
SOURCES = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]


def debian_mirror(sources: list[Path] = SOURCES) -> str:
    """The first Debian archive (not its security archive) in apt's sources, one-line
    (`deb URL suite ...`) or deb822 (`URIs: URL`) style."""
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
                if url.rstrip("/").endswith("/debian"):
                    return url.rstrip("/")
    return DEFAULT_MIRROR


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
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        assert tar.stdout is not None
        with tar.stdout:  # closed here too: an import that stops reading ends tar (EPIPE)
            imported = engine.run(["import", "-", BASE_TAG], stdin=tar.stdout, capture=True,
                                  check=False)  # fmt: skip
        tar.wait()
        if imported.returncode != 0 or tar.returncode != 0:
            raise ServiceError(SERVICE, f"importing the base image failed: {imported.stderr}")
    return True
