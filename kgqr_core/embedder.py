"""Sentence embeddings for documents, triples and queries (one model for all three, so
their vectors are comparable). Registered models (kgqr_core/embedder_models.py) ship
inside PyPI packages and bring their own query and document prompts; any
sentence-transformers folder works too, so a real deployment can swap in a bigger one."""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
import threading
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from kgqr_core.embedder_models import MODELS, EmbedderModel, assemble
from kgqr_core.settings import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sentence_transformers import SentenceTransformer

    from kgqr_core.onnx_runtime import OnnxQueryEncoder


def resolve_model_path(name: str) -> str:
    """A registered model's folder (assembled on first use), a folder path, or a package
    exposing ``get_model_path()``; else the name as given."""
    model = MODELS.get(name)
    if model is not None and model.split is not None:
        from kgqr_core.settings import get_settings

        return str(assemble(model, get_settings().home))
    if model is not None and model.package is not None:
        name = model.package
    if Path(name).is_dir():
        return name
    try:
        package = importlib.import_module(name.replace("-", "_"))
    except ImportError:
        return name
    return str(package.get_model_path())


def _sentence_transformer(model_name: str) -> SentenceTransformer:
    """The model, or a ConfigurationError naming what an embedder may be: an unknown name
    used to end on the Hub's "couldn't connect to 'https://huggingface.co'" traceback."""
    from sentence_transformers import SentenceTransformer

    try:
        return SentenceTransformer(resolve_model_path(model_name), device="cpu")
    except OSError as exc:
        if model_name in MODELS:
            raise
        raise ConfigurationError(
            f"embedder {model_name!r} is not a registered model ({', '.join(MODELS)}), a "
            "sentence-transformers folder or an installed package that ships one (a Hugging "
            f"Face Hub id loads only with HF_HUB_OFFLINE=0 and a network): {exc}"
        ) from exc


def compute_dtype(spec: EmbedderModel, precision: str) -> str:
    """The number format to run `spec` in: bfloat16 only where both the model keeps its
    answers in it and the CPU computes it natively (emulated bf16 is several times slower
    than float32)."""
    if precision != "auto":
        return precision
    return "bfloat16" if spec.bfloat16 and native_bfloat16() else "float32"


def native_bfloat16() -> bool:
    """Whether this CPU computes bf16 in hardware (AVX512-BF16 or AMX), per oneDNN."""
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


log = logging.getLogger("kgqr.embedder")


def apply_omp_wait_policy(policy: str) -> None:
    """OMP_WAIT_POLICY for torch's threads, which libgomp reads once, when torch loads.
    kgqr shares 2 cores with the LLM server and OpenSearch: a thread that spins at
    OpenMP's barrier burns the slice its partner needs: beside the LLM generating, sleeping
    instead made a Gemma query embedding 14.8x faster (MiniLM 1.7x), for 1.1-1.4x idle.
    `default` leaves libgomp's own policy."""
    if policy == "default":
        return
    if "torch" in sys.modules:
        if os.environ.get("OMP_WAIT_POLICY", "").lower() != policy:
            log.warning("torch loaded before kgqr could set OMP_WAIT_POLICY=%s", policy.upper())
        return
    os.environ.setdefault("OMP_WAIT_POLICY", policy.upper())


class Embedder:
    """L2-normalised float32 vectors, so cosine similarity is a dot product."""

    def __init__(
        self,
        model_name: str,
        precision: str = "auto",
        omp_wait_policy: str = "passive",
        onnx_cache: Path | None = None,
        onnx_int8: bool = False,
    ) -> None:
        """With `onnx_cache`, queries are embedded by ONNX Runtime from a graph exported
        there (kgqr_core/onnx_runtime.py), its int8 copy with `onnx_int8`; documents always
        by torch."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        apply_omp_wait_policy(omp_wait_policy)
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]

        self.model_name = model_name
        self.spec = MODELS.get(model_name) or EmbedderModel(model_name, 0)
        self._model: SentenceTransformer = _sentence_transformer(model_name)
        if model_name in MODELS:
            self._model.max_seq_length = self.spec.max_tokens
        self._onnx: OnnxQueryEncoder | None = None
        if onnx_cache is not None:  # exported before any bf16 cast: the graph is float32
            self._onnx = self._onnx_encoder(onnx_cache, onnx_int8)
        self.dtype = compute_dtype(self.spec, precision)
        if self.dtype == "bfloat16":
            import torch

            self._model.to(torch.bfloat16)
        self._lock = threading.Lock()

    def _onnx_encoder(self, cache: Path, int8: bool) -> OnnxQueryEncoder:
        import torch

        from kgqr_core.onnx_runtime import OnnxQueryEncoder, export_pipeline, quantised

        name = re.sub(r"[^A-Za-z0-9._-]+", "_", self.model_name).strip("_")
        graph = export_pipeline(self._model, cache / f"{name}-torch{torch.__version__}")
        if int8:
            graph = quantised(graph)
        return OnnxQueryEncoder(
            graph, self._model.tokenizer, self.spec.query_prompt, self._model.max_seq_length
        )

    @property
    def onnx_graph(self) -> Path | None:
        """The graph queries run through, or None when torch embeds them."""
        return self._onnx.graph if self._onnx is not None else None

    @property
    def dimension(self) -> int:
        model = self._model
        getter = (
            getattr(model, "get_embedding_dimension", None)
            or model.get_sentence_embedding_dimension
        )
        return int(getter() or 0)

    def encode(
        self, texts: Sequence[str], titles: Sequence[str] | None = None, batch_size: int = 16
    ) -> np.ndarray:
        """Documents (and triples, which have no title) in the model's document form."""
        named = titles if titles is not None else [""] * len(texts)
        forms = [
            self.spec.document_text(title, text) for title, text in zip(named, texts, strict=True)
        ]
        return self._encode(forms, batch_size)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Queries, with the model's query prompt: an asymmetric model (EmbeddingGemma)
        places a question near the documents that answer it only when told which is which."""
        if self._onnx is not None and texts:
            return self._onnx.encode(list(texts))
        return self._encode([self.spec.query_prompt + text for text in texts], 16)

    def _encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        """Batches of 16, not sentence-transformers' 32: on CPU every text in a batch is
        padded to the batch's longest, and with passages of mixed length 16 encoded a
        64-passage ingest chunk 30% faster (32 and 64 only win on GPUs)."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        import torch

        with self._lock:  # torch releases the GIL; one encode at a time keeps 2 cores sane
            vectors = self._model.encode(
                texts, batch_size=batch_size, convert_to_tensor=True, show_progress_bar=False
            )
        # Normalised in float32 whatever the model computed in: a bf16 norm is off by ~1e-3.
        as_float = torch.as_tensor(vectors).float()
        return torch.nn.functional.normalize(as_float, dim=-1).numpy()


_loading = threading.Lock()


@lru_cache(maxsize=4)
def _load(model_name: str) -> Embedder:
    from kgqr_core.settings import get_settings

    settings = get_settings()
    runtime = settings.embedder.query_runtime
    return Embedder(
        model_name,
        settings.embedder.precision,
        settings.embedder.omp_wait_policy,
        onnx_cache=settings.home / "onnx" if runtime != "torch" else None,
        onnx_int8=runtime == "onnx-int8",
    )


def get_embedder(model_name: str) -> Embedder:
    """One loaded model per process and name (loading takes seconds); threads asking at
    once (an ingest worker's two chunks) wait for the one load."""
    with _loading:
        return _load(model_name)
