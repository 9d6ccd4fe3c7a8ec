"""The built-in graph passes, in pipeline order:

    eliminate_identity -> fold_constants -> fold_batchnorm -> fuse_activation -> trim_dead

Each pass is a table of small rules (one line of comment each) applied by a short loop, and is run
by the driver in ``kernelkit.passes``. Passes rewrite the graph in place, never write into a
constant's array, and keep ``graph.values`` specs valid; names of graph outputs never change.
"""
from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from ..activation import ACTIVATIONS
from ..errors import ConfigError, KernelkitError, brief
from ..invoke import invoke
from ..ir import Graph, Node, TensorSpec, Value
from ..registry import get_schema, normalize_attrs, select_kernel
from ..shape import infer_node
from . import PassContext, register_pass

log = logging.getLogger("kernelkit.passes")

BUILTIN_VENDORS = ("reference", "numba", "opencl")
FOLD_MAX_BYTES = 16 << 20  # default cap on a folded constant; options["fold_max_bytes"] overrides


# -- helpers shared by the passes -----------------------------------------------------------------
def _attrs(node: Node) -> dict:
    """The node's attributes, complete with the schema's defaults."""
    return normalize_attrs(get_schema(node.op, node.domain), node.attrs, f"node {node.name!r} ({node.op_id})")


def _const(graph: Graph, name: str) -> np.ndarray | None:
    """The data of constant ``name``; None if it is absent ('') or only known at run time."""
    value = graph.values.get(name) if name else None
    return value.data if value is not None else None


class _Index:
    """Who writes and who reads each value, kept current while one pass sweeps the graph (so a
    sweep costs O(nodes), not O(nodes) per rewrite); removed nodes leave at ``commit``."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.producers = graph.producers()
        self.readers = graph.consumers()
        self._removed: set[int] = set()
        self._at: dict[int, int] | None = None  # node id -> its place in graph.nodes (``place``)

    def sole_reader(self, name: str) -> Node | None:
        """The only node reading ``name``, if ``name`` is not also a graph output."""
        users = self.readers.get(name, [])
        return users[0] if len(users) == 1 and name not in self.graph.outputs else None

    def unused(self, name: str) -> bool:
        return not name or (not self.readers.get(name) and name not in self.graph.outputs)

    def remove(self, node: Node) -> None:
        """Take ``node`` out of the graph (its output Values are the caller's business)."""
        self._removed.add(id(node))
        for name in set(node.inputs) - {""}:
            self.readers[name] = [r for r in self.readers.get(name, []) if r is not node]
        for name in node.outputs:
            if self.producers.get(name) is node:
                del self.producers[name]

    def redirect(self, old: str, new: str) -> None:
        """Readers of value ``old`` read ``new`` instead."""
        users = self.readers.pop(old, [])
        for node in {id(u): u for u in users}.values():
            node.inputs = [new if i == old else i for i in node.inputs]
        self.readers.setdefault(new, []).extend(users)

    def rename(self, producer: Node, old: str, new: str) -> None:
        """``producer`` writes ``new`` instead of ``old``; readers of ``old`` follow; ``new`` keeps
        its own Value entry and ``old``'s is dropped."""
        producer.outputs = [new if o == old else o for o in producer.outputs]
        self.producers.pop(old, None)
        self.producers[new] = producer
        self.redirect(old, new)
        self.graph.values.pop(old, None)

    def splice(self, producer: Node, node: Node) -> None:
        """Remove ``node`` (the only reader of ``producer``'s first output) and let ``producer``
        write ``node``'s first output, so that names downstream (graph outputs too) stay stable."""
        self.remove(node)
        self.rename(producer, producer.outputs[0], node.outputs[0])

    def place(self, node: Node) -> int:
        """``node``'s place in the graph's node list (the map is built on first use and kept current by
        ``swap`` and ``replace``, so that a sweep's rewrites cost O(nodes), not O(nodes) each)."""
        if self._at is None:
            self._at = {id(n): i for i, n in enumerate(self.graph.nodes)}
        return self._at[id(node)]

    def swap(self, a: Node, b: Node) -> None:
        """``a`` and ``b`` exchange their places in the node list."""
        i, j = self.place(a), self.place(b)
        self.graph.nodes[i], self.graph.nodes[j] = b, a
        self._at[id(a)], self._at[id(b)] = j, i

    def replace(self, old: Node, new: Node) -> None:
        """``new`` takes ``old``'s place in the node list (and in the index, as ``old``'s outputs' producer
        and a reader of its inputs); ``old`` leaves the index."""
        i = self.place(old)
        self.remove(old)
        self.graph.nodes[i] = new
        self._at[id(new)] = self._at.pop(id(old))
        self._removed.discard(id(new))
        for name in new.outputs:
            self.producers[name] = new
        for name in new.inputs:
            if name:
                self.readers.setdefault(name, []).append(new)

    def fuse(self, nodes: list[Node], new: Node, at: Node) -> None:
        """``nodes`` (a block one pass fuses) leave the graph, ``new`` takes the place of ``at`` (one of them) as
        ``replace`` puts it, and the values they wrote that ``new`` does not write leave ``graph.values``."""
        for node in nodes:
            if node is not at:
                self.remove(node)
        self.replace(at, new)
        for node in nodes:
            for name in node.outputs:
                if name and name not in new.outputs:
                    self.graph.values.pop(name, None)

    def removed(self, node: Node) -> bool:
        """Whether ``node`` left the graph in this sweep (it stays in the node list until ``commit``)."""
        return id(node) in self._removed

    def commit(self) -> None:
        self.graph.nodes = [n for n in self.graph.nodes if id(n) not in self._removed]
        self._at = None


def _new_constant(graph: Graph, base: str, data: np.ndarray) -> str:
    data = np.ascontiguousarray(data)
    data.flags.writeable = False
    name = base if base not in graph.values else graph.fresh_name(base)
    graph.values[name] = Value(name, TensorSpec.of(data), data)
    return name


# -- eliminate_identity ---------------------------------------------------------------------------
def _dropout_is_identity(graph: Graph, node: Node, index: _Index) -> bool:
    training = _const(graph, node.inputs[2]) if len(node.inputs) > 2 else None
    if len(node.inputs) > 2 and node.inputs[2] and (training is None or bool(np.any(training))):
        return False  # training_mode unknown or on: it really drops
    return all(index.unused(o) for o in node.outputs[1:])  # mask output unused


# op -> whether a node of that op only forwards its first input to its first output
FORWARDS: dict[str, Callable] = {
    "Identity": lambda graph, node, index: True,  # y = x
    "Dropout": _dropout_is_identity,  # inference Dropout (no training_mode, mask unused): y = x
}


@register_pass("eliminate_identity")
def eliminate_identity(graph: Graph, ctx: PassContext) -> int:
    """Remove Identity and inference Dropout, rewiring their readers to the forwarded value."""
    index, count = _Index(graph), 0
    for node in graph.nodes:
        rule = FORWARDS.get(node.op_id)
        if rule is None or not rule(graph, node, index):
            continue
        x, y = node.inputs[0], node.outputs[0]
        if y not in graph.outputs:  # readers of y read x
            index.remove(node)
            index.redirect(y, x)
            for out in node.outputs:
                graph.values.pop(out, None)
        elif x in index.producers and x not in graph.outputs:  # y is a graph output: x is renamed y
            index.remove(node)
            for out in node.outputs[1:]:
                graph.values.pop(out, None)
            index.rename(index.producers[x], x, y)
        else:  # y copies a graph input, a constant or another graph output: keep the copy
            continue
        count += 1
    index.commit()
    return count


# -- fold_constants -------------------------------------------------------------------------------
def _stand_in(spec: TensorSpec | None) -> np.ndarray | None:
    """A zero-byte array with ``spec``'s static shape and dtype, for ops that read only the spec."""
    if spec is None or not spec.is_static:
        return None
    return np.broadcast_to(np.zeros((), spec.dtype), spec.shape)


# op -> which of its inputs it reads only the spec of (shape, dtype): folded when that is static
SPEC_READERS = {
    "Shape": 0,  # Shape(x) of a static x is a constant
    "Size": 0,  # Size(x) of a static x is a constant
}


# ops never folded although their inputs are constants: the constant operand is what a later pass
# needs (fuse_qdq runs int8 weights as int8, and folds the DequantizeLinear nodes it leaves itself)
NOT_FOLDED = ("DequantizeLinear",)


def _fold_inputs(graph: Graph, node: Node) -> list | None:
    """The node's inputs as host arrays (None for absent ones) if all are known, else None."""
    args = []
    for i, name in enumerate(node.inputs):
        data = _const(graph, name)
        if data is None and name and SPEC_READERS.get(node.op_id) == i:
            data = _stand_in(graph.spec(name))
        if data is None and name:
            return None
        args.append(data)
    return args


def fold_node(graph: Graph, node: Node, ctx: PassContext) -> bool:
    """Replace ``node``'s outputs by constants when it can be evaluated now; True if it was."""
    where = f"node {node.name!r} ({node.op_id})"
    if node.domain or node.op_id in NOT_FOLDED:  # a custom op may be stateful or random: only core ops are folded
        return False
    args = _fold_inputs(graph, node)
    if args is None:
        return False
    schema = get_schema(node.op, node.domain)
    attrs = _attrs(node)
    specs = [TensorSpec.of(a) if a is not None else None for a in args]
    try:  # re-infer with the now-known inputs: outputs of e.g. ConstantOfShape become static
        outs = infer_node(node, specs, [_const(graph, n) for n in node.inputs])
    except KernelkitError as exc:
        log.debug("fold_constants: %s not folded: %s", where, exc)
        return False
    limit = ctx.options.get("fold_max_bytes", FOLD_MAX_BYTES)
    if not isinstance(limit, int) or isinstance(limit, bool):
        raise ConfigError(f"options['fold_max_bytes'] must be an int (bytes), got {brief(limit)}")
    if any(not s.is_static or s.size * np.dtype(s.dtype).itemsize > limit for s in outs):
        return False
    if node.inputs and schema.dispatch_input < len(specs) and specs[schema.dispatch_input] is not None:
        dtype = specs[schema.dispatch_input].dtype
    else:
        dtype = outs[0].dtype
    entry = select_kernel(node.op_id, "cpu", dtype, ["reference"], specs, attrs)
    if entry is None:
        return False
    try:
        results = [np.asarray(r) for r in invoke(entry, node, attrs, args, specs)]
    except Exception as exc:  # the run would fail the same way; leave the node to report it there
        log.warning("fold_constants: %s not folded: reference kernel raised %s: %s", where,
                    type(exc).__name__, exc)
        return False
    if len(results) < len(node.outputs):
        return False
    for name, spec, data in zip(node.outputs, outs, results):
        if name and TensorSpec.of(data) != TensorSpec(spec.shape, spec.dtype):
            log.warning("fold_constants: %s not folded: kernel gave %s, shape rule says %s",
                        where, TensorSpec.of(data), spec)
            return False
    for name, data in zip(node.outputs, results):
        if not name:
            continue
        if not data.flags.owndata or any(data is a for a in args):
            data = data.copy()  # a folded constant never aliases another constant
        data.flags.writeable = False
        graph.values[name] = Value(name, TensorSpec.of(data), data)
    return True


@register_pass("fold_constants")
def fold_constants(graph: Graph, ctx: PassContext) -> int:
    """Evaluate nodes whose inputs are all constants (and Shape/Size of static specs) with the
    reference kernels, replacing them by constants (capped at options['fold_max_bytes'])."""
    folded = {id(node) for node in graph.nodes if fold_node(graph, node, ctx)}
    graph.nodes = [n for n in graph.nodes if id(n) not in folded]
    return len(folded)


# -- fold_batchnorm -------------------------------------------------------------------------------
def _bn_scale_shift(graph: Graph, bn: Node, index: _Index):
    """Per-channel (s, t) with BatchNormalization(x) = x * s + t, or None if not constant."""
    params = [_const(graph, n) for n in bn.inputs[1:5]]
    attrs = _attrs(bn)
    if len(params) < 4 or any(p is None for p in params):
        return None
    if attrs.get("training_mode", 0) or not all(index.unused(o) for o in bn.outputs[1:]):
        return None
    scale, bias, mean, var = (np.asarray(p, np.float64) for p in params)
    s = scale / np.sqrt(var + attrs["epsilon"])
    return s, bias - mean * s


def _fold_into_conv(graph: Graph, conv: Node, s: np.ndarray, t: np.ndarray) -> bool:
    w = _const(graph, conv.inputs[1])
    b = _const(graph, conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] else np.zeros(len(s))
    if w is None or b is None or w.shape[0] != s.size:
        return False
    shape = (-1,) + (1,) * (w.ndim - 1)
    new_w = (w.astype(np.float64) * s.reshape(shape)).astype(w.dtype)
    new_b = (b.astype(np.float64) * s + t).astype(w.dtype)
    conv.inputs = [conv.inputs[0], _new_constant(graph, f"{conv.name}_W_bn", new_w),
                   _new_constant(graph, f"{conv.name}_B_bn", new_b)]
    return True


def _fold_into_gemm(graph: Graph, gemm: Node, s: np.ndarray, t: np.ndarray) -> bool:
    attrs = _attrs(gemm)
    b = _const(graph, gemm.inputs[1])
    c = _const(graph, gemm.inputs[2]) if len(gemm.inputs) > 2 and gemm.inputs[2] else np.zeros(())
    if b is None or c is None or b.ndim != 2 or b.shape[0 if attrs["transB"] else 1] != s.size:
        return False
    new_b = b.astype(np.float64) * (s[:, None] if attrs["transB"] else s[None, :])
    new_c = s * (attrs["beta"] * c.astype(np.float64)) + t  # y*s + t with y = alpha*AB + beta*C
    gemm.inputs = [gemm.inputs[0], _new_constant(graph, f"{gemm.name}_B_bn", new_b.astype(b.dtype)),
                   _new_constant(graph, f"{gemm.name}_C_bn", new_c.astype(b.dtype))]
    gemm.attrs = {**gemm.attrs, "beta": 1.0}
    return True


# producer op -> folds a following BatchNormalization's y = x*s + t into the producer's constants
BN_FOLDERS: dict[str, Callable] = {
    "Conv": _fold_into_conv,  # W[m] *= s[m]; bias = bias*s + t
    "Gemm": _fold_into_gemm,  # columns of op(B) *= s; C = (beta*C)*s + t; beta = 1
}


@register_pass("fold_batchnorm")
def fold_batchnorm(graph: Graph, ctx: PassContext) -> int:
    """Fold inference BatchNormalization with constant parameters into a preceding Conv or Gemm."""
    index, count = _Index(graph), 0
    for bn in [n for n in graph.nodes if n.op_id == "BatchNormalization"]:
        producer = index.producers.get(bn.inputs[0])
        folder = BN_FOLDERS.get(producer.op_id) if producer is not None else None
        if folder is None or index.sole_reader(bn.inputs[0]) is not bn:
            continue
        if _attrs(producer).get("activation"):
            continue  # BN after a fused activation is not affine in the producer's output
        folded = _bn_scale_shift(graph, bn, index)
        if folded is None or not folder(graph, producer, *folded):
            continue
        index.splice(producer, bn)
        count += 1
    index.commit()
    return count


# -- fuse_residual --------------------------------------------------------------------------------
def _takes_z(graph: Graph, conv: Node, z: str, ctx: PassContext) -> bool:
    """Whether the kernel the session would pick for ``conv`` with the residual ``z`` accepts a
    ``z`` argument (kernels opt in by their signature, a class kernel by its ``compute``'s; the
    others never see a fused Z)."""
    import inspect

    specs = [graph.spec(i) if i else None for i in conv.inputs[:3]] + [None] * (3 - len(conv.inputs))
    specs.append(graph.spec(z))
    entry = _picked(ctx, conv.op_id, specs, _attrs(conv))
    if entry is None:
        return False
    target = getattr(entry.impl, "compute", None) if entry.is_class else entry.impl
    return target is not None and "z" in inspect.signature(target).parameters


def adds_over(graph: Graph, index: _Index, op: str):
    """Each Add of two inputs with an ``op`` node's output as an input that no other node reads (and that is
    not a graph output), as (the Add, that producer, the Add's other input), the Add's first input tried
    first: the pattern of fuse_residual (a Conv) and matmul_bias.fuse_matmul_residual (a MatMul). An Add
    that the caller fused (removed from ``index``) yields no second pair."""
    for add in [n for n in graph.nodes if n.op_id == "Add" and len(n.inputs) == 2]:
        for pos in (0, 1):
            if index.removed(add):
                break
            producer = index.producers.get(add.inputs[pos])
            if producer is not None and producer.op_id == op and index.sole_reader(add.inputs[pos]) is add:
                yield add, producer, add.inputs[1 - pos]


@register_pass("fuse_residual", after="fold_batchnorm")
def fuse_residual(graph: Graph, ctx: PassContext) -> int:
    """Add(Conv(x), r) -> Conv(x, Z=r): the residual add of ResNet-like blocks becomes the conv's
    epilogue (fuse_activation then takes a following Relu too), when the conv has no activation,
    r has the conv output's shape, and the session's Conv kernel accepts ``z``."""
    index, count = _Index(graph), 0
    for node, conv, other in adds_over(graph, index, "Conv"):
        if len(conv.inputs) > 3 and conv.inputs[3] or _attrs(conv)["activation"]:
            continue
        out, spec, ospec = graph.spec(node.outputs[0]), graph.spec(conv.outputs[0]), graph.spec(other)
        if ospec is None or spec != out or ospec != out or not _takes_z(graph, conv, other, ctx):
            continue
        conv.inputs = (list(conv.inputs) + ["", ""])[:3] + [other]
        index.readers.setdefault(other, []).append(conv)
        index.splice(conv, node)
        count += 1
    index.commit()
    return count


# -- fuse_activation ------------------------------------------------------------------------------
FUSION_PRODUCERS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
# ops that change only the shape, not the data: Act(View(x)) == View(Act(x)) for elementwise Act
VIEW_OPS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


def _activation_params(graph: Graph, node: Node, attrs: dict) -> tuple | None:
    """The fused ``activation_params`` for an activation node (the table in kernelkit/activation.py
    says how), or None if it cannot fuse (e.g. a Clip bound only known at run time)."""
    extra = [_const(graph, name) for name in node.inputs[1:]]
    if any(name and data is None for name, data in zip(node.inputs[1:], extra)):
        return None  # an input only known at run time cannot become an attribute
    return ACTIVATIONS[node.op_id].fuse(attrs, extra)


def _picked(ctx: PassContext, op: str, specs: list, attrs: dict):
    """The kernel entry the session would pick for an ``op`` node of input ``specs`` (the first's dtype)
    and ``attrs`` on its device, vendors and scope, or None; backends loaded first (plugins register
    their kernels there, and the session would see them)."""
    from ..backends import load_backends

    load_backends()
    return select_kernel(op, ctx.device, specs[0].dtype, ctx.vendors, specs, attrs, ctx.scope)


def _overridden(graph: Graph, node: Node, attrs: dict, ctx: PassContext) -> str | None:
    """The vendor of a non-built-in kernel the session would pick for ``node``, if any."""
    specs = [graph.spec(i) if i else None for i in node.inputs]
    entry = _picked(ctx, node.op_id, specs, attrs)
    if entry is None and ctx.vendors is not None:
        entry = select_kernel(node.op_id, ctx.device, specs[0].dtype, None, specs, attrs, ctx.scope)
    return entry.key.vendor if entry is not None and entry.key.vendor not in BUILTIN_VENDORS else None


@register_pass("fuse_activation")
def fuse_activation(graph: Graph, ctx: PassContext) -> int:
    """Merge an activation into the preceding Conv/ConvTranspose/Gemm/MatMul's ``activation``
    attribute, also across one reshape-like node between them (Gemm -> Reshape -> Gelu becomes
    Gemm(Gelu) -> Reshape), unless a user's kernel overrides that activation on the session's device."""
    index, count = _Index(graph), 0
    for node in [n for n in graph.nodes if n.op_id in ACTIVATIONS]:  # every fusable activation
        producer = index.producers.get(node.inputs[0])
        if index.sole_reader(node.inputs[0]) is not node:
            continue
        view = None  # an elementwise activation commutes with a reshape between it and the producer
        if producer is not None and producer.op_id in VIEW_OPS:
            view, producer = producer, index.producers.get(producer.inputs[0])
            if producer is None or index.sole_reader(view.inputs[0]) is not view:
                continue
        if producer is None or producer.op_id not in FUSION_PRODUCERS:
            continue
        if "activation" not in get_schema(producer.op).attrs or _attrs(producer)["activation"]:
            continue
        attrs = _attrs(node)
        params = _activation_params(graph, node, attrs)
        if params is None:
            continue
        vendor = _overridden(graph, node, attrs, ctx)
        if vendor is not None:
            note = (f"fuse_activation: node {node.name!r} ({node.op_id}) kept unfused after "
                    f"{producer.name!r}: vendor {vendor!r} overrides {node.op_id} on device {ctx.device!r}")
            if note not in ctx.notes:
                ctx.notes.append(note)
                log.info(note)
            continue
        producer.attrs = {**producer.attrs, "activation": node.op_id, "activation_params": params}
        index.splice(view or producer, node)
        count += 1
    index.commit()
    return count


# -- trim_dead ------------------------------------------------------------------------------------
@register_pass("trim_dead")
def trim_dead(graph: Graph, ctx: PassContext) -> int:
    """Remove nodes whose outputs reach no graph output, then values nothing refers to."""
    live = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(o in live for o in node.outputs if o):
            kept.append(node)
            live.update(i for i in node.inputs if i)
    removed = len(graph.nodes) - len(kept)
    graph.nodes = kept[::-1]
    used = live | set(graph.inputs) | {o for n in graph.nodes for o in n.outputs}
    dead = [name for name in graph.values if name not in used]
    for name in dead:  # constants nobody reads, and specs of values that no longer exist
        del graph.values[name]
    return removed + len(dead)


# -- float16_storage ------------------------------------------------------------------------------
_FLOAT16, _FLOAT32 = 10, 1  # ONNX TensorProto element types, Cast's ``to``


@register_pass("float16_storage")
def float16_storage(graph: Graph, ctx: PassContext) -> int:
    """With ``options={"float16": True}``: float32 weights and activations are stored as float16
    (half the bytes); the model's float32 inputs and outputs stay float32 through Cast nodes at the
    edges. Kernels compute in float (OpenCL: vload_half/vstore_half). Last in the pipeline, so
    fusions match the float32 graph; runs once (the edge Casts mark a converted graph)."""
    if not ctx.options.get("float16") or any(n.name.startswith("float16_storage/") for n in graph.nodes):
        return 0
    count = 0
    for value in graph.values.values():
        if value.data is not None and value.data.dtype == np.float32:
            value.data = np.ascontiguousarray(value.data.astype(np.float16))
            value.data.flags.writeable = False
            value.spec = TensorSpec.of(value.data)
            count += 1
    index = _Index(graph)
    head, tail = [], []
    for name in graph.inputs:
        if graph.spec(name).dtype == "float32" and index.readers.get(name):
            half = graph.fresh_name(f"{name}_f16")
            graph.values[half] = Value(half, TensorSpec(graph.spec(name).shape, "float16"))
            index.redirect(name, half)
            head.append(Node("Cast", [name], [half], {"to": _FLOAT16}, f"float16_storage/{name}", ""))
    for name in graph.outputs:
        producer = index.producers.get(name)
        if graph.spec(name).dtype == "float32" and producer is not None:
            half = graph.fresh_name(f"{name}_f16")
            graph.values[half] = Value(half, TensorSpec(graph.spec(name).shape, "float16"))
            producer.outputs = [half if o == name else o for o in producer.outputs]
            for reader in index.readers.get(name, []):
                reader.inputs = [half if i == name else i for i in reader.inputs]
            tail.append(Node("Cast", [half], [name], {"to": _FLOAT32}, f"float16_storage/{name}", ""))
    graph.nodes = head + graph.nodes + tail
    return count + len(head) + len(tail)
