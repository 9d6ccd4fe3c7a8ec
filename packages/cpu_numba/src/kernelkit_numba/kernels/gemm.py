"""Gemm and MatMul: the product goes to BLAS at one thread per call, cut into output tiles that the
shard pool runs in parallel (``np.matmul`` on views, transposes passed as BLAS strides rather than
copies); each tile's scaling, bias and activation are applied by a Numba loop right after its
GEMM, while the tile is still in cache. The output is the plan's arena buffer (``out=``) when the
session gives one."""
from __future__ import annotations

import math

import numpy as np
from kernelkit.registry import register_kernel

from .. import config
from .._base import NumbaKernel, same_memory
from . import fgemm, fpair, ftile, gemm_nt, halves, hpair
from .conv import _edge, tile_grid
from .epilogue import GELU, NONE, TANH, scale_bias_act_cols

# A GEMM of at least 2 * config.MIN_TILE_WORK flops (2^23, ~0.1 ms on one core) runs on every
# thread of the budget, cut into config.TILE_SHARDS_PER_THREAD tiles per thread of at least MIN_TILE_WORK: the
# transformer's 128x256x256 projections (17 MFLOP) are worth two threads as two tiles, not as
# eight (each tile repacks its panels: eight 128-column tiles of a 128x256x1024 product cost 1.28x
# the whole product at one thread on the quiet Xeon).


# A one-row Gemm of at least HEAD_SPLIT_BYTES of weights runs as two shares of columns at two threads
# (Gemm._split_head), cut at a multiple of HEAD_SPLIT_COLS columns
HEAD_SPLIT_BYTES = 1 << 21
HEAD_SPLIT_COLS = 16
HEAD_FLOPS_PER_BYTE = 8.0  # a memory-bound weight byte (~12 GB/s a core) as flops (~100 GFLOP/s)
# Products of 2-16 columns with a constant B at one thread (the MLP's 64 x 1024 x 10 head) on fgemm's
# NARROW tiles (8 x 16), B packed once, in Gemm's bound serial call (False: np.matmul, as the reference).
# Alone BLAS is faster (AMD box 14 against 22 us), but in the model A arrives cold: the product before
# wrote it while streaming its 4 MiB B through L2, and BLAS's code and buffers are cold after numba's
# kernels (issue 11, session 11: AMD box in the model 0.053-0.063 ms on BLAS, 0.034-0.035 on NARROW,
# the reference 0.031-0.037, whose separate bias and Relu passes leave A in cache)
HEAD_NARROW = True
# One-row products (classifier heads) of at least HEAD_ROW_BYTES of constant weights on fgemm.row (the
# weights packed once, streamed in one pass on 1-row tiles) instead of np.matmul (OpenBLAS's sgemv, the
# reference's call), read when the node binds (issue 11, session 12; False: np.matmul). Weights cold
# (bench_heads.py), np.matmul / the row tiles on the 1 x 512 / 1280 / 2048 x 1000 heads: Xeon 1.46 / 1.33 /
# 1.22, AMD box 1.5-1.95 / 1.75 / 1.45-1.67; in the model AMD box 1.75x (ResNet-18). Xeon in the model
# (session 13, with fgemm.ROW_STREAMS and HEAD_ALIGN): ResNet-18's head 0.134 ms against np.matmul's 0.160
HEAD_ROW = True
HEAD_ROW_BYTES = 1 << 16
# Those heads' weights packed at a multiple of this many bytes (fgemm.pack_b's align: 4096, at a page of their
# own mapping, every vector of a panel in one cache line; 0: where NumPy puts them, 16 B into a page; from
# fgemm.HUGE_PAGE: a private mapping advised as transparent huge pages, where the panels fill at least one),
# read at the first call. Issue 11, session 13, Xeon, weights from memory (bench_head_state.py, 4 panels at
# once): 4096 against NumPy's place, 1 x 512 x 1000 162 against 177 us, 1 x 1280 x 1000 347 against 394;
# ResNet-18's head in the model 0.134 against 0.179 ms (nodes_ab.py). HUGE_PAGE since session 18 (head18; the
# Xeon's THP is "madvise": the 5 MiB head on 3 huge pages): in the model, the default's 4096 / it per round,
# MobileNetV2's head 1.07 (0.88-1.23, 9 rounds), EfficientNet-B0's 1.03 (0.72-1.20, 7); the AMD box 1.08-1.32 on
# the four CNN heads. Off: kernels.gemm.HEAD_ALIGN=4096
HEAD_ALIGN = 1 << 21
# A one-row head with Tanh (BERT's pooler, 1 x 768 x 768) on the same row tiles, the bias in the registers and
# NumPy's SIMD tanh over the output after (the epilogue's tanh is libm's, one value at a time), where HEAD_ROW takes
# the shape; read when the node binds (issue 11, session 18, head18: Xeon, bert_l4's pooler in the model 0.170
# against 0.238 ms, per round 1.35 (0.97-1.70, 5 rounds), the reference 0.216; off: np.matmul, the bias and
# np.tanh, as the reference, kernels.gemm.HEAD_ROW_TANH=0)
HEAD_ROW_TANH = True


def gemm_work(flops: float) -> float:
    """A GEMM's flops in the units of ``config.SERIAL_WORK`` (set for loops doing about one flop
    per element step), scaled so that every GEMM of at least 2 * MIN_TILE_WORK flops goes to the
    pool: BLAS does those flops several times faster than such loops."""
    return flops * max(1.0, config.SERIAL_WORK / (2.0 * config.MIN_TILE_WORK))


def tile_count(flops: float) -> int:
    """Tiles of one GEMM at this call's thread budget (1: no pool): one per thread below
    8 * MIN_TILE_WORK flops (each tile repacks its panels; column tiles of a 128x256x256 product
    cost 1.06x the whole at two, 1.12x at four on the AMD box), config.TILE_SHARDS_PER_THREAD above."""
    threads = config.current_threads()
    if threads <= 1 or flops < 2 * config.MIN_TILE_WORK:
        return 1
    per_thread = 1 if flops < 8 * config.MIN_TILE_WORK else config.TILE_SHARDS_PER_THREAD
    return int(max(2, min(per_thread * threads, flops // max(1, config.MIN_TILE_WORK))))


def tiled_matmul(a, b, out, epilogue=None) -> None:
    """out (M, N) = a (M, K) @ b (K, N), cut into tiles run on the shard pool; ``epilogue(r0, r1,
    c0, c1)`` runs on each finished tile."""
    m, n = out.shape
    rows, cols = tile_grid(m, n, tile_count(2.0 * m * n * a.shape[1]))

    def tile(t):
        mt, pt = divmod(t, cols)
        r0, r1 = mt * m // rows, (mt + 1) * m // rows
        c0, c1 = _edge(pt, cols, n), _edge(pt + 1, cols, n)
        np.matmul(a[r0:r1, :], b[:, c0:c1], out=out[r0:r1, c0:c1])
        if epilogue is not None:
            epilogue(r0, r1, c0, c1)

    if rows * cols == 1:
        tile(0)
    else:
        config.run_shards(tile, rows * cols)


class ConstantB:
    """fgemm's packed copy of a node's right operand, kept while that operand is a constant: the
    same read-only array on every call (the session hands constants over as they are; an
    intermediate result arrives as a fresh read-only view each call). The first call packs it; a
    call with another array ends the micro-kernel path for the node (BLAS from then on)."""

    __slots__ = ("packed", "off", "picked")

    def __init__(self):
        self.packed, self.off, self.picked = None, False, None

    def kind(self, m, k, n, narrow: bool = False):
        """fgemm.kind_for(m, k, n, narrow), kept while KERNELKIT_F32_GEMM and the shape stay (~3 us a call)."""
        raw = ftile.requested_raw()
        hit = self.picked
        if hit is None or hit[0] != raw or hit[1] != (m, k, n, narrow):
            hit = self.picked = (raw, (m, k, n, narrow), fgemm.kind_for(m, k, n, narrow))
        return hit[2]

    def get(self, b, b2, kind, align=None):
        """The Packed B for ``kind`` (``align``: fgemm.pack_b's, at the first packing), or None (not a
        constant: the BLAS path)."""
        if self.off or b.flags.writeable:
            return None
        hit = self.packed
        if hit is not None and hit.source is not b:
            self.off, self.packed = True, None
            return None
        if hit is None or hit.kind != kind:
            hit = self.packed = fgemm.Packed(b, b2, kind, align)
        return hit


def nt_matmul(a, bt, out, epilogue=None) -> None:
    """out (M, N) = a (M, K) @ bt.T for bt (N, K) by ``gemm_nt`` (a few rows: see gemm_nt.py), its
    column groups of four cut into shards; ``epilogue(r0, r1, c0, c1)`` runs on each finished
    shard. One shard runs on the calling thread."""
    m, n = out.shape
    groups = -(-n // 4)
    tiles = min(groups, tile_count(2.0 * m * n * a.shape[1]))
    if tiles <= 1:
        gemm_nt.gemm_nt(a, bt, out, 0, groups)
        if epilogue is not None:
            epilogue(0, m, 0, n)
        return

    def shard(t):
        g0, g1 = t * groups // tiles, (t + 1) * groups // tiles
        gemm_nt.gemm_nt(a, bt, out, g0, g1)
        if epilogue is not None:
            epilogue(0, m, 4 * g0, min(n, 4 * g1))

    config.run_shards(shard, tiles)


@register_kernel("Gemm", device="cpu", vendor="numba", dtype="float32")
class Gemm(NumbaKernel):
    """Y = act(alpha * A' @ B' + beta * C), A' = A.T if transA, B' = B.T if transB. With transB
    (B stored (N, K), as exported Linear layers are) and 2 to 16 rows: ``gemm_nt`` (dot products
    along contiguous K; 1.3-4x BLAS on the transposed operand), else BLAS tiles."""

    uses_blas = True

    def setup(self, input_specs):
        self.act = self.fused_activation(input_specs)
        self._const_b = ConstantB()

    def work(self, a, b, c=None):
        return gemm_work(2.0 * a.size * (b.size // max(1, a.shape[0] if self.attrs.get("transA", 0) else a.shape[1])))

    def serial_call(self, step):
        """Static batch-1 products on one thread (one row: a classifier head or an MLP layer at
        batch 1; ``NumbaKernel.bind`` takes this call when the thread budget is 1): for M = 1 the
        product is a matrix-vector product that BLAS runs at memory speed, so the call does what
        the reference does, ``np.matmul`` into the output, the bias added in place (and the
        activation), without the general path's per-call decisions (Xeon: 30-40 us over the
        reference a node; here 11-14 us). Several rows do the same where BLAS runs them (the MLP's
        64 x 1024 x 10 head: Xeon 0.109 ms in the general path against the reference's 0.041; not
        gemm_nt's few rows) and take ``_bound_tiles`` where fgemm's micro-kernels do (issue 11,
        session 10). One row by constant weights of HEAD_ROW_BYTES or more runs fgemm.row's 1-row
        tiles instead of np.matmul (``_row_head``, HEAD_ROW; issue 11, session 12). None where the
        general path runs (shapes not static, another dtype, a forced fgemm variant, a C that is not
        one value per column)."""
        shape = self._static_shape()
        if shape is None:
            return None
        m, k, n, trans_a, trans_b = shape
        if m > 1 and k and n and not trans_a and fgemm.kind_for(m, k, n, HEAD_NARROW) is not None:
            return self._bound_tiles(m, k, n, True)  # fgemm's micro-kernels, bound (fpair10, session 10)
        at = self.attrs
        if k == 0 or n == 0 or fgemm.kind_for(m, k, n) is not None:
            return None
        if m != 1 and (m < 1 or (trans_b and not trans_a and gemm_nt.usable(m, n))):
            return None  # (several rows by BLAS as the general path runs them at one thread: the MLP's head)
        alpha, beta = np.float32(at.get("alpha", 1.0)), np.float32(at.get("beta", 1.0))
        code, p0, p1 = self.act
        one = np.float32(1)
        no_bias = config.readonly(np.zeros(n, np.float32))  # the epilogue's bias where C is absent

        def call(a, b, c=None, *, out=None):
            config.blas_single()
            y = np.matmul(a.T if trans_a else a, b.T if trans_b else b, out=out)
            if alpha != 1:
                y *= alpha
            if code == TANH:  # NumPy's SIMD tanh (the epilogue's is libm's, one value at a time: BERT's
                if c is not None:  # pooler, 768 values, 0.18 against the reference's 0.16 ms)
                    y += c.reshape(n) if beta == 1 else beta * c.reshape(n)
                np.tanh(y, out=y)
            elif code != NONE:
                bias = no_bias if c is None else config.readonly(c.reshape(n))
                scale_bias_act_cols(y, one, bias, beta if c is not None else np.float32(0), code, p0, p1)
            elif c is not None:
                y += c.reshape(n) if beta == 1 else beta * c.reshape(n)
            return y

        call.thread_safe = True  # no per-call state: the plan's settled call needs no lock
        kind = ftile.choice()[0]
        if HEAD_ROW and m == 1 and not trans_a and (code != TANH or HEAD_ROW_TANH) and kind in (1, 2) and \
                4 * k * n >= HEAD_ROW_BYTES:
            call = self._row_head(call, kind, k, n, trans_b, alpha, beta)  # (issue 11, session 12; Tanh: 18)
        two = (self.threads or config.default_threads()) == 2
        if two and code == NONE and hpair.usable(m, k, n, trans_a):  # (issue 11, session 11; on the row tiles:
            row = HEAD_ROW and kind in (1, 2)  # session 12)
            call = self._paired_head(call, k, n, trans_b, alpha, beta, kind if row else None)
        if (halves.ON and m == 1 and code != TANH and n >= 2 * HEAD_SPLIT_COLS and 4 * k * n >= HEAD_SPLIT_BYTES
                and two):
            return self._split_head(call, trans_a, trans_b, alpha, beta, k, n, no_bias)
        return call

    def _static_shape(self):
        """(M, K, N, transA, transB) of a node whose inputs are static 2-D float32 (C one value per column
        or absent), or None."""
        specs = self.input_specs
        if len(specs) < 2 or any(s is not None and (not s.is_static or s.layout) for s in specs):
            return None
        at = self.attrs
        a_spec, b_spec = specs[0], specs[1]
        c_spec = specs[2] if len(specs) > 2 else None
        if a_spec.dtype != "float32" or b_spec.dtype != "float32" or len(a_spec.shape) != 2 or len(b_spec.shape) != 2:
            return None
        trans_a, trans_b = at.get("transA", 0), at.get("transB", 0)
        m, k = a_spec.shape[::-1] if trans_a else a_spec.shape
        n = b_spec.shape[0] if trans_b else b_spec.shape[1]
        if c_spec is not None and (math.prod(c_spec.shape) != n or not c_spec.shape or c_spec.shape[-1] != n):
            return None
        return m, k, n, trans_a, trans_b

    def bound_compute(self):
        """``compute``, or where fgemm's micro-kernels take this node's static shape, the bound call of
        ``_bound_tiles`` at each call's thread budget (two threads: fpair's halves; issue 11, session 10)."""
        shape = self._static_shape()
        if shape is None:
            return self.compute
        m, k, n, trans_a, _trans_b = shape
        if m > 1 and k and n and not trans_a and fgemm.kind_for(m, k, n) is not None:
            return self._bound_tiles(m, k, n, False)
        return self.compute

    def _bound_tiles(self, m, k, n, serial: bool):
        """The call of a product on fgemm's micro-kernels (``fgemm.serial``: everything but A and the
        output fixed at the first call) while B and C are the constants that first call saw (the same
        arrays every call); anything else runs the general path (issue 11, session 10: the general
        path's decisions cost 10-40 us a node, the MLP's and the transformer's products). ``serial``:
        the one-thread call (``serial_call``), else ``bound_compute``'s at each call's budget."""
        at = self.attrs
        trans_b = at.get("transB", 0)
        alpha, beta = np.float32(at.get("alpha", 1.0)), np.float32(at.get("beta", 1.0))
        code, p0, p1 = self.act
        local, bound, flops = config._local, [], 2.0 * m * n * k
        narrow = serial and HEAD_NARROW  # (one thread only: at two, fpair's halves run the kinds of kind_for)

        def general(a, b, c, out):
            if not serial:
                return self.compute(a, b, c, out=out)
            was = getattr(local, "threads", None)
            local.threads = 1
            try:
                config.blas_single()
                return self.compute(a, b, c, out=out)
            finally:
                local.threads = was

        def call(a, b, c=None, *, out=None):
            if bound and bound[0] is b and bound[1] is c and a.flags.c_contiguous and \
                    (out is None or out.flags.c_contiguous):
                y = np.empty((m, n), np.float32) if out is None else out
                threads = 1 if serial else config.current_threads()
                bound[2](a, y, threads, tile_count(flops) if threads > 1 else 1)
                return y
            if not bound and not b.flags.writeable and (c is None or not c.flags.writeable) and \
                    a.dtype == np.float32 and b.dtype == np.float32:
                kind = self._const_b.kind(m, k, n, narrow)
                if serial and kind is not None:
                    kind = fgemm.one_thread_kind(kind)  # (WIDE_ONE_THREAD: the 8 x 48 tiles)
                align = (fgemm.PACK_ALIGN_ONE_THREAD or None) if serial else None
                packed = None if kind is None else self._const_b.get(b, b.T if trans_b else b, kind, align)
                if packed is not None:
                    bias = None if c is None or beta == 0 else np.asarray(c, np.float32).reshape(n) * beta
                    pf = fgemm.PREFETCH_ONE_THREAD if serial else None
                    ahead, pack = (fgemm.B_AHEAD_ONE_THREAD, fgemm.PACK_A_ONE_THREAD) if serial else (0, False)
                    whole, mr = (fgemm.WHOLE_ONE_THREAD, fgemm.MR_ONE_THREAD) if serial else (0, None)
                    pad = fgemm.PAD_A_ONE_THREAD if serial else 0
                    bound.extend((b, c, fgemm.serial(kind, packed, m, alpha, bias, code, p0, p1, pf, ahead, pack,
                                                     whole, mr, pad)))
                    return call(a, b, c, out=out)  # the first call bound too: at two threads the general
                    # path's pool job (gemm_nt's few rows) would start a worker that spins through every run
            return general(a, b, c, out)

        return call

    def _row_head(self, call, kind, k, n, trans_b, alpha, beta):
        """A one-row product on fgemm.row (the weights packed once at the first call, one pass over them
        on 1-row tiles of ``kind``) while B and C are the arrays of that first call (constants); ``call``
        (np.matmul) for anything else. Tanh (HEAD_ROW_TANH) runs as np.tanh over the tiles' output."""
        code, p0, p1 = self.act
        tanh = code == TANH
        if tanh:
            code = NONE
        bound = []

        def row(a, b, c=None, *, out=None):
            if not bound:
                if b.flags.writeable or b.dtype != np.float32 or (c is not None and c.flags.writeable):
                    bound.extend((None, None, None))
                else:
                    bias = None if c is None or beta == 0 else np.asarray(c, np.float32).reshape(n) * beta
                    # (one copy with the head pair's)
                    packed = self._const_b.get(b, b.T if trans_b else b, kind, HEAD_ALIGN)
                    bound.extend((b, c, None if packed is None else fgemm.row(kind, packed, alpha, bias, code, p0, p1)))
            if bound[2] is not None and bound[0] is b and bound[1] is c and a.flags.c_contiguous and \
                    a.dtype == np.float32 and (out is None or out.flags.c_contiguous):
                y = np.empty((1, n), np.float32) if out is None else out
                bound[2](a, y)
                if tanh:
                    np.tanh(y, out=y)
                return y
            return call(a, b, c, out=out)

        row.thread_safe = True  # (two first calls at once pack twice: the last one's list entries win)
        return row

    def _paired_head(self, call, k, n, trans_b, alpha, beta, kind=None):
        """A one-row product of a large constant weight at two threads as two output halves on fpair's
        helper, handed over in compiled code (hpair.py: MobileNetV2's head, whose pool split never ran),
        while B and C are the arrays of its first call; ``call`` (the one-thread call) where the pool's
        worker spins (no pair then), the helper refuses (asleep: woken now; backed off; a busy slot) or
        the inputs are not those constants. ``kind``: the halves run fgemm.row's 1-row tiles of this
        variant over the weights packed once (fgemm.row_pair; None: hpair's own loops over B in place)."""
        bound = []

        def paired(a, b, c=None, *, out=None):
            if not bound:
                if b.flags.writeable or not b.flags.c_contiguous or (c is not None and c.flags.writeable):
                    bound.extend((None, None, None))
                else:
                    bias = np.zeros(n, np.float32) if c is None or beta == 0 else \
                        np.asarray(c, np.float32).reshape(n) * beta
                    packed = None if kind is None else self._const_b.get(b, b.T if trans_b else b, kind, HEAD_ALIGN)
                    made = hpair.descriptor(b, bias, alpha, k, n, trans_b) if packed is None else \
                        fgemm.row_pair(kind, packed, alpha, bias) or None
                    bound.extend((b, c, made))
            made = bound[2]
            if made is not None and bound[0] is b and bound[1] is c and a.flags.c_contiguous and \
                    a.dtype == np.float32 and (out is None or out.flags.c_contiguous) and \
                    not halves.worker_spinning():
                y = np.empty((1, n), np.float32) if out is None else out
                if fpair.run(made, a.reshape(-1), y.reshape(-1)):
                    return y
            return call(a, b, c, out=out)

        paired.thread_safe = True  # fpair's slot: a second caller finds it held and runs the call
        return paired

    def _split_head(self, call, trans_a, trans_b, alpha, beta, k, n, no_bias):
        """A one-row product of a large weight (a classifier head: MobileNetV2's 1280 x 1000, 5 MiB)
        at two threads, while the pool's worker spins (other parallel nodes in the run): the
        matrix-vector product runs at memory speed, so two cores streaming half of the weight each
        finish sooner (Xeon: 0.34 -> 0.26 ms); two shares of columns (halves.py), each its np.matmul
        into its part of the output and its part of the bias and activation. The caller's share is
        larger by LEAD_FLOPS counted as HEAD_FLOPS_PER_BYTE a weight byte. With no worker spinning
        it is the one-thread call: no job."""
        code, p0, p1 = self.act
        zero = np.float32(0)
        cut = halves.caller_parts(n // HEAD_SPLIT_COLS, 4.0 * k * n * HEAD_FLOPS_PER_BYTE) * HEAD_SPLIT_COLS

        def split(a, b, c=None, *, out=None):
            if not halves.worker_spinning() or config._POOL.backed_off():
                # no worker spinning through this run (a model whose only parallel node is its head:
                # MobileNetV2 at two threads; its job a run woke a sleeping worker, 73-91 us late, and
                # once the worker had its spin loop the heartbeats kept it spinning beside every
                # serial node), or one thread for now: one call
                return call(a, b, c, out=out)
            config.blas_single()
            y = np.empty((1, n), np.float32) if out is None else out
            lhs, rhs = a.T if trans_a else a, b.T if trans_b else b
            if c is None:
                bias, bscale = no_bias, zero
            else:
                bias, bscale = config.readonly(np.ascontiguousarray(c, dtype=np.float32).reshape(n)), beta

            def part(c0, c1):
                np.matmul(lhs, rhs[:, c0:c1], out=y[:, c0:c1])
                scale_bias_act_cols(y, alpha, bias, bscale, code, p0, p1, 0, 1, c0, c1)

            halves.run(lambda: part(0, cut), lambda: part(cut, n))
            return y

        split.thread_safe = True
        return split

    def compute(self, a, b, c=None, *, out=None):
        at = self.attrs
        dtype = a.dtype
        lhs = a.T if at.get("transA", 0) else a
        rhs = b.T if at.get("transB", 0) else b
        y = np.empty((lhs.shape[0], rhs.shape[1]), dtype) if out is None else out
        n = y.shape[1]
        alpha, beta = dtype.type(at.get("alpha", 1.0)), dtype.type(at.get("beta", 1.0))
        code, p0, p1 = self.act
        if c is not None and c.size == n and c.ndim >= 1 and c.shape[-1] == n:
            bias = np.ascontiguousarray(c, dtype=dtype).reshape(n)  # one bias per column
            fused = True
        else:  # no C, or a scalar, per-row or full C: NumPy broadcasting after the GEMM
            bias, fused = config.readonly(np.zeros(n, dtype)), c is None
            if c is None:
                beta = dtype.type(0)
        if fused and dtype == np.float32 and b.ndim == 2 and y.flags.c_contiguous and self._tiles(lhs, rhs, b, y,
                                                                                              alpha, beta, bias):
            return y
        if fused and (alpha != 1 or beta != 0 or code != NONE):
            def epilogue(r0, r1, c0, c1):
                scale_bias_act_cols(y, alpha, bias, beta, code, p0, p1, r0, r1, c0, c1)
        else:
            epilogue = None
        if (at.get("transB", 0) and not at.get("transA", 0) and dtype == np.float32 and b.ndim == 2
                and gemm_nt.usable(y.shape[0], n)):
            nt_matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), y, epilogue)
        else:
            tiled_matmul(lhs, rhs, y, epilogue)
        if not fused:
            y *= alpha
            y += beta * c
            if code != NONE:
                scale_bias_act_cols(y, dtype.type(1), bias, dtype.type(0), code, p0, p1)
        return y

    def _tiles(self, lhs, rhs, b, y, alpha, beta, bias) -> bool:
        """y on fgemm's micro-kernels when B is a constant and the shape class wins (or
        KERNELKIT_F32_GEMM forces a variant); False: the BLAS path runs."""
        m, k = lhs.shape
        n = y.shape[1]
        if m == 0 or n == 0 or k == 0:
            return False
        if self.attrs.get("transB", 0) and not self.attrs.get("transA", 0) and gemm_nt.usable(m, n):
            return False  # a few rows: gemm_nt
        kind = self._const_b.kind(m, k, n)
        packed = None if kind is None else self._const_b.get(b, rhs, kind)
        if packed is None:
            return False
        code, p0, p1 = self.act
        bias = None if beta == 0 else bias if beta == 1 else bias * beta
        fgemm.gemm(kind, packed, lhs, y, alpha, bias, code, p0, p1, tile_count(2.0 * m * n * k))
        return True


TANH_GELU_PASS = True  # MatMul's fused tanh Gelu as unary's pass after the product (False: the epilogue's)
# MatMul's fused residual (core's fuse_matmul_residual: Add(MatMul(A, W, bias), r) -> MatMul(A, W, bias, r))
# in fgemm's accumulators at one thread: the output starts as r (the plan writes the output over r's block,
# else r is copied in) and the tiles' first K chunk resumes from it, so r is read where the tiles load their
# output block anyway (False: the product, then np.add of r: the two nodes' work in one step)
RESIDUAL_TILES = True
# ... at every thread count, not only at one: at two, fpair's halves start from their own rows or columns of r
# (fgemm.RESID_PAIRS), at more the pool's shares from theirs (issue 11, session 13; False: at two threads and
# up the product into this thread's scratch, then np.add of r into the output, the unfused pair's two passes)
RESIDUAL_THREADS = True


@register_kernel("MatMul", device="cpu", vendor="numba", dtype="float32")
class MatMul(NumbaKernel):
    """NumPy matmul semantics (1-D operands promoted, batch dims broadcast) + an optional bias (N
    values, core's ``fuse_matmul_bias``) + fused activation. N-D products run as (batch item, tile)
    shards."""

    uses_blas = True
    bias_input = True  # fuse_matmul_bias: the bias goes into fgemm's epilogue (or one pass after BLAS)
    residual_input = True  # fuse_matmul_residual: a residual Z (the output's shape) in fgemm's accumulators

    def setup(self, input_specs):
        self.act = self.fused_activation(input_specs)
        self._const_b = ConstantB()
        code, p0, _ = self.act
        # GELU's tanh form after the product (GPT-2's feed-forward MatMul + bias + Gelu): the product
        # and bias, then unary's vectorised one-pass formula over the output in place; the epilogue's
        # scalar form is a libm expf per value (64 x 3072: ~7 against ~3 ms for the product alone)
        self._gelu_tanh = bool(TANH_GELU_PASS and code == GELU and p0 != 0 and input_specs[0].dtype == "float32")
        if self._gelu_tanh:
            self.act = (NONE, p0 * 0, p0 * 0)

    def _bias_act(self, y, bias, act=None):
        """The bias (None: none) and the fused activation (``act``: (code, p0, p1), None: the node's) over
        a one-call product's output, in place."""
        code, p0, p1 = self.act if act is None else act
        if bias is not None and code == NONE:
            np.add(y, bias, out=y)
        elif (code != NONE or bias is not None) and y.size:
            rows = y.reshape(-1, y.shape[-1] if y.ndim else 1)
            add = bias if bias is not None else config.readonly(np.zeros(rows.shape[1], y.dtype))
            scale_bias_act_cols(rows, y.dtype.type(1), add, y.dtype.type(0 if bias is None else 1), code, p0, p1)
        return y

    def _after(self, y):
        """The activation the epilogue left out (``_gelu_tanh``), in place on y."""
        if self._gelu_tanh and y.size:
            from .unary import _ALPHA_ONE, _gelu_tanh_pass, _logistic_apply

            _logistic_apply(_gelu_tanh_pass, y, _ALPHA_ONE, y)
        return y

    def serial_call(self, step):
        """Static products on one thread that fgemm does not take (the attention's batched
        products, a B that is not 2-D; ``NumbaKernel.bind`` takes this call when the thread budget
        is 1): one ``np.matmul`` into the output, as the reference (and the general path on one
        thread) runs it, then the fused activation: the general path's per-call decisions cost
        10-40 us a node inside GPT-2 (its 24 attention products, ~0.08 ms each). None where the
        general path runs: shapes not static, not float32, a 1-D operand, or a 2-D B whose shape
        fgemm takes (a constant weight: the micro-kernels)."""
        specs = self.input_specs
        if len(specs) not in (2, 3) or any(s is None or not s.is_static or s.layout for s in specs):
            return None
        a_spec, b_spec = specs[:2]
        if a_spec.dtype != "float32" or b_spec.dtype != "float32" or len(a_spec.shape) < 2 or len(b_spec.shape) < 2:
            return None
        if len(b_spec.shape) == 2 and fgemm.kind_for(math.prod(a_spec.shape[:-1]), *b_spec.shape) is not None:
            return None
        bias_act, after, compute = self._bias_act, self._after, self.compute

        def call(a, b, bias=None, z=None, *, out=None):
            if z is not None:  # a fused residual: the general call on this thread alone
                with config.num_threads(1):
                    return compute(a, b, bias, z, out=out)
            config.blas_single()
            return after(bias_act(np.matmul(a, b, out=out), bias))

        call.thread_safe = True  # no per-call state: the plan's settled call needs no lock
        return call

    def work(self, a, b, bias=None, z=None):
        """2 * batch * M * N * K."""
        m = a.shape[-2] if a.ndim > 1 else 1
        n = b.shape[-1] if b.ndim > 1 else 1
        batch = math.prod(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
        return gemm_work(2.0 * batch * m * n * (a.shape[-1] if a.ndim else 1))

    def compute(self, a, b, bias=None, z=None, *, out=None):
        if z is not None:
            return self._after(self._residual(a, b, bias, z, out))
        return self._after(self._product(a, b, bias, out))

    def _residual(self, a, b, bias, z, out):
        """act(a @ b + bias + z) into ``out`` (which may be z's own memory: the plan writes the output
        over the residual's block): on fgemm's tiles with the output starting as z (``RESIDUAL_TILES``; at
        one thread, or at any with ``RESIDUAL_THREADS``), else the product without the activation, z added,
        then the activation."""
        if RESIDUAL_TILES and (RESIDUAL_THREADS or config.current_threads() == 1) and b.ndim == 2 and a.ndim >= 2 and \
                a.dtype == np.float32 and b.dtype == np.float32 and z.dtype == np.float32 and a.flags.c_contiguous:
            shape = a.shape[:-1] + b.shape[-1:]
            if z.shape == shape and self._const_b.kind(math.prod(a.shape[:-1]), *b.shape) is not None and \
                    (out is None or out.flags.c_contiguous):
                y = np.empty(shape, np.float32) if out is None else out
                if not same_memory(y, z):
                    np.copyto(y, z)
                if self._tiles(a, b, y, None if bias is None else np.ascontiguousarray(bias, np.float32),
                               resid=True) is not None:
                    return y
                z = y  # no tiles after all: y holds z
                out = y
        code, p0, p1 = self.act
        plain = (NONE, p0 * 0, p0 * 0)
        into = out
        if out is not None and (np.shares_memory(out, z) or out.shape != _product_shape(a, b)):
            into = None  # the product on its own first (z is the output's memory, or z broadcasts the product up)
            if out.shape == _product_shape(a, b):  # this thread's scratch
                into = config.thread_buffer("matmul_z", out.size, out.dtype).reshape(out.shape)
        y = self._product(a, b, bias, into, plain)
        if out is None:
            y = np.add(y, z, out=y) if np.broadcast_shapes(y.shape, z.shape) == y.shape else np.add(y, z)
        else:
            y = np.add(y, z, out=out)
        return self._bias_act(y, None) if code != NONE else y

    def _product(self, a, b, bias, out, act=None):
        code, p0, p1 = act = self.act if act is None else act
        if bias is not None:
            if b.ndim < 2 or bias.shape != (b.shape[-1],):
                raise ValueError(f"MatMul bias {bias.shape} is not one value per column of B {b.shape}")
            bias = np.ascontiguousarray(bias, dtype=a.dtype)
        if (b.ndim == 2 and a.ndim >= 2 and a.dtype == np.float32 and b.dtype == np.float32 and a.flags.c_contiguous
                and (out is None or out.flags.c_contiguous)):
            y = self._tiles(a, b, out, bias, act=act)
            if y is not None:
                return y
        if a.ndim < 2 or b.ndim < 2 or config.current_threads() == 1:  # one NumPy call, as the reference
            if out is not None and a.ndim >= 2 and b.ndim >= 2:
                y = np.matmul(a, b, out=out)
            else:
                y = np.asarray(np.matmul(a, b))  # vector @ vector gives a NumPy scalar: keep a 0-d array
                if out is not None:
                    out[...] = y
                    y = out
            return self._bias_act(y, bias, act)
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        if b.shape[-2] != k:
            raise ValueError(f"MatMul operands {a.shape} and {b.shape} do not align")
        y = np.empty(batch + (m, n), a.dtype) if out is None else out
        a3 = np.broadcast_to(a, batch + (m, k))
        b3 = np.broadcast_to(b, batch + (k, n))
        items = math.prod(batch)
        zeros = config.readonly(np.zeros(n, y.dtype)) if code != NONE else None
        one, zero = y.dtype.type(1), y.dtype.type(0)
        if bias is not None:  # the bias in the same epilogue, beta 1
            zeros, zero = bias, one
        if y.size == 0:
            return y
        rows, cols = tile_grid(m, n, -(-tile_count(2.0 * items * m * n * k) // items))

        items_at = list(np.ndindex(batch)) if batch else [()]

        def shard(t):
            item, rest = divmod(t, rows * cols)
            idx = items_at[item]
            out = y[idx]
            mt, pt = divmod(rest, cols)
            r0, r1 = mt * m // rows, (mt + 1) * m // rows
            c0, c1 = _edge(pt, cols, n), _edge(pt + 1, cols, n)
            np.matmul(a3[idx][r0:r1, :], b3[idx][:, c0:c1], out=out[r0:r1, c0:c1])
            if zeros is not None:
                scale_bias_act_cols(out, one, zeros, zero, code, p0, p1, r0, r1, c0, c1)

        config.run_shards(shard, items * rows * cols)
        return y

    def _tiles(self, a, b, out, bias=None, resid=False, act=None):
        """a (..., M, K) @ a constant b (K, N) (+ bias) on fgemm's micro-kernels, the batch rows
        flattened into M, or None (the BLAS path). ``resid``: ``out`` holds a residual to add (fgemm's
        ``resid``); ``act``: (code, p0, p1), None: the node's."""
        k, n = b.shape
        if a.shape[-1] != k or a.size == 0 or n == 0:
            return None
        a2 = a.reshape(-1, k)
        kind = self._const_b.kind(a2.shape[0], k, n)
        packed = None if kind is None else self._const_b.get(b, b, kind)
        if packed is None:
            return None
        y = np.empty(a.shape[:-1] + (n,), np.float32) if out is None else out
        code, p0, p1 = self.act if act is None else act
        m = a2.shape[0]
        fgemm.gemm(kind, packed, a2, y.reshape(-1, n), 1.0, bias, code, p0, p1, tile_count(2.0 * m * n * k), resid)
        return y


def _product_shape(a, b) -> tuple:
    """The shape of np.matmul(a, b) (a 1-D operand promoted, then its axis dropped, as NumPy does)."""
    sa, sb = tuple(a.shape), tuple(b.shape)
    a2 = sa if len(sa) > 1 else (1,) + sa
    b2 = sb if len(sb) > 1 else sb + (1,)
    shape = np.broadcast_shapes(a2[:-2], b2[:-2]) + (a2[-2], b2[-1])
    if len(sa) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(sb) == 1:
        shape = shape[:-1]
    return shape
