"""Session: compile a model for a device, then run it.

Building a session = shape inference -> graph passes -> kernel selection per node (with device
fallback) -> kernels' ``prepare`` -> memory plan (each intermediate is released after its last
reader). ``run`` follows onnxruntime's signature.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .backends import run_session_hooks
from .devices import Device, create_device
from .errors import (
    ConfigError,
    InputError,
    KernelBuildError,
    KernelExecutionError,
    KernelkitError,
    ModelFormatError,
    UnsupportedOpError,
    brief,
)
from .limits import MAX_THREADS
from .ir import Graph, Model, Node, TensorSpec
from .passes import PassContext, run_passes
from .registry import KernelEntry, KernelKey, describe_kernels, get_schema, normalize_attrs, select_kernel
from .shape import infer_node, infer_shapes

log = logging.getLogger("kernelkit.session")


@dataclass
class KernelContext:
    """Handed to class kernels (as ``self.context``) before ``prepare``: the node, the device
    object (for OpenCL: context, queue, events) and the session options."""

    node: Node
    device: Device
    options: dict = field(default_factory=dict)
    threads: int | None = None


@dataclass
class NodeInfo:
    """What ``Session.get_inputs()``/``get_outputs()`` return, shaped like onnxruntime's NodeArg."""

    name: str
    shape: tuple
    type: str

    @property
    def dtype(self) -> str:
        return self.type


@dataclass
class _Step:
    node: Node
    entry: KernelEntry
    device: Device
    attrs: dict
    call: Any = None          # callable(*inputs) -> outputs
    lock: threading.Lock | None = None
    free_after: list[str] = field(default_factory=list)
    last_specs: list | None = None
    last_key: tuple | None = None  # (shape, dtype) per input of the last call: a cheap change check


def _load_model(model_or_path) -> Model:
    if isinstance(model_or_path, Model):
        return model_or_path
    if not isinstance(model_or_path, (str, os.PathLike)):
        raise ModelFormatError(f"expected a Model or a path, got {type(model_or_path).__name__}")
    path = Path(model_or_path)
    if path.suffix.lower() == ".onnx":
        try:
            from kernelkit_converters.onnx import convert
        except ImportError as exc:
            raise UnsupportedOpError(
                f"{path}: reading .onnx files needs the converters package: pip install '.[converters]'"
            ) from exc
        return convert(path)
    from .io import load

    return load(path)


def _names(value) -> bool:
    return not isinstance(value, (str, bytes)) and isinstance(value, (list, tuple, set, frozenset)) \
        and all(isinstance(v, str) for v in value)


def _check_settings(vendors, threads, passes, options, stub_ops) -> None:
    """Session arguments of the wrong type are a ConfigError, not a crash or a silent surprise
    (``vendors="numba"`` would otherwise be read as the vendors 'n', 'u', 'm', 'b', 'a')."""
    if vendors is not None and not _names(vendors):
        raise ConfigError(f"vendors must be a list of vendor names or None, got {vendors!r:.60}")
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool)
                                or not 1 <= threads <= MAX_THREADS):
        raise ConfigError(f"threads must be an int >= 1 (at most {MAX_THREADS}) or None, got {brief(threads)}")
    if passes is not None and not isinstance(passes, bool) and not _names(passes):
        raise ConfigError(f"passes must be None, True, False or a list of pass names, got {passes!r:.60}")
    if options is not None and not isinstance(options, dict):
        raise ConfigError(f"options must be a dict, got {type(options).__name__}")
    if not _names(stub_ops):
        raise ConfigError(f"stub_ops must be a list of op names, got {stub_ops!r:.60}")


class Session:
    """A compiled model bound to a device.

    ``vendors`` lists preferred kernel vendors in order (None: highest priority first);
    ``fallback`` lets a node the device (or the vendor list) cannot run fall back to any CPU
    kernel with a logged warning; ``passes`` selects graph passes (None: defaults, False: none,
    or a list of names); ``options`` go to devices and class kernels (e.g. ``opencl_device``).
    ``stub_ops`` names ops (``"Op"`` or ``"domain::Op"``) to run as infinitely fast stubs that
    return zeros of the inferred output shape: estimate a model's speed before a kernel exists.
    """

    def __init__(self, model_or_path, device: str = "cpu", vendors=None, fallback: bool = True,
                 threads: int | None = None, profile: bool = False, passes=None,
                 options: dict | None = None, stub_ops=()):
        _check_settings(vendors, threads, passes, options, stub_ops)
        self.model = _load_model(model_or_path).copy()
        self.device_name = device
        self.vendors = tuple(vendors) if vendors is not None else None
        self.fallback = fallback
        self.threads = threads
        self.options = dict(options or {})
        if threads is not None:
            self.options.setdefault("threads", threads)
        self._profile = profile
        self._prof: dict[str, list] = {}
        self._prof_lock = threading.Lock()
        self._devices: dict[str, Device] = {}
        self._device_constants: dict[tuple[str, str], Any] = {}
        self._pool: ThreadPoolExecutor | None = None
        self.fallbacks: list[tuple[str, str]] = []
        self.stub_ops = frozenset(stub_ops)
        run_session_hooks(device, self.options)  # backends act on their options (e.g. custom kernels)
        graph = self.model.graph
        for value in graph.values.values():  # kernels and callers get read-only views of constants
            if value.data is not None and value.data.flags.writeable:
                value.data = value.data.view()
                value.data.flags.writeable = False
        graph.toposort()  # a loaded graph need not list its nodes in order
        infer_shapes(graph)
        pass_ctx = PassContext(device, self.vendors, self.options)
        self.passes_fired = run_passes(graph, passes, pass_ctx)
        self.pass_notes: list[str] = pass_ctx.notes  # e.g. fusions skipped for a user's kernel
        graph.toposort()
        infer_shapes(graph)
        self.graph: Graph = graph
        self._device(device)  # a device asked for by name must exist, even if fallback would avoid it
        self._steps = [self._select(node) for node in graph.nodes]
        for step in self._steps:
            self._bind(step)
        self._plan()

    # -- building ------------------------------------------------------------------------------
    def _device(self, name: str) -> Device:
        if name not in self._devices:
            self._devices[name] = create_device(name, self.options)
        return self._devices[name]

    def _select(self, node: Node) -> _Step:
        schema = get_schema(node.op, node.domain)
        where = f"node {node.name!r} ({node.op_id})"
        attrs = normalize_attrs(schema, node.attrs, where)
        specs = [self.graph.values[i].spec if i else None for i in node.inputs]
        if node.inputs and schema.dispatch_input < len(specs) and specs[schema.dispatch_input] is not None:
            dtype = specs[schema.dispatch_input].dtype
        else:
            dtype = self.graph.values[node.outputs[0]].spec.dtype
        if node.op_id in self.stub_ops:
            return self._stub_step(node, dtype, attrs)
        tries = [(self.device_name, self.vendors)]
        if self.fallback:
            if self.vendors is not None:
                tries.append((self.device_name, None))
            if self.device_name != "cpu":
                tries.append(("cpu", None))
        for device, vendors in tries:
            entry = select_kernel(node.op_id, device, dtype, vendors, specs, attrs)
            if entry is not None:
                if (device, vendors) != tries[0]:
                    msg = (f"{where}: no {self.device_name} kernel for dtype {dtype}"
                           f"{' from vendors ' + str(list(self.vendors)) if self.vendors else ''}; "
                           f"falling back to ({entry.key.device}, {entry.key.vendor})")
                    log.warning(msg)
                    self.fallbacks.append((node.name, msg))
                return _Step(node, entry, self._device(device), attrs)
        raise UnsupportedOpError(
            f"{where}: no kernel for device {self.device_name!r}, dtype {dtype}"
            f"{', vendors ' + str(list(self.vendors)) if self.vendors else ''}"
            f"{'' if self.fallback else ' (fallback=False)'}; {describe_kernels(node.op_id)}"
        )

    def _stub_step(self, node: Node, dtype: str, attrs: dict) -> _Step:
        """A step that skips the computation: zeros of the output shapes inferred from the inputs."""
        values = self.graph.values
        out_specs = [values[o].spec for o in node.outputs]
        consts = [values[i].data if i else None for i in node.inputs]

        def stub(*inputs):
            specs = out_specs
            if not all(s.is_static for s in specs):
                in_specs = [TensorSpec(tuple(x.shape), np.dtype(x.dtype).name) if x is not None else None
                            for x in inputs]
                specs = infer_node(node, in_specs, [c if c is not None else x for c, x in zip(consts, inputs)])
            return tuple(np.zeros(s.shape, s.dtype) for s in specs)

        entry = KernelEntry(KernelKey(node.op_id, "cpu", "stub", dtype), stub, attr_names=frozenset())
        return _Step(node, entry, self._device("cpu"), attrs)

    def _bind(self, step: _Step) -> None:
        entry, attrs = step.entry, step.attrs
        if entry.attr_names is not None:
            attrs = {k: v for k, v in attrs.items() if k in entry.attr_names}
            if "output_count" in entry.attr_names:  # kernels may skip optional outputs nobody reads
                attrs["output_count"] = len(step.node.outputs)
        if not entry.is_class:
            fn = entry.impl
            step.call = (lambda *xs, _f=fn, _a=attrs: _f(*xs, **_a)) if attrs else fn
            return
        where = f"node {step.node.name!r} ({step.node.op_id})"
        kernel = entry.impl()
        kernel.context = KernelContext(step.node, step.device, self.options, self.threads)
        specs = [self.graph.values[i].spec if i else None for i in step.node.inputs]
        try:
            kernel.prepare(specs, dict(step.attrs))
        except KernelkitError:
            raise
        except Exception as exc:
            raise KernelBuildError(f"{where}: prepare failed in {entry.key}: {type(exc).__name__}: {exc}") from exc
        step.last_specs = specs
        step.lock = threading.Lock()
        step.call = kernel

    def _plan(self) -> None:
        """Memory plan: release every intermediate right after its last reader."""
        keep = set(self.graph.outputs) | set(self.graph.inputs) | set(self.graph.constants)
        last: dict[str, int] = {}
        for i, step in enumerate(self._steps):
            for name in step.node.inputs:
                if name:
                    last[name] = i
            for name in step.node.outputs:
                last.setdefault(name, i)
        for name, i in last.items():
            if name not in keep:
                self._steps[i].free_after.append(name)

    # -- introspection -------------------------------------------------------------------------
    def _info(self, names) -> list[NodeInfo]:
        return [NodeInfo(n, self.graph.values[n].spec.shape, self.graph.values[n].spec.dtype) for n in names]

    def get_inputs(self) -> list[NodeInfo]:
        return self._info(self.graph.inputs)

    def get_outputs(self) -> list[NodeInfo]:
        return self._info(self.graph.outputs)

    def placement(self) -> dict[str, tuple[str, str]]:
        """Node name -> (device, vendor) of the kernel chosen for it."""
        return {s.node.name: (s.entry.key.device, s.entry.key.vendor) for s in self._steps}

    def devices(self) -> dict[str, str]:
        return {name: dev.describe() for name, dev in self._devices.items()}

    def profile(self) -> list[dict]:
        """Per-node timings collected when ``profile=True``: node, op, device, vendor, calls, ms."""
        with self._prof_lock:
            rows = []
            for step in self._steps:
                calls, total = self._prof.get(step.node.name, (0, 0.0))
                rows.append({"node": step.node.name, "op": step.node.op_id, "device": step.entry.key.device,
                             "vendor": step.entry.key.vendor, "calls": calls, "total_ms": total * 1e3,
                             "mean_ms": total * 1e3 / calls if calls else 0.0})
            return rows

    # -- running -------------------------------------------------------------------------------
    def _check_feeds(self, feeds: dict) -> dict[str, np.ndarray]:
        if not isinstance(feeds, dict):
            raise InputError(f"feeds must be a dict of input name -> array, got {type(feeds).__name__}")
        expected = self.graph.inputs
        unknown = sorted(set(feeds) - set(expected), key=repr)  # names may be of any (mixed) type
        missing = [n for n in expected if n not in feeds]
        if unknown or missing:
            raise InputError(f"model {self.graph.name!r} expects inputs {expected}; "
                             f"{'unknown: ' + str(unknown) + ' ' if unknown else ''}"
                             f"{'missing: ' + str(missing) if missing else ''}".strip())
        symbols: dict[str, int] = {}
        out = {}
        for name in expected:
            spec = self.graph.values[name].spec
            try:
                arr = np.asarray(feeds[name])
            except Exception as exc:
                raise InputError(f"input {name!r}: cannot be read as an array: {exc}") from exc
            if arr.dtype.name != spec.dtype:
                raise InputError(f"input {name!r}: expected dtype {spec.dtype}, got {arr.dtype.name}")
            if not arr.dtype.isnative:  # e.g. big-endian float32: kernels and outputs use native order
                arr = arr.astype(arr.dtype.newbyteorder("="))
            if arr.ndim != spec.rank:
                raise InputError(f"input {name!r}: expected rank {spec.rank} {spec.shape}, got shape {arr.shape}")
            for axis, (want, got) in enumerate(zip(spec.shape, arr.shape)):
                if isinstance(want, str):
                    if symbols.setdefault(want, got) != got:
                        raise InputError(f"input {name!r}: dimension {axis} ({want!r}) is {got}, but {want!r} "
                                         f"was bound to {symbols[want]} by another input")
                elif want != got:
                    raise InputError(f"input {name!r}: expected shape {spec.shape}, got {arr.shape}")
            view = arr.view()
            view.flags.writeable = False  # kernels must never write into the caller's array
            out[name] = view
        return out

    def _constant_on(self, name: str, device: Device) -> Any:
        data = self.graph.values[name].data
        if device.name == "cpu":
            return data
        key = (device.name, name)
        if key not in self._device_constants:
            self._device_constants[key] = device.upload(np.asarray(data, order="C"))  # keeps 0-d shapes
        return self._device_constants[key]

    def _execute(self, step: _Step, args: list) -> tuple:
        if step.lock is None:
            result = step.call(*args)
        else:
            with step.lock:
                key = tuple((a.shape, a.dtype) if a is not None else None for a in args)
                if key != step.last_key:  # TensorSpecs only when something changed (they cost ~10 us)
                    specs = [TensorSpec(tuple(a.shape), np.dtype(a.dtype).name) if a is not None else None
                             for a in args]
                    if specs != step.last_specs and hasattr(step.call, "resize"):
                        step.call.resize(specs)
                    step.last_specs, step.last_key = specs, key
                result = step.call.execute(*args)
        return result if isinstance(result, (tuple, list)) else (result,)

    @staticmethod
    def _move(tensor, src: Device, dst: Device):
        host = src.download(tensor) if src.name != "cpu" else tensor
        return dst.upload(np.asarray(host, order="C")) if dst.name != "cpu" else host

    def _dispatch(self, feeds: dict[str, np.ndarray], wanted: list[str]) -> dict[str, tuple[Any, Device]]:
        env: dict[str, tuple[Any, Device]] = {n: (a, self._device("cpu")) for n, a in feeds.items()}
        constants = self.graph.values
        moved: dict[tuple[str, str], Any] = {}  # (value, device) -> copy made this run
        for step in self._steps:
            node, dev = step.node, step.device
            args = []
            for name in node.inputs:
                if not name:
                    args.append(None)
                elif name in env:
                    tensor, where = env[name]
                    if where is not dev:
                        tensor = moved.get((name, dev.name))
                        if tensor is None:
                            tensor = self._move(env[name][0], where, dev)
                            moved[(name, dev.name)] = tensor
                    args.append(tensor)
                else:
                    args.append(self._constant_on(name, dev) if constants[name].data is not None else None)
            t0 = time.perf_counter() if self._profile else 0.0
            try:
                outs = self._execute(step, args)
            except KernelExecutionError:
                raise
            except Exception as exc:  # a kernel's own check (ShapeError...) too: one class on every device
                shapes = [tuple(a.shape) if a is not None else None for a in args]
                raise KernelExecutionError(
                    f"node {node.name!r} ({node.op_id}) failed in kernel {tuple(step.entry.key)} "
                    f"with input shapes {shapes}: {type(exc).__name__}: {exc}") from exc
            if self._profile:
                dt = time.perf_counter() - t0
                with self._prof_lock:
                    calls, total = self._prof.get(node.name, (0, 0.0))
                    self._prof[node.name] = (calls + 1, total + dt)
            if len(outs) < sum(1 for o in node.outputs if o):
                raise KernelExecutionError(f"node {node.name!r} ({node.op_id}): kernel {tuple(step.entry.key)} "
                                           f"returned {len(outs)} outputs, node has {len(node.outputs)}")
            for name, value in zip(node.outputs, outs):
                if name:
                    env[name] = (value, dev)
            for name in step.free_after:
                if name not in wanted:
                    env.pop(name, None)
                    for dev_name in self._devices:
                        moved.pop((name, dev_name), None)
        return env

    def _resolve_outputs(self, output_names) -> list[str]:
        if output_names is None:
            return list(self.graph.outputs)
        if isinstance(output_names, (str, bytes)):
            raise InputError("output_names must be a list of names or None, not a string")
        try:
            names = list(output_names)
        except TypeError:
            raise InputError(f"output_names must be a list of names or None, "
                             f"got {type(output_names).__name__}") from None
        bad = [n for n in names if n not in self.graph.outputs]
        if bad:
            raise InputError(f"unknown output(s) {bad}; model outputs are {self.graph.outputs}")
        return names

    def _collect(self, env, feeds, names) -> list[np.ndarray]:
        results = []
        for name in names:
            if name in env:
                tensor, where = env[name]
                arr = where.download(tensor) if where.name != "cpu" else tensor
            else:  # an output that is a constant of the graph
                arr = self.graph.values[name].data
            arr = np.asarray(arr)
            if (not arr.flags.owndata or not arr.flags.writeable or name in feeds
                    or any(np.may_share_memory(arr, r) for r in results)):
                arr = arr.copy()  # fresh arrays only: never a view of a feed, constant or each other
            results.append(arr)
        return results

    def run(self, output_names, input_feed: dict, run_options=None) -> list[np.ndarray]:
        """Run the model; returns fresh arrays for ``output_names`` (None: all outputs)."""
        names = self._resolve_outputs(output_names)
        feeds = self._check_feeds(input_feed)
        env = self._dispatch(feeds, names)
        return self._collect(env, feeds, names)

    def run_async(self, output_names, input_feed: dict) -> Future:
        """Start a run and return a ``concurrent.futures.Future`` of its outputs."""
        names = self._resolve_outputs(output_names)
        feeds = self._check_feeds(input_feed)
        with self._prof_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=max(1, self.threads or os.cpu_count() or 1),
                                                thread_name_prefix="kernelkit-run")
        devices = self._devices.values()
        if all(d.asynchronous or d.name == "cpu" for d in devices) and any(d.asynchronous for d in devices):
            # asynchronous devices (OpenCL) only enqueue in _dispatch: do it here, so that the
            # pool thread does nothing but wait for the downloads of the outputs
            try:
                env = self._dispatch(feeds, names)
            except BaseException as exc:  # noqa: BLE001 - reported through the future, as for the pool
                failed: Future = Future()
                failed.set_exception(exc)
                return failed
            return self._pool.submit(self._collect, env, feeds, names)
        return self._pool.submit(lambda: self._collect(self._dispatch(feeds, names), feeds, names))

    def __repr__(self) -> str:
        return f"Session({self.graph.name!r}, device={self.device_name!r}, {len(self._steps)} nodes)"
