"""``fuse_silu``: SiLU written as ``Mul(x, Sigmoid(x))`` (either operand order; how exporters write
PyTorch's SiLU before opset 24: EfficientNet, YOLO's Conv-BN-SiLU) becomes one ONNX ``Swish`` node
(alpha 1), as onnxruntime's QuickGelu / SiLU fusions do. Two kernels and one intermediate become one
pass: the Sigmoid read x and wrote the gates, the Mul read both and wrote the product.

It fuses only where the session's kernel for the Swish comes from the vendor that would have run the
Sigmoid (a device whose vendor has a Sigmoid but no Swish keeps the pair: the reference's Swish on the
host would move the node off the device), on float32, when the Sigmoid's output has no other reader
and is not a graph output, and when no user's kernel overrides either node. The fused node keeps the
Mul's name and output. The result agrees with the pair to float32 rounding, not bit for bit.
"""
from __future__ import annotations

import logging

from ..ir import Graph, Node
from ..registry import select_kernel
from . import PassContext, register_pass
from .builtin import _attrs, _Index, _overridden

log = logging.getLogger("kernelkit.passes")


def _vendor(graph: Graph, op: str, x: str, ctx: PassContext, attrs: dict) -> str | None:
    entry = select_kernel(op, ctx.device, "float32", ctx.vendors, [graph.spec(x)], attrs, ctx.scope)
    return entry.key.vendor if entry is not None else None


@register_pass("fuse_silu", before="fuse_activation")
def fuse_silu(graph: Graph, ctx: PassContext) -> int:
    """x * Sigmoid(x) written as a Sigmoid and a Mul node into one Swish node."""
    sigmoids = [n for n in graph.nodes if n.op_id == "Sigmoid"]
    if not sigmoids:
        return 0
    index, count = _Index(graph), 0
    for sig in sigmoids:
        x, gate = sig.inputs[0], sig.outputs[0]
        mul = index.sole_reader(gate)
        if mul is None or mul.op_id != "Mul" or len(mul.inputs) != 2 or sorted(mul.inputs) != sorted([x, gate]):
            continue
        spec, out = graph.spec(x), graph.spec(mul.outputs[0])
        if spec is None or spec.dtype != "float32" or out is None or out.shape != spec.shape:
            continue
        if any(_overridden(graph, node, _attrs(node), ctx) for node in (sig, mul)):
            continue  # a user's kernel runs one of them: keep the pair as written
        vendor = _vendor(graph, "Swish", x, ctx, {"alpha": 1.0})
        if vendor is None or vendor != _vendor(graph, "Sigmoid", x, ctx, {}):
            continue
        fused = Node("Swish", [x], [mul.outputs[0]], {}, mul.name)
        index.fuse([sig, mul], fused, at=mul)
        log.debug("fuse_silu: %s * %s -> Swish", sig.name, mul.name)
        count += 1
    index.commit()
    return count
