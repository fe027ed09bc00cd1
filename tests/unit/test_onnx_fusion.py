"""The RMSNorm fusion on a small graph spelled as torch's exporter spells Gemma's."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime

from kgqr_core.onnx_fusion import fuse_rms_norms


def rms_norm_graph(
    shared_mean: bool = False,
    exponent_shape: tuple[int, ...] = (),
    keepdims: int = 1,
    scale: str = "scale",
) -> onnx.ModelProto:
    """x -> RMSNorm(x) * (1 + w) -> MatMul, as Gemma's layers read; with `shared_mean` the
    mean of squares is also an output, so the chain must stay."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights: dict[str, np.ndarray] = {
        "two": np.full(exponent_shape, 2.0, np.float32),
        "axes": np.array([-1], np.int64),
        "eps": np.array(1e-6, np.float32),
        "w": rng.normal(size=8).astype(np.float32),
        "one": np.array(1.0, np.float32),
        "proj": rng.normal(size=(8, 4)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Add", ["w", "one"], ["scale"]),
        helper.make_node("Pow", ["x", "two"], ["squares"]),
        helper.make_node("ReduceMean", ["squares", "axes"], ["mean"], keepdims=keepdims),
        helper.make_node("Add", ["mean", "eps"], ["shifted"]),
        helper.make_node("Sqrt", ["shifted"], ["root"]),
        helper.make_node("Reciprocal", ["root"], ["inverse"]),
        helper.make_node("Mul", ["x", "inverse"], ["normed"]),
        helper.make_node("Mul", ["normed", scale], ["weighted"]),
        helper.make_node("MatMul", ["weighted", "proj"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if shared_mean:
        outputs.append(helper.make_tensor_value_info("mean", TensorProto.FLOAT, None))
        nodes.append(helper.make_node("Identity", ["mean"], ["mean_copy"]))
    graph = helper.make_graph(
        nodes,
        "rms",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, 8])],
        outputs,
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def run(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return np.asarray(session.run(["y"], {"x": x})[0])


def test_a_written_out_rms_norm_becomes_one_kernel_with_the_same_answer() -> None:
    x = np.random.default_rng(1).normal(size=(2, 5, 8)).astype(np.float32) * 30
    model = rms_norm_graph()
    expected = run(model, x)
    assert fuse_rms_norms(model) == 1
    ops = [node.op_type for node in model.graph.node]
    assert ops == ["Add", "SimplifiedLayerNormalization", "MatMul"]
    assert {t.name for t in model.graph.initializer} == {"w", "one", "proj"}  # two, eps gone
    assert np.allclose(run(model, x), expected, rtol=1e-5, atol=1e-5)


def test_a_chain_whose_intermediate_is_read_elsewhere_is_left_alone() -> None:
    model = rms_norm_graph(shared_mean=True)
    before = [node.op_type for node in model.graph.node]
    assert fuse_rms_norms(model) == 0
    assert [node.op_type for node in model.graph.node] == before


def test_a_one_element_exponent_of_rank_one_is_fused_too() -> None:
    x = np.random.default_rng(2).normal(size=(1, 3, 8)).astype(np.float32)
    model = rms_norm_graph(exponent_shape=(1,))
    expected = run(model, x)
    assert fuse_rms_norms(model) == 1
    assert np.allclose(run(model, x), expected, rtol=1e-5, atol=1e-5)


def test_what_the_fused_kernel_would_change_is_not_fused() -> None:
    """A mean that drops its axis, or a scale that is an activation, is another formula."""
    for model in (rms_norm_graph(keepdims=0), rms_norm_graph(scale="x")):
        before = [node.op_type for node in model.graph.node]
        assert fuse_rms_norms(model) == 0
        assert [node.op_type for node in model.graph.node] == before
