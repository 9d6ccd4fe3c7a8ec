"""``fuse_gelu``: GELU written out in elementary ops (as exporters write it before opset 20, and as
onnxruntime's quantizer leaves it) becomes one ONNX ``Gelu`` node (approximate="none"), as
onnxruntime's Gelu fusion does:

    Mul(Mul(x, 0.5), Add(Erf(Div(x, sqrt 2)), 1))      0.5 * x * (1 + erf(x / sqrt 2))
    Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)      x * (1 + erf(x / sqrt 2)) * 0.5   (PyTorch)

with ``Mul(x, 1 / sqrt 2)`` for the Div and either operand order of every Mul and Add. Five passes
over the tensor become one (the transformer's 128 x 1024 activations: five kernels and four
intermediates per layer); ``fuse_activation`` then folds the Gelu into a MatMul or Gemm before it.

It leaves alone: constants that are not float32 scalars equal to sqrt 2 (1 / sqrt 2), 0.5 and 1
to float32 precision, intermediates read elsewhere or being graph outputs, inputs other than
float32, a block a user's kernel overrides, and devices without a Gelu kernel. The result agrees
with the op-by-op block to float32 rounding (one erf and three roundings fewer), not bit for bit.
"""
from __future__ import annotations

import logging
import math

import numpy as np

from ..ir import Graph, Node
from ..registry import select_kernel
from . import PassContext, register_pass
from .builtin import _attrs, _const, _Index, _overridden

log = logging.getLogger("kernelkit.passes")

SQRT2 = math.sqrt(2.0)
SQRT_2_PI, GELU_CUBIC = math.sqrt(2.0 / math.pi), 0.044715  # the tanh form's constants


def _scalar_const(graph: Graph, name: str) -> float | None:
    data = _const(graph, name)
    if data is None or data.dtype != np.float32 or data.size != 1:
        return None
    return float(data.reshape(()))


def _close(value: float | None, want: float) -> bool:
    return value is not None and abs(value - want) <= 1e-6 * abs(want)


def _other(node: Node, name: str) -> str | None:
    """The input of a two-input node that is not ``name`` (None if ``name`` is not one of them)."""
    if len(node.inputs) != 2 or name not in node.inputs:
        return None
    return node.inputs[1] if node.inputs[0] == name else node.inputs[0]


def _scaled_by(graph: Graph, index: _Index, name: str, x: str, want: float) -> Node | None:
    """The Mul producing ``name`` = x * want (a constant), if ``name`` has no other reader."""
    node = index.producers.get(name)
    if node is None or node.op_id != "Mul" or index.sole_reader(name) is None:
        return None
    other = _other(node, x)
    return node if other is not None and _close(_scalar_const(graph, other), want) else None


def _match(graph: Graph, index: _Index, erf: Node) -> tuple[str, str, list[Node]] | None:
    """(x, output, nodes of the block) for the Gelu block around ``erf``, else None."""
    div = index.producers.get(erf.inputs[0])
    if div is None or index.sole_reader(erf.inputs[0]) is not erf or len(div.inputs) != 2:
        return None
    if div.op_id == "Div" and _close(_scalar_const(graph, div.inputs[1]), SQRT2):
        x = div.inputs[0]
    elif div.op_id == "Mul":
        x = next((i for i, c in ((div.inputs[0], div.inputs[1]), (div.inputs[1], div.inputs[0]))
                  if _close(_scalar_const(graph, c), 1.0 / SQRT2)), None)
    else:
        return None
    if x is None:
        return None
    return _tail(graph, index, erf, x, [div])


def _tail(graph: Graph, index: _Index, act: Node, x: str, head: list[Node]) -> tuple[str, str, list[Node]] | None:
    """The block's end after ``act`` (its Erf or Tanh): Add(act, 1), then 0.5 * x * that (Mul(Mul(x,
    0.5), .)) or x * that * 0.5; (x, output, every node of the block) or None."""
    add = index.sole_reader(act.outputs[0])
    if add is None or add.op_id != "Add" or not _close(_scalar_const(graph, _other(add, act.outputs[0]) or ""), 1.0):
        return None
    mul = index.sole_reader(add.outputs[0])
    other = _other(mul, add.outputs[0]) if mul is not None and mul.op_id == "Mul" else None
    if other is None:
        return None
    half = _scaled_by(graph, index, other, x, 0.5)
    if half is not None:  # 0.5 * x * (1 + erf)
        return x, mul.outputs[0], head + [act, add, half, mul]
    last = index.sole_reader(mul.outputs[0])
    if other != x or last is None or last.op_id != "Mul" or \
            not _close(_scalar_const(graph, _other(last, mul.outputs[0]) or ""), 0.5):
        return None
    return x, last.outputs[0], head + [act, add, mul, last]  # x * (1 + erf) * 0.5


def _const_operand(graph: Graph, node: Node | None, op: str, want: float) -> str | None:
    """The operand of ``node`` (an ``op`` of two inputs) that is not the scalar constant ``want``."""
    if node is None or node.op_id != op or len(node.inputs) != 2:
        return None
    for value, const in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
        if _close(_scalar_const(graph, const), want):
            return value
    return None


def _match_tanh(graph: Graph, index: _Index, tanh: Node) -> tuple[str, str, list[Node]] | None:
    """(x, output, nodes of the block) for GELU's tanh form around ``tanh``, as GPT-2's exports write
    it: Tanh(Mul(Add(x, Mul(Pow(x, 3), 0.044715)), sqrt(2 / pi))), then the erf form's end."""
    scale = index.producers.get(tanh.inputs[0])
    if scale is None or index.sole_reader(tanh.inputs[0]) is not tanh:
        return None
    inner = _const_operand(graph, scale, "Mul", SQRT_2_PI)
    add = index.producers.get(inner) if inner is not None and index.sole_reader(inner) is scale else None
    if add is None or add.op_id != "Add" or len(add.inputs) != 2:
        return None
    for x, cubed in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
        mul = index.producers.get(cubed)
        if mul is None or index.sole_reader(cubed) is not add:
            continue
        power = _const_operand(graph, mul, "Mul", GELU_CUBIC)
        pow_node = index.producers.get(power) if power is not None and index.sole_reader(power) is mul else None
        if pow_node is None or pow_node.op_id != "Pow" or len(pow_node.inputs) != 2 or pow_node.inputs[0] != x \
                or not _close(_scalar_const(graph, pow_node.inputs[1]), 3.0):
            continue
        return _tail(graph, index, tanh, x, [pow_node, mul, add, scale])
    return None


@register_pass("fuse_gelu", before="fuse_activation")
def fuse_gelu(graph: Graph, ctx: PassContext) -> int:
    """0.5 * x * (1 + erf(x / sqrt 2)) written in Div/Erf/Add/Mul nodes (or the tanh form in
    Pow/Mul/Add/Tanh nodes) into one Gelu node."""
    acts = [n for n in graph.nodes if n.op_id in ("Erf", "Tanh")]
    if not acts:
        return 0
    index, count = _Index(graph), 0
    for act in acts:
        if index.removed(act):
            continue
        tanh = act.op_id == "Tanh"
        found = _match_tanh(graph, index, act) if tanh else _match(graph, index, act)
        if found is None:
            continue
        x, out, block = found
        spec = graph.spec(x)
        if spec is None or spec.dtype != "float32" or graph.spec(out) is None or graph.spec(out).shape != spec.shape:
            continue
        if any(_overridden(graph, node, _attrs(node), ctx) for node in block):
            continue  # a user's kernel runs one of them: keep the block as written
        attrs = {"approximate": "tanh" if tanh else "none"}
        if select_kernel("Gelu", ctx.device, "float32", ctx.vendors, [spec], attrs, ctx.scope) is None:
            continue
        fused = Node("Gelu", [x], [out], {"approximate": "tanh"} if tanh else {}, act.name + "_gelu")
        index.fuse(block, fused, at=block[-1])  # in the place of the block's last node, which wrote ``out``
        log.debug("fuse_gelu: %s -> Gelu", act.name)
        count += 1
    index.commit()
    return count
