"""float32 GEMM micro-kernels for convolutions, written as LLVM IR and chosen at run time from the
CPU's features (the float32 counterpart of qtile.py's int8 "rows" tile).

``out[m, p] = act(sum_k W[m, k] * X[k, p] + bias[m] (+ Z[m, p]))``: W a convolution's weight (M, K),
packed once into panels of ``mr`` rows (``wp[(P * K + k) * mr + r] = W[P * mr + r, k]``, the last
panel padded with zeros), X read straight from rows (``x[x_off + k * ldx + p]``: the NCHW input
itself for a 1x1 stride-1 convolution, else an im2col column block), the output (and the fused
residual Z) written along its NCHW rows. One tile is ``mr`` weight rows x ``nr`` pixels of
accumulators held as ``phi`` vectors across the K loop: each step loads ``nr`` pixels of row k (one
or two vectors), broadcasts each of the tile's ``mr`` weights and multiplies-adds
(``llvm.fma.v16f32``). Then bias, residual and Clip (Relu, Relu6; NaN kept as NumPy's max/min keep
it) in the registers, and the store, masked for a row's last partial tile. Numba's own loops keep
the accumulators of such a tile scalar (7 GFLOP/s, docs/numba.md): hence IR.

Variants: ``avx512`` (16 lanes, 8 rows x 32 pixels, 16 zmm accumulators), ``avx2`` (FMA3, 8 lanes,
6 rows x 16 pixels), ``generic`` (the same layouts in plain Numba loops: any CPU, tests).
``KERNELKIT_F32_GEMM=auto|off|generic|avx2|avx512`` forces one (``off``: the BLAS path of conv.py);
a bad value is a ConfigError, a variant the CPU lacks an F32GemmUnavailableError. An intrinsic the
host lacks compiles to a trap that is never selected (as in qtile.py).

K is taken in equal chunks of at most ``KC`` (the tile's weight panel chunk stays in cache while the
block's pixel tiles pass): a later chunk starts its accumulators from the output, and only the last
applies the epilogue (the earlier ones store the plain sums: zero bias, no residual, no clamp).

Maps of few pixels (7x7) take the **cols** tiles instead (``conv_cols``): the channels are
the vector lanes (the weights packed as pack_weights(W, 48): 3 vectors of 16 channels per k), each of
7 pixels broadcast, 21 accumulators; 49 pixels are 7 tiles (the rows tile would run 64). K chunks
accumulate in a small scratch; the last one applies the epilogue and stores each vector lane by lane
along its channels' NCHW rows.
"""
from __future__ import annotations

import functools
import threading

import numba
import numpy as np
from kernelkit.errors import DeviceError
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .. import _env, config
from ..cache import CLOSURE_KEY
from ..config import jit
from .qtile import host_features, k_loop

ENV = "KERNELKIT_F32_GEMM"
CHOICES = ("auto", "off", "generic", "avx2", "avx512")
KIND = {"generic": 0, "avx2": 1, "avx512": 2}
U = np.uint64  # unsigned index: no wraparound check in inner loops
MR = {0: 4, 1: 6, 2: 8}  # weight rows per tile (panel height)
NR = {0: 16, 1: 16, 2: 32}  # pixels per tile
_NEEDS = {"generic": (), "avx2": ("avx2", "fma"), "avx512": ("avx512f",)}
KC = 1024  # at most this much K per chunk (K cut into equal chunks): the panel's chunk (KC * mr floats)
# stays in L1/L2 while the pixel tiles pass. On the AMD box (bench_ftile.py raw) chunks of 128-512 ran
# no faster than the whole K, and a short last chunk (the stem's K = 147 as 128 + 19) halved the rate


class F32GemmUnavailableError(DeviceError):
    """A float32 GEMM micro-kernel was forced (KERNELKIT_F32_GEMM) on a CPU without its instructions."""

    code = "KK_F32_GEMM_UNAVAILABLE"


def available(name: str) -> bool:
    """Whether this CPU (as Numba compiles for it) has the instructions of variant ``name``. Under
    NUMBA_DISABLE_JIT=1 only ``generic`` runs (the IR tiles exist only in compiled code)."""
    if name != "generic" and numba.config.DISABLE_JIT:
        return False
    return all(f in host_features() for f in _NEEDS[name])


_checked: dict = {}
requested_raw = _env.reader(ENV)  # KERNELKIT_F32_GEMM's raw value


def requested() -> str:
    """KERNELKIT_F32_GEMM (default ``auto``), checked; read on every call (cached per raw value)."""
    raw = requested_raw()
    hit = _checked.get(raw)
    if hit is not None and hit[0] == host_features():
        return hit[1]
    value = _env.choice(raw, ENV, CHOICES)
    if value in KIND and not available(value):
        missing = [f for f in _NEEDS[value] if f not in host_features()]
        raise F32GemmUnavailableError(f"${ENV}={value}: this CPU lacks {', '.join(missing)}")
    _checked[raw] = (host_features(), value)
    return value


def choice() -> tuple[int | None, bool]:
    """(kind, forced): the kind (KIND) to run, or None for conv.py's BLAS path, and whether
    KERNELKIT_F32_GEMM named it (then conv.py skips its dispatch by measured shape class). ``auto``
    takes avx512, else avx2, else None (never ``generic``: it is for tests and forcing)."""
    value = requested()
    if value == "off":
        return None, False
    if value == "auto":
        for name in ("avx512", "avx2"):
            if available(name):
                return KIND[name], False
        return None, False
    return KIND[value], True


def variant_name() -> str | None:
    """The name of the variant ``choice()`` runs now, or None (BLAS)."""
    kind = choice()[0]
    return None if kind is None else next(k for k, v in KIND.items() if v == kind)


def select() -> int | None:
    """choice()'s kind."""
    return choice()[0]


# ---------------------------------------------------------------------------------------- packing
# Issue 11, session 15 (rate15): the packed weights start on this many bytes (0: np.empty's own, 16 or 32
# bytes past a cache line for large arrays). The cols tiles load their weights as 64-byte vectors at
# multiples of 192 bytes from the panels' start: misaligned, every one of them crossed two lines. Xeon alone
# (bench_tile_rate.py): the cols tiles +1-6 %, with config.BUFFER_ALIGN the packed rows tiles +6-12 %
PACK_ALIGN = 64


def pack_weights(w2: np.ndarray, mr: int, out: np.ndarray | None = None) -> np.ndarray:
    """(M, K) float32 weights into panels of ``mr`` rows, [panel][k][r], zero-padded rows; the array
    starts on PACK_ALIGN bytes (``out``: into that flat array of panels * mr * K floats instead)."""
    m_n, k_n = w2.shape
    panels = -(-m_n // mr)
    padded = np.zeros((panels * mr, k_n), np.float32)
    padded[:m_n] = w2
    if out is None:
        out = config.aligned_empty(panels * mr * k_n, np.float32, PACK_ALIGN)
    out.reshape(panels, k_n, mr)[...] = padded.reshape(panels, mr, k_n).transpose(0, 2, 1)
    return out


# --------------------------------------------------------------------------------------------- IR
def _data(context, builder, arrty, value):
    return cgutils.create_struct_proxy(arrty)(context, builder, value=value).data


def _vector_intrinsics(mod, lanes: int):
    """(vf, fma, mload, mstore): the float32 vector type of ``lanes`` lanes and its llvm.fma, llvm.masked.load
    and llvm.masked.store, declared in ``mod``."""
    i1, i32 = ir.IntType(1), ir.IntType(32)
    vf = ir.VectorType(ir.FloatType(), lanes)
    vmask = ir.VectorType(i1, lanes)
    fma = cgutils.get_or_insert_function(mod, ir.FunctionType(vf, [vf, vf, vf]), f"llvm.fma.v{lanes}f32")
    mload = cgutils.get_or_insert_function(mod, ir.FunctionType(vf, [vf.as_pointer(), i32, vmask, vf]),
                                           f"llvm.masked.load.v{lanes}f32.p0")
    mstore = cgutils.get_or_insert_function(mod, ir.FunctionType(ir.VoidType(), [vf, vf.as_pointer(), i32, vmask]),
                                            f"llvm.masked.store.v{lanes}f32.p0")
    return vf, fma, mload, mstore


class _TileIR:
    """The IR helpers of one tile of ``mr`` rows x ``nvec`` vectors of ``lanes`` float32 lanes over an output
    block at ``po`` (row stride ``ldo``; rows [0, m_valid) valid), shared by the rows tiles here and fgemm's
    tiles. ``masked``: only the first ``n_valid`` lanes of a row are read and stored (one mask a vector, made
    here). The constructor emits the masks and ``last`` (m_valid - 1)."""

    def __init__(self, builder, lanes: int, nvec: int, mr: int, masked: bool, mload, mstore, po, ldo, m_valid,
                 n_valid):
        self.b, self.lanes, self.nvec, self.mr, self.masked = builder, lanes, nvec, mr, masked
        self.mload, self.mstore, self.po, self.ldo, self.m_valid = mload, mstore, po, ldo, m_valid
        i32, i64 = ir.IntType(32), ir.IntType(64)
        self.i32, self.i64 = i32, i64
        self.vf = ir.VectorType(ir.FloatType(), lanes)
        self.zero_v = ir.Constant(self.vf, None)
        self.splat0 = ir.Constant(ir.VectorType(i32, lanes), [0] * lanes)
        self.masks = []
        if masked:
            vi64 = ir.VectorType(i64, lanes)
            valid = builder.insert_element(ir.Constant(vi64, ir.Undefined), n_valid, ir.Constant(i32, 0))
            valid = builder.shuffle_vector(valid, ir.Constant(vi64, ir.Undefined), self.splat0)
            self.masks = [builder.icmp_signed("<", ir.Constant(vi64, [lanes * j + t for t in range(lanes)]), valid)
                          for j in range(nvec)]
        self.last = builder.sub(m_valid, ir.Constant(i64, 1))

    def splat(self, value):
        one = self.b.insert_element(ir.Constant(self.vf, ir.Undefined), value, ir.Constant(self.i32, 0))
        return self.b.shuffle_vector(one, ir.Constant(self.vf, ir.Undefined), self.splat0)

    def vload(self, ptr, j):
        """Vector j of a row at ``ptr`` (masked: the lanes past n_valid zero)."""
        ptr = self.b.bitcast(ptr, self.vf.as_pointer())
        if self.masked:
            return self.b.call(self.mload, [ptr, ir.Constant(self.i32, 4), self.masks[j], self.zero_v])
        return self.b.load(ptr, align=4)

    def vstore(self, value, ptr, j):
        ptr = self.b.bitcast(ptr, self.vf.as_pointer())
        if self.masked:
            self.b.call(self.mstore, [value, ptr, ir.Constant(self.i32, 4), self.masks[j]])
        else:
            self.b.store(value, ptr, align=4)

    def row_of(self, r):
        """Row r, or for rows past m_valid the last valid one (their sums are never stored)."""
        rr = ir.Constant(self.i64, r)
        return self.b.select(self.b.icmp_signed("<", rr, self.m_valid), rr, self.last)

    def partial_sums(self):
        """The output block's mr x nvec vectors: where a later K chunk starts from (k_loop's ``first``)."""
        loaded = []
        for r in range(self.mr):
            row = self.b.gep(self.po, [self.b.mul(self.ldo, self.row_of(r))])
            for j in range(self.nvec):
                loaded.append(self.vload(self.b.gep(row, [ir.Constant(self.i64, self.lanes * j)]), j))
        return loaded


def _tile_intrinsic(kind: str, mr: int, nvec: int, masked: bool, with_z: bool, offs: bool = False, pf: bool = False,
                    xahead: int = 0, nt: bool = False):
    """An intrinsic ``tile(w, w_off, x, x_off, ldx, k_n, first, bias, r0, z, o_off, ldo, lo, hi, out,
    m_valid, n_valid)``: rows [0, m_valid) of an mr x nr block of ``out`` at ``out[o_off:]`` (row
    stride ``ldo``) = act(W panel at ``w[w_off:]`` ([k][mr]) times the rows ``x[x_off + k * ldx:]``
    over k < k_n + bias[r0 + r] (+ z at the same place as out when ``with_z``)), act = clamp to
    [lo, hi] (NaN kept). ``first`` = 0: the accumulators start from ``out`` (a later K chunk).
    ``masked``: only the first n_valid pixels of a row are read and stored. ``offs`` (the implicit
    GEMM, ``conv_implicit``): ``ldx`` is an int64 array, row k read at ``x[x_off + ldx[k]:]``. ``pf``
    (ROWS_PREFETCH): before its K loop the tile prefetches into L2 the output rows of the next tile
    along them (``nr`` pixels on: the panel-major driver's next tile) for writing, and their residual
    rows too ``with_z``, so that the epilogue's stores and loads of that tile find them. ``xahead`` (steps,
    0: none; not with ``offs``): each step k also prefetches into L1 the tile's pixels of row k + xahead
    (ROWS_X_AHEAD_ONE_THREAD: rows read in place, a page or more apart). ``nt`` (not with ``masked``): the
    epilogue's stores are non-temporal (``!nontemporal``, movntps: the lines go to memory without being read
    for ownership or kept in the caches) where the tile's first output address is on 64 bytes and ``ldo`` a
    multiple of 16 (every row's vectors then whole aligned lines), else the plain stores (ROWS_NT_ONE_THREAD;
    its callers take it for products of one K chunk: an earlier chunk's sums would be read back from memory);
    the same values either way."""
    lanes = 8 if kind == "avx2" else 16
    nr = lanes * nvec

    def codegen(context, builder, sig, args):
        (w, w_off, x, x_off, ldx, k_n, first, bias, r0, z, o_off, ldo, lo, hi, out, m_valid, n_valid) = args
        i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
        if not available(kind):  # compiled on every CPU, selected only where it runs
            trap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.trap")
            builder.call(trap, [])
            return context.get_dummy_value()
        mod = builder.module
        vf, fma, mload, mstore = _vector_intrinsics(mod, lanes)
        pw = builder.gep(builder.bitcast(_data(context, builder, sig.args[0], w), f32.as_pointer()), [w_off])
        px = builder.gep(builder.bitcast(_data(context, builder, sig.args[2], x), f32.as_pointer()), [x_off])
        pb = builder.bitcast(_data(context, builder, sig.args[7], bias), f32.as_pointer())
        pz = builder.gep(builder.bitcast(_data(context, builder, sig.args[9], z), f32.as_pointer()), [o_off])
        po = builder.gep(builder.bitcast(_data(context, builder, sig.args[14], out), f32.as_pointer()), [o_off])
        tir = _TileIR(builder, lanes, nvec, mr, masked, mload, mstore, po, ldo, m_valid, n_valid)
        splat, vload, vstore, row_of = tir.splat, tir.vload, tir.vstore, tir.row_of
        if pf:  # the next tile's output (and residual) rows into L2, a line each 16 floats
            i8p = ir.IntType(8).as_pointer()
            prefetch = cgutils.get_or_insert_function(mod, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                                      "llvm.prefetch.p0")
            for r in range(mr):
                at = builder.add(builder.mul(ldo, row_of(r)), ir.Constant(i64, nr))
                for base, rw in ((po, 1), (pz, 0)) if with_z else ((po, 1),):
                    for j in range(nvec * lanes // 16):
                        line = builder.bitcast(builder.gep(base, [builder.add(at, ir.Constant(i64, 16 * j))]), i8p)
                        builder.call(prefetch, [line, ir.Constant(i32, rw), ir.Constant(i32, 2), ir.Constant(i32, 1)])
        if offs:
            pk = builder.bitcast(_data(context, builder, sig.args[4], ldx), i64.as_pointer())
        k, accs, close = k_loop(builder, k_n, [tir.zero_v] * (mr * nvec), "ftile", (first, tir.partial_sums))
        if offs:
            xrow = builder.gep(px, [builder.load(builder.gep(pk, [k]), align=8)])
        else:
            xrow = builder.gep(px, [builder.mul(k, ldx)])
        if xahead and not offs:  # never faults past the rows' end
            i8p = ir.IntType(8).as_pointer()
            fetch = cgutils.get_or_insert_function(mod, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                                   "llvm.prefetch.p0")
            ahead_row = builder.gep(xrow, [builder.mul(ldx, ir.Constant(i64, xahead))])
            for j in range(nvec * lanes // 16):
                line = builder.bitcast(builder.gep(ahead_row, [ir.Constant(i64, 16 * j)]), i8p)
                builder.call(fetch, [line, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        xv = [vload(builder.gep(xrow, [ir.Constant(i64, lanes * j)]), j) for j in range(nvec)]
        wrow = builder.gep(pw, [builder.mul(k, ir.Constant(i64, mr))])
        new = []
        for r in range(mr):
            bw = splat(builder.load(builder.gep(wrow, [ir.Constant(i64, r)]), align=4))
            for j in range(nvec):
                new.append(builder.call(fma, [bw, xv[j], accs[r * nvec + j]]))
        close(new)
        lov, hiv = splat(lo), splat(hi)

        def epilogue(stream):
            for r in range(mr):
                with builder.if_then(builder.icmp_signed("<", ir.Constant(i64, r), m_valid), likely=True):
                    bv = splat(builder.load(builder.gep(pb, [builder.add(r0, ir.Constant(i64, r))]), align=4))
                    off = builder.mul(ldo, ir.Constant(i64, r))
                    for j in range(nvec):
                        at = builder.add(off, ir.Constant(i64, lanes * j))
                        v = builder.fadd(accs[r * nvec + j], bv)
                        if with_z:
                            v = builder.fadd(v, vload(builder.gep(pz, [at]), j))
                        v = builder.select(builder.fcmp_ordered("<", v, lov), lov, v)  # max(v, lo), NaN kept
                        v = builder.select(builder.fcmp_ordered(">", v, hiv), hiv, v)  # min(v, hi)
                        if stream:
                            ptr = builder.bitcast(builder.gep(po, [at]), vf.as_pointer())
                            st = builder.store(v, ptr, align=4 * lanes)
                            st.set_metadata("nontemporal", mod.add_metadata([ir.Constant(i32, 1)]))
                        else:
                            vstore(v, builder.gep(po, [at]), j)

        if nt and not masked:
            lines = builder.or_(builder.ptrtoint(po, i64), builder.mul(ldo, ir.Constant(i64, 4)))
            whole = builder.icmp_unsigned("==", builder.and_(lines, ir.Constant(i64, 63)), ir.Constant(i64, 0))
            with builder.if_else(whole, likely=True) as (then, other):
                with then:
                    epilogue(True)
                with other:
                    epilogue(False)
        else:
            epilogue(False)
        return context.get_dummy_value()

    @intrinsic
    def tile(typingctx, w, w_off, x, x_off, ldx, k_n, first, bias, r0, z, o_off, ldo, lo, hi, out, m_valid,
             n_valid):
        i64, f = types.int64, types.float32
        return types.void(w, i64, x, i64, ldx if offs else i64, i64, i64, bias, i64, z, i64, i64, f, f, out, i64,
                          i64), codegen

    tile.nr = nr
    return tile


@jit
def _tile_generic(w, w_off, x, x_off, ldx, k_n, first, bias, r0, z, has_z, o_off, ldo, lo, hi, out, m_valid,
                  n_valid, acc):
    """The tiles' arithmetic in plain loops (4 rows x 16 pixels, ``acc`` a 64-float scratch)."""
    for r in range(m_valid):
        for j in range(n_valid):
            acc[r * 16 + j] = np.float32(0) if first else out[o_off + r * ldo + j]
    for k in range(k_n):
        for r in range(m_valid):
            wv = w[w_off + k * 4 + r]
            for j in range(n_valid):
                acc[r * 16 + j] += wv * x[x_off + k * ldx + j]
    for r in range(m_valid):
        b = bias[r0 + r]
        for j in range(n_valid):
            v = acc[r * 16 + j] + b
            if has_z:
                v += z[o_off + r * ldo + j]
            if v < lo:
                v = lo
            if v > hi:
                v = hi
            out[o_off + r * ldo + j] = v


def _rows_driver(kind: int, full, masked, full_z, masked_z, half=None, half_z=None, tile_major=False, pf=False,
                 suffix: str = ""):
    """conv_tiles' loops for one variant, its four tiles fixed (a driver that dispatched on the kind
    inside the pixel loop, even inlined, ran small-K layers 20% slower). ``half``/``half_z``: masked
    tiles of one vector for a row's last nr / 2 pixels or fewer (a 14x14 map's 196 = 6 x 32 + 4:
    the two-vector tile spent a whole tile's FMAs on 4 pixels); the masked ones where None.
    ``tile_major``: per K chunk each pixel tile passes every weight panel (the tile's kc x nr pixels
    stay in L1, the panels stream from L2: BLIS's order) instead of each panel passing every tile
    (the panel's kc x mr weights in L1, the pixels streaming)."""
    mr, nr = MR[kind], NR[kind]
    if half is None:
        half, half_z = masked, masked_z

    def tiles(wp, k_n, m_n, x, x_col0, ldx, n_pix, bias, zeros, z, has_z, lo, hi, out, o_col0, ldo, block, groups,
              kc, pack, xp, s_lo, s_hi):
        panels = (m_n + mr - 1) // mr
        inf = np.float32(np.inf)
        for s in range(s_lo, s_hi):
            b = s // groups
            g = s - b * groups
            q0, q1 = g * panels // groups, (g + 1) * panels // groups
            p0 = b * block
            n = min(block, n_pix - p0)
            for k0 in range(0, k_n, kc):
                kk = min(kc, k_n - k0)
                final = k0 + kk >= k_n
                first = np.int64(1 if k0 == 0 else 0)
                bb = bias if final else zeros
                with_z = has_z and final
                lo2 = lo if final else -inf
                hi2 = hi if final else inf
                if pack:
                    for k in range(kk):
                        src = (k0 + k) * ldx + x_col0 + p0
                        for t in range(0, n, nr):
                            d = t * kk + k * nr
                            for j in range(min(nr, n - t)):
                                xp[U(d + j)] = x[U(src + t + j)]
                nt = (n + nr - 1) // nr
                nq = q1 - q0
                for i in range(nq * nt):
                    if tile_major:
                        ti = i // nq
                        q = q0 + i - ti * nq
                    else:
                        qi = i // nt
                        q = q0 + qi
                        ti = i - qi * nt
                    t = ti * nr
                    r0 = q * mr
                    m_valid = min(mr, m_n - r0)
                    w_off = q * k_n * mr + k0 * mr
                    o_off = r0 * ldo + o_col0 + p0 + t
                    nv = min(nr, n - t)
                    if pack:
                        src_x, x_off, step = xp, t * kk, nr
                    else:
                        src_x, x_off, step = x, k0 * ldx + x_col0 + p0 + t, ldx
                    if nv >= nr:
                        if with_z:
                            full_z(wp, w_off, src_x, x_off, step, kk, first, bb, r0, z, o_off, ldo, lo2, hi2, out,
                                   m_valid, nv)
                        else:
                            full(wp, w_off, src_x, x_off, step, kk, first, bb, r0, z, o_off, ldo, lo2, hi2, out,
                                 m_valid, nv)
                    elif 2 * nv <= nr:
                        if with_z:
                            half_z(wp, w_off, src_x, x_off, step, kk, first, bb, r0, z, o_off, ldo, lo2, hi2, out,
                                   m_valid, nv)
                        else:
                            half(wp, w_off, src_x, x_off, step, kk, first, bb, r0, z, o_off, ldo, lo2, hi2, out,
                                 m_valid, nv)
                    elif with_z:
                        masked_z(wp, w_off, src_x, x_off, step, kk, first, bb, r0, z, o_off, ldo, lo2, hi2, out,
                                 m_valid, nv)
                    else:
                        masked(wp, w_off, src_x, x_off, step, kk, first, bb, r0, z, o_off, ldo, lo2, hi2, out,
                               m_valid, nv)

    return _variant_jit(tiles, ("rows_tm" if tile_major else "rows") + ("_pf" if pf else "") + suffix, kind)


@jit
def _generic_tile(w, w_off, x, x_off, ldx, k_n, first, bias, r0, z, o_off, ldo, lo, hi, out, m_valid, n_valid):
    """_tile_generic with its own scratch, shaped as the intrinsic tiles are called."""
    _tile_generic(w, w_off, x, x_off, ldx, k_n, first, bias, r0, z, True, o_off, ldo, lo, hi, out, m_valid, n_valid,
                  np.empty(64, np.float32))


@jit
def _generic_tile_noz(w, w_off, x, x_off, ldx, k_n, first, bias, r0, z, o_off, ldo, lo, hi, out, m_valid, n_valid):
    _tile_generic(w, w_off, x, x_off, ldx, k_n, first, bias, r0, z, False, o_off, ldo, lo, hi, out, m_valid, n_valid,
                  np.empty(64, np.float32))


_NAME = {v: k for k, v in KIND.items()}
# The rows tiles of 12 weight rows x 32 pixels on avx512 (24 zmm accumulators): a kind of their own
# for the rows path only (MR/NR/plan/rows_driver/conv_tiles take it as any kind; the cols, implicit
# and Winograd paths never see it). Per step of k the 8-row tile loads two pixel vectors for 16 FMAs,
# this one for 24: a third less traffic from L2 for the pixel stream per flop (session 5's raw table
# on the Xeon: 12 x 32 at or above 8 x 32 on all seven shapes, +3-10%). Off by default (ROWS12_ON).
ROWS12 = 3
MR[ROWS12], NR[ROWS12] = 12, 32
_NAME[ROWS12] = "avx512x12"
_INTRINSIC_NAME = {ROWS12: "avx512"}
ROWS12_ON = False  # off (issue 11, session 9): in ResNet-50 the 8-row tiles ran at or ahead of these on
# both machines (the 64 -> 256 layers at 56x56 with the residual 6-12 % slower on 12 rows), where the
# kernels alone had the 12-row ones 4 % ahead on the Xeon; on, they cost a second compiled rows driver
ROWS12_MIN_M = 96  # fewer weight rows stay on 8-row panels (64 = 5 x 12 + 4: 72 rows computed)


ROWS12_ONE_THREAD = True  # a one-thread session's bound 1x1 calls take ROWS12 as if ROWS12_ON (issue 11,
# session 11: Xeon, ResNet-50 at one thread in turns, 12-row panels faster in 6 of 7 rounds, median 1.075x;
# not at two threads, where cpair's halves run on 8-row panels only)


def rows_kind(kind, m_n: int, one_thread: bool = False):
    """The kind conv_tiles runs a product of ``m_n`` weight rows on, for the variant ``kind``
    (``choice``'s): ROWS12 (12-row panels) for avx512 where the last panel wastes at most 1/32 of the
    rows (ROWS12_ON, or ``one_thread`` and ROWS12_ONE_THREAD; m_n >= ROWS12_MIN_M), else ``kind``
    itself (8-row panels). The weights must be packed with MR of the returned kind."""
    on = ROWS12_ON or (one_thread and ROWS12_ONE_THREAD)
    if kind == KIND["avx512"] and on and m_n >= ROWS12_MIN_M and (-m_n % 12) * 32 <= m_n:
        return ROWS12
    return kind
_built: dict = {}
_build_lock = threading.RLock()  # reentrant: a batched driver builds its tiles' driver


def _built_once(factory):
    """``factory(*key)`` made once per key, under a lock: the first calls of a driver may come from
    several shards at once, and two dispatchers of one variant would each compile or load it."""
    @functools.wraps(factory)
    def get(*key):
        hit = _built.get((factory, key))
        if hit is None:
            with _build_lock:
                hit = _built.get((factory, key))
                if hit is None:
                    hit = _built[factory, key] = factory(*key)
        return hit

    return get


def _variant_jit(fn, driver: str, kind: int):
    """``jit(fn)`` for a driver closure of one variant. Numba keys a cached closure on a pickle of
    its cells, and the cells here (intrinsics: pickled with a random per-process id) differ in every
    process, so the key is the variant's name instead (cache.CLOSURE_KEY); the intrinsics' IR is
    fixed by the package's sources, which every key also carries (cache.package_fingerprint), and by
    the CPU features, which Numba's key carries."""
    setattr(fn, CLOSURE_KEY, f"ftile.{driver}.{_NAME[kind]}")
    return jit(fn)


def rows_driver(kind: int):
    """The compiled loops of conv_tiles for variant ``kind``, built on first use: a process compiles
    (or loads from the cache) only the variants it runs. The loop order is ROWS_TILE_MAJOR's, the
    tiles' prefetch ROWS_PREFETCH's (avx512 kinds, panel-major order)."""
    pf = bool(ROWS_PREFETCH) and kind in (KIND["avx512"], ROWS12) and not ROWS_TILE_MAJOR
    return rows_driver_order(kind, ROWS_TILE_MAJOR, pf)


ROWS_TILE_MAJOR = False  # the rows driver's loop order (_rows_driver's tile_major)
KC_TILE_MAJOR = 256  # K chunk of the tile-major order: a 32-pixel tile's chunk is 32 KiB
# Issue 11, session 14 (r50two14): the avx512 rows tiles prefetch the next tile's output rows (and residual
# rows) into L2 before their K loop (_tile_intrinsic's ``pf``): a tile writes mr NCHW rows of nr pixels, and
# a 56x56 map's K = 64 tile (~800 cycles) ends on 24-48 lines from L3 that the L2 streamer, one stream
# a row restarting at every page, does not always have (0: off). Xeon, ResNet-50 per kind: 0.94-1.02x on the
# 28x28 and 56x56 1x1 layers, in turns 1.00: off. A/B: turns.py --variant1 pf=kernels.ftile.ROWS_PREFETCH=1
# (nodes_ab.py refuses it: the pair halves' built-once drivers read it too)
ROWS_PREFETCH = 0


@_built_once
def rows_driver_order(kind: int, tile_major: bool, pf: bool = False, xahead: int = 0, nt: bool = False):
    """rows_driver with the loop order (and the tiles' prefetches: ``pf`` ROWS_PREFETCH's, ``xahead`` the
    pixel rows', rows_driver_ahead's; ``nt``: the full tiles' epilogue stores non-temporal) given."""
    if kind == 0:
        return _rows_driver(0, _generic_tile_noz, _generic_tile_noz, _generic_tile, _generic_tile,
                            tile_major=tile_major)
    name, mr = _INTRINSIC_NAME.get(kind, _NAME[kind]), MR[kind]
    tiles = [_tile_intrinsic(name, mr, 2, masked, with_z, pf=pf, xahead=xahead, nt=nt) for with_z in (False, True)
             for masked in (False, True)]
    return _rows_driver(kind, *tiles, *(_tile_intrinsic(name, mr, 1, True, with_z, pf=pf, xahead=xahead)
                                        for with_z in (False, True)),
                        tile_major=tile_major, pf=pf, suffix=(f"_x{xahead}" if xahead else "") + ("_nt" if nt else ""))


# Issue 11, session 15 (rate15): a one-thread session's bound 1x1 calls whose rows tiles read the pixel rows in
# place (ftile.pack_rows false: fewer than PACK_MIN_M weight rows, ResNet-50's 256 -> 64 and 64 -> 64 at
# 56x56) prefetch, at step k, the tile's pixels of row k + this into L1 (rows_driver_ahead; 0: off). Row k
# and row k + 1 are a whole map apart (12 KiB at 56x56): a new page each step, past the stride the
# hardware's prefetchers follow. Xeon (docs/numba.md, "The 1x1 tiles' own rate at one thread"): 64 x 256 x
# 3136 alone 120-138 -> 145-151 GFLOP/s; ResNet-50's 256 -> 64 at 56x56 1.12-1.22x in three processes (ctl
# 0.96-1.09), the rest of ResNet-50, RegNetY and MobileNetV2 level: on (8)
ROWS_X_AHEAD_ONE_THREAD = 8


def rows_driver_ahead(kind: int, xahead: int, nt: bool = False):
    """rows_driver(kind) whose tiles also prefetch their pixel row k + ``xahead`` at step k (0: none) and, with
    ``nt``, store their full tiles' outputs non-temporal (ROWS_NT_ONE_THREAD); neither: rows_driver itself. The
    loop order and ROWS_PREFETCH as rows_driver's."""
    if not (xahead or nt) or kind not in (KIND["avx512"], ROWS12):
        return rows_driver(kind)
    pf = bool(ROWS_PREFETCH) and not ROWS_TILE_MAJOR
    return rows_driver_order(kind, ROWS_TILE_MAJOR, pf, int(xahead), *((True,) if nt else ()))  # (one key a driver)


# Issue 11, session 15 (out15): a one-thread session's bound 1x1 calls on the rows tiles (ResNet-50's 28x28
# and 56x56 1x1 layers) store their full tiles' outputs non-temporal (_tile_intrinsic's ``nt``): a 64 -> 256
# layer at 56x56 writes 3.2 MB of output rows, each line read for ownership first and then pushed out of L2 by
# the rows after it. Taken only where the plan's K chunk is the whole K (every ResNet-50 layer there). Unmeasured
# on the Xeon: off (docs/numba.md, "The writes after the K loop"). A/B:
# nodes_ab.py resnet50 N nt=kernels.ftile.ROWS_NT_ONE_THREAD=1 (read at bind)
ROWS_NT_ONE_THREAD = False


def conv_tiles(kind, wp, k_n, m_n, x, x_col0, ldx, n_pix, bias, zeros, z, has_z, lo, hi, out, o_col0, ldo, block,
               groups, kc, pack, xp, s_lo, s_hi):
    """Shards [s_lo, s_hi) of a convolution's product on the tiles of ``kind``: shard s is pixel block
    s // groups (``block`` pixels of the ``n_pix`` at x's column ``x_col0``, written at out's column
    ``o_col0 + p``) times weight-panel group s % groups. Per block and group: K in chunks of ``kc``,
    each weight panel's chunk over every pixel tile of the block; ``x`` (rows of ``ldx``) and
    ``out``/``z`` (rows of ``ldo``) flat. Earlier chunks store plain sums (``zeros`` bias, no
    clamp), the last one the epilogue. ``pack``: each chunk of the block's rows is first copied into
    tile order ([tile][k][nr], ``xp``: a scratch of at least block * kc floats), so that a tile reads
    one contiguous stream instead of one line from each of kc rows (kc pages apart where a row is 4
    KiB or more). Only variant ``kind``'s driver is compiled (rows_driver)."""
    rows_driver(kind)(wp, k_n, m_n, x, x_col0, ldx, n_pix, bias, zeros, z, has_z, lo, hi, out, o_col0, ldo, block,
                      groups, kc, pack, xp, s_lo, s_hi)


# ---------------------------------------------------- implicit GEMM: strided convolutions, no im2col
def _implicit_driver(full, masked, full_z, masked_z, half, half_z, mr, nr):
    """conv_implicit's loops for one variant (its offset-table tiles fixed; ``half``: a masked tile of
    one vector, for a row's last nr / 2 pixels or fewer, as the stem's 112 = 3 x 32 + 16)."""

    def rows(wp, k_n, m_n, x, koff, row_step, ow_n, bias, z, has_z, lo, hi, out, ldo, s_lo, s_hi):
        panels = (m_n + mr - 1) // mr
        one = np.int64(1)
        for oh in range(s_lo, s_hi):
            xb = oh * row_step
            ob = oh * ow_n
            for q in range(panels):
                r0 = q * mr
                m_valid = min(mr, m_n - r0)
                w_off = q * k_n * mr
                for t in range(0, ow_n, nr):
                    nv = min(nr, ow_n - t)
                    o_off = r0 * ldo + ob + t
                    if nv >= nr:
                        if has_z:
                            full_z(wp, w_off, x, xb + t, koff, k_n, one, bias, r0, z, o_off, ldo, lo, hi, out, m_valid,
                                   nv)
                        else:
                            full(wp, w_off, x, xb + t, koff, k_n, one, bias, r0, z, o_off, ldo, lo, hi, out, m_valid,
                                 nv)
                    elif 2 * nv <= nr:
                        if has_z:
                            half_z(wp, w_off, x, xb + t, koff, k_n, one, bias, r0, z, o_off, ldo, lo, hi, out, m_valid,
                                   nv)
                        else:
                            half(wp, w_off, x, xb + t, koff, k_n, one, bias, r0, z, o_off, ldo, lo, hi, out, m_valid,
                                 nv)
                    elif has_z:
                        masked_z(wp, w_off, x, xb + t, koff, k_n, one, bias, r0, z, o_off, ldo, lo, hi, out, m_valid,
                                 nv)
                    else:
                        masked(wp, w_off, x, xb + t, koff, k_n, one, bias, r0, z, o_off, ldo, lo, hi, out, m_valid, nv)

    return rows


_FORMS = ((False, False), (True, False), (False, True), (True, True))  # (masked, with_z): full, masked, _z, masked_z


@functools.cache
def implicit_driver(kind: int):
    """The compiled loops of conv_implicit for variant ``kind`` (1 or 2), built on first use."""
    name, mr = _NAME[kind], MR[kind]
    rows = _implicit_driver(*(_tile_intrinsic(name, mr, 2, m, z, True) for m, z in _FORMS),
                            *(_tile_intrinsic(name, mr, 1, True, z, True) for z in (False, True)), mr, NR[kind])
    return _variant_jit(rows, "implicit", kind)


def conv_implicit(kind, wp, k_n, m_n, x, koff, row_step, ow_n, bias, z, has_z, lo, hi, out, ldo, scratch, s_lo, s_hi):
    """Output rows [s_lo, s_hi) of a strided convolution as an implicit GEMM on the rows tiles of
    ``kind`` (1 or 2), no im2col: ``x`` the zero-padded column phases of one image
    (``phases_padded``), row k of the product read at ``x[oh * row_step + ow + koff[k]]`` for output
    pixel (oh, ow) (``implicit_offsets``), each tile 32 (avx2: 16) pixels of one output row; the
    epilogue as conv_tiles', ``out`` (rows of ``ldo`` = OH * OW) and ``z`` flat. ``scratch`` unused
    (run_sharded's signature)."""
    implicit_driver(kind)(wp, k_n, m_n, x, koff, row_step, ow_n, bias, z, has_z, lo, hi, out, ldo, s_lo, s_hi)


# ----------------------------- strided convolutions of deep K: the implicit GEMM's rows copied into tile order
def _gather_driver(kind: int, full, masked, full_z, masked_z, half, half_z):
    """conv_gather's loops for one variant (the rows tiles, reading the packed scratch)."""
    mr, nr = MR[kind], NR[kind]

    def tiles(wp, k_n, m_n, x, koff, row_step, ow_n, n_pix, bias, zeros, z, has_z, lo, hi, out, ldo, block, groups,
              kc, xp, s_lo, s_hi):
        panels = (m_n + mr - 1) // mr
        inf = np.float32(np.inf)
        runs = np.empty(3 * nr, np.int64)  # per tile: (lane, offset of the pixel in a phase row, length)
        for s in range(s_lo, s_hi):
            b = s // groups
            g = s - b * groups
            q0, q1 = g * panels // groups, (g + 1) * panels // groups
            p0 = b * block
            n = min(block, n_pix - p0)
            for k0 in range(0, k_n, kc):
                kk = min(kc, k_n - k0)
                final = k0 + kk >= k_n
                first = np.int64(1 if k0 == 0 else 0)
                bb = bias if final else zeros
                with_z = has_z and final
                lo2 = lo if final else -inf
                hi2 = hi if final else inf
                for t in range(0, n, nr):  # copy the tile's rows k0..k0+kk into xp[t * kk:], [k][nr]
                    nv = min(nr, n - t)
                    p = p0 + t
                    oh = p // ow_n
                    ow = p - oh * ow_n
                    j = 0
                    nrun = 0
                    while j < nv:  # the tile's pixels as runs along output rows
                        ln = min(nv - j, ow_n - ow)
                        runs[3 * nrun] = j
                        runs[3 * nrun + 1] = oh * row_step + ow
                        runs[3 * nrun + 2] = ln
                        nrun += 1
                        j += ln
                        oh += 1
                        ow = 0
                    for k in range(kk):
                        ko = koff[k0 + k]
                        d = t * kk + k * nr
                        for r in range(nrun):
                            dj = d + runs[3 * r]
                            src = ko + runs[3 * r + 1]
                            for e in range(runs[3 * r + 2]):
                                xp[U(dj + e)] = x[U(src + e)]
                for q in range(q0, q1):
                    r0 = q * mr
                    m_valid = min(mr, m_n - r0)
                    w_off = q * k_n * mr + k0 * mr
                    for t in range(0, n, nr):
                        o_off = r0 * ldo + p0 + t
                        nv = min(nr, n - t)
                        if nv >= nr:
                            if with_z:
                                full_z(wp, w_off, xp, t * kk, nr, kk, first, bb, r0, z, o_off, ldo, lo2, hi2, out,
                                       m_valid, nv)
                            else:
                                full(wp, w_off, xp, t * kk, nr, kk, first, bb, r0, z, o_off, ldo, lo2, hi2, out,
                                     m_valid, nv)
                        elif 2 * nv <= nr:
                            if with_z:
                                half_z(wp, w_off, xp, t * kk, nr, kk, first, bb, r0, z, o_off, ldo, lo2, hi2, out,
                                       m_valid, nv)
                            else:
                                half(wp, w_off, xp, t * kk, nr, kk, first, bb, r0, z, o_off, ldo, lo2, hi2, out,
                                     m_valid, nv)
                        elif with_z:
                            masked_z(wp, w_off, xp, t * kk, nr, kk, first, bb, r0, z, o_off, ldo, lo2, hi2, out,
                                     m_valid, nv)
                        else:
                            masked(wp, w_off, xp, t * kk, nr, kk, first, bb, r0, z, o_off, ldo, lo2, hi2, out,
                                   m_valid, nv)

    return _variant_jit(tiles, "gather", kind)


@_built_once
def gather_driver(kind: int):
    """The compiled loops of conv_gather for variant ``kind`` (1, 2 or ROWS12), built on first use."""
    name, mr = _INTRINSIC_NAME.get(kind, _NAME[kind]), MR[kind]
    return _gather_driver(kind, *(_tile_intrinsic(name, mr, 2, m, z) for m, z in _FORMS),
                          *(_tile_intrinsic(name, mr, 1, True, z) for z in (False, True)))


def conv_gather(kind, wp, k_n, m_n, x, koff, row_step, ow_n, n_pix, bias, zeros, z, has_z, lo, hi, out, ldo, block,
                groups, kc, xp, s_lo, s_hi):
    """Shards [s_lo, s_hi) of a strided convolution on the rows tiles of ``kind`` (1, 2 or ROWS12) as
    conv_tiles cuts them (ftile.plan: pixel blocks x weight-panel groups, K chunks), each block's
    rows copied into tile order straight from the input's zero-padded column phases (``x``:
    phases_padded; row k of output pixel p = oh * ow_n + ow at ``x[koff[k] + oh * row_step + ow]``,
    implicit_geometry) instead of from an im2col matrix: one copy of the K x pixels values where
    im2col + conv_tiles' packing made two (and wrote the column matrix out of cache). ``xp``: a
    scratch of at least block * kc floats; ``out``/``z`` flat, rows of ``ldo`` = OH * OW."""
    gather_driver(kind)(wp, k_n, m_n, x, koff, row_step, ow_n, n_pix, bias, zeros, z, has_z, lo, hi, out, ldo, block,
                        groups, kc, xp, s_lo, s_hi)


def implicit_geometry(c_n: int, kh: int, kw: int, s: int, ph: int, pw: int, oh_n: int, ow_n: int):
    """(hp, qp, pl, row_step, koff) of conv_implicit for stride ``s`` (both ways), dilation 1: the
    padded phase array is (s, C, hp, qp) with phase b's column q = input column (q - pl) * s + b and
    row r = input row r - ph; tap (c, i, j) of output (oh, ow) reads it at ((b C + c) hp + oh s + i)
    qp + ow + dq with b = (j - pw) mod s, dq = (j - pw - b) / s + pl."""
    pl = -(-pw // s)
    hp = (oh_n - 1) * s + kh
    qp = ow_n + (kw - 1) // s + pl + 1
    koff = np.empty(c_n * kh * kw, np.int64)
    for c in range(c_n):
        for i in range(kh):
            for j in range(kw):
                b = (j - pw) % s
                dq = (j - pw - b) // s + pl
                koff[(c * kh + i) * kw + j] = ((b * c_n + c) * hp + i) * qp + dq
    return hp, qp, pl, s * qp, koff


@jit
def phases_padded(x, xpp, s, ph, pl, hp, qp, c0, c1):
    """xpp[b, c, r, q] = x[c, r - ph, (q - pl) * s + b], 0 outside the input (``x`` (C, H, W), ``xpp``
    flat (s * C * hp * qp)), channels [c0, c1). Flat unsigned indexing, the valid columns of a row
    computed once (a bounds test per element ran the 64@56 input's phases at 0.16 ms)."""
    phases_block(x, xpp, s, ph, pl, hp, qp, c0, c1, 0, hp)


@jit
def phases_block(x, xpp, s, ph, pl, hp, qp, c0, c1, r0, r1):
    """phases_padded's floats for the channels [c0, c1) and the padded rows [r0, r1) of every phase (cpair.STEM_SPLIT's
    unit: one channel's band of rows)."""
    c_n, h_n, w_n = x.shape
    xf = x.reshape(x.size)
    for b in range(s):
        q_hi = min(qp, pl + (w_n - b + s - 1) // s)  # past the last q with (q - pl) * s + b < w_n
        q_lo = min(pl, q_hi)  # the first q with (q - pl) * s + b >= 0 is pl (b < s)
        for c in range(c0, c1):
            for r in range(r0, r1):
                d0 = U(((b * c_n + c) * hp + r) * qp)
                h = r - ph
                if h < 0 or h >= h_n:
                    for q in range(qp):
                        xpp[d0 + U(q)] = 0
                    continue
                src = (c * h_n + h) * w_n + b - pl * s  # signed: src + q * s >= 0 for q >= q_lo
                for q in range(q_lo):
                    xpp[d0 + U(q)] = 0
                for q in range(q_lo, q_hi):
                    xpp[d0 + U(q)] = xf[U(src + q * s)]
                for q in range(q_hi, qp):
                    xpp[d0 + U(q)] = 0


# ------------------------------------------------------------------ small maps: channels in the lanes
def _cols_intrinsic(kind: str, cv: int, mp: int, with_z: bool, wstride: int | None = None, xstep: int = 0,
                    full: bool = False, ahead: int = 0):
    """An intrinsic ``tile(w, w_off, x, x_off, ldx, k_n, first, final, acc, a_off, bias, r0, z, o_off,
    ldo, lo, hi, out, m_valid, n_valid)`` for maps of few pixels (7x7): the channels are the vector
    lanes. ``w`` packed as pack_weights(W, cv * lanes) ([k][cv * lanes channels], loaded as cv
    vectors), each of the tile's ``mp`` pixels ``x[x_off + k * ldx + p]`` broadcast; accumulators
    (pixel, channel vector). ``first`` = 0: they start from the (mp, cv * lanes) scratch at
    ``acc[a_off:]``; ``final`` = 0: they are stored there (a K chunk), else bias (+ z) and clamp are
    applied and each vector is stored lane by lane along its channels' NCHW rows (``out[o_off + c *
    ldo + p]``). Pixels past n_valid read pixel n_valid - 1 and are not stored; channel vectors at or
    past m_valid (a multiple of lanes) are not stored. ``wstride``: the packed panels' width when it
    is wider than the tile's (a narrow tile on a panel's last channels: its row k at ``w[w_off + k *
    wstride]``). ``xstep`` > 0 (the direct convolution, fdirect.py): ``ldx`` is an int64 array, row k
    at ``x[x_off + ldx[k]:]`` and pixel p ``xstep`` floats after pixel p - 1 (the stride: the input is
    read in place, no column matrix); ``full``: every tile has ``mp`` valid pixels (n_valid ignored on
    the way in: the pixel offsets are constants). ``ahead`` (steps, 0: none; fdirect.AHEAD): each step k
    also prefetches into L1 the weights' row k + ahead (its cv lines), which stream from L2 once a tile
    where the panel's chunk is larger than L1."""
    lanes = 8 if kind == "avx2" else 16
    width = cv * lanes
    wstep = width if wstride is None else wstride

    def codegen(context, builder, sig, args):
        (w, w_off, x, x_off, ldx, k_n, first, final, acc, a_off, bias, r0, z, o_off, ldo, lo, hi, out, m_valid,
         n_valid) = args
        i32, i64, f32 = ir.IntType(32), ir.IntType(64), ir.FloatType()
        if not available(kind):
            trap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.trap")
            builder.call(trap, [])
            return context.get_dummy_value()
        mod = builder.module
        vf = ir.VectorType(f32, lanes)
        fma = cgutils.get_or_insert_function(mod, ir.FunctionType(vf, [vf, vf, vf]), f"llvm.fma.v{lanes}f32")
        pw = builder.gep(builder.bitcast(_data(context, builder, sig.args[0], w), f32.as_pointer()), [w_off])
        px = builder.gep(builder.bitcast(_data(context, builder, sig.args[2], x), f32.as_pointer()), [x_off])
        pa = builder.gep(builder.bitcast(_data(context, builder, sig.args[8], acc), f32.as_pointer()), [a_off])
        pb = builder.bitcast(_data(context, builder, sig.args[10], bias), f32.as_pointer())
        pz = builder.gep(builder.bitcast(_data(context, builder, sig.args[12], z), f32.as_pointer()), [o_off])
        po = builder.gep(builder.bitcast(_data(context, builder, sig.args[17], out), f32.as_pointer()), [o_off])
        zero_v = ir.Constant(vf, None)
        splat0 = ir.Constant(ir.VectorType(i32, lanes), [0] * lanes)

        def splat(value):
            one = builder.insert_element(ir.Constant(vf, ir.Undefined), value, ir.Constant(i32, 0))
            return builder.shuffle_vector(one, ir.Constant(vf, ir.Undefined), splat0)

        def vptr(base, at):
            return builder.bitcast(builder.gep(base, [ir.Constant(i64, at)]), vf.as_pointer())

        last = builder.sub(n_valid, ir.Constant(i64, 1))
        pix = []
        for p in range(mp):  # pixels past n_valid read the last valid one (never stored)
            pp = ir.Constant(i64, p * max(1, xstep))
            if not full:
                at = builder.mul(last, ir.Constant(i64, xstep)) if xstep else last
                pp = builder.select(builder.icmp_signed("<", ir.Constant(i64, p), n_valid), pp, at)
            pix.append(pp)

        def partial_sums():  # a later K chunk starts from the stored partial sums
            return [builder.load(vptr(pa, p * width + j * lanes), align=4) for p in range(mp) for j in range(cv)]

        k, accs, close = k_loop(builder, k_n, [zero_v] * (mp * cv), "fcols", (first, partial_sums))
        wrow = builder.gep(pw, [builder.mul(k, ir.Constant(i64, wstep))])
        wv = [builder.load(vptr(wrow, j * lanes), align=4) for j in range(cv)]
        if ahead:  # never faults past the panel's end
            i8p = ir.IntType(8).as_pointer()
            prefetch = cgutils.get_or_insert_function(mod, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                                      "llvm.prefetch.p0")
            for j in range(cv * lanes // 16):
                line = builder.bitcast(builder.gep(wrow, [ir.Constant(i64, ahead * wstep + 16 * j)]), i8p)
                builder.call(prefetch, [line, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        if xstep:
            pk = builder.bitcast(_data(context, builder, sig.args[4], ldx), i64.as_pointer())
            xrow = builder.gep(px, [builder.load(builder.gep(pk, [k]), align=8)])
        else:
            xrow = builder.gep(px, [builder.mul(k, ldx)])
        new = []
        for p in range(mp):
            bx = splat(builder.load(builder.gep(xrow, [pix[p]]), align=4))
            for j in range(cv):
                new.append(builder.call(fma, [wv[j], bx, accs[p * cv + j]]))
        close(new)
        with builder.if_else(builder.icmp_signed("!=", final, ir.Constant(i64, 0))) as (fin, partial):
            with partial:
                for p in range(mp):
                    for j in range(cv):
                        builder.store(accs[p * cv + j], vptr(pa, p * width + j * lanes), align=4)
            with fin:
                lov, hiv = splat(lo), splat(hi)
                lastv = builder.sub(m_valid, ir.Constant(i64, lanes))
                if lanes == 16 and mp <= 8:  # transposed in registers: one masked store per channel row
                    _cols_store_rows(builder, mod, accs, cv, mp, pb, r0, m_valid, lastv, pz if with_z else None, po,
                                     ldo, lo, hi, n_valid)
                elif lanes == 16 and mp <= 16:  # (fdirect's 2 x 14 tile) the same, in groups of at most 8 pixels
                    groups = -(-mp // 8)
                    for g in range(groups):
                        g0, g1 = g * mp // groups, (g + 1) * mp // groups
                        at = ir.Constant(i64, g0)
                        nv_g = builder.sub(n_valid, at)  # (p < n_valid - g0; negative: nothing stored)
                        _cols_store_rows(builder, mod, accs[g0 * cv:g1 * cv], cv, g1 - g0, pb, r0, m_valid, lastv,
                                         builder.gep(pz, [at]) if with_z else None, builder.gep(po, [at]), ldo, lo,
                                         hi, nv_g)
                else:
                    for j in range(cv):
                        jj = ir.Constant(i64, j * lanes)
                        at = builder.select(builder.icmp_signed("<", jj, m_valid), jj, lastv)
                        bptr = builder.bitcast(builder.gep(pb, [builder.add(r0, at)]), vf.as_pointer())
                        bv = builder.load(bptr, align=4)
                        with builder.if_then(builder.icmp_signed("<", jj, m_valid), likely=True):
                            for p in range(mp):
                                inside = builder.icmp_signed("<", ir.Constant(i64, p), n_valid)
                                with builder.if_then(inside, likely=True):
                                    v = builder.fadd(accs[p * cv + j], bv)
                                    offs = [builder.add(builder.mul(ldo, ir.Constant(i64, j * lanes + t)),
                                                        ir.Constant(i64, p)) for t in range(lanes)]
                                    if with_z:
                                        zv = ir.Constant(vf, ir.Undefined)
                                        for t in range(lanes):
                                            zt = builder.load(builder.gep(pz, [offs[t]]), align=4)
                                            zv = builder.insert_element(zv, zt, ir.Constant(i32, t))
                                        v = builder.fadd(v, zv)
                                    v = builder.select(builder.fcmp_ordered("<", v, lov), lov, v)
                                    v = builder.select(builder.fcmp_ordered(">", v, hiv), hiv, v)
                                    for t in range(lanes):
                                        builder.store(builder.extract_element(v, ir.Constant(i32, t)),
                                                      builder.gep(po, [offs[t]]), align=4)
        return context.get_dummy_value()

    @intrinsic
    def tile(typingctx, w, w_off, x, x_off, ldx, k_n, first, final, acc, a_off, bias, r0, z, o_off, ldo, lo, hi, out,
             m_valid, n_valid):
        i64, f = types.int64, types.float32
        return types.void(w, i64, x, i64, ldx if xstep else i64, i64, i64, i64, acc, i64, bias, i64, z, i64, i64, f, f,
                          out, i64, i64), codegen

    return tile


def _cols_store_rows(builder, mod, accs, cv, mp, pb, r0, m_valid, lastv, pz, po, ldo, lo, hi, n_valid):
    """The cols tile's last K chunk on 16 lanes (avx512): per channel vector j, bias added to its ``mp``
    pixel vectors (lane t = channel j * 16 + t), the (pixel, channel) block transposed in registers in
    three stages of two-source shuffles (``vpermt2ps``; pixel vectors padded to 8) into 8 vectors of
    two channels x 8 pixels, then per channel its NCHW row: + z (a masked row load), clamp, one masked
    store of the first n_valid pixels. The lane-by-lane stores (and the residual's lane-by-lane loads)
    it replaces cost as much as the FMAs at K = 160 (Xeon: 960 x 160 x 49 ran at ~0.7x onnxruntime)."""
    i1, i32, i64, f32 = ir.IntType(1), ir.IntType(32), ir.IntType(64), ir.FloatType()
    vf, vf8 = ir.VectorType(f32, 16), ir.VectorType(f32, 8)
    vm8 = ir.VectorType(i1, 8)
    mstore = cgutils.get_or_insert_function(mod, ir.FunctionType(ir.VoidType(), [vf8, vf8.as_pointer(), i32, vm8]),
                                            "llvm.masked.store.v8f32.p0")
    mload = cgutils.get_or_insert_function(mod, ir.FunctionType(vf8, [vf8.as_pointer(), i32, vm8, vf8]),
                                           "llvm.masked.load.v8f32.p0")
    vi8 = ir.VectorType(i64, 8)
    nv = builder.insert_element(ir.Constant(vi8, ir.Undefined), n_valid, ir.Constant(i32, 0))
    nv = builder.shuffle_vector(nv, ir.Constant(vi8, ir.Undefined), ir.Constant(ir.VectorType(i32, 8), [0] * 8))
    mask = builder.icmp_signed("<", ir.Constant(vi8, list(range(8))), nv)  # pixels stored: p < n_valid
    zero8 = ir.Constant(vf8, None)

    def splat8(value):
        one = builder.insert_element(ir.Constant(vf8, ir.Undefined), value, ir.Constant(i32, 0))
        return builder.shuffle_vector(one, ir.Constant(vf8, ir.Undefined), ir.Constant(ir.VectorType(i32, 8), [0] * 8))

    lo8, hi8 = splat8(lo), splat8(hi)

    def shuf(a, b, want):  # a, b: (vector, lane labels); the 16 labels ``want`` taken from them
        (va, la), (vb, lb) = a, b
        idx = [la.index(x) if x in la else 16 + lb.index(x) for x in want]
        return builder.shuffle_vector(va, vb, ir.Constant(ir.VectorType(i32, 16), idx)), list(want)

    for j in range(cv):
        jj = ir.Constant(i64, j * 16)
        at = builder.select(builder.icmp_signed("<", jj, m_valid), jj, lastv)
        bv = builder.load(builder.bitcast(builder.gep(pb, [builder.add(r0, at)]), vf.as_pointer()), align=4)
        with builder.if_then(builder.icmp_signed("<", jj, m_valid), likely=True):
            pix = [(builder.fadd(accs[p * cv + j], bv) if p < mp else ir.Constant(vf, None),
                    [(p, t) for t in range(16)]) for p in range(8)]
            pairs = {(k, h): shuf(pix[2 * k], pix[2 * k + 1], [(2 * k + e, c) for c in range(8 * h, 8 * h + 8)
                                                                for e in (0, 1)])
                     for k in range(4) for h in range(2)}
            quads = {(g, h, q): shuf(pairs[2 * g, h], pairs[2 * g + 1, h],
                                     [(p, c) for c in range(8 * h + 4 * q, 8 * h + 4 * q + 4)
                                      for p in range(4 * g, 4 * g + 4)])
                     for g in range(2) for h in range(2) for q in range(2)}
            for h in range(2):
                for q in range(2):
                    for r in range(2):
                        c0 = 8 * h + 4 * q + 2 * r
                        v, _ = shuf(quads[0, h, q], quads[1, h, q], [(p, c) for c in (c0, c0 + 1) for p in range(8)])
                        for e in range(2):
                            half = ir.Constant(ir.VectorType(i32, 8), list(range(8 * e, 8 * e + 8)))
                            row = builder.shuffle_vector(v, ir.Constant(vf, ir.Undefined), half)
                            off = builder.mul(ldo, ir.Constant(i64, j * 16 + c0 + e))
                            if pz is not None:
                                zp = builder.bitcast(builder.gep(pz, [off]), vf8.as_pointer())
                                row = builder.fadd(row, builder.call(mload, [zp, ir.Constant(i32, 4), mask, zero8]))
                            row = builder.select(builder.fcmp_ordered("<", row, lo8), lo8, row)  # NaN kept
                            row = builder.select(builder.fcmp_ordered(">", row, hi8), hi8, row)
                            op = builder.bitcast(builder.gep(po, [off]), vf8.as_pointer())
                            builder.call(mstore, [row, op, ir.Constant(i32, 4), mask])


COLS_WIDTH = {1: 16, 2: 48}  # channels per panel (cv * lanes): pack_weights(W, COLS_WIDTH[kind])
COLS_LANES = {1: 8, 2: 16}  # the output channels must be a multiple of this
COLS_KC = 512  # K per chunk of the cols tiles (a chunk of the 48-channel panel: 96 KiB, in L2)
COLS_MP = {1: 6, 2: 7}  # pixels per cols tile
COLS_CV = {1: 2, 2: 3}  # channel vectors per cols tile


def _cols_driver(kind: int, tile, tile_z, mp: int | None = None, narrow=None, cv: int | None = None, suffix: str = "",
                 whole=None):
    """conv_cols' loops for one variant, its two tiles fixed (see _rows_driver); ``mp`` pixels a
    tile (COLS_MP[kind] unless given: conv_cols8's 8). ``narrow``: (one, one_z, two, two_z), tiles of
    one and two channel vectors on the same panels, for a last panel of that many vectors (160
    channels = 3 x 48 + 16: the full tile computed 32 channels for nothing). ``cv``: channel vectors
    a tile (COLS_CV[kind] unless given: panels of cv * lanes channels, cols_shape_driver's). ``suffix``:
    added to the driver's cache name (tiles of another code: cols_driver_ahead's ``_a{ahead}``). ``whole``:
    (tile, tile_z) of the full width built with ``full`` (the pixels at constant offsets), for every tile
    of ``mp`` valid pixels (COLS_WHOLE)."""
    lanes = COLS_LANES[kind]
    width = COLS_WIDTH[kind] if cv is None else cv * lanes
    mp = COLS_MP[kind] if mp is None else mp
    driver = "cols" if mp == COLS_MP[kind] else f"cols{mp}"
    if cv is not None and cv != COLS_CV[kind]:
        driver = f"cols{cv}x{mp}"
    driver += suffix
    one, one_z, two, two_z = (tile, tile_z, tile, tile_z) if narrow is None else narrow
    whole_on = whole is not None
    cvn = width // lanes  # (panels of 2 vectors: a full one takes the whole tiles, not the 2-vector narrow one)
    all_, all_z = (tile, tile_z) if whole is None else whole

    def panels(wp, k_n, m_n, x, ldx, n_pix, bias, z, has_z, lo, hi, out, ldo, kc, acc, s_lo, s_hi):
        tiles = (n_pix + mp - 1) // mp
        for q in range(s_lo, s_hi):
            r0 = q * width
            m_valid = min(width, m_n - r0)
            cvs = (m_valid + lanes - 1) // lanes
            for k0 in range(0, k_n, kc):
                kk = min(kc, k_n - k0)
                first = np.int64(1 if k0 == 0 else 0)
                final = np.int64(1 if k0 + kk >= k_n else 0)
                w_off = q * k_n * width + k0 * width
                for t in range(tiles):
                    p0 = t * mp
                    xo, ao, oo, nv = k0 * ldx + p0, t * mp * width, r0 * ldo + p0, min(mp, n_pix - p0)
                    if cvs == 1:
                        if has_z:
                            one_z(wp, w_off, x, xo, ldx, kk, first, final, acc, ao, bias, r0, z, oo, ldo, lo, hi, out,
                                  m_valid, nv)
                        else:
                            one(wp, w_off, x, xo, ldx, kk, first, final, acc, ao, bias, r0, z, oo, ldo, lo, hi, out,
                                m_valid, nv)
                    elif cvs == 2 and cvn != 2:
                        if has_z:
                            two_z(wp, w_off, x, xo, ldx, kk, first, final, acc, ao, bias, r0, z, oo, ldo, lo, hi, out,
                                  m_valid, nv)
                        else:
                            two(wp, w_off, x, xo, ldx, kk, first, final, acc, ao, bias, r0, z, oo, ldo, lo, hi, out,
                                m_valid, nv)
                    elif whole_on and nv == mp:
                        if has_z:
                            all_z(wp, w_off, x, xo, ldx, kk, first, final, acc, ao, bias, r0, z, oo, ldo, lo, hi,
                                  out, m_valid, nv)
                        else:
                            all_(wp, w_off, x, xo, ldx, kk, first, final, acc, ao, bias, r0, z, oo, ldo, lo, hi, out,
                                 m_valid, nv)
                    elif has_z:
                        tile_z(wp, w_off, x, xo, ldx, kk, first, final, acc, ao, bias, r0, z, oo, ldo, lo, hi, out,
                               m_valid, nv)
                    else:
                        tile(wp, w_off, x, xo, ldx, kk, first, final, acc, ao, bias, r0, z, oo, ldo, lo, hi, out,
                             m_valid, nv)

    return _variant_jit(panels, driver, kind)


def _narrow(name: str, cv: int, mp: int):
    """_cols_driver's ``narrow`` tiles for panels of ``cv`` vectors (cv - 1 and cv - 2 vectors wide)."""
    lanes = 8 if name == "avx2" else 16
    widths = [min(n, cv) for n in (1, 2)]
    return tuple(_cols_intrinsic(name, n, mp, z, cv * lanes) for n in widths for z in (False, True))


@_built_once
def cols_driver(kind: int):
    """The compiled loops of conv_cols for variant ``kind`` (1 or 2), built on first use."""
    name, cv, mp = _NAME[kind], COLS_CV[kind], COLS_MP[kind]
    return _cols_driver(kind, *(_cols_intrinsic(name, cv, mp, z) for z in (False, True)), narrow=_narrow(name, cv, mp))


# Issue 11, session 15 (rate15): a one-thread session's bound 1x1 calls on the cols tiles (conv_serial) run
# every tile of COLS_MP valid pixels (all of a 14x14 or 7x7 map's) on a tile whose pixels sit at constant
# offsets from one pointer (_cols_intrinsic's ``full``; cols_driver_ahead's ``whole``). The general tile
# picks each pixel's offset at run time (pixels past the map's end read the last one): seven pointers a
# step, fourteen in the loop LLVM unrolls by two, five of them reloaded from the stack every two steps,
# on the load ports that the broadcasts and the weight loads fill (inspect_asm). Xeon alone: -1 to +5 %; in
# ResNet-50 level (docs/numba.md, "The 1x1 tiles' own rate at one thread"). False: the general tile
COLS_WHOLE_ONE_THREAD = True


@_built_once
def cols_driver_ahead(kind: int, ahead: int, whole: bool = False):
    """cols_driver(kind) whose tiles (the narrow ones too) also prefetch into L1, at step k, their weights'
    row k + ``ahead`` (_cols_intrinsic's ``ahead``: the panel's next rows, past a chunk's end the next
    chunk's, past a panel's end the next panel's; 0: no prefetch), and with ``whole``, whose tiles of all
    their pixels valid have them at constant offsets (COLS_WHOLE_ONE_THREAD); neither: cols_driver(kind)
    itself. A one-thread session's bound 1x1 calls take it (conv.COLS_AHEAD_ONE_THREAD): in the model their
    weights come from L3 or memory."""
    if not ahead and not whole:
        return cols_driver(kind)
    name, cv, mp = _NAME[kind], COLS_CV[kind], COLS_MP[kind]
    width = cv * COLS_LANES[kind]
    narrow = tuple(_cols_intrinsic(name, min(n, cv), mp, z, width, ahead=ahead) for n in (1, 2) for z in (False, True))
    tiles = tuple(_cols_intrinsic(name, cv, mp, z, ahead=ahead, full=True) for z in (False, True)) if whole else None
    return _cols_driver(kind, *(_cols_intrinsic(name, cv, mp, z, ahead=ahead) for z in (False, True)), narrow=narrow,
                        suffix=(f"_a{ahead}" if ahead else "") + ("_w" if whole else ""), whole=tiles)


# 8 pixels a tile (24 accumulators, 3 weight vectors: 27 of the 32 zmm): Winograd's F(2x2, 3x3) on a
# 7x7 map has 16 tiles, two of these where the 7-pixel tile runs three (21 columns for 16)
COLS8_KIND = 2  # the kind that has the 8-pixel cols tile


@functools.cache
def cols8_driver():
    """The compiled loops of conv_cols8 (avx512), built on first use."""
    return _cols_driver(COLS8_KIND, *(_cols_intrinsic("avx512", 3, 8, z) for z in (False, True)), mp=8,
                        narrow=_narrow("avx512", 3, 8))


@_built_once
def cols8_driver_ahead(ahead: int):
    """cols8_driver() whose tiles (the narrow ones too) also prefetch into L1, at step k, their weights' row
    k + ``ahead`` (as cols_driver_ahead's); 0: cols8_driver() itself. Winograd's batched products take it
    (batched_gemms' ``ahead``)."""
    if not ahead:
        return cols8_driver()
    narrow = tuple(_cols_intrinsic("avx512", n, 8, z, 48, ahead=ahead) for n in (1, 2) for z in (False, True))
    return _cols_driver(COLS8_KIND, *(_cols_intrinsic("avx512", 3, 8, z, ahead=ahead) for z in (False, True)), mp=8,
                        narrow=narrow, suffix=f"_a{ahead}")


COLS_SHAPES = ((3, 7), (3, 8), (4, 6), (2, 14))  # (channel vectors, pixels) of cols_shape_driver's avx512 tiles


@_built_once
def cols_shape_driver(cv: int, mp: int, ahead: int = 0, whole: bool = False):
    """conv_cols' loops on avx512 tiles of ``cv`` channel vectors x ``mp`` pixels (COLS_SHAPES), over
    panels of cv * 16 channels packed as pack_weights(W, cv * 16); the scratch holds
    cols_shape_scratch(cv, mp, n_pix) floats. 3 x 7 is cols_driver_ahead(2, ahead, whole) and 3 x 8 without
    ``ahead`` or ``whole`` cols8_driver(); 4 x 6 (24 accumulators: 4 weight vectors and 6 broadcasts per 24 FMAs,
    against 3 and 7 per 21) and 2 x 14 (28: 2 and 14 per 28; issue 11, session 17) have no narrow tiles, so their
    products take channels in multiples of 64 and 32 (conv.cols_shape_one_thread). ``ahead``, ``whole``: as
    cols_driver_ahead's (the weights' prefetch, the tiles of all their pixels valid at constant offsets)."""
    if (cv, mp) == (COLS_CV[COLS8_KIND], COLS_MP[COLS8_KIND]):
        return cols_driver_ahead(COLS8_KIND, ahead, whole)
    if (cv, mp) == (COLS_CV[COLS8_KIND], 8) and not ahead and not whole:
        return cols8_driver()
    tiles = (_cols_intrinsic("avx512", cv, mp, z, ahead=ahead) for z in (False, True))
    full = tuple(_cols_intrinsic("avx512", cv, mp, z, ahead=ahead, full=True) for z in (False, True)) if whole else None
    narrow = _narrow("avx512", cv, mp) if cv == 3 and not ahead else None
    if cv == 3 and ahead:
        narrow = tuple(_cols_intrinsic("avx512", n, mp, z, 48, ahead=ahead) for n in (1, 2) for z in (False, True))
    return _cols_driver(COLS8_KIND, *tiles, mp=mp, cv=cv, narrow=narrow, whole=full,
                        suffix=(f"_a{ahead}" if ahead else "") + ("_w" if whole else ""))


def cols_shape_scratch(cv: int, mp: int, n_pix: int) -> int:
    """Floats of cols_shape_driver(cv, mp)'s scratch for ``n_pix`` pixels: every tile's partial sums."""
    return -(-n_pix // mp) * mp * cv * 16


def cols_mode(kind: int, n_pix: int) -> int:
    """1: conv_cols's tile (7 pixels on avx512, 6 on avx2), 2: conv_cols8 (8 pixels, avx512), whichever
    runs fewer pixel slots for ``n_pix`` columns (8 on 16 columns: 16 slots against 21)."""
    if kind != COLS8_KIND:
        return 1
    return 2 if -(-n_pix // 8) * 8 < -(-n_pix // 7) * 7 else 1


def conv_cols(kind, wp, k_n, m_n, x, ldx, n_pix, bias, z, has_z, lo, hi, out, ldo, kc, acc, s_lo, s_hi):
    """Weight panels [s_lo, s_hi) (COLS_WIDTH[kind] channels each; m_n a multiple of the lanes) of a
    convolution with few pixels on the cols tiles (kind 1 or 2): per panel, K in chunks of ``kc``,
    each chunk over every tile of COLS_MP pixels, the partial sums in a scratch (pixel, channel)
    block (``acc``: a scratch of at least scratch_size(kind, True, n_pix) floats); the last chunk
    applies the epilogue and writes the NCHW rows of ``out`` (row stride ldo, pixels from 0; ``x``
    rows of ldx, ``z`` shaped like out). Only variant ``kind``'s driver is compiled (cols_driver)."""
    cols_driver(kind)(wp, k_n, m_n, x, ldx, n_pix, bias, z, has_z, lo, hi, out, ldo, kc, acc, s_lo, s_hi)


def conv_cols8(wp, k_n, m_n, x, ldx, n_pix, bias, z, has_z, lo, hi, out, ldo, kc, acc, s_lo, s_hi):
    """conv_cols on the avx512 tile of 8 pixels (``cols_mode`` 2; ``acc`` at least
    scratch_size(2, 2, n_pix) floats)."""
    cols8_driver()(wp, k_n, m_n, x, ldx, n_pix, bias, z, has_z, lo, hi, out, ldo, kc, acc, s_lo, s_hi)


# ------------------------------------------------------------------------ Winograd's batched GEMMs
def pack_batched(u: np.ndarray, width: int) -> np.ndarray:
    """(P, M, C) weights (Winograd's transformed U, one (M, C) matrix per position) packed per
    position into panels of ``width`` rows: (P, panels * width * C), starting on PACK_ALIGN bytes. Each position
    is packed into its row of the result in turn, in place (no packed temporary: config.HUGE_SLAB's slabs would keep
    one a position)."""
    p_n, m_n, c_n = u.shape
    size = -(-m_n // width) * width * c_n
    out = config.aligned_empty(p_n * size, np.float32, PACK_ALIGN).reshape(p_n, size)
    for i in range(p_n):
        pack_weights(np.ascontiguousarray(u[i], np.float32), width, out[i])
    return out


def _batched_driver(kind: int, cols: int, ahead: int = 0):
    """batched_gemms' loops for variant ``kind`` on the cols tiles (``cols`` 1, or 2: the 8-pixel
    ones) or the rows tiles (0): one
    closure each, so that a process compiles only the driver it calls. ``no`` (False), ``zero`` (0)
    and ``kc`` come as arguments: a constant passed to a jitted function is typed as a literal, and
    the tiles' driver would be compiled again for it (conv.py passes them from Python: bool, int64).
    ``ahead`` (cols tiles only; 0: none): the tiles prefetch their weights' row k + ahead into L1 at step
    k (cols_driver_ahead, cols8_driver_ahead): a position's panel comes from L3 or memory at its first
    tile (Winograd's transformed weights, 2.4-9.4 MB a layer)."""
    width = COLS_WIDTH[kind] if cols else MR[kind]
    ahead = int(ahead) if cols else 0
    if cols == 2:
        tiles = cols8_driver_ahead(ahead)
    elif cols:
        tiles = cols_driver_ahead(kind, ahead)
    else:
        tiles = rows_driver(kind)

    def gemms_cols(wp, m_n, c_n, v, nt, mo, zeros, groups, no, zero, kc, scratch, s_lo, s_hi):
        panels = (m_n + width - 1) // width
        inf = np.float32(np.inf)
        n_g, n_p = (groups, 1) if groups > 0 else (-groups, wp.shape[0])
        for s in range(s_lo, s_hi):
            if groups > 0:  # position-major: s = position * groups + group
                i = s // n_g
                g = s - i * n_g
            else:  # group-major: s = group * positions + position
                g = s // n_p
                i = s - g * n_p
            q0, q1 = g * panels // n_g, (g + 1) * panels // n_g
            tiles(wp[i], c_n, m_n, v[i, :c_n * nt], nt, nt, zeros, zeros, no, -inf, inf, mo[i, :m_n * nt], nt,
                  kc, scratch, q0, q1)

    def gemms_rows(wp, m_n, c_n, v, nt, mo, zeros, groups, no, zero, kc, scratch, s_lo, s_hi):
        panels = (m_n + width - 1) // width
        inf = np.float32(np.inf)
        n_g, n_p = (groups, 1) if groups > 0 else (-groups, wp.shape[0])
        for s in range(s_lo, s_hi):
            if groups > 0:
                i = s // n_g
                g = s - i * n_g
            else:
                g = s // n_p
                i = s - g * n_p
            q0, q1 = g * panels // n_g, (g + 1) * panels // n_g
            # one pixel block (all nt columns) and one panel a "group": conv_tiles' shards [q0, q1)
            tiles(wp[i], c_n, m_n, v[i, :c_n * nt], zero, nt, nt, zeros, zeros, zeros, no, -inf, inf,
                  mo[i, :m_n * nt], zero, nt, nt, panels, kc, no, scratch, q0, q1)

    name = {0: "batched_rows", 1: "batched_cols", 2: "batched_cols8"}[cols] + (f"_a{ahead}" if ahead else "")
    return _variant_jit(gemms_cols if cols else gemms_rows, name, kind)


_batched_built = _built_once(_batched_driver)


@functools.wraps(_batched_driver)
def _batched(kind: int, cols: int, ahead: int = 0):
    """_batched_driver(kind, cols, ahead) made once per (kind, cols, ahead), ``ahead`` 0 on the rows tiles (one key
    a driver however it is asked for)."""
    return _batched_built(kind, int(cols), int(ahead) if cols else 0)


def batched_gemms(kind, cols, wp, m_n, c_n, v, nt, mo, zeros, groups, scratch, s_lo, s_hi, ahead=0):
    """Shards [s_lo, s_hi) of P products ``mo[i, :m_n * nt] = U[i] @ v[i, :c_n * nt]`` (row-major
    (M, nt) and (C, nt) blocks at the start of each row of ``v`` and ``mo``; ``wp`` pack_batched's
    panels): shard s is position s // groups, weight-panel group s % groups (``groups`` < 0: group
    s // P, position s % P of -groups groups: a run of P shards is one group's every position), on the cols tiles
    (``cols`` 1, or 2 for conv_cols8's tiles: width COLS_WIDTH, K chunks of COLS_KC) or the rows
    tiles (``cols`` 0: width MR, K in equal chunks of at most KC) without an epilogue; ``scratch`` at
    least scratch_size(kind, cols, nt) floats. Only the driver of (kind, cols) is compiled; ``v`` is
    passed read-only, so that its rows reach the tiles' driver with the types conv.py's calls give
    it (one compiled driver serves both). ``ahead``: the cols tiles' weight prefetch (_batched_driver's; the
    same values either way)."""
    if cols:
        kc = COLS_KC
    else:
        chunks = -(-c_n // KC)
        kc = -(-c_n // chunks)
    _batched(kind, cols, ahead)(wp, m_n, c_n, config.readonly(v), nt, mo, zeros, groups, False, 0, kc, scratch, s_lo,
                                s_hi)


def scratch_size(kind: int, cols: int, n_pix: int, block: int = 0, kc: int = 0, pack: bool = False) -> int:
    """Floats of the scratch conv_cols (``cols`` 1), conv_cols8 (2) or conv_tiles (0: rows packed
    into tile order) takes."""
    if cols:
        mp = 8 if cols == 2 else (7 if kind == 2 else 6)
        return -(-n_pix // mp) * mp * COLS_WIDTH[kind]
    return block * kc if pack else 1


# A driver call takes ~20 arguments: Numba's dispatch unboxes each, ~5 us a call, so a shard of
# config.MIN_SHARD_WORK flops (~20 us) spent a fifth of its time there. MobileNetV2's 1x1 layers
# (10-30 MFLOP) run as 2-4 shards of this (issue 11, session 7); ResNet's layers keep 4 a thread.
SHARD_UNIT = 1 << 22


def run_sharded(kernel, total: int, args: tuple, work: float, size: int) -> None:
    """``kernel(*args, scratch, lo, hi)`` over shards of ``range(total)`` as config.parallel_for cuts
    them, ``scratch`` the running thread's kept float32 buffer of ``size`` (config.thread_buffer): a
    steady run allocates nothing. Shards of at least SHARD_UNIT flops."""
    count = config.shard_count(total, work, unit=SHARD_UNIT)
    if count <= 1:
        if total > 0:
            kernel(*args, config.thread_buffer("ftile", size, np.float32), 0, total)
        return

    def shard(i):
        kernel(*args, config.thread_buffer("ftile", size, np.float32), i * total // count, (i + 1) * total // count)

    config.run_shards(shard, count)


def pack_rows(m_n: int, k_n: int, n_pix: int) -> bool:
    """conv.py's choice of conv_tiles' ``pack``: copy the block's rows into tile order where many
    weight panels reuse them (M >= PACK_MIN_M) or the rows are long and deep (the stem's). On the
    Xeon (bench_ftile.py raw) the copy lifted 128 x 576 x 784 from 118-130 to 141 GFLOP/s, 256 x 2304
    x 196 from 111-117 to 125, the stem's 64 x 147 x 12544 from 77-80 to 90, and cost small M
    (16 x 32 x 12544: 73 -> 51); on the AMD box it ran within -7%..+2% at M >= 128."""
    return m_n >= PACK_MIN_M or (k_n >= PACK_MIN_K and n_pix >= PACK_MIN_PIXELS)


PACK_MIN_M, PACK_MIN_K, PACK_MIN_PIXELS = 128, 128, 8192  # pixels: 2048 until session 9, which took the
# 56x56 maps (3136 pixels) of fewer than 128 weight rows out: 64 x 256 x 3136 ran in place at 127 against 124
# GFLOP/s packed on the Xeon (session 5) and 92 against 83 on the AMD box (bench_rows_tiles.py); the stem
# (64 x 147 x 12544) that the rule was for runs as the implicit GEMM now
BLOCK_BYTES = 256 * 1024  # a block's pixel rows of one K chunk (kc x block floats) stay in L2
# The 12-row tiles' own K chunk and block size (issue 11, session 11, r50t11b; 0: KC and BLOCK_BYTES, as
# the 8-row tiles). ROWS12 runs at one thread only by default (ROWS12_ONE_THREAD), so these are per-shape
# choices of the one-thread 1x1 layers: a 12-row panel's chunk at KC is 48 KiB (the Xeon's whole L1), and
# at BLOCK_BYTES a 14x14 map of K = 1024 is 4 blocks of 2 tiles, each passing all the weights (2 MiB at
# 512 rows). Kept off: on the AMD box alone (bench_rows_tiles.py --blocks, warm or --cold) every choice ran
# within 3 % of the default; on the Xeon unmeasured (A/B: kernels.ftile.KC12=512, kernels.ftile.BLOCK_BYTES12=1048576)
KC12 = 0
BLOCK_BYTES12 = 0


def plan(kind: int, m_n: int, k_n: int, n_pix: int, threads: int) -> tuple[int, int, int, int]:
    """(block, blocks, groups, kc) for conv_tiles: pixel blocks of equal whole tiles (nr pixels)
    keeping a K chunk's rows in L2; at several threads at least two shards a thread, the blocks'
    count rounded up to a multiple of the threads, and where a map has too few tiles for that, the
    (blocks, weight-panel groups) split whose shards the threads finish soonest (``_makespan``).
    Before (issue 11, session 6) the blocks were L2-sized with a remainder: 3136 pixels as 1024 x 3
    + 64 and 196 as 64 x 3 + 4 left one of two threads a quarter to a half of the product idle."""
    if not BALANCED_PLAN:
        return _plan_s5(kind, m_n, k_n, n_pix, threads)
    nr = NR[kind]
    twelve = kind == ROWS12
    chunks = -(-k_n // (KC_TILE_MAJOR if ROWS_TILE_MAJOR else (KC12 if twelve and KC12 else KC)))
    kc = -(-k_n // chunks)
    tiles = -(-n_pix // nr)
    per = max(1, (BLOCK_BYTES12 if twelve and BLOCK_BYTES12 else BLOCK_BYTES) // (4 * kc) // nr)  # tiles in L2
    blocks = -(-tiles // per)
    groups = 1
    if threads > 1:
        want = 2 * threads
        if blocks >= want or blocks >= tiles:
            blocks = min(tiles, -(-blocks // threads) * threads)
        else:
            panels = -(-m_n // MR[kind])
            pack = PACK_TILE_COST if pack_rows(m_n, k_n, n_pix) else 0.0  # every group copies its block
            best = None
            for b in range(blocks, min(tiles, want) + 1):
                bt = -(-tiles // b)
                b_real = -(-tiles // bt)
                g = max(1, min(panels, -(-want // b_real)))
                span = _makespan(tiles, bt, panels, g, threads, pack)
                key = (span, b_real * g)
                if best is None or key < best[0]:
                    best = (key, b_real, g)
            blocks, groups = best[1], best[2]
    bt = -(-tiles // blocks)
    blocks = -(-tiles // bt)
    return bt * nr, blocks, groups, kc


BALANCED_PLAN = True  # False: session 5's plan (_plan_s5), for A/B runs (bench_conv_threads.py)


def _plan_s5(kind: int, m_n: int, k_n: int, n_pix: int, threads: int) -> tuple[int, int, int, int]:
    """plan() as session 5 had it: L2-sized blocks with a remainder, cut to 2 shards a thread."""
    mr, nr = MR[kind], NR[kind]
    chunks = -(-k_n // KC)
    kc = -(-k_n // chunks)
    block = max(nr, BLOCK_BYTES // (4 * kc) // nr * nr)
    block = min(block, -(-n_pix // nr) * nr)
    blocks = -(-n_pix // block)
    panels = -(-m_n // mr)
    groups = 1
    if threads > 1:
        want = 2 * threads
        if blocks < want:
            per_block = -(-n_pix // want)
            per = max(nr, -(-per_block // nr) * nr)
            block = min(block, per)
            blocks = -(-n_pix // block)
        if blocks < want:
            groups = max(1, min(panels, -(-want // blocks)))
    return block, blocks, groups, kc


PACK_TILE_COST = 2.0  # copying a tile's rows into tile order, in tile x panel products (nr * kc copies
# at ~0.3 ns against 2 * mr * nr * kc flops at ~100 GFLOP/s)


def _makespan(tiles: int, bt: int, panels: int, groups: int, threads: int, pack: float = 0.0) -> float:
    """When the last of ``threads`` threads, each claiming the next shard as it gets free, finishes
    conv_tiles' shards (blocks of ``bt`` of ``tiles`` tiles times ``groups`` groups of ``panels``
    weight panels), in tile x panel units (``pack`` more a tile where each shard first copies its
    block's rows) plus a shard's hand-out cost."""
    free = [0.0] * threads
    for b in range(-(-tiles // bt)):
        nt = min(bt, tiles - b * bt)
        for g in range(groups):
            cost = nt * ((g + 1) * panels // groups - g * panels // groups + pack) + 0.5
            t = free.index(min(free))
            free[t] += cost
    return max(free)
