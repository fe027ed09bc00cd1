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
from typing import TYPE_CHECKING, Literal

import numpy as np

from kgqr_core.embedder_models import MODELS, EmbedderModel, assemble
from kgqr_core.settings import ConfigurationError, EmbedderRuntime

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sentence_transformers import SentenceTransformer

    from kgqr_core.onnx_runtime import OnnxEncoder


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
        query_runtime: EmbedderRuntime = "torch",
        document_runtime: EmbedderRuntime = "torch",
        onnx_cache: Path | None = None,
    ) -> None:
        """An `onnx` runtime embeds through a graph exported into `onnx_cache`
        (kgqr_core/onnx_runtime.py), `onnx-int8` through its int8 copy."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        apply_omp_wait_policy(omp_wait_policy)
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call]

        self.model_name = model_name
        self.spec = MODELS.get(model_name) or EmbedderModel(model_name, 0)
        self._model: SentenceTransformer = _sentence_transformer(model_name)
        if model_name in MODELS:
            self._model.max_seq_length = self.spec.max_tokens
        self._lock = threading.Lock()  # one encode at a time: see _encode and OnnxEncoder
        # Exported before any bf16 cast: the graph is float32.
        onnx = {
            runtime: self._onnx_encoder(onnx_cache, runtime)
            for runtime in {query_runtime, document_runtime} - {"torch"}
        }
        self._query_onnx = onnx.get(query_runtime)
        self._document_onnx = onnx.get(document_runtime)
        getter = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        self.dimension = int(getter() or 0)
        self.dtype = compute_dtype(self.spec, precision)
        if "torch" not in (query_runtime, document_runtime):
            # Both sides run the graph: torch's copy of the weights (Gemma: 1.2 GB a process)
            # would only hold memory.
            self._model.to("meta")
        elif self.dtype == "bfloat16":
            import torch

            self._model.to(torch.bfloat16)

    def _onnx_encoder(self, cache: Path | None, runtime: EmbedderRuntime) -> OnnxEncoder:
        import torch

        from kgqr_core.onnx_runtime import (
            GRAPH_REVISION,
            OnnxEncoder,
            export_pipeline,
            quantised,
        )

        if cache is None:
            raise ValueError(f"the {runtime} runtime needs a folder for the exported graph")
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", self.model_name).strip("_")
        folder = cache / f"{name}-torch{torch.__version__}-graph{GRAPH_REVISION}"
        graph = export_pipeline(self._model, folder)
        if runtime == "onnx-int8":
            graph = quantised(graph)
        return OnnxEncoder(graph, self._model.tokenizer, self._model.max_seq_length, self._lock)

    @property
    def query_graph(self) -> Path | None:
        """The graph queries run through, or None when torch embeds them."""
        return self._query_onnx.graph if self._query_onnx is not None else None

    @property
    def document_graph(self) -> Path | None:
        """The graph documents run through, or None when torch embeds them."""
        return self._document_onnx.graph if self._document_onnx is not None else None

    def encode(
        self, texts: Sequence[str], titles: Sequence[str] | None = None, batch_size: int = 16
    ) -> np.ndarray:
        """Documents (and triples, which have no title) in the model's document form."""
        named = titles if titles is not None else [""] * len(texts)
        forms = [
            self.spec.document_text(title, text) for title, text in zip(named, texts, strict=True)
        ]
        return self._encode(forms, batch_size, self._document_onnx)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Queries, with the model's query prompt: an asymmetric model (EmbeddingGemma)
        places a question near the documents that answer it only when told which is which."""
        return self._encode([self.spec.query_prompt + text for text in texts], 16, self._query_onnx)

    def _encode(self, texts: list[str], batch_size: int, onnx: OnnxEncoder | None) -> np.ndarray:
        """Batches of 16, not sentence-transformers' 32: on CPU every text in a batch is
        padded to the batch's longest, and with passages of mixed length 16 encoded a
        64-passage ingest chunk 30% faster (32 and 64 only win on GPUs)."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        if onnx is not None:
            return onnx.encode(texts, batch_size)
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
    spec = MODELS.get(model_name)
    return Embedder(
        model_name,
        settings.embedder.precision,
        settings.embedder.omp_wait_policy,
        query_runtime=runtime_for(settings.embedder.query_runtime, spec),
        document_runtime=runtime_for(settings.embedder.document_runtime, spec),
        onnx_cache=settings.home / "onnx",
    )


def runtime_for(
    setting: EmbedderRuntime | Literal["auto"], spec: EmbedderModel | None
) -> EmbedderRuntime:
    """`auto`: the registered model's measured runtime; torch for a folder nobody measured."""
    if setting != "auto":
        return setting
    return spec.runtime if spec is not None else "torch"


def get_embedder(model_name: str) -> Embedder:
    """One loaded model per process and name (loading takes seconds); threads asking at
    once (an ingest worker's two chunks) wait for the one load."""
    with _loading:
        return _load(model_name)


def embedder_dimension(model_name: str) -> int:
    """The size of the model's vectors: recorded for a registered model, so installing a
    schema or checking a field map never loads (or, for EmbeddingGemma, assembles and
    exports) 1 GB of weights; a folder's model is loaded to ask it."""
    spec = MODELS.get(model_name)
    return spec.dimension if spec is not None else get_embedder(model_name).dimension
