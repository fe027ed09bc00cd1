"""RMSNorms written out op by op, folded into ONNX Runtime's one fused kernel.

torch's exporter writes EmbeddingGemma's RMSNorm (145 of them: six a layer and a final
one) as Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul, Mul, and ONNX Runtime's own fusions
do not recognise that spelling. Seven kernels where one would do, 870 launches a query on
a model whose matrix products take only part of its time. ORT's
SimplifiedLayerNormalization computes the same `x / sqrt(mean(x^2) + eps) * scale` in
float32.
"""

from __future__ import annotations

from typing import Any


def fuse_rms_norms(model: Any) -> int:
    """Rewrite `model` (an onnx ModelProto) in place; returns how many norms were fused.
    A chain is fused only where the fused kernel means the same: one-element exponent 2
    and epsilon, the mean over the last axis kept as a dimension, a scale that is a vector
    of constants, and no link read by another node or by the graph's outputs."""
    from onnx import helper, numpy_helper

    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producers = {output: node for node in model.graph.node for output in node.output}
    graph_outputs = {output.name for output in model.graph.output}
    consumers: dict[str, list[Any]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def scalar(name: str) -> float | None:
        value = constants.get(name)
        return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None

    def sole(output: str, op_type: str) -> Any | None:
        readers = consumers.get(output, [])
        if output in graph_outputs or len(readers) != 1 or readers[0].op_type != op_type:
            return None
        return readers[0]

    def constant_vector(name: str) -> bool:
        """A 1-D constant, or Gemma's `1 + weight`: a node over constants of which the
        largest is 1-D (and so is the result, by broadcasting)."""
        if name in constants:
            return bool(constants[name].ndim == 1)
        maker = producers.get(name)
        if maker is None or maker.op_type not in ("Add", "Mul"):
            return False
        shapes = [constants[i].ndim if i in constants else None for i in maker.input]
        return None not in shapes and max(shapes) == 1  # type: ignore[type-var]

    def keeps_dims(node: Any) -> bool:
        return all(a.i == 1 for a in node.attribute if a.name == "keepdims")

    removed: set[int] = set()
    replaced: dict[int, Any] = {}
    for power in model.graph.node:
        if power.op_type != "Pow" or scalar(power.input[1]) != 2.0:
            continue
        x = power.input[0]
        mean = sole(power.output[0], "ReduceMean")
        axes = constants.get(mean.input[1]) if mean is not None and len(mean.input) > 1 else None
        if mean is None or axes is None or axes.tolist() != [-1] or not keeps_dims(mean):
            continue
        add = sole(mean.output[0], "Add")
        epsilon = scalar(add.input[1]) if add is not None else None
        root = sole(add.output[0], "Sqrt") if add is not None else None
        inverse = sole(root.output[0], "Reciprocal") if root is not None else None
        scaled = sole(inverse.output[0], "Mul") if inverse is not None else None
        if epsilon is None or scaled is None or inverse is None:
            continue
        if set(scaled.input) != {x, inverse.output[0]}:
            continue
        weighted = sole(scaled.output[0], "Mul")
        if weighted is None:
            continue
        scale = next(name for name in weighted.input if name != scaled.output[0])
        if not constant_vector(scale):
            continue
        replaced[id(weighted)] = helper.make_node(
            "SimplifiedLayerNormalization",
            [x, scale],
            [weighted.output[0]],
            name=f"{power.name}_rms_norm",
            axis=-1,
            epsilon=epsilon,
            stash_type=1,
        )
        removed.update(id(node) for node in (power, mean, add, root, inverse, scaled))
    original = list(model.graph.node)
    kept = [replaced.get(id(node), node) for node in original if id(node) not in removed]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    # The exponents and epsilons only the removed nodes read (ORT warns of each otherwise);
    # none where a subgraph (If, Loop) might read them unseen.
    if not any(a.type in (5, 10) for node in kept for a in node.attribute):  # GRAPH(S)
        read = {name for node in kept for name in node.input} | graph_outputs
        left = {name for node in original if id(node) in removed for name in node.input}
        for tensor in [t for t in model.graph.initializer if t.name in left - read]:
            model.graph.initializer.remove(tensor)
    return len(replaced)
