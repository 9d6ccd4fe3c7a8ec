"""``fuse_qdq``: QDQ groups of a quantized model run as integer kernels, as onnxruntime's QDQ
transformer does.

A QDQ model (``onnxruntime.quantization.quantize_static(..., quant_format=QDQ)``) keeps float ops
and marks their quantized edges with DequantizeLinear (DQ) / QuantizeLinear (Q) pairs. Run op by op
it is correct but computes in float. The rules below rewrite

    DQ(x) , DQ(W const) [, DQ(bias int32 const)] -> Conv   [-> Relu|Clip] -> Q   into QLinearConv
    DQ(a) , DQ(b)                                -> MatMul [-> Relu|Clip] -> Q   into QLinearMatMul
    DQ(a) , DQ(B const) [, DQ(C int32 const)]    -> Gemm   [-> Relu|Clip] -> Q   into com.microsoft::QGemm
    DQ(a) , DQ(b)                                -> Add                   -> Q   into com.microsoft::QLinearAdd
    DQ(x) -> MaxPool|Reshape|Flatten|Transpose|Squeeze|Unsqueeze -> Q  (same scale and zero point)
                                                                     into the op on the integers

folds a dynamic model's DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul [-> Add] into
com.microsoft::MatMulIntegerToFloat, then DynamicQuantizeMatMul, and folds the DequantizeLinear
nodes of constants that no group took. The fused result is
onnxruntime's: int32 accumulators requantized with ``float32(x_scale * w_scale) / y_scale``; op by op
the same group computes a float32 sum, divides by y_scale and rounds, so a value within float32
rounding of a .5 boundary can land one quantization step away (docs/quantization.md).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ..ir import Graph, Node, TensorSpec, Value
from . import PassContext, register_pass
from .builtin import _activation_params, _attrs, _const, _Index, _new_constant

log = logging.getLogger("kernelkit.passes")

INT8 = ("int8", "uint8")


class Dq(NamedTuple):
    """A DequantizeLinear with constant scale (and zero point): what a fusion needs of it."""

    node: Node
    x: str               # the integer value it reads
    scale: np.ndarray
    zero_point: np.ndarray
    axis: int


def _dq(graph: Graph, index: _Index, name: str) -> Dq | None:
    node = index.producers.get(name)
    if node is None or node.op_id != "DequantizeLinear":
        return None
    scale = _const(graph, node.inputs[1])
    zp_name = node.inputs[2] if len(node.inputs) > 2 else ""
    zp = _const(graph, zp_name) if zp_name else np.zeros((), graph.spec(node.inputs[0]).dtype)
    attrs = _attrs(node)
    if scale is None or zp is None or attrs["block_size"] or scale.dtype != np.float32:
        return None
    return Dq(node, node.inputs[0], scale, zp, attrs["axis"])


def _per_tensor(dq: Dq | None) -> bool:
    return dq is not None and dq.scale.size == 1 and dq.zero_point.size == 1


def _per_axis(dq: Dq | None, rank: int, axis: int) -> bool:
    """Per-tensor, or per-axis along ``axis`` of a rank-``rank`` tensor."""
    if _per_tensor(dq):
        return True
    return dq is not None and dq.scale.ndim == 1 and dq.axis % rank == axis and \
        dq.zero_point.shape in ((), dq.scale.shape)


def _int8(graph: Graph, dq: Dq) -> bool:
    return graph.spec(dq.x).dtype in INT8


def _bias(graph: Graph, index: _Index, name: str, a: Dq, w: Dq) -> str | None:
    """The int32 constant behind DQ(bias) when its scale is x_scale * w_scale and its zero point 0
    ('' when there is no bias); None when the bias cannot join the integer kernel."""
    if not name:
        return ""
    dq = _dq(graph, index, name)
    data = _const(graph, dq.x) if dq is not None else None
    if data is None or data.dtype != np.int32 or np.any(dq.zero_point != 0):
        return None
    want = np.float32(a.scale.reshape(())) * w.scale.astype(np.float32).reshape(-1)
    if not np.allclose(dq.scale.reshape(-1), want, rtol=1e-6, atol=0):
        return None
    return dq.x


def _quantize_after(graph: Graph, index: _Index, node: Node):
    """(Q node, activation, params, removed nodes) when ``node``'s output goes, alone, into a
    per-tensor QuantizeLinear, directly or through one Relu/Clip; else None."""
    reader = index.sole_reader(node.outputs[0])
    activation, params, between = "", (), []
    if reader is not None and reader.op_id in ("Relu", "Clip"):
        params = _activation_params(graph, reader, _attrs(reader))  # Relu: (), Clip: (lo, hi)
        if params is None:
            return None
        activation, between = reader.op_id, [reader]
        reader = index.sole_reader(reader.outputs[0])
    if reader is None or reader.op_id != "QuantizeLinear":
        return None
    scale = _const(graph, reader.inputs[1])
    zp_name = reader.inputs[2] if len(reader.inputs) > 2 else ""
    zp = _const(graph, zp_name) if zp_name else None
    attrs = _attrs(reader)
    if scale is None or scale.size != 1 or (zp_name and (zp is None or zp.size != 1)) or attrs["block_size"]:
        return None
    if graph.spec(reader.outputs[0]).dtype not in INT8:
        return None
    return reader, activation, tuple(float(p) for p in params), between


def _zero_point(graph: Graph, dq: Dq, base: str) -> str:
    """The DQ's zero point input, or a new zero constant of its integer dtype."""
    name = dq.node.inputs[2] if len(dq.node.inputs) > 2 else ""
    return name or _new_constant(graph, f"{base}_zero_point", np.zeros((), graph.spec(dq.x).dtype))


def _y_zero_point(graph: Graph, q: Node) -> str:
    name = q.inputs[2] if len(q.inputs) > 2 else ""
    return name or _new_constant(graph, f"{q.name}_zero_point", np.zeros((), graph.spec(q.outputs[0]).dtype))


# -- the fusions: producer op -> builder of the fused node (None when the group does not qualify) --
def _fuse_conv(graph: Graph, index: _Index, conv: Node, q: Node, act: tuple) -> Node | None:
    x, w = _dq(graph, index, conv.inputs[0]), _dq(graph, index, conv.inputs[1])
    if not _per_tensor(x) or w is None or not _int8(graph, x) or not _int8(graph, w):
        return None
    rank = graph.spec(w.x).rank
    if _const(graph, w.x) is None or not _per_axis(w, rank, 0):
        return None
    bias = _bias(graph, index, conv.inputs[2] if len(conv.inputs) > 2 else "", x, w)
    if bias is None:
        return None
    attrs = {k: v for k, v in conv.attrs.items() if k not in ("activation", "activation_params")}
    inputs = [x.x, x.node.inputs[1], _zero_point(graph, x, conv.name + "_x"), w.x, w.node.inputs[1],
              _zero_point(graph, w, conv.name + "_w"), q.inputs[1], _y_zero_point(graph, q)] + ([bias] if bias else [])
    return Node("QLinearConv", inputs, [q.outputs[0]], {**attrs, **act}, conv.name)


def _fuse_matmul(graph: Graph, index: _Index, mm: Node, q: Node, act: tuple) -> Node | None:
    a, b = _dq(graph, index, mm.inputs[0]), _dq(graph, index, mm.inputs[1])
    if not _per_tensor(a) or b is None or not _int8(graph, a) or not _int8(graph, b):
        return None
    if not (_per_tensor(b) or (graph.spec(b.x).rank == 2 and _per_axis(b, 2, 1))):
        return None  # per-column scales of a 2-D B only
    inputs = [a.x, a.node.inputs[1], _zero_point(graph, a, mm.name + "_a"), b.x, b.node.inputs[1],
              _zero_point(graph, b, mm.name + "_b"), q.inputs[1], _y_zero_point(graph, q)]
    return Node("QLinearMatMul", inputs, [q.outputs[0]], dict(act), mm.name)


def _fuse_gemm(graph: Graph, index: _Index, gemm: Node, q: Node, act: tuple) -> Node | None:
    attrs = _attrs(gemm)
    a, b = _dq(graph, index, gemm.inputs[0]), _dq(graph, index, gemm.inputs[1])
    if not _per_tensor(a) or b is None or not _int8(graph, a) or not _int8(graph, b):
        return None
    if _const(graph, b.x) is None or not _per_axis(b, 2, 0 if attrs["transB"] else 1):
        return None
    c_name = gemm.inputs[2] if len(gemm.inputs) > 2 else ""
    bias = _bias(graph, index, c_name, a, b)
    if bias is None or (bias and attrs["beta"] != 1.0):
        return None
    inputs = [a.x, a.node.inputs[1], _zero_point(graph, a, gemm.name + "_a"), b.x, b.node.inputs[1],
              _zero_point(graph, b, gemm.name + "_b"), bias, q.inputs[1], _y_zero_point(graph, q)]
    gemm_attrs = {"alpha": attrs["alpha"], "transA": attrs["transA"], "transB": attrs["transB"], **act}
    return Node("QGemm", inputs, [q.outputs[0]], gemm_attrs, gemm.name, "com.microsoft")


def _fuse_add(graph: Graph, index: _Index, add: Node, q: Node, act: tuple) -> Node | None:
    if act:
        return None  # onnxruntime's QLinearAdd has no fused activation
    a, b = _dq(graph, index, add.inputs[0]), _dq(graph, index, add.inputs[1])
    if not _per_tensor(a) or not _per_tensor(b) or not _int8(graph, a):
        return None
    dtype = graph.spec(a.x).dtype
    if graph.spec(b.x).dtype != dtype or graph.spec(q.outputs[0]).dtype != dtype:
        return None
    inputs = [a.x, a.node.inputs[1], _zero_point(graph, a, add.name + "_a"), b.x, b.node.inputs[1],
              _zero_point(graph, b, add.name + "_b"), q.inputs[1], _y_zero_point(graph, q)]
    return Node("QLinearAdd", inputs, [q.outputs[0]], {}, add.name, "com.microsoft")


FUSIONS: dict[str, Callable] = {
    "Conv": _fuse_conv,  # DQ(x), DQ(W), DQ(bias) -> Conv [-> act] -> Q: QLinearConv(+ activation)
    "MatMul": _fuse_matmul,  # DQ(a), DQ(b) -> MatMul [-> act] -> Q: QLinearMatMul(+ activation)
    "Gemm": _fuse_gemm,  # DQ(A), DQ(B), DQ(C) -> Gemm [-> act] -> Q: com.microsoft::QGemm(+ activation)
    "Add": _fuse_add,  # DQ(A), DQ(B) -> Add -> Q, one dtype: com.microsoft::QLinearAdd (the same float32 steps)
}
# ops that commute with dequantization (they move or select values, never combine them):
# DQ -> op -> Q with the same scale and zero point is the op on the integers
INTEGER_OPS = ("MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze")


def _same_params(graph: Graph, dq: Dq, q: Node) -> bool:
    scale = _const(graph, q.inputs[1])
    zp_name = q.inputs[2] if len(q.inputs) > 2 else ""
    zp = _const(graph, zp_name) if zp_name else np.zeros((), graph.spec(q.outputs[0]).dtype)
    return scale is not None and zp is not None and graph.spec(q.outputs[0]).dtype == graph.spec(dq.x).dtype \
        and scale.size == 1 and zp.size == 1 and dq.scale.size == 1 and dq.zero_point.size == 1 \
        and scale.reshape(()) == dq.scale.reshape(()) and zp.reshape(()) == dq.zero_point.reshape(())


def _integer_op(graph: Graph, index: _Index, node: Node) -> bool:
    """DQ -> MaxPool/Reshape/... -> Q with one scale and zero point: the op reads the integers."""
    dq = _dq(graph, index, node.inputs[0])
    q = index.sole_reader(node.outputs[0])
    if not _per_tensor(dq) or q is None or q.op_id != "QuantizeLinear" or not _same_params(graph, dq, q):
        return False
    if node.op_id == "MaxPool" and (len(node.outputs) > 1 and not index.unused(node.outputs[1])):
        return False
    index.readers[node.inputs[0]] = [r for r in index.readers.get(node.inputs[0], []) if r is not node]
    node.inputs = [dq.x] + node.inputs[1:]
    index.readers.setdefault(dq.x, []).append(node)
    index.splice(node, q)
    spec = graph.spec(dq.x)
    for out in node.outputs[:1]:  # the output now has the integer dtype (same shape)
        old = graph.values[out].spec
        graph.values[out] = Value(out, TensorSpec(old.shape, spec.dtype))
    return True


def _scale_product(graph: Graph, index: _Index, name: str):
    """(a_scale, b_scale) when ``name`` is Mul(run-time scalar a_scale, constant b_scale)."""
    mul = index.producers.get(name)
    if mul is None or mul.op_id != "Mul":
        return None
    for a, b in (mul.inputs[:2], mul.inputs[1::-1]):
        spec = graph.spec(a)
        const = _const(graph, b)
        if const is not None and const.dtype == np.float32 and const.ndim <= 1 and \
                spec.dtype == "float32" and spec.is_static and spec.size == 1:
            return a, b
    return None


def _fuse_dynamic(graph: Graph, index: _Index, cast: Node) -> tuple[Node, list[Node]] | None:
    """A dynamic model's MatMulInteger -> Cast(float) -> Mul(a_scale * b_scale) [-> Add(bias)]:
    one com.microsoft::MatMulIntegerToFloat computing the same float32 steps in the same order."""
    mmi = index.producers.get(cast.inputs[0])
    if mmi is None or mmi.op_id != "MatMulInteger" or index.sole_reader(mmi.outputs[0]) is not cast or \
            _attrs(cast)["to"] != 1:
        return None
    mul = index.sole_reader(cast.outputs[0])
    if mul is None or mul.op_id != "Mul":
        return None
    other = mul.inputs[1] if mul.inputs[0] == cast.outputs[0] else mul.inputs[0]
    scales = _scale_product(graph, index, other)
    if scales is None:
        return None
    removed, out, bias = [mmi, cast, mul], mul.outputs[0], ""
    add = index.sole_reader(mul.outputs[0])
    n = graph.spec(mmi.outputs[0]).shape[-1]
    if add is not None and add.op_id == "Add":
        b = add.inputs[1] if add.inputs[0] == mul.outputs[0] else add.inputs[0]
        data = _const(graph, b)
        if data is not None and data.dtype == np.float32 and data.ndim == 1 and data.shape[0] == n:
            removed, out, bias = removed + [add], add.outputs[0], b
    zps = [mmi.inputs[i] if len(mmi.inputs) > i else "" for i in (2, 3)]
    inputs = [mmi.inputs[0], mmi.inputs[1], *scales, *zps] + ([bias] if bias else [])
    return Node("MatMulIntegerToFloat", inputs, [out], {}, mmi.name, "com.microsoft"), removed


def _fuse_dynamic_quantize(graph: Graph, index: _Index, dql: Node) -> list[Node]:
    """DynamicQuantizeLinear whose outputs only MatMulIntegerToFloat nodes read (as A, a_scale and
    a_zero_point): each of them becomes one com.microsoft::DynamicQuantizeMatMul on the float input,
    as onnxruntime fuses them (each reader quantizes A itself, with the same result). The Mul of the
    scales that _fuse_dynamic left without readers goes too. Returns the nodes replaced (the caller
    keeps them alive until ``index.commit()``, which identifies removed nodes by id)."""
    outs = (dql.outputs + ["", "", ""])[:3]
    if any(o in graph.outputs for o in outs if o):
        return []
    users = index.readers.get(outs[0], [])
    if not users or any(n.op_id != "com.microsoft::MatMulIntegerToFloat" or n.inputs[0] != outs[0] or
                        n.inputs[2] != outs[1] or (n.inputs + [""] * 5)[4] != outs[2] or outs[0] in n.inputs[1:]
                        for n in users):
        return []
    dead = []
    for name in outs[1:]:
        for n in index.readers.get(name, []) if name else []:
            if n in users:
                continue
            if n.op_id == "Mul" and index.unused(n.outputs[0]) and name != outs[2]:
                dead.append(n)  # a_scale * b_scale, no longer read since _fuse_dynamic
            else:
                return []
    for n in dead + [dql]:
        index.remove(n)
        for out in n.outputs:
            graph.values.pop(out, None)
    for mm in list({id(n): n for n in users}.values()):
        inputs = [dql.inputs[0], mm.inputs[1], mm.inputs[3], (mm.inputs + [""] * 6)[5]] + mm.inputs[6:7]
        while inputs and not inputs[-1]:
            inputs.pop()
        fused = Node("DynamicQuantizeMatMul", inputs, list(mm.outputs), {}, mm.name, "com.microsoft")
        index.replace(mm, fused)
        log.debug("fuse_qdq: %s -> DynamicQuantizeMatMul", mm.name)
    return users


def _fold_constant_dq(graph: Graph, index: _Index) -> int:
    """DequantizeLinear of a constant that no fusion took: a float constant, as fold_constants would."""
    from ..ops.quantize import dequantize_linear

    count = 0
    for node in [n for n in graph.nodes if n.op_id == "DequantizeLinear"]:
        args = [_const(graph, i) if i else None for i in node.inputs]
        if index.unused(node.outputs[0]) or any(a is None and i for a, i in zip(args, node.inputs)):
            continue
        attrs = _attrs(node)
        data = dequantize_linear(*args, axis=attrs["axis"], block_size=attrs["block_size"])
        data.flags.writeable = False
        graph.values[node.outputs[0]] = Value(node.outputs[0], TensorSpec.of(data), data)
        index.remove(node)
        count += 1
    return count


def _replace(index: _Index, fused: Node, group: list[Node]) -> None:
    """Put ``fused`` (writing the last node's output) where the group's first node was. Its inputs
    are defined before that node: they are the group's inputs or constants."""
    index.fuse(group, fused, at=group[0])
    log.debug("fuse_qdq: %s (%s) -> %s", group[0].name, group[0].op_id, fused.op_id)


@register_pass("fuse_qdq", before="fuse_activation")
def fuse_qdq(graph: Graph, ctx: PassContext) -> int:
    """Run DequantizeLinear -> Conv/MatMul/Gemm [-> Relu/Clip] -> QuantizeLinear groups as one integer
    kernel (QLinearConv, QLinearMatMul, QGemm), movement ops on the integers, and fold the
    DequantizeLinear nodes of constants left over."""
    index, count = _Index(graph), 0
    for node in list(graph.nodes):
        if node.op_id in INTEGER_OPS:
            count += _integer_op(graph, index, node)
            continue
        if node.op_id == "Cast" and not index.removed(node):
            found = _fuse_dynamic(graph, index, node)
            if found is not None:
                _replace(index, found[0], found[1])
                count += 1
            continue
        fuse = FUSIONS.get(node.op_id)
        if fuse is None or _attrs(node).get("activation"):
            continue
        found = _quantize_after(graph, index, node)
        if found is None:
            continue
        q, activation, params, between = found
        act = {"activation": activation, "activation_params": params} if activation else {}
        fused = fuse(graph, index, node, q, act)
        if fused is None:
            continue
        _replace(index, fused, [node, *between, q])
        count += 1
    index.commit()
    index = _Index(graph)  # afresh: ids of the nodes removed above may be reused by new ones
    replaced = [_fuse_dynamic_quantize(graph, index, n) for n in graph.nodes if n.op_id == "DynamicQuantizeLinear"]
    count += sum(map(len, replaced))
    index.commit()
    count += _fold_constant_dq(graph, index)
    index.commit()
    return count
