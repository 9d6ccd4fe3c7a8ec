"""``fuse_attention``: a transformer's scaled dot-product block becomes one ONNX ``Attention`` node
(opset 23; reference kernel in ``kernelkit/ops/attention.py``), as onnxruntime's attention fusion
does:

    MatMul(Q, Kt) [-> Mul(c) | Div(c)] [-> Add(mask)] -> Softmax(last axis) -> MatMul(., V)
        into  Attention(Q, K, V[, mask], scale=c or 1/c or 1)       (4-D: batch, heads, seq, head)

The Add is an additive mask (BERT's (batch, 1, 1, keys) padding bias, -10000 where a key is
padding): a float tensor of the scores' dtype that broadcasts onto the scores without changing
their shape and whose last axis is the keys axis itself (ONNX's ``attn_mask``, added after the
scale; a shorter mask would be padded with -inf by the op, not broadcast). In its place a
``Where(cond, scores, c)`` with c = -inf or the dtype's lowest finite value (GPT-2's causal mask, a
boolean slice of a constant) joins as the float mask ``Where(cond, 0, c)``, a new node computed per
run: s + c rounds to c for any |s| < 2^103, so the masked scores are the same (a NaN or infinite
masked score, which Where would hide, reaches the row's softmax).

K is Kt with its last two axes swapped: a Transpose producing Kt gets a twin with the composed
permutation, anything else a new Transpose. When the heads come from 3-D projections the usual
way (Reshape to (batch, seq, heads, head) and Transpose [0, 2, 1, 3], K's Transpose [0, 2, 3, 1])
and the result goes back the same way (Transpose [0, 2, 1, 3], Reshape to (batch, seq,
heads * head)), the node takes the 3-D projections and writes the 3-D result
(``q_num_heads``/``kv_num_heads``): no transposes are left. The per-head Reshape/Transpose nodes
that nothing else reads are removed by ``trim_dead``.

The fusion fires only where the session would run ``Attention`` with a non-reference kernel
(the reference runs the block op by op, as written), never swallows a node a user's kernel
overrides, and leaves alone: intermediates read elsewhere or being graph outputs, a scale that is
not a positive scalar constant, ranks other than 4, broadcast batch/head axes, a MatMul with a
fused activation. Results agree with the unfused block to float32 rounding; they differ only
where a whole row of scores is -inf (the unfused Softmax gives NaN, Attention 0, as ONNX defines).
"""
from __future__ import annotations

import logging

import numpy as np

from ..ir import Graph, Node, TensorSpec, Value
from ..shape import infer_shapes
from . import PassContext, register_pass
from .builtin import _attrs, _const, _Index, _overridden, _picked

log = logging.getLogger("kernelkit.passes")

# the optional scale between the two MatMuls: op -> attention scale from the constant c
SCALES = {"Mul": lambda c: c, "Div": lambda c: 1.0 / c}
MASKS = True  # an additive mask Add between the scale and the Softmax joins the node (switch)
WHERE_MASKS = True  # a Where(cond, scores, lowest) too, as the float mask where(cond, 0, lowest) (switch)
FLOAT_MASKS = ("float32", "float64", "float16")


def _static(graph: Graph, name: str, rank: int) -> tuple | None:
    """The shape of ``name`` if it has ``rank`` axes, each a number or a named symbol (a symbol
    equals only itself; batch and sequence axes of exported models are symbols), the last two
    (heads and head size, or their product) numbers."""
    spec = graph.spec(name)
    if spec is None or spec.shape is None or len(spec.shape) != rank:
        return None
    shape = tuple(spec.shape)
    last = shape[-2:] if rank == 4 else shape[-1:]
    if not all(isinstance(d, (int, str)) for d in shape) or not all(isinstance(d, int) for d in last):
        return None
    return shape


def _scale(graph: Graph, node: Node, value: str) -> float | None:
    """The attention scale a Mul/Div node applying a positive scalar constant to ``value`` means."""
    if node.op_id not in SCALES or len(node.inputs) != 2 or (node.op_id == "Div" and node.inputs[0] != value):
        return None
    other = node.inputs[1] if node.inputs[0] == value else node.inputs[0]
    c = _const(graph, other)
    if c is None or c.size != 1 or c.ndim > 4 or not np.isfinite(c).all() or float(c.reshape(())) <= 0:
        return None
    return float(SCALES[node.op_id](float(c.reshape(()))))


def _fits(scores, mask, keys_axis: bool = True) -> bool:
    """Whether a mask of spec ``mask`` applies to 4-D ``scores`` as Attention's ``attn_mask``: rank
    <= 4, broadcasting onto the scores' shape without changing it (a symbol against a number other
    than 1: that number or 1 at run time, or the op's broadcast fails), and with ``keys_axis`` its
    last axis the keys axis itself (length 1 would be padded by Attention, not broadcast)."""
    if scores is None or mask is None or scores.shape is None or mask.shape is None or len(scores.shape) != 4 \
            or not 1 <= len(mask.shape) <= 4:
        return False
    if keys_axis and (mask.shape[-1] != scores.shape[-1] or not isinstance(mask.shape[-1], int)):
        return False
    for d, full in zip(mask.shape, scores.shape[4 - len(mask.shape):]):
        if d != 1 and d != full and not (isinstance(d, str) and (isinstance(full, str) or full != 1)):
            return False
    return True


def _mask(graph: Graph, node: Node, value: str):
    """The mask a node applies to the scores ``value`` (4-D), or None:
    - an Add: the other input, an additive mask of the scores' float dtype (its name);
    - a Where(cond, value, c) with c -inf or the dtype's lowest finite value (GPT-2's causal mask):
      ("where", cond, c). Scores s kept where cond holds, c elsewhere, is s + (0 or c) exactly for
      |s| < 2^103 (s + finfo.min rounds to finfo.min), which the pass writes as a float mask with
      the keys axis in full (cond's last axis may be a symbol or 1: Where broadcasts it)."""
    if node.op_id == "Add" and len(node.inputs) == 2 and node.inputs[0] != node.inputs[1]:
        other = node.inputs[1] if node.inputs[0] == value else node.inputs[0]
        scores, mask = graph.spec(value), graph.spec(other)
        if mask is not None and scores is not None and mask.dtype == scores.dtype and mask.dtype in FLOAT_MASKS \
                and _fits(scores, mask):
            return other
        return None
    if node.op_id == "Where" and WHERE_MASKS and len(node.inputs) == 3 and node.inputs[1] == value \
            and node.inputs[0] != value and node.inputs[2] != value:
        scores, cond = graph.spec(value), graph.spec(node.inputs[0])
        c = _const(graph, node.inputs[2])
        if scores is None or cond is None or cond.dtype != "bool" or c is None or c.size != 1 or c.ndim > 4 \
                or c.dtype.name != scores.dtype or scores.dtype not in FLOAT_MASKS or not isinstance(
                    scores.shape[-1], int) or not _fits(scores, cond, keys_axis=False):
            return None
        low = float(c.reshape(()))
        if low == -np.inf or low == float(np.finfo(c.dtype).min):
            return ("where", node.inputs[0], low)
    return None


def _chain(graph: Graph, index: _Index, first: Node):
    """(scale node or None, mask Add or None, mask value or None, softmax, second MatMul, scale)
    following the QK MatMul ``first``."""
    node = index.sole_reader(first.outputs[0])
    scale, scaler, adder, mask = 1.0, None, None, None
    if node is not None and node.op_id in SCALES:
        scale, scaler = _scale(graph, node, first.outputs[0]), node
        node = index.sole_reader(node.outputs[0])
    if node is not None and node.op_id in ("Add", "Where") and MASKS:
        mask = _mask(graph, node, (scaler or first).outputs[0])
        if mask is None:
            return None
        adder, node = node, index.sole_reader(node.outputs[0])
    if scale is None or node is None or node.op_id != "Softmax":
        return None
    if _attrs(node)["axis"] not in (-1, 3):
        return None
    second = index.sole_reader(node.outputs[0])
    if second is None or second.op_id != "MatMul" or second.inputs[0] != node.outputs[0] or len(second.inputs) != 2:
        return None
    return scaler, adder, mask, node, second, scale


def _same_rows(x3: tuple | None, x4: tuple | None) -> bool:
    """Whether a Reshape between (batch, seq, heads * head) and (batch, seq, heads, head) only
    splits or merges the last axis: same sequence axis and last axes, so the batch axes agree by
    element count even when the exporter's Reshape left a fresh symbol there."""
    return x3 is not None and x4 is not None and x3[1] == x4[1] and x3[2] == x4[2] * x4[3] and \
        (x3[0] == x4[0] or isinstance(x3[0], str) or isinstance(x4[0], str))


def _source(index: _Index, name: str, perm: list) -> tuple[str, list]:
    """(source, p) with transpose(name, perm) == transpose(source, p): ``perm`` composed with the
    Transpose nodes that produce ``name``, up to the first value no Transpose wrote."""
    while (node := index.producers.get(name)) is not None and node.op_id == "Transpose":
        inner = list(_attrs(node)["perm"] or [3, 2, 1, 0])  # no perm: the axes reversed
        if len(inner) != 4:
            break
        name, perm = node.inputs[0], [inner[i] for i in perm]
    return name, perm


def _heads_3d(index: _Index, graph: Graph, name: str, perm: list) -> str | None:
    """The 3-D (batch, seq, heads * head) value x if transpose(name, perm) is x split into heads:
    Reshape(x) to (batch, seq, heads, head), then Transpose [0, 2, 1, 3]."""
    src, p = _source(index, name, perm)
    rs = index.producers.get(src)
    if p != [0, 2, 1, 3] or rs is None or rs.op_id != "Reshape":
        return None
    x3, x4 = _static(graph, rs.inputs[0], 3), _static(graph, rs.outputs[0], 4)
    if not _same_rows(x3, x4):
        return None
    return rs.inputs[0]


def _merged_3d(index: _Index, graph: Graph, y: str) -> Node | None:
    """The Reshape that takes the 4-D attention output ``y`` back to (batch, seq, heads * head)
    through Transpose [0, 2, 1, 3], if the block ends that way."""
    tr = index.sole_reader(y)
    if tr is None or tr.op_id != "Transpose" or list(_attrs(tr)["perm"] or []) != [0, 2, 1, 3]:
        return None
    rs = index.sole_reader(tr.outputs[0])
    y4, y3 = _static(graph, tr.outputs[0], 4), None
    if rs is not None and rs.op_id == "Reshape":
        y3 = _static(graph, rs.outputs[0], 3)
    if not _same_rows(y3, y4):
        return None
    return rs


def _fused_kernel(graph: Graph, ctx: PassContext, inputs: list, attrs: dict) -> bool:
    """Whether the session would run this Attention node with a non-reference kernel."""
    full = {"is_causal": 0, "qk_matmul_output_mode": 0, "softcap": 0.0, "left_window_size": -1,
            "right_window_size": -1, "kv_num_heads": None, "q_num_heads": None, "softmax_precision": None,
            **attrs}
    entry = _picked(ctx, "Attention", [graph.spec(i) for i in inputs], full)
    return entry is not None and entry.key.vendor != "reference"


@register_pass("fuse_attention", after="fuse_activation")
def fuse_attention(graph: Graph, ctx: PassContext) -> int:
    """MatMul(Q, K^T) [* scale] -> Softmax -> MatMul(., V) into one Attention node (3-D when the
    heads are split from and merged back into projections), where a non-reference kernel runs it."""
    if not any(n.op_id == "Softmax" for n in graph.nodes):
        return 0
    try:  # specs as of now: exporters' shape chains folded by earlier passes give static head sizes
        graph.toposort()
        infer_shapes(graph)
    except Exception as exc:  # noqa: BLE001 - a graph the session will report on later; fuse nothing
        log.debug("fuse_attention: shapes not inferable (%s); nothing fused", exc)
        return 0
    index, count = _Index(graph), 0
    for first in [n for n in graph.nodes if n.op_id == "MatMul" and len(n.inputs) == 2]:  # (not a bias's)
        found = _chain(graph, index, first)
        if found is None:
            continue
        scaler, adder, mask, softmax, second, scale = found
        q, kt, v = first.inputs[0], first.inputs[1], second.inputs[1]
        shapes = [_static(graph, name, 4) for name in (q, kt, v)]
        if None in shapes or _attrs(first)["activation"] or _attrs(second)["activation"]:
            continue
        (b, h, m, dk), (kb, kh, kdk, n), (vb, vh, vn, _) = shapes
        if (kb, kh, kdk) != (b, h, dk) or (vb, vh, vn) != (b, h, n):
            continue
        if any(_overridden(graph, node, _attrs(node), ctx) for node in (first, scaler, adder, softmax, second)
               if node):
            continue  # a user's kernel runs one of them: keep the block as written
        # 3-D form: heads split from projections and merged back after
        merge = _merged_3d(index, graph, second.outputs[0])
        xq, xv = _heads_3d(index, graph, q, [0, 1, 2, 3]), _heads_3d(index, graph, v, [0, 1, 2, 3])
        xk = _heads_3d(index, graph, kt, [0, 1, 3, 2])  # K = Kt with the last two axes swapped
        attrs = {"scale": scale}
        if merge is not None and None not in (xq, xk, xv):
            inputs, output = [xq, xk, xv], merge.outputs[0]
            attrs.update(q_num_heads=h, kv_num_heads=h)
            gone = [first, scaler, adder, softmax, second, index.sole_reader(second.outputs[0]), merge]
            new_nodes = []
        else:
            k_name, perm = _source(index, kt, [0, 1, 3, 2])
            new_nodes = []
            if perm != [0, 1, 2, 3]:  # else K itself was transposed into Kt
                k_src, k_name = k_name, graph.fresh_name(f"{kt}_keys")
                graph.values[k_name] = Value(k_name, TensorSpec((b, h, n, dk), graph.spec(kt).dtype))
                new_nodes = [Node("Transpose", [k_src], [k_name], {"perm": perm},
                                  graph.fresh_name(f"{first.name}_keys"))]
            inputs, output = [q, k_name, v], second.outputs[0]
            gone = [first, scaler, adder, softmax, second]
        made = []  # constants this rewrite adds (dropped again if it does not happen)
        if isinstance(mask, tuple):  # Where(cond, scores, c): the float mask where(cond, 0, c), per run
            _, cond, low = mask
            dtype = graph.spec(first.outputs[0]).dtype
            mask = graph.fresh_name(f"{adder.name}_mask")
            zero, lowest = graph.fresh_name(f"{adder.name}_zero"), graph.fresh_name(f"{adder.name}_lowest")
            keys = graph.spec(first.outputs[0]).shape[-1]  # zeros of the keys' length: a full keys axis
            graph.values[zero] = Value(zero, TensorSpec((keys,), dtype), data=np.zeros(keys, dtype))
            graph.values[lowest] = Value(lowest, TensorSpec((), dtype), data=np.array(low, dtype))
            graph.values[mask] = Value(mask, TensorSpec(tuple(graph.spec(cond).shape[:-1]) + (keys,), dtype))
            made = [zero, lowest]
            where = Node("Where", [cond, zero, lowest], [mask], {}, graph.fresh_name(f"{adder.name}_to_mask"))
            new_nodes = new_nodes + [where]
        if mask is not None:
            inputs = inputs + [mask]
        if not _fused_kernel(graph, ctx, inputs, attrs):
            for t in new_nodes:
                graph.values.pop(t.outputs[0], None)
            for name in made:
                graph.values.pop(name, None)
            continue
        fused = Node("Attention", list(inputs), [output], attrs, graph.fresh_name(f"{second.name}_attention"))
        at = graph.nodes.index(second)
        graph.nodes[at:at] = new_nodes + [fused]
        for node in gone:
            if node is not None:
                index.remove(node)
        for node in new_nodes + [fused]:
            for name in node.inputs:
                index.readers.setdefault(name, []).append(node)
            index.producers[node.outputs[0]] = node
        for node in gone:
            if node is not None and node.outputs[0] != output:
                graph.values.pop(node.outputs[0], None)
        count += 1
    index.commit()
    return count
