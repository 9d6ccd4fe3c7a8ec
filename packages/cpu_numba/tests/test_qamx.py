"""The AMX int8 tiles (kernels/qamx.py). Everywhere: the selection (on a CPU without AMX the VNNI
product is chosen, KERNELKIT_INT8_AMX's values and typed errors), the IR compiled to object code for
a Sapphire Rapids target, and the driver's walk over the blocks with the tile blocks emulated in
NumPy. On a CPU with AMX-INT8 (the Xeon of the device calls; skipped elsewhere, saying why): the AMX
products bit-exact against an int64 NumPy reference, and DynamicQuantizeMatMul, MatMulInteger and
QLinearMatMul on them equal to the reference kernels."""
from __future__ import annotations

import numpy as np
import pytest
from kernelkit.errors import ConfigError
from kernelkit_numba.kernels import qamx, qgemm, qpack, qtile


def _need_amx():
    why = qamx.unavailable_reason()
    if why:
        pytest.skip(f"AMX cannot run here: {why} (the AMX arm runs on the Xeon device call)")


def _reference(a, a_zp, bt, b_zp):
    """int32 (A - a_zp) @ (B - b_zp) from int64 NumPy, wrapped as an int32 accumulator would."""
    bz = np.broadcast_to(np.asarray(b_zp, np.int64).reshape(-1), (bt.shape[0],))
    v = (a.astype(np.int64) - a_zp) @ (bt.astype(np.int64) - bz[:, None]).T
    return ((v + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


class _Kernel:  # a stand-in for a kernel object: qgemm.tiled keeps the packing on it
    attrs: dict = {}


# ------------------------------------------------------------------------------------- everywhere
def test_selection_on_this_cpu(monkeypatch):
    """auto picks AMX exactly where it can run; elsewhere (this CI's AMD EPYC) the VNNI product stays,
    and so it does with KERNELKIT_INT8_AMX=off or a forced KERNELKIT_INT8_GEMM."""
    monkeypatch.delenv(qamx.ENV, raising=False)
    monkeypatch.delenv(qtile.ENV, raising=False)
    rng = np.random.default_rng(0)
    b = rng.integers(-128, 128, (256, 64)).astype(np.int8)
    b.flags.writeable = False
    tile = qgemm.tiled(_Kernel(), b, None)
    want = "amx" if qamx.available() else ("vnni512" if qtile.available("vnni512") else None)
    assert (tile[0].name if tile else None) == want
    if want == "amx":
        assert tile[1].kq % qamx.KQ_ALIGN == 0 and tile[1].k == 256
    else:
        assert qamx.unavailable_reason()
        if qtile.available("vnni512"):  # the VNNI tile with its own packing
            assert tile[0] is qtile.VARIANTS["vnni512"] and tile[1].kq == 64
    monkeypatch.setenv(qamx.ENV, "off")
    tile = qgemm.tiled(_Kernel(), b, None)
    assert tile is None or tile[0].name != "amx"
    if qtile.available("vnni512"):
        monkeypatch.setenv(qamx.ENV, "auto")
        monkeypatch.setenv(qtile.ENV, "vnni512")
        assert qgemm.tiled(_Kernel(), b, None)[0].name == "vnni512"


def test_env_values(monkeypatch):
    monkeypatch.setenv(qamx.ENV, "bogus")
    with pytest.raises(ConfigError, match=qamx.ENV):
        qamx.requested()
    monkeypatch.setenv(qamx.ENV, "on")
    if qamx.available():
        assert qamx.requested() == "on"
    else:  # forced where it cannot run: typed, with the reason
        with pytest.raises(qtile.Int8GemmUnavailableError, match=qamx.ENV) as info:
            qamx.requested()
        assert info.value.code == "KK_INT8_GEMM_UNAVAILABLE"


def test_no_amx_cpu_keeps_vnni(monkeypatch):
    """A CPU without amx-int8 (as LLVM reports it) never selects AMX, whatever the OS permits."""
    monkeypatch.setattr(qtile, "host_features", lambda: frozenset({"avx512f", "avx512bw", "avx512vnni"}))
    monkeypatch.setattr(qamx, "_checked", {})
    monkeypatch.delenv(qamx.ENV, raising=False)
    assert "amx-tile" in qamx.unavailable_reason()
    assert not qamx.selected(qtile.VARIANTS["vnni512"])
    assert not qamx.compiled()


def test_permission_answers():
    """The arch_prctl request gives an answer, and a reason when it is no."""
    granted, why = qamx.permission()
    assert isinstance(granted, bool) and (granted or why)


def test_ir_compiles_for_sapphire_rapids():
    """Every tile block's IR, compiled to object code for a Sapphire Rapids target (any host):
    ldtilecfg, tileloadd, tdpbusd, tilestored, tilerelease, in the counts each shape needs."""
    import llvmlite.binding as llvm
    from llvmlite import ir

    i8, i64 = ir.IntType(8), ir.IntType(64)
    mod = ir.Module("amx")
    mod.triple = "x86_64-unknown-linux-gnu"
    for rows in (1, 2):
        for cols in (1, 2):
            ptr = i8.as_pointer()
            fnty = ir.FunctionType(ir.VoidType(), [ptr, i64, ptr, i64, i64, ptr, i64])
            fn = ir.Function(mod, fnty, f"block_{rows}x{cols}")
            builder = ir.IRBuilder(fn.append_basic_block())
            qamx.emit_config(builder)
            qamx.emit_block(builder, *fn.args, rows, cols)
            qamx.emit_release(builder)
            builder.ret_void()
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    parsed = llvm.parse_assembly(str(mod))
    parsed.verify()
    tm = llvm.Target.from_triple(mod.triple).create_target_machine(cpu="sapphirerapids", opt=3)
    assert tm.emit_object(parsed)
    asm = tm.emit_assembly(parsed)
    for rows in (1, 2):
        for cols in (1, 2):
            body = asm.split(f"block_{rows}x{cols}:")[1].split(".Lfunc_end")[0]
            assert body.count("ldtilecfg") == 1 and body.count("tilerelease") == 1
            assert body.count("tdpbusd") == rows * cols
            assert body.count("tileloadd") == rows + cols
            assert body.count("tilestored") == rows * cols


def _emulated_block(rows, cols):
    """A tile block (qamx._block_intrinsic) in NumPy: C tiles = A tiles x B tiles over kq // 16 steps."""
    def block(a, a_off, lda, b, b_off, b_ps, kq, c, c_off, ldc):
        for i in range(rows):
            for j in range(cols):
                acc = np.zeros((16, 16), np.int64)
                for s in range(kq // 16):
                    at = a_off + 16 * i * lda + 64 * s
                    ta = np.stack([a[at + r * lda:at + r * lda + 64] for r in range(16)]).astype(np.int64)
                    bt = b_off + j * b_ps + 1024 * s
                    tb = b[bt:bt + 1024].reshape(16, 16, 4).astype(np.int64)  # [k group][column][4]
                    acc += np.einsum("mqt,qnt->mn", ta.reshape(16, 16, 4), tb)
                acc = (acc + (1 << 31)) % (1 << 32) - (1 << 31)
                for r in range(16):
                    o = c_off + (16 * i + r) * ldc + 16 * j
                    c[o:o + 16] = acc[r]
    return block


def _misaligned(n, dtype):
    """n elements of dtype starting 32 bytes past a 64-byte line (as Numba's arrays may)."""
    size = np.dtype(dtype).itemsize
    buf = np.empty(n + 128 // size, dtype)
    skip = ((32 - buf.ctypes.data) % 64) // size
    return buf[skip:skip + n]


@pytest.mark.parametrize("m,k,n", [(1, 70, 33), (15, 64, 16), (16, 64, 16), (17, 100, 48), (32, 256, 32),
                                   (45, 130, 70), (64, 33, 96), (80, 200, 17)])
@pytest.mark.parametrize("align_a,c_lines", [(False, False), (True, True)])
def test_driver_walk_emulated(m, k, n, align_a, c_lines, monkeypatch):
    """qamx's driver (its Python body) with the tile blocks emulated: 32 x 32 blocks, a 16-row block,
    an odd last panel, the rows past the last 16 on the VNNI few-row tiles (real where this CPU has
    VNNI), A copied to an aligned scratch and C blocks through one, on operands packed with K padded
    to 64 bytes = the int64 reference."""
    if not qtile.available("vnni512"):
        pytest.skip("the driver's remainder rows run on the VNNI tiles")
    for rows in (1, 2):
        for cols in (1, 2):
            monkeypatch.setattr(qamx, f"_block_{rows}x{cols}", _emulated_block(rows, cols))
    calls = []
    monkeypatch.setattr(qamx, "_configure", lambda: calls.append("cfg"))
    monkeypatch.setattr(qamx, "_release", lambda: calls.append("rel"))
    rng = np.random.default_rng(m * k + n)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    bt = rng.integers(-128, 128, (n, k)).astype(np.int8)
    pb = qamx.packed(qpack.PackedB(bt, None, 16))
    assert pb.kq % 16 == 0 and pb.k == k and pb.data.ctypes.data % 64 == 0
    abuf = _misaligned(m * pb.kq * 4, np.uint8)
    abuf[:] = 77
    qpack.pack_rows(a, 0, m, False, 1, pb.kq, abuf, np.empty(m, np.int32))
    ldc = pb.n_panels * 16
    c = _misaligned(m * ldc, np.int32)
    c[:] = -1
    qamx._gemm_amx_ex.py_func(abuf, pb.data, pb.kq, pb.n_panels, c, ldc, m, align_a, c_lines)
    np.testing.assert_array_equal(c.reshape(m, ldc)[:, :n], _reference(a, 0, bt, 0))
    assert calls == (["cfg", "rel"] if m >= 16 else [])


@pytest.mark.parametrize("rows", [1, 3, 15])
def test_few_rows_keep_vnni_panels(rows, monkeypatch):
    """A DynamicQuantizeMatMul of fewer rows than one AMX tile (batch 1: the MLP) runs vnni512 on the
    unpadded panels where AMX is selected (simulated here: qamx.upgrade made to choose it): the AMX
    driver would run those rows on the same few-row tiles over B padded to 64-byte K steps. Equal to
    the reference bit for bit through the one-call path and the bound serial call (three runs)."""
    from kernelkit.builder import GraphBuilder
    from kernelkit.session import Session

    if not qtile.available("vnni512"):
        pytest.skip("vnni512 cannot run here")
    monkeypatch.delenv(qtile.ENV, raising=False)
    monkeypatch.setattr(qamx, "upgrade", lambda variant, pb: (qamx.VARIANT, qamx.packed(pb)))
    rng = np.random.default_rng(rows)
    k, n = 784, 40  # K = 196 groups of 4: the AMX packing pads it to 208
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    b.flags.writeable = False
    tile = qgemm.tiled(_Kernel(), b, None)
    assert tile[0] is qamx.VARIANT and tile[1].kq == 208  # without ``rows``: the (simulated) AMX choice
    assert qgemm.tiled(_Kernel(), b, None, rows=rows)[1].kq == 196
    g = GraphBuilder("dqmm")
    x = g.input("x", ("N", k))
    consts = [b, rng.uniform(0.01, 0.02, n).astype(np.float32), rng.integers(-9, 9, n).astype(np.int8),
              rng.standard_normal(n).astype(np.float32)]
    g.output(g.op("DynamicQuantizeMatMul", x, *[g.constant(c, name=f"c{i}") for i, c in enumerate(consts)],
                  domain="com.microsoft"))
    model = g.build()
    sess = Session(model, vendors=["numba"], fallback=False, passes=False, threads=1)
    ref = Session(model, vendors=["reference"], passes=False)
    step = next(s for s in sess.plan.steps if s.op.endswith("DynamicQuantizeMatMul"))
    for scale in (1, 4, 0.2):
        a = (rng.standard_normal((rows, k)) * scale).astype(np.float32)
        np.testing.assert_array_equal(sess.run(None, {"x": a})[0], ref.run(None, {"x": a})[0])
        head = step.kernel._small[6]
        assert head[0] == qtile.KIND["vnni512"] and head[3] == 196


# -------------------------------------------------------------------------------- on an AMX CPU
SHAPES = [(1, 1, 1), (3, 5, 7), (16, 64, 16), (17, 31, 15), (31, 129, 47), (32, 256, 32), (33, 64, 33),
          (64, 256, 64), (128, 256, 256), (130, 77, 100), (300, 600, 40), (128, 1024, 96), (49, 4608, 40)]


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_amx_bit_exact(m, k, n):
    """MatMulInteger's path (qpack.int32_blocks) on the AMX variant = int64 NumPy, A uint8 and int8,
    B int8 and uint8, zero points (per column for odd N)."""
    _need_amx()
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    for a_dtype, b_dtype in ((np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)):
        ai, bi = np.iinfo(a_dtype), np.iinfo(b_dtype)
        a = rng.integers(ai.min, ai.max + 1, (m, k)).astype(a_dtype)
        bt = rng.integers(bi.min, bi.max + 1, (n, k)).astype(b_dtype)
        a_zp = int(rng.integers(ai.min, ai.max + 1))
        b_zp = rng.integers(bi.min, bi.max + 1, n).astype(b_dtype) if n % 2 else np.array(0, b_dtype)
        pb = qamx.packed(qpack.PackedB(bt, b_zp, 16))
        out = np.empty((m, n), np.int32)
        terms = pb.column_terms(a_zp + qpack.flip_of(a.dtype)[1])
        qpack.run_blocks(qpack.int32_blocks, qamx.VARIANT, pb, a, (terms, pb.zp, pb.has_zp, out))
        np.testing.assert_array_equal(out, _reference(a, a_zp, bt, b_zp))


def test_amx_extremes():
    """255 x -128 at every product over a long K (the int32 sums near their limit)."""
    _need_amx()
    a = np.full((40, 4099), 255, np.uint8)
    bt = np.full((18, 4099), -128, np.int8)
    pb = qamx.packed(qpack.PackedB(bt, None, 16))
    out = np.empty((40, 18), np.int32)
    qpack.run_blocks(qpack.int32_blocks, qamx.VARIANT, pb, a, (pb.column_terms(0), pb.zp, pb.has_zp, out))
    np.testing.assert_array_equal(out, _reference(a, 0, bt, 0))


def _both(op, inputs, constants, monkeypatch, domain="", attrs=None):
    from kernelkit.testing import run_single_op

    monkeypatch.setenv(qtile.ENV, "auto")
    monkeypatch.setenv(qamx.ENV, "on")
    kw = dict(attrs=attrs, passes=False, constants=constants, domain=domain)
    (got,) = run_single_op(op, inputs, vendors=["numba"], fallback=False, **kw)
    (want,) = run_single_op(op, inputs, vendors=["reference"], **kw)
    return got, want


@pytest.mark.parametrize("rows", [1, 16, 40, 128, 200])
@pytest.mark.parametrize("k,n", [(70, 33), (256, 256), (256, 1024), (1024, 256)])
def test_amx_dynamic_quantize_matmul(rows, k, n, monkeypatch):
    """DynamicQuantizeMatMul (A quantized straight into the one-row panels) and MatMulInteger on the
    AMX tiles = the reference bit for bit, on the transformer's shapes among others."""
    _need_amx()
    rng = np.random.default_rng(rows + k + n)
    a = rng.standard_normal((rows, k)).astype(np.float32)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    b_zp = rng.integers(-20, 20, n).astype(np.int8)
    inputs = [a, b, rng.uniform(0.01, 0.02, n).astype(np.float32), b_zp, rng.standard_normal(n).astype(np.float32)]
    got, want = _both("DynamicQuantizeMatMul", inputs, (1, 2, 3, 4), monkeypatch, domain="com.microsoft")
    np.testing.assert_array_equal(got, want)
    au = rng.integers(0, 256, (rows, k)).astype(np.uint8)
    got, want = _both("MatMulInteger", [au, b, np.uint8(9), np.int8(0)], (1, 2, 3), monkeypatch)
    np.testing.assert_array_equal(got, want)


def test_amx_qlinear_matmul(monkeypatch):
    _need_amx()
    rng = np.random.default_rng(5)
    a = rng.integers(-128, 128, (50, 96)).astype(np.int8)
    b = rng.integers(-128, 128, (96, 40)).astype(np.int8)
    inputs = [a, np.float32(0.02), np.int8(3), b, np.float32(0.01), np.int8(0), np.float32(0.5), np.int8(-4)]
    got, want = _both("QLinearMatMul", inputs, (1, 2, 3, 4, 5, 6, 7), monkeypatch)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 10
