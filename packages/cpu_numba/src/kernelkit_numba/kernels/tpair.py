"""The transformer's attention, LayerNorm and Softmax at two threads as two halves on fpair's helper,
handed over in compiled code (issue 11, session 12; docs/numba.md, "The transformer at two threads,
handed over in compiled code").

At two threads the transformer's products already ran as pairs on fpair's helper (fpair.py), but its
fused attention (attention.py) took the shard pool: a job a layer (the caller's heads and the pool
worker's). Once the pool's worker has its spin loop, the heartbeats keep it spinning through every run
beside fpair's helper (three spinning threads on two cores), and fgemm's bound products whose pair the
helper refused go to the pool's shares rather than the caller alone (``fgemm.PAIR_ALONE`` only holds
while the pool has no worker): on the Xeon 1,200-1,300 pool jobs a 0.3 s block, worker preemptions and
back-offs that moved the ratio to onnxruntime by +-0.15. Here those nodes run as halves on the same
helper as the products, so a transformer at two threads publishes no pool job at all:

- **Attention by heads** (``OP_ATTN``): the (batch item, head) pairs cut in two, the caller the first
  half, the helper the rest (an odd count: each pair's query rows in two, ``PARTS``). Each side, per
  head: K^T and V packed into fgemm's column panels (its own scratch), then per block of query rows
  (``attention.SCRATCH_BYTES`` of scores at most) the scores on fgemm's tiles with the scale as alpha
  (Q's rows read in place), the additive mask, ``softmax.exp_rows``, P @ V on fgemm's tiles written
  straight into the output rows, and the division by the row sums, as attention.py's shards do with
  BLAS.
- **LayerNorm by rows** (``OP_NORM``: ``norm._layer_norm`` over the caller's rows and the helper's;
  the one-thread path's rows, bit for bit) and **Softmax by rows** (``OP_SOFTMAX``: softmax.py's
  ``_rows_shard`` steps, bit for bit), from ``ROWS_MIN`` elements: below SERIAL_WORK these ran on
  the caller at every thread count.

One compiled ``half(desc_address, side)`` serves the three (its address the descriptor's first word,
as cpair's, rnpair's and fgemm's halves), run by fpair's helper loop (``pair_serve``); the caller's side
is one compiled function (``pair_run``: the slot, the per-call addresses, then fpair's ``pair_job``).
Where the helper does not spin or is backed off, the caller runs both sides itself (``alone``: no job);
while the pool's worker spins (a model with pooled nodes) or another caller holds the slot, the node
takes its general path. The stall rule is rnpair's (fpair's slack, two stalls within ``HICCUP_S``); a
back-off of the pairs, these or the products', backs the pool off too (``POOL_BACKOFF``,
``rnpair.follow``), so that its look at the free cores keeps a loaded run at one thread.

Switches: ``ON`` (all), ``ATTENTION``, ``NORM``, ``SOFTMAX``, ``ROWS_MIN``, ``POOL_BACKOFF``;
``KERNELKIT_F32_PAIR=off`` and ``KERNELKIT_NUMBA_SPIN_US=0`` turn it off with the other pairs (``fpair.enabled``).
"""
from __future__ import annotations

import functools
import threading
import time

import numba
import numpy as np

from .. import config, shards
from ..cache import CLOSURE_KEY
from ..config import jit
from . import fgemm, fpair, ftile, pairs
from .epilogue import NONE
from .pairs import SLOT, STOP, _call2, _cas, _ptr, _store

ON = True  # False: attention, LayerNorm and Softmax at two threads as before (the pool; the caller)
ATTENTION = True  # the fused attention pairs by heads
NORM = True  # LayerNormalization pairs by rows
SOFTMAX = True  # Softmax (last axis) pairs by rows
# LayerNorm / Softmax elements from which they pair: the transformer's 128 x 256 LayerNorm (32768, 12 us on the
# AMD box) gained nothing measurable paired (best 10.0 against 11.2 us; the pair's Python ~1 us), its batch 8
# (262144, ~95 us) and BERT's 128 x 768 pair
ROWS_MIN = 1 << 16
HICCUP_S = 0.1  # the stall rule's window (PairServer.result's hiccup_s; rnpair.HICCUP_S's value)
# A node that finds the helper backed off (a stall or misses here or in the products' pairs, fpair.run) backs the
# shard pool off too, as rnpair.POOL_BACKOFF (rnpair.follow, also here for these pairs' own back-offs): the pool's
# look at the free cores then holds the whole model at one thread while the other core stays busy. A transformer
# whose nodes all pair has no pool job, so nothing else backs the pool off: on the Xeon (issue 11, session 12,
# turns.py --mode loaded) its default ran 1.14x its one-thread time with the pairs' back-offs alone (4 a 0.3 s
# block, each try beside the busy loop), the pool path 0.88x. False: the pairs' back-off alone.
POOL_BACKOFF = True

OP_ATTN, OP_NORM, OP_SOFTMAX = 0, 1, 2
# desc: the half's address, the op, the per-call addresses (the inputs, the output, the mask or LayerNorm's
# mean, its inverse deviations, each side's scratch), the float values, the cut (side 0 runs units [0, CUT),
# side 1 [CUT, UNITS)); attention's shape, element strides of Q, K, V, the output and the mask (batch,
# head, row; the mask's along the keys too), the row block, the two products' plans, the scratch's parts
(FN, OP, XA, KA, VA, YA, MA, IA, S0, S1, FV, UNITS, CUT, PARTS, HQ, GROUP, M, N, DK, DV, HAS_MASK,
 QSB, QSH, QSR, KSB, KSH, KSR, VSB, VSH, VSR, YSB, YSH, YSR, MSB, MSH, MSR, MSN, MASK_N,
 ROWS, BLOCK1, KC1, BLOCK2, KC2, OFF_K, OFF_V, OFF_SUMS, OFF_POW, SCR_N, ZEROS, ZEROS_N) = range(50)
NDESC = 50


def _kind() -> int:
    """fgemm's variant for the attention products (ftile's choice, as Gemm's)."""
    return ftile.choice()[0]


def _build(kind: int):
    """The compiled ``half(desc_address, side) -> 0`` (side 0 the caller's, 1 the helper's): a closure over
    fgemm's driver of ``kind`` (no epilogue, no prefetch), softmax's ``exp_rows`` and ``_scale_rows`` and
    norm's ``_layer_norm``, cached on disk by name."""
    from .norm import _layer_norm
    from .softmax import _scale_rows, exp_rows

    mr, nr = fgemm.MR[kind], fgemm.NR[kind]
    drv = fgemm.driver(kind, NONE, mr, 0)
    f32, f64, i32 = np.float32, np.float64, np.int32

    def half(addr, side):
        d = numba.carray(_ptr(addr), (NDESC,), np.int64)
        op = d[OP]
        units, cut = d[UNITS], d[CUT]
        u0, u1 = (0, cut) if side == 0 else (cut, units)
        scr = d[S0] if side == 0 else d[S1]
        m_n, n_n = d[M], d[N]
        if op == OP_NORM:  # rows [u0, u1) of (M, N)
            x = numba.carray(_ptr(d[XA]), (m_n, n_n), f32)
            y = numba.carray(_ptr(d[YA]), (m_n, n_n), f32)
            scale = numba.carray(_ptr(d[KA]), (n_n,), f32)
            bias = numba.carray(_ptr(d[VA]), (n_n,), f32)
            mean = numba.carray(_ptr(d[MA]), (m_n,), f32)
            inv = numba.carray(_ptr(d[IA]), (m_n,), f32)
            eps = numba.carray(_ptr(d[FV]), (1,), f64)[0]
            _layer_norm(x, scale, bias, eps, y, mean, inv, u0, u1)
            return 0
        if op == OP_SOFTMAX:  # softmax._rows_shard's steps over rows [u0, u1)
            if u1 > u0:
                x = numba.carray(_ptr(d[XA] + 4 * u0 * n_n), (u1 - u0, n_n), f32)
                y = numba.carray(_ptr(d[YA] + 4 * u0 * n_n), (u1 - u0, n_n), f32)
                for i in range(u1 - u0):
                    for j in range(n_n):
                        y[i, j] = x[i, j]
                sums = numba.carray(_ptr(scr + 4 * d[OFF_SUMS]), (u1 - u0,), f64)
                powers = numba.carray(_ptr(scr + 4 * d[OFF_POW]), (n_n,), i32)
                exp_rows(y, f32(1), sums, powers)
                _scale_rows(y, sums)
            return 0
        # attention: units [u0, u1) of (batch item, head) x PARTS parts of the query rows
        parts, hq, group, dk, dv = d[PARTS], d[HQ], d[GROUP], d[DK], d[DV]
        hkv = hq // group
        rows, kc1, kc2 = d[ROWS], d[KC1], d[KC2]
        scale = numba.carray(_ptr(d[FV]), (1,), f32)[0]
        one = f32(1)
        inf = f32(np.inf)
        zeros = numba.carray(_ptr(d[ZEROS]), (d[ZEROS_N],), f32)
        kpn, vpn = (n_n + nr - 1) // nr, (dv + nr - 1) // nr
        kp = numba.carray(_ptr(scr + 4 * d[OFF_K]), (kpn * nr * dk,), f32)
        vp = numba.carray(_ptr(scr + 4 * d[OFF_V]), (vpn * nr * n_n,), f32)
        powers = numba.carray(_ptr(scr + 4 * d[OFF_POW]), (n_n,), i32)
        has_mask = d[HAS_MASK] != 0
        mask = numba.carray(_ptr(d[MA] if has_mask else d[ZEROS]), (max(d[MASK_N], 1),), f32)
        last = -1
        for u in range(u0, u1):
            t = u // parts
            part = u - t * parts
            bi = t // hq
            h = t - bi * hq
            hk = h // group
            if bi * hkv + hk != last:  # this head's K^T and V in fgemm's column panels
                last = bi * hkv + hk
                kf = numba.carray(_ptr(d[KA] + 4 * (bi * d[KSB] + hk * d[KSH])), ((n_n - 1) * d[KSR] + dk,), f32)
                ksr = d[KSR]
                for key in range(kpn * nr):
                    p = key // nr
                    base = p * dk * nr + key - p * nr
                    if key < n_n:
                        row = key * ksr
                        for k in range(dk):
                            kp[base + k * nr] = kf[row + k]
                    else:
                        for k in range(dk):
                            kp[base + k * nr] = 0
                vf = numba.carray(_ptr(d[VA] + 4 * (bi * d[VSB] + hk * d[VSH])), ((n_n - 1) * d[VSR] + dv,), f32)
                vsr = d[VSR]
                for k in range(n_n):
                    row = k * vsr
                    for p in range(vpn):
                        base = (p * n_n + k) * nr
                        c0 = p * nr
                        for j in range(nr):
                            vp[base + j] = vf[row + c0 + j] if c0 + j < dv else f32(0)
            r0 = part * m_n // parts
            r1 = (part + 1) * m_n // parts
            for b0 in range(r0, r1, rows):
                mb = min(rows, r1 - b0)
                tiles = (mb + mr - 1) // mr
                qa = numba.carray(_ptr(d[XA] + 4 * (bi * d[QSB] + h * d[QSH] + b0 * d[QSR])),
                                  ((mb - 1) * d[QSR] + dk,), f32)
                s = numba.carray(_ptr(scr), (mb * n_n,), f32)
                drv(qa, d[QSR], kp, dk, mb, n_n, scale, zeros, zeros, s, n_n, -inf, inf, f32(0), f32(0), d[BLOCK1], 1,
                    kc1, 0, (tiles + d[BLOCK1] - 1) // d[BLOCK1])
                s2 = numba.carray(_ptr(scr), (mb, n_n), f32)
                if has_mask:  # the additive mask after the scale (attention._scale_mask)
                    msn = d[MSN]
                    for i in range(mb):
                        mo = bi * d[MSB] + h * d[MSH] + (b0 + i) * d[MSR]
                        for j in range(n_n):
                            s2[i, j] += mask[mo + j * msn]
                sums = numba.carray(_ptr(scr + 4 * d[OFF_SUMS]), (mb,), f64)
                exp_rows(s2, one, sums, powers)
                ysr = d[YSR]
                ya = numba.carray(_ptr(d[YA] + 4 * (bi * d[YSB] + h * d[YSH] + b0 * ysr)), ((mb - 1) * ysr + dv,), f32)
                drv(s, n_n, vp, n_n, mb, dv, one, zeros, zeros, ya, ysr, -inf, inf, f32(0), f32(0), d[BLOCK2], 1, kc2,
                    0, (tiles + d[BLOCK2] - 1) // d[BLOCK2])
                for i in range(mb):  # attention._divide_rows
                    total = sums[i]
                    inv = f32(1.0 / (total if total != 0.0 else 1.0))
                    o = i * ysr
                    for j in range(dv):
                        ya[o + j] *= inv
        return 0

    setattr(half, CLOSURE_KEY, f"tpair.half.kind{kind}")
    return jit(half)


@functools.cache
def half_address(kind: int) -> int:
    """The C address of the compiled half of fgemm's variant ``kind`` (compiled or loaded now), 0 where there
    is none."""
    return pairs.function_address(_build(kind))


@jit
def pair_run(ctl, desc, a, b, c, d, e, f, s0, s1, alone) -> int:
    """One node: the callers' slot (3: another caller holds it, nothing done), the addresses of ``a`` ... ``f``
    (the op's arrays, in the descriptor's order XA, KA, VA, YA, MA, IA: attention's Q, K, V, output and mask,
    LayerNorm's x, scale, bias, y, mean and inverse deviations, Softmax's x and y; ``_UNUSED`` where the op has
    none, any layout: the strides are the descriptor's) and of each side's scratch, then both sides on the
    caller (``alone``: no job) or fpair's job. 2 the caller ran both, 1 the helper ran the second half."""
    if not _cas(ctl, SLOT, 0, 1):
        return 3
    desc[XA] = np.int64(a.ctypes.data)
    desc[KA] = np.int64(b.ctypes.data)
    desc[VA] = np.int64(c.ctypes.data)
    desc[YA] = np.int64(d.ctypes.data)
    desc[MA] = np.int64(e.ctypes.data)
    desc[IA] = np.int64(f.ctypes.data)
    desc[S0] = np.int64(s0.ctypes.data)
    desc[S1] = np.int64(s1.ctypes.data)
    if alone:
        addr = np.int64(desc.ctypes.data)
        _call2(desc[FN], addr, 0)
        _call2(desc[FN], addr, 1)
        _store(ctl, SLOT, 0)
        return 2
    return fpair.pair_job(ctl, desc)


_UNUSED = np.zeros(16, np.float32)  # pair_run's array where an op has none (the unused words' address)


_ready: list = []
_ready_lock = threading.Lock()


def _warm() -> None:
    """The caller's side compiled for LayerNorm's and Softmax's arrays through stand-in calls that find the slot
    held (attention's compile at its first call)."""
    held = np.zeros(8, np.int64)
    held[SLOT] = 1
    held[STOP] = 1
    d = np.zeros(NDESC, np.int64)
    s, u = np.zeros(1, np.float32), _UNUSED
    r = config.readonly(np.zeros((1, 1), np.float32))
    w = np.zeros((1, 1), np.float32)
    pair_run(held, d, r, config.readonly(s), config.readonly(s), w, s, s, u, u, False)
    pair_run(held, d, r, u, u, w, u, u, s, s, False)


def prepare() -> int:
    """fpair's sides, this module's half (fgemm's variant now) and its callers compiled or loaded on the calling
    thread (fpair.prepare_family): the half's address, 0 where there is no pair."""
    return fpair.prepare_family(_ready, _ready_lock, lambda: half_address(_kind()), _warm)


def enabled() -> bool:
    """Whether these pairs may be made now: ``ON``, fpair's conditions (x86-64, compiled code, spinning threads,
    ``KERNELKIT_F32_PAIR`` not off) and a cycle counter."""
    return ON and fpair.enabled() and pairs.cycle_rate() > 0


def rows_pair(threads, elements: int) -> bool:
    """Whether a LayerNorm or Softmax node of ``elements`` in a session of ``threads`` (None: the CPUs) pairs by
    rows: two threads, ``ROWS_MIN`` elements (its kernel then gets the session's budget, not one thread)."""
    return ON and elements >= ROWS_MIN and (threads or config.default_threads()) == 2


def by_rows(kernel: type, shaped) -> type:
    """``kernel`` (a ``threaded`` LayerNorm or Softmax) with its session's thread budget, not one thread, where a
    node pairs by rows (``rows_pair``, and ``shaped(x, axis)``: its input's shape has rows to cut), so that the
    function sees two threads and takes ``layer_norm`` / ``softmax_rows`` (its other paths cut its work as
    before: one shard below the pool's MIN_SHARD_WORK)."""

    def work(self, *inputs):
        w = kernel.work(self, *inputs)
        x = inputs[0]
        if w < config.SERIAL_WORK and rows_pair(self.threads, x.size) and shaped(x, self.kwargs.get("axis", -1)):
            return float(config.SERIAL_WORK)
        return w

    return type(kernel.__name__, (kernel,), {"work": work, "takes_out": kernel.takes_out, "__doc__": kernel.__doc__,
                                             "__module__": kernel.__module__, "__qualname__": kernel.__qualname__})


class Made:
    """One node shape's descriptor, the arrays it points to and the sides' scratch floats."""

    __slots__ = ("desc", "keep", "size", "y_shape")

    def __init__(self, desc, keep, size: int, y_shape=None):
        self.desc, self.keep, self.size, self.y_shape = desc, keep, size, y_shape


def _go(made: Made, *arrays) -> bool:
    """``pair_run(ctl, desc, *arrays, the sides' scratch, alone)`` for ``made`` (its six arrays): a pair where the
    helper spins, both sides on the caller where it does not (it is woken) or is backed off; False where nothing
    was done (no compiled half, the pool's worker spinning, another caller in the slot): the node's general
    path."""
    desc = made.desc
    if not desc[FN]:
        address = prepare()
        if not address:
            return False
        desc[FN] = address
    if shards.POOL.workers_spinning():
        return False  # a model with pooled nodes: its worker spins through the run (cpair.Pair's rule)
    srv = fpair.server()
    if not srv.ready and not srv.prepare():
        return False
    alone = not srv.usable()
    if alone:
        if POOL_BACKOFF and srv.until > time.perf_counter():
            shards.POOL._back_off("the pairs are backed off (tpair.POOL_BACKOFF)")
        srv.asleep()
    if made.size:  # side 1 in the helper's scratch even alone: pair_run runs alone only once it holds the slot,
        # which the helper's last job released after its DONE (the caller of a job waits for it), so the helper runs
        # nothing meanwhile (race17; rnpair's alone and cpair's K_SOLO run without the slot: their caller's buffers)
        scratch = (config.thread_buffer("tpair", made.size, np.float32),
                   fpair.helper_buffer("tpair.scratch", made.size))
    else:
        scratch = (_UNUSED, _UNUSED)
    done = pair_run(srv.ctl, desc, *arrays, *scratch, alone)
    if done == 3:
        return False
    if not alone:
        from .rnpair import follow

        before = srv.stats["backoffs"]
        srv.result(done, False, HICCUP_S)
        follow(srv, before)
    return True


def _split(total: int) -> int:
    return (total + 1) // 2


_norms: dict = {}  # LayerNorm's and Softmax's descriptors by shape (the per-call addresses under the slot)


def layer_norm(x, scale, bias, eps: float, y, mean, inv) -> bool:
    """``norm._layer_norm`` over every row of ``x`` (R, D), C-contiguous float32, as two halves of rows (False:
    not done, the caller's path)."""
    if not (ON and NORM):
        return False
    key = (OP_NORM, x.shape, float(eps))
    made = _norms.get(key)
    if made is None:
        if x.shape[0] < 2 or x.dtype != np.float32 or not enabled():
            return False
        d = np.zeros(NDESC, np.int64)
        fv = np.array([eps], np.float64)
        d[OP], d[M], d[N], d[FV], d[UNITS], d[CUT] = OP_NORM, x.shape[0], x.shape[1], fv.ctypes.data, x.shape[0], \
            _split(x.shape[0])
        made = _norms[key] = Made(d, (fv,), 0)
    return _go(made, x, scale, bias, y, mean, inv)


def softmax_rows(x, y) -> bool:
    """softmax.py's Softmax of every row of ``x`` (R, L) into ``y``, both C-contiguous float32, as two halves of
    rows (False: not done)."""
    if not (ON and SOFTMAX):
        return False
    key = (OP_SOFTMAX, x.shape)
    made = _norms.get(key)
    if made is None:
        if x.shape[0] < 2 or x.dtype != np.float32 or not enabled():
            return False
        r_n, l_n = x.shape
        d = np.zeros(NDESC, np.int64)
        part = _split(r_n)
        off_pow = _up(2 * part)
        d[OP], d[M], d[N], d[UNITS], d[CUT], d[OFF_SUMS], d[OFF_POW] = OP_SOFTMAX, r_n, l_n, r_n, part, 0, off_pow
        made = _norms[key] = Made(d, (), off_pow + _up(l_n))
    return _go(made, x, _UNUSED, _UNUSED, y, _UNUSED, _UNUSED)


def _up(n: int) -> int:
    """``n`` floats rounded up to whole cache lines."""
    return -(-max(n, 1) // 16) * 16


def _strides(a, nd_heads: bool) -> tuple | None:
    """(batch, head, row) element strides of a float32 Q, K, V or output: 4-D (batch, heads, rows, d), or 3-D
    (batch, rows, heads * d) (``nd_heads`` False: the head's stride is d, given by the caller); None where
    the last axis is not contiguous."""
    if a.dtype != np.float32 or a.strides[-1] != 4 or any(s % 4 for s in a.strides):
        return None
    st = [s // 4 for s in a.strides]
    return (st[0], st[1], st[2]) if nd_heads else (st[0], 0, st[1])


def attention_descriptor(q, k, v, mask, y, hq: int, hkv: int, scale: float) -> Made | None:
    """The descriptor of one attention node's shapes and strides (``y``: its output, or None: a fresh C-contiguous
    one), or None where it does not pair (a layout of other strides, fewer than two (batch item, head) pairs,
    an empty operand)."""
    four = q.ndim == 4
    b = q.shape[0]
    if four:
        m, dk, n, dv = q.shape[2], q.shape[3], k.shape[2], v.shape[3]
        y_shape = (b, hq, m, dv)
    else:
        m, n = q.shape[1], k.shape[1]
        dk, dv = q.shape[2] // hq, v.shape[2] // hkv
        y_shape = (b, m, hq * dv)
    if b * hq < 2 or min(m, n, dk, dv) < 1 or hq % hkv or k.ndim != q.ndim or v.ndim != q.ndim:
        return None
    if four:
        aligned = k.shape[:2] == v.shape[:2] == (b, hkv) and k.shape[3] == dk and v.shape[2] == n
    else:
        aligned = q.shape[2] == hq * dk and k.shape[2] == hkv * dk and k.shape[0] == v.shape[0] == b and \
            v.shape[1] == n and v.shape[2] == hkv * dv
    if not aligned:
        return None  # (the general path raises)
    if y is None:
        y = np.empty(y_shape, np.float32)
    sq, sk, sv, sy = (_strides(a, four) for a in (q, k, v, y))
    if None in (sq, sk, sv, sy) or y.shape != y_shape:
        return None
    if not four:  # the heads' columns within a row
        sq, sk, sv, sy = ((s[0], dd, s[2]) for s, dd in ((sq, dk), (sk, dk), (sv, dv), (sy, dv)))
    kind = _kind()
    nr = fgemm.NR[kind]
    from .attention import SCRATCH_BYTES

    rows = max(1, min(m, SCRATCH_BYTES // (4 * n)))
    total = b * hq
    parts = 1 if total % 2 == 0 else 2
    units = total * parts
    d = np.zeros(NDESC, np.int64)
    fv = np.array([scale], np.float32)
    kpn, vpn = -(-n // nr), -(-dv // nr)
    zeros = np.zeros(max(kpn, vpn) * nr, np.float32)
    off_k = _up(rows * n)
    off_v = off_k + _up(kpn * nr * dk)
    off_sums = off_v + _up(vpn * nr * n)
    off_pow = off_sums + _up(2 * rows)
    size = off_pow + _up(n)
    block1, _blocks, _groups, kc1 = fgemm.plan(kind, rows, dk, n, 1)
    block2, _blocks, _groups, kc2 = fgemm.plan(kind, rows, n, dv, 1)
    d[OP], d[FV], d[UNITS], d[CUT], d[PARTS] = OP_ATTN, fv.ctypes.data, units, _split(units), parts
    d[HQ], d[GROUP], d[M], d[N], d[DK], d[DV] = hq, hq // hkv, m, n, dk, dv
    d[QSB:QSR + 1], d[KSB:KSR + 1], d[VSB:VSR + 1], d[YSB:YSR + 1] = sq, sk, sv, sy
    d[ROWS], d[BLOCK1], d[KC1], d[BLOCK2], d[KC2] = rows, block1, kc1, block2, kc2
    d[OFF_K], d[OFF_V], d[OFF_SUMS], d[OFF_POW], d[SCR_N] = off_k, off_v, off_sums, off_pow, size
    d[ZEROS], d[ZEROS_N] = zeros.ctypes.data, zeros.size
    if mask is not None:  # a (b, hq, m, n) view, zero strides where it broadcasts (attention.py's m4)
        if mask.dtype != np.float32 or any(s % 4 or s < 0 for s in mask.strides):
            return None
        m4 = np.broadcast_to(mask.reshape((1,) * (4 - mask.ndim) + mask.shape), (b, hq, m, n))
        d[MSB], d[MSH], d[MSR], d[MSN] = (s // 4 for s in m4.strides)
        d[HAS_MASK] = 1
        d[MASK_N] = 1 + sum((e - 1) * (s // 4) for e, s in zip(mask.shape, mask.strides))
    return Made(d, (fv, zeros), size, y_shape)


def attention(made: Made, q, k, v, mask, out):
    """The attention of ``made`` into ``out`` (None: a fresh array) as two halves of heads; None where not done
    (the node's general path)."""
    y = np.empty(made.y_shape, np.float32) if out is None else out
    if _go(made, q, k, v, y, made.keep[1] if mask is None else mask, _UNUSED):
        return y
    return None


__all__ = ["ATTENTION", "NORM", "ON", "POOL_BACKOFF", "ROWS_MIN", "SOFTMAX", "attention", "attention_descriptor",
           "by_rows", "enabled", "half_address", "layer_norm", "pair_run", "prepare", "rows_pair", "softmax_rows"]
