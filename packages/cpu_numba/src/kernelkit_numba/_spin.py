"""The shard pool's polling loop (``shards``), compiled by the first worker that asks: a ``nogil``
Numba function that polls a generation flag with ``sched_yield`` between polls, bounded by the
time-stamp counter and kept going by the callers' heartbeat (issue 11, session 7). Module-level
functions, so that Numba's disk cache serves later processes."""
from __future__ import annotations

import platform
import time

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from .cache import checked


@intrinsic
def _sched_yield(typingctx):
    """libc's sched_yield(2), an external symbol: the code stays cacheable (a ctypes pointer would not)."""
    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []), "sched_yield")
        return builder.call(fn, [])

    return types.int32(), codegen


@intrinsic
def _cycles(typingctx):
    """The cycle counter (the time-stamp counter on x86-64, constant rate)."""
    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(64), []),
                                            "llvm.readcyclecounter")
        return builder.call(fn, [])

    return types.int64(), codegen


def _spin(flag, seen, idle, cap, counter, left, after, beat_idle):
    """Poll ``flag[0]`` (the job generation) until it differs from ``seen``: 1, returned ``after``
    clock units later (the caller that published the job holds the GIL until its first shard's
    kernel releases it; a worker asking for the GIL before then sleeps on CPython's GIL condition and
    wakes tens of microseconds late). Ends with 0 after ``idle`` units without a job, or, once
    ``flag[1]`` (the callers' heartbeat, bumped at every node of a multi-thread session's run) has
    changed, ``beat_idle`` units after its last change (a serial node between two parallel ones may
    take longer than ``idle``), or with 2 after ``cap`` units in all (heartbeats kept coming: the
    worker re-checks the pool's state and spins again). ``left`` > 0: first store it in ``flag[3]``, the job this worker
    has just left, now that the GIL is released (``wait_left``). The clock is the cycle counter
    when ``counter``, else the number of polls."""
    if left > 0:
        flag[3] = left
    start = _cycles() if counter else 0
    last = start
    limit = idle
    beat = flag[1]
    i = 0
    while True:
        if flag[0] != seen:
            break
        _sched_yield()
        i += 1
        if (i & 15) == 0:
            now = _cycles() if counter else i
            b = flag[1]
            if b != beat:
                beat, last, limit = b, now, beat_idle
            elif now - last > limit:
                break
            if now - start > cap:
                return 1 if flag[0] != seen else 2
    if flag[0] == seen:
        return 0
    if after > 0:
        t0 = _cycles() if counter else 0
        j = 0
        while True:
            _sched_yield()
            j += 1
            if (_cycles() - t0 if counter else j) > after:
                break
    return 1


def _wait_left(flag, job, limit, counter):
    """Poll ``flag[3]`` until a worker stores ``job`` there (it has left that job and released the
    GIL: ``_spin``), with ``sched_yield`` between polls: 1; 0 after ``limit`` clock units. The caller
    waits here instead of sleeping on a lock, which woke it tens of microseconds after the worker's
    last shard."""
    start = _cycles() if counter else 0
    i = 0
    while True:
        if flag[3] == job:
            return 1
        _sched_yield()
        i += 1
        if (i & 15) == 0:
            if (_cycles() - start if counter else i) > limit:
                return 1 if flag[3] == job else 0


def _wait_count(count, i, target, limit, counter, after):
    """Poll ``count[i]`` until it reaches ``target`` (every shard of a job's phase has finished:
    ``shards._Job``'s barrier between phases), with ``sched_yield`` between polls: 1, returned
    ``after`` clock units later (the thread that finished the phase holds the GIL until its next
    shard's kernel releases it; asking for it before then sleeps on CPython's GIL condition, as
    ``_spin``'s ``after`` says); 0 after ``limit`` clock units (the thread then sleeps on the
    phase's lock)."""
    start = _cycles() if counter else 0
    j = 0
    while True:
        if count[i] >= target:
            break
        _sched_yield()
        j += 1
        if (j & 15) == 0:
            if (_cycles() - start if counter else j) > limit:
                if count[i] < target:
                    return 0
                break
    if after > 0:
        t0 = _cycles() if counter else 0
        k = 0
        while True:
            _sched_yield()
            k += 1
            if (_cycles() - t0 if counter else k) > after:
                break
    return 1


def _ticks():
    return _cycles()


spin = checked(numba.njit(nogil=True)(_spin), True)
wait_left = checked(numba.njit(nogil=True)(_wait_left), True)
wait_count = checked(numba.njit(nogil=True)(_wait_count), True)
ticks = checked(numba.njit(nogil=True)(_ticks), True)


def build():
    """(spin, ticks per second; 0 where there is no constant-rate cycle counter: the spin is then
    bounded by its poll count, wait_left), compiled or loaded from the cache now, ``wait_count`` too."""
    flag = np.zeros(4, np.int64)
    spin(flag, 0, 0, 0, False, 0, 0, 0)
    wait_left(flag, 0, 0, False)
    wait_count(flag, 0, 0, 0, False, 0)
    rate = 0.0
    if platform.machine().lower() in ("x86_64", "amd64"):
        a, t0 = ticks(), time.perf_counter()
        time.sleep(0.002)
        b, t1 = ticks(), time.perf_counter()
        rate = (b - a) / (t1 - t0) if b > a else 0.0
    return spin, rate, wait_left
