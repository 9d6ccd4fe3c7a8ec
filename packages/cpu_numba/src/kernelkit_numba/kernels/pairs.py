"""Two halves of one product on two cores, handed over in compiled code: what the int8 pairs
(``qpair``, issue 16, session 9) and the float32 pairs (``fpair``, issue 11, session 10) share.

- **The control words** (``ctl``, int64): the state word (``job * 4 + OPEN | CLAIMED | DONE | TAKEN``),
  the descriptor's address, the callers' slot, whether the helper spins, the last job number, the
  cycles the last caller waited for the helper's half, and a stop flag (tests).
- **Atomics and hints** as LLVM intrinsics (``_cas``, ``_load``, ``_store``, ``_pause``), ``_ptr`` (an
  int64 address as numba.carray's pointer) and ``_call2`` (a call through a C function pointer:
  every pair's half, fpair's (per fgemm driver), cpair's (the conv halves) and qpair's (per int8
  variant), is compiled on its own and reached by address, so one helper loop, fpair's, serves them
  all: one helper thread for every pair since issue 11, session 10, second round).
- **The helper thread** (``PairServer``; its one subclass, fpair's): started at the first pair call, it spins in a
  ``nogil`` Numba loop for ``IDLE_S`` after its last job (``sched_yield`` between polls), then sleeps
  on a condition until a caller wakes it (that caller runs its product alone; a woken helper waits
  ``WAKE_IDLE_S`` for its first job, the length of such a product and more). Its loop and stand-in
  compile calls are its subclass's (``serve``, ``compile_sides``).
- **Back-off under load**: a caller that waited longer than ``STALL_S`` for the helper's half, or
  ``MISSES`` jobs in a row that the awake helper did not claim, stops pairing for a back-off that
  doubles from ``MIN_BACKOFF_S`` to ``MAX_BACKOFF_S`` (reset after ``CALM_S`` without signs; the misses also
  counted over the last ``MISS_WINDOW`` outcomes, issue 11, session 15); the
  shard pool's back-off (``shards.POOL.backed_off``) stops it too. A caller with a hiccup window (the
  ResNets' and the transformer's pairs) backs off only at its ``hiccups``-th stall within it (2), for a
  fixed length where it passes one (rnpair.HICCUPS, rnpair.HICCUP_BACKOFF_S; issue 11, session 13); where it passes
  them, a stall's slack is its own fraction of the caller's half, the back-off is a count of pair calls
  (``SKIP_CALM``), and a stall that the paired calls since the last one paid for is forgotten (rnpair.STALL_SLACK,
  STALL_SKIP, STALL_NET; issue 11, session 15). With ``LONE_SKIP`` a stall back-off is as long as its evidence: a
  lone stall's a short skip of pair calls, a burst's (a second within ``BURST_S``) the long one (issue 11, session 18).
"""
from __future__ import annotations

import atexit
import os
import platform
import threading
import time

import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

from .. import shards
from ..config import jit

# the state word's low bits (the high bits: the job number)
OPEN, CLAIMED, DONE, TAKEN = 0, 1, 2, 3
# ctl: [0] the state word, [1] the descriptor's address, [2] the callers' slot (0 free, 1 held),
# [3] the helper: 0 asleep, 1 spinning, 2 woken, [4] the last job number, [5] cycles the last caller
# waited for the helper's half, [6] stop (tests)
STATE, DESC, SLOT, AWAKE, JOB, WAITED, STOP = range(7)
OWN = 7  # ctl: cycles the last caller spent on its own half (fpair's stall rule)
# ctl's cycle stamps of the last job (issue 11, session 13: where a two-thread run's time goes): [8] the caller
# published it, [9] the helper claimed it, [10] the helper finished its half (a ctl of 8 words, the tests' and the
# stand-in calls', has none)
PUBLISHED, CLAIMED_AT, FINISHED_AT = 8, 9, 10
NCTL = 12
# A list: each pair call that reports its outcome (PairServer.result) appends (perf_counter, done, the caller's
# own half, its wait, the helper's start after the publish, the helper's half; cycles) to it (benchmarks/
# gap_trace.py); None: nothing kept
TRACE = None

IDLE_S = 1e-3  # the helper spins this long after its last job (the pool's BEAT_IDLE_S), then sleeps
# a woken helper spins this long for its first job: the caller that woke it runs that product alone
# meanwhile, and without it a product longer than IDLE_S (the MLP's ~1 ms ones on a slow host) finds the
# helper asleep again at the next product, so that every product of every run wakes it and runs alone
# (issue 11, session 12's call: the MLP's default 1.10x its one thread, 283 wakes and no pair in a block)
WAKE_IDLE_S = 5e-3  # (below CAP_S: one call of the helper's loop)
CAP_S = 0.02  # and returns to Python this often while jobs keep coming
STALL_S = 3e-4  # a caller that waited longer than this for the helper's half: back off
MISSES = 8  # jobs in a row the awake helper did not claim: back off
MIN_BACKOFF_S, MAX_BACKOFF_S, CALM_S = 0.05, 2.0, 1.0
# The hiccup rule's defaults (a caller's ``hiccup_s`` > 0: the ResNets' pairs, rnpair.py, and the transformer's,
# tpair.py): a stall backs off only as the ``hiccups``-th within hiccup_s (2: a stall and the one before it; one
# alone is a vCPU's hiccup), and such a back-off lasts ``fixed_s`` where that is > 0, never doubling (0: it doubles
# from MIN_BACKOFF_S as every other). rnpair passes its own (rnpair.HICCUPS, rnpair.HICCUP_BACKOFF_S).
HICCUPS = 2
# A stall back-off counted in pair calls (a caller's ``skip`` > 0, rnpair.STALL_SKIP; issue 11, session 15): where the
# stall rule fires, the next ``skip`` pair calls (of any family) run on the caller, the helper left to sleep, and no
# time-based back-off (nor the shard pool's, rnpair.follow) starts. A fire within SKIP_CALM times the last skip's
# length of pair calls after its end doubles the length (up to SKIP_MAX times ``skip``: a helper that keeps
# stalling, one without its core, is left alone for longer and longer); a later one starts again at ``skip``.
SKIP_CALM = 4
SKIP_MAX = 64
# Misses counted over the last MISS_WINDOW pair outcomes (issue 11, session 15; docs/numba.md, "Layers alone under
# load"): where MISSES of them were jobs the awake helper did not claim, the pairs back off, as MISSES in a row do.
# On the Xeon under load (a busy process on one of the two CPUs) the helper sat on the caller's CPU, beside it: it
# claimed a job now and then (4-10 of the ~21 pair calls a ResNet-18 run) and missed the rest, each claim reset the
# run of misses, so no back-off came in a whole block, and the caller waited on the run queue for a quarter of
# its time. 0: off (MISSES in a row only). On (16): Xeon, session 15's second call, ResNet-18 under load default /
# this 0.99 (0.86-1.28; its blocks missed 8 jobs, never more), with shards.ShardPool.HOLD_S 0.97; quiet (with HOLD_S
# and rnpair.ALONE_SERIAL) default / them 1.03 (ResNet-18), 1.00 (ResNet-50).
MISS_WINDOW = 16
# A stall back-off as long as the evidence (issue 11, session 18; docs/numba.md, "A stall back-off as long as its
# evidence"). On the quiet Xeon a stall is mostly the host's hiccup, not a taken core: in session 17's call F3 the MLP's
# products (fpair's rule: every stall backs off, 50 ms doubling while they come within CALM_S) ran 1.48x onnxruntime's
# two threads with 7 stall back-offs in 6 blocks, 0.99-1.23 in the calls with few. LONE_SKIP > 0: a back-off that a
# stall fires (any family's rule: fpair's, rnpair's and tpair's hiccup rules; a caller's own ``skip`` keeps its rule)
# is, where no stall fired one within BURST_S before it (a lone stall), the next LONE_SKIP pair calls on the caller (the
# helper left asleep; no back-off in time, so none of the shard pool's either: rnpair.follow and tpair see none); a
# second within BURST_S (a burst, or a taken core that stalls call after call) fires the family's own back-off (in
# time, doubling or fixed) as before. The helper's misses (MISSES, MISS_WINDOW: the sign of a taken core under load)
# back off in time as before. 0: off, every fire is the family's back-off. Off: on the Xeon (session 18's call, quiet
# CPUs 0,1, LONE_SKIP=8) it took the MLP's time in runs with a product alone from 11.0 % to 1.6 % (the default's 11
# stall back-offs in 12 blocks, 37-127 calls refused each), but default / it read 0.97 (0.91-1.42) on the MLP and 1.04
# on ResNet-18, within the spread between processes; under load no stall fired (0 in 42 blocks): it never acts there.
LONE_SKIP = 0
BURST_S = 0.1
X86 = platform.machine().lower() in ("x86_64", "amd64")


def _slot_ptr(context, builder, arr_ty, arr, idx):
    ary = context.make_array(arr_ty)(context, builder, arr)
    return builder.gep(ary.data, [idx])


@intrinsic
def _cas(typingctx, arr, idx, expected, new):
    """Compare-and-swap of the int64 ``arr[idx]`` (sequentially consistent): whether it was ``expected``."""
    def codegen(context, builder, sig, args):
        ptr = _slot_ptr(context, builder, sig.args[0], args[0], args[1])
        pair = builder.cmpxchg(ptr, args[2], args[3], "seq_cst", "seq_cst")
        return builder.extract_value(pair, 1)

    return types.boolean(arr, idx, types.int64, types.int64), codegen


@intrinsic
def _load(typingctx, arr, idx):
    """Atomic load of the int64 ``arr[idx]`` (acquire)."""
    def codegen(context, builder, sig, args):
        return builder.load_atomic(_slot_ptr(context, builder, sig.args[0], args[0], args[1]), "acquire", 8)

    return types.int64(arr, idx), codegen


@intrinsic
def _store(typingctx, arr, idx, value):
    """Atomic store of ``value`` into the int64 ``arr[idx]`` (release: earlier stores are seen first)."""
    def codegen(context, builder, sig, args):
        builder.store_atomic(args[2], _slot_ptr(context, builder, sig.args[0], args[0], args[1]), "release", 8)
        return context.get_dummy_value()

    return types.none(arr, idx, types.int64), codegen


@intrinsic
def _pause(typingctx):
    """x86's ``pause`` (a spin-wait hint: LLVM's llvm.x86.sse2.pause)."""
    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse2.pause")
        builder.call(fn, [])
        return context.get_dummy_value()

    return types.none(), codegen


@intrinsic
def _ptr(typingctx, addr):
    """The int64 ``addr`` as a ``void *`` (numba.carray's pointer)."""
    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], ir.IntType(8).as_pointer())

    return types.voidptr(types.int64), codegen


@intrinsic
def _call2(typingctx, fn, a, b):
    """``fn(a, b)`` for ``fn`` the address of a C function ``int64 (int64, int64)`` (a jitted function's
    C wrapper: ``function_address``)."""
    def codegen(context, builder, sig, args):
        i64 = ir.IntType(64)
        ptr = builder.inttoptr(args[0], ir.FunctionType(i64, [i64, i64]).as_pointer())
        return builder.call(ptr, [args[1], args[2]])

    return types.int64(types.int64, types.int64, types.int64), codegen


@jit
def claim_ends(d, at, side) -> int:
    """The next item of the two-ended claim word ``d[at]`` (low 32 bits: the front's next item; high 32
    bits: the end of what is left), side 0 taking from the front and side 1 from the back; -1 where none
    is left (cpair's images with DYNAMIC, rnpair's chunks with DYNAMIC)."""
    while True:
        word = _load(d, at)
        lo, hi = word & 0xFFFFFFFF, word >> 32
        if lo >= hi:
            return -1
        if side == 0:
            if _cas(d, at, word, word + 1):
                return lo
        elif _cas(d, at, word, word - (1 << 32)):
            return hi - 1


@jit
def count_up(d, at) -> None:
    """``d[at] += 1`` atomically (a CAS loop): a unit of a job's first phase done (``claim_units``)."""
    while True:
        word = _load(d, at)
        if _cas(d, at, word, word + 1):
            return


@jit
def wait_count(d, at, n) -> None:
    """Spin until ``d[at]`` reaches ``n``: every unit of a job's first phase done by whichever side claimed it
    (the other side runs at most the one unit it holds: a side that never came claimed none)."""
    while _load(d, at) < n:
        _pause()


def function_address(dispatcher) -> int:
    """The address of the C wrapper of ``dispatcher`` (a jitted ``f(int64, int64) -> int64``), compiled
    (or loaded from the disk cache) for that signature now; 0 where there is none (NUMBA_DISABLE_JIT)."""
    if not hasattr(dispatcher, "compile"):
        return 0
    from numba.core.typing import signature
    from numba.experimental.function_type import _get_wrapper_address

    sig = signature(types.int64, types.int64, types.int64)
    dispatcher.compile(sig.args)
    return int(_get_wrapper_address(dispatcher, sig))


_rate: list = []


def cycle_rate() -> float:
    """The cycle counter's ticks per second, measured once (0 where it cannot be: no pairs)."""
    if not _rate:
        rate = 0.0
        if X86:
            from .._spin import ticks

            a, t0 = ticks(), time.perf_counter()
            time.sleep(0.002)
            b, t1 = ticks(), time.perf_counter()
            rate = (b - a) / (t1 - t0) if b > a else 0.0
        _rate.append(rate)
    return _rate[0]


class PairServer:
    """A helper thread and its control words (module doc; one per process: fpair's). Subclasses
    give ``serve(ctl, idle, cap)`` (the helper's compiled loop: 0 idle, 1 stopped, 2 the cap) and
    ``compile_sides()`` (both sides compiled on the calling thread, with stand-in calls)."""

    name = "pair"

    def __init__(self, kind: int):
        self.kind = kind
        self.ctl = np.zeros(NCTL, np.int64)
        self._cond = threading.Condition(threading.Lock())
        self._want = False
        self._thread: threading.Thread | None = None
        self.until = 0.0  # no pairing before this (perf_counter; a back-off)
        self._backoff = MIN_BACKOFF_S
        self._misses = 0
        self._recent = 0  # the last MISS_WINDOW outcomes, a bit each (1: a miss), the newest lowest
        self._stalls: list[float] = []  # the last HICCUPS - 1 stalls' times (the hiccup rule)
        self.fixed = 0.0  # the last back-off's length where the hiccup rule fired it with a fixed length, else 0
        self.ready = False  # both sides compiled for this variant (prepare)
        self.idle = self.cap = self.wake_idle = 0
        self.stall = 1 << 62
        self.skip = 0  # pair calls still to run on the caller (a stall back-off counted in calls: SKIP_CALM)
        self._skip_len = 0  # the last such back-off's length in calls (0: none yet)
        self._since = 0  # pair calls asked for (usable) since it ended
        self._net = 0  # cycles the paired calls since the last stall saved (own halves less waits: result's net)
        self._fired = -1e9  # perf_counter of the last stall fire (LONE_SKIP's burst window)
        self.family = ""  # the last reporting caller's rule (traces): "f" fpair's, "h" a hiccup window, "r" rnpair's
        # (stall_backoffs: the back-offs that stalls fired, the rest are MISSES'; skips: the stall back-offs
        # counted in calls, which are neither; paid: stalls that pairing had paid for, result's net; lone: the
        # stall fires that LONE_SKIP made a short skip; refused: pair calls asked for within a back-off or skip)
        self.stats = {"paired": 0, "alone": 0, "stalls": 0, "backoffs": 0, "stall_backoffs": 0, "wakes": 0,
                      "skips": 0, "paid": 0, "lone": 0, "refused": 0}

    def serve(self, ctl, idle: int, cap: int) -> int:
        raise NotImplementedError

    def compile_sides(self) -> None:
        raise NotImplementedError

    def wake(self) -> None:
        """Start the helper's spin (its thread at the first call; after ``prepare``): the caller runs
        this product alone."""
        ctl = self.ctl
        if ctl[AWAKE] != 0 or not self.ready:
            return
        ctl[AWAKE] = 2
        self.stats["wakes"] += 1
        with self._cond:
            self._want = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name=f"kernelkit-{self.name}-pair-{self.kind}",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()

    def prepare(self) -> bool:
        """Compile (or load) both sides for this variant on the calling thread, as a node's first call
        compiles its kernels (not on the helper's thread while the model runs). False where there is
        no cycle counter to bound the helper's spin."""
        if self.ready:
            return True
        rate = cycle_rate()
        if rate <= 0:
            return False
        self.compile_sides()
        self.idle, self.cap, self.stall = int(IDLE_S * rate), int(CAP_S * rate), int(STALL_S * rate)
        self.wake_idle = int(WAKE_IDLE_S * rate)
        self.ready = True
        return True

    def _serve(self) -> None:
        ctl = self.ctl
        while True:
            with self._cond:
                while not self._want:
                    ctl[AWAKE] = 0
                    self._cond.wait()
                self._want = False
            ctl[AWAKE] = 1
            idle = max(self.idle, self.wake_idle)  # the first job comes after the waking caller's product
            while self.serve(ctl, idle, self.cap) == 2:
                idle = self.idle
            if ctl[STOP]:
                ctl[AWAKE] = 0
                return

    def result(self, done: int, strict: bool = False, hiccup_s: float = 0.0, stalled: bool | None = None,
               hiccups: int = HICCUPS, fixed_s: float = 0.0, slack: float | None = None, skip: int = 0,
               net: bool = False) -> None:
        """Count a pair call's outcome (1 paired, 2 alone) and back off on the signs of a helper without a
        core (``strict``: the stall rule without a subclass's slack, ``stalled``; ``hiccup_s`` > 0: a stall
        backs off only as the ``hiccups``-th within that many seconds, the shard pool's STALL_PAIR_S rule:
        one alone is a vCPU's hiccup, rnpair.py; such a back-off lasts ``fixed_s`` where that is > 0, without
        doubling; ``stalled``: the caller's own verdict, rnpair's claimed chunks; ``slack``: where ``stalled``
        is None, a stall is a wait past STALL_S plus that fraction of the caller's own half, instead of the
        server's rule; ``skip`` > 0: a stall back-off is the next ``skip`` pair calls instead, SKIP_CALM; ``net``: a
        stall counts toward a back-off only where the paired calls since the last stall, it included, lost time:
        the sum of the caller's own halves less its waits (what pairing saved against the caller alone, a half
        each) below 0; else it is ``paid``, and forgotten)."""
        self.family = "r" if slack is not None else "h" if hiccup_s else "f"
        if done == 1 and stalled is None and slack is not None:
            stalled = bool(self.ctl[WAITED] > self.stall + int(slack * self.ctl[OWN]))
        if TRACE is not None:
            c = self.ctl
            TRACE.append((time.perf_counter(), done, int(c[OWN]), int(c[WAITED]), int(c[CLAIMED_AT] - c[PUBLISHED]),
                          int(c[FINISHED_AT] - c[CLAIMED_AT])) if done == 1 else
                         (time.perf_counter(), done, int(c[OWN]), 0, 0, 0))
        if done in (1, 2) and MISS_WINDOW > 0:
            self._recent = ((self._recent << 1) | (done == 2)) & ((1 << MISS_WINDOW) - 1)
            if done == 2 and bin(self._recent).count("1") >= MISSES:
                self.stats["alone"] += 1
                self._back_off()
                return
        if done == 1:
            self.stats["paired"] += 1
            self._misses = 0
            if net:
                self._net += int(self.ctl[OWN]) - int(self.ctl[WAITED])
            if self.stalled(strict) if stalled is None else stalled:
                self.stats["stalls"] += 1
                if net:
                    paid, self._net = self._net >= 0, 0
                    if paid:
                        self.stats["paid"] += 1
                        return
                if not hiccup_s:
                    self._stall_back_off(0.0, skip)
                    return
                now = time.perf_counter()
                recent = [t for t in self._stalls if now - t <= hiccup_s]
                recent.append(now)
                keep = max(hiccups, 1) - 1
                self._stalls = recent[-keep:] if keep else []
                if len(recent) >= hiccups:
                    self._stall_back_off(fixed_s, skip)
        elif done == 2:
            self.stats["alone"] += 1
            self._misses += 1
            if self._misses >= MISSES:
                self._back_off()

    def _stall_back_off(self, fixed_s: float, skip: int) -> None:
        """The back-off a stall fired: the next pair calls on the caller where ``skip`` > 0 (SKIP_CALM), else
        ``_back_off(fixed_s)``; with LONE_SKIP, a fire with none within BURST_S before it: LONE_SKIP calls skipped."""
        if skip <= 0 and LONE_SKIP > 0:
            now = time.perf_counter()
            lone, self._fired = now - self._fired > BURST_S, now
            if lone:
                self.skip, self._misses = max(self.skip, int(LONE_SKIP)), 0
                self.stats["lone"] += 1
                return
        if skip <= 0:
            self.stats["stall_backoffs"] += 1
            self._back_off(fixed_s)
            return
        calm = not self._skip_len or self._since > SKIP_CALM * self._skip_len
        self._skip_len = skip if calm else min(2 * self._skip_len, SKIP_MAX * skip)
        self.skip, self._since, self._misses = self._skip_len, 0, 0
        self.stats["skips"] += 1

    def stalled(self, strict: bool = False) -> bool:
        """Whether the last paired call waited too long for the helper's half (a sign that the helper
        lost its core mid-half): longer than ``STALL_S``."""
        return self.ctl[WAITED] > self.stall

    def _back_off(self, seconds: float = 0.0) -> None:
        """No pairing for the doubling back-off (module doc), or for ``seconds`` where that is > 0 (the hiccup
        rule's ``fixed_s``: the doubling state stays as it was)."""
        now = time.perf_counter()
        if seconds > 0:
            self.until = now + seconds
        else:
            calm = now - self.until > CALM_S
            self._backoff = MIN_BACKOFF_S if calm else min(2 * self._backoff, MAX_BACKOFF_S)
            self.until = now + self._backoff
        self.fixed = max(seconds, 0.0)
        self._misses = self._recent = 0
        self.stats["backoffs"] += 1

    def asleep(self) -> None:
        """A caller found the helper not spinning: wake it unless it is waking or backed off."""
        if self.ctl[AWAKE] == 0 and not self.skip and not (self.until and time.perf_counter() < self.until) and \
                not shards.POOL.backed_off():
            self.wake()

    def usable(self) -> bool:
        """Whether a pair call may be made now (the helper spinning, no back-off here or in the pool); a call
        within a back-off counted in calls (``skip``) uses one of them up."""
        if self.skip > 0:
            self.skip -= 1
            self.stats["refused"] += 1
            return False
        self._since += 1
        if self.until and time.perf_counter() < self.until:
            self.stats["refused"] += 1
            return False
        return self.ctl[AWAKE] == 1 and not shards.POOL.backed_off()

    def reset_after_fork(self) -> None:
        """In a forked child: the thread did not come along; a new one starts when asked."""
        ready, idle, cap, stall = self.ready, self.idle, self.cap, self.stall
        PairServer.__init__(self, self.kind)
        self.ready, self.idle, self.cap, self.stall = ready, idle, cap, stall


_registered: list[PairServer] = []
_lock = threading.Lock()


def register(server: PairServer) -> PairServer:
    """Keep ``server`` for the after-fork reset; returns it."""
    with _lock:
        _registered.append(server)
    return server


def _after_fork() -> None:
    for s in list(_registered):
        s.reset_after_fork()


def _stop_all() -> None:
    """At exit: tell every helper to leave its compiled loop (at its next poll), so that none is still
    reading its control words while the interpreter tears the arrays down."""
    for s in list(_registered):
        s.ctl[STOP] = 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
atexit.register(_stop_all)
