"""Session: compile a model for a device, then run it.

Building a session = shape inference -> graph passes -> kernel selection per node (with device
fallback) and the kernels' ``prepare`` -> a Plan of steps over value slots (plan.py) -> a memory
plan placing intermediates in one arena (memory.py). ``run`` walks the plan (executor.py) and
follows onnxruntime's signature.
"""
from __future__ import annotations

import contextlib
import gc
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from . import deferred
from .backends import names_for_vendors, run_session_hooks, selected
from .devices import Device, create_device
from .errors import ConfigError, InputError, brief
from .executor import Executor
from .invoke import KernelContext
from .ir import Graph
from .limits import MAX_THREADS
from .loaders import load_model
from .passes import PassContext, run_passes
from .plan import Plan, compile_plan, concrete_specs, scratch_sizes, slot_specs
from .registry import KernelScope
from .shape import infer_shapes

__all__ = ["KernelContext", "NodeInfo", "Session"]


@dataclass
class NodeInfo:
    """What ``Session.get_inputs()``/``get_outputs()`` return, shaped like onnxruntime's NodeArg."""

    name: str
    shape: tuple
    type: str

    @property
    def dtype(self) -> str:
        return self.type

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
    kernel, with one ``FallbackWarning`` per session (``fallbacks()`` lists the nodes); ``passes``
    selects graph passes (None: defaults, False: none, or a list of names); ``options`` go to
    devices and class kernels (e.g. ``opencl_device``). ``stub_ops`` names ops (``"Op"`` or
    ``"domain::Op"``) to run as infinitely fast stubs that return zeros of the inferred output
    shape: estimate a model's speed before a kernel exists.
    """

    def __reduce__(self):
        """Pickles as its model (the path it came from, or .kkm bytes) and its arguments; the copy
        builds itself on first use in the receiving process (``kernelkit.portable``)."""
        from .portable import _rebuild, recipe_of

        return _rebuild, (recipe_of(self),)

    def __init__(self, model_or_path, device: str = "cpu", vendors=None, fallback: bool = True,
                 threads: int | None = None, profile: bool = False, passes=None,
                 options: dict | None = None, stub_ops=()):
        _check_settings(vendors, threads, passes, options, stub_ops)
        # what pickling sends (kernelkit.portable): the model as given and the arguments, never kernels
        self._recipe_args = (model_or_path, dict(device=device, vendors=vendors, fallback=fallback, threads=threads,
                                                 profile=profile, passes=passes, options=options,
                                                 stub_ops=tuple(stub_ops)))
        with _gc_paused():  # building makes ~25 objects a node: generational GC rescans them all, again and again
            self._build(model_or_path, device, vendors, fallback, threads, profile, passes, options, stub_ops)

    def _build(self, model_or_path, device, vendors, fallback, threads, profile, passes, options, stub_ops):
        # a session that names its vendors loads only their backends (warm start: a numba session
        # imports no OpenCL); an op or a device they lack still loads the others (registry, devices)
        args = (model_or_path, device, vendors, fallback, threads, profile, passes, options, stub_ops)
        self._upgrade = None
        names = names_for_vendors(vendors)
        with selected(names):
            # a CPU session that accepts reference kernels may start on them while a slow backend
            # finishes loading in the background (kernelkit.deferred; not when profiling)
            if device == "cpu" and not profile and (vendors is None or "reference" in vendors):
                try:
                    with deferred.allowing(True, device, vendors, options):
                        self._build_selected(*args)
                except Exception:
                    if not deferred.pending():
                        raise
                    deferred.finish()  # built again below with every kernel (the error, if it was not this)
                else:
                    waiting = [n for n in deferred.pending() if names is None or n in names]
                    if waiting:
                        self._upgrade = deferred.Upgrade(self, Session._rebuilt, Session._adopt)
                    return
            self._build_selected(*args)

    def _rebuilt(self) -> "Session":
        """The same session built again (a deferred backend's upgrade, kernelkit.deferred)."""
        model_or_path, kwargs = self._recipe_args
        return Session(model_or_path, **kwargs)

    def _adopt(self, new: "Session") -> None:
        """Take ``new``'s plan (its kernels, graph and memory plan): runs that start from now on use it."""
        for name in ("model", "graph", "plan", "kernel_scope", "passes_fired", "pass_notes", "_devices", "_replayer"):
            setattr(self, name, getattr(new, name))
        self._executor = new._executor
        self._upgrade = None

    def _build_selected(self, model_or_path, device, vendors, fallback, threads, profile, passes, options,
                        stub_ops):
        self.model = load_model(model_or_path).copy()
        self.device_name = device
        self.vendors = tuple(vendors) if vendors is not None else None
        self.fallback = fallback
        self.threads = threads
        self.options = dict(options or {})
        if threads is not None:
            self.options.setdefault("threads", threads)
        self._devices: dict[str, Device] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self.stub_ops = frozenset(stub_ops)
        self.kernel_scope = KernelScope()  # kernels that this session's options register, seen by it only
        run_session_hooks(device, self.options, self.kernel_scope)  # backends act on their options
        graph = self.model.graph
        for value in graph.values.values():  # kernels and callers get read-only views of constants
            if value.data is not None and value.data.flags.writeable:
                value.data = value.data.view()
                value.data.flags.writeable = False
        graph.toposort()  # a loaded graph need not list its nodes in order
        infer_shapes(graph)
        pass_ctx = PassContext(device, self.vendors, self.options, scope=self.kernel_scope)
        self.passes_fired = run_passes(graph, passes, pass_ctx)
        self.pass_notes: list[str] = pass_ctx.notes  # e.g. fusions skipped for a user's kernel
        if self.passes_fired:  # a rewritten graph is ordered and inferred again
            graph.toposort()
            infer_shapes(graph)
        self.graph: Graph = graph
        self._device(device)  # a device asked for by name must exist, even if fallback would avoid it
        self.plan: Plan = compile_plan(graph, device, self.vendors, fallback, self.options, threads,
                                       self.stub_ops, self._device, self.kernel_scope)
        self._executor = Executor(self.plan, list(graph.inputs), self._shapes_for, profile)
        from .replay import Replayer

        self._replayer = Replayer.for_session(self, profile)  # capture + replay (OpenCL); option replay

    def _device(self, name: str) -> Device:
        if name not in self._devices:
            self._devices[name] = create_device(name, self.options)
        return self._devices[name]

    def _shapes_for(self, key):
        """(slot -> spec, step -> scratch bytes) for input shapes ``key`` (None: the compiled ones)."""
        if key is None:
            specs = slot_specs(self.plan, self.graph.values)
        else:
            specs = concrete_specs(self.plan, self.graph, dict(zip(self.graph.inputs, key)), self.options)
        return specs, scratch_sizes(self.plan, specs)

    # -- introspection -------------------------------------------------------------------------
    def _info(self, names) -> list[NodeInfo]:
        return [NodeInfo(n, self.graph.values[n].spec.shape, self.graph.values[n].spec.dtype) for n in names]

    def get_inputs(self) -> list[NodeInfo]:
        return self._info(self.graph.inputs)

    def get_outputs(self) -> list[NodeInfo]:
        return self._info(self.graph.outputs)

    def placement(self) -> dict[str, tuple[str, str]]:
        """Node name -> (device, vendor) of the kernel chosen for it."""
        return {s.name: s.placement for s in self.plan.kernel_steps()}

    def layouts(self) -> dict[str, str]:
        """Node name -> the layout its kernel runs in: "" for the default (NCHW for images), else
        e.g. "NHWC" or "NCHW8c", as the layout pass chose (docs/architecture.md, "Layouts")."""
        return {s.name: next((lay for lay in s.layout if lay), "") for s in self.plan.kernel_steps()}

    def fallbacks(self) -> list[dict]:
        """Each node placed elsewhere than asked: node, op, device, vendor, reason, and the
        host<->device copies the placement added (``"value: cpu->gpu"``)."""
        return [f.as_dict() for f in self.plan.fallbacks]

    def memory(self, input_shapes: dict | None = None) -> dict:
        """The memory plan's figures in bytes: ``arena_bytes`` (the one buffer intermediates live
        in), ``live_peak_bytes`` (the most intermediate bytes alive at one step: the lower bound),
        ``weights_bytes`` (constants), ``scratch_bytes`` (the largest scratch one kernel asked
        for), plus counts of planned, in-place and kernel-allocated values. With symbolic input
        dims, give ``input_shapes`` (name -> shape) or get the shapes of the latest run."""
        if input_shapes is not None:
            key = tuple(tuple(input_shapes[n]) for n in self.graph.inputs)
            mem = self._executor.pool_for(None if self.plan.static else key).mem
        elif self.plan.static:
            mem = self._executor.pool_for(None).mem
        else:
            mem = self._executor.last_memory
        weights = sum(int(np.asarray(v.data).nbytes) for v in self.graph.values.values() if v.data is not None)
        figures = mem.summary() if mem is not None else {"arena_bytes": 0, "live_peak_bytes": 0,
                                                         "scratch_bytes": 0}
        figures["weights_bytes"] = weights
        figures["input_shapes"] = None if mem is None or mem.key is None else dict(zip(self.graph.inputs, mem.key))
        return figures

    def devices(self) -> dict[str, str]:
        return {name: dev.describe() for name, dev in self._devices.items()}

    def profile(self) -> list[dict]:
        """Per-node timings collected when ``profile=True``: node, op, device, vendor, dtype, calls,
        total_ms and mean_ms (host time around the kernel call), and device_ms: the device's own
        time from its events (OpenCL with ``opencl_profile``; None where a device has none)."""
        device_ms: dict[str, float] = {}
        for dev in list(self._devices.values()):
            device_ms.update({n: ms for n, (_, ms) in dev.event_times().items()})
        timings = dict(self._executor.timings)
        rows = []
        for step in self.plan.kernel_steps():
            calls, total = timings.get(step.name, (0, 0.0))
            rows.append({"node": step.name, "op": step.op, "device": step.key.device, "vendor": step.key.vendor,
                         "dtype": step.key.dtype, "calls": calls, "total_ms": total * 1e3,
                         "mean_ms": total * 1e3 / calls if calls else 0.0, "device_ms": device_ms.get(step.name)})
        return rows

    def profile_events(self) -> list[tuple[str, float, float, int]]:
        """Each profiled kernel call since the last reset, oldest first: (node, start, seconds,
        thread id), start from ``time.perf_counter()`` (for traces)."""
        return self._executor.profile_events()

    def reset_profile(self) -> None:
        """Forget the profile collected so far (e.g. after warm-up runs), devices' event times too."""
        self._executor.reset_profile()
        for dev in list(self._devices.values()):
            dev.event_times(reset=True)

    # -- running -------------------------------------------------------------------------------
    def _check_feeds(self, feeds: dict) -> dict[str, np.ndarray]:
        """The feeds as read-only views, checked against the inputs' dtypes and shapes (symbolic
        dimensions bound consistently across inputs). Feeds that are native-order ndarrays of the
        expected dtypes, shapes and names take a short path (~1 us for one input instead of ~4);
        anything else takes the full check and its errors."""
        checks = self.__dict__.get("_feed_checks")
        if checks is None:
            checks = self._feed_checks = [(name, np.dtype(self.graph.values[name].spec.dtype),
                                           tuple(self.graph.values[name].spec.shape)) for name in self.graph.inputs]
        if feeds.__class__ is dict and len(feeds) == len(checks):
            out, symbols = {}, None
            for name, dtype, shape in checks:
                arr = feeds.get(name)
                if arr.__class__ is not np.ndarray or arr.dtype is not dtype or len(arr.shape) != len(shape):
                    break
                if arr.shape != shape:
                    symbols = {} if symbols is None else symbols
                    if not _binds(shape, arr.shape, symbols):
                        break
                view = arr.view()
                view.setflags(write=False)  # kernels must never write into the caller's array
                out[name] = view
            else:
                return out
        return self._check_feeds_fully(feeds)

    def _check_feeds_fully(self, feeds: dict) -> dict[str, np.ndarray]:
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

    def run(self, output_names, input_feed: dict, run_options=None) -> list[np.ndarray]:
        """Run the model; returns fresh arrays for ``output_names`` (None: all outputs)."""
        names = self._resolve_outputs(output_names)
        feeds = self._check_feeds(input_feed)
        upgrade = self._upgrade
        if upgrade is None:
            return self._run(feeds, names)
        upgrade.run_started(feeds)  # the first run's feeds warm the upgraded plan up (kernelkit.deferred)
        try:
            return self._run(feeds, names)
        finally:
            upgrade.run_ended()

    def _run(self, feeds: dict, names: list) -> list[np.ndarray]:
        ex, replayer = self._executor, self._replayer  # read once: an upgrade may swap them
        if replayer is not None:
            kind, *result = replayer.start(feeds, names, copy_feeds=False)
            if kind == "replayed":
                outs, events = result
                events[-1].wait()
                return outs
            return ex.finish(result[0], feeds, names)
        return ex.finish(ex.start(feeds), feeds, names)

    def run_async(self, output_names, input_feed: dict) -> Future:
        """Start a run and return a ``concurrent.futures.Future`` of its outputs. The feeds are
        copied before this returns: changing the caller's arrays afterwards changes nothing."""
        names = self._resolve_outputs(output_names)
        feeds = {name: _frozen_copy(a) for name, a in self._check_feeds(input_feed).items()}
        upgrade = self._upgrade
        if upgrade is None:
            return self._run_async(names, feeds)
        upgrade.run_started(feeds)
        try:
            future = self._run_async(names, feeds)
        except BaseException:
            upgrade.run_ended()
            raise
        future.add_done_callback(lambda _: upgrade.run_ended())
        return future

    def _run_async(self, names: list, feeds: dict) -> Future:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=max(1, self.threads or os.cpu_count() or 1),
                                                thread_name_prefix="kernelkit-run")
        ex = self._executor
        devices = self._devices.values()
        if all(d.asynchronous or d.name == "cpu" for d in devices) and any(d.asynchronous for d in devices):
            # asynchronous devices (OpenCL) only enqueue: do it here, so that the pool thread does
            # nothing but wait for the downloads of the outputs
            try:
                if self._replayer is not None:
                    kind, *result = self._replayer.start(feeds, names, copy_feeds=False)  # feeds: private copies
                    if kind == "replayed":
                        outs, events = result
                        return self._pool.submit(lambda: (events[-1].wait(), outs)[1])
                    started = result[0]
                else:
                    started = ex.start(feeds)
            except BaseException as exc:  # noqa: BLE001 - reported through the future, as for the pool
                failed: Future = Future()
                failed.set_exception(exc)
                return failed
            return self._pool.submit(ex.finish, started, feeds, names)
        return self._pool.submit(lambda: ex.finish(ex.start(feeds), feeds, names))

    def io_binding(self):
        """An :class:`~kernelkit.iobinding.IOBinding` for :meth:`run_with_iobinding`."""
        from .iobinding import IOBinding

        return IOBinding(self)

    def run_with_iobinding(self, binding) -> None:
        """Run with the binding's inputs (arrays or device tensors); outputs bound on the device
        stay there as fresh device tensors (``binding.get_outputs()``), see iobinding.py."""
        binding.run()

    def __repr__(self) -> str:
        return f"Session({self.graph.name!r}, device={self.device_name!r}, {len(self.plan.kernel_steps())} nodes)"


def _binds(shape: tuple, got: tuple, symbols: dict) -> bool:
    """Whether ``got`` matches ``shape`` (ints equal, each symbol bound to one size in ``symbols``)."""
    for want, n in zip(shape, got):
        if want.__class__ is str:
            if symbols.setdefault(want, n) != n:
                return False
        elif want != n:
            return False
    return True


@contextlib.contextmanager
def _gc_paused():
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _frozen_copy(array: np.ndarray) -> np.ndarray:
    """A read-only copy of a feed; a broadcast feed (zero strides) keeps its small core only."""
    if array.size and 0 in array.strides:
        core = array[tuple(slice(0, 1) if st == 0 else slice(None) for st in array.strides)]
        return np.broadcast_to(np.array(core, copy=True), array.shape)
    copy = np.array(array, copy=True)
    copy.flags.writeable = False
    return copy
