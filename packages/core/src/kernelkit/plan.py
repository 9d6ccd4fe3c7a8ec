"""Compiling a Session: choose a kernel per node (with device and vendor fallback), prepare it,
give every value a slot, and lay the work out as a list of steps that ``executor.py`` walks.

The result, a :class:`Plan`, is what ``Session.plan`` shows: steps in order, each with its kernel
key, bound attributes, output specs, buffer slots and layout. Nothing here runs at inference
time; the executor never looks at the registry, a schema or a TensorSpec.
"""
from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .devices import Device
from .errors import FallbackWarning, KernelkitError, UnsupportedOpError
from .invoke import bind, kernel_attrs
from .ir import Graph, Node, TensorSpec
from .layout import node_layout, physical_shape
from .registry import (
    KernelEntry,
    KernelKey,
    KernelScope,
    candidates,
    describe_kernels,
    get_schema,
    normalize_attrs,
    select_kernel,
)
from .shape import infer_node

log = logging.getLogger("kernelkit.session")

NONE_SLOT = 0  # slot 0 always holds None: absent optional inputs read it


@dataclass(eq=False)
class Step:
    """One unit of work: a kernel call for a node, or a copy of a value between devices.

    ``input_slots``/``output_slots`` index the run's value list (``Plan.slots`` names them; an
    absent input reads slot 0, an absent output has slot None). ``attrs`` are the attributes
    bound into the call; ``scratch_bytes`` the scratch the kernel declared (static shapes)."""

    index: int
    kind: str  # "kernel", "stub" or "copy"
    name: str
    op: str
    key: KernelKey | None
    attrs: dict
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    input_slots: tuple[int, ...]
    output_slots: tuple[int | None, ...]
    output_specs: tuple[TensorSpec, ...]
    device: Device
    kernel: Any = None  # the function, or the prepared class-kernel instance
    takes_out: bool = False  # the kernel writes into a given ``out`` array
    scratch: Callable | None = None  # specs -> bytes of scratch (None: declares none)
    scratch_bytes: int = 0
    scratch_slot: int | None = None  # where the run's scratch array for this step sits
    node: Node | None = field(default=None, repr=False)
    call: Callable | None = field(default=None, repr=False)  # pre-bound: call(*inputs[, out=][, scratch=])
    free: tuple[int, ...] = ()  # slots dropped after this step (their last reader)
    lock: threading.Lock | None = field(default=None, repr=False)
    # a class kernel's call for its current state without the plan's shape check (and without the
    # kernel's start-up wrapper once it says it has settled): () -> (call, settled); None elsewhere
    direct: Callable | None = field(default=None, repr=False)
    quiet: bool = True  # the executor runs the step under NumPy's error state "ignore" (set once a run)

    @property
    def layout(self) -> tuple:
        """The layout of each output (None: the op's default, NCHW for images)."""
        return tuple(s.layout if s is not None else None for s in self.output_specs)

    @property
    def placement(self) -> tuple[str, str]:
        return (self.key.device, self.key.vendor) if self.key is not None else (self.device.name, "copy")


@dataclass
class Fallback:
    """A node placed elsewhere than asked: on another vendor of the device, or on the CPU."""

    node: str
    op: str
    placed: tuple[str, str]  # (device, vendor)
    reason: str
    copies: list[str] = field(default_factory=list)  # "value: cpu->gpu" per copy this placement added

    def as_dict(self) -> dict:
        return {"node": self.node, "op": self.op, "device": self.placed[0], "vendor": self.placed[1],
                "reason": self.reason, "copies": list(self.copies)}


@dataclass
class Plan:
    """A compiled session: ``steps`` in run order over ``slots`` (value names per slot)."""

    steps: list[Step]
    slots: list[str]
    slot_of: dict[str, int]  # host value name -> slot
    constants: dict[int, Any]  # slot -> constant (host array or device tensor)
    output_slots: dict[str, int]  # graph output -> slot
    static: bool  # every value's shape is known now (one memory plan serves every run)
    fallbacks: list[Fallback] = field(default_factory=list)

    def kernel_steps(self) -> list[Step]:
        return [s for s in self.steps if s.kind != "copy"]

    def table(self) -> list[dict]:
        """One row per step, for printing or inspection."""
        return [{"step": s.index, "kind": s.kind, "name": s.name, "op": s.op,
                 "kernel": tuple(s.key) if s.key else None, "attrs": s.attrs,
                 "inputs": dict(zip(s.inputs, s.input_slots)), "outputs": dict(zip(s.outputs, s.output_slots)),
                 "specs": [str(x) for x in s.output_specs], "layout": s.layout, "out": s.takes_out,
                 "scratch_bytes": s.scratch_bytes, "free": s.free} for s in self.steps]

    def __str__(self) -> str:
        lines = [f"Plan: {len(self.steps)} steps, {len(self.slots)} slots, "
                 f"{'static' if self.static else 'dynamic'} shapes"]
        for s in self.steps:
            key = "/".join(s.placement)
            ins = ", ".join(f"{n or '-'}@{i}" for n, i in zip(s.inputs, s.input_slots))
            outs = ", ".join(f"{n}@{i}:{spec}" for n, i, spec in zip(s.outputs, s.output_slots, s.output_specs))
            lines.append(f"  {s.index:4d} {s.op:<18} {s.name:<24} {key:<18} ({ins}) -> ({outs})"
                         + (" out=" if s.takes_out else ""))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Plan({len(self.steps)} steps, {len(self.slots)} slots)"


# -- compiling --------------------------------------------------------------------------------------
class Compiler:
    """Builds the Plan of one session (``compile_plan``). Candidate kernel lists are looked up once
    per (op, device, dtype, vendors), so selection stays linear in the number of nodes."""

    def __init__(self, graph: Graph, device: str, vendors, fallback: bool, options: dict, threads,
                 stub_ops, get_device: Callable[[str], Device], scope: KernelScope | None = None):
        self.graph, self.device_name, self.vendors, self.fallback = graph, device, vendors, fallback
        self.scope = scope
        self.options, self.threads, self.stub_ops, self.get_device = options, threads, stub_ops, get_device
        self._ranked: dict[tuple, list[KernelEntry]] = {}
        self.fallbacks: list[Fallback] = []

    def _select(self, op: str, device: str, dtype: str, vendors, specs, attrs, layout: str = "") -> KernelEntry | None:
        key = (op, device, dtype, vendors, layout)
        ranked = self._ranked.get(key)
        if ranked is None:
            ranked = self._ranked[key] = candidates(op, device, dtype, vendors, self.scope, layout)
        return select_kernel(op, device, dtype, vendors, specs, attrs, ranked=ranked)

    def kernel_step(self, node: Node, index: int) -> Step:
        graph = self.graph
        schema = get_schema(node.op, node.domain)
        where = f"node {node.name!r} ({node.op_id})"
        attrs = normalize_attrs(schema, node.attrs, where)
        specs = [graph.values[i].spec if i else None for i in node.inputs]
        if node.inputs and schema.dispatch_input < len(specs) and specs[schema.dispatch_input] is not None:
            dtype = specs[schema.dispatch_input].dtype
        else:
            dtype = graph.values[node.outputs[0]].spec.dtype
        out_specs = tuple(graph.values[o].spec if o else None for o in node.outputs)
        if node.op_id in self.stub_ops:
            return self._stub_step(node, index, dtype, attrs, out_specs)
        tries = [(self.device_name, self.vendors)]
        if self.fallback:
            if self.vendors is not None:
                tries.append((self.device_name, None))
            if self.device_name != "cpu":
                tries.append(("cpu", None))
        layout, attrs = node_layout(node.op_id, out_specs, specs, attrs, where)  # the layout pass's choice
        for device, vendors in tries:
            entry = self._select(node.op_id, device, dtype, vendors, specs, attrs, layout)
            if entry is None:
                continue
            if (device, vendors) != tries[0]:
                reason = (f"no {self.device_name} kernel for dtype {dtype}"
                          f"{' from vendors ' + str(list(self.vendors)) if self.vendors else ''}")
                log.warning(f"{where}: {reason}; falling back to ({entry.key.device}, {entry.key.vendor})")
                self.fallbacks.append(Fallback(node.name, node.op_id, (entry.key.device, entry.key.vendor), reason))
            step = Step(index, "kernel", node.name, node.op_id, entry.key, {}, tuple(node.inputs),
                        tuple(node.outputs), (), (), out_specs, self.get_device(device), node=node)
            self._bind(step, entry, attrs, specs)
            return step
        raise UnsupportedOpError(
            f"{where}: no kernel for device {self.device_name!r}, dtype {dtype}{', layout ' + layout if layout else ''}"
            f"{', vendors ' + str(list(self.vendors)) if self.vendors else ''}"
            f"{'' if self.fallback else ' (fallback=False)'}; {describe_kernels(node.op_id, self.scope)}"
        )

    def _stub_step(self, node: Node, index: int, dtype: str, attrs: dict, out_specs) -> Step:
        """A step that skips the computation: zeros of the output shapes inferred from the inputs."""
        values = self.graph.values
        consts = [values[i].data if i else None for i in node.inputs]

        def stub(*inputs):
            specs = out_specs
            if not all(s.is_static for s in specs):
                in_specs = [TensorSpec(tuple(x.shape), np.dtype(x.dtype).name) if x is not None else None
                            for x in inputs]
                specs = infer_node(node, in_specs, [c if c is not None else x for c, x in zip(consts, inputs)])
            return tuple(np.zeros(physical_shape(s.shape, s.layout), s.dtype) for s in specs)

        key = KernelKey(node.op_id, "cpu", "stub", dtype)
        return Step(index, "stub", node.name, node.op_id, key, {}, tuple(node.inputs), tuple(node.outputs),
                    (), (), out_specs, self.get_device("cpu"), kernel=stub, node=node, call=stub)

    def _bind(self, step: Step, entry: KernelEntry, attrs: dict, specs: list) -> None:
        """Bind the attributes the kernel takes; prepare a class kernel (and let it pre-bind its
        launch through ``bind(step)``)."""
        bound = kernel_attrs(entry, attrs, len(step.outputs))
        step.attrs = bound
        step.takes_out = entry.takes_out and sum(1 for o in step.outputs if o) == 1 and step.device.name == "cpu"
        if not entry.is_class:
            step.kernel = entry.impl
            if entry.scratch is not None:
                step.scratch = lambda in_specs, _f=entry.scratch, _a=dict(attrs): _f(in_specs, _a)
            step.call = bind(entry, step.node, attrs, step.device, specs)
            return
        kernel = bind(entry, step.node, attrs, step.device, specs, self.options, self.threads)
        kernel.context.vendors = self.vendors
        step.kernel = kernel
        if hasattr(kernel, "scratch_bytes") and callable(kernel.scratch_bytes):
            step.scratch = kernel.scratch_bytes
        step.lock = threading.Lock()
        step.call = _bind_class(step, kernel, specs, dynamic=not all(s is None or s.is_static for s in specs))

    def copy_step(self, index: int, value: str, spec, src: Device, dst: Device) -> Step:
        return Step(index, "copy", f"{value}:{src.name}->{dst.name}", "Copy", None, {}, (value,),
                    (f"{value}@{dst.name}",), (), (), (spec,), dst, call=_mover(src, dst))


def _spec_of(x) -> TensorSpec | None:
    return TensorSpec(tuple(x.shape), np.dtype(x.dtype).name) if x is not None else None


def _all_shapes(xs) -> tuple:
    return tuple((x.shape, x.dtype) if x is not None else None for x in xs)


def _shape_key(specs: list) -> Callable:
    """``key(xs)`` of a dynamic call's inputs: their shapes and dtypes, which decide whether the kernel
    must resize. Only inputs of symbolic shape can change between runs (a static spec's value has its
    shape and dtype every run), so where one input is symbolic the key looks at it alone (plus the
    input count): ~0.2 us a call against ~1.4 us for all eight inputs of a DynamicQuantizeMatMul."""
    varying = [i for i, s in enumerate(specs) if s is not None and not s.is_static]
    if len(varying) != 1:
        return _all_shapes
    (v,) = varying

    def key(xs):
        if len(xs) <= v:
            return _all_shapes(xs)
        x = xs[v]
        return len(xs), None if x is None else (x.shape, x.dtype)

    return key


def _bind_class(step: Step, kernel, specs: list, dynamic: bool) -> Callable:
    """The call of a prepared class kernel: its ``bind(step)`` callable if it has one, else
    ``execute``, serialised per node (kernels keep per-node state) unless the kernel says
    ``thread_safe = True``. With symbolic input shapes the
    call first checks the shapes and ``resize``s (and re-binds) when they changed.

    ``step.direct()`` gives the call for the kernel's current state without that check (the
    executor uses it for runs of input shapes the kernels are bound for already, see
    ``Executor``), and without the kernel's start-up wrapper once the bound call says it has
    settled: a bound call may carry ``settled()``, which returns the callable that replaces it
    from now on, or None while it still needs its wrapper (numba's tiered start). A settled call
    that says ``thread_safe = True`` (it keeps no per-call state) runs without the node's lock."""
    lock = step.lock
    binder = getattr(kernel, "bind", None)
    state = {"fn": binder(step) if callable(binder) else kernel.execute, "specs": specs, "key": None}
    safe = getattr(kernel, "thread_safe", False)  # the kernel keeps no per-call state: no lock

    def locked(fn, safe=safe):
        if safe:
            return fn

        def call(*xs, **kw):
            with lock:
                return fn(*xs, **kw)

        return call

    def direct():
        fn = state["fn"]
        settled = getattr(fn, "settled", None)
        plain = settled() if settled is not None else fn
        if plain is None:
            return locked(fn), False
        return locked(plain, safe or getattr(plain, "thread_safe", False)), True  # a call keeping no state

    step.direct = direct
    if not dynamic:
        return locked(state["fn"])

    key_of = _shape_key(specs)

    def call_dynamic(*xs, **kw):
        with lock:
            key = key_of(xs)
            if key != state["key"]:  # TensorSpecs only when something changed (they cost ~10 us)
                new = [_spec_of(x) for x in xs]
                if new != state["specs"]:
                    if hasattr(kernel, "resize"):
                        kernel.resize(new)
                    if callable(binder):
                        state["fn"] = binder(step)
                state["specs"], state["key"] = new, key
            return state["fn"](*xs, **kw)

    return call_dynamic


def _mover(src: Device, dst: Device) -> Callable:
    adopt = getattr(dst, "adopt", None)  # a device tensor fed through io_binding: copied on the device

    def move(tensor):
        if adopt is not None and not isinstance(tensor, np.ndarray):
            moved = adopt(tensor)
            if moved is not None:
                return moved
        host = src.download(tensor) if src.name != "cpu" else tensor
        return dst.upload(np.asarray(host, order="C")) if dst.name != "cpu" else host

    return move


def compile_plan(graph: Graph, device: str, vendors, fallback: bool, options: dict, threads, stub_ops,
                 get_device: Callable[[str], Device], scope: KernelScope | None = None) -> Plan:
    """Select and prepare a kernel per node, insert device copies at boundaries, assign slots and
    the slots each step frees. Linear in nodes + edges."""
    comp = Compiler(graph, device, vendors, fallback, options, threads, stub_ops, get_device, scope)
    kernel_steps = [comp.kernel_step(node, i) for i, node in enumerate(graph.nodes)]
    slots = [""]
    slot_of: dict[str, int] = {}

    def slot(name: str) -> int:  # the slot of a graph value
        if name not in slot_of:
            slot_of[name] = len(slots)
            slots.append(name)
        return slot_of[name]

    def new_slot(label: str) -> int:  # a device copy or a scratch array: not a graph value
        slots.append(label)
        return len(slots) - 1

    cpu = get_device("cpu")
    home: dict[str, Device] = {}  # value -> device it is produced on
    constants: dict[int, Any] = {}
    for name in graph.inputs:
        slot(name)
        home[name] = cpu
    for name, value in graph.values.items():
        if value.data is not None:
            constants[slot(name)] = value.data
            home[name] = cpu
    producer = {o: s.name for s in kernel_steps for o in s.outputs if o}
    fallback_of = {f.node: f for f in comp.fallbacks}
    steps: list[Step] = []
    copies: dict[tuple[str, str], int] = {}  # (value, device) -> slot of its copy there
    for step in kernel_steps:
        dev = step.device
        in_slots = []
        for name in step.inputs:
            if not name:
                in_slots.append(NONE_SLOT)
                continue
            src = home[name]
            if src is dev:
                in_slots.append(slot(name))
                continue
            there = copies.get((name, dev.name))
            if there is None:
                if graph.values[name].data is not None:  # constants go up once, at compile time
                    there = new_slot(f"{name}@{dev.name}")
                    constants[there] = dev.upload(np.asarray(graph.values[name].data, order="C"))
                else:
                    move = comp.copy_step(len(steps), name, graph.values[name].spec, src, dev)
                    there = new_slot(move.outputs[0])
                    move.input_slots, move.output_slots = (slot(name),), (there,)
                    steps.append(move)
                    note = f"{name}: {src.name}->{dev.name}"
                    for node_name in (step.name, producer.get(name)):
                        if node_name in fallback_of:
                            fallback_of[node_name].copies.append(note)
                            break
                copies[(name, dev.name)] = there
            in_slots.append(there)
        step.index = len(steps)
        step.input_slots = tuple(in_slots)
        step.output_slots = tuple(slot(o) if o else None for o in step.outputs)
        if step.scratch is not None:
            step.scratch_slot = new_slot(f"{step.name}:scratch")
        for o in step.outputs:
            if o:
                home[o] = dev
        steps.append(step)
    for name in graph.outputs:  # outputs produced off the host are read back by the executor
        slot(name)
    _assign_frees(steps, set(slot_of[n] for n in graph.outputs))
    static = all(v.spec is None or v.spec.is_static for v in graph.values.values())
    plan = Plan(steps, slots, slot_of, constants, {n: slot_of[n] for n in graph.outputs}, static, comp.fallbacks)
    if comp.fallbacks:
        names = ", ".join(f.node for f in comp.fallbacks[:5]) + (", ..." if len(comp.fallbacks) > 5 else "")
        copies_added = sum(len(f.copies) for f in comp.fallbacks)
        warnings.warn(FallbackWarning(
            f"graph {graph.name!r}: {len(comp.fallbacks)} node(s) fell back from device {device!r}"
            f"{' vendors ' + str(list(vendors)) if vendors else ''} ({names}), adding {copies_added} "
            f"host<->device copies; see Session.fallbacks()"), stacklevel=4)
    return plan


def _assign_frees(steps: list[Step], keep: set[int]) -> None:
    """Each slot read or written by a step is dropped after its last reader (graph outputs stay)."""
    last: dict[int, int] = {}
    for i, step in enumerate(steps):
        for s in step.input_slots:
            last[s] = i
        for s in step.output_slots:
            if s is not None:
                last.setdefault(s, i)
    free: dict[int, list[int]] = {}
    for s, i in last.items():
        if s != NONE_SLOT and s not in keep:
            free.setdefault(i, []).append(s)
    for i, step in enumerate(steps):
        step.free = tuple(free.get(i, ()))


# -- shapes for the memory plan ---------------------------------------------------------------------
def slot_specs(plan: Plan, values: dict) -> dict[int, TensorSpec | None]:
    """slot -> spec, from ``values`` (a graph's name -> Value); device copies take their source's."""
    specs = {slot: values[name].spec for name, slot in plan.slot_of.items() if name in values}
    for step in plan.steps:
        if step.kind == "copy":
            specs[step.output_slots[0]] = specs.get(step.input_slots[0])
    return specs


def concrete_specs(plan: Plan, graph: Graph, input_shapes: dict[str, tuple], options: dict) -> dict:
    """slot -> spec for one set of input shapes: shape inference on a copy of the graph with those
    shapes, after folding what they make constant (Shape -> Gather -> Concat -> Reshape chains), so
    that values whose size follows from the input shapes get static specs. Values that depend on
    data (NonZero, a Reshape to a computed tensor) stay symbolic; nothing is planned on failure."""
    from .passes import PassContext
    from .passes.builtin import fold_constants
    from .shape import infer_shapes

    g = graph.copy()
    try:
        infer_shapes(g, {name: TensorSpec(shape, g.values[name].spec.dtype, g.values[name].spec.layout)
                         for name, shape in input_shapes.items()})
        fold_constants(g, PassContext(options=dict(options)))
        infer_shapes(g)
    except KernelkitError as exc:
        log.debug("memory plan for input shapes %s: shape inference failed (%s); kernels allocate", input_shapes, exc)
        return {}
    return slot_specs(plan, g.values)


def scratch_sizes(plan: Plan, specs: dict) -> dict[int, int]:
    """step index -> bytes of scratch its kernel declares for these specs (0 when it cannot say)."""
    sizes = {}
    for step in plan.steps:
        if step.scratch is None:
            continue
        in_specs = [specs.get(s) if s else None for s in step.input_slots]
        if any(s is not None and not s.is_static for s in in_specs) or any(
                s is None and slot for s, slot in zip(in_specs, step.input_slots)):
            continue
        try:
            sizes[step.index] = int(step.scratch(in_specs) or 0)
        except Exception as exc:  # a scratch rule that fails: the kernel allocates its own
            log.debug("%s: scratch size failed: %s", step.name, exc)
    return sizes
