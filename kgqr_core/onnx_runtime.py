"""Query embedding through ONNX Runtime (`KGQR_EMBEDDER_QUERY_RUNTIME=onnx`).

torch runs a one-query forward as hundreds of small eager operations around the matrix
products; ONNX Runtime runs the exported graph fused. On 2 cores a Gemma query took 47.8 ms
there against 95.4 ms in torch bf16 and 122.8 ms in torch float32, with identical vectors
(bench/onnx_query_embedding.py). The model's whole sentence-transformers pipeline is
exported once per model and torch version into kgqr's cache (Gemma: ~1 minute, 1.2 GB);
documents are still embedded by torch, in batches, where the fusion matters less.
`pip install -e '.[onnx]'` brings the runtime and the exporter.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger("kgqr.embedder")


class OnnxUnavailable(RuntimeError):
    """The onnx runtime was asked for but its packages are not installed."""


def require_packages() -> None:
    """Before any export: without the exporter's packages torch fails deep inside it."""
    missing = [p for p in ("onnxruntime", "onnx", "onnxscript") if not importlib.util.find_spec(p)]
    if missing:
        raise OnnxUnavailable(
            f"KGQR_EMBEDDER_QUERY_RUNTIME=onnx needs {', '.join(missing)}: pip install -e '.[onnx]'"
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

    partial = folder.with_name(f"{folder.name}.partial")
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
            input_names=["input_ids", "attention_mask"],
            dynamic_shapes={"input_ids": dims, "attention_mask": dims},
        )
    shutil.rmtree(folder, ignore_errors=True)
    partial.rename(folder)
    log.info("exported in %.0f s", time.perf_counter() - started)
    return target


def quantised(graph: Path) -> Path:
    """An int8 copy of `graph` beside it (reused if present): per-channel int8 weights of
    every MatMul, activations quantised as they come. A Gemma query in ~28 ms instead of
    ~50, vectors at cosine 0.97 of float32's: MuSiQue R@5 -3.7, HotpotQA equal."""
    int8 = graph.with_name("model-int8.onnx")
    if int8.exists():
        return int8
    from onnxruntime.quantization import QuantType, quantize_dynamic

    partial = graph.with_name("partial-model-int8.onnx")
    quantize_dynamic(
        str(graph),
        str(partial),
        weight_type=QuantType.QInt8,
        per_channel=True,
        op_types_to_quantize=["MatMul"],
        use_external_data_format=True,
    )
    partial.rename(int8)  # its weights file keeps the partial name the graph points at
    return int8


class OnnxQueryEncoder:
    """Queries through an exported graph: the same tokenizer, prompt and length limit as the
    torch path, normalised in float32."""

    def __init__(self, graph: Path, tokenizer: Any, prompt: str, max_tokens: int | None) -> None:
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
        self._tokenizer, self._prompt, self._max_tokens = tokenizer, prompt, max_tokens
        self._lock = threading.Lock()

    def encode(self, texts: list[str]) -> np.ndarray:
        tokens = self._tokenizer(
            [self._prompt + text for text in texts],
            return_tensors="np",
            padding=True,
            truncation=True,
            max_length=self._max_tokens,
        )
        feeds = {name: tokens[name].astype(np.int64) for name in ("input_ids", "attention_mask")}
        with self._lock:
            vectors = np.asarray(self._session.run(None, feeds)[0], dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return np.asarray(vectors / norms, dtype=np.float32)
