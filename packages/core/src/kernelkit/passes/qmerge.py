"""``merge_dynamic_matmul``: sibling com.microsoft::DynamicQuantizeMatMul nodes that read the same
float input (a transformer's Q, K and V projections) become one node over their weights
concatenated along N that writes the original outputs (kernelkit's ``split`` attribute: the
columns cut as a Split on the last axis would, each part written by the epilogue into its own
array; session 5 had a Split node after the merged product, 50-85 us a layer of copying):

    DQMM(x, B1, s1, z1, b1), DQMM(x, B2, s2, z2, b2), ...
        into  DQMM(x, [B1 B2 ...], [s1 s2 ...], [z1 z2 ...], [b1 b2 ...], split=[N1, N2, ...])

so that x's range is found and x quantized once instead of once per projection (onnxruntime
shares one DynamicQuantizeLinear among the three MatMulIntegerToFloat nodes for the same reason).
Per-tensor scales and zero points become per-column ones of the same values. The result is the
unmerged graph's bit for bit: A's scale and zero point come from the same x, each column's integer
product is exact, and each column's float32 steps (int32 -> float32, * (a_scale * b_scale[n]),
+ bias[n]) are the same operations on the same values.

Merged only: constant 2-D weights of one dtype and K, constant float32 scales (per tensor or per
column) and zero points, biases on all siblings or none, no attributes. Runs after ``fuse_qdq``,
which makes these nodes.

``fuse_dynamic_relu``: a Relu or a Gelu (approximate="none") that alone reads a
DynamicQuantizeMatMul's output becomes the node's ``activation`` attribute (kernelkit's, as
QLinearMatMul's), a Softmax over the last axis its ``softmax`` attribute (kernelkit's, 1): the same
max(y, 0), the same Gelu loop, or the same Softmax row steps, on the same values, one node fewer
(the MLP's hidden layers and its classifier's Softmax; the transformer's first feed-forward
product, whose Gelu then runs on each row block in cache and on the product's threads), unless a
user's kernel overrides it.
"""
from __future__ import annotations

import logging
from typing import NamedTuple

import numpy as np

from ..ir import Graph, Node
from . import PassContext, register_pass
from . import quantized as _quantized  # noqa: F401 - registers fuse_qdq, the anchor below
from .builtin import _attrs, _const, _Index, _new_constant, _overridden

log = logging.getLogger("kernelkit.passes")

OP = "com.microsoft::DynamicQuantizeMatMul"


class _Part(NamedTuple):
    node: Node
    b: np.ndarray
    scale: np.ndarray  # (N,) float32
    zero_point: np.ndarray | None  # (N,) of b's dtype, or None
    bias: np.ndarray | None  # (N,) float32, or None


def _part(graph: Graph, node: Node) -> _Part | None:
    """The constants of one mergeable DynamicQuantizeMatMul, per column."""
    if node.attrs or len(node.outputs) != 1:
        return None
    names = (list(node.inputs) + [""] * 5)[:5]
    b = _const(graph, names[1])
    if b is None or b.ndim != 2 or b.dtype not in (np.int8, np.uint8):
        return None
    n = b.shape[1]
    scale = _const(graph, names[2])
    if scale is None or scale.dtype != np.float32 or scale.size not in (1, n) or scale.ndim > 1:
        return None
    zp = _const(graph, names[3]) if names[3] else None
    if names[3] and (zp is None or zp.dtype != b.dtype or zp.size not in (1, n) or zp.ndim > 1):
        return None
    bias = _const(graph, names[4]) if names[4] else None
    if names[4] and (bias is None or bias.dtype != np.float32 or bias.shape != (n,)):
        return None
    per_col = (lambda v: None if v is None else np.broadcast_to(v.reshape(-1), (n,)))
    return _Part(node, b, per_col(scale), per_col(zp), bias)


def _merge(graph: Graph, parts: list[_Part]) -> Node:
    """The merged node, writing the parts' outputs (its ``split`` attribute)."""
    first = parts[0].node
    x = first.inputs[0]
    dtype = parts[0].b.dtype
    base = first.name or "dqmm"
    inputs = [x, _new_constant(graph, f"{base}_merged_b", np.concatenate([p.b for p in parts], axis=1)),
              _new_constant(graph, f"{base}_merged_scale", np.concatenate([p.scale for p in parts]))]
    if any(p.zero_point is not None for p in parts):
        zps = [p.zero_point if p.zero_point is not None else np.zeros(p.b.shape[1], dtype) for p in parts]
        inputs.append(_new_constant(graph, f"{base}_merged_zero_point", np.concatenate(zps).astype(dtype)))
    else:
        inputs.append("")
    if parts[0].bias is not None:
        inputs.append(_new_constant(graph, f"{base}_merged_bias", np.concatenate([p.bias for p in parts])))
    while not inputs[-1]:
        inputs.pop()
    widths = [int(p.b.shape[1]) for p in parts]
    return Node("DynamicQuantizeMatMul", inputs, [p.node.outputs[0] for p in parts], {"split": widths},
                f"{base}_merged", "com.microsoft")


@register_pass("merge_dynamic_matmul", after="fuse_qdq")
def merge_dynamic_matmul(graph: Graph, ctx: PassContext) -> int:
    """Sibling DynamicQuantizeMatMul nodes on one input into one node over concatenated weights + Split."""
    readers: dict[str, list[Node]] = {}
    for node in graph.nodes:
        if node.op_id == OP:
            readers.setdefault(node.inputs[0], []).append(node)
    groups = []
    for x, nodes in readers.items():
        spec = graph.spec(x)
        if len(nodes) < 2 or spec is None or spec.shape is None or len(spec.shape) < 2 or spec.dtype != "float32":
            continue
        by_kind: dict[tuple, list[_Part]] = {}
        for part in filter(None, (_part(graph, n) for n in nodes)):
            if part.b.shape[0] == spec.shape[-1]:
                by_kind.setdefault((part.b.dtype.str, part.b.shape[0], part.bias is not None), []).append(part)
        groups += [parts for parts in by_kind.values() if len(parts) > 1]
    if not groups:
        return 0
    replace: dict[int, list[Node]] = {}
    for parts in groups:
        replace[id(parts[0].node)] = [_merge(graph, parts)]
        for p in parts[1:]:
            replace[id(p.node)] = []
        log.debug("merge_dynamic_matmul: %s -> one DynamicQuantizeMatMul, split outputs", [p.node.name for p in parts])
    graph.nodes = [m for n in graph.nodes for m in replace.get(id(n), [n])]
    used = {i for n in graph.nodes for i in n.inputs} | set(graph.outputs)
    for parts in groups:  # the siblings' own constants, unless something else reads them
        for p in parts:
            for name in p.node.inputs[1:]:
                if name and name not in used:
                    graph.values.pop(name, None)
    return len(groups)


@register_pass("fuse_dynamic_relu", after="merge_dynamic_matmul")
def fuse_dynamic_relu(graph: Graph, ctx: PassContext) -> int:
    """DynamicQuantizeMatMul -> Relu or Gelu into DynamicQuantizeMatMul(activation=Relu or Gelu), and
    DynamicQuantizeMatMul -> Softmax (over the last axis) into DynamicQuantizeMatMul(softmax=1)."""
    if not any(n.op_id == OP for n in graph.nodes):
        return 0
    index, count = _Index(graph), 0
    for node in [n for n in graph.nodes if n.op_id in ("Relu", "Gelu", "Softmax")]:
        if node.op_id == "Gelu" and _attrs(node).get("approximate", "none") != "none":
            continue
        if node.op_id == "Softmax" and not _last_axis(graph, node):
            continue
        producer = index.producers.get(node.inputs[0])
        if producer is None or producer.op_id != OP or index.sole_reader(node.inputs[0]) is not node:
            continue
        if len(producer.outputs) != 1:  # a merged node's split outputs: the Relu reads one part only
            continue
        if _attrs(producer).get("activation") or _attrs(producer).get("softmax") or \
                _overridden(graph, node, _attrs(node), ctx):
            continue
        if node.op_id == "Softmax":  # not an elementwise activation: kernelkit's own attribute
            producer.attrs = {**producer.attrs, "softmax": 1}
        else:
            producer.attrs = {**producer.attrs, "activation": node.op_id}
        index.splice(producer, node)
        count += 1
    index.commit()
    return count


def _last_axis(graph: Graph, node: Node) -> bool:
    """Whether a Softmax normalizes its input's last axis (its rank known where the axis is not -1)."""
    axis = int(_attrs(node).get("axis", -1))
    if axis == -1:
        return True
    spec = graph.spec(node.inputs[0])
    rank = getattr(spec, "rank", None)
    return bool(rank) and axis % rank == rank - 1


@register_pass("fuse_dynamic_add", after="fuse_dynamic_relu")
def fuse_dynamic_add(graph: Graph, ctx: PassContext) -> int:
    """DynamicQuantizeMatMul -> Add(r, y) into DynamicQuantizeMatMul(..., residual=r).

    A transformer's residual Adds (attention projection + x, second feed-forward product + the
    LayerNormalization before it) become the epilogue's last step: the same float32 y + r, one
    rounding, on the same values (bit for bit), without a pass over the activations (an r that
    broadcasts is added after the product, as the Add node would). Fused only where the product's
    single output is read by that Add alone, the node has no ``activation`` or ``split``, r is
    float32 and no user kernel overrides the Add. The fused node takes the Add's place in the order
    (r may be computed after the product)."""
    if not any(n.op_id == OP for n in graph.nodes):
        return 0
    index = _Index(graph)
    at_add: dict[int, Node] = {}
    moved: set[int] = set()
    for node in [n for n in graph.nodes if n.op_id == "Add"]:
        if len(node.inputs) != 2 or len(node.outputs) != 1 or node.inputs[0] == node.inputs[1]:
            continue
        for side in (0, 1):
            producer = index.producers.get(node.inputs[side])
            if producer is None or producer.op_id != OP or id(producer) in moved or len(producer.outputs) != 1:
                continue
            attrs = _attrs(producer)
            if attrs.get("activation") or attrs.get("split") or len(producer.inputs) > 5 or \
                    index.sole_reader(producer.outputs[0]) is not node:
                continue
            other, y = node.inputs[1 - side], producer.outputs[0]
            r_spec, out_spec = graph.spec(other), graph.spec(node.outputs[0])
            if r_spec is None or r_spec.dtype != "float32" or out_spec is None or out_spec.dtype != "float32":
                continue
            if _overridden(graph, node, _attrs(node), ctx):
                break
            producer.inputs = (list(producer.inputs) + [""] * 5)[:5] + [other]
            index.readers.setdefault(other, []).append(producer)
            index.remove(node)
            index.readers.pop(y, None)
            index.producers.pop(y, None)
            producer.outputs = [node.outputs[0]]
            index.producers[node.outputs[0]] = producer
            graph.values.pop(y, None)
            at_add[id(node)] = producer
            moved.add(id(producer))
            break
    if not at_add:
        return 0
    graph.nodes = [at_add.get(id(n), n) for n in graph.nodes if id(n) not in moved]
    return len(at_add)


@register_pass("fuse_dynamic_norm", after="fuse_dynamic_add")
def fuse_dynamic_norm(graph: Graph, ctx: PassContext) -> int:
    """DynamicQuantizeMatMul [+ residual] -> LayerNormalization (last axis) into the node's norm inputs.

    A transformer's LayerNormalization after each residual product becomes the epilogue's last
    step: each row block, whose rows are whole, is normalized by the LayerNormalization kernel's
    own row loop while in cache and on the product's threads (bit for bit the node's). Fused only
    where the product's single output is read by that node alone, it normalizes over the last axis
    with stash_type 1, its Mean and InvStdDev are unused, its Scale and B are float32 of the last
    dimension, the product has no ``activation`` or ``split``, and no user kernel overrides it."""
    if not any(n.op_id == OP for n in graph.nodes):
        return 0
    index = _Index(graph)
    at_norm: dict[int, Node] = {}
    moved: set[int] = set()
    for node in [n for n in graph.nodes if n.op_id == "LayerNormalization"]:
        producer = index.producers.get(node.inputs[0])
        if producer is None or producer.op_id != OP or id(producer) in moved or len(producer.outputs) != 1:
            continue
        attrs, ln = _attrs(producer), _attrs(node)
        x = producer.outputs[0]
        spec = graph.spec(x)
        if attrs.get("activation") or attrs.get("split") or len(producer.inputs) > 6 or \
                index.sole_reader(x) is not node or spec is None or spec.shape is None or not spec.shape:
            continue
        rank, n = len(spec.shape), spec.shape[-1]
        if ln.get("axis", -1) not in (-1, rank - 1) or ln.get("stash_type", 1) != 1 or not isinstance(n, int):
            continue
        if any(o and not index.unused(o) for o in node.outputs[1:]):
            continue
        params = (list(node.inputs) + ["", ""])[1:3]
        specs = [graph.spec(p) if p else None for p in params]
        if specs[0] is None or any(s is not None and (s.dtype != "float32" or tuple(s.shape or ()) != (n,))
                                   for s in specs):
            continue
        if _overridden(graph, node, ln, ctx):
            continue
        producer.inputs = (list(producer.inputs) + [""] * 6)[:6] + params
        while not producer.inputs[-1]:
            producer.inputs.pop()
        producer.attrs = {**producer.attrs, "norm_epsilon": float(ln.get("epsilon", 1e-5))}
        index.remove(node)
        index.readers.pop(x, None)
        index.producers.pop(x, None)
        for p in params:
            if p:
                index.readers.setdefault(p, []).append(producer)
        producer.outputs = [node.outputs[0]]
        index.producers[node.outputs[0]] = producer
        graph.values.pop(x, None)
        for o in node.outputs[1:]:
            if o:
                graph.values.pop(o, None)
        at_norm[id(node)] = producer
        moved.add(id(producer))
    if not at_norm:
        return 0
    graph.nodes = [at_norm.get(id(n), n) for n in graph.nodes if id(n) not in moved]
    return len(at_norm)
