"""u8 x s8 -> s32 GEMM on AMX tiles (``tdpbusd``), for the A-panel products of qtile.gemm_kind on
CPUs with AMX-INT8 (Intel Sapphire/Emerald Rapids and later).

An AMX core holds eight tile registers of up to 16 rows x 64 bytes; ``tdpbusd C, A, B`` adds to the
16 x 16 int32 tile C the products of a 16 x 64 uint8 tile A (16 rows of 64 bytes of K) and a 64 x 16
int8 tile B laid out as 16 rows of 16 columns x 4 consecutive bytes of K, exact in int32 (wrapping
as vpdpbusd's accumulators do): 16384 multiply-adds an instruction where vpdpbusd does 64.

Layouts (no new packing code: qpack's with other sizes):

- **B** is qpack.PackedB's panel layout ``[panel][kq][16 columns][4]`` as it is: one panel's 16
  consecutive groups of 4 bytes of K are exactly one B tile (rows 64 bytes apart). ``packed``
  re-lays the weights once with K padded to a multiple of 64 (kq a multiple of 16, zero groups), so
  every K step is a whole tile; K itself (``pb.k``, the zero-point terms) is unchanged.
- **A** is qpack's one-row panels (``mr = 1``): row-major rows of ``4 kq`` bytes, zero-padded,
  which the packers (pack_rows, pack_words, pack_quantized) write when given mr = 1 and the padded kq.

The driver (``_gemm_amx``) loads one tile configuration (tiles 0-3: C, 4-5: A, 6-7: B, each 16 rows
x 64 bytes), walks C in 32 x 32 blocks (two A tiles x two B tiles, four ``tdpbusd`` per K step of 64
bytes; a last 16-row block, an odd last panel in halves), stores the C tiles into the int32 block,
releases the tiles, and leaves the rows that do not fill a 16-row tile to qtile's VNNI few-row tiles
on the same operands (a batch-1 product runs on VNNI alone: a 1-row tile costs a full ``tdpbusd``).

Use: Linux lets a process execute AMX only after it asked for the tile data state
(``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``; without it the first tile instruction is a
SIGILL): ``permission()`` asks once per process through ctypes. ``upgrade`` replaces the vnni512
product that qtile.select chose by this one where the CPU has amx-tile and amx-int8 (as LLVM reports
the host), the OS granted the state and KERNELKIT_INT8_GEMM is ``auto``. ``KERNELKIT_INT8_AMX``:
``auto`` (default), ``off`` (keep vnni512), ``on`` (AMX or an Int8GemmUnavailableError saying why).
Where the CPU lacks AMX the tiles compile to a trap (never selected), as qtile's do.
"""
from __future__ import annotations

import ctypes
import functools
import logging
import os
import platform

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .. import _env
from ..config import jit
from . import qtile

log = logging.getLogger("kernelkit.numba")

ENV = "KERNELKIT_INT8_AMX"
CHOICES = ("auto", "off", "on")
NEEDS = ("amx-tile", "amx-int8")  # LLVM's names of the host features
KQ_ALIGN = 16  # K groups of 4 bytes per tile row (64 bytes)
ROWS = 16  # rows of a tile
ARCH_GET_XCOMP_PERM, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 0x1022, 0x1023, 18
SYS_ARCH_PRCTL = 158  # x86-64


# ------------------------------------------------------------------------------------------- IR
I8, I32, I64 = ir.IntType(8), ir.IntType(32), ir.IntType(64)


def _fn(module, name, args):
    return cgutils.get_or_insert_function(module, ir.FunctionType(ir.VoidType(), args), name)


def _tile(n: int):
    return ir.Constant(I8, n)


def config_bytes() -> bytes:
    """The 64-byte tile configuration (palette 1): tiles 0-7 of 16 rows x 64 bytes, the rest unused
    (bytes 16 + 2 t: tile t's bytes per row, 48 + t: its rows)."""
    cfg = bytearray(64)
    cfg[0] = 1
    for t in range(8):
        cfg[16 + 2 * t] = 64
        cfg[48 + t] = ROWS
    return bytes(cfg)


def emit_config(builder):
    """ldtilecfg of config_bytes() from a 64-byte stack slot."""
    slot = cgutils.alloca_once(builder, ir.ArrayType(I8, 64))
    vec = ir.VectorType(I8, 64)
    builder.store(ir.Constant(vec, list(config_bytes())), builder.bitcast(slot, vec.as_pointer()), align=1)
    builder.call(_fn(builder.module, "llvm.x86.ldtilecfg", [I8.as_pointer()]), [builder.bitcast(slot, I8.as_pointer())])


def emit_release(builder):
    builder.call(_fn(builder.module, "llvm.x86.tilerelease", []), [])


def emit_block(builder, pa, lda, pb, b_ps, kq, pc, ldc_bytes, rows: int, cols: int):
    """The (16 rows) x (16 cols) int32 block of C at byte pointer ``pc`` (row stride ``ldc_bytes``)
    = A (rows of ``lda`` bytes at ``pa``) times B (``cols`` panels of ``kq`` groups, ``b_ps`` bytes
    apart, at ``pb``) over kq // 16 steps of 64 bytes of K: tiles 0-3 hold C, 4-5 A, 6-7 B."""
    mod = builder.module
    load = _fn(mod, "llvm.x86.tileloadd64", [I8, I8.as_pointer(), I64])
    store = _fn(mod, "llvm.x86.tilestored64", [I8, I8.as_pointer(), I64])
    zero = _fn(mod, "llvm.x86.tilezero", [I8])
    dp = _fn(mod, "llvm.x86.tdpbusd", [I8, I8, I8])
    accs = [(i, j) for i in range(rows) for j in range(cols)]
    for i, j in accs:
        builder.call(zero, [_tile(2 * i + j)])
    a1 = builder.gep(pa, [builder.mul(lda, ir.Constant(I64, ROWS))])
    b1 = builder.gep(pb, [b_ps])
    steps = builder.udiv(kq, ir.Constant(I64, KQ_ALIGN))
    with cgutils.for_range(builder, steps) as loop:
        at_a = builder.mul(loop.index, ir.Constant(I64, 64))
        at_b = builder.mul(loop.index, ir.Constant(I64, 64 * KQ_ALIGN))
        builder.call(load, [_tile(4), builder.gep(pa, [at_a]), lda])
        builder.call(load, [_tile(6), builder.gep(pb, [at_b]), ir.Constant(I64, 64)])
        builder.call(dp, [_tile(0), _tile(4), _tile(6)])
        if cols == 2:
            builder.call(load, [_tile(7), builder.gep(b1, [at_b]), ir.Constant(I64, 64)])
            builder.call(dp, [_tile(1), _tile(4), _tile(7)])
        if rows == 2:
            builder.call(load, [_tile(5), builder.gep(a1, [at_a]), lda])
            builder.call(dp, [_tile(2), _tile(5), _tile(6)])
            if cols == 2:
                builder.call(dp, [_tile(3), _tile(5), _tile(7)])
    for i, j in accs:
        at = builder.add(builder.mul(ldc_bytes, ir.Constant(I64, ROWS * i)), ir.Constant(I64, 64 * j))
        builder.call(store, [_tile(2 * i + j), builder.gep(pc, [at]), ldc_bytes])


def _trap(builder):
    builder.call(_fn(builder.module, "llvm.trap", []), [])


def _data(context, builder, arrty, value):
    return builder.bitcast(cgutils.create_struct_proxy(arrty)(context, builder, value=value).data, I8.as_pointer())


def _block_intrinsic(rows: int, cols: int):
    """``block(a, a_off, lda, b, b_off, b_ps, kq, c, c_off, ldc)``: emit_block on arrays (offsets in
    elements: bytes of a and b, int32 of c; ldc in int32), the tile configuration already loaded."""

    def codegen(context, builder, sig, args):
        a, a_off, lda, b, b_off, b_ps, kq, c, c_off, ldc = args
        if not compiled():
            _trap(builder)
            return context.get_dummy_value()
        pa = builder.gep(_data(context, builder, sig.args[0], a), [a_off])
        pb = builder.gep(_data(context, builder, sig.args[3], b), [b_off])
        pc = builder.gep(_data(context, builder, sig.args[7], c), [builder.mul(c_off, ir.Constant(I64, 4))])
        emit_block(builder, pa, lda, pb, b_ps, kq, pc, builder.mul(ldc, ir.Constant(I64, 4)), rows, cols)
        return context.get_dummy_value()

    @intrinsic
    def block(typingctx, a, a_off, lda, b, b_off, b_ps, kq, c, c_off, ldc):
        i64 = types.int64
        return types.void(a, i64, i64, b, i64, i64, i64, c, i64, i64), codegen

    return block


@intrinsic
def _configure(typingctx):
    def codegen(context, builder, sig, args):
        if compiled():
            emit_config(builder)
        else:
            _trap(builder)
        return context.get_dummy_value()

    return types.void(), codegen


@intrinsic
def _release(typingctx):
    def codegen(context, builder, sig, args):
        if compiled():
            emit_release(builder)
        return context.get_dummy_value()

    return types.void(), codegen


_block_2x2 = _block_intrinsic(2, 2)
_block_2x1 = _block_intrinsic(2, 1)
_block_1x2 = _block_intrinsic(1, 2)
_block_1x1 = _block_intrinsic(1, 1)


# ----------------------------------------------------------------------------------------- driver
LINE = 64  # a tile row is one cache line: rows that straddle two lines cost two loads each


@jit
def _aligned(n, dtype_of):
    """A scratch array of n elements of ``dtype_of``'s dtype starting on a 64-byte line (Numba's own
    arrays start on 32 bytes)."""
    size = dtype_of.itemsize
    buf = np.empty(n + LINE // size, dtype_of.dtype)
    skip = (LINE - buf.ctypes.data % LINE) % LINE // size
    return buf[skip:skip + n]


@jit
def _gemm_amx_ex(a, b, kq, n_panels, c, ldc, m_rows, align_a, c_lines):
    """_gemm_amx with its choices as arguments (benchmarks/qamx_gops.py compares them): ``align_a``
    copies A's tile rows to a 64-byte aligned scratch when A does not start on a line; ``c_lines``
    stores each C block into an aligned scratch and copies it into C when C does not start on a line."""
    lda = kq * 4
    ps = kq * 64
    pairs = m_rows // (2 * ROWS)
    half = m_rows - pairs * 2 * ROWS >= ROWS
    tiled_rows = pairs * 2 * ROWS + (ROWS if half else 0)
    if tiled_rows:
        at = a
        if align_a and a.ctypes.data % LINE:
            at = _aligned(tiled_rows * lda, a)
            at[:] = a[:tiled_rows * lda]
        scratch = c_lines and (c.ctypes.data % LINE != 0)
        cs = _aligned(4 * ROWS * ROWS if scratch else 1, c)
        _configure()
        for j in range(0, n_panels, 2):
            two = j + 1 < n_panels
            for p in range(pairs + (1 if half else 0)):
                r0 = p * 2 * ROWS
                full = p < pairs
                dst, d_off, ld = (cs, 0, 2 * ROWS) if scratch else (c, r0 * ldc + j * 16, ldc)
                if full and two:
                    _block_2x2(at, r0 * lda, lda, b, j * ps, ps, kq, dst, d_off, ld)
                elif full:
                    _block_2x1(at, r0 * lda, lda, b, j * ps, ps, kq, dst, d_off, ld)
                elif two:
                    _block_1x2(at, r0 * lda, lda, b, j * ps, ps, kq, dst, d_off, ld)
                else:
                    _block_1x1(at, r0 * lda, lda, b, j * ps, ps, kq, dst, d_off, ld)
                if scratch:
                    for r in range((2 if full else 1) * ROWS):
                        c[(r0 + r) * ldc + j * 16:(r0 + r) * ldc + j * 16 + (32 if two else 16)] = \
                            cs[r * 2 * ROWS:r * 2 * ROWS + (32 if two else 16)]
        _release()
    r = tiled_rows
    while r < m_rows:
        rows = min(4, m_rows - r)
        qtile._few_rows_vnni512(a, r * lda, lda, kq, b, n_panels, c, r * ldc, ldc, rows)
        r += rows


ALIGN_A, C_LINES = False, False  # both copies cost more than lines straddled (Xeon, docs: session 7)


@jit
def _gemm_amx(a, b, kq, n_panels, c, ldc, m_rows):
    """C's first m_rows rows (int32, row stride ldc) = A (one-row panels: rows of 4 kq bytes) times
    B (panels of 16 columns, kq a multiple of 16): for each pair of B panels, the 32-row blocks of
    A on the tiles (a last 16-row block, an odd last panel alone), then the rows beyond the last
    16-row block on the VNNI few-row tiles."""
    _gemm_amx_ex(a, b, kq, n_panels, c, ldc, m_rows, ALIGN_A, C_LINES)


VARIANT = qtile.Variant("amx", 1, 16, _gemm_amx, False)


# ------------------------------------------------------------------------------------- selection
def compiled() -> bool:
    """Whether Numba compiles for a CPU with AMX-INT8 (the tiles are real code, else a trap), and the
    VNNI tiles the driver leaves the few rows to."""
    feats = qtile.host_features()
    return all(f in feats for f in NEEDS) and qtile.available("vnni512")


@functools.cache
def permission() -> tuple[bool, str]:
    """(granted, why not): ask Linux once per process for the AMX tile data state
    (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)), then check that it is granted."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False, f"AMX permission is requested only on Linux x86-64, not {platform.system()} {platform.machine()}"
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        rc = libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(ARCH_REQ_XCOMP_PERM),
                          ctypes.c_ulong(XFEATURE_XTILEDATA))
        if rc != 0:
            err = ctypes.get_errno()
            return False, f"arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) refused: {os.strerror(err)} (errno {err})"
        mask = ctypes.c_ulong(0)
        rc = libc.syscall(ctypes.c_long(SYS_ARCH_PRCTL), ctypes.c_long(ARCH_GET_XCOMP_PERM), ctypes.byref(mask))
    except (OSError, AttributeError) as exc:
        return False, f"arch_prctl through ctypes failed: {exc}"
    if rc != 0 or not mask.value >> XFEATURE_XTILEDATA & 1:
        return False, f"XTILEDATA not in the permitted features (arch_prctl GET: rc {rc}, mask {mask.value:#x})"
    return True, ""


def unavailable_reason() -> str:
    """'' where the AMX product can run in this process, else why not."""
    missing = [f for f in (*NEEDS, "avx512vnni") if f not in qtile.host_features()]
    if missing:
        return f"this CPU lacks {', '.join(missing)}"
    if numba.config.DISABLE_JIT:
        return "NUMBA_DISABLE_JIT=1: no compiled tiles"
    granted, why = permission()
    return "" if granted else why


def available() -> bool:
    """Whether the AMX product can run in this process (unavailable_reason, kept per feature set)."""
    key = (qtile.host_features(), numba.config.DISABLE_JIT)
    hit = _available.get(key)
    if hit is None:
        hit = _available[key] = not unavailable_reason()
    return hit


_available: dict = {}


_checked: dict = {}
_raw = _env.reader(ENV)


def requested() -> str:
    """KERNELKIT_INT8_AMX (default ``auto``), checked: a bad value is a ConfigError, ``on`` where AMX
    cannot run an Int8GemmUnavailableError with the reason."""
    raw = _raw()
    hit = _checked.get(raw)
    if hit is not None:
        return hit
    value = _env.choice(raw, ENV, CHOICES)
    why = unavailable_reason() if value != "off" else ""
    if value == "on" and why:
        raise qtile.Int8GemmUnavailableError(f"${ENV}=on: {why}")
    if value == "auto" and why and compiled():  # the CPU has AMX but the OS refused: say so once
        log.warning("int8 products stay on AVX-512 VNNI: %s", why)
    _checked[raw] = value
    return value


def selected(variant) -> bool:
    """Whether the AMX product replaces ``variant`` (qtile.select's choice) here."""
    if variant is None or variant.name != "vnni512" or requested() == "off":
        return False
    return available() and qtile.requested() == "auto"


def packed(pb):
    """``pb`` (qpack.PackedB, 16-column panels) with its panels re-laid for K padded to a multiple of
    64 bytes (kq a multiple of 16; zero groups), made once per PackedB; n, k, column sums and zero
    points are pb's."""
    hit = pb.__dict__.get("_amx")
    if hit is None:
        kq = -(-pb.kq // KQ_ALIGN) * KQ_ALIGN
        data = aligned_zeros(pb.n_panels * kq * 64).reshape(pb.n_panels, kq, 64)
        data[:, :pb.kq] = pb.data.reshape(pb.n_panels, pb.kq, 64)
        hit = object.__new__(type(pb))
        hit.__dict__.update({k: v for k, v in pb.__dict__.items() if k != "_amx"})
        hit.data, hit.kq = data.reshape(-1), kq
        pb._amx = hit
    return hit


def aligned_zeros(n: int) -> np.ndarray:
    """n int8 zeros starting on a 64-byte line (tile rows of B never straddle two)."""
    buf = np.zeros(n + LINE, np.int8)
    skip = -buf.ctypes.data % LINE
    return buf[skip:skip + n]


def upgrade(variant, pb):
    """(variant, pb) from qtile.select and qpack.packed_b, or (the AMX variant, packed(pb)) where it
    replaces vnni512 (``selected``)."""
    return (VARIANT, packed(pb)) if selected(variant) else (variant, pb)


# qtile.gemm_kind's kind 3: the AMX driver where Numba compiles for an AMX CPU, else a stand-in never
# run (so that CPUs without AMX do not compile the driver in every int8 process)
GEMM = _gemm_amx if compiled() else qtile._gemm_generic
