"""float32 3x3 windows on NCHW planes as AVX-512 vector tiles in LLVM IR: depthwise convolution
(stride 1 and 2, any pads, any channel multiplier; bias, the fused residual Z and Clip/Relu/Relu6 in
the registers) and MaxPool 3x3 (stride 1 and 2, any pads).

Padding is never copied: every input vector is a masked load (``llvm.masked.load``; a masked-off
lane reads 0 for a convolution, -inf for MaxPool, and touches no memory), the mask saying which
lanes of the tap fall inside the plane.

- **By rows** (``_rows_codegen``, every stride and pad): per chunk of 16 output columns, down a
  band of output rows. An input row's three taps are three loads (stride 1) or, at stride 2, the
  even and odd lanes of two 16-float loads from column ``2 c0 - pw`` and the even lanes of two
  loads one column to the right (``shufflevector``). The input rows an output row shares with the
  next (two at stride 1, one at stride 2) are carried as ``phi`` vectors, so each output row loads
  ``stride`` new rows; MaxPool carries each row's maximum over its taps instead.
- **Two output rows to a vector** (``_pairs_codegen``, stride 2, outputs at most ``PAIRS_MAX_W``
  wide): lanes ``[0, OW)`` row oh, ``[OW, 2 OW)`` row oh + 1, each tap one two-source permute of
  two input rows' loads.

Every loop is inside the intrinsic (weights and bias broadcast once per plane, the carried rows
in registers); the Numba drivers (``_planes_*``) loop over planes ``[q0, q1)`` of the flattened
(N, M), and ``run`` shards them on the pool above ``PARALLEL_US`` of estimated time. Only an
AVX-512 variant exists (masked loads and stores are cheap there; on AVX2 a masked store is
microcoded on AMD): elsewhere conv.py and pool.py keep their Numba loops.
``KERNELKIT_F32_DEPTHWISE=auto|off`` (read per call) turns these kernels off for A/B runs.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .. import _env, config
from ..cache import CLOSURE_KEY
from ..config import jit
from .ftile import available
from .qtile import k_loop

ENV = "KERNELKIT_F32_DEPTHWISE"
LANES = 16
BAND_BYTES = 1 << 14  # a band's input rows (L1: they are read once per 16-column chunk)
PAIRS_MAX_W = 8  # stride-2 outputs at most this wide put two output rows in a vector


_enabled: dict = {}
requested_raw = _env.reader(ENV)  # KERNELKIT_F32_DEPTHWISE's raw value, read on every call


def enabled() -> bool:
    """Whether the AVX-512 window kernels run: ``$KERNELKIT_F32_DEPTHWISE`` (auto/off, read per call)
    and the CPU (checked once per value of the variable)."""
    raw = requested_raw()
    hit = _enabled.get(raw)
    if hit is None:
        value = _env.choice(raw, ENV, ("auto", "off"))
        hit = _enabled[raw] = value == "auto" and available("avx512")
    return hit


def _data(context, builder, arrty, value):
    return cgutils.create_struct_proxy(arrty)(context, builder, value=value).data


class _Vec:
    """The IR helpers of one codegen: 16-lane float32 vectors, masks, masked loads and stores."""

    def __init__(self, builder):
        self.b = builder
        self.i1, self.i32, self.i64, self.f32 = ir.IntType(1), ir.IntType(32), ir.IntType(64), ir.FloatType()
        self.vf = ir.VectorType(self.f32, LANES)
        self.vi = ir.VectorType(self.i32, LANES)
        self.vm = ir.VectorType(self.i1, LANES)
        mod = builder.module
        self.fma = cgutils.get_or_insert_function(mod, ir.FunctionType(self.vf, [self.vf] * 3), "llvm.fma.v16f32")
        self.mload = cgutils.get_or_insert_function(
            mod, ir.FunctionType(self.vf, [self.vf.as_pointer(), self.i32, self.vm, self.vf]),
            "llvm.masked.load.v16f32.p0")
        self.mstore = cgutils.get_or_insert_function(
            mod, ir.FunctionType(ir.VoidType(), [self.vf, self.vf.as_pointer(), self.i32, self.vm]),
            "llvm.masked.store.v16f32.p0")
        self.iota = ir.Constant(self.vi, list(range(LANES)))

    def splat(self, value, vty=None):
        vty = vty or self.vf
        one = self.b.insert_element(ir.Constant(vty, ir.Undefined), value, ir.Constant(self.i32, 0))
        return self.b.shuffle_vector(one, ir.Constant(vty, ir.Undefined), ir.Constant(self.vi, [0] * LANES))

    def i32v(self, value):
        """A splat of an i64 scalar as 16 x i32."""
        return self.splat(self.b.trunc(value, self.i32), self.vi)

    def lanes_in(self, start, limit):
        """Mask of lanes t with 0 <= start + t < limit (i64 scalars; one unsigned compare)."""
        return self.b.icmp_unsigned("<", self.b.add(self.i32v(start), self.iota), self.i32v(limit))

    def load(self, base, off, mask, fill):
        ptr = self.b.bitcast(self.b.gep(base, [off]), self.vf.as_pointer())
        return self.b.call(self.mload, [ptr, ir.Constant(self.i32, 4), mask, fill])

    def store(self, value, base, off, mask):
        ptr = self.b.bitcast(self.b.gep(base, [off]), self.vf.as_pointer())
        self.b.call(self.mstore, [value, ptr, ir.Constant(self.i32, 4), mask])

    def window(self, bias, wv, rows):
        """bias + sum over the 3 x 3 taps ``rows[i][j]`` times ``wv[3 i + j]``: one FMA chain per tap row
        (the first from the bias), added at the end, so the chains overlap (one chain of nine FMAs
        is 9 x 4 cycles of latency a vector)."""
        sums = []
        for i, taps in enumerate(rows):
            acc = bias if i == 0 else self.b.fmul(wv[3 * i], taps[0])
            for j in range(0 if i == 0 else 1, 3):
                acc = self.b.call(self.fma, [wv[3 * i + j], taps[j], acc])
            sums.append(acc)
        return self.b.fadd(self.b.fadd(sums[0], sums[1]), sums[2])

    def clamp(self, v, lov, hiv):
        v = self.b.select(self.b.fcmp_ordered("<", v, lov), lov, v)  # max(v, lo), NaN kept
        return self.b.select(self.b.fcmp_ordered(">", v, hiv), hiv, v)  # min(v, hi)

    def vmax(self, a, v):
        """max(a, v) with NaN in either kept (NumPy's maximum): ``a > v ? a : v`` (one vmaxps, which
        gives v when either is NaN), then a where a is NaN: three instructions."""
        m = self.b.select(self.b.fcmp_ordered(">", a, v), a, v)
        return self.b.select(self.b.fcmp_unordered("uno", a, a), a, m)

    def const(self, value):
        return ir.Constant(self.i64, value)


def _trap_unless_avx512(context, builder):
    """True (after emitting a trap) when this CPU lacks AVX-512: compiled everywhere, selected only
    where it runs (as ftile's tiles)."""
    if available("avx512"):
        return False
    trap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.trap")
    builder.call(trap, [])
    return True


def _rows_codegen(kind: str, stride: int, with_z: bool):
    """The codegen of a 3x3 window of stride 1 or 2 over one plane, by chunks of 16 output columns,
    down the output rows: ``kind`` "conv" (depthwise: bias + taps times weights, zero padding, + z,
    clamp) or "max" (MaxPool: -inf padding, NaN propagated). The input rows an output row shares
    with the next (two at stride 1, one at stride 2) are carried in registers, so each output row
    loads ``stride`` new input rows. Arguments: x, x_off, y, y_off, z, h_n, w_n, r0, r1, ow_n, ph, pw,
    wt, w_off, beta, lo, hi: output rows [r0, r1) of the plane (a band: its input rows stay in L1
    while the chunks pass)."""

    def codegen(context, builder, sig, args):
        x, x_off, y, y_off, z, h_n, w_n, r0, r1, ow_n, ph, pw, wt, w_off, beta, lo, hi = args
        if _trap_unless_avx512(context, builder):
            return context.get_dummy_value()
        v = _Vec(builder)
        f32p = v.f32.as_pointer()
        px = builder.gep(builder.bitcast(_data(context, builder, sig.args[0], x), f32p), [x_off])
        py = builder.gep(builder.bitcast(_data(context, builder, sig.args[2], y), f32p), [y_off])
        pz = builder.gep(builder.bitcast(_data(context, builder, sig.args[4], z), f32p), [y_off])
        conv = kind == "conv"
        fill = ir.Constant(v.vf, None if conv else [float("-inf")] * LANES)
        if conv:
            pw_ = builder.gep(builder.bitcast(_data(context, builder, sig.args[12], wt), f32p), [w_off])
            wv = [v.splat(builder.load(builder.gep(pw_, [v.const(t)]), align=4)) for t in range(9)]
            bv, lov, hiv = v.splat(beta), v.splat(lo), v.splat(hi)
        even = ir.Constant(v.vi, [2 * t for t in range(LANES)])
        odd = ir.Constant(v.vi, [2 * t + 1 for t in range(LANES)])

        def taps(ih, s, col_masks):
            """Row ih's three tap vectors, input columns s + stride * t + j for j = 0, 1, 2 (zero /
            -inf outside the plane)."""
            inside = builder.and_(builder.icmp_signed(">=", ih, v.const(0)), builder.icmp_signed("<", ih, h_n))
            rowv = v.splat(inside, v.vm)
            base = builder.add(builder.mul(ih, w_n), s)
            loads = [v.load(px, builder.add(base, v.const(d)), builder.and_(rowv, m), fill)
                     for d, m in col_masks]
            if stride == 2:
                pairs = ((0, even), (0, odd), (2, even))
                loads = [builder.shuffle_vector(loads[i], loads[i + 1], lanes) for i, lanes in pairs]
            if conv:
                return loads
            return [v.vmax(v.vmax(loads[0], loads[1]), loads[2])]  # MaxPool: the row's maximum is all it carries


        chunks = builder.udiv(builder.add(ow_n, v.const(LANES - 1)), v.const(LANES))
        c, _, close_c = k_loop(builder, chunks, [], "w3c")
        c0 = builder.mul(c, v.const(LANES))
        s = builder.sub(builder.mul(c0, v.const(stride)), pw)  # input column of tap 0, lane 0
        out_mask = v.lanes_in(c0, ow_n)
        offsets = (0, 1, 2) if stride == 1 else (0, LANES, 2, LANES + 2)
        col_masks = [(d, v.lanes_in(builder.add(s, v.const(d)), w_n)) for d in offsets]
        first = builder.sub(builder.mul(r0, v.const(stride)), ph)  # input row of tap row 0 for output row r0
        carried = [t for r in range(3 - stride) for t in taps(builder.add(first, v.const(r)), s, col_masks)]
        q, rows, close_r = k_loop(builder, builder.sub(r1, r0), carried, "w3r")
        oh = builder.add(q, r0)
        top = builder.sub(builder.mul(oh, v.const(stride)), ph)
        per = 3 if conv else 1  # vectors a row carries
        rows = [rows[per * r:per * r + per] for r in range(3 - stride)]
        rows += [taps(builder.add(top, v.const(r)), s, col_masks) for r in range(3 - stride, 3)]
        if conv:
            acc = v.window(bv, wv, rows)
        else:
            acc = v.vmax(v.vmax(rows[0][0], rows[1][0]), rows[2][0])
        at = builder.add(builder.mul(oh, ow_n), c0)
        if conv:
            if with_z:
                acc = builder.fadd(acc, v.load(pz, at, out_mask, ir.Constant(v.vf, None)))
            acc = v.clamp(acc, lov, hiv)
        v.store(acc, py, at, out_mask)
        close_r([t for tvs in rows[stride:] for t in tvs])
        close_c([])
        return context.get_dummy_value()

    return codegen


def _rows_intrinsic(kind: str, stride: int, with_z: bool):
    codegen = _rows_codegen(kind, stride, with_z)

    @intrinsic
    def w3_rows(typingctx, x, x_off, y, y_off, z, h_n, w_n, r0, r1, ow_n, ph, pw, wt, w_off, beta, lo, hi):
        i64, f = types.int64, types.float32
        return types.void(x, i64, y, i64, z, i64, i64, i64, i64, i64, i64, i64, wt, i64, f, f, f), codegen

    return w3_rows


def _pairs_codegen(with_z: bool):
    """The codegen of a 3x3 stride-2 depthwise window over output rows at most 8 wide (MobileNet's
    14x14 -> 7x7 layer), two output rows to a vector: lanes [0, OW) are row oh, lanes [OW, 2 OW)
    row oh + 1 (contiguous in the output). Tap row i of the pair reads input rows 2 oh - ph + i
    (lanes of row oh) and 2 oh - ph + i + 2 (row oh + 1): per input row two loads (columns from
    -pw and from 2 - pw), each tap vector one two-source permute (``vpermi2ps``, indices made once
    from OW) of the two rows' loads. Five input rows a pair, the last carried to the next pair.
    Arguments as the rows tile's."""

    def codegen(context, builder, sig, args):
        x, x_off, y, y_off, z, h_n, w_n, r0, r1, ow_n, ph, pw, wt, w_off, beta, lo, hi = args
        if _trap_unless_avx512(context, builder):
            return context.get_dummy_value()
        v = _Vec(builder)
        f32p = v.f32.as_pointer()
        px = builder.gep(builder.bitcast(_data(context, builder, sig.args[0], x), f32p), [x_off])
        py = builder.gep(builder.bitcast(_data(context, builder, sig.args[2], y), f32p), [y_off])
        pz = builder.gep(builder.bitcast(_data(context, builder, sig.args[4], z), f32p), [y_off])
        pwt = builder.gep(builder.bitcast(_data(context, builder, sig.args[12], wt), f32p), [w_off])
        wv = [v.splat(builder.load(builder.gep(pwt, [v.const(t)]), align=4)) for t in range(9)]
        bv, lov, hiv = v.splat(beta), v.splat(lo), v.splat(hi)
        perm = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v.vf, [v.vf, v.vi, v.vf]),
                                              "llvm.x86.avx512.vpermi2var.ps.512")
        zero = ir.Constant(v.vf, None)
        ow_v = v.i32v(ow_n)
        two_t = ir.Constant(v.vi, [2 * t for t in range(LANES)])
        upper = builder.sub(builder.add(two_t, ir.Constant(v.vi, [LANES] * LANES)), builder.add(ow_v, ow_v))
        idx_e = builder.select(builder.icmp_signed("<", v.iota, ow_v), two_t, upper)
        idx_o = builder.add(idx_e, ir.Constant(v.vi, [1] * LANES))
        s = builder.sub(v.const(0), pw)
        masks = [v.lanes_in(s, w_n), v.lanes_in(builder.add(s, v.const(2)), w_n)]

        def row(ih):
            inside = builder.and_(builder.icmp_signed(">=", ih, v.const(0)), builder.icmp_signed("<", ih, h_n))
            rowv = v.splat(inside, v.vm)
            base = builder.add(builder.mul(ih, w_n), s)
            return [v.load(px, builder.add(base, v.const(2 * k)), builder.and_(rowv, masks[k]), zero) for k in (0, 1)]

        first = builder.sub(builder.mul(r0, v.const(2)), ph)
        pairs = builder.udiv(builder.add(builder.sub(r1, r0), v.const(1)), v.const(2))
        q, carried, close = k_loop(builder, pairs, row(first), "w3p")
        oh = builder.add(r0, builder.mul(q, v.const(2)))
        top = builder.sub(builder.mul(oh, v.const(2)), ph)
        rows = [carried] + [row(builder.add(top, v.const(k))) for k in range(1, 5)]
        taps = [[builder.call(perm, [a[0], idx_e, b[0]]), builder.call(perm, [a[0], idx_o, b[0]]),
                 builder.call(perm, [a[1], idx_e, b[1]])] for a, b in zip(rows[:3], rows[2:])]
        acc = v.window(bv, wv, taps)
        two = builder.icmp_signed("<", builder.add(oh, v.const(1)), r1)
        valid = builder.select(two, builder.add(ow_n, ow_n), ow_n)
        out_mask = builder.icmp_signed("<", v.iota, v.i32v(valid))
        at = builder.mul(oh, ow_n)
        if with_z:
            acc = builder.fadd(acc, v.load(pz, at, out_mask, zero))
        v.store(v.clamp(acc, lov, hiv), py, at, out_mask)
        close(rows[4])
        return context.get_dummy_value()

    return codegen


def _pairs_intrinsic(with_z: bool):
    codegen = _pairs_codegen(with_z)

    @intrinsic
    def w3_pairs(typingctx, x, x_off, y, y_off, z, h_n, w_n, r0, r1, ow_n, ph, pw, wt, w_off, beta, lo, hi):
        i64, f = types.int64, types.float32
        return types.void(x, i64, y, i64, z, i64, i64, i64, i64, i64, i64, i64, wt, i64, f, f, f), codegen

    return w3_pairs


_dw3_r1 = _rows_intrinsic("conv", 1, False)
_dw3_r1z = _rows_intrinsic("conv", 1, True)
_dw3_s2 = _rows_intrinsic("conv", 2, False)
_dw3_s2z = _rows_intrinsic("conv", 2, True)
_max3_s1 = _rows_intrinsic("max", 1, False)
_max3_s2 = _rows_intrinsic("max", 2, False)


def _conv_driver(tile):
    """The plane loop of one depthwise tile: planes [q0, q1) of the flattened (N, M); output m reads
    input channel m // (M / C) (any channel multiplier)."""

    def planes(x, w, bias, y, z, ph, pw, lo, hi, band, q0, q1):
        n_n, c_n, h_n, w_n = x.shape
        m_n, oh_n, ow_n = y.shape[1], y.shape[2], y.shape[3]
        mult = m_n // c_n
        xf, yf, wf, zf = x.reshape(x.size), y.reshape(y.size), w.reshape(w.size), z.reshape(z.size)
        hw, ohw = h_n * w_n, oh_n * ow_n
        n = q0 // m_n  # image, output channel, input channel and its r-th output: counted, not divided
        m = q0 - n * m_n
        c = m // mult
        r = m - c * mult
        for nm in range(q0, q1):
            x_off = (n * c_n + c) * hw
            for r0 in range(0, oh_n, band):
                tile(xf, x_off, yf, nm * ohw, zf, h_n, w_n, r0, min(oh_n, r0 + band), ow_n, ph, pw, wf, 9 * m,
                     bias[m], lo, hi)
            m += 1
            r += 1
            if r == mult:
                r = 0
                c += 1
            if m == m_n:
                m, c, n = 0, 0, n + 1

    return jit(planes)


_planes_r1 = _conv_driver(_dw3_r1)
_planes_r1z = _conv_driver(_dw3_r1z)
_planes_s2 = _conv_driver(_dw3_s2)
_planes_s2z = _conv_driver(_dw3_s2z)
_planes_p2 = _conv_driver(_pairs_intrinsic(False))
_planes_p2z = _conv_driver(_pairs_intrinsic(True))


def _max_driver(tile, name: str):
    """The plane loop of one MaxPool tile: planes [q0, q1) of the flattened (N, C). ``name`` keys its
    disk-cache entry (cache.CLOSURE_KEY): a pickle of the cell (an intrinsic) differs in every process,
    so without it every warm process compiled the driver again (~0.9 s on the shared box) and added
    one more entry to its index."""

    def planes(x, y, ph, pw, band, q0, q1):
        h_n, w_n = x.shape[2], x.shape[3]
        oh_n, ow_n = y.shape[2], y.shape[3]
        xf, yf = x.reshape(x.size), y.reshape(y.size)
        unused = np.empty(1, np.float32)
        zero = np.float32(0)
        for nc in range(q0, q1):
            for r0 in range(0, oh_n, band):
                tile(xf, nc * h_n * w_n, yf, nc * oh_n * ow_n, yf, h_n, w_n, r0, min(oh_n, r0 + band), ow_n, ph, pw,
                     unused, 0, zero, zero, zero)

    setattr(planes, CLOSURE_KEY, f"dwtile.max_planes.{name}")
    return jit(planes)


_max_planes_s1 = _max_driver(_max3_s1, "s1")
_max_planes_s2 = _max_driver(_max3_s2, "s2")


# Cost of one call on one thread (AMD EPYC box, inside MobileNetV2 / ResNet-18, bench_depthwise.py):
# about NS_PER_OUTPUT[(kind, stride)] ns an output plus NS_PER_PLANE a plane. A call estimated above
# PARALLEL_US runs on the shard pool (Conv.work and MaxPool.work report it so that PARALLEL_US is
# config.SERIAL_WORK), in shards of at least SHARD_US: handing a shard out costs a few microseconds.
# On the Xeon (dw_round.sh, docs/numba.md) every batch-1 layer ran slower sharded over 2 threads than
# on one (MobileNetV2's 32@112 to 576@14, ResNet's MaxPool: the pool's worker wakes too late for
# jobs of 0.05-0.3 ms, and the caller's input sits in its own L2), so batch-1 layers stay on one
# thread; larger batches shard.
NS_PER_OUTPUT = {("conv", 1): 0.3, ("conv", 2): 0.6, ("max", 1): 0.4, ("max", 2): 0.8}
NS_PER_PLANE = 15.0
PARALLEL_US = 400.0
SHARD_US = 12.0


def cost_us(kind: str, stride: int, planes: int, outputs: int) -> float:
    """Estimated microseconds of one call at one thread."""
    return (outputs * NS_PER_OUTPUT[(kind, stride)] + planes * NS_PER_PLANE) * 1e-3


def work(kind: str, stride: int, planes: int, outputs: int) -> float:
    """The call's work in the units of ``config.SERIAL_WORK`` (PARALLEL_US of estimated time = SERIAL_WORK)."""
    return cost_us(kind, stride, planes, outputs) * config.SERIAL_WORK / PARALLEL_US


def run(kernel, planes: int, args: tuple, cost: float) -> None:
    """``kernel(*args, q0, q1)`` over the planes: on this thread, or in shards of at least SHARD_US
    (estimated) on the shard pool when this call's thread budget has more than one thread."""
    threads = config.current_threads()
    count = 1 if threads <= 1 else int(min(planes, config.SHARDS_PER_THREAD * threads, cost // SHARD_US))
    if count <= 1:
        kernel(*args, 0, planes)
        return
    config.run_shards(lambda i: kernel(*args, i * planes // count, (i + 1) * planes // count), count)


def band_rows(w_n: int, stride: int) -> int:
    """Output rows per band: the band's input rows (stride * rows + 2 of w_n floats) in BAND_BYTES."""
    return max(1, (BAND_BYTES // (4 * max(1, w_n)) - 2) // stride)


def depthwise_fits(stride: int, kh: int, kw: int, dil: tuple, pads: tuple, dtype) -> bool:
    """Whether a depthwise convolution runs on these tiles: float32, 3x3, undilated, stride 1 or 2
    (any pads)."""
    return dtype == np.float32 and kh == kw == 3 and tuple(dil) == (1, 1) and stride in (1, 2)


def depthwise(x, w, bias, y, z, stride, ph, pw, lo, hi, pairs=None):
    """``(kernel, args)`` for ``run``: x (N, C, H, W), w (M, 1, 3, 3), y (N, M, OH, OW), z shaped like
    y or None, lo/hi the clamp (-inf/inf for none); ``pairs=False`` keeps narrow stride-2 outputs on
    the rows tile."""
    zz = y if z is None else z
    lo, hi = np.float32(lo), np.float32(hi)
    if stride == 1:
        fn = _planes_r1 if z is None else _planes_r1z
    elif y.shape[3] <= PAIRS_MAX_W and pairs is not False:
        fn = _planes_p2 if z is None else _planes_p2z
    else:
        fn = _planes_s2 if z is None else _planes_s2z
    return fn, (x, w, bias, y, zz, ph, pw, lo, hi, band_rows(x.shape[3], stride))


def maxpool_fits(kernel, strides, dilations, dtype) -> bool:
    """Whether a MaxPool (without Indices) runs on these tiles: float32, 3x3, stride 1 or 2 both
    ways, undilated (any pads, ceil_mode: the output size decides which windows run)."""
    return (dtype == np.float32 and tuple(kernel) == (3, 3) and tuple(strides) in ((1, 1), (2, 2))
            and tuple(dilations) == (1, 1))


def maxpool(x, y, stride, ph, pw):
    """``(kernel, args)`` for ``config.parallel_for`` over the (N * C) planes."""
    return (_max_planes_s1 if stride == 1 else _max_planes_s2), (x, y, ph, pw, band_rows(x.shape[3], stride))
