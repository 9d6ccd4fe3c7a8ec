"""float32 products on two cores, handed over in compiled code (issue 11, session 10; docs/numba.md,
"The MLP and the transformer on two cores, handed over in compiled code").

At a thread budget of two, fgemm's products (Gemm / MatMul by a constant weight: the MLP's layers, the
transformer's projections and FFN) ran as two shares through the shard pool (``halves.run``): the
worker, spinning in Python's reach, takes the GIL and claims its shard ~20 us after the job is
published, and the caller waits at the end for the worker's Python to report: 40-60 us a job on the
transformer's 0.16 ms projections. Here the int8 pairs' mechanism (``pairs``, ``qpair``) runs them:

- **One helper thread for every float32 product** (``FPairServer``), spinning in a ``nogil`` Numba
  loop (``pair_serve``) on one int64 state word, asleep after ``pairs.IDLE_S`` without a job.
- **Halves reached by address.** Each fgemm driver (variant, tile height, activation) has a compiled
  ``half(desc, side)`` (``half_fn``) whose C wrapper's address is the descriptor's first word, so one
  helper loop serves every driver and the caller's side (``pair_run``) is one compiled function too:
  it publishes the job, runs side 0 through the same address, then claims side 1 itself (the helper
  did not come) or waits for the helper's ``done``.
- **The descriptor** (int64, made once per node and shape, ``descriptor``): the addresses and sizes of
  B's panels, the bias and zero buffers, alpha and the clamp (a float32 side array), the shape, the
  row blocks, K chunk and the cut; A's and the output's addresses are written per call.
- **Sticky halves**: the caller always runs the first half, the helper the second, so each core's L2
  keeps its half of the weights (``COLUMNS``: B's column panels, where B is at least as large as A:
  the MLP's and the transformer's products) or of A (``ROWS``: halves of A's row tiles, where A is
  larger, A read in place). The cut is even: the helper comes within microseconds, so the caller
  needs no lead (halves.LEAD_FLOPS was the pool worker's ~20 us).

Back-off under load as the int8 pairs (``pairs.PairServer``: a stall, unclaimed jobs, the pool's own
back-off). ``KERNELKIT_F32_PAIR=off`` (or ``ON = False``, or ``KERNELKIT_NUMBA_SPIN_US=0``) turns it
off: the shares run through the pool as before.
"""
from __future__ import annotations

import functools
import os
import threading

import numba
import numpy as np

from .. import config, shards
from .._spin import _cycles, _sched_yield
from ..cache import CLOSURE_KEY
from ..config import jit
from . import pairs
from .pairs import _call2, _cas, _load, _pause, _ptr, _store

OPEN, CLAIMED, DONE, TAKEN = pairs.OPEN, pairs.CLAIMED, pairs.DONE, pairs.TAKEN
STATE, DESC, SLOT, AWAKE, JOB, WAITED, STOP = pairs.STATE, pairs.DESC, pairs.SLOT, pairs.AWAKE, pairs.JOB, \
    pairs.WAITED, pairs.STOP
PUBLISHED, CLAIMED_AT, FINISHED_AT = pairs.PUBLISHED, pairs.CLAIMED_AT, pairs.FINISHED_AT
OWN = pairs.OWN  # ctl: cycles the last caller spent on its own half

# desc: the half's address, A (per call: address; its length), lda (0: packed), B's panels, K, M, N, the
# bias and zeros buffers, the output (per call) and its row stride, row-block rows, K chunk, the mode,
# the cut (columns or rows), the row blocks of each side, the float values (alpha, lo, hi, p0, p1)
(FN, AP, AP_N, LDA, BP, BP_N, K, M, N, BIAS, ZEROS, BIAS_N, OUT, OUT_N, LDO, BLOCK, KC, MODE, CUT, BLOCKS0, BLOCKS1,
 FV) = range(22)
NDESC = 22
COLUMNS, ROWS = 0, 1
ENV = "KERNELKIT_F32_PAIR"
ON = True  # False: fgemm's products at two threads go through the pool's shares (halves.run) as before
# The split: "auto" (COLUMNS where B has at least as many values as A, else ROWS where A is read in place),
# "columns" or "rows"
AXIS = "auto"
# A stall of a product's pair backs off only where the one before came within this many seconds (PairServer.result's
# hiccup_s, as rnpair.HICCUP_S for the ResNets' layers and tpair's); 0: every stall backs off (issue 11, session
# 12: for an A/B of the transformer, whose products now pair beside no pool at all)
HICCUP_S = 0.0


def half_fn(driver, key: str):
    """The compiled ``half(desc_address, side) -> 0`` of an fgemm ``driver`` (side 0 the caller's, 1 the
    helper's), cached on disk under ``key``."""

    def half(addr, side):
        d = numba.carray(_ptr(addr), (NDESC,), np.int64)
        fv = numba.carray(_ptr(d[FV]), (5,), np.float32)
        ap = numba.carray(_ptr(d[AP]), (d[AP_N],), np.float32)
        bp = numba.carray(_ptr(d[BP]), (d[BP_N],), np.float32)
        bias = numba.carray(_ptr(d[BIAS]), (d[BIAS_N],), np.float32)
        zeros = numba.carray(_ptr(d[ZEROS]), (d[BIAS_N],), np.float32)
        out = numba.carray(_ptr(d[OUT]), (d[OUT_N],), np.float32)
        k_n, m_n, n_n, lda, ldo, block, kc, cut = d[K], d[M], d[N], d[LDA], d[LDO], d[BLOCK], d[KC], d[CUT]
        alpha, lo, hi, p0, p1 = fv[0], fv[1], fv[2], fv[3], fv[4]
        if d[MODE] == COLUMNS:
            if side == 0:
                driver(ap, lda, bp, k_n, m_n, cut, alpha, bias, zeros, out, ldo, lo, hi, p0, p1, block, 1, kc, 0,
                       d[BLOCKS0])
            else:
                driver(ap, lda, bp[cut * k_n:], k_n, m_n, n_n - cut, alpha, bias[cut:], zeros[cut:], out[cut:], ldo,
                       lo, hi, p0, p1, block, 1, kc, 0, d[BLOCKS1])
        elif side == 0:  # ROWS: A in place (lda > 0), the cut a multiple of the tile height
            driver(ap, lda, bp, k_n, cut, n_n, alpha, bias, zeros, out, ldo, lo, hi, p0, p1, block, 1, kc, 0,
                   d[BLOCKS0])
        else:
            driver(ap[cut * lda:], lda, bp, k_n, m_n - cut, n_n, alpha, bias, zeros, out[cut * ldo:], ldo, lo, hi, p0,
                   p1, block, 1, kc, 0, d[BLOCKS1])
        return 0

    setattr(half, CLOSURE_KEY, key)
    return jit(half)


@functools.cache
def half_address(driver, key: str) -> tuple:
    """(the compiled half, its C address) for ``driver`` (compiled or loaded now)."""
    fn = half_fn(driver, key)
    return fn, pairs.function_address(fn)


@jit
def pair_run(ctl, desc, a, out) -> int:
    """The caller's side of one job (A's values ``a`` and the output ``out``, flat; the rest in
    ``desc``): 1 the helper ran the second half, 2 the caller ran both, 3 another caller holds the slot
    (nothing done)."""
    if not _cas(ctl, SLOT, 0, 1):
        return 3
    desc[AP] = np.int64(a.ctypes.data)
    desc[OUT] = np.int64(out.ctypes.data)
    return pair_job(ctl, desc)


@jit
def pair_job(ctl, desc) -> int:
    """The caller's side of the job ``desc`` once it holds the callers' slot and wrote the per-call
    addresses (``pair_run``'s and cpair's): publishes it, runs side 0 through the half at ``desc[FN]``
    (every family's descriptor starts with its half's address), then claims side 1 itself or waits for
    the helper's; releases the slot. 1 the helper ran the second half, 2 the caller ran both."""
    addr = np.int64(desc.ctypes.data)
    job = ctl[JOB] + 1
    ctl[JOB] = job
    ctl[DESC] = addr
    t0 = _cycles()
    if ctl.shape[0] > FINISHED_AT:  # (the cycle stamps: pairs.PUBLISHED; a shorter ctl has none)
        ctl[PUBLISHED] = t0
    _store(ctl, STATE, job * 4 + OPEN)
    _call2(desc[FN], addr, 0)
    ctl[OWN] = _cycles() - t0
    if _cas(ctl, STATE, job * 4 + OPEN, job * 4 + TAKEN):
        _call2(desc[FN], addr, 1)
        done = 2
        ctl[WAITED] = 0
    else:
        t0 = _cycles()
        while _load(ctl, STATE) != job * 4 + DONE:
            _pause()
        ctl[WAITED] = _cycles() - t0
        done = 1
    _store(ctl, SLOT, 0)
    return done


@jit
def pair_serve(ctl, idle, cap) -> int:
    """The helper's spin: claims and runs the second half of each job published in ``ctl``; returns 0
    after ``idle`` cycles without a job, 2 after ``cap`` cycles in all, 1 when told to stop."""
    start = _cycles()
    last = start
    i = 0
    stamps = ctl.shape[0] > FINISHED_AT  # (pairs.PUBLISHED's stamps; a shorter ctl has none)
    while True:
        s = _load(ctl, STATE)
        if s > 0 and (s & 3) == OPEN and _cas(ctl, STATE, s, s + CLAIMED):
            if stamps:
                ctl[CLAIMED_AT] = _cycles()
            addr = ctl[DESC]
            fn = numba.carray(_ptr(addr), (1,), np.int64)[0]  # FN: the first word of every descriptor
            _call2(fn, addr, 1)
            if stamps:
                ctl[FINISHED_AT] = _cycles()
            _store(ctl, STATE, s + DONE)
            last = _cycles()
            continue
        _sched_yield()
        i += 1
        if (i & 15) == 0:
            if _load(ctl, STOP) != 0:
                return 1
            now = _cycles()
            if now - last > idle:
                return 0
            if now - start > cap:
                return 2


class FPairServer(pairs.PairServer):
    """The float32 products' helper thread (pairs.PairServer: control words, wake, back-off)."""

    name = "f32"

    def stalled(self, strict: bool = False) -> bool:
        """A wait for the helper's half longer than STALL_S plus half the caller's own half (a product's
        halves take 0.01-0.6 ms: the MLP's 64 x 1024 x 1024 ~0.5 ms each, where a few percent of
        imbalance is no sign of a lost core); ``strict`` (cpair's conv halves, 15-150 us): STALL_S."""
        return self.ctl[WAITED] > self.stall + (0 if strict else self.ctl[OWN] // 2)

    def serve(self, ctl, idle, cap):
        return pair_serve(ctl, idle, cap)

    def compile_sides(self):
        """Both loops compiled on the calling thread, with stand-in calls that return at once (the
        caller's finds the slot held, the helper's is told to stop)."""
        held = np.zeros(8, np.int64)
        held[SLOT] = 1
        held[STOP] = 1
        pair_run(held, np.zeros(NDESC, np.int64), np.zeros(1, np.float32), np.zeros(1, np.float32))
        pair_serve(held, 1 << 40, 1 << 40)


_server: list = []
_lock = threading.Lock()


def server() -> FPairServer:
    """The float32 products' helper (one per process)."""
    if not _server:
        with _lock:
            if not _server:
                _server.append(pairs.register(FPairServer(0)))
    return _server[0]


_helper_buffers: dict = {}  # the helper side's buffers by name (one helper thread runs one job at a time)
_helper_kept: list = []  # buffers a descriptor in flight may still point to


def helper_buffer(name: str, size: int) -> np.ndarray:
    """The helper side's float32 buffer ``name`` (a family's scratch: cpair.py's, rnpair.py's) of at
    least ``size`` floats, grown, never freed."""
    buf = _helper_buffers.get(name)
    if buf is None or buf.size < size:
        if buf is not None:
            _helper_kept.append(buf)
        buf = _helper_buffers[name] = config.aligned_empty(max(size, 1), np.float32, 0)  # (HUGE_SLAB: on the
        buf[:] = 0  # slabs, as the caller's thread buffers)
    return buf


def prepare_family(ready: list, lock, address, warm) -> int:
    """A family of halves this helper serves (cpair.py's conv halves, rnpair.py's), made ready on the
    calling thread once a process, as a node's first call compiles its kernels: this module's sides
    (``server().prepare``), the family's compiled half (``address()``: its C address, 0 where there is
    none) and, where there is one, its caller side through a stand-in call (``warm()``). The half's
    address (kept in ``ready``), 0 where there is no pair."""
    if ready:
        return ready[0]
    with lock:
        if ready:
            return ready[0]
        if not server().prepare():
            return 0
        address_now = address()
        if address_now:
            warm()
        ready.append(address_now)
    return ready[0]


def enabled() -> bool:
    """Whether float32 pairs may be made in this process: an x86-64 CPU, compiled code, spinning
    threads allowed (``KERNELKIT_NUMBA_SPIN_US`` not 0) and ``KERNELKIT_F32_PAIR`` not ``off``."""
    setting = os.environ.get(ENV, "").strip().lower()
    return ON and pairs.X86 and not numba.config.DISABLE_JIT and shards.spin_seconds() > 0 and \
        setting not in ("off", "0", "no")


def axis(m_n: int, k_n: int, n_n: int, lda: int) -> int:
    """COLUMNS or ROWS for a product of this shape (``AXIS``; ROWS only with A read in place)."""
    if AXIS == "rows" and lda:
        return ROWS
    if AXIS == "columns" or not lda:
        return COLUMNS
    return ROWS if m_n * k_n > k_n * n_n else COLUMNS


class Descriptor:
    """One product's descriptor and the arrays whose addresses it holds (kept alive beside it)."""

    __slots__ = ("desc", "keep", "mode")

    def __init__(self, desc, keep, mode):
        self.desc, self.keep, self.mode = desc, keep, mode


def descriptor(address: int, mode: int, cut: int, blocks: tuple[int, int], bp, bias, zeros, fvals, shape,
               strides, block: int, kc: int) -> Descriptor:
    """The descriptor of one product: the half at ``address``, ``mode`` and ``cut`` (COLUMNS: the
    caller's columns, a whole number of panels; ROWS: its rows, whole row tiles), the row blocks of
    each side, B's panels, the bias and zeros buffers (padded to whole panels), ``fvals`` (alpha, lo,
    hi, p0, p1), ``shape`` (M, K, N, A's length, the output's length), ``strides`` (lda, ldo), the
    row-block rows and K chunk."""
    fv = np.asarray(fvals, np.float32)
    d = np.zeros(NDESC, np.int64)
    m_n, k_n, n_n, a_len, out_len = shape
    d[FN], d[AP_N], d[LDA] = address, a_len, strides[0]
    d[BP], d[BP_N], d[K], d[M], d[N] = bp.ctypes.data, bp.size, k_n, m_n, n_n
    d[BIAS], d[ZEROS], d[BIAS_N] = bias.ctypes.data, zeros.ctypes.data, bias.size
    d[OUT_N], d[LDO], d[BLOCK], d[KC] = out_len, strides[1], block, kc
    d[MODE], d[CUT], d[BLOCKS0], d[BLOCKS1], d[FV] = mode, cut, blocks[0], blocks[1], fv.ctypes.data
    return Descriptor(d, (bp, bias, zeros, fv), mode)


def run(desc: Descriptor, a_flat, out_flat) -> bool:
    """The product of ``desc`` in two halves where the helper spins (else it is woken, and False: the
    caller runs the product alone); False too where another caller holds the slot."""
    helper = server()
    if not helper.usable():
        helper.asleep()
        return False
    done = pair_run(helper.ctl, desc.desc, a_flat, out_flat)
    if done == 1 or done == 2:
        helper.result(done, False, HICCUP_S)
        return True
    return False


__all__ = ["AWAKE", "COLUMNS", "ROWS", "FPairServer", "descriptor", "enabled", "half_address", "pair_run",
           "pair_serve", "run", "server"]
