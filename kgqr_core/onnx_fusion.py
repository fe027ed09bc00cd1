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

import numpy as np


def fuse_rms_norms(model: Any) -> int:
    """Rewrite `model` (an onnx ModelProto) in place; returns how many norms were fused.
    Only a chain whose every link has one consumer is fused, so no intermediate that
    another node reads disappears."""
    from onnx import helper, numpy_helper

    constants = {t.name: t for t in model.graph.initializer}

    def constant(name: str) -> np.ndarray | None:
        found = constants.get(name)
        return numpy_helper.to_array(found) if found is not None else None

    consumers: dict[str, list[Any]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def sole(output: str, op_type: str) -> Any | None:
        readers = consumers.get(output, [])
        return readers[0] if len(readers) == 1 and readers[0].op_type == op_type else None

    removed: set[int] = set()
    replaced: dict[int, Any] = {}
    for power in model.graph.node:
        exponent = constant(power.input[1]) if power.op_type == "Pow" else None
        if exponent is None or exponent.size != 1 or float(exponent) != 2.0:
            continue
        x = power.input[0]
        mean = sole(power.output[0], "ReduceMean")
        axes = constant(mean.input[1]) if mean is not None and len(mean.input) > 1 else None
        if mean is None or axes is None or axes.tolist() != [-1]:
            continue
        add = sole(mean.output[0], "Add")
        epsilon = constant(add.input[1]) if add is not None else None
        root = sole(add.output[0], "Sqrt") if add is not None else None
        inverse = sole(root.output[0], "Reciprocal") if root is not None else None
        scaled = sole(inverse.output[0], "Mul") if inverse is not None else None
        if epsilon is None or epsilon.size != 1 or scaled is None or inverse is None:
            continue
        if set(scaled.input) != {x, inverse.output[0]}:
            continue
        weighted = sole(scaled.output[0], "Mul")
        if weighted is None:
            continue
        scale = next(name for name in weighted.input if name != scaled.output[0])
        replaced[id(weighted)] = helper.make_node(
            "SimplifiedLayerNormalization",
            [x, scale],
            [weighted.output[0]],
            name=f"{power.name}_rms_norm",
            axis=-1,
            epsilon=float(epsilon),
            stash_type=1,
        )
        removed.update(id(node) for node in (power, mean, add, root, inverse, scaled))
    kept = [replaced.get(id(node), node) for node in model.graph.node if id(node) not in removed]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    # The exponents and epsilons only the removed nodes read (ORT warns of each otherwise).
    read = {name for node in kept for name in node.input}
    read |= {output.name for output in model.graph.output}
    unread = [t for t in model.graph.initializer if t.name not in read]
    for tensor in unread:
        model.graph.initializer.remove(tensor)
    return len(replaced)
