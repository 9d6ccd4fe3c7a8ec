"""Converter-side graph passes, registered with kernelkit's pass manager.

- ``onnx_fold_shape_reshape``: exporters write ``x.view(x.size(0), -1)`` as
  Shape -> Gather -> Unsqueeze -> Concat -> Reshape. When every entry of the target shape is a
  constant or a dimension that the spec knows (an int, or the symbol of the data's dim at the same
  position, which Reshape's ``0`` copies), the target becomes a constant and the chain goes dead.
- ``onnx_matmul_add_to_gemm``: MatMul(A, B) + C with 2-D A and B and a constant C that broadcasts
  one way onto (M, N) is exactly Gemm(A, B, C).
"""
from __future__ import annotations

import logging
import math

import numpy as np
from kernelkit.ir import Graph, Node, TensorSpec, Value
from kernelkit.passes import PassContext, passes, register_pass
from kernelkit.shape import broadcast_shapes

log = logging.getLogger("kernelkit.converters.onnx")

_SHAPE_CHAIN_OPS = {"Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Cast", "Slice"}


def _anchor() -> dict:
    names = {p.name for p in passes()}
    return {"before": "fuse_activation"} if "fuse_activation" in names else {}


def _const_ints(graph: Graph, name: str) -> list[int] | None:
    value = graph.values.get(name) if name else None
    if value is None or value.data is None or value.data.dtype.kind not in "iu" or value.data.ndim > 1:
        return None
    return [int(v) for v in value.data.reshape(-1)]


def _dims(graph: Graph, name: str, producers: dict, depth: int = 0):
    """The entries of an int64 shape-like value as (list of int | symbol, is_scalar), or None."""
    value = graph.values.get(name)
    if value is None or depth > 16:
        return None
    if value.data is not None:
        ints = _const_ints(graph, name)
        return None if ints is None else (ints, value.data.ndim == 0)
    node = producers.get(name)
    if node is None or node.op not in _SHAPE_CHAIN_OPS or node.domain:
        return None
    if node.op == "Shape":
        spec = graph.spec(node.inputs[0])
        if spec is None:
            return None
        rank = spec.rank
        start, end = node.attrs.get("start", 0), node.attrs.get("end", None)
        start = max(0, min(rank, start + rank if start < 0 else start))
        end = rank if end is None else max(0, min(rank, end + rank if end < 0 else end))
        return list(spec.shape[start:end]), False
    source = _dims(graph, node.inputs[0], producers, depth + 1)
    if source is None:
        return None
    dims, scalar = source
    if node.op == "Cast":
        return (dims, scalar) if node.attrs.get("to") in (6, 7) else None  # int32 / int64
    if node.op == "Gather":
        idx = graph.values.get(node.inputs[1])
        if scalar or node.attrs.get("axis", 0) != 0 or idx is None or idx.data is None:
            return None
        picks = [int(i) for i in idx.data.reshape(-1)]
        if any(not -len(dims) <= i < len(dims) for i in picks):
            return None
        return [dims[i] for i in picks], idx.data.ndim == 0
    if node.op == "Unsqueeze":
        axes = _const_ints(graph, node.inputs[1] if len(node.inputs) > 1 else "")
        return (dims, False) if scalar and axes in ([0], [-1]) else None
    if node.op == "Squeeze":
        return (dims, True) if not scalar and len(dims) == 1 else None
    if node.op == "Concat":
        parts = [dims]
        for other in node.inputs[1:]:
            got = _dims(graph, other, producers, depth + 1)
            if got is None or got[1]:
                return None
            parts.append(got[0])
        return (None if scalar else ([d for p in parts for d in p], False))
    if node.op == "Slice":
        args = [_const_ints(graph, n) if n else None for n in (node.inputs + ["", "", ""])[1:5]]
        starts, ends, axes, steps = args
        if scalar or starts is None or ends is None or len(starts) != 1 or (axes or [0]) not in ([0], [-1]) \
                or (steps or [1]) != [1]:
            return None
        return dims[slice(starts[0], ends[0])], False
    return None


def _reshape_target(data_spec: TensorSpec, dims: list) -> list[int] | None:
    target, unresolved = [], []
    for j, d in enumerate(dims):
        if isinstance(d, (int, np.integer)):
            target.append(int(d))
        elif j < data_spec.rank and data_spec.shape[j] == d:
            target.append(0)  # Reshape copies the data's dim j
        else:
            target.append(None)
            unresolved.append(j)
    if len(unresolved) > 1 or (unresolved and -1 in target):
        return None
    if unresolved:
        target[unresolved[0]] = -1  # the only unknown entry is what the element count leaves
    return target


def _int64_const(graph: Graph, base: str, values) -> str:
    const = np.asarray(values, np.int64)
    const.flags.writeable = False
    name = graph.fresh_name(base)
    graph.values[name] = Value(name, TensorSpec.of(const), const)
    return name


@register_pass("onnx_fold_shape_reshape", **_anchor())
def fold_shape_reshape(graph: Graph, ctx: PassContext) -> int:
    """Shape->Gather->Concat->Reshape target shapes that the specs determine become constants."""
    producers = graph.producers()
    rewrites = 0
    for node in graph.nodes:
        if node.op != "Reshape" or node.domain or len(node.inputs) < 2 or node.attrs.get("allowzero", 0):
            continue
        target_name = node.inputs[1]
        if graph.values.get(target_name) is not None and graph.values[target_name].data is not None:
            continue
        data_spec = graph.spec(node.inputs[0])
        got = _dims(graph, target_name, producers)
        if data_spec is None or got is None or got[1]:
            continue
        target = _reshape_target(data_spec, got[0])
        if target is None:
            continue
        node.inputs[1] = _int64_const(graph, f"{node.name}_shape", target)
        rewrites += 1
    if rewrites:
        _drop_dead_chains(graph)
    return rewrites


def _drop_dead_chains(graph: Graph) -> None:
    """Remove shape-chain nodes whose outputs nothing reads any more."""
    while True:
        users = graph.consumers()
        dead = [n for n in graph.nodes if n.op in _SHAPE_CHAIN_OPS and not n.domain
                and not any(o in users or o in graph.outputs for o in n.outputs if o)]
        if not dead:
            return
        gone = {id(n) for n in dead}
        graph.nodes = [n for n in graph.nodes if id(n) not in gone]
        for n in dead:
            for o in n.outputs:
                graph.values.pop(o, None)


_FLOATS = ("float16", "float32", "float64")


def _lead_target(lead) -> list[int] | None:
    """Reshape target for the leading dims of a MatMul output, when they are all static. (With a
    symbolic dim the round trip through (rows, N) would cost the output its symbol's name: shape
    inference cannot tell that rows / S is the batch N again.)"""
    return [int(d) for d in lead] if all(isinstance(d, (int, np.integer)) for d in lead) else None


@register_pass("onnx_matmul_add_to_gemm", **_anchor())
def matmul_add_to_gemm(graph: Graph, ctx: PassContext) -> int:
    """MatMul(A, B) + constant C -> Gemm(A, B, C), where C broadcasts one way onto the product.

    2-D A and B: exactly Gemm. A of rank > 2 (a linear layer over (batch, seq, K)) with static
    leading dims, a 2-D B and a per-column C: Reshape(A, [-1, K]) -> Gemm -> Reshape back, the
    rewrite onnxruntime's MatMulAddFusion makes; the reshapes are views, and the bias (and a
    following activation, see fuse_activation) joins the GEMM's epilogue instead of separate passes
    over the output."""
    users = graph.consumers()
    rewrites = 0
    for mm in list(graph.nodes):
        if mm.op != "MatMul" or mm.domain or mm.attrs.get("activation") or len(mm.inputs) != 2:
            continue
        out = mm.outputs[0]
        readers = users.get(out, [])
        if out in graph.outputs or len(readers) != 1 or readers[0].op != "Add" or readers[0].domain:
            continue
        add = readers[0]
        a_spec, b_spec, out_spec = graph.spec(mm.inputs[0]), graph.spec(mm.inputs[1]), graph.spec(out)
        others = [i for i in add.inputs if i != out]
        if len(others) != 1 or None in (a_spec, b_spec, out_spec) or a_spec.rank < 2 or b_spec.rank != 2:
            continue
        bias = graph.values.get(others[0])
        if bias is None or bias.data is None or bias.data.ndim not in (1, 2) or out_spec.dtype not in _FLOATS \
                or bias.data.dtype.name != out_spec.dtype:
            continue
        try:
            if broadcast_shapes(out_spec.shape, bias.data.shape) != out_spec.shape:
                continue
        except Exception:  # noqa: BLE001 - shapes that do not broadcast are left alone
            continue
        index = graph.nodes.index(mm)
        if a_spec.rank == 2:
            graph.nodes[index] = Node("Gemm", [mm.inputs[0], mm.inputs[1], others[0]], list(add.outputs), {},
                                      add.name, "")
        else:
            k, n = b_spec.shape
            lead = _lead_target(out_spec.shape[:-1])
            per_column = bias.data.shape[:-1] in ((), (1,))
            if lead is None or not per_column or not isinstance(k, int) or not isinstance(n, int):
                continue
            flat_in, flat_out = graph.fresh_name(f"{mm.name}_rows"), graph.fresh_name(f"{add.name}_rows")
            m = math.prod(lead)
            graph.values[flat_in] = Value(flat_in, TensorSpec((m, k), a_spec.dtype))
            graph.values[flat_out] = Value(flat_out, TensorSpec((m, n), out_spec.dtype))
            graph.nodes[index:index + 1] = [
                Node("Reshape", [mm.inputs[0], _int64_const(graph, f"{mm.name}_rows_shape", [-1, k])], [flat_in],
                     {}, f"{mm.name}_rows", ""),
                Node("Gemm", [flat_in, mm.inputs[1], others[0]], [flat_out], {}, add.name, ""),
                Node("Reshape", [flat_out, _int64_const(graph, f"{add.name}_shape", lead + [n])],
                     list(add.outputs), {}, f"{add.name}_unflatten", ""),
            ]
        graph.nodes.remove(add)
        graph.values.pop(out, None)
        rewrites += 1
        users = graph.consumers()
    return rewrites
