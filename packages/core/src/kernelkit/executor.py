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


def make_runner(step: Step) -> Callable[[list], None]:
    """``run(env)``: the step's call on its input slots, storing its outputs in their slots."""
    call, ins, outs = step.call, step.input_slots, step.output_slots
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
    ``concrete(key)`` computes (slot -> spec, step -> scratch bytes) for a new key."""

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
        self.runners = [_with_frees(make_runner(step), tuple(s for s in step.free if s not in keep))
                        for step in plan.steps]

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
        key = None if self.plan.static else tuple(feeds[name].shape for name, _ in self.inputs)
        pool = self.pool_for(key)
        arena = pool.take()
        try:
            env = arena.template.copy()
            for name, slot in self.inputs:
                env[slot] = feeds[name]
            if self.profiling:
                self._walk_timed(env)
            else:
                self._walk(env)
        except BaseException:
            pool.give(arena)
            raise
        return env, arena, pool

    def finish(self, started, feeds: dict, names: list[str]) -> list[np.ndarray]:
        env, arena, pool = started
        try:
            return self.collect(env, feeds, names)
        finally:
            pool.give(arena)

    def _walk(self, env: list) -> None:
        i = 0
        try:
            for i, run in enumerate(self.runners):  # noqa: B007 - i names the failing step
                run(env)
        except KernelExecutionError:
            raise
        except Exception as exc:  # a kernel's own typed check too: one error class on every device
            raise self._failure(i, env, exc) from exc

    def _walk_timed(self, env: list) -> None:
        steps = self.plan.steps
        i = 0
        try:
            for i, run in enumerate(self.runners):
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
