"""Tiered start: numba kernels never compile on the thread that runs the model.

A kernel whose compiled code is not in memory yet (first call in a process, with or without a disk
cache; a new input type later) would stop the run for the time Numba takes to compile it (0.2-2.6 s
a kernel on the 2-core dev box) or to load it from the disk cache (the first load in a process also
pays ~0.5 s of Numba's own start: its lowering registries and SciPy's BLAS bindings). Instead, as
JIT runtimes do:

1. A numba node's call (``execute``, or the plan's bound call from ``bind``) runs with a guard
   on: every kernelkit dispatcher (``hook``) raises :class:`NotCompiled` instead of compiling when
   no compiled code matches the call. The guard is per thread and travels with the shards the kernel hands to the pool
   (``config.parallel_for``/``run_shards``). When nothing is missing, that is the whole cost: a
   thread-local flag per call.
2. On :class:`NotCompiled` the call is redone by the node's reference kernel (vendor "reference",
   same attributes; built once per node and input shapes; written into the plan's ``out`` when
   given), and a *trial* is queued: one background thread (``kernelkit-numba-compile``; it starts a
   batch once no stand-in has run for ``IDLE_S``, at most ``MAX_DELAY_S`` late) runs the
   node's own numba call on copies of the inputs and of ``out`` (same dtypes, ranks and
   contiguity, so the same signatures; constants are not copied), compiling or loading everything
   the node needs; what the kernel prepares on the way (transformed weights) stays. Its result
   is dropped. A node that is resized waits for its trial first.
3. Until its trial ends the node keeps running the reference; then it runs numba again (guarded).
   Once a guarded call ran numba without a miss (or the node is eager), the node has settled: the
   plan's executor then calls its kernel without this wrapper (``bound``'s ``settled``;
   ``kernelkit.executor``), a new input shape's first run excepted.
   A trial that fails (a bug, or an input the kernel rejects) leaves the node compiling on the
   calling thread from then on, so the error surfaces as it would without tiering; so does a node
   whose trials keep missing (``MAX_TRIALS``).

Results therefore come from the reference kernel for a node's first calls and from numba after;
both agree within ``kernelkit.testing.TOLERANCES``. Only sessions that accept reference kernels
tier (``vendors`` None or naming "reference": ``Session(vendors=["numba"])`` runs numba kernels
alone, from the first call). Nodes whose numba kernel is a layout variant (NHWC, NCHWc) or has no
reference kernel compile on the calling thread as before.

Switches: ``Session(options={"numba_start": "eager"})`` or ``$KERNELKIT_NUMBA_START=eager`` compile
on the calling thread (benchmarks of compile time, debugging); ``"tiered"`` is the default.
:func:`wait` blocks until every queued trial has ended; :func:`stats` counts them.

A kernel's ``compute`` may thus be abandoned at any call of a jitted function and run again later:
state it keeps between calls must be set in one assignment (``self._a, self._b = a, b``), never
half-way before a jitted call that could be missing.
"""
from __future__ import annotations

import functools
import logging
import os
import queue
import sys
import threading
import time

import numpy as np

log = logging.getLogger("kernelkit.numba")

ENV = "KERNELKIT_NUMBA_START"
OPTION = "numba_start"
TIERED, EAGER = "tiered", "eager"
MODES = (TIERED, EAGER)
MAX_TRIALS = 3  # trials per node before it compiles on the calling thread
# While trials run, Python's thread switch interval is lowered to this (restored after): Numba's
# compiler holds the GIL most of the time, and a thread that wants it back (the model's, between two
# NumPy calls of a reference kernel) waits up to the interval (5 ms by default) each time.
SWITCH_INTERVAL_S = 2e-4
# The background thread starts a batch of trials once no stand-in runs and none ended for IDLE_S (the
# first run is over), or MAX_DELAY_S after it woke at the latest: loading cached kernels
# in a fresh process is ~0.3-0.5 s of mostly GIL-holding work (Numba's start), which ran beside the
# first run and made it up to 2-5x slower (warm-cache ResNet-18 on the busy 2-core box: first run
# 0.15-0.41 s beside it, 0.08-0.25 s with the loading after it).
IDLE_S = 0.01
MAX_DELAY_S = 0.5


class NotCompiled(BaseException):
    """Raised by a guarded dispatcher call that would have to compile (internal; never escapes
    ``execute``). A BaseException, so that a kernel's ``except Exception`` does not turn it into
    an error of its own."""


_guard = threading.local()  # .on: this thread's dispatcher calls must not compile


def guarded() -> bool:
    return getattr(_guard, "on", False)


def hook(dispatcher):
    """Make ``dispatcher`` raise :class:`NotCompiled` instead of compiling while its calling thread
    is guarded. Numba's C dispatcher calls ``_compile_for_args`` only when no compiled overload
    matches, so calls of compiled code do not pay for this. (A plain function, as ``njit`` gives
    under NUMBA_DISABLE_JIT=1, is returned as it is.)"""
    compile_for_args = getattr(dispatcher, "_compile_for_args", None)
    if compile_for_args is None:
        return dispatcher

    def _compile_for_args(*args, **kws):
        if getattr(_guard, "on", False):
            raise NotCompiled(getattr(dispatcher, "__qualname__", "?"))
        return compile_for_args(*args, **kws)

    dispatcher._compile_for_args = _compile_for_args
    return dispatcher


def carry_guard(fn):
    """``fn`` as run by a pool worker: guarded when the thread handing it out is."""
    if not getattr(_guard, "on", False):
        return fn

    def run(*args):
        was = getattr(_guard, "on", False)
        _guard.on = True
        try:
            return fn(*args)
        finally:
            _guard.on = was

    return run


def mode_of(options: dict | None) -> str:
    """The start mode a session's options (else ``$KERNELKIT_NUMBA_START``, else tiered) ask for."""
    from kernelkit.errors import ConfigError

    value = (options or {}).get(OPTION)
    where = f"session option {OPTION!r}"
    if value is None:
        value, where = os.environ.get(ENV) or TIERED, f"${ENV}"
    if value not in MODES:
        raise ConfigError(f"{where} must be one of {', '.join(MODES)}, got {value!r:.40}")
    # the module's own string, not the caller's: ``bound`` tests the mode with ``is``, and a value read from
    # the environment is another str object ("eager" from $KERNELKIT_NUMBA_START never settled a node, so
    # every numba call of the benchmarks that set it kept the tiered wrapper: issue 11, session 14)
    return EAGER if value == EAGER else TIERED


def _mode_for(context) -> str:
    """A node's mode: tiered only where its session accepts reference kernels (``vendors`` None or
    naming "reference"); ``vendors=["numba"]`` means numba kernels alone, from the first call."""
    mode = mode_of(getattr(context, "options", None))
    vendors = getattr(context, "vendors", None)
    return EAGER if vendors is not None and "reference" not in vendors else mode


def check_options(device: str, options: dict) -> None:
    """Session hook: a bad ``numba_start`` option (or environment value) fails the build."""
    mode_of(options)


def may_defer(device: str, vendors, options: dict) -> bool:
    """Whether a Session build of these settings may start before the kernels are imported
    (``kernelkit.deferred``): a CPU session, tiered, that accepts reference kernels."""
    from kernelkit.errors import ConfigError

    try:
        tiered = mode_of(options) == TIERED
    except ConfigError:  # check_options fails the build
        return False
    return device == "cpu" and tiered and (vendors is None or "reference" in vendors)


def warming(on: bool) -> None:
    """``kernelkit.deferred`` warm hook: while ``on``, numba nodes called on this thread (a session
    upgrade's warm-up run, off the model's thread) compile or load their kernels right there."""
    _guard.warm = on


def blas_single() -> None:
    """Every loaded BLAS library at one thread (``config.blas_single``, without importing Numba):
    a session starting on reference kernels before the numba kernels are imported."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return
    for lib in ThreadpoolController().select(user_api="blas").lib_controllers:
        if lib.get_num_threads() != 1:
            lib.set_num_threads(1)


# -- what a node runs ----------------------------------------------------------------------------
class _Trial:
    """One background run of a node's numba call on copies of its inputs (and of ``out``)."""

    __slots__ = ("kernel", "run", "inputs", "out", "done", "error", "pid")

    def __init__(self, kernel, run, inputs, out):
        self.kernel, self.run, self.inputs, self.out, self.pid = kernel, run, inputs, out, os.getpid()
        self.done = threading.Event()
        self.error: BaseException | None = None


_lock = threading.Lock()
_queue: queue.SimpleQueue = queue.SimpleQueue()
_worker: threading.Thread | None = None
_pid = os.getpid()
_counts = {"trials": 0, "failed": 0, "reference_calls": 0}
_pending = 0
_idle = threading.Condition(_lock)
_switch: list = []  # (interval before, interval set) while trials run
_layouts: dict[type, str | None] = {}  # kernel class -> its registered layout ("" default), None: several
_ran: set = set()  # kernel classes that completed a trial in this process
_ranked: dict[tuple, list] = {}  # (op, dtype) -> reference candidates
_last_stand_in = 0.0  # perf_counter of the latest start or end of a reference stand-in call
_standing_in = 0  # stand-in calls running now (on the models' threads)


def stats() -> dict:
    """Counts since the process started: trials queued and failed, calls run by reference kernels,
    trials not ended yet."""
    with _lock:
        return {**_counts, "pending": _pending}


def wait(timeout: float | None = None) -> bool:
    """Block until every session upgrading in the background (``kernelkit.deferred``) has swapped
    and every queued trial has ended (True), or ``timeout`` seconds passed (False)."""
    from kernelkit import deferred

    start = time.perf_counter()
    if not deferred.wait(timeout):
        return False
    left = None if timeout is None else max(0.0, timeout - (time.perf_counter() - start))
    with _idle:
        return _idle.wait_for(lambda: _pending == 0 or os.getpid() != _pid, left)


def call(kernel, run, inputs: tuple, out):
    """``run(inputs, out)`` (the numba kernel's call) in the node's start mode: see the module doc."""
    if kernel._tier_mode is None:
        kernel._tier_mode = _mode_for(kernel.context)
    if kernel._tier_mode == EAGER:
        return run(inputs, out)
    if getattr(_guard, "warm", False):  # an upgrade's warm-up run (kernelkit.deferred): compile here
        result = run(inputs, out)
        _ran.add(type(kernel))
        return result
    trial = kernel._tier_trial
    if trial is not None:
        if not trial.done.is_set() and trial.pid == os.getpid():
            return _stand_in(kernel, run, inputs, out)
        kernel._tier_trial = None
        if trial.done.is_set() and trial.error is not None:
            kernel._tier_mode = EAGER
            return run(inputs, out)
        # else ended, or queued in the parent of this forked process (never runs here): try again
    missing = "first call"
    if type(kernel) in _ran:  # a node of this kernel ran numba in this process: its code is likely in memory
        was = getattr(_guard, "on", False)
        _guard.on = True
        try:
            result = run(inputs, out)
            kernel._tier_ok = True  # ran numba without a miss: settled (``bound``'s ``settled``)
            return result
        except NotCompiled as exc:
            missing = exc
        finally:
            _guard.on = was
    kernel._tier_count += 1
    if kernel._tier_count > MAX_TRIALS or not _has_reference(kernel, inputs):
        log.debug("%s: compiling %s on the calling thread", kernel.where, missing)
        kernel._tier_mode = EAGER
        return run(inputs, out)
    kernel._tier_trial = _submit(kernel, run, inputs, out)
    return _stand_in(kernel, run, inputs, out)


def _stand_in(kernel, run, inputs, out):
    """The reference kernel's call; one that fails (cannot be built for the node, or rejects the
    inputs) makes the node numba's alone: its trial ends, and numba runs here (raising its own error
    where the inputs are bad)."""
    global _last_stand_in, _standing_in
    with _lock:
        _standing_in += 1
    _last_stand_in = time.perf_counter()
    try:
        return _reference(kernel, inputs, out)
    except Exception as exc:  # noqa: BLE001 - numba decides, as without tiering
        log.debug("%s: no reference stand-in (%s: %s); numba on the calling thread", kernel.where,
                  type(exc).__name__, exc)
    finally:
        _last_stand_in = time.perf_counter()
        with _lock:
            _standing_in -= 1
    settle(kernel)
    kernel._tier_trial, kernel._tier_mode = None, EAGER
    return run(inputs, out)


def bound(kernel, fn):
    """A bound call ``fn(*inputs, out=None)`` (``NumbaKernel.bind``) in the node's start mode."""
    def run(inputs, out):
        return fn(*inputs, out=out)

    @functools.wraps(fn)  # keeps the bound call's name (which path the plan took)
    def tiered_call(*inputs, out=None):
        if kernel._tier_mode is EAGER:
            return fn(*inputs, out=out)
        return call(kernel, run, inputs, out)

    def settled():
        """``fn`` itself once the node runs numba (eager, or a guarded call ran it without a
        miss): the plan's executor then calls it without this wrapper (``kernelkit.plan``'s
        ``step.direct``). A kernel that would still have to compile for a later call (a new
        code path) then compiles on the calling thread, as an eager node does."""
        return fn if kernel._tier_mode is EAGER or kernel._tier_ok else None

    tiered_call.settled = settled
    return tiered_call


def settle(kernel) -> None:
    """Wait for the node's background trial, if one runs (before its kernel's state changes)."""
    trial = kernel._tier_trial
    if trial is not None and trial.pid == os.getpid():
        trial.done.wait()


def background(job) -> _Trial:
    """Queue ``job()`` on the background thread, after the trials queued before it (one job at a time; a
    daemon thread, so one still queued at exit does not hold the interpreter). For work a kernel must not do
    on the model's thread (conv_serial.HELD_ONE_THREAD's bind of a layer's one-thread call: packing, compiling).
    Not counted in :func:`stats`' trials; :func:`wait` waits for it. ``job`` handles its own errors (one it
    raises is logged, and the returned handle's ``error`` holds it); the handle's ``done`` is set at its end."""
    return _submit(None, lambda inputs, out: job(), (), None, counted=False)


def _submit(kernel, run, inputs, out, counted: bool = True) -> _Trial:
    global _worker, _pending, _queue, _pid
    trial = _Trial(kernel, run, tuple(_copy_like(x) for x in inputs), None if out is None else _copy_like(out, True))
    with _lock:
        if os.getpid() != _pid:  # a forked child: the parent's worker and queue did not come along
            _queue, _worker, _pending, _pid = queue.SimpleQueue(), None, 0, os.getpid()
        _counts["trials"] += counted
        _pending += 1
        before = sys.getswitchinterval()
        if _pending == 1 and before > SWITCH_INTERVAL_S:
            sys.setswitchinterval(SWITCH_INTERVAL_S)
            _switch.append((before, sys.getswitchinterval()))
        if _worker is None or not _worker.is_alive():
            _worker = threading.Thread(target=_serve, name="kernelkit-numba-compile", daemon=True)
            _worker.start()
    _queue.put(trial)
    return trial


def _await_idle() -> None:
    """Sleep until no stand-in runs and none ended within IDLE_S, or MAX_DELAY_S have passed. (A
    stand-in that runs longer than IDLE_S, as a reference convolution on a busy box, used to let the
    loading start in the middle of a first run: on the shared 2-core box 3 of 7 warm first runs of
    ResNet-18 took 0.2 s instead of 0.07.)"""
    deadline = time.perf_counter() + MAX_DELAY_S
    while time.perf_counter() < deadline and (_standing_in or time.perf_counter() - _last_stand_in < IDLE_S):
        time.sleep(IDLE_S / 2)


def _serve() -> None:
    global _pending
    batch = True  # the first trial after the queue ran empty starts a batch
    while True:
        trial = _queue.get()
        if batch:
            _await_idle()
            batch = False
        try:
            trial.run(trial.inputs, trial.out)
        except BaseException as exc:  # noqa: BLE001 - the node then compiles on its own thread
            trial.error = exc
            log.debug("numba trial of %s failed: %s: %s", getattr(trial.kernel, "where", "a background job"),
                      type(exc).__name__, exc)
        else:
            if trial.kernel is not None:
                _ran.add(type(trial.kernel))
        counted = trial.kernel is not None
        trial.kernel = trial.run = trial.inputs = trial.out = None
        trial.done.set()
        with _lock:
            _counts["failed"] += counted and trial.error is not None
            _pending -= 1
            if _pending == 0:
                batch = True
                _idle.notify_all()
                while _switch:  # back to the interval before, unless someone changed it meanwhile
                    before, ours = _switch.pop()
                    if sys.getswitchinterval() == ours:
                        sys.setswitchinterval(before)


def _copy_like(x, always: bool = False):
    """A private copy of ``x`` that Numba types the same way (dtype, rank, C/F/any layout); a
    read-only array (a constant: weights) is not copied unless ``always``."""
    if not isinstance(x, np.ndarray) or not (always or x.flags.writeable):
        return x
    if x.flags.c_contiguous:
        return np.array(x, order="C", copy=True)
    if x.flags.f_contiguous:
        return np.array(x, order="F", copy=True)
    axis = max(i for i, n in enumerate(x.shape) if n > 1)  # strided along the last long axis: layout "A"
    shape = list(x.shape)
    shape[axis] *= 2
    y = np.empty(shape, x.dtype)[(slice(None),) * axis + (slice(None, None, 2),)]
    y[...] = x
    return y


def _layout_of(kernel) -> str | None:
    """The layout key the kernel's class is registered under ("" the default; None: several)."""
    cls = type(kernel)
    if cls not in _layouts:
        from kernelkit import registry

        found: dict[type, set] = {}
        for key in registry.kernels(vendor="numba"):
            found.setdefault(registry.kernel_entry(key).impl, set()).add(key.layout)
        _layouts.update({c: next(iter(ls)) if len(ls) == 1 else None for c, ls in found.items()})
        _layouts.setdefault(cls, None)
    return _layouts[cls]


def _has_reference(kernel, inputs) -> bool:
    """Whether the node can run on a reference kernel meanwhile (default layout, a kernel exists)."""
    return getattr(kernel.context, "node", None) is not None and _layout_of(kernel) == "" \
        and _reference_entry(kernel, _specs_of(inputs)) is not None


def _specs_of(inputs):
    from kernelkit.ir import TensorSpec

    return [TensorSpec(tuple(x.shape), np.dtype(x.dtype).name) if x is not None else None for x in inputs]


def _reference_entry(kernel, specs):
    from kernelkit import registry

    node = kernel.context.node
    schema = registry.get_schema(node.op, node.domain)
    if schema.dispatch_input < len(specs) and specs[schema.dispatch_input] is not None:
        dtype = specs[schema.dispatch_input].dtype
    else:  # no input to dispatch on: the numba kernel's own registration says which dtypes it takes
        return None
    ranked = _ranked.get((node.op_id, dtype))
    if ranked is None:
        ranked = _ranked[node.op_id, dtype] = registry.candidates(node.op_id, "cpu", dtype, ("reference",))
    return registry.select_kernel(node.op_id, "cpu", dtype, ("reference",), specs, kernel.attrs, ranked=ranked)


def _reference(kernel, inputs, out):
    """Run the node's reference kernel on ``inputs`` (built once per input shapes), into ``out``
    when given. It stands in for a numba node, so BLAS runs at one thread as the numba kernels'
    own calls do (``config.blas_single``): at OpenBLAS's own thread count a first run on a busy
    2-core box took 0.8-1.5 s instead of 0.36-0.42 (its threads wait at a join for a core)."""
    from kernelkit.invoke import bind

    from .config import blas_single

    blas_single()

    specs = _specs_of(inputs)
    ref = kernel._tier_ref
    if ref is None or ref[0] != specs:
        entry = _reference_entry(kernel, specs)
        ctx = kernel.context
        call = bind(entry, ctx.node, dict(kernel.attrs), ctx.device, specs, ctx.options, ctx.threads)
        ref = kernel._tier_ref = (specs, call.execute if entry.is_class else call)
    with _lock:
        _counts["reference_calls"] += 1
    result = ref[1](*inputs)
    if out is None:
        return result
    np.copyto(out, result[0] if isinstance(result, (tuple, list)) else result)
    return out
