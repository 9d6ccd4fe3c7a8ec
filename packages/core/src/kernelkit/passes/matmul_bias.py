"""``fuse_matmul_bias``: a linear layer over a (batch, seq, K) input, written as
``Add(MatMul(A, W), b)`` with a constant 2-D W and a constant per-column bias b (how exporters
write ``nn.Linear`` on 3-D inputs: GPT-2's and BERT's projections and feed-forward layers),
becomes one ``MatMul(A, W, b)``: the bias joins the product's epilogue (numba's fgemm tiles add it
as they store the output; the reference adds it after ``np.matmul``), and a following activation
then joins it too (``fuse_activation``: BERT's feed-forward MatMul -> Add -> Gelu is one node).

The converters' ``onnx_matmul_add_to_gemm`` takes 2-D products and those whose leading dims are
static (through Reshapes around a Gemm); a symbolic batch or sequence axis would be lost in the
Reshape back, so those products were left as two nodes: this pass takes an A of rank >= 3 with a
symbolic leading axis (static ones stay the converters').
It fires only where the kernel the session would pick for the MatMul takes the bias
(``bias_input`` on the kernel), no user's kernel overrides the Add, the product's output has no
other reader and is not a graph output, and the bias has the output's dtype and broadcasts along
the last axis only (N values, or (1, ..., 1, N)). The fused node keeps the Add's name and output;
its result is the pair's, bit for bit on the reference (the same two roundings).
"""
from __future__ import annotations

import logging

import numpy as np

from ..ir import Graph, Node, TensorSpec, Value
from . import PassContext, register_pass
from .builtin import _attrs, _const, _Index, _overridden, _picked, adds_over

log = logging.getLogger("kernelkit.passes")

ENABLED = True  # the switch (benchmarks' A/B)


def _bias_kernel(graph: Graph, ctx: PassContext, inputs: list, attrs: dict) -> bool:
    """Whether the MatMul kernel the session would pick for ``inputs`` takes a bias input."""
    entry = _picked(ctx, "MatMul", [graph.spec(i) for i in inputs], attrs)
    return entry is not None and bool(getattr(entry.impl, "bias_input", False))


@register_pass("fuse_matmul_bias", before="fuse_activation")
def fuse_matmul_bias(graph: Graph, ctx: PassContext) -> int:
    """Add(MatMul(A, constant W), constant per-column bias), A of rank >= 3 with a symbolic leading
    axis, into MatMul(A, W, bias)."""
    if not ENABLED:
        return 0
    index, count = _Index(graph), 0
    for mm in [n for n in graph.nodes if n.op_id == "MatMul" and len(n.inputs) == 2]:
        attrs = _attrs(mm)
        if attrs["activation"]:
            continue
        add = index.sole_reader(mm.outputs[0])
        if add is None or add.op_id != "Add" or len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
            continue
        a_spec, out_spec = graph.spec(mm.inputs[0]), graph.spec(add.outputs[0])
        w, bias = _const(graph, mm.inputs[1]), _const(graph, [i for i in add.inputs if i != mm.outputs[0]][0])
        if a_spec is None or out_spec is None or a_spec.shape is None or len(a_spec.shape) < 3 or w is None \
                or bias is None or w.ndim != 2 or out_spec.dtype not in ("float32", "float64", "float16"):
            continue
        if all(isinstance(d, int) for d in a_spec.shape[:-1]):
            continue  # static rows: the converters' Reshape -> Gemm -> Reshape (onnx_matmul_add_to_gemm)
        n = w.shape[1]
        if bias.dtype.name != out_spec.dtype or w.dtype != bias.dtype or bias.size != n \
                or bias.ndim > len(a_spec.shape) or bias.shape[-1:] != (n,):
            continue
        if _overridden(graph, add, _attrs(add), ctx):
            continue  # a user's kernel runs the Add: keep it
        name = [i for i in add.inputs if i != mm.outputs[0]][0]
        if bias.ndim != 1:  # (1, ..., 1, N): its N values as a constant of their own
            name = graph.fresh_name(f"{add.name}_bias")
            graph.values[name] = Value(name, TensorSpec((n,), out_spec.dtype),
                                       data=np.ascontiguousarray(bias.reshape(n)))
        inputs = [mm.inputs[0], mm.inputs[1], name]
        if not _bias_kernel(graph, ctx, inputs, attrs):
            if name not in add.inputs:
                graph.values.pop(name, None)
            continue
        fused = Node("MatMul", inputs, list(add.outputs), dict(mm.attrs), add.name, "")
        index.fuse([mm, add], fused, at=add)
        log.debug("fuse_matmul_bias: %s + %s -> MatMul with a bias", mm.name, add.name)
        count += 1
    index.commit()
    return count


# fuse_matmul_residual's switch (benchmarks' A/B: kernelkit.passes.matmul_bias.RESIDUAL_ENABLED=0). On since
# issue 11, session 13 (resid13; docs/numba.md): Xeon, turns.py default / fused bert_l4 1.00, transformer 1.01
# at two threads, 1.02 / 0.99 at one, 0.99 / 1.06 loaded; at two threads the fused products 1.02-1.07x the
# product + Add per node (nodes_ab2t.py)
RESIDUAL_ENABLED = True


def _residual_kernel(graph: Graph, ctx: PassContext, inputs: list, attrs: dict) -> bool:
    """Whether the MatMul kernel the session would pick for ``inputs`` (A, B, bias or "", Z) opts in to a
    fused residual (``residual_input`` on the kernel: the reference's does not, so its session keeps the
    Add, the graph as exported)."""
    entry = _picked(ctx, "MatMul", [graph.spec(i) if i else None for i in inputs], attrs)
    return entry is not None and bool(getattr(entry.impl, "residual_input", False))


@register_pass("fuse_matmul_residual", after="fuse_matmul_bias")
def fuse_matmul_residual(graph: Graph, ctx: PassContext) -> int:
    """Add(MatMul(A, constant W[, bias]), r), r a value of the product's dtype that is not a constant (a
    constant is a bias: fuse_matmul_bias's, or the converters' Gemm), into MatMul(A, W, bias, r); Z
    broadcasts as the Add did (numba's tiles take it where it has the product's shape, its other paths add
    it after). The residual Add of a transformer layer (the attention's output projection + x, the second
    feed-forward product + x) joins the product: numba's fgemm tiles start their accumulators from r. It
    fires where the kernel the session would pick for the MatMul takes the residual (``residual_input``),
    no user's kernel overrides the Add, and the product has no activation and no other reader (r cannot
    depend on the product then). The fused node takes the Add's place in the node list, keeps the MatMul's
    name and writes the Add's output (``benchmarks/ops_vs_reference.py`` compares it with the reference's
    MatMul and Add together)."""
    if not RESIDUAL_ENABLED:
        return 0
    index, count = _Index(graph), 0
    for add, mm, other in adds_over(graph, index, "MatMul"):
        if len(mm.inputs) > 3 or _attrs(mm)["activation"] or _const(graph, mm.inputs[1]) is None:
            continue
        if _const(graph, other) is not None:
            continue  # a constant is a bias (fuse_matmul_bias's, or the converters' Gemm), not a residual
        out, spec, ospec = graph.spec(add.outputs[0]), graph.spec(mm.outputs[0]), graph.spec(other)
        if out is None or spec is None or ospec is None or spec.dtype != out.dtype or ospec.dtype != out.dtype \
                or out.dtype not in ("float32", "float64"):
            continue  # (MatMul's Z broadcasts as the Add did: the product's and r's shapes may differ)
        inputs = (list(mm.inputs) + [""])[:3] + [other]
        if not _residual_kernel(graph, ctx, inputs, _attrs(mm)) or _overridden(graph, add, _attrs(add), ctx):
            continue
        mm.inputs = inputs
        index.readers.setdefault(other, []).append(mm)
        index.splice(mm, add)
        # the fused node takes the Add's place (r may be produced between the product and the Add: the passes
        # after this one, trim_dead's sweep among them, read the node list in order); the Add, left in the
        # product's place, leaves at commit
        index.swap(mm, add)
        log.debug("fuse_matmul_residual: %s + %s -> MatMul with a residual", mm.name, add.name)
        count += 1
    index.commit()
    return count
