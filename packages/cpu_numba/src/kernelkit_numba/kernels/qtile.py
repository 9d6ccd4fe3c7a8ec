"""u8 x s8 -> s32 GEMM micro-kernels written as LLVM IR, chosen at run time from the CPU's features.

``C[m, n] = sum_k A[m, k] * B[k, n]`` with A uint8 and B int8, exact in int32 (wrapping as an int32
accumulator does). Both operands come packed (qpack.py): A in panels of ``mr`` rows, B in panels of
``nr`` columns, K in groups of 4 bytes:

- A panel ``p``: ``a[((p * kq + q) * mr + r) * 4 + t] = A[p * mr + r, 4 q + t]``
- B panel ``j``: ``b[((j * kq + q) * nr + c) * 4 + t] = B[4 q + t, j * nr + c]``

so that one step ``q`` of the micro-kernel broadcasts 4 bytes of each of its ``mr`` rows of A and
multiplies them into ``nr`` int32 lanes of 4-byte dot products. The variants:

- ``vnni512``: AVX-512 VNNI ``vpdpbusd`` (16 lanes x 4 u8 x s8 products into int32, one instruction):
  exact for every operand.
- ``avx2``: ``vpmaddubsw`` (u8 x s8 pairs summed into int16, **saturating**) then ``vpmaddwd`` by 1
  into int32. Exact only when no pair sum can leave int16: ``255 * (|b0| + |b1|) <= 32767`` for every
  pair of B (7-bit weights, ``reduce_range``, always are); qpack checks the actual weights and the
  products fall back when it does not hold.
- ``generic``: the same layouts as plain Numba loops (int32 arithmetic), for any CPU (tests, forcing).

Numba compiles for the host CPU, so an intrinsic is only emitted where its instructions exist;
``KERNELKIT_INT8_GEMM=off|generic|avx2|vnni512`` forces a choice (``off``: no micro-kernel, the exact
float32-BLAS path of qgemm.py), and forcing one the CPU lacks raises ``Int8GemmUnavailableError``.
"""
from __future__ import annotations

import functools

import numba
import numpy as np
from kernelkit.errors import DeviceError
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .. import _env
from ..config import jit

ENV = "KERNELKIT_INT8_GEMM"
CHOICES = ("auto", "off", "generic", "avx2", "vnni512")
AVX2_PAIR_LIMIT = 32767 // 255  # |b0| + |b1| of one vpmaddubsw pair that cannot saturate with u8 A


class Int8GemmUnavailableError(DeviceError):
    """An int8 GEMM micro-kernel was forced (KERNELKIT_INT8_GEMM) on a CPU without its instructions."""

    code = "KK_INT8_GEMM_UNAVAILABLE"


class Variant:
    """One micro-kernel: its name, panel sizes and the Numba driver ``gemm(a, b, kq, n_panels, c, ldc,
    m_rows)`` that computes C's first ``m_rows`` rows (int32, row stride ``ldc``) from packed A and B."""

    def __init__(self, name: str, mr: int, nr: int, gemm, needs_safe_pairs: bool):
        self.name, self.mr, self.nr, self.gemm = name, mr, nr, gemm
        self.needs_safe_pairs = needs_safe_pairs  # avx2: B must not saturate vpmaddubsw

    def __repr__(self):
        return f"Variant({self.name}, mr={self.mr}, nr={self.nr})"


# ---------------------------------------------------------------------------------------------- IR
def _data(context, builder, arrty, value):
    return cgutils.create_struct_proxy(arrty)(context, builder, value=value).data


def k_loop(builder, count, inits, label: str, resume=None):
    """Open a micro-kernel's loop of ``count`` steps (over K groups): blocks ``label``.head/.body/.done,
    the counter (from 0) and one accumulator phi per initial value of ``inits``; the builder is left
    in the body. ``resume`` = (first, partial): the accumulators start at ``inits`` only when
    ``first`` is nonzero, else at the values ``partial()`` reads in block ``label``.load (a later K
    chunk continuing stored partial sums). Returns (counter, accs, close): ``close(new)`` feeds the
    body's next accumulators back to the phis, loops, and leaves the builder in .done."""
    i64 = ir.IntType(64)
    pre = builder.basic_block
    loadb = builder.append_basic_block(f"{label}.load") if resume is not None else None
    head = builder.append_basic_block(f"{label}.head")
    body = builder.append_basic_block(f"{label}.body")
    done = builder.append_basic_block(f"{label}.done")
    if resume is None:
        builder.branch(head)
    else:
        first, partial = resume
        builder.cbranch(builder.icmp_signed("!=", first, ir.Constant(i64, 0)), head, loadb)
        builder.position_at_end(loadb)
        loaded = partial()
        builder.branch(head)
    builder.position_at_end(head)
    q = builder.phi(i64)
    q.add_incoming(ir.Constant(i64, 0), pre)
    if loadb is not None:
        q.add_incoming(ir.Constant(i64, 0), loadb)
    accs = []
    for i, init in enumerate(inits):
        phi = builder.phi(init.type)
        phi.add_incoming(init, pre)
        if loadb is not None:
            phi.add_incoming(loaded[i], loadb)
        accs.append(phi)
    builder.cbranch(builder.icmp_signed("<", q, count), body, done)
    builder.position_at_end(body)

    def close(new):
        q.add_incoming(builder.add(q, ir.Constant(i64, 1)), builder.basic_block)
        for phi, value in zip(accs, new):
            phi.add_incoming(value, builder.basic_block)
        builder.branch(head)
        builder.position_at_end(done)

    return q, accs, close


def _tile_intrinsic(kind: str, mr: int, nr: int):
    """An intrinsic ``tile(a, a_off, b, b_off, kq, c, c_off, ldc)``: the mr x nr int32 block of
    C at ``c[c_off:]`` (row stride ``ldc``) = packed A panel at ``a[a_off:]`` times packed B panel at
    ``b[b_off:]`` over ``kq`` groups of 4 bytes of K (offsets in elements)."""
    lanes = 8 if kind == "avx2" else 16
    nv = nr // lanes

    def codegen(context, builder, sig, args):
        a, a_off, b, b_off, kq, c, c_off, ldc = args
        i8, i16, i32, i64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
        if not available(kind):  # compiled into gemm_kind on every CPU, selected only where it runs
            trap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.trap")
            builder.call(trap, [])
            return context.get_dummy_value()
        vi32 = ir.VectorType(i32, lanes)
        vi8 = ir.VectorType(i8, 4 * lanes)
        mod = builder.module
        if kind == "avx2":
            vi16 = ir.VectorType(i16, 2 * lanes)
            maddubs = cgutils.get_or_insert_function(mod, ir.FunctionType(vi16, [vi8, vi8]),
                                                     "llvm.x86.avx2.pmadd.ub.sw")
            maddwd = cgutils.get_or_insert_function(mod, ir.FunctionType(vi32, [vi16, vi16]),
                                                    "llvm.x86.avx2.pmadd.wd")
            ones = ir.Constant(vi16, [1] * (2 * lanes))
        else:
            dpbusd = cgutils.get_or_insert_function(mod, ir.FunctionType(vi32, [vi32, vi32, vi32]),
                                                    "llvm.x86.avx512.vpdpbusd.512")
        pa = builder.bitcast(_data(context, builder, sig.args[0], a), i8.as_pointer())
        pb = builder.bitcast(_data(context, builder, sig.args[2], b), i8.as_pointer())
        pc = builder.bitcast(_data(context, builder, sig.args[5], c), i32.as_pointer())
        pa = builder.gep(pa, [a_off])
        pb = builder.gep(pb, [b_off])
        pc = builder.gep(pc, [c_off])
        zero_v = ir.Constant(vi32, None)
        splat = ir.Constant(ir.VectorType(i32, lanes), [0] * lanes)

        q, accs, close = k_loop(builder, kq, [zero_v] * (mr * nv), "qtile")
        arow = builder.gep(pa, [builder.mul(q, ir.Constant(i64, 4 * mr))])
        brow = builder.gep(pb, [builder.mul(q, ir.Constant(i64, 4 * nr))])
        bvec = []
        for j in range(nv):
            ptr = builder.bitcast(builder.gep(brow, [ir.Constant(i64, 4 * lanes * j)]), vi8.as_pointer())
            bvec.append(builder.load(ptr, align=1))
        new = []
        for r in range(mr):
            ptr = builder.bitcast(builder.gep(arow, [ir.Constant(i64, 4 * r)]), i32.as_pointer())
            word = builder.load(ptr, align=1)
            one = builder.insert_element(ir.Constant(vi32, ir.Undefined), word, ir.Constant(i32, 0))
            bcast = builder.shuffle_vector(one, ir.Constant(vi32, ir.Undefined), splat)
            for j in range(nv):
                acc = accs[r * nv + j]
                if kind == "avx2":
                    pairs = builder.call(maddubs, [builder.bitcast(bcast, vi8), bvec[j]])
                    new.append(builder.add(acc, builder.call(maddwd, [pairs, ones])))
                else:
                    new.append(builder.call(dpbusd, [acc, bcast, builder.bitcast(bvec[j], vi32)]))
        close(new)
        for r in range(mr):
            row = builder.gep(pc, [builder.mul(ldc, ir.Constant(i64, r))])
            for j in range(nv):
                ptr = builder.bitcast(builder.gep(row, [ir.Constant(i64, lanes * j)]), vi32.as_pointer())
                builder.store(accs[r * nv + j], ptr, align=4)
        return context.get_dummy_value()

    @intrinsic
    def tile(typingctx, a, a_off, b, b_off, kq, c, c_off, ldc):
        return types.void(a, types.int64, b, types.int64, types.int64, c, types.int64, types.int64), codegen

    return tile


_tile_avx2_4 = _tile_intrinsic("avx2", 4, 16)
_tile_avx2_1 = _tile_intrinsic("avx2", 1, 16)
_tile_vnni_8 = _tile_intrinsic("vnni512", 8, 16)
_tile_vnni_1 = _tile_intrinsic("vnni512", 1, 16)


def _wide_intrinsic(mr: int, npan: int):
    """A vnni512 A-panel tile over ``npan`` B panels at once: ``tile(a, a_off, a_rs, a_qs, b, b_off,
    b_ps, kq, c, c_off, ldc)``, the mr x (16 npan) int32 block of C at ``c[c_off:]`` (row stride
    ``ldc``). Row r of A reads 4 bytes at ``a[a_off + r * a_rs + q * a_qs]`` (a panel of mr rows:
    a_rs = 4, a_qs = 4 mr; one-row panels: a_rs = 4 kq, a_qs = 4), panel j of B its 64 bytes at
    ``b[b_off + j * b_ps + 64 q]`` (b_ps = 64 kq: consecutive panels, as qpack.PackedB lays them).
    mr * npan independent accumulators: the 8 x 16 tile's 8 chains leave a core with two 512-bit
    ports at most 8 / latency (5) = 1.6 ``vpdpbusd`` a cycle and cost 9 loads per 8 of them; 8 x 32
    keeps 16 chains for 10 loads, and a single row (batch 1) runs 8 panels side by side instead of
    one chain. The same exact int32 sums as _tile_intrinsic (integer adds in another order)."""
    lanes = 16

    def codegen(context, builder, sig, args):
        a, a_off, a_rs, a_qs, b, b_off, b_ps, kq, c, c_off, ldc = args
        i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
        if not available("vnni512"):
            trap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.trap")
            builder.call(trap, [])
            return context.get_dummy_value()
        vi32 = ir.VectorType(i32, lanes)
        vi8 = ir.VectorType(i8, 4 * lanes)
        dpbusd = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vi32, [vi32, vi32, vi32]),
                                                "llvm.x86.avx512.vpdpbusd.512")
        pa = builder.gep(builder.bitcast(_data(context, builder, sig.args[0], a), i8.as_pointer()), [a_off])
        pb = builder.gep(builder.bitcast(_data(context, builder, sig.args[4], b), i8.as_pointer()), [b_off])
        pc = builder.gep(builder.bitcast(_data(context, builder, sig.args[8], c), i32.as_pointer()), [c_off])
        rows = [builder.gep(pa, [builder.mul(a_rs, ir.Constant(i64, r))]) for r in range(mr)]
        pans = [builder.gep(pb, [builder.mul(b_ps, ir.Constant(i64, j))]) for j in range(npan)]
        zero_v = ir.Constant(vi32, None)
        splat = ir.Constant(vi32, [0] * lanes)

        q, accs, close = k_loop(builder, kq, [zero_v] * (mr * npan), "qwide")
        a_at = builder.mul(q, a_qs)
        b_at = builder.mul(q, ir.Constant(i64, 4 * lanes))
        bvec = [builder.bitcast(builder.load(builder.bitcast(builder.gep(p, [b_at]), vi8.as_pointer()), align=1), vi32)
                for p in pans]
        new = []
        for r in range(mr):
            word = builder.load(builder.bitcast(builder.gep(rows[r], [a_at]), i32.as_pointer()), align=1)
            one = builder.insert_element(ir.Constant(vi32, ir.Undefined), word, ir.Constant(i32, 0))
            bcast = builder.shuffle_vector(one, ir.Constant(vi32, ir.Undefined), splat)
            for j in range(npan):
                new.append(builder.call(dpbusd, [accs[r * npan + j], bcast, bvec[j]]))
        close(new)
        for r in range(mr):
            row = builder.gep(pc, [builder.mul(ldc, ir.Constant(i64, r))])
            for j in range(npan):
                ptr = builder.bitcast(builder.gep(row, [ir.Constant(i64, lanes * j)]), vi32.as_pointer())
                builder.store(accs[r * npan + j], ptr, align=4)
        return context.get_dummy_value()

    @intrinsic
    def tile(typingctx, a, a_off, a_rs, a_qs, b, b_off, b_ps, kq, c, c_off, ldc):
        i64 = types.int64
        return types.void(a, i64, i64, i64, b, i64, i64, i64, c, i64, i64), codegen

    return tile


# (rows, panels) of the wide vnni512 tiles: 8 x 32 for whole A panels, few-row tiles over 4-8 panels
_wide_8_2 = _wide_intrinsic(8, 2)
_wide_8_1 = _wide_intrinsic(8, 1)
_wide_1_8 = _wide_intrinsic(1, 8)
_wide_2_4 = _wide_intrinsic(2, 4)
_wide_3_4 = _wide_intrinsic(3, 4)
_wide_4_4 = _wide_intrinsic(4, 4)
_wide_1_1 = _wide_intrinsic(1, 1)
_wide_2_1 = _wide_intrinsic(2, 1)
_wide_3_1 = _wide_intrinsic(3, 1)
_wide_4_1 = _wide_intrinsic(4, 1)


def _rows_intrinsic(kind: str, mr: int, nvec: int, fused: bool = False, masked: bool = False, cvt: bool = False):
    """An intrinsic ``tile(w, w_off, x, x_off, ldx, kq, flip, c, c_off, ldc)`` for products whose
    second operand is read straight from rows (a convolution's NCHW input or its int8 im2col):
    C[r, p] (r < mr weight rows, p < nr pixels) = sum_k W[r, k] * X[k, p] with W packed int8 panels
    (``w[w_off:]``: [kq][mr][4], broadcast 4 bytes at a time as the instruction's **signed** operand)
    and X the uint8 rows ``x[x_off + k * ldx + p]`` (``flip`` = -128 turns int8 rows into uint8: the
    sign bit flipped in the register), 4 rows of nr bytes interleaved in the register into 4-byte
    groups per pixel. Where the host lacks the instructions the tile is a trap (never selected).

    ``fused``: ``tile(w, w_off, x, x_off, ldx, kq, flip, terms, mult, r0, zp, lo, hi, out, o_off, ldo)``
    requantizes in the registers instead of storing int32 (qgemm.requantize's steps: + terms[r0 + r],
    float32, * mult[r0 + r], round half to even, + zp, clamp to [lo, hi]) and stores the int8/uint8
    bytes at ``out[o_off + r * ldo + p]``; ``masked`` (a last argument ``n_valid``) stores only the
    first n_valid pixels of each row (``llvm.masked.store``: a partial tile at the end of a row).

    ``cvt`` (with ``fused``): the same result in fewer instructions per 16 outputs (7 instead of 9; for
    K = 16-32 the requantize, not the products, was most of a tile): the accumulators start at
    terms[r0 + r] instead of 0, and ``clamp(rint(a) + zp, lo, hi)`` is computed as ``cvtps2dq(clamp(a,
    lo - zp, hi - zp)) + zp`` in int32 (equal: lo - zp and hi - zp are integers, rint is monotone,
    and ``cvtps2dq`` rounds half to even, as ``llvm.rint`` does, in the default rounding mode; the
    clamp first keeps the conversion in range)."""
    lanes = 8 if kind == "avx2" else 16
    nr = lanes * nvec

    def codegen(context, builder, sig, args):
        if fused:
            w, w_off, x, x_off, ldx, kq, flip, terms, mult, r0, zp, lo_f, hi_f, c, c_off, ldc = args[:16]
        else:
            w, w_off, x, x_off, ldx, kq, flip, c, c_off, ldc = args
        i8, i16, i32, i64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
        if not available(kind):
            trap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.trap")
            builder.call(trap, [])
            return context.get_dummy_value()
        vi32 = ir.VectorType(i32, lanes)
        vi8 = ir.VectorType(i8, 4 * lanes)
        vrow = ir.VectorType(i8, lanes)
        mod = builder.module
        if kind == "avx2":
            vi16 = ir.VectorType(i16, 2 * lanes)
            maddubs = cgutils.get_or_insert_function(mod, ir.FunctionType(vi16, [vi8, vi8]),
                                                     "llvm.x86.avx2.pmadd.ub.sw")
            maddwd = cgutils.get_or_insert_function(mod, ir.FunctionType(vi32, [vi16, vi16]),
                                                    "llvm.x86.avx2.pmadd.wd")
            ones = ir.Constant(vi16, [1] * (2 * lanes))
        else:
            dpbusd = cgutils.get_or_insert_function(mod, ir.FunctionType(vi32, [vi32, vi32, vi32]),
                                                    "llvm.x86.avx512.vpdpbusd.512")
        pw = builder.gep(builder.bitcast(_data(context, builder, sig.args[0], w), i8.as_pointer()), [w_off])
        px = builder.gep(builder.bitcast(_data(context, builder, sig.args[2], x), i8.as_pointer()), [x_off])
        if fused:
            pc = builder.gep(builder.bitcast(_data(context, builder, sig.args[13], c), i8.as_pointer()), [c_off])
            pt = builder.gep(builder.bitcast(_data(context, builder, sig.args[7], terms), i32.as_pointer()), [r0])
            f32 = ir.FloatType()
            pm = builder.gep(builder.bitcast(_data(context, builder, sig.args[8], mult), f32.as_pointer()), [r0])
        else:
            pc = builder.gep(builder.bitcast(_data(context, builder, sig.args[7], c), i32.as_pointer()), [c_off])
        flipv = builder.insert_element(ir.Constant(vi8, ir.Undefined), builder.trunc(flip, i8), ir.Constant(i32, 0))
        flipv = builder.shuffle_vector(flipv, ir.Constant(vi8, ir.Undefined),
                                       ir.Constant(ir.VectorType(i32, 4 * lanes), [0] * (4 * lanes)))
        concat = ir.Constant(ir.VectorType(i32, 2 * lanes), list(range(2 * lanes)))
        inter = ir.Constant(ir.VectorType(i32, 4 * lanes), [(t * lanes + p) for p in range(lanes) for t in range(4)])
        splat = ir.Constant(vi32, [0] * lanes)
        zero_v = ir.Constant(vi32, None)
        if cvt:  # the accumulators of row r start at terms[r0 + r]
            starts = []
            for r in range(mr):
                one = builder.insert_element(ir.Constant(vi32, ir.Undefined),
                                             builder.load(builder.gep(pt, [ir.Constant(i64, r)])), ir.Constant(i32, 0))
                starts.append(builder.shuffle_vector(one, ir.Constant(vi32, ir.Undefined), splat))

        q, accs, close = k_loop(builder, kq, [starts[i // nvec] if cvt else zero_v for i in range(mr * nvec)],
                                 "qrows")
        bvec = []
        if PACKED_X:  # interleaved (and flipped) beforehand by pack_x: one load a vector
            xq = builder.gep(px, [builder.mul(q, ir.Constant(i64, 4 * nr))])
            for j in range(nvec):
                ptr = builder.bitcast(builder.gep(xq, [ir.Constant(i64, 4 * lanes * j)]), vi8.as_pointer())
                bvec.append(builder.load(ptr, align=1))
        else:
            xrow = builder.gep(px, [builder.mul(builder.mul(q, ir.Constant(i64, 4)), ldx)])
            for j in range(nvec):
                rows = []
                for t in range(4):
                    at = builder.add(builder.mul(ldx, ir.Constant(i64, t)), ir.Constant(i64, j * lanes))
                    ptr = builder.gep(xrow, [at])
                    rows.append(builder.load(builder.bitcast(ptr, vrow.as_pointer()), align=1))
                lo = builder.shuffle_vector(rows[0], rows[1], concat)
                hi = builder.shuffle_vector(rows[2], rows[3], concat)
                bvec.append(builder.xor(builder.shuffle_vector(lo, hi, inter), flipv))
        wrow = builder.gep(pw, [builder.mul(q, ir.Constant(i64, 4 * mr))])
        new = []
        for r in range(mr):
            ptr = builder.bitcast(builder.gep(wrow, [ir.Constant(i64, 4 * r)]), i32.as_pointer())
            one = builder.insert_element(ir.Constant(vi32, ir.Undefined), builder.load(ptr, align=1),
                                         ir.Constant(i32, 0))
            bcast = builder.shuffle_vector(one, ir.Constant(vi32, ir.Undefined), splat)
            for j in range(nvec):
                acc = accs[r * nvec + j]
                if kind == "avx2":
                    pairs = builder.call(maddubs, [bvec[j], builder.bitcast(bcast, vi8)])
                    new.append(builder.add(acc, builder.call(maddwd, [pairs, ones])))
                else:
                    new.append(builder.call(dpbusd, [acc, builder.bitcast(bvec[j], vi32), bcast]))
        close(new)
        if fused:
            vf = ir.VectorType(f32, lanes)
            rint = cgutils.get_or_insert_function(mod, ir.FunctionType(vf, [vf]), f"llvm.rint.v{lanes}f32")

            def splat_of(value, vty):
                one = builder.insert_element(ir.Constant(vty, ir.Undefined), value, ir.Constant(i32, 0))
                return builder.shuffle_vector(one, ir.Constant(vty, ir.Undefined), splat)

            zv, lov, hiv = (splat_of(v, vf) for v in (zp, lo_f, hi_f))
            if masked:
                vi64 = ir.VectorType(i64, lanes)
                valid = splat_of(args[16], vi64)
                vmask = ir.VectorType(ir.IntType(1), lanes)
                mstore = cgutils.get_or_insert_function(
                    mod, ir.FunctionType(ir.VoidType(), [vrow, vrow.as_pointer(), i32, vmask]),
                    f"llvm.masked.store.v{lanes}i8.p0")
                masks = [builder.icmp_signed("<", ir.Constant(vi64, [lanes * j + t for t in range(lanes)]), valid)
                         for j in range(nvec)]
            if cvt:
                lov, hiv = builder.fsub(lov, zv), builder.fsub(hiv, zv)
                ziv = builder.fptosi(zv, vi32)
                if kind == "avx2":
                    cvt_ty, cvt_name = ir.FunctionType(vi32, [vf]), "llvm.x86.avx.cvt.ps2dq.256"
                else:
                    cvt_ty = ir.FunctionType(vi32, [vf, vi32, ir.IntType(16), i32])
                    cvt_name = "llvm.x86.avx512.mask.cvtps2dq.512"
                cvtps = cgutils.get_or_insert_function(mod, cvt_ty, cvt_name)
            for r in range(mr):
                mv = splat_of(builder.load(builder.gep(pm, [ir.Constant(i64, r)])), vf)
                row = builder.gep(pc, [builder.mul(ldc, ir.Constant(i64, r))])
                if not cvt:
                    tv = splat_of(builder.load(builder.gep(pt, [ir.Constant(i64, r)])), vi32)
                for j in range(nvec):
                    if cvt:
                        f = builder.fmul(builder.sitofp(accs[r * nvec + j], vf), mv)
                        f = builder.select(builder.fcmp_ordered(">", f, lov), f, lov)
                        f = builder.select(builder.fcmp_ordered("<", f, hiv), f, hiv)
                        if kind == "avx2":
                            i = builder.call(cvtps, [f])
                        else:
                            i = builder.call(cvtps, [f, ir.Constant(vi32, None), ir.Constant(ir.IntType(16), -1),
                                                     ir.Constant(i32, 4)])
                        q = builder.trunc(builder.add(i, ziv), vrow)
                    else:
                        f = builder.sitofp(builder.add(accs[r * nvec + j], tv), vf)
                        f = builder.fadd(builder.call(rint, [builder.fmul(f, mv)]), zv)
                        f = builder.select(builder.fcmp_ordered(">", f, lov), f, lov)
                        f = builder.select(builder.fcmp_ordered("<", f, hiv), f, hiv)
                        q = builder.trunc(builder.fptosi(f, vi32), vrow)
                    ptr = builder.bitcast(builder.gep(row, [ir.Constant(i64, lanes * j)]), vrow.as_pointer())
                    if masked:
                        builder.call(mstore, [q, ptr, ir.Constant(i32, 1), masks[j]])
                    else:
                        builder.store(q, ptr, align=1)
            return context.get_dummy_value()
        for r in range(mr):
            row = builder.gep(pc, [builder.mul(ldc, ir.Constant(i64, r))])
            for j in range(nvec):
                ptr = builder.bitcast(builder.gep(row, [ir.Constant(i64, lanes * j)]), vi32.as_pointer())
                builder.store(accs[r * nvec + j], ptr, align=4)
        return context.get_dummy_value()

    if masked:
        @intrinsic
        def tile(typingctx, w, w_off, x, x_off, ldx, kq, flip, terms, mult, r0, zp, lo, hi, out, o_off, ldo, n_valid):
            i64, f32 = types.int64, types.float32
            return types.void(w, i64, x, i64, i64, i64, i64, terms, mult, i64, f32, f32, f32, out, i64, i64,
                              i64), codegen
    elif fused:
        @intrinsic
        def tile(typingctx, w, w_off, x, x_off, ldx, kq, flip, terms, mult, r0, zp, lo, hi, out, o_off, ldo):
            i64, f32 = types.int64, types.float32
            return types.void(w, i64, x, i64, i64, i64, i64, terms, mult, i64, f32, f32, f32, out, i64, i64), codegen
    else:
        @intrinsic
        def tile(typingctx, w, w_off, x, x_off, ldx, kq, flip, c, c_off, ldc):
            i64 = types.int64
            return types.void(w, i64, x, i64, i64, i64, i64, c, i64, i64), codegen

    tile.nr = nr
    return tile


PACKED_X = True  # the rows tiles read pack_x's interleaved tiles (False: the rows themselves)


def _pack_intrinsic(lanes: int, nvec: int):
    """An intrinsic ``pack(x, x_off, ldx, kq, flip, out, o_off)``: one tile of nr = lanes * nvec
    pixels of the rows ``x[x_off + k * ldx + p]`` (k < 4 kq) into ``out[o_off:]`` as [kq][nr][4]
    bytes, 4 rows interleaved per pixel in the register (one ``shufflevector``) and XORed with
    ``flip`` (-128: int8 to uint8): the rows tiles' vector operand, made once per pixel tile instead
    of once per weight panel. Plain shuffles: any CPU."""
    nr = lanes * nvec

    def codegen(context, builder, sig, args):
        x, x_off, ldx, kq, flip, out, o_off = args
        i8, i32, i64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)
        vi8 = ir.VectorType(i8, 4 * lanes)
        vrow = ir.VectorType(i8, lanes)
        px = builder.gep(builder.bitcast(_data(context, builder, sig.args[0], x), i8.as_pointer()), [x_off])
        po = builder.gep(builder.bitcast(_data(context, builder, sig.args[5], out), i8.as_pointer()), [o_off])
        flipv = builder.insert_element(ir.Constant(vi8, ir.Undefined), builder.trunc(flip, i8), ir.Constant(i32, 0))
        flipv = builder.shuffle_vector(flipv, ir.Constant(vi8, ir.Undefined),
                                       ir.Constant(ir.VectorType(i32, 4 * lanes), [0] * (4 * lanes)))
        concat = ir.Constant(ir.VectorType(i32, 2 * lanes), list(range(2 * lanes)))
        inter = ir.Constant(ir.VectorType(i32, 4 * lanes), [(t * lanes + p) for p in range(lanes) for t in range(4)])
        with cgutils.for_range(builder, kq) as loop:
            q = loop.index
            xrow = builder.gep(px, [builder.mul(builder.mul(q, ir.Constant(i64, 4)), ldx)])
            dst = builder.gep(po, [builder.mul(q, ir.Constant(i64, 4 * nr))])
            for j in range(nvec):
                rows = []
                for t in range(4):
                    at = builder.add(builder.mul(ldx, ir.Constant(i64, t)), ir.Constant(i64, j * lanes))
                    rows.append(builder.load(builder.bitcast(builder.gep(xrow, [at]), vrow.as_pointer()), align=1))
                lo = builder.shuffle_vector(rows[0], rows[1], concat)
                hi = builder.shuffle_vector(rows[2], rows[3], concat)
                v = builder.xor(builder.shuffle_vector(lo, hi, inter), flipv)
                ptr = builder.bitcast(builder.gep(dst, [ir.Constant(i64, 4 * lanes * j)]), vi8.as_pointer())
                builder.store(v, ptr, align=1)
        return context.get_dummy_value()

    @intrinsic
    def pack(typingctx, x, x_off, ldx, kq, flip, out, o_off):
        i64 = types.int64
        return types.void(x, i64, i64, i64, i64, out, i64), codegen

    return pack


_pack_16 = _pack_intrinsic(8, 2)  # avx2 and generic tiles: 16 pixels
_pack_32 = _pack_intrinsic(16, 2)  # vnni512 tiles: 32 pixels


@jit
def pack_x(kind, x, x_off, ldx, kq, flip, out, o_off):
    """One pixel tile of rows for the rows tiles of ``kind`` (see _pack_intrinsic); the generic tiles
    pack in plain loops (the same bytes: they also run under NUMBA_DISABLE_JIT, where no intrinsic can)."""
    if kind == 2:
        _pack_32(x, x_off, ldx, kq, flip, out, o_off)
    elif kind == 1:
        _pack_16(x, x_off, ldx, kq, flip, out, o_off)
    else:
        f = np.uint8(flip & 255)
        for q in range(kq):
            for j in range(16):
                for t in range(4):
                    out[o_off + (q * 16 + j) * 4 + t] = np.uint8(x[x_off + (4 * q + t) * ldx + j]) ^ f


_rows_avx2 = _rows_intrinsic("avx2", 4, 2)  # 4 weight rows x 16 pixels
_rows_vnni = _rows_intrinsic("vnni512", 8, 2)  # 8 weight rows x 32 pixels
# the requantized tiles with the cheaper epilogue (``cvt``): interleaved A/B over MobileNetV2's 19 1x1
# shapes, 1 thread, AMD EPYC znver4: 0.98-0.86x the time (16 -> 96 channels at 112x112: 0.86x), 0.955x summed
_rowsq_avx2 = _rows_intrinsic("avx2", 4, 2, fused=True, cvt=True)
_rowsq_vnni = _rows_intrinsic("vnni512", 8, 2, fused=True, cvt=True)
_rowsm_avx2 = _rows_intrinsic("avx2", 4, 2, fused=True, masked=True, cvt=True)
_rowsm_vnni = _rows_intrinsic("vnni512", 8, 2, fused=True, masked=True, cvt=True)
KIND = {"generic": 0, "avx2": 1, "vnni512": 2, "amx": 3}  # amx: qamx.py (A-panel products only)
ROWS_MR = {0: 4, 1: 4, 2: 8}
ROWS_NR = {0: 16, 1: 16, 2: 32}


@jit
def _rows_tile(kind, w, w_off, src, off, stride, kq, flip, c, c_off, ldc):
    """One tile of the rows micro-kernel of ``kind`` (0 generic: plain loops) into int32 ``c``."""
    if kind == 2:
        _rows_vnni(w, w_off, src, off, stride, kq, flip, c, c_off, ldc)
    elif kind == 1:
        _rows_avx2(w, w_off, src, off, stride, kq, flip, c, c_off, ldc)
    else:
        for r in range(4):  # pack_x's tile: byte (k, j) at (k >> 2) * 64 + j * 4 + (k & 3), flipped
            for j in range(16):
                s = np.int32(0)
                for k in range(4 * kq):
                    u = np.int32(np.uint8(src[off + (k >> 2) * 64 + j * 4 + (k & 3)]))
                    s = np.int32(s + u * np.int32(w[w_off + (k >> 2) * 16 + r * 4 + (k & 3)]))
                c[c_off + r * ldc + j] = s


@jit
def _rowsq_tile(kind, w, w_off, src, off, stride, kq, flip, terms, mult, r0, zp, lo, hi, out, o_off, ldo):
    """One tile of the rows micro-kernel requantized in the registers into ``out`` (kind 1 or 2)."""
    if kind == 2:
        _rowsq_vnni(w, w_off, src, off, stride, kq, flip, terms, mult, r0, zp, lo, hi, out, o_off, ldo)
    else:
        _rowsq_avx2(w, w_off, src, off, stride, kq, flip, terms, mult, r0, zp, lo, hi, out, o_off, ldo)


@jit
def _rowsm_tile(kind, w, w_off, src, off, stride, kq, flip, terms, mult, r0, zp, lo, hi, out, o_off, ldo, n_valid):
    """_rowsq_tile storing only the first n_valid pixels of each row (a row's last, partial tile)."""
    if kind == 2:
        _rowsm_vnni(w, w_off, src, off, stride, kq, flip, terms, mult, r0, zp, lo, hi, out, o_off, ldo, n_valid)
    else:
        _rowsm_avx2(w, w_off, src, off, stride, kq, flip, terms, mult, r0, zp, lo, hi, out, o_off, ldo, n_valid)


# ------------------------------------------------------------------------------------------ drivers
# One per variant (an intrinsic cannot be passed to a Numba function). C's rows [0, m_rows): the
# full panels of mr rows, then each remaining row as its own one-row panel (qpack.pack_a lays them
# out so). The B panel stays in L1 while the A panels of the block stream past it.

@jit
def _gemm_avx2(a, b, kq, n_panels, c, ldc, m_rows):
    mr, nr = 4, 16
    full = m_rows // mr
    tail = full * mr * kq * 4
    for j in range(n_panels):
        b_off = j * kq * nr * 4
        for p in range(full):
            _tile_avx2_4(a, p * kq * mr * 4, b, b_off, kq, c, p * mr * ldc + j * nr, ldc)
        for r in range(full * mr, m_rows):
            _tile_avx2_1(a, tail + (r - full * mr) * kq * 4, b, b_off, kq, c, r * ldc + j * nr, ldc)


@jit
def _gemm_vnni512(a, b, kq, n_panels, c, ldc, m_rows):
    mr, nr = 8, 16
    full = m_rows // mr
    tail = full * mr * kq * 4
    for j in range(n_panels):
        b_off = j * kq * nr * 4
        for p in range(full):
            _tile_vnni_8(a, p * kq * mr * 4, b, b_off, kq, c, p * mr * ldc + j * nr, ldc)
        for r in range(full * mr, m_rows):
            _tile_vnni_1(a, tail + (r - full * mr) * kq * 4, b, b_off, kq, c, r * ldc + j * nr, ldc)


@jit
def _few_rows_vnni512(a, a_off, rs, kq, b, n_panels, c, c_row, ldc, rows):
    """``rows`` (1..4) one-row A panels (row stride ``rs`` bytes) against every B panel: 1 row over 8
    panels a tile, 2-4 rows over 4, the panels left one at a time."""
    ps = kq * 64
    j = 0
    if rows == 1:
        while j + 8 <= n_panels:
            _wide_1_8(a, a_off, rs, 4, b, j * ps, ps, kq, c, c_row + j * 16, ldc)
            j += 8
    else:
        while j + 4 <= n_panels:
            if rows == 2:
                _wide_2_4(a, a_off, rs, 4, b, j * ps, ps, kq, c, c_row + j * 16, ldc)
            elif rows == 3:
                _wide_3_4(a, a_off, rs, 4, b, j * ps, ps, kq, c, c_row + j * 16, ldc)
            else:
                _wide_4_4(a, a_off, rs, 4, b, j * ps, ps, kq, c, c_row + j * 16, ldc)
            j += 4
    while j < n_panels:
        if rows == 1:
            _wide_1_1(a, a_off, rs, 4, b, j * ps, ps, kq, c, c_row + j * 16, ldc)
        elif rows == 2:
            _wide_2_1(a, a_off, rs, 4, b, j * ps, ps, kq, c, c_row + j * 16, ldc)
        elif rows == 3:
            _wide_3_1(a, a_off, rs, 4, b, j * ps, ps, kq, c, c_row + j * 16, ldc)
        else:
            _wide_4_1(a, a_off, rs, 4, b, j * ps, ps, kq, c, c_row + j * 16, ldc)
        j += 1


@jit
def _gemm_vnni512_wide(a, b, kq, n_panels, c, ldc, m_rows):
    """_gemm_vnni512 on the wide tiles (_wide_intrinsic): the full panels of 8 rows 8 x 32 (two B
    panels; an odd last one 8 x 16), the remaining rows (one-row panels) up to 4 at a time across
    4-8 B panels. Same packed operands, same int32 results."""
    mr = 8
    full = m_rows // mr
    tail = full * mr * kq * 4
    ps = kq * 64
    for j in range(0, n_panels - 1, 2):
        for p in range(full):
            _wide_8_2(a, p * kq * mr * 4, 4, mr * 4, b, j * ps, ps, kq, c, p * mr * ldc + j * 16, ldc)
    if n_panels % 2:
        j = n_panels - 1
        for p in range(full):
            _wide_8_1(a, p * kq * mr * 4, 4, mr * 4, b, j * ps, ps, kq, c, p * mr * ldc + j * 16, ldc)
    r = full * mr
    while r < m_rows:
        rows = min(4, m_rows - r)
        _few_rows_vnni512(a, tail + (r - full * mr) * kq * 4, kq * 4, kq, b, n_panels, c, r * ldc, ldc, rows)
        r += rows


WIDE = True  # vnni512 runs the wide tiles (False: the 8 x 16 / 1 x 16 ones, _gemm_vnni512)
# gemm_kind's vnni512 product, fixed here: a branch on WIDE inside it left the other one typed and
# compiled in every int8 process (~0.2 s on the shared box), though never run
_GEMM_VNNI512 = _gemm_vnni512_wide if WIDE else _gemm_vnni512


@jit
def _gemm_generic(a, b, kq, n_panels, c, ldc, m_rows):
    mr, nr = 4, 16
    full = m_rows // mr
    acc = np.zeros(nr, np.int32)
    for j in range(n_panels):
        b_off = j * kq * nr * 4
        for r in range(m_rows):
            p = r // mr
            if p < full:
                a_off, step, lane = p * kq * mr * 4, mr * 4, (r - p * mr) * 4
            else:
                a_off, step, lane = full * mr * kq * 4 + (r - full * mr) * kq * 4, 4, 0
            acc[:] = 0
            for q in range(kq):
                ar = a_off + q * step + lane
                br = b_off + q * nr * 4
                for t in range(4):
                    u = np.int32(a[ar + t])
                    for cc in range(nr):
                        acc[cc] = np.int32(acc[cc] + u * np.int32(b[br + cc * 4 + t]))
            for cc in range(nr):
                c[r * ldc + j * nr + cc] = acc[cc]


@jit
def gemm_kind(kind, a, b, kq, n_panels, c, ldc, m_rows):
    """The A-panel product of variant ``kind`` (0 generic, 1 avx2, 2 vnni512, 3 amx; see Variant.gemm)."""
    if kind == 2:
        _GEMM_VNNI512(a, b, kq, n_panels, c, ldc, m_rows)
    elif kind == 3:
        qamx.GEMM(a, b, kq, n_panels, c, ldc, m_rows)
    elif kind == 1:
        _gemm_avx2(a, b, kq, n_panels, c, ldc, m_rows)
    else:
        _gemm_generic(a, b, kq, n_panels, c, ldc, m_rows)


# ------------------------------------------------------------------------------------- selection
@functools.cache
def host_features() -> frozenset:
    """The CPU features Numba compiles for: the host's (llvmlite), or NUMBA_CPU_FEATURES when set;
    a NUMBA_CPU_NAME other than the host's (portable caches) gives none, so only ``generic`` runs."""
    import llvmlite.binding as ll

    if numba.config.CPU_FEATURES:
        return frozenset(f[1:] for f in numba.config.CPU_FEATURES.split(",") if f.startswith("+"))
    if numba.config.CPU_NAME and numba.config.CPU_NAME != "host":
        return frozenset()
    return frozenset(k for k, v in ll.get_host_cpu_features().items() if v)


VARIANTS = {
    "generic": Variant("generic", 4, 16, _gemm_generic, False),
    "avx2": Variant("avx2", 4, 16, _gemm_avx2, True),
    "vnni512": Variant("vnni512", 8, 16, _GEMM_VNNI512, False),
}
_NEEDS = {"generic": (), "avx2": ("avx2",), "vnni512": ("avx512f", "avx512bw", "avx512vnni")}


def available(name: str) -> bool:
    """Whether this CPU (as Numba compiles for it) has the instructions of variant ``name``. Under
    NUMBA_DISABLE_JIT=1 only ``generic`` runs (the IR tiles exist only in compiled code)."""
    if name != "generic" and numba.config.DISABLE_JIT:
        return False
    return all(f in host_features() for f in _NEEDS[name])


def requested() -> str:
    """KERNELKIT_INT8_GEMM (default ``auto``), checked: a bad value is a ConfigError, a variant this
    CPU lacks an Int8GemmUnavailableError. Read on every call (~0.2 us: the raw value, the check
    kept per raw value and feature set)."""
    raw = requested_raw()
    hit = _checked.get(raw)
    if hit is not None and hit[0] is host_features():  # (cached: the same set object)
        return hit[1]
    value = _check(raw)
    _checked[raw] = (host_features(), value)
    return value


_checked: dict = {}  # raw environment value -> (the features it was checked against, the choice)
requested_raw = _env.reader(ENV)  # KERNELKIT_INT8_GEMM's raw value (keys of kept plans: qconv, qgemm)


def _check(raw) -> str:
    value = _env.choice(raw, ENV, CHOICES)
    if value in VARIANTS and not available(value):
        missing = [f for f in _NEEDS[value] if f not in host_features()]
        raise Int8GemmUnavailableError(f"${ENV}={value}: this CPU lacks {', '.join(missing)}")
    return value


def select(safe_pairs: bool) -> Variant | None:
    """The micro-kernel for a B whose vpmaddubsw pairs are ``safe_pairs`` (cannot saturate), or None
    for the float32-BLAS path: forced by KERNELKIT_INT8_GEMM, else vnni512, else avx2 when the pairs
    are safe. A forced avx2 on unsafe pairs runs ``generic`` (exact; avx2 would not be)."""
    value = requested()
    if value == "off":
        return None
    if value == "auto":
        if available("vnni512"):
            return VARIANTS["vnni512"]
        return VARIANTS["avx2"] if available("avx2") and safe_pairs else None
    variant = VARIANTS[value]
    return VARIANTS["generic"] if variant.needs_safe_pairs and not safe_pairs else variant


from . import qamx  # noqa: E402  (AMX tiles: built on this module; gemm_kind runs its qamx.GEMM)
