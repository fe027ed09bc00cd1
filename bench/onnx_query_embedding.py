"""Query embedding through ONNX Runtime against torch, per model, in one run: is a fused
runtime the way to the 50 ms query goal that torch (float32 or bfloat16) misses with Gemma?

The model's whole sentence-transformers pipeline is exported once into kgqr's cache, and
copied to int8 (per-channel weights, dynamic activations, MatMul only), as
`KGQR_EMBEDDER_QUERY_RUNTIME=onnx` / `onnx-int8` do (kgqr_core/onnx_runtime.py). Each
variant embeds the HotpotQA dev questions one at a time (p50), with its vectors' cosine to
torch float32's; with
--recall KB=QUERY_SET (KBs holding that model's vectors), plain k-NN over the KB's
documents with each variant's query vectors.

    pip install onnxruntime onnx onnxscript     # or: pip install -e '.[onnx]'
    python -m bench.onnx_query_embedding [--models embeddinggemma-300m]
        [--recall hotpotqa-gemma=hotpotqa:../shared/data/hotpotqa100 ...]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.bench_common import save
from bench.query_embedding import cosine_to, dense_recall, dev_questions, p50_ms
from kgqr_core.embedder import Embedder

Encode = Callable[[list[str]], np.ndarray]


def measure(model: str, queries: list[str], recalls: list[list[str]]) -> dict[str, Any]:
    from kgqr_core.settings import get_settings

    cache = get_settings().home / "onnx"
    fp32 = Embedder(model, "float32")
    encoders: dict[str, Encode] = {
        "torch_fp32": fp32.encode_queries,
        "torch_bf16": Embedder(model, "bfloat16").encode_queries,
        "onnx_fp32": Embedder(model, "float32", onnx_cache=cache).encode_queries,
        "onnx_int8": Embedder(model, "float32", onnx_cache=cache, onnx_int8=True).encode_queries,
    }
    reference = fp32.encode_queries(queries)
    figures: dict[str, Any] = {}
    for name, encode in encoders.items():
        figures[name] = {"p50_ms": p50_ms(encode, queries[:30]),
                         "cosine_to_torch_fp32": cosine_to(reference, encode(queries))}  # fmt: skip
        print(f"{model} {name:10} p50 {figures[name]['p50_ms']:6.1f} ms  cosine "
              f"{figures[name]['cosine_to_torch_fp32']['mean']:.5f}", flush=True)  # fmt: skip
    for name in ("onnx_fp32", "onnx_int8"):
        figures[f"{name}_speedup_over_torch_bf16"] = (
            figures["torch_bf16"]["p50_ms"] / figures[name]["p50_ms"]
        )
    figures["dense_retrieval"] = [dense_recall(kb, spec, encoders) for kb, spec in recalls]
    for found in figures["dense_retrieval"]:
        print(json.dumps(found), flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="embeddinggemma-300m")
    parser.add_argument("--recall", action="append", default=[], metavar="KB=QUERY_SET")
    args = parser.parse_args()
    queries = dev_questions()
    recalls = [item.split("=", 1) for item in args.recall]
    figures = {model: measure(model, queries, recalls) for model in args.models.split(",")}
    save("onnx-query-embedding", {"queries": len(queries), "models": figures})


if __name__ == "__main__":
    main()
