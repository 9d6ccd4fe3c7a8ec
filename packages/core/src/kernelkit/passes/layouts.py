"""The layout pass: choose each node's tensor layout from the kernels that will run it, and
re-lay values only where a producer and a reader disagree.

One sweep in graph order (linear in nodes + edges):

- a node with layout variants (kernels registered with ``layout=``) takes one when the session
  asks for that layout (``options={"layout": "NHWC"}``), when a variant outranks every
  default-layout kernel (priority), or when its input already arrives in a layout that a variant
  of the same vendor as the default choice takes (it follows, instead of converting back);
- a LAYOUT_FREE op (elementwise, Concat with its axis remapped) runs in the layout its full-size
  inputs share, so a chain of them never converts back and forth;
- everything else keeps the default layout.

Where a value is wanted in another layout than it has, a ``LayoutReorder`` node is inserted once
per (value, layout) and shared by every reader; constants (weights) are re-laid here, once, and
carried as new constants. Graph inputs and outputs stay in the user's default layout. Specs keep
their logical shapes and name their layout; the plan selects the variant from it.
"""
from __future__ import annotations

import numpy as np

from ..errors import ConfigError, KernelkitError, ShapeError
from ..ir import Graph, Node, TensorSpec, Value
from ..layout import IMAGE_LAYOUTS, LAYOUT_FREE, is_plain, layout_attrs, parse, physical_shape, reorder
from ..registry import candidates, get_schema, kernels, normalize_attrs
from . import PassContext, register_pass

KEEP = object()  # an input a layout-free node reads as it is (a broadcast scalar)


def _norm(name: str | None) -> str:
    return "" if is_plain(name) else name


class _Planner:
    def __init__(self, graph: Graph, ctx: PassContext, prefer: str | None):
        self.graph, self.ctx, self.prefer = graph, ctx, prefer
        self.laid: dict[str, str] = {}  # value -> its layout ("" default)
        self.relaid: dict[tuple[str, str], str] = {}  # (value, layout) -> the value holding it so
        self.taken = set(graph.values) | {n.name for n in graph.nodes}
        self.nodes: list[Node] = []
        self.ranked: dict[tuple, list] = {}  # (op, dtype) -> candidates of every layout
        self.count = 0

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.taken:
            name, i = f"{base}_{i}", i + 1
        self.taken.add(name)
        return name

    # -- choosing -------------------------------------------------------------------------------
    def choose(self, node: Node):
        """(layout, layouts of the inputs, of the outputs) for ``node``; None: the default."""
        values = self.graph.values
        specs = [values[i].spec if i else None for i in node.inputs]
        outs = [values[o].spec if o else None for o in node.outputs]
        if not outs or outs[0] is None or outs[0].rank != 4:
            return None
        schema = get_schema(node.op, node.domain)
        attrs = normalize_attrs(schema, node.attrs, f"node {node.name!r} ({node.op_id})")
        if node.op_id in LAYOUT_FREE:
            return self._follow(node, specs, outs, attrs)
        if sum(1 for o in node.outputs if o) > 1:
            return None  # optional outputs (MaxPool's Indices) keep their meaning only in the default
        if specs and schema.dispatch_input < len(specs) and specs[schema.dispatch_input] is not None:
            dtype = specs[schema.dispatch_input].dtype
        else:
            dtype = outs[0].dtype
        key = (node.op_id, dtype)
        if key not in self.ranked:
            self.ranked[key] = candidates(node.op_id, self.ctx.device, dtype, self.ctx.vendors, self.ctx.scope, None)
        if not any(e.key.layout for e in self.ranked[key]):
            return None  # no layout variant: the default
        given = max((i + 1 for i, name in enumerate(node.inputs) if name), default=0)
        ranked = [e for e in self.ranked[key] if (e.supports is None or _accepts(e, specs, attrs))
                  and (not e.key.layout or _takes(e, given))]
        default = next((e for e in ranked if not e.key.layout), None)
        variants = [e for e in ranked if e.key.layout]
        arriving = self.laid.get(node.inputs[0], "") if node.inputs and node.inputs[0] else ""
        pick = next((e for e in variants if e.key.layout == self.prefer), None) if self.prefer else None
        if pick is None and variants and (default is None or ranked.index(variants[0]) < ranked.index(default)):
            pick = variants[0]  # registered to outrank the default layout's kernels
        if pick is None and arriving:
            pick = next((e for e in variants if e.key.layout == arriving
                         and (default is None or e.key.vendor == default.key.vendor)), None)
        if pick is None:
            return None
        ins, out_layouts = pick.layouts(schema, specs, attrs)
        out_layouts = [lay if s is not None and (s.rank == 4 or lay != pick.key.layout) else None
                       for lay, s in zip(out_layouts, outs)]
        if not _fits(specs, ins) or not _fits(outs, out_layouts):
            return None
        return pick.key.layout, ins, out_layouts

    def _follow(self, node: Node, specs, outs, attrs):
        """A layout-free node: the layout its full-size inputs share, if they share one."""
        if node.op_id == "LayoutReorder":
            return None
        full = [i for i, s in enumerate(specs) if s is not None and not _scalar(s)]
        moving = [node.inputs[i] for i in full if self.graph.values[node.inputs[i]].data is None]
        have = {self.laid.get(v, "") for v in moving}
        laid = have - {""}
        if len(laid) != 1:
            return None
        name = laid.pop()
        if "" in have and any(self.laid.get(v, "") == "" and (v, name) not in self.relaid for v in moving):
            return None  # a default-layout input without a copy in the layout yet: stay (no new reorder)
        blocked = parse(name).block("C")
        for i in full:  # a broadcast operand re-lays alike if it has the rank; a blocked axis must be whole
            s, o = specs[i].shape, outs[0].shape
            if node.op_id != "Concat" and (len(s) != 4 or any(d != e and d != 1 for d, e in zip(s, o))
                                           or (blocked and s[1] != o[1])):
                return None
        if layout_attrs(node.op_id, attrs, name, [s.shape for s in specs if s is not None]) is None:
            return None
        ins = [name if i in full else KEEP for i in range(len(specs))]
        out_layouts = [name if s is not None and s.rank == 4 else None for s in outs]
        if not _fits(specs, ins) or not _fits(outs, out_layouts):
            return None
        return name, ins, out_layouts

    # -- rewriting ------------------------------------------------------------------------------
    def wanted(self, name: str, want: str | None) -> str:
        """The value holding ``name`` in layout ``want``: itself, or a re-laid copy made once."""
        if not name:
            return name
        value = self.graph.values[name]
        have, want = self.laid.get(name, _norm(value.spec.layout) if value.data is not None else ""), _norm(want)
        if have == want:
            return name
        if (name, want) in self.relaid:
            return self.relaid[(name, want)]
        src = have or parse(want).plain
        dst = want or parse(have).plain
        spec = TensorSpec(value.spec.shape, value.spec.dtype, want or None)
        new = self.fresh(f"{name}_{dst}")
        if value.data is not None:  # a weight: re-laid now, once
            data = reorder(np.asarray(value.data), src, dst)
            data.flags.writeable = False
            self.graph.values[new] = Value(new, spec, data)
        else:
            self.graph.values[new] = Value(new, spec)
            self.nodes.append(Node("LayoutReorder", [name], [new], {"src": src, "dst": dst},
                                   self.fresh(f"reorder_{name}_{dst}")))
        self.laid[new] = want
        self.relaid[(name, want)] = new
        self.count += 1
        return new

    def run(self) -> int:
        for node in self.graph.nodes:
            choice = self.choose(node)
            if choice is None:
                node.inputs = [self.wanted(i, "") for i in node.inputs]
                self.nodes.append(node)
                continue
            name, ins, out_layouts = choice
            node.inputs = [i if want is KEEP else self.wanted(i, want) for i, want in zip(node.inputs, ins)]
            for out, lay in zip(node.outputs, out_layouts):
                if out and _norm(lay):
                    spec = self.graph.values[out].spec
                    self.graph.values[out].spec = TensorSpec(spec.shape, spec.dtype, lay)
                    self.laid[out] = lay
            self.nodes.append(node)
            self.count += 1
        self._plain_outputs()
        self.graph.nodes = self.nodes
        read = {i for n in self.nodes for i in n.inputs} | set(self.graph.outputs)
        for name, _ in self.relaid:  # a weight now read only re-laid is dropped (weights_bytes counts it once)
            value = self.graph.values.get(name)
            if name not in read and value is not None and value.data is not None:
                del self.graph.values[name]
        return self.count

    def _plain_outputs(self) -> None:
        """Graph outputs leave in the default layout: the producer writes a laid-out twin that a
        reorder turns back into the output's name, so that names never change."""
        for name in self.graph.outputs:
            lay = self.laid.get(name)
            if not lay:
                continue
            value = self.graph.values[name]
            twin = self.fresh(f"{name}_{lay}")
            self.graph.values[twin] = Value(twin, value.spec)
            for node in self.nodes:
                node.inputs = [twin if i == name else i for i in node.inputs]
                node.outputs = [twin if o == name else o for o in node.outputs]
            value.spec = TensorSpec(value.spec.shape, value.spec.dtype)
            self.laid[twin], self.laid[name] = lay, ""
            plain = self.relaid.get((name, ""))
            if plain is not None:  # a reader wanted it plain already: that reorder writes the output
                for node in self.nodes:
                    node.inputs = [name if i == plain else i for i in node.inputs]
                    node.outputs = [name if o == plain else o for o in node.outputs]
                del self.graph.values[plain]
                continue
            self.nodes.append(Node("LayoutReorder", [twin], [name], {"src": lay, "dst": parse(lay).plain},
                                   self.fresh(f"reorder_{name}")))
            self.count += 1


def _scalar(spec: TensorSpec) -> bool:
    return all(d == 1 for d in spec.shape)


def _accepts(entry, specs, attrs) -> bool:
    try:
        return bool(entry.supports(specs, attrs))
    except KernelkitError:
        return False


def _takes(entry, n_inputs: int) -> bool:
    """Whether a variant's callable takes ``n_inputs`` positional inputs: a Conv whose residual was
    fused (pass fuse_residual, Z as a 4th input) keeps the default layout unless the variant takes Z."""
    import inspect

    fn = entry.impl.execute if entry.is_class else entry.impl
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return True
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"]
    return len(positional) >= n_inputs


def _fits(specs, layouts) -> bool:
    """Whether each spec can be held in its layout (rank, blocked axes dividing evenly)."""
    for spec, lay in zip(specs, layouts):
        if spec is None or lay is KEEP or not _norm(lay):
            continue
        try:
            physical_shape(spec.shape, lay)
        except ShapeError:
            return False
    return True


@register_pass("layouts", final=True)
def assign_layouts(graph: Graph, ctx: PassContext) -> int:
    """Choose layouts per node from the kernels that want them; re-lay only at boundaries."""
    prefer = ctx.options.get("layout")
    if prefer is not None and (not isinstance(prefer, str) or _norm(prefer) not in IMAGE_LAYOUTS):
        raise ConfigError(f"option layout must be one of {list(IMAGE_LAYOUTS)}, got {prefer!r:.40}")
    prefer = _norm(prefer) or None
    if any(n.op_id == "LayoutReorder" for n in graph.nodes):
        return 0  # laid out already
    scoped = list(ctx.scope.kernels) if ctx.scope is not None else []
    variant_ops = {k.op for k in [*kernels(device=ctx.device), *scoped] if k.layout and k.device == ctx.device
                   and (ctx.vendors is None or k.vendor in ctx.vendors)}
    if not any(n.op_id in variant_ops for n in graph.nodes):
        return 0  # no node has a layout variant here: nothing to choose (one set lookup per node)
    if not candidates("LayoutReorder", ctx.device, "float32", ctx.vendors, ctx.scope):
        return 0  # no reorder kernel here (vendors or device): every node keeps the default layout
    planner = _Planner(graph, ctx, prefer)
    return planner.run()
