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
import os

import numba
import numpy as np
from kernelkit.errors import ConfigError, DeviceError
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

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


def _tile_intrinsic(kind: str, mr: int, nr: int):
    """An intrinsic ``tile(a, a_off, b, b_off, kq, c, c_off, ldc)``: the mr x nr int32 block of
    C at ``c[c_off:]`` (row stride ``ldc``) = packed A panel at ``a[a_off:]`` times packed B panel at
    ``b[b_off:]`` over ``kq`` groups of 4 bytes of K (offsets in elements)."""
    lanes = 8 if kind == "avx2" else 16
    nv = nr // lanes

    def codegen(context, builder, sig, args):
        a, a_off, b, b_off, kq, c, c_off, ldc = args
        i8, i16, i32, i64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
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

        pre = builder.basic_block
        head = builder.append_basic_block("qtile.head")
        body = builder.append_basic_block("qtile.body")
        done = builder.append_basic_block("qtile.done")
        builder.branch(head)
        builder.position_at_end(head)
        q = builder.phi(i64)
        q.add_incoming(ir.Constant(i64, 0), pre)
        accs = []
        for _ in range(mr * nv):
            phi = builder.phi(vi32)
            phi.add_incoming(zero_v, pre)
            accs.append(phi)
        builder.cbranch(builder.icmp_signed("<", q, kq), body, done)

        builder.position_at_end(body)
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
        q.add_incoming(builder.add(q, ir.Constant(i64, 1)), builder.basic_block)
        for phi, value in zip(accs, new):
            phi.add_incoming(value, builder.basic_block)
        builder.branch(head)

        builder.position_at_end(done)
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
    "vnni512": Variant("vnni512", 8, 16, _gemm_vnni512, False),
}
_NEEDS = {"generic": (), "avx2": ("avx2",), "vnni512": ("avx512f", "avx512bw", "avx512vnni")}


def available(name: str) -> bool:
    """Whether this CPU (as Numba compiles for it) has the instructions of variant ``name``."""
    return all(f in host_features() for f in _NEEDS[name])


def requested() -> str:
    """KERNELKIT_INT8_GEMM (default ``auto``), checked: a bad value is a ConfigError, a variant this
    CPU lacks an Int8GemmUnavailableError."""
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in CHOICES:
        raise ConfigError(f"${ENV}={value!r}: expected one of {', '.join(CHOICES)}")
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
