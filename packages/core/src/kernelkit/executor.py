"""Running a Plan: one pre-built runner per step over a flat list of values (the slots).

A run takes an arena (memory.py) for its input shapes, copies the arena's value-list template
(constants and views of the arena already in place), puts the feeds in, and calls each step's
runner. A runner reads its inputs by slot index and calls the step's pre-bound kernel, passing
``out=`` (and ``scratch=``) when the kernel takes them. Nothing on this path looks up the
registry, builds a TensorSpec or a dict of attributes.
"""
from __future__ import annotations

import operator
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

import numpy as np

from .devices import profiled_node
from .errors import KernelExecutionError
from .memory import ArenaPool, MemoryPlan, plan_memory
from .plan import Plan, Step

try:  # NumPy's error state is a context variable: setting it to a state made once is ~0.2 us a run
    from numpy._core._ufunc_config import _extobj_contextvar as _ERRSTATE
    from numpy._core._ufunc_config import _make_extobj

    _QUIET = _make_extobj(all="ignore")
except (ImportError, TypeError):  # another NumPy: np.errstate around the run
    _ERRSTATE = _QUIET = None

_UNBOUND = object()  # no input shapes bound yet (dynamic plans)

MAX_SHAPE_PLANS = 16  # memory plans kept for distinct input shapes (least recently used dropped)
PROFILE_EVENTS = 200_000  # per-call profile events kept (the oldest are dropped beyond this)


def _where(step: Step) -> str:
    return f"node {step.name!r} ({step.op}) in kernel {tuple(step.key) if step.key else 'copy'}"


def _first(step: Step, result):
    if not result:
        raise KernelExecutionError(f"{_where(step)} returned no outputs, node has 1")
    return result[0]


def _settle(step: Step, result, out):
    """The value a step with ``out=`` produced: ``out`` itself, once the result is in it."""
    if isinstance(result, (tuple, list)):
        result = _first(step, result)
    if out is None or result is out:
        return result
    try:  # the kernel returned another array: its value goes where the plan expects it
        np.copyto(out, result)
    except Exception as exc:
        raise KernelExecutionError(f"{_where(step)} returned {np.shape(result)}, the plan has {out.shape} "
                                   f"({type(exc).__name__}: {exc})") from exc
    return out


def make_runner(step: Step, call: Callable | None = None) -> Callable[[list], None]:
    """``run(env)``: the step's call (or ``call``) on its input slots, storing its outputs in their slots."""
    call, ins, outs = call or step.call, step.input_slots, step.output_slots
    real = [o for o in outs if o is not None]
    if step.kind == "copy":
        (a,), (o,) = ins, outs

        def run_copy(env):
            env[o] = call(env[a])
        return run_copy
    if step.takes_out:
        (o,) = real
        sc = step.scratch_slot
        if sc is not None:
            def run_out_scratch(env):
                out = env[o]
                r = call(*[env[i] for i in ins], out=out, scratch=env[sc])
                if r is not out:  # out already sits in env[o]
                    env[o] = _settle(step, r, out)
            return run_out_scratch
        if len(ins) == 1:
            (a,) = ins

            def run_out1(env):
                out = env[o]
                r = call(env[a], out=out)
                if r is not out:  # out already sits in env[o]
                    env[o] = _settle(step, r, out)
            return run_out1
        if len(ins) == 2:
            a, b = ins

            def run_out2(env):
                out = env[o]
                r = call(env[a], env[b], out=out)
                if r is not out:  # out already sits in env[o]
                    env[o] = _settle(step, r, out)
            return run_out2

        def run_out(env):
            out = env[o]
            r = call(*[env[i] for i in ins], out=out)
            if r is not out:  # out already sits in env[o]
                env[o] = _settle(step, r, out)
        return run_out
    seq = (tuple, list)
    if step.scratch_slot is None and len(outs) == 1 and outs[0] is not None:
        o = outs[0]
        if len(ins) == 1:
            (a,) = ins

            def run1(env):
                r = call(env[a])
                env[o] = _first(step, r) if r.__class__ in seq else r
            return run1

        # a tuple of the input slots in one C call (two or more inputs; none: an empty tuple)
        get = operator.itemgetter(*ins) if ins else (lambda env: ())

        def run_n(env):
            r = call(*get(env))
            env[o] = _first(step, r) if r.__class__ in seq else r
        return run_n
    sc = step.scratch_slot

    def run_any(env):
        if sc is None:
            r = call(*[env[i] for i in ins])
        else:
            r = call(*[env[i] for i in ins], scratch=env[sc])
        if not isinstance(r, seq):
            r = (r,)
        if len(r) < len(real):
            raise KernelExecutionError(f"{_where(step)} returned {len(r)} outputs, node has {len(real)}")
        for s, v in zip(outs, r):
            if s is not None:
                env[s] = v
    return run_any


def _with_frees(run: Callable[[list], None], free: tuple[int, ...]) -> Callable[[list], None]:
    """``run``, then drop the slots whose last reader it was (kernel-allocated values go away)."""
    if not free:
        return run

    def run_and_free(env):
        run(env)
        for s in free:
            env[s] = None
    return run_and_free


class Executor:
    """Runs a Plan. ``memory_for(key)`` gives the memory plan of the input shapes ``key``;
    ``concrete(key)`` computes (slot -> spec, step -> scratch bytes) for a new key.

    Per-node costs that do not depend on the node are paid once a run, not once a node:

    - NumPy's error state is "ignore" for the whole run (one context-variable switch; kernels see
      ``step.quiet`` and need not switch it around each ufunc);
    - a plan of symbolic input shapes checks its class kernels' input shapes per node only in a
      run of input shapes the kernels are not bound for yet. That run has the plan to itself
      (runs of the bound shapes finish first, others wait), its nodes ``resize`` as they go, and
      from then on runs of those shapes call each node whose input shapes follow from them
      (``concrete``'s static specs) through ``step.direct()``, with no lock or shape key;
    - a class kernel's start-up wrapper (numba's tiered start) is dropped from the run's call once
      ``step.direct()`` says the node has settled (checked after runs 1, 2, 4, 8, ...).
    """

    def __init__(self, plan: Plan, input_names: list[str], concrete: Callable, profile: bool = False):
        self.plan = plan
        self.inputs = [(name, plan.slot_of[name]) for name in input_names]
        self.base: list = [None] * len(plan.slots)
        for slot, value in plan.constants.items():
            self.base[slot] = value
        self._concrete = concrete
        self._pools: OrderedDict[tuple | None, ArenaPool] = OrderedDict()
        self._pools_lock = threading.Lock()
        self.last_memory: MemoryPlan | None = None
        self.profiling = profile
        self.timings: dict[str, tuple[int, float]] = {}
        self.events: deque = deque(maxlen=PROFILE_EVENTS)  # (node, start, seconds, thread id) per call
        self._prof_lock = threading.Lock()
        self.output_device = {}
        for step in plan.steps:
            for o in step.output_slots:
                if o is not None:
                    self.output_device[o] = step.device
        keep = set(plan.constants) | {slot for _, slot in self.inputs}  # dropping these frees nothing
        if plan.static:  # values in the arena need no dropping either
            mem = self.pool_for(None).mem
            keep |= set(mem.placed) | set(mem.scratch)
        self._frees = [tuple(s for s in step.free if s not in keep) for step in plan.steps]
        self.runners = [_with_frees(make_runner(step), free) for step, free in zip(plan.steps, self._frees)]
        self._runs = 0
        # static plans: the runners themselves lose their start-up wrappers as nodes settle
        self._unsettled = [i for i, step in enumerate(plan.steps) if step.direct is not None] if plan.static else []
        # symbolic plans: the input shapes the kernels are bound for, and the runners for them
        self._gate_lock = threading.Lock()  # taken directly by the runs (Condition's own __enter__ is Python)
        self._gate = threading.Condition(self._gate_lock)
        self._bound = _UNBOUND
        self._fixed: list | None = None
        self._fixed_frees: list = []
        self._readers = self._waiting = 0
        self._writing = False

    # -- memory ---------------------------------------------------------------------------------
    def pool_for(self, key) -> ArenaPool:
        pools = self._pools
        pool = pools.get(key)
        if pool is None:
            with self._pools_lock:
                pool = pools.get(key)
                if pool is None:
                    specs, scratch = self._concrete(key)
                    pool = ArenaPool(plan_memory(self.plan, specs, scratch, key), self.base)
                    pool.specs = specs
                    pools[key] = pool
                    while len(pools) > MAX_SHAPE_PLANS:
                        pools.popitem(last=False)
        elif key is not None and len(pools) > 1:  # (one plan: nothing to reorder, no lock)
            with self._pools_lock:
                if key in pools:
                    pools.move_to_end(key)
        self.last_memory = pool.mem
        return pool

    # -- running --------------------------------------------------------------------------------
    def start(self, feeds: dict):
        """Run every step; returns (env, arena, pool) for ``finish``."""
        static = self.plan.static
        key = None if static else tuple(feeds[name].shape for name, _ in self.inputs)
        pool = self.pool_for(key)
        arena = pool.take()
        try:
            env = arena.template.copy()
            for name, slot in self.inputs:
                env[slot] = feeds[name]
            if static:
                self._walk_quiet(self.runners, env)
                self._runs += 1
                if self._unsettled and not self._runs & (self._runs - 1):
                    self._settle(self.runners, self._frees)
            else:
                self._run_bound(key, pool, env)
        except BaseException:
            pool.give(arena)
            raise
        return env, arena, pool

    def _walk_quiet(self, runners: list, env: list) -> None:
        """The steps under NumPy's error state "ignore", set once for the run."""
        if _ERRSTATE is None:
            with np.errstate(all="ignore"):
                return self._walk_timed(runners, env) if self.profiling else self._walk(runners, env)
        token = _ERRSTATE.set(_QUIET)
        try:
            if self.profiling:
                self._walk_timed(runners, env)
            else:
                self._walk(runners, env)
        finally:
            _ERRSTATE.reset(token)

    # -- symbolic input shapes: runs of the bound shapes skip the per-node check ------------------
    def _run_bound(self, key: tuple, pool: ArenaPool, env: list) -> None:
        gate, lock = self._gate, self._gate_lock
        with lock:
            bound = self._bound == key and not self._writing and not self._waiting
            if not bound:  # new shapes: wait for the runs of the bound ones, then rebind alone
                self._waiting += 1
                while self._readers or self._writing:
                    gate.wait()
                self._waiting -= 1
                bound = self._bound == key  # another run bound them meanwhile
                self._writing = not bound
                if not bound:
                    self._bound = _UNBOUND
            if bound:
                self._readers += 1
        if bound:
            try:
                self._walk_quiet(self._fixed, env)
                self._runs += 1
                if self._unsettled and not self._runs & (self._runs - 1):
                    self._settle(self._fixed, self._fixed_frees)
            finally:
                with lock:
                    self._readers -= 1
                    if not self._readers and self._waiting:  # only a run of new shapes waits
                        gate.notify_all()
            return
        fixed = None
        try:  # the per-node calls check the shapes and resize
            self._walk_quiet(self.runners, env)
            fixed = self._fix(pool)
        finally:
            with gate:
                self._writing = False
                if fixed is not None:
                    self._bound, self._fixed = key, fixed
                gate.notify_all()

    def _fix(self, pool: ArenaPool) -> list:
        """The runners for the input shapes just run: each node whose input shapes follow from them
        calls its kernel directly (``step.direct()``), the others keep the checked call; values in
        this key's arena are not dropped after their last reader (as in a static plan)."""
        specs, mem = pool.specs, pool.mem
        placed = set(mem.placed) | set(mem.scratch)
        frees = [tuple(s for s in free if s not in placed) for free in self._frees]
        runners, unsettled = [], []
        for i, step in enumerate(self.plan.steps):
            call = None
            if step.direct is not None and all(sp is not None and sp.is_static for sp in
                                               (specs.get(s) for s in step.input_slots if s)):
                call, settled = step.direct()  # (a shape that depends on data: checked per call)
                if not settled:
                    unsettled.append(i)
            runners.append(_with_frees(make_runner(step, call), frees[i]))
        self._unsettled, self._fixed_frees = unsettled, frees
        return runners

    def _settle(self, runners: list, frees: list) -> None:
        """Runners without the start-up wrapper of the nodes that have settled since."""
        left = []
        for i in self._unsettled:
            call, settled = self.plan.steps[i].direct()
            if settled:
                runners[i] = _with_frees(make_runner(self.plan.steps[i], call), frees[i])
            else:
                left.append(i)
        self._unsettled = left

    def finish(self, started, feeds: dict, names: list[str]) -> list[np.ndarray]:
        env, arena, pool = started
        try:
            return self.collect(env, feeds, names)
        finally:
            pool.give(arena)

    def _walk(self, runners: list, env: list) -> None:
        i = 0
        try:
            for i, run in enumerate(runners):  # noqa: B007 - i names the failing step
                run(env)
        except KernelExecutionError:
            raise
        except Exception as exc:  # a kernel's own typed check too: one error class on every device
            raise self._failure(i, env, exc) from exc

    def _walk_timed(self, runners: list, env: list) -> None:
        steps = self.plan.steps
        i = 0
        try:
            for i, run in enumerate(runners):
                profiled_node.set(steps[i].name)  # devices tag their timing events with it
                t0 = time.perf_counter()
                run(env)
                dt = time.perf_counter() - t0
                if steps[i].kind != "copy":
                    with self._prof_lock:
                        calls, total = self.timings.get(steps[i].name, (0, 0.0))
                        self.timings[steps[i].name] = (calls + 1, total + dt)
                        self.events.append((steps[i].name, t0, dt, threading.get_ident()))
        except KernelExecutionError:
            raise
        except Exception as exc:  # a kernel's own typed check too: one error class on every device
            raise self._failure(i, env, exc) from exc

    def profile_events(self) -> list[tuple[str, float, float, int]]:
        with self._prof_lock:
            return list(self.events)

    def reset_profile(self) -> None:
        with self._prof_lock:
            self.timings.clear()
            self.events.clear()

    def _failure(self, i: int, env: list, exc: Exception) -> KernelExecutionError:
        step = self.plan.steps[i]
        shapes = [tuple(env[s].shape) if env[s] is not None and hasattr(env[s], "shape") else None
                  for s in step.input_slots]
        if step.kind == "copy":
            return KernelExecutionError(f"copying {step.inputs[0]!r} to {step.device.name} failed: "
                                        f"{type(exc).__name__}: {exc}")
        return KernelExecutionError(f"node {step.name!r} ({step.op}) failed in kernel {tuple(step.key)} "
                                    f"with input shapes {shapes}: {type(exc).__name__}: {exc}")

    def collect(self, env: list, feeds: dict, names: list[str]) -> list[np.ndarray]:
        """Fresh host arrays the caller owns: never a view of a feed, a constant, the arena or
        another output."""
        results = []
        for name in names:
            slot = self.plan.output_slots[name]
            tensor = env[slot]
            dev = self.output_device.get(slot)
            arr = np.asarray(dev.download(tensor) if dev is not None and dev.name != "cpu" else tensor)
            if (not arr.flags.owndata or not arr.flags.writeable or name in feeds
                    or any(np.may_share_memory(arr, r) for r in results)):
                arr = arr.copy()
            results.append(arr)
        return results
