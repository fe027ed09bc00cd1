"""Embedding through ONNX Runtime (`KGQR_EMBEDDER_QUERY_RUNTIME` and
`KGQR_EMBEDDER_DOCUMENT_RUNTIME`: `onnx`, `onnx-int8`; `auto` picks per model).

torch runs a one-query forward as hundreds of small eager operations around the matrix
products; ONNX Runtime runs the exported graph fused. The model's whole
sentence-transformers pipeline is exported once per model and torch version into kgqr's
cache (Gemma: ~1 minute, 1.2 GB), its RMSNorms fused (kgqr_core/onnx_fusion.py), and
copied to int8 on first use. On 2 cores, in one run (bench/embedder_cost.py, 2026-11-28,
fused graph), a Gemma query took 84 ms in torch bf16, 45 ms in ONNX float32 and 31 ms in
ONNX int8; the bare int8 session alone, 33 ms: the floor on these cores, twice the 15 ms
goal, with MiniLM's query at 15 ms in the same run.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger("kgqr.embedder")

FEEDS = ("input_ids", "attention_mask")  # the exported graph's inputs
# Raised whenever export_pipeline writes a different graph, so no older export is reused
# (2: RMSNorms fused; 3: only where the fused kernel means the same).
GRAPH_REVISION = 3


class OnnxUnavailable(RuntimeError):
    """The onnx runtime was asked for but its packages are not installed."""


def require_packages() -> None:
    """Before any export: without the exporter's packages torch fails deep inside it."""
    missing = [p for p in ("onnxruntime", "onnx", "onnxscript") if not importlib.util.find_spec(p)]
    if missing:
        raise OnnxUnavailable(
            f"the onnx embedder runtimes need {', '.join(missing)}: reinstall kgqr "
            "(pip install -e .), which depends on them"
        )


def export_pipeline(model: SentenceTransformer, folder: Path) -> Path:
    """`folder`/model.onnx (reused if present): the model's transformer, pooling and dense
    layers as one float32 graph taking input_ids and attention_mask, any batch and length.
    Written into a side folder renamed into place, so a folder that exists is whole."""
    target = folder / "model.onnx"
    if target.exists():
        return target
    require_packages()
    import torch

    class Pipeline(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            features = {"input_ids": input_ids, "attention_mask": attention_mask}
            return self.model(features)["sentence_embedding"]  # type: ignore[no-any-return]

    # Per process: proxy workers and ingest threads loading the model for the first time
    # at once each export into their own folder, and the first to finish is kept.
    partial = folder.with_name(f"{folder.name}.partial-{os.getpid()}-{threading.get_ident()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    sample = model.tokenizer(["a question to trace"], return_tensors="pt")
    dims = {0: torch.export.Dim("batch"), 1: torch.export.Dim("tokens")}
    started = time.perf_counter()
    log.info("exporting the embedder to ONNX (once per model): %s", target)
    with torch.inference_mode():
        torch.onnx.export(
            Pipeline().eval(),
            (sample["input_ids"], sample["attention_mask"]),
            str(partial / target.name),
            dynamo=True,
            external_data=True,
            input_names=list(FEEDS),
            dynamic_shapes=dict.fromkeys(FEEDS, dims),
        )
    fused = _fuse_rms_norms(partial / target.name)
    try:
        partial.rename(folder)
    except OSError:  # another process's export landed first: use it
        shutil.rmtree(partial, ignore_errors=True)
        if not target.exists():
            raise
    log.info("exported in %.0f s (%d RMSNorms fused)", time.perf_counter() - started, fused)
    return target


def _fuse_rms_norms(graph: Path) -> int:
    """Rewrite the exported `graph` with its RMSNorms fused (kgqr_core/onnx_fusion.py)."""
    import onnx

    from kgqr_core.onnx_fusion import fuse_rms_norms

    model = onnx.load(str(graph))
    fused = fuse_rms_norms(model)
    if fused:
        for old in graph.parent.iterdir():
            old.unlink()
        onnx.save(model, str(graph), save_as_external_data=True, location=f"{graph.name}.data")
    return fused


def quantised(graph: Path) -> Path:
    """An int8 copy of `graph` beside it (reused if present): every MatMul's weights in
    blocks of 128 with their own scale, its activations quantised per block as they come
    (MatMulNBits, accuracy level 4: int8 products). EmbeddingGemma's activations have
    outliers that one scale per tensor (dynamic int8) flattened: its vectors fell to cosine
    0.97 of float32's and MuSiQue R@5 by 3.7; per block they stay at 0.9996
    (bench/embedder_cost.py)."""
    int8 = graph.with_name("model-int8-blocks.onnx")
    if int8.exists():
        return int8
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    log.info("copying the embedder's graph to int8 (once per model): %s", int8)
    quantizer = MatMulNBitsQuantizer(
        str(graph), bits=8, block_size=128, is_symmetric=True, accuracy_level=4
    )
    noisy = logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer")
    level = noisy.level
    noisy.setLevel(logging.WARNING)  # a line per node otherwise
    try:
        quantizer.process()
    finally:
        noisy.setLevel(level)
    # Its weights file keeps the partial name the graph points at, unique per process, so
    # two processes quantising at once never write into one file.
    partial = graph.with_name(f"partial-{os.getpid()}-{threading.get_ident()}-int8-blocks.onnx")
    quantizer.model.save_model_to_file(str(partial), use_external_data_format=True)
    partial.replace(int8)
    return int8


class OnnxEncoder:
    """Texts (prompts already applied) through an exported graph, with the torch path's
    tokenizer and length limit, normalised in float32. Batches are cut from the texts
    sorted by token count, so a batch pads to a length near its own texts' rather than
    to the longest of the lot."""

    def __init__(
        self, graph: Path, tokenizer: Any, max_tokens: int | None, lock: threading.Lock
    ) -> None:
        """`lock`: the one the embedder's torch side holds too. A fast tokenizer keeps its
        truncation and padding as state, and two threads calling it at once fail
        ("Already borrowed"), so texts are tokenised under the lock as well."""
        require_packages()
        import onnxruntime

        self.graph = graph
        options = onnxruntime.SessionOptions()
        # Sleep rather than spin between operations, as torch's threads do here
        # (KGQR_EMBEDDER_OMP_WAIT_POLICY): the LLM server shares these cores.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = onnxruntime.InferenceSession(
            str(graph), options, providers=["CPUExecutionProvider"]
        )
        self._tokenizer, self._max_tokens, self._lock = tokenizer, max_tokens, lock

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        with self._lock:
            vectors = self._encode(texts, batch_size)
        return np.asarray(vectors / np.linalg.norm(vectors, axis=1, keepdims=True), np.float32)

    def _encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        ids = self._tokenizer(texts, truncation=True, max_length=self._max_tokens)["input_ids"]
        order = sorted(range(len(texts)), key=lambda i: len(ids[i]))
        vectors = np.empty((len(texts), 0), dtype=np.float32)
        for first in range(0, len(order), batch_size):
            batch = order[first : first + batch_size]
            padded = self._tokenizer.pad(
                {"input_ids": [ids[i] for i in batch]}, return_tensors="np"
            )
            feeds = {name: padded[name].astype(np.int64) for name in FEEDS}
            found = np.asarray(self._session.run(None, feeds)[0], dtype=np.float32)
            if not vectors.shape[1]:
                vectors = np.empty((len(texts), found.shape[1]), dtype=np.float32)
            vectors[batch] = found
        return vectors
