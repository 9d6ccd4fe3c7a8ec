"""float32 GEMM micro-kernels with a constant right operand (Gemm / MatMul by a weight), written as
LLVM IR (the GEMM counterpart of ftile.py's convolution tiles; ftile's variant choice and
KERNELKIT_F32_GEMM apply).

``out[m, n] = act(alpha * sum_k A[m, k] * B[k, n] + bias[n])``: B packed once per constant into
panels of ``nr`` columns (``bp[(P * K + k) * nr + j] = B[k, P * nr + j]``, the last panel padded
with zeros), A packed per call into panels of ``mr`` rows (``ap[(T * K + k) * mr + r] = A[T * mr +
r, k]``, zero rows past M: one contiguous stream per tile, where A's own rows 4 KiB apart would
share an L1 set). One tile is ``mr`` rows x ``nr`` columns of accumulators held as ``phi`` vectors
across the K loop: each step loads the panel's ``nr`` columns of row k of B (two vectors),
broadcasts the tile's ``mr`` values of A and multiplies-adds (``llvm.fma``). Then alpha, the bias
(one value per column, a vector), Clip/Relu in the registers and the store (masked in the last
panel). Other activations (Gelu, Sigmoid, ...) run over the tile right after its store, still in L1
(``epilogue.act`` with the code fixed per compiled driver).

Variants: ``avx512`` (8 rows x 32 columns, 16 zmm accumulators), ``avx2`` (6 x 16, 12 ymm),
``generic`` (plain Numba loops, 4 x 16: any CPU, the tests).

Loops (``gemm``): shards are (row block, column-panel group); per shard, K in equal chunks of at
most ``KC`` (a later chunk resumes from the stored partial sums, only the last applies the
epilogue), each column panel's chunk (kc x nr floats, in L1) over every row tile of the block; the
block's first row tiles prefetch the next panel's chunk into L2 (PREFETCH: in the model B streams
from L3).
"""
from __future__ import annotations

import functools

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .. import config
from ..cache import CLOSURE_KEY
from ..config import jit
from . import fpair, halves
from .epilogue import CLIP, NONE, act
from .ftile import _data, _TileIR, _vector_intrinsics, available, choice
from .qtile import k_loop

U = np.uint64
# NARROW: avx512 tiles of one vector of columns (8 x 16), for products of at most 16 columns (the MLP's
# 64 x 1024 x 10 head); off (NARROW_ON): on the AMD box 22 us against np.matmul's 14 (A's rows 4 KiB
# apart in one L1 set; gemm_nt's dot products 18), the head's 0.109 ms on the Xeon against the
# reference's 0.041 was the general path's per-call work (now Gemm's bound serial call)
NARROW = 3
# WIDE: avx512 tiles of 8 rows x 48 columns (three vectors: 24 zmm accumulators, 3 B loads + 8 broadcasts a K step,
# the shape of ftile's 1x1 cols tiles), for Gemm's one-thread bound call where WIDE_ONE_THREAD is on; the last
# panel of fewer than 48 columns runs tiles of one or two vectors over the same 48-float rows (_tail_tiles)
WIDE = 4
MR = {0: 4, 1: 6, 2: 8, NARROW: 8, WIDE: 8}  # rows of A per tile (bench_fgemm.py also runs avx512 with 12: MR replaced)
NR = {0: 16, 1: 16, 2: 32, NARROW: 16, WIDE: 48}  # columns of B per tile (a packed panel)
NARROW_ON = False
# a K chunk of a row block's A rows (the column panels pass over it in L2): 1 MiB ran at or above
# 256 KiB on every shape of bench_fgemm.py on both machines (Xeon: 128 x 768 x 3072 151 vs 118
# GFLOP/s, 128 x 3072 x 768 133 vs 105, the MLP's and transformer's shapes within 3 %; AMD box
# 105-115 vs 91-109), where the 256 KiB of the first AMD round lost BERT's products to OpenBLAS
BLOCK_BYTES = 1 << 20
DIRECT_A = True  # broadcast from A's own rows where A is C-contiguous (AMD box: 0-7% above packing A first)
# the next column panel's K chunk prefetched into L2 by the first row tiles of the current one, this many
# floats a K step (driver; 0: off). 4 (a line every 4 steps over the first nr / 4 tiles): B streams from
# L3 in the model (bench_fgemm_cold.py, Xeon: 64 x 1024 x 1024 with B cold 130 against 93 GFLOP/s, the
# whole MLP at one thread 0.82 of no prefetch in one process; AMD box 0.95)
PREFETCH = 4
# Gemm's one-thread bound call (fgemm.serial from Gemm.serial_call) with this PREFETCH instead (None: PREFETCH):
# Xeon, the MLP b64 at one thread in turns (issue 11, session 11), 8 faster than 4 in 6 of 7 rounds, median
# 1.12x (the next panel's chunk prefetched over the first 4 row tiles instead of 8: done before the 8th)
PREFETCH_ONE_THREAD = 8
# Gemm's one-thread bound call packs A into row tiles (pack_a: each tile's mr rows one contiguous stream)
# instead of broadcasting from A's own rows (DIRECT_A), read when the call binds. Off: issue 11, session 12,
# Xeon: the MLP's products with B cold 109 / 123 GFLOP/s against 119 / 121, in turns 0.99x; AMD box 0.95-0.97x
PACK_A_ONE_THREAD = False
# Gemm's one-thread bound call's tiles prefetch their panel's row k + B_AHEAD into L1 at step k (0: off; read
# when the call binds): the 8 row tiles of a column panel each read its 100-128 KiB from L2. Issue 11,
# session 12, Xeon: the MLP b64's products with B cold 130-131 GFLOP/s against 119-121 (bench mlp_parts.py),
# the MLP in turns numba 1t / ahead8 1.16 (9 rounds), reference / ahead8 1.50; 16: 1.10; AMD box a tie
B_AHEAD_ONE_THREAD = 8
# the same L1 prefetch in fpair's two-thread halves (read when a product's descriptor is made; 0: off, not
# measured on the Xeon: ``--variant ahead8=kernels.fgemm.B_AHEAD_PAIR=8``)
B_AHEAD_PAIR = 0
KC = 1024  # at most this much K per chunk (bench_fgemm.py: whole K up to 1024 ran 3-15% above chunks of 256-512)


# The packed panels start at a multiple of this many bytes (0 or 1: where NumPy's allocation puts them, 16 bytes
# into a page for large arrays, so that every 64-byte vector of a panel spans two cache lines; from HUGE_PAGE:
# on transparent huge pages; read when a weight is packed; issue 11, session 13)
PACK_ALIGN = 0
HUGE_PAGE = config.HUGE_PAGE
# Gemm's one-thread bound call (the MLP's products) takes three switches, read when the call binds (issue 11,
# session 16; docs/numba.md, "The MLP's products at one thread: whole 12-row tiles"). The three on (WHOLE 1), the
# Xeon in turns alone: numba 1t / them 1.06 (1.01-1.10, faster in 10 of 10 rounds; reference / them 1.44 against
# 1.35) in the first call, 1.04 (0.65-1.27, 8 of 12) in the second; with WHOLE 2, 1.05 (0.66-1.54, 7 of 12;
# reference / them 1.50 against 1.38). Off: the values in brackets.
# - PACK_ALIGN_ONE_THREAD: its B packed at a multiple of this many bytes (pack_b's align; 0: PACK_ALIGN): 64 puts each
#   64-byte vector of a panel in one cache line, where NumPy's placement (16 bytes past a line) splits each of the
#   tile's two B loads a K step over two lines. Alone 1.01 in turns; the 12-row tiles without it 0.97. [0]
# - WHOLE_ONE_THREAD: 1, its row tiles whose rows are all valid run tiles compiled for that (_driver's ``whole``:
#   row r of A at a constant r * lda, where the general tile's select of the last valid row made each row's address
#   a register of its own; cache names ``.w1``); 2, the same with every tile of the driver a function of its own
#   (``.w2``). Stack accesses a K step in the compiled loops (AMD box's asm), the mixed driver's 12-row / 8-row
#   tiles: general 10-14 / 17-20, whole inlined 3 / 8, whole apart 0 / 1-1.5; the 8-row driver's: 1.5, 0, 1-1.5. [0]
# - MR_ONE_THREAD: its avx512 tiles' rows (None: MR's). 12: 12-row tiles and 8-row ones for the last rows (row_tiles:
#   the MLP's 64 rows as 4 x 12 + 2 x 8, each column panel read 6 times from L2, not 8, and 24 FMAs a step against 14
#   loads); session 11 measured it 0.90x, its K loop spilling the row pointers, which the whole tiles do not. [None]
PACK_ALIGN_ONE_THREAD = 64
WHOLE_ONE_THREAD = 1
MR_ONE_THREAD = 12
# Gemm's one-thread bound call copies A (C-contiguous, rows lda = K floats apart) into a thread buffer whose rows are
# K + PAD_A_ONE_THREAD floats apart, where K * 4 bytes is a multiple of PAD_A_EVERY, and its tiles broadcast from
# the copy (0: off; read when the call binds). A's rows 4 KiB apart (the MLP's 64 x 1024 x 1024) put a 12-row
# tile's 12 broadcast streams in one set of the L1 (the Xeon's 48 KiB 12-way, the AMD box's 32 KiB 8-way: 64 sets
# of 64 bytes, a set every 4 KiB); 16 floats (a line) more a row spread them over 12 sets. The copy (M x K floats,
# from L2: A is the previous product's output) changes no arithmetic (bit for bit the product without it). Issue
# 11, session 16 (mlpa16; docs/numba.md "The MLP's 1024-deep product: A's rows off one L1 set"). On at 16 after the
# lead's call L1 of session 17 (Xeon, mlpa16_round.sh): the MLP in turns numba 1t / pad16 1.05 (0.69-1.51; 10 of 12
# rounds at one host speed), reference / pad16 1.50 (1.56 at one speed) against 1.45; the 64 x 1024 x 1024 product
# alone 139 against 135 GFLOP/s (B cold); the transformer (its 128 x 1024 x 256 products take the copy) 0.98-0.996. [0]
PAD_A_ONE_THREAD = 16
PAD_A_EVERY = 4096
# ... and only where the product has at least this many columns (A's rows read once a column panel: the copy, M x K
# floats read and written, pays where the tiles read A many times; AMD box, mlp_parts.py with A cold, the MLP's
# 64 x 1024 x 10 head: 0.088 ms with the copy against 0.055 without)
PAD_A_MIN_N = 256
# Gemm's one-thread bound call on the WIDE tiles (8 x 48: the MLP's 64 rows as 8 whole tiles, 11 loads a K step for
# 24 FMAs against the 12 x 32 tiles' 14) where the avx512 tiles would run (one_thread_kind; read when the call binds;
# MR_ONE_THREAD does not apply to them). Off: issue 11, session 17 (mlp17; docs/numba.md, "The MLP's products on
# 8 x 48 tiles, and the ratio in blocks"), Xeon: level with the 12 x 32 tiles, the products alone (B cold) 101 / 101
# against 104 / 100 GFLOP/s at the median; the MLP in turns numba 1t / wide 1.02 (0.72-1.35, faster in 12 of 20
# rounds) at the blocks' medians, 0.99 at their best calls (7 of 20); in one process's blocks 1.03 (0.67-1.25)
WIDE_ONE_THREAD = 0


def one_thread_kind(kind):
    """The variant of Gemm's one-thread bound call for ``kind`` (kind_for's): WIDE for avx512 where WIDE_ONE_THREAD
    is on now, else ``kind``."""
    return WIDE if kind == 2 and WIDE_ONE_THREAD else kind


def aligned_empty(size: int, align: int) -> np.ndarray:
    """A flat float32 array of ``size`` values whose data starts at a multiple of ``align`` bytes (> 1), in its
    own anonymous mapping: below HUGE_PAGE a shared one (4 KiB pages, whatever the system's huge-page
    setting for private memory; the layout session 13 measured on the Xeon), from HUGE_PAGE a private one
    advised as transparent huge pages (one TLB entry a 2 MiB page)."""
    import mmap

    if align >= HUGE_PAGE and hasattr(mmap, "MAP_PRIVATE"):  # (Windows' mmap has no flags: the plain anonymous
        # mapping below, aligned alike)
        return config.huge_pages(size * 4, align).view(np.float32)
    raw = np.frombuffer(mmap.mmap(-1, size * 4 + align), np.uint8)
    skip = -raw.ctypes.data % align
    return raw[skip:skip + size * 4].view(np.float32)


def pack_b(b: np.ndarray, nr: int, align: int | None = None) -> np.ndarray:
    """(K, N) float32 (any strides: a transposed weight as a view) into panels of ``nr`` columns,
    [panel][k][j], zero-padded columns: flat, read-only, starting at a multiple of ``align`` bytes (None:
    PACK_ALIGN; below a page: NumPy's allocation on that many bytes; at least HUGE_PAGE: on huge pages where the
    panels fill one, else at a 4 KiB page)."""
    k_n, n_n = b.shape
    panels = -(-n_n // nr)
    padded = np.zeros((k_n, panels * nr), np.float32)
    padded[:, :n_n] = b
    align = int(PACK_ALIGN if align is None else align)
    if align >= HUGE_PAGE and 4 * panels * k_n * nr < HUGE_PAGE:
        align = 4096  # (a huge page for less would hold mostly nothing)
    if align <= 1:
        out = np.ascontiguousarray(padded.reshape(k_n, panels, nr).transpose(1, 0, 2)).reshape(-1)
    else:
        # below a page: NumPy's own allocation, ``align`` bytes more, its huge-page advice for large arrays kept
        # (config.aligned_empty); from a page: a mapping of their own (aligned_empty above)
        out = config.aligned_empty(panels * k_n * nr, np.float32, align) if align < 4096 else \
            aligned_empty(panels * k_n * nr, align)
        out.reshape(panels, k_n, nr)[...] = padded.reshape(k_n, panels, nr).transpose(1, 0, 2)
    return config.readonly(out)


@jit
def pack_a(a, m_n, k_n, mr, ap, tall, short, short_mr):
    """(M, K) float32 ``a`` (2-D, any strides) into ``ap``: ``tall`` panels of ``mr`` rows, then
    ``short`` panels of ``short_mr`` rows (row_tiles), each [k][r] at row r0 * k_n of ``ap``, rows
    past M zero."""
    for t in range(tall + short):
        h = mr if t < tall else short_mr
        r0 = t * mr if t < tall else tall * mr + (t - tall) * short_mr
        base = r0 * k_n
        for r in range(h):
            m = r0 + r
            if m < m_n:
                row = a[m]
                for k in range(k_n):
                    ap[U(base + k * h + r)] = row[k]
            else:
                for k in range(k_n):
                    ap[U(base + k * h + r)] = np.float32(0)


# --------------------------------------------------------------------------------------------- IR
def _tile_intrinsic(kind: str, mr: int, nvec: int, masked: bool, prefetch: bool = False, ahead: int = 0,
                    whole: bool = False, apart: bool = False, bstride: int = 0):
    """An intrinsic ``tile(a, a_off, lda, a_step, b, b_off, k_n, first, alpha, bias, c0, out, o_off, ldo,
    lo, hi, m_valid, n_valid, pf, pfs)``: rows [0, m_valid) and columns [0, n_valid) of the mr x nr block of
    ``out`` at ``out[o_off:]`` (row stride ``ldo``) = clamp(alpha * (A at ``a[a_off + r * lda + k *
    a_step]`` (a packed panel: lda 1, a_step mr; A's own rows: lda, 1) times
    B panel at ``b[b_off:]`` ([k][nr]) over k < k_n) + bias[c0 + j], lo, hi) (NaN kept). ``first`` =
    0: the accumulators start from ``out`` (a later K chunk). ``masked``: only the first n_valid
    columns are read and stored. ``prefetch``: each step k also prefetches (into L2) the cache line
    holding ``b[pf + pfs * k]`` (a later panel of B: the driver's PREFETCH); without, pf and pfs unused.
    ``ahead`` (steps, 0: none): each step k also prefetches into L1 the panel's row k + ahead (its nvec
    vectors: B_AHEAD), which the tile reads ``ahead`` steps later. ``whole``: m_valid is mr (the caller's
    promise). ``apart``: the tile is a function of its own in the module (internal, noinline), called with
    the operands' pointers. ``bstride`` (floats, 0: nr): the panel's rows are this far apart, the tile reading
    the first nr columns of each (a WIDE driver's last panel on tiles of fewer vectors)."""
    lanes = 8 if kind == "avx2" else 16
    nr = lanes * nvec
    brs = int(bstride) or nr  # the packed panel's row stride

    def codegen(context, builder, sig, args):
        (a, a_off, lda, a_step, b, b_off, k_n, first, alpha, bias, c0, out, o_off, ldo, lo, hi, m_valid,
         n_valid, pf, pfs) = args
        i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
        if not available(kind):  # compiled on every CPU, selected only where it runs
            trap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.trap")
            builder.call(trap, [])
            return context.get_dummy_value()
        mod = builder.module
        vf, fma, mload, mstore = _vector_intrinsics(mod, lanes)
        pa = builder.gep(builder.bitcast(_data(context, builder, sig.args[0], a), f32.as_pointer()), [a_off])
        b_base = builder.bitcast(_data(context, builder, sig.args[4], b), f32.as_pointer())
        pb = builder.gep(b_base, [b_off])
        ppf = builder.gep(b_base, [pf])
        i8p = ir.IntType(8).as_pointer()
        prefetch_fn = cgutils.get_or_insert_function(mod, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                                  "llvm.prefetch.p0")
        pbias = builder.gep(builder.bitcast(_data(context, builder, sig.args[9], bias), f32.as_pointer()), [c0])
        po = builder.gep(builder.bitcast(_data(context, builder, sig.args[11], out), f32.as_pointer()), [o_off])

        def emit(builder, pa, lda, a_step, pb, ppf, k_n, first, alpha, pbias, po, ldo, lo, hi, m_valid, n_valid, pfs):
            tir = _TileIR(builder, lanes, nvec, mr, masked, mload, mstore, po, ldo, m_valid, n_valid)
            splat, vstore, row_of = tir.splat, tir.vstore, tir.row_of
            # rows past M read the last valid one; ``whole`` (the caller's promise that m_valid = mr): row r at
            # r * lda, offsets LLVM forms from one another (a few registers) where the selects made each row a
            # register of its own
            arows = [builder.gep(pa, [builder.mul(lda, ir.Constant(i64, r) if whole else row_of(r))])
                     for r in range(mr)]
            k, accs, close = k_loop(builder, k_n, [tir.zero_v] * (mr * nvec), "fgemm", (first, tir.partial_sums))
            brow = builder.gep(pb, [builder.mul(k, ir.Constant(i64, brs))])
            bv = [builder.load(builder.bitcast(builder.gep(brow, [ir.Constant(i64, lanes * j)]), vf.as_pointer()),
                               align=4) for j in range(nvec)]  # the packed panel: never past its end
            ak = builder.mul(k, a_step)
            if prefetch:
                line = builder.bitcast(builder.gep(ppf, [builder.mul(k, pfs)]), i8p)
                builder.call(prefetch_fn, [line, ir.Constant(i32, 0), ir.Constant(i32, 2), ir.Constant(i32, 1)])  # L2
            if ahead:
                later = builder.gep(brow, [ir.Constant(i64, ahead * brs)])
                for j in range(nvec):
                    line = builder.bitcast(builder.gep(later, [ir.Constant(i64, lanes * j)]), i8p)
                    builder.call(prefetch_fn, [line, ir.Constant(i32, 0), ir.Constant(i32, 3),
                                               ir.Constant(i32, 1)])  # L1
            new = []
            for r in range(mr):
                av = splat(builder.load(builder.gep(arows[r], [ak]), align=4))
                for j in range(nvec):
                    new.append(builder.call(fma, [av, bv[j], accs[r * nvec + j]]))
            close(new)
            lov, hiv, alv = splat(lo), splat(hi), splat(alpha)
            biases = [builder.load(builder.bitcast(builder.gep(pbias, [ir.Constant(i64, lanes * j)]), vf.as_pointer()),
                                   align=4) for j in range(nvec)]  # the bias is padded to whole panels
            for r in range(mr):
                with builder.if_then(builder.icmp_signed("<", ir.Constant(i64, r), m_valid), likely=True):
                    off = builder.mul(ldo, ir.Constant(i64, r))
                    for j in range(nvec):
                        at = builder.add(off, ir.Constant(i64, lanes * j))
                        v = builder.call(fma, [accs[r * nvec + j], alv, biases[j]])
                        v = builder.select(builder.fcmp_ordered("<", v, lov), lov, v)  # max(v, lo), NaN kept
                        v = builder.select(builder.fcmp_ordered(">", v, hiv), hiv, v)  # min(v, hi)
                        vstore(v, builder.gep(po, [at]), j)

        values = (pa, lda, a_step, pb, ppf, k_n, first, alpha, pbias, po, ldo, lo, hi, m_valid, n_valid, pfs)
        if not apart:
            emit(builder, *values)
            return context.get_dummy_value()
        # the tile as a function of its own (internal, never inlined), called here: its K loop's registers are
        # allocated alone, not beside every value the driver keeps across it
        name = f"kk_fgemm_tile_{kind}_{mr}x{nvec}_{int(masked)}{int(prefetch)}_{ahead}_{int(whole)}" + \
            (f"_s{brs}" if brs != nr else "")
        fn = mod.globals.get(name)
        if fn is None:
            f32p = f32.as_pointer()
            fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [f32p, i64, i64, f32p, f32p, i64, i64, f32, f32p,
                                                                  f32p, i64, f32, f32, i64, i64, i64]), name)
            fn.linkage = "internal"
            fn.attributes.add("noinline")
            inner = ir.IRBuilder(fn.append_basic_block("entry"))
            emit(inner, *fn.args)
            inner.ret_void()
        builder.call(fn, values)
        return context.get_dummy_value()

    @intrinsic
    def tile(typingctx, a, a_off, lda, a_step, b, b_off, k_n, first, alpha, bias, c0, out, o_off, ldo, lo, hi, m_valid,
             n_valid, pf, pfs):
        i64, f = types.int64, types.float32
        return (types.void(a, i64, i64, i64, b, i64, i64, i64, f, bias, i64, out, i64, i64, f, f, i64, i64, i64, i64),
                codegen)

    return tile


@jit
def _generic_tile(a, a_off, lda, a_step, b, b_off, k_n, first, alpha, bias, c0, out, o_off, ldo, lo, hi, m_valid,
                  n_valid, pf, pfs):
    """The tiles' arithmetic in plain loops (4 rows x 16 columns; ``pf``, ``pfs`` unused)."""
    acc = np.zeros((4, 16), np.float32)
    if not first:
        for r in range(m_valid):
            for j in range(n_valid):
                acc[r, j] = out[o_off + r * ldo + j]
    for k in range(k_n):
        for r in range(m_valid):
            av = a[a_off + r * lda + k * a_step]
            for j in range(16):
                acc[r, j] += av * b[b_off + k * 16 + j]
    for r in range(m_valid):
        for j in range(n_valid):
            v = acc[r, j] * alpha + bias[c0 + j]
            if v < lo:
                v = lo
            if v > hi:
                v = hi
            out[o_off + r * ldo + j] = v


@intrinsic
def _prefetch_write(typingctx, arr, idx):
    """``_prefetch_write(arr, i)``: a hint to fetch the cache line of ``arr[i]`` (float32, flat) for writing
    (``llvm.prefetch``, rw 1, locality 3: into L1); never faults."""

    def codegen(context, builder, sig, args):
        a, i = args
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        base = builder.bitcast(_data(context, builder, sig.args[0], a), ir.FloatType().as_pointer())
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(builder.gep(base, [i]), i8p), ir.Constant(i32, 1), ir.Constant(i32, 3),
                          ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(arr, types.int64), codegen


# with a residual in the accumulators (the driver's resid), each tile of the first K chunk first prefetches
# the next tile's output block (the residual it starts from) for writing: the tiles load it before their K
# loop, and a load from L3 there stalls the whole tile (0: off)
RESID_PREFETCH = 1


@functools.cache
def _tiles(kind: int, mr: int, prefetch: bool = False, ahead: int = 0, whole: bool = False, apart: bool = False):
    """(full, masked) tiles of variant ``kind`` with ``mr`` rows (generic: 4 only), with the prefetches; ``whole``:
    for row tiles of mr valid rows only, ``apart``: functions of their own (_tile_intrinsic's)."""
    if kind == 0:
        return _generic_tile, _generic_tile
    name = "avx512" if kind in (2, NARROW, WIDE) else "avx2"
    nvec = 1 if kind == NARROW else 3 if kind == WIDE else 2
    return (_tile_intrinsic(name, mr, nvec, False, prefetch, ahead, whole, apart),
            _tile_intrinsic(name, mr, nvec, True, prefetch, ahead, whole, apart))


@functools.cache
def _tail_tiles(mr: int, prefetch: bool = False, ahead: int = 0, whole: bool = False, apart: bool = False):
    """(one, two): masked avx512 tiles of one and two vectors of columns over a WIDE panel (rows NR[WIDE] floats
    apart): a last panel of at most 16 or 32 columns without the third vector's FMAs."""
    nr = NR[WIDE]
    return (_tile_intrinsic("avx512", mr, 1, True, prefetch, ahead, whole, apart, nr),
            _tile_intrinsic("avx512", mr, 2, True, prefetch, ahead, whole, apart, nr))


MIXED_MR = 12  # an avx512 driver of this height also has 8-row tiles for the last rows (row_tiles)
SHORT_MR = 8


def row_tiles(m_n: int, mr: int) -> tuple[int, int]:
    """(tall, short): the row tiles of a product of ``m_n`` rows on ``mr``-row tiles: ``tall`` tiles of
    mr rows, then (only for mr = MIXED_MR) ``short`` tiles of SHORT_MR rows, 0-2 of them, whichever
    computes the fewest rows (64 rows = 4 x 12 + 2 x 8, where 12-row tiles alone would compute 72;
    128 = 10 x 12 + 8)."""
    if mr != MIXED_MR:
        return -(-m_n // mr), 0
    best = None
    for short in range(3):
        tall = -(-max(0, m_n - SHORT_MR * short) // mr)
        key = (tall * mr + short * SHORT_MR, tall + short)
        if best is None or key < best[0]:
            best = (key, tall, short)
    return best[1], best[2]


def driver(kind: int, post: int, mr: int, prefetch: int | None = None, ahead: int = 0, resid: bool = False,
           whole: int = 0):
    """_driver with PREFETCH (now) unless ``prefetch`` is given; ``ahead``: the tiles' B_AHEAD; ``resid``:
    the first K chunk starts from ``out`` (a fused residual already there); ``whole`` (WHOLE_ONE_THREAD): 1,
    row tiles of mr valid rows on tiles without the last-row selects; 2, those and every other tile of the
    driver each a function of its own."""
    return _driver(kind, post, mr, int(PREFETCH if prefetch is None else prefetch), int(ahead),
                   (2 if RESID_PREFETCH else 1) if resid else 0, int(whole) if kind != 0 else 0)


@functools.cache
def _driver(kind: int, post: int, mr: int, prefetch: int, ahead: int = 0, resid: int = 0, whole: int = 0):
    """The compiled loops of variant ``kind`` with ``mr``-row tiles and the activation ``post`` (an
    epilogue code other than NONE/CLIP, applied over each finished tile; NONE: the tile's clamp is
    all) fixed.

    ``gemm(ap, lda, bp, k_n, m_n, n_n, alpha, bias, zeros, out, ldo, lo, hi, p0, p1, block, groups, kc,
    s_lo, s_hi)``: shards [s_lo, s_hi), shard s being row block s // groups (``block`` row tiles)
    times column-panel group s % groups; ``ap`` A packed (``lda`` 0) or A's own rows (flat, ``lda``
    apart). ``prefetch`` (floats a K step, 0: none): the first nr / prefetch row tiles of a row block
    over column panel q prefetch panel q + 1's K chunk into L2, ``prefetch`` floats of it a K step each
    (16: a cache line a step over the first nr / 16 tiles; 4: a line every 4 steps over nr / 4 tiles),
    so that the next panel's first tile does not wait on L3. ``resid`` (1; 2 with RESID_PREFETCH): every
    K chunk, the first included, starts from the output's values (``out`` holds a residual r on entry:
    ``out = act(alpha * (r + A @ B) + bias)``, the residual added in the accumulators where the tile
    loads its output block anyway: MatMul's fused residual, alpha 1); with 2, each tile of the first
    chunk prefetches the next tile's rows of r. ``whole`` (1): row tiles whose rows are all valid run tiles
    compiled for that (row r's address a constant multiple of lda, where the selects of the last valid
    row kept a register a row: the mixed 12/8-row driver spilled them in the K loop), a last partial
    one the general tiles; 2: the same, every tile a function of its own (its K loop's registers
    allocated apart from the driver's loops)."""
    apart = whole == 2
    full, masked = _tiles(kind, mr, prefetch > 0, ahead, False, apart)
    fullw, maskedw = _tiles(kind, mr, prefetch > 0, ahead, True, apart) if whole else (full, masked)
    start = 0 if resid else 1  # the first chunk's ``first``
    ahead_out = resid == 2  # and prefetch the next tile's residual (RESID_PREFETCH)
    mixed = kind == 2 and mr == MIXED_MR  # 12-row tiles, then 8-row ones (row_tiles)
    full8, masked8 = _tiles(kind, SHORT_MR, prefetch > 0, ahead, False, apart) if mixed else (full, masked)
    full8w, masked8w = _tiles(kind, SHORT_MR, prefetch > 0, ahead, True, apart) if mixed and whole else \
        (full8, masked8)
    wide = kind == WIDE  # a last panel of at most 32 columns on tiles of fewer vectors (_tail_tiles)
    tail1, tail2 = _tail_tiles(mr, prefetch > 0, ahead, False, apart) if wide else (masked, masked)
    tail1w, tail2w = _tail_tiles(mr, prefetch > 0, ahead, True, apart) if wide and whole else (tail1, tail2)
    pfs = max(1, prefetch)
    nr = NR[kind]

    def gemm(ap, lda, bp, k_n, m_n, n_n, alpha, bias, zeros, out, ldo, lo, hi, p0, p1, block, groups, kc, s_lo,
             s_hi):
        if mixed:  # row_tiles(m_n, 12), inlined
            tall, tiles = 0, 0
            for short in range(3):
                t_n = (max(0, m_n - SHORT_MR * short) + mr - 1) // mr
                if short == 0 or t_n * mr + short * SHORT_MR < tall * mr + (tiles - tall) * SHORT_MR:
                    tall, tiles = t_n, t_n + short
        else:
            tiles = (m_n + mr - 1) // mr
            tall = tiles
        panels = (n_n + nr - 1) // nr
        inf = np.float32(np.inf)
        one = np.float32(1)
        for s in range(s_lo, s_hi):
            rb = s // groups
            g = s - rb * groups
            t0 = rb * block
            t1 = min(tiles, t0 + block)
            q0, q1 = g * panels // groups, (g + 1) * panels // groups
            for k0 in range(0, k_n, kc):
                kk = min(kc, k_n - k0)
                final = k0 + kk >= k_n
                first = np.int64(start if k0 == 0 else 0)
                al = alpha if final else one
                bb = bias if final else zeros
                lo2 = lo if final else -inf
                hi2 = hi if final else inf
                for q in range(q0, q1):
                    c0 = q * nr
                    nv = min(nr, n_n - c0)
                    b_off = (q * k_n + k0) * nr
                    nxt = ((q + 1) * k_n + k0) * nr
                    for t in range(t0, t1):
                        if ahead_out and k0 == 0:  # the next tile's rows of the residual, for writing
                            tn, qn = t + 1, q
                            if tn >= t1:
                                tn, qn = t0, q + 1
                            if qn < q1:
                                hn = mr if tn < tall else SHORT_MR
                                rn = tn * mr if tn < tall else tall * mr + (tn - tall) * SHORT_MR
                                for r in range(min(hn, m_n - rn)):
                                    at = (rn + r) * ldo + qn * nr
                                    for j in range(0, min(nr, n_n - qn * nr), 16):
                                        _prefetch_write(out, at + j)
                        pf = b_off
                        if prefetch and q + 1 < q1 and (t - t0) * pfs < nr:
                            pf = nxt + (t - t0) * kk * pfs
                        h = mr if t < tall else SHORT_MR
                        r0 = t * mr if t < tall else tall * mr + (t - tall) * SHORT_MR
                        mv = min(h, m_n - r0)
                        o_off = r0 * ldo + c0
                        if lda:  # A's own rows
                            a_off, a_ld, a_step = r0 * lda + k0, lda, 1
                        else:  # A packed (tiles of h rows, tile t at row r0: pack_a)
                            a_off, a_ld, a_step = r0 * k_n + k0 * h, 1, h
                        if wide and nv <= 32:  # (wide: a constant of the compiled driver)
                            if whole and mv == h:
                                if nv <= 16:
                                    tail1w(ap, a_off, a_ld, a_step, bp, b_off, kk, first, al, bb, c0, out, o_off, ldo,
                                           lo2, hi2, mv, nv, pf, pfs)
                                else:
                                    tail2w(ap, a_off, a_ld, a_step, bp, b_off, kk, first, al, bb, c0, out, o_off, ldo,
                                           lo2, hi2, mv, nv, pf, pfs)
                            elif nv <= 16:
                                tail1(ap, a_off, a_ld, a_step, bp, b_off, kk, first, al, bb, c0, out, o_off, ldo, lo2,
                                      hi2, mv, nv, pf, pfs)
                            else:
                                tail2(ap, a_off, a_ld, a_step, bp, b_off, kk, first, al, bb, c0, out, o_off, ldo, lo2,
                                      hi2, mv, nv, pf, pfs)
                        elif whole and mv == h:  # (whole: a constant of the compiled driver)
                            if t >= tall:
                                if nv >= nr:
                                    full8w(ap, a_off, a_ld, a_step, bp, b_off, kk, first, al, bb, c0, out, o_off, ldo,
                                           lo2, hi2, mv, nv, pf, pfs)
                                else:
                                    masked8w(ap, a_off, a_ld, a_step, bp, b_off, kk, first, al, bb, c0, out, o_off,
                                             ldo, lo2, hi2, mv, nv, pf, pfs)
                            elif nv >= nr:
                                fullw(ap, a_off, a_ld, a_step, bp, b_off, kk, first, al, bb, c0, out, o_off, ldo, lo2,
                                      hi2, mv, nv, pf, pfs)
                            else:
                                maskedw(ap, a_off, a_ld, a_step, bp, b_off, kk, first, al, bb, c0, out, o_off, ldo,
                                        lo2, hi2, mv, nv, pf, pfs)
                        elif t >= tall:
                            if nv >= nr:
                                full8(ap, a_off, a_ld, a_step, bp, b_off, kk, first, al, bb, c0, out, o_off, ldo, lo2,
                                      hi2, mv, nv, pf, pfs)
                            else:
                                masked8(ap, a_off, a_ld, a_step, bp, b_off, kk, first, al, bb, c0, out, o_off, ldo,
                                        lo2, hi2, mv, nv, pf, pfs)
                        elif nv >= nr:
                            full(ap, a_off, a_ld, a_step, bp, b_off, kk, first, al, bb, c0, out, o_off, ldo, lo2, hi2,
                                 mv, nv, pf, pfs)
                        else:
                            masked(ap, a_off, a_ld, a_step, bp, b_off, kk, first, al, bb, c0, out, o_off, ldo, lo2,
                                   hi2, mv, nv, pf, pfs)
                        if post != NONE and final:
                            for r in range(mv):
                                at = o_off + r * ldo
                                for j in range(nv):
                                    out[U(at + j)] = act(out[U(at + j)], post, p0, p1)

    # cached under the variant's name: the cells (intrinsics) pickle differently in every process
    setattr(gemm, CLOSURE_KEY, f"fgemm.gemm.{kind}.{mr}.{post}" + (f".pf{prefetch}" if prefetch else "") +
            (f".a{ahead}" if ahead else "") + ((".zp" if ahead_out else ".z") if resid else "") +
            (f".w{whole}" if whole else ""))
    return jit(gemm)


def plan(kind: int, m_n: int, k_n: int, n_n: int, shards: int, mr: int | None = None) -> tuple[int, int, int, int]:
    """(block, blocks, groups, kc): row blocks of ``block`` row tiles (a K chunk of the block's rows
    of A within BLOCK_BYTES, so it stays in L2 while the column panels pass) and
    column-panel groups so that there are at least ``shards`` shards where the panels allow, K in
    equal chunks of at most KC; ``mr``: the tiles' rows (None: MR's)."""
    mr, nr = mr or MR[kind], NR[kind]
    chunks = -(-k_n // KC)
    kc = -(-k_n // chunks)
    tiles = sum(row_tiles(m_n, mr))
    block = max(1, min(tiles, BLOCK_BYTES // (4 * kc * mr)))
    blocks = -(-tiles // block)
    panels = -(-n_n // nr)
    groups = 1
    if shards > 1 and blocks < shards:
        groups = max(1, min(panels, -(-shards // blocks)))
    return block, blocks, groups, kc


class Packed:
    """A constant B (K, N) packed for one variant, with its bias buffer padded to whole panels (``align``: pack_b's)."""

    __slots__ = ("source", "kind", "bp", "k_n", "n_n", "bias_buf", "zeros", "pairs")

    def __init__(self, source, b2, kind, align=None):
        self.source, self.kind = source, kind
        self.pairs = {}  # fpair descriptors of this weight's products, by shape and epilogue (_paired)
        self.k_n, self.n_n = b2.shape
        nr = NR[kind]
        self.bp = pack_b(b2, nr, align)
        width = -(-self.n_n // nr) * nr
        self.bias_buf = np.zeros(width, np.float32)
        self.zeros = config.readonly(np.zeros(width, np.float32))


def _clamp(code: int, p0, p1) -> tuple:
    """(lo, hi, post) of an epilogue code: Clip (Relu) as the tiles' clamp in the registers, any other
    activation over each finished tile (``post``) with an open clamp."""
    f32 = np.float32
    if code == CLIP:
        return f32(p0), f32(p1), NONE
    return f32(-np.inf), f32(np.inf), code


def _own_bias(packed: Packed, bias):
    """A bound call's own bias buffer, padded to whole panels (``bias``'s N values copied), or the zeros."""
    if bias is None:
        return packed.zeros
    bb = np.zeros_like(packed.bias_buf)
    bb[:packed.n_n] = bias
    return bb


def gemm(kind: int, packed: Packed, a2, out, alpha=1.0, bias=None, code=NONE, p0=0.0, p1=0.0,
         shards: int | None = None, resid: bool = False) -> None:
    """out (M, N) = act(alpha * a2 (M, K) @ B + bias) on the tiles of ``kind``, in about ``shards``
    shards on the pool (default: one per thread of this call's budget). ``bias``: N values or None;
    ``code``: an epilogue code (CLIP with p0, p1 the bounds). ``resid``: ``out`` holds a residual r on
    entry and gets act(r + a2 @ B + bias) (alpha 1; the driver's ``resid``: at two threads fpair's halves
    each start from their rows or columns of r, ``RESID_PAIRS``; the pool's shares from theirs)."""
    if resid and alpha != 1:
        raise ValueError("fgemm.gemm: a residual in the accumulators needs alpha 1")
    m_n, k_n = a2.shape
    n_n = packed.n_n
    mr = MR[kind]
    threads = config.current_threads()
    block, blocks, groups, kc = plan(kind, m_n, k_n, n_n, threads if shards is None else shards)
    if DIRECT_A and a2.flags.c_contiguous:
        ap, lda = a2.reshape(-1), k_n
    else:
        tall, short = row_tiles(m_n, mr)
        ap, lda = config.thread_buffer("fgemm_a", (tall * mr + short * SHORT_MR) * k_n, np.float32), 0
        pack_a(a2, m_n, k_n, mr, ap, tall, short, SHORT_MR)
    if bias is None:
        bb = packed.zeros
    else:
        bb = packed.bias_buf
        bb[:n_n] = bias
    f32 = np.float32
    lo, hi, post = _clamp(code, p0, p1)
    fn = driver(kind, post, mr, resid=resid)
    args = (ap, lda, packed.bp, k_n, m_n, n_n, f32(alpha), bb, packed.zeros, out.reshape(-1), out.strides[0] // 4, lo,
            hi, f32(p0), f32(p1), block, groups, kc)
    total = blocks * groups
    if threads == 2 and (RESID_PAIRS or not resid) and 2.0 * m_n * n_n * k_n >= PAIR_FLOPS and fpair.enabled() and \
            _paired(kind, post, mr, packed, ap, lda, out, m_n, k_n, (f32(alpha), lo, hi, f32(p0), f32(p1)),
                    bias is None, resid):
        return
    if total <= 1 or threads <= 1:
        fn(*args, 0, total)
        return
    panels = -(-n_n // NR[kind])
    if halves.usable(threads) and panels >= 2:
        _two_shares(fn, args, packed, panels, NR[kind], 2.0 * m_n * n_n * k_n)
        return
    config.run_shards(lambda i: fn(*args, i, i + 1), total)


def copy_rows(a, m_n, k_n, ap, ldp):
    """(M, K) float32 ``a`` (flat, C-contiguous) into ``ap`` (flat) with its rows ``ldp`` floats apart (the
    floats between a row's K and the next row untouched): NumPy's strided copy."""
    np.copyto(ap[:m_n * ldp].reshape(m_n, ldp)[:, :k_n], a.reshape(m_n, k_n))


def padded_lda(k_n: int, pad: int, every: int) -> int:
    """The row stride (floats) of A's copy for the one-thread bound call (PAD_A_ONE_THREAD): k_n + pad where
    ``pad`` > 0 and k_n * 4 bytes is a multiple of ``every`` bytes, else k_n (no copy)."""
    if pad > 0 and every > 0 and k_n > 0 and (4 * k_n) % every == 0:
        return k_n + pad
    return k_n


def serial(kind: int, packed: Packed, m_n: int, alpha=1.0, bias=None, code=NONE, p0=0.0, p1=0.0, prefetch=None,
           ahead=0, packed_a=False, whole=0, mr=None, pad_a=0, pad_every=None):
    """``run(a2, out, threads=1, shards=1)``: gemm's product of ``m_n`` rows by ``packed`` with everything but A
    (C-contiguous (M, K)) and the output (C-contiguous (M, N)) fixed now (a plan's bound call: the
    general path's per-call decisions, ~10-40 us a node, left out). One thread: the driver over every
    shard; two: fpair's halves (the descriptor made at the first such call) where the helper spins,
    else (and at more threads) ``gemm`` in ``shards``. ``bias``: N values (copied) or None.
    ``prefetch``: the one-thread driver's PREFETCH (None: PREFETCH's value now); ``ahead``: its tiles'
    B_AHEAD (0: none); ``packed_a``: the one-thread driver reads A packed into row tiles (pack_a), not A's rows;
    ``whole``: the driver's (WHOLE_ONE_THREAD); ``mr``: the avx512 tiles' rows (MR_ONE_THREAD; None: MR's);
    ``pad_a``, ``pad_every``: the one-thread driver reads A from a copy with rows ``padded_lda`` apart
    (PAD_A_ONE_THREAD, PAD_A_EVERY (None: its value now); no copy where that is K, with ``packed_a``, or where
    N is below PAD_A_MIN_N now)."""
    k_n, n_n = packed.k_n, packed.n_n
    mr = int(mr) if mr and kind == 2 else MR[kind]
    block, blocks, groups, kc = plan(kind, m_n, k_n, n_n, 1, mr)
    bb = _own_bias(packed, bias)
    f32 = np.float32
    lo, hi, post = _clamp(code, p0, p1)
    fn, bp, zeros = driver(kind, post, mr, prefetch, ahead, whole=whole), packed.bp, packed.zeros
    total = blocks * groups
    alpha, p0, p1 = f32(alpha), f32(p0), f32(p1)
    pairs = 2.0 * m_n * n_n * k_n >= PAIR_FLOPS
    made = []
    tall, short = row_tiles(m_n, mr)
    pack = bool(packed_a)
    a_len = (tall * mr + short * SHORT_MR) * k_n
    ldp = padded_lda(k_n, int(pad_a), int(PAD_A_EVERY if pad_every is None else pad_every))
    pad = ldp != k_n and not pack and n_n >= PAD_A_MIN_N

    def run(a2, out, threads=1, shards=1):
        if threads == 2 and pairs and fpair.enabled():
            if not made:
                made.append(_pair_descriptor(kind, post, mr, packed, k_n, m_n, k_n, n_n, (alpha, lo, hi, p0, p1), bb,
                                             m_n * k_n, m_n * n_n))
            if made[0] is not False and fpair.run(made[0], a2.reshape(-1), out.reshape(-1)):
                return
            if made[0] is not False and PAIR_ALONE and not config._POOL.has_spin_worker():
                threads = 1  # the helper refused (asleep: woken now; backed off; a busy slot) and the pool has
                # no worker: the caller alone, as cpair's layers, not a pool job whose worker would spin
                # through every later run (MobileNetV2 b8's head: its conv pairs then stop, conv_serial._pooled)
        if threads > 1:
            gemm(kind, packed, a2, out, alpha, None if bias is None else bb[:n_n], code, p0, p1, shards)
            return
        if pack:
            ap = config.thread_buffer("fgemm_a", a_len, np.float32)
            pack_a(a2, m_n, k_n, mr, ap, tall, short, SHORT_MR)
            fn(ap, 0, bp, k_n, m_n, n_n, alpha, bb, zeros, out.reshape(-1), n_n, lo, hi, p0, p1, block, groups, kc, 0,
               total)
            return
        if pad:  # A's rows off one L1 set (PAD_A_ONE_THREAD)
            ap = config.thread_buffer("fgemm_apad", m_n * ldp, np.float32)
            copy_rows(a2.reshape(-1), m_n, k_n, ap, ldp)
            fn(ap, ldp, bp, k_n, m_n, n_n, alpha, bb, zeros, out.reshape(-1), n_n, lo, hi, p0, p1, block, groups, kc,
               0, total)
            return
        fn(a2.reshape(-1), k_n, bp, k_n, m_n, n_n, alpha, bb, zeros, out.reshape(-1), n_n, lo, hi, p0, p1, block,
           groups, kc, 0, total)

    return run


# One-row products (a classifier head: 1 x 512 x 1000 and up) at one thread: B packed once into panels and
# streamed in one pass over the whole K on 1-row tiles, each step prefetching the stream this many K steps
# ahead into L1 (B_AHEAD's prefetch: the packed panels are one contiguous stream; 0: none; AMD box, weights
# cold, bench_heads.py: 32 0.93x of none). Issue 11, session 12; Gemm binds it where gemm.HEAD_ROW is on
ROW_AHEAD = 0
# The same call's tiles (one stream, ROW_STREAMS 1) prefetch the next column panel into L2 while they read the
# current one, this many floats of it a K step (the driver's PREFETCH with one row tile a panel: 32, a line
# every 128 B of the next panel, one panel (K x 128 B) ahead; 0: none). Off: issue 11, session 13, Xeon, weights
# from memory, 1 x 512 / 2048 x 1000: 196 / 750 us against 201 / 666 without (bench_head_state.py)
ROW_PREFETCH = 0


def row(kind: int, packed: Packed, alpha=1.0, bias=None, code=NONE, p0=0.0, p1=0.0, ahead=None, prefetch=None,
        streams=None):
    """``run(a2, out)``: out (1, N) = act(alpha * a2 (1, K, C-contiguous) @ B + bias) on 1-row tiles of
    ``kind`` over B's packed panels, K whole (one pass over the weights), at one thread; ``ahead``: the
    tiles' L1 prefetch distance in K steps (None: ROW_AHEAD now); ``prefetch``: the next panel's L2
    prefetch, floats a K step (None: ROW_PREFETCH now); ``streams``: panels read at once (None: ROW_STREAMS
    now; above 1 the tiles of _rows_driver, without the prefetches). ``bias``: N values (copied) or None."""
    k_n, n_n = packed.k_n, packed.n_n
    bb = _own_bias(packed, bias)
    f32 = np.float32
    lo, hi, post = _clamp(code, p0, p1)
    streams = int(ROW_STREAMS if streams is None else streams)
    bp, zeros, alpha, p0, p1 = packed.bp, packed.zeros, f32(alpha), f32(p0), f32(p1)
    if streams > 1 and kind != 0:
        ahead_s = int(ROW_STREAMS_AHEAD)
        rows = _rows_driver(kind, post, streams, ahead_s, int(ROW_STREAMS_HINT) if ahead_s else 3,
                            bool(ROW_STREAMS_REST))

        def run_streams(a2, out):
            rows(a2.reshape(-1), bp, k_n, n_n, alpha, bb, zeros, out.reshape(-1), lo, hi, p0, p1)

        return run_streams
    prefetch = int(ROW_PREFETCH if prefetch is None else prefetch)
    fn = driver(kind, post, 1, prefetch, ROW_AHEAD if ahead is None else ahead)
    kc = max(1, k_n)

    def run(a2, out):
        fn(a2.reshape(-1), k_n, bp, k_n, 1, n_n, alpha, bb, zeros, out.reshape(-1), n_n, lo, hi, p0, p1, 1, 1, kc, 0, 1)

    return run


# The same call reads this many column panels at once (1-row tiles of ROW_STREAMS x nr columns, each panel its
# own contiguous stream of K x nr floats, K x 128 B apart; 1: one panel after another, a single stream through
# the weights), read when the call binds. In the model the head's weights come from memory (issue 11, session
# 13, head_in_model.py: flushing them first costs 0-20 %), where one stream ran at 10.4 GB/s on a Xeon core,
# 4 at 11.9, 8 at 12.9 (bench_head_state.py, 1 x 512 x 1000; 1280 and 2048 alike); with gemm.HEAD_ALIGN, the
# Xeon's heads in the model 1.12-1.30x faster than one stream (head_in_model.py medians; docs/numba.md, "The
# Gemm heads in the model": 8 streams are the next A/B). 1 since session 20 (docs/numba.md, "The Gemm heads on the
# H200 host"): on the H200 machine's Xeon (the same CPU part, its huge pages madvise only) ResNet-50's 1 x 2048 x
# 1000 head ran 1.14x slower than the reference's sgemv at 4 streams (ops_vs_reference.py, 7 of 7 rounds;
# reference / it 0.88 in head_in_model.py), and 1.10x faster at 1 (12 rounds, the models' heads in turn: reference
# / it at 4 and 1 streams ResNet-50 0.88 / 1.10, ResNet-18 1.14 / 1.19, MobileNetV2 1.12 / 1.15, EfficientNet-B0 1.05
# / 1.05, RegNetY 1.12 / 1.03; 8 streams 0.77 on ResNet-50)
ROW_STREAMS = 1
# The streams' tiles prefetch each panel's row k + ROW_STREAMS_AHEAD at step k (its nr floats: two cache lines on
# avx512), into the cache ROW_STREAMS_HINT names (llvm.prefetch's locality: 3 L1, 2 L2); 0: no prefetch, the
# hardware's streams alone. Read when the call binds. Off: issue 11, session 14 (regnet14), two Xeon calls. In the
# first, 16 steps into L1 ran the heads 1.10x (RegNetY) and 1.14x (ResNet-50) faster in nodes_ab.py and 1.08x
# alone from memory (bench_head_state.py); in the second, alone from memory 0.95-1.00x at 440-2048 x 1000, and
# in the model (head_in_model.py) the medians of 0, 16 and 32 steps within the run's spread (ResNet-50 0.479
# with 16 against 0.513 without, MobileNetV2 0.351 against 0.332). A/B: kernels.fgemm.ROW_STREAMS_AHEAD=16
ROW_STREAMS_AHEAD = 0
ROW_STREAMS_HINT = 3
# The whole panels left over after the groups of ROW_STREAMS run in groups of half as many, then a quarter (down to
# 2), before the single-panel tiles (1000 columns on avx512: 31 whole panels, 8 streams leave 7 of them, 22 % of the
# weights, to one stream at a time; 4 streams leave 3). The same sums in the same order (each column's K steps in
# turn): bit for bit. Read when the call binds (issue 11, session 18; False: the rest one panel at a time)
ROW_STREAMS_REST = False


def _streams_intrinsic(kind: str, streams: int, ahead: int = 0, hint: int = 3):
    """An intrinsic ``tile(a, b, b_off, pstride, k_n, alpha, bias, c0, out, lo, hi)``: ``streams`` whole
    column panels at once on a 1-row tile, panel s of B at ``b[b_off + s * pstride:]`` ([k][nr], k < k_n),
    ``out[c0 + s * nr + j]`` = clamp(alpha * sum_k a[k] * that panel's [k][j] + bias[c0 + s * nr + j], lo, hi)
    (NaN kept). ``ahead`` > 0: step k also prefetches each panel's row k + ahead (every cache line of its nr
    floats; past the panel's end a hint that never faults) with llvm.prefetch's locality ``hint``."""
    lanes = 8 if kind == "avx2" else 16
    nvec = 2
    nr = lanes * nvec

    def codegen(context, builder, sig, args):
        a, b, b_off, pstride, k_n, alpha, bias, c0, out, lo, hi = args
        i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
        if not available(kind):
            trap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.trap")
            builder.call(trap, [])
            return context.get_dummy_value()
        vf = ir.VectorType(f32, lanes)
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vf, [vf, vf, vf]), f"llvm.fma.v{lanes}f32")
        pa = builder.bitcast(_data(context, builder, sig.args[0], a), f32.as_pointer())
        pb = builder.gep(builder.bitcast(_data(context, builder, sig.args[1], b), f32.as_pointer()), [b_off])
        pbias = builder.gep(builder.bitcast(_data(context, builder, sig.args[6], bias), f32.as_pointer()), [c0])
        po = builder.gep(builder.bitcast(_data(context, builder, sig.args[8], out), f32.as_pointer()), [c0])
        splat0 = ir.Constant(ir.VectorType(i32, lanes), [0] * lanes)

        def splat(value):
            one = builder.insert_element(ir.Constant(vf, ir.Undefined), value, ir.Constant(i32, 0))
            return builder.shuffle_vector(one, ir.Constant(vf, ir.Undefined), splat0)

        def vec(ptr, at):
            return builder.bitcast(builder.gep(ptr, [at]), vf.as_pointer())

        panels = [builder.gep(pb, [builder.mul(pstride, ir.Constant(i64, t))]) for t in range(streams)]
        k, accs, close = k_loop(builder, k_n, [ir.Constant(vf, None)] * (streams * nvec), "frows")
        av = splat(builder.load(builder.gep(pa, [k]), align=4))
        row = builder.mul(k, ir.Constant(i64, nr))
        if ahead:
            i8p = ir.IntType(8).as_pointer()
            pf = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                                "llvm.prefetch.p0")
            there = builder.add(row, ir.Constant(i64, ahead * nr))
            for t in range(streams):
                for line in range(0, nr, 16):  # every 64-byte line of the row
                    ptr = builder.bitcast(builder.gep(panels[t], [builder.add(there, ir.Constant(i64, line))]), i8p)
                    builder.call(pf, [ptr, ir.Constant(i32, 0), ir.Constant(i32, hint), ir.Constant(i32, 1)])
        new = []
        for t in range(streams):
            for j in range(nvec):
                bv = builder.load(vec(panels[t], builder.add(row, ir.Constant(i64, lanes * j))), align=4)
                new.append(builder.call(fma, [av, bv, accs[t * nvec + j]]))
        close(new)
        lov, hiv, alv = splat(lo), splat(hi), splat(alpha)
        for t in range(streams):
            for j in range(nvec):
                at = ir.Constant(i64, t * nr + lanes * j)
                v = builder.call(fma, [accs[t * nvec + j], alv, builder.load(vec(pbias, at), align=4)])
                v = builder.select(builder.fcmp_ordered("<", v, lov), lov, v)  # max(v, lo), NaN kept
                v = builder.select(builder.fcmp_ordered(">", v, hiv), hiv, v)  # min(v, hi)
                builder.store(v, vec(po, at), align=4)
        return context.get_dummy_value()

    @intrinsic
    def tile(typingctx, a, b, b_off, pstride, k_n, alpha, bias, c0, out, lo, hi):
        i64, f = types.int64, types.float32
        return types.void(a, b, i64, i64, i64, f, bias, i64, out, f, f), codegen

    return tile


@functools.cache
def _rows_driver(kind: int, post: int, streams: int, ahead: int = 0, hint: int = 3, rest: bool = False):
    """``run(a, bp, k_n, n_n, alpha, bias, zeros, out, lo, hi, p0, p1)``: out (N, flat) = act(alpha * a (K,
    flat) @ B + bias) over B's packed panels, ``streams`` whole panels at once (_streams_intrinsic, its
    prefetch ``ahead`` steps ahead with locality ``hint``), the panels left over one at a time on the 1-row
    tiles (the last one masked); ``rest``: the whole panels left over first in groups of streams // 2, then
    streams // 4 (groups of at least 2: ROW_STREAMS_REST); ``post`` as in _driver."""
    full, masked = _tiles(kind, 1)
    isa = "avx512" if kind in (2, NARROW) else "avx2"
    multi = _streams_intrinsic(isa, streams, ahead, hint)
    s2 = streams // 2 if rest and streams // 2 >= 2 else 0
    s4 = streams // 4 if rest and streams // 4 >= 2 else 0
    multi2 = _streams_intrinsic(isa, s2, ahead, hint) if s2 else multi  # (not called where s2 is 0)
    multi4 = _streams_intrinsic(isa, s4, ahead, hint) if s4 else multi
    nr = NR[kind]

    def rows(a, bp, k_n, n_n, alpha, bias, zeros, out, lo, hi, p0, p1):
        panels = (n_n + nr - 1) // nr
        whole = n_n // nr
        groups = whole // streams
        pstride = k_n * nr
        for g in range(groups):
            q = g * streams
            multi(a, bp, q * pstride, pstride, k_n, alpha, bias, q * nr, out, lo, hi)
        done = groups * streams
        if s2 and whole - done >= s2:
            multi2(a, bp, done * pstride, pstride, k_n, alpha, bias, done * nr, out, lo, hi)
            done += s2
        if s4 and whole - done >= s4:
            multi4(a, bp, done * pstride, pstride, k_n, alpha, bias, done * nr, out, lo, hi)
            done += s4
        one = np.int64(1)
        for q in range(done, panels):
            c0 = q * nr
            nv = min(nr, n_n - c0)
            if nv >= nr:
                full(a, 0, k_n, 1, bp, q * pstride, k_n, one, alpha, bias, c0, out, c0, n_n, lo, hi, 1, nv, 0, 1)
            else:
                masked(a, 0, k_n, 1, bp, q * pstride, k_n, one, alpha, bias, c0, out, c0, n_n, lo, hi, 1, nv, 0, 1)
        if post != NONE:
            for j in range(n_n):
                out[U(j)] = act(out[U(j)], post, p0, p1)

    setattr(rows, CLOSURE_KEY, f"fgemm.rows.{kind}.{post}.s{streams}" + (f".a{ahead}h{hint}" if ahead else "") +
            (".r" if rest else ""))
    return jit(rows)


def row_pair(kind: int, packed: Packed, alpha=1.0, bias=None, ahead=None):
    """fpair's descriptor of ``row``'s product (no activation) as two halves of B's column panels, the
    caller's first, the helper's the rest (hpair's head pairs on the 1-row tiles), or False where it
    does not split or the helper cannot start."""
    k_n, n_n, nr = packed.k_n, packed.n_n, NR[kind]
    panels = -(-n_n // nr)
    if panels < 2:
        return False
    helper = fpair.server()
    if not helper.prepare():
        return False
    ahead = int(ROW_AHEAD if ahead is None else ahead)
    _fn, address = fpair.half_address(driver(kind, NONE, 1, 0, ahead),
                                      f"fpair.half.{kind}.1.{NONE}" + (f".a{ahead}" if ahead else ""))
    if not address:
        return False
    f32 = np.float32
    fvals = (f32(alpha), f32(-np.inf), f32(np.inf), f32(0), f32(0))
    made = fpair.descriptor(address, fpair.COLUMNS, (panels // 2) * nr, (1, 1), packed.bp, _own_bias(packed, bias),
                            packed.zeros, fvals, (1, k_n, n_n, k_n, n_n), (k_n, n_n), 1, max(1, k_n))
    helper.wake()
    return made


# At two threads, products of at least this many flops run as two halves handed over in compiled code
# (fpair.py), smaller ones on the caller
PAIR_FLOPS = float(1 << 20)
# A bound product whose pair the helper refused runs on the caller alone where the pool has no worker
# (issue 11, session 11; False: the pool's two shares, which start a worker that then spins through every run)
PAIR_ALONE = True
# A fused residual (gemm's ``resid``: the output holds r on entry) at two threads in fpair's halves, each side's
# driver starting its tiles from its own rows or columns of r, as the one-thread tiles do (issue 11, session 13;
# False: such a product does not pair, and the pool's shares or the caller alone run it)
RESID_PAIRS = True


def _paired(kind, post, mr, packed, ap, lda, out, m_n, k_n, fvals, no_bias, resid=False) -> bool:
    """gemm's product at two threads as two halves on the caller and fpair's helper (fpair.py), with
    its descriptor made at the first call of this weight, shape and epilogue; False where it does not
    split (one panel and one row tile), the helper does not spin (woken now) or another caller holds
    its slot: then the caller runs the product."""
    if not out.flags.c_contiguous:
        return False
    ldo = out.strides[0] // 4
    key = (m_n, k_n, lda, ldo, kind, post, mr, fvals, no_bias, ap.size, out.size, resid)
    made = packed.pairs.get(key)
    if made is None:
        made = packed.pairs[key] = _pair_descriptor(kind, post, mr, packed, lda, m_n, k_n, ldo, fvals,
                                                    packed.zeros if no_bias else packed.bias_buf, ap.size, out.size,
                                                    resid)
    return made is not False and fpair.run(made, ap, out.reshape(-1))


def _pair_descriptor(kind, post, mr, packed, lda, m_n, k_n, ldo, fvals, bias, a_len, out_len, resid=False):
    """fpair's descriptor of one product (fpair.axis picks columns or rows; ``bias``: the padded bias
    buffer it reads, or the zeros; ``resid``: the halves' drivers start from the output's values, a
    residual there on entry), or False where it does not split or the helper cannot start (no cycle
    counter)."""
    n_n, nr = packed.n_n, NR[kind]
    panels = -(-n_n // nr)
    block, _blocks, _groups, kc = plan(kind, m_n, k_n, n_n, 1, mr)
    mode = fpair.axis(m_n, k_n, n_n, lda)
    tiles = sum(row_tiles(m_n, mr))
    if mode == fpair.ROWS and tiles >= 2:
        cut = (tiles // 2) * mr if mr != MIXED_MR else max(1, round(m_n / 2 / mr)) * mr
        cut = min(cut, m_n - 1)
        sides = (sum(row_tiles(cut, mr)), sum(row_tiles(m_n - cut, mr)))
    elif panels >= 2:
        mode, cut = fpair.COLUMNS, (panels // 2) * nr
        sides = (tiles, tiles)
    else:
        return False
    helper = fpair.server()
    if not helper.prepare():
        return False
    pf = f".pf{int(PREFETCH)}" if PREFETCH else ""
    ahead = int(B_AHEAD_PAIR)
    fn = driver(kind, post, mr, None, ahead, resid)
    z = ((".zp" if RESID_PREFETCH else ".z") if resid else "")
    _fn, address = fpair.half_address(fn, f"fpair.half.{kind}.{mr}.{post}{pf}" + (f".a{ahead}" if ahead else "") + z)
    if not address:
        return False
    made = fpair.descriptor(address, mode, cut, (-(-sides[0] // block), -(-sides[1] // block)), packed.bp, bias,
                            packed.zeros, fvals, (m_n, k_n, n_n, a_len, out_len), (lda, ldo), block, kc)
    helper.wake()
    return made


def _two_shares(fn, args, packed, panels, nr, flops):
    """gemm's product at two threads as two shares (halves.py): the caller's first column panels, the
    worker's rest, each one driver call over every row block of its panels (the driver sees the
    worker's panels as a narrower B: B's panels, the bias, the zeros and the output offset)."""
    ap, lda, bp, k_n, m_n, n_n, alpha, bb, zeros, out, ldo, lo, hi, p0, p1, block, _groups, kc = args
    c = halves.caller_parts(panels, flops) * nr
    tiles = -(-m_n // MR[packed.kind])
    blocks = -(-tiles // block)
    first = (ap, lda, bp, k_n, m_n, c, alpha, bb, zeros, out, ldo, lo, hi, p0, p1, block, 1, kc)
    second = (ap, lda, bp[c * k_n:], k_n, m_n, n_n - c, alpha, bb[c:], zeros[c:], out[c:], ldo, lo, hi, p0, p1, block,
              1, kc)
    halves.run(lambda: fn(*first, 0, blocks), lambda: fn(*second, 0, blocks))


def kind_for(m_n: int, k_n: int, n_n: int, narrow: bool = False) -> int | None:
    """The variant to run a GEMM of this shape on, or None for BLAS: KERNELKIT_F32_GEMM (a forced
    variant always runs), else the shape classes where the tiles measured faster. ``narrow``: the
    NARROW tiles for few columns as if NARROW_ON (Gemm's one-thread bound call, gemm.HEAD_NARROW)."""
    kind, forced = choice()
    if kind is None or forced:
        return kind
    if kind == 2 and (NARROW_ON or narrow) and narrow_wins(m_n, k_n, n_n):
        return NARROW
    return kind if wins(m_n, k_n, n_n) else None


def wins(m_n: int, k_n: int, n_n: int) -> bool:
    """Shapes where the tiles beat BLAS (benchmarks/bench_fgemm.py)."""
    return m_n >= 8 and k_n >= 32 and n_n >= 16


def narrow_wins(m_n: int, k_n: int, n_n: int) -> bool:
    """Shapes of few columns where the 8 x 16 tiles (NARROW) beat BLAS's small-N path: 2 to 16 columns
    (one column is a matrix-vector product), 8+ rows, K of 256+ (bench_fgemm.py)."""
    return m_n >= 8 and k_n >= 256 and 2 <= n_n <= 16
