"""Batch-1 int8 products on two cores: one DynamicQuantizeMatMul of a few rows cut into two halves of
B's columns, the calling thread's and a spinning helper's, handed over in compiled code (issue 16,
session 9; docs/quantization.md, "Two threads for the last int8 ratios").

The shard pool (``shards``) hands a job over in Python: on the 2-core box a two-shard batch-1
product took 22.8 us through it against 11.5 us on one thread (the worker waits ``CLAIM_AFTER_S``
for the GIL, then runs Python to claim its shard). Here the hand-over never leaves compiled code:

- **One helper thread for every pair** (fpair's ``FPairServer``, since issue 11, session 10, second
  round; one per variant before), started at the first pair call, spins in a ``nogil`` Numba loop
  (``fpair.pair_serve``) on one int64 state word, ``sched_yield`` between polls, for ``IDLE_S`` after
  its last job (a model's products are tens of microseconds apart, consecutive runs too), then sleeps
  on a condition until a caller wakes it (a caller that finds it asleep runs the product alone that
  time). It reaches each variant's half by address: the descriptor's first word (``FN``) is the C
  address of that variant's ``half_at`` (a by_kind copy, ``half_address``), as fgemm's and cpair's.
- **The job** is a per-node int64 descriptor (``desc``): the addresses and sizes of A, the output and
  B's packed panels, column sums, zero points, scales and bias (made once at bind, A's and the
  output's written per call) and the micro-kernel's integer arguments; the helper rebuilds the arrays
  from it (``numba.carray``). The caller (``pair_run``) stores the descriptor's address, publishes the
  job as ``job * 4`` (open) with a release store, runs the first half of B's column groups, then
  either claims the second half itself (compare-and-swap ``open -> taken``: the helper did not come)
  or waits for the helper's ``done``. The helper claims with ``open -> claimed``. One word, increasing
  job numbers: nothing is run twice or left out, and a late helper finds nothing to claim.
- **Sticky halves**: the caller always runs the lower column groups and the helper the upper ones, so
  each core's L2 keeps its half of the weights from run to run (the batch-1 MLP's 1.85 MB of int8
  weights against a core's 1-2 MB of L2).
- Each half is ``qpack.dq_matmul_panels`` (the column shards' kernel, bit for bit the one-thread
  product): A's range and quantized row on each side, its panels' product and epilogue.

Safety under load: a caller that waited longer than ``STALL_S`` for the helper's half (the helper
lost its core mid-half), or found ``MISSES`` jobs in a row unclaimed although the helper was awake
(it has no core), stops pairing for a back-off (doubling from 50 ms to 2 s; qgemm's ``result(done,
strict=True)``: without the slack that fgemm's products give the caller's own half); the shard
pool's own back-off (``shards.POOL.backed_off``) stops it too. ``KERNELKIT_NUMBA_SPIN_US=0`` (no spinning
threads) or ``KERNELKIT_INT8_PAIR=off`` turn it off.

Products of more rows (the transformer's 128-row products) can run as two halves of A's row blocks
(ROWS: the caller finds A's range, scale and zero point first, then each side runs
``qpack.dq_matmul_rows`` over its blocks with the whole epilogue, parts, residual, activation and
norm). By default since the Xeon's A/B (session 9, the int8 transformer at two threads, alternating
processes: 3.79-4.39 ms with the row halves against 5.44-6.23 without, four pairs);
``KERNELKIT_INT8_PAIR=few`` pairs the few-row products only.
"""
from __future__ import annotations

import os
import threading

import numba
import numpy as np

from .. import shards
from .._spin import _cycles
from ..by_kind import by_kind, kind_taking
from ..config import jit
from . import pairs, qpack
from .pairs import _cas, _load, _pause, _ptr, _store, cycle_rate  # noqa: F401 (cycle_rate: qpair's name too)

# the control words, atomics, helper thread and back-off are shared with fpair.py (pairs.py)
OPEN, CLAIMED, DONE, TAKEN = pairs.OPEN, pairs.CLAIMED, pairs.DONE, pairs.TAKEN
STATE, DESC, SLOT, AWAKE, JOB, WAITED, STOP = pairs.STATE, pairs.DESC, pairs.SLOT, pairs.AWAKE, pairs.JOB, \
    pairs.WAITED, pairs.STOP
IDLE_S, CAP_S, STALL_S, MISSES = pairs.IDLE_S, pairs.CAP_S, pairs.STALL_S, pairs.MISSES
MIN_BACKOFF_S, MAX_BACKOFF_S, CALM_S, X86 = pairs.MIN_BACKOFF_S, pairs.MAX_BACKOFF_S, pairs.CALM_S, pairs.X86
# desc: addresses, sizes and the micro-kernel's integer arguments
(FN, X2, M, K, FLAT, BDATA, BDATA_N, COLSUMS, ZB, BSCALE, BSCALE_N, BIAS, BIAS_N, MR, KQ, NPANELS, N, HAS_ZB,
 HAS_BIAS, ACT, GROUPS, SPLIT,
 # row blocks (MODE ROWS): A's zero point, the scratch of mult (N float32) and of [a_scale, norm epsilon]
 # (float64), the column parts' bounds, the residual, the norm's scale and bias, their flags, block rows
 MODE, ZP, MULT, FVALS, BOUNDS, BOUNDS_N, RES, HAS_RES, NSCALE, NBIAS, HAS_NORM, BLOCK) = range(34)
NDESC = 34  # FN: the address of this variant's half_at (fpair's helper calls it: every pair descriptor starts so)
COLUMNS, ROWS = 0, 1  # MODE: halves of B's column groups (a few rows of A), or of A's row blocks

ENV = "KERNELKIT_INT8_PAIR"


kind_taking(qpack.dq_matmul_panels)  # this module's by_kind copies call its copy for their kind


@jit
def _half(kind, d, side) -> bool:
    """One half of the job ``d`` (a descriptor). COLUMNS: column groups [0, split) for side 0, [split,
    groups) for side 1, through qpack.dq_matmul_panels (False when A holds a NaN or an infinity).
    ROWS: row blocks [0, split) or [split, groups) through qpack.dq_matmul_rows, with A's scale, zero
    point and mult that the caller found (dq_params) and the whole epilogue (parts, residual,
    activation, norm: each row block holds whole rows)."""
    m_n, k_n, n_n = d[M], d[K], d[N]
    x2 = numba.carray(_ptr(d[X2]), (m_n, k_n), np.float32)
    flat = numba.carray(_ptr(d[FLAT]), (m_n * n_n,), np.float32)
    bdata = numba.carray(_ptr(d[BDATA]), (d[BDATA_N],), np.int8)
    col_sums = numba.carray(_ptr(d[COLSUMS]), (n_n,), np.int32)
    zb = numba.carray(_ptr(d[ZB]), (n_n,), np.int32)
    b_scale = numba.carray(_ptr(d[BSCALE]), (d[BSCALE_N],), np.float32)
    bias = numba.carray(_ptr(d[BIAS]), (d[BIAS_N],), np.float32)
    g0 = 0 if side == 0 else d[SPLIT]
    g1 = d[SPLIT] if side == 0 else d[GROUPS]
    if d[MODE] == ROWS:
        mult = numba.carray(_ptr(d[MULT]), (d[BSCALE_N],), np.float32)
        fvals = numba.carray(_ptr(d[FVALS]), (2,), np.float64)
        bounds = numba.carray(_ptr(d[BOUNDS]), (d[BOUNDS_N],), np.int64)
        has_res = d[HAS_RES] != 0
        res = numba.carray(_ptr(d[RES]), (m_n if has_res else 1, n_n if has_res else 1), np.float32)
        has_norm = d[HAS_NORM] != 0
        nscale = numba.carray(_ptr(d[NSCALE]), (n_n if has_norm else 1,), np.float32)
        nbias = numba.carray(_ptr(d[NBIAS]), (n_n if has_norm else 1,), np.float32)
        qpack.dq_matmul_rows(kind, x2, np.float32(fvals[0]), np.uint8(d[ZP]), d[MR], bdata, d[KQ], d[NPANELS], n_n,
                             col_sums, k_n, zb, d[HAS_ZB] != 0, mult, d[BSCALE_N] > 1, bias, d[HAS_BIAS] != 0, flat,
                             bounds, res, has_res, d[ACT], nscale, nbias, fvals[1], has_norm, d[BLOCK], g0, g1)
        return True
    bounds = np.empty(2, np.int64)
    bounds[0] = 0
    bounds[1] = n_n
    res = np.zeros((1, 1), np.float32)
    ok = np.ones(1, np.bool_)
    qpack.dq_matmul_panels(kind, x2, d[MR], bdata, d[KQ], d[NPANELS], n_n, col_sums, k_n, zb, d[HAS_ZB] != 0, b_scale,
                           bias, d[HAS_BIAS] != 0, flat, bounds, res, False, d[ACT], ok, g0, g1)
    return ok[0]


kind_taking(_half)


@jit
def _pair_run(kind, ctl, desc, x2, flat, res) -> int:
    """The caller's side of one job (A ``x2``, output ``flat``, the residual ``res`` in ROWS mode where
    the descriptor says so; the rest in ``desc``): 1 the helper ran the second half, 2 the caller ran
    both, 0 A holds a NaN or an infinity (nothing usable written: the caller's general path), 3
    another caller holds the slot (nothing done)."""
    if not _cas(ctl, SLOT, 0, 1):
        return 3
    desc[X2] = np.int64(x2.ctypes.data)
    desc[M] = x2.shape[0]
    desc[FLAT] = np.int64(flat.ctypes.data)
    if desc[MODE] == ROWS:  # A's range, scale, zero point and mult once, before the halves
        mult = numba.carray(_ptr(desc[MULT]), (desc[BSCALE_N],), np.float32)
        b_scale = numba.carray(_ptr(desc[BSCALE]), (desc[BSCALE_N],), np.float32)
        finite, scale, zp = qpack.dq_params(x2, b_scale, mult)
        if not finite:
            _store(ctl, SLOT, 0)
            return 0
        fvals = numba.carray(_ptr(desc[FVALS]), (2,), np.float64)
        fvals[0] = scale
        desc[ZP] = zp
        desc[RES] = np.int64(res.ctypes.data)
    job = ctl[JOB] + 1
    ctl[JOB] = job
    ctl[DESC] = np.int64(desc.ctypes.data)
    _store(ctl, STATE, job * 4 + OPEN)
    ok = _half(kind, desc, 0)
    if _cas(ctl, STATE, job * 4 + OPEN, job * 4 + TAKEN):
        _half(kind, desc, 1)
        done = 2
        ctl[WAITED] = 0
    else:
        t0 = _cycles()
        while _load(ctl, STATE) != job * 4 + DONE:
            _pause()
        ctl[WAITED] = _cycles() - t0
        done = 1
    _store(ctl, SLOT, 0)
    return done if ok else 0


@jit
def _half_at(kind, addr, side) -> int:
    """``_half`` of the descriptor at ``addr`` as a C function ``int64 (int64, int64)`` for fpair's
    helper loop (1 done, 0 A not finite: the caller's side finds that on its own half)."""
    d = numba.carray(_ptr(addr), (NDESC,), np.int64)
    return 1 if _half(kind, d, side) else 0


pair_run = by_kind(_pair_run)
half_at = by_kind(_half_at)
_addresses: dict[int, int] = {}
_lock = threading.Lock()


def half_address(kind: int) -> int:
    """The C address of variant ``kind``'s ``half_at`` (compiled or loaded now), 0 where there is none."""
    address = _addresses.get(kind)
    if address is None:
        with _lock:
            address = _addresses.get(kind)
            if address is None:
                from ..by_kind import specialize

                address = _addresses[kind] = pairs.function_address(specialize(half_at, kind))
    return address


def server(kind: int = 0) -> pairs.PairServer:
    """The helper that runs the int8 halves of every variant: fpair's, the one helper thread for every
    pair (issue 11, session 10, second round; one per variant before)."""
    from . import fpair

    return fpair.server()


def prepare(kind: int) -> bool:
    """The helper's sides (fpair's) and variant ``kind``'s caller side compiled (or loaded) on the
    calling thread, as a node's first call compiles its kernels, the caller's with a stand-in call that
    finds the slot held; False where there is no cycle counter or no compiled half."""
    helper = server(kind)
    if not helper.prepare() or not half_address(kind):
        return False
    held = np.zeros(8, np.int64)
    held[SLOT] = 1
    held[STOP] = 1
    stand_in = np.zeros((1, 1), np.float32)
    stand_in.setflags(write=False)
    pair_run(kind, held, np.zeros(NDESC, np.int64), stand_in, np.zeros(1, np.float32), NO_RES)
    return True


def _setting() -> str:
    return os.environ.get(ENV, "").strip().lower() or "auto"


def enabled() -> bool:
    """Whether pairs may be made in this process: an x86-64 CPU, spinning threads allowed
    (``KERNELKIT_NUMBA_SPIN_US`` not 0) and ``KERNELKIT_INT8_PAIR`` not ``off``."""
    return X86 and shards.spin_seconds() > 0 and _setting() not in ("off", "0", "no")


def rows_enabled() -> bool:
    """Whether products of more rows pair their row blocks too: yes by default (``auto``, or
    ``rows``); ``KERNELKIT_INT8_PAIR=few`` pairs the few-row products only."""
    return _setting() in ("auto", "rows")


NO_RES = np.zeros((1, 1), np.float32)  # the residual argument where there is none (read-only, as a real
NO_RES.setflags(write=False)  # residual is passed: one compiled signature)


def descriptor(head, x2_shape, act: int, rows=None):
    """The int64 descriptor of one bound product (qgemm.small_dynamic's ``head``: kind, mr, B's panels,
    kq, panels, N, column sums, K, zero points, has_zp, B scales, bias, has_bias) and the arrays whose
    addresses it holds (kept alive beside it), or None where the product does not split in two.
    ``rows``: (block rows, column bounds, has_res, norm scale, norm bias, epsilon, has_norm) for halves
    of A's row blocks (ROWS); None: halves of B's column groups (COLUMNS, a few rows)."""
    kind, mr, bdata, kq, n_panels, n, col_sums, k, zb, has_zb, b_scale, bias, has_bias = head
    if rows is None:
        groups = -(-n_panels // qpack.GROUP_PANELS)
    else:
        groups = -(-x2_shape[0] // rows[0])
    if groups < 2:
        return None
    arrays = tuple(np.ascontiguousarray(v) for v in (bdata, col_sums, zb, b_scale, bias))
    bdata, col_sums, zb, b_scale, bias = arrays
    if bdata.dtype != np.int8 or col_sums.dtype != np.int32 or zb.dtype != np.int32 or \
            b_scale.dtype != np.float32 or bias.dtype != np.float32 or zb.shape[0] != n or col_sums.shape[0] != n:
        return None
    d = np.zeros(NDESC, np.int64)
    d[FN] = half_address(kind)
    if not d[FN]:
        return None
    if rows is not None:
        block, bounds, has_res, nscale, nbias, eps, has_norm = rows
        mult = np.zeros(b_scale.size, np.float32)
        fvals = np.array([0.0, eps], np.float64)
        bounds = np.ascontiguousarray(bounds, np.int64)
        nscale = np.ascontiguousarray(nscale, np.float32)
        nbias = np.ascontiguousarray(nbias, np.float32)
        if has_norm and (nscale.size != n or nbias.size != n):
            return None
        arrays += (mult, fvals, bounds, nscale, nbias)
        d[MODE], d[MULT], d[FVALS] = ROWS, mult.ctypes.data, fvals.ctypes.data
        d[BOUNDS], d[BOUNDS_N] = bounds.ctypes.data, bounds.size
        d[HAS_RES], d[NSCALE], d[NBIAS], d[HAS_NORM], d[BLOCK] = int(has_res), nscale.ctypes.data, \
            nbias.ctypes.data, int(has_norm), block
    d[M], d[K] = x2_shape
    d[BDATA], d[BDATA_N] = bdata.ctypes.data, bdata.size
    d[COLSUMS], d[ZB] = col_sums.ctypes.data, zb.ctypes.data
    d[BSCALE], d[BSCALE_N] = b_scale.ctypes.data, b_scale.size
    d[BIAS], d[BIAS_N] = bias.ctypes.data, bias.size
    d[MR], d[KQ], d[NPANELS], d[N] = mr, kq, n_panels, n
    d[HAS_ZB], d[HAS_BIAS], d[ACT] = int(has_zb), int(has_bias), act
    d[GROUPS], d[SPLIT] = groups, groups // 2
    return d, arrays
