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


def _spin(flag, seen, idle, cap, counter):
    """Poll ``flag[0]`` (the job generation) until it differs from ``seen``: 1. Ends with 0 after
    ``idle`` clock units in which neither a job came nor ``flag[1]`` (the callers' heartbeat, bumped
    at every node of a multi-thread session's run) changed, or with 2 after ``cap`` units in all
    (heartbeats kept coming: the caller re-checks the pool's state and spins again). The clock is
    the cycle counter when ``counter``, else the number of polls."""
    start = _cycles() if counter else 0
    last = start
    beat = flag[1]
    i = 0
    while True:
        if flag[0] != seen:
            return 1
        _sched_yield()
        i += 1
        if (i & 15) == 0:
            now = _cycles() if counter else i
            b = flag[1]
            if b != beat:
                beat, last = b, now
            elif now - last > idle:
                break
            if now - start > cap:
                return 1 if flag[0] != seen else 2
    return 1 if flag[0] != seen else 0


def _ticks():
    return _cycles()


spin = checked(numba.njit(nogil=True)(_spin), True)
ticks = checked(numba.njit(nogil=True)(_ticks), True)


def build():
    """(spin, ticks per second; 0 where there is no constant-rate cycle counter: the spin is then
    bounded by its poll count), compiled or loaded from the cache now."""
    spin(np.zeros(3, np.int64), 0, 0, 0, False)
    rate = 0.0
    if platform.machine().lower() in ("x86_64", "amd64"):
        a, t0 = ticks(), time.perf_counter()
        time.sleep(0.002)
        b, t1 = ticks(), time.perf_counter()
        rate = (b - a) / (t1 - t0) if b > a else 0.0
    return spin, rate
