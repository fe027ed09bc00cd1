"""One graph copy per machine: the first process to read a knowledge base's graph at a
version writes the copy's arrays to files, and every other process maps them.

Each proxy worker used to read and hold its own copy (at 1M relations a 17-28 s read from
Neo4j and 100+ MB, per worker). Mapped files live once in the page cache, so N workers hold
one copy, and a restarted proxy maps a current copy at once instead of reading Neo4j.

A copy's folder is named by the KB's graph epoch and version. The version counter restarts
at 0 when Redis loses its data, or goes back on a failover to a replica behind it, so a
number alone could name an older graph; the epoch, a token Redis sets anew with every bump
(kgqr_core/graph_version.py), tells them apart. A lock file
per KB makes one process read Neo4j while the others wait (their searches expand in Neo4j
or the OpenSearch copy meanwhile, as before). Older versions' folders are removed once a
newer one is written; a process still mapping one keeps its pages until it lets go.

All of this blocks (files, locks): graph/copies.py runs it in a worker thread.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, BinaryIO

import numpy as np

from kgqr_core.settings import Settings
from plugin.schema import KB_NAME
from query_rewriter.graph.in_memory import GraphSnapshot

log = logging.getLogger("kgqr.graph")
FORMAT = 1  # raised when the arrays a copy holds change; an older folder is not mapped
META = "meta.json"
FOLDER = re.compile(r"^(?P<epoch>[0-9a-f]+)-(?P<version>\d+)$")
# How long a process waits for another to write a copy (a 1M-relation read takes 17-28 s):
# past it, a writer stuck on a Neo4j that stopped answering no longer holds every other
# process's loading thread, and the copy is tried again later.
LOCK_WAIT_S = 600.0


def _mapped_array(path: Path) -> np.ndarray:
    mapped = np.load(path, mmap_mode="r")
    # A plain array over the map: every slice of a memmap is a memmap too, which made an
    # expansion 3-4x slower. A zero-length memmap cannot be made: an empty array is not
    # one to share anyway.
    return np.asarray(mapped) if mapped.size else np.zeros(0, mapped.dtype)


def _write_durably(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """On disk before the folder is renamed into place: after a power loss a file system
    may keep the rename and lose the data, and a copy whose arrays read as zeros would
    serve another graph's evidence without any error to tell."""
    with open(path, "wb") as file:
        write(file)
        file.flush()
        os.fsync(file.fileno())


def _array_writer(array: np.ndarray) -> Callable[[BinaryIO], None]:
    def write(file: BinaryIO) -> None:
        np.save(file, np.ascontiguousarray(array), allow_pickle=False)

    return write


def _sync_folder(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _locked_within(lock: IO[str], wait_s: float, kb: str) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"another process has been writing the graph copy of {kb} for over {wait_s:g} s"
                ) from None
            time.sleep(0.1)


class SharedCopies:
    """Graph copies as folders of .npy files under `directory`: `KB/EPOCH-VERSION/`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @classmethod
    def of_machine(cls, settings: Settings) -> SharedCopies | None:
        """The copies `KGQR_GRAPH_SNAPSHOT_DIR` keeps (under `home` unless absolute), where
        the proxies and the drop of this machine look; None where it is empty (each
        process holds its own copy)."""
        folder = settings.graph.snapshot_dir
        return cls(settings.home / Path(folder)) if folder else None

    def folder(self, kb: str, epoch: str, version: int) -> Path:
        if not KB_NAME.match(kb) or not re.fullmatch(r"[0-9a-f]+", epoch):
            raise ValueError(f"no graph copy folder for {kb!r} at epoch {epoch!r}")
        return self.directory / kb / f"{epoch}-{version}"

    def remove(self, kb: str) -> None:
        """Every copy of a dropped knowledge base. A copy is otherwise removed only when a
        newer version of it is written, which for a dropped KB is never (or when its name
        is searched again). A process that maps one keeps its pages until it lets go; one
        writing a copy meanwhile finds its folder gone, and holds what it built."""
        if KB_NAME.match(kb):
            shutil.rmtree(self.directory / kb, ignore_errors=True)

    def map_or_build(
        self,
        kb: str,
        epoch: str,
        version: int,
        build: Callable[[], GraphSnapshot | None],
        wait_s: float = LOCK_WAIT_S,
    ) -> tuple[GraphSnapshot | None, bool]:
        """The copy at (`epoch`, `version`), mapped from its folder, else `build()` written
        to it first (None: build found nothing to copy), and whether it was mapped as found.
        Where the folder cannot be written (a read-only home, a full disk) the process
        holds the copy it built, as it did before copies were shared. TimeoutError when
        another process has held the KB's lock for `wait_s`."""
        folder = self.folder(kb, epoch, version)
        try:
            found = self._map(folder)
        except Exception:  # told and mended under the lock
            found = None
        if found is not None:
            return found, True
        try:
            folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            lock = open(folder.parent / ".lock", "a+")  # noqa: SIM115 (closed by `with`)
        except OSError as exc:
            log.warning("graph copies not shared in %s (%s): held per process", folder, exc)
            return build(), False
        with lock:
            _locked_within(lock, wait_s, kb)  # released as the file closes
            try:
                found = self._map(folder)
            except Exception as exc:  # a torn or foreign folder: rebuilt, not served
                log.warning("graph copy %s unreadable (%s): reading it again", folder, exc)
                shutil.rmtree(folder, ignore_errors=True)
                found = None
            if found is not None:  # another process wrote it while this one waited
                return found, True
            snapshot = build()
            if snapshot is None:
                return None, False
            try:
                self._write(snapshot, folder)
                self._remove_older(folder.parent, epoch, version)
            except OSError as exc:
                log.warning("graph copy %s not written (%s): held per process", folder, exc)
                return snapshot, False
        # The mapped copy, so the arrays just built are freed and the pages shared.
        try:
            return self._map(folder) or snapshot, False
        except Exception:  # removed meanwhile by a newer version's writer: the one built
            return snapshot, False

    def _map(self, folder: Path) -> GraphSnapshot | None:
        try:
            meta = json.loads((folder / META).read_text())
        except FileNotFoundError:
            return None
        if meta.get("format") != FORMAT:
            return None
        arrays = {name: _mapped_array(folder / f"{name}.npy") for name in meta["arrays"]}
        return GraphSnapshot.from_arrays(meta["version"], meta["relations"], arrays)

    def _write(self, snapshot: GraphSnapshot, folder: Path) -> None:
        """Written beside the folder and renamed into place, meta last: a reader never sees
        half a copy."""
        partial = folder.with_name(f".{folder.name}.{os.getpid()}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(mode=0o700)
        arrays = snapshot.arrays()
        for name, array in arrays.items():
            _write_durably(partial / f"{name}.npy", _array_writer(array))
        meta = {"format": FORMAT, "version": snapshot.version, "relations": snapshot.relations,
                "arrays": sorted(arrays)}  # fmt: skip
        _write_durably(partial / META, lambda file: file.write(json.dumps(meta).encode()))
        _sync_folder(partial)
        shutil.rmtree(folder, ignore_errors=True)  # one found unreadable above
        partial.rename(folder)
        _sync_folder(folder.parent)

    @staticmethod
    def _remove_older(kb_folder: Path, epoch: str, version: int) -> None:
        """Folders of lower versions and of other epochs (each bump sets a new one), and
        what a writer that crashed left half-written (none writes while the lock is held)."""
        for other in kb_folder.iterdir():
            match = FOLDER.match(other.name)
            stale = match and (match["epoch"] != epoch or int(match["version"]) < version)
            if stale or other.name.endswith(".partial"):
                shutil.rmtree(other, ignore_errors=True)
