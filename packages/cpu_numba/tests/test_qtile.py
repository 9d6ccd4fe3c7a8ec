"""The int8 GEMM micro-kernels (qtile.py) and their operand packing (qpack.py): every variant this CPU
has, bit-exact against an int64 NumPy reference over shapes with M/N/K tails, zero points and both
operand dtypes; the avx2 safety check and fallback; KERNELKIT_INT8_GEMM and its typed errors."""
from __future__ import annotations

import numpy as np
import pytest
from kernelkit.errors import ConfigError
from kernelkit_numba.kernels import qpack, qtile

VARIANTS = ["generic", "avx2", "vnni512"]


def _need(name):
    if not qtile.available(name):
        missing = [f for f in qtile._NEEDS[name] if f not in qtile.host_features()]
        why = f"this CPU lacks {', '.join(missing)}" if missing else "NUMBA_DISABLE_JIT=1: no compiled tiles"
        pytest.skip(f"{why} ({name} cannot run here)")


def _reference(a, a_zp, bt, b_zp):
    """int32 (A - a_zp) @ (B - b_zp) from int64 NumPy, wrapped as an int32 accumulator would."""
    bz = np.broadcast_to(np.asarray(b_zp, np.int64).reshape(-1), (bt.shape[0],))
    v = (a.astype(np.int64) - a_zp) @ (bt.astype(np.int64) - bz[:, None]).T
    return ((v + (1 << 31)) % (1 << 32) - (1 << 31)).astype(np.int32)


def _run(variant, a, a_zp, bt, b_zp):
    """MatMulInteger's path (qpack.int32_blocks) on ``variant``, A's rows in blocks as the kernels run them."""
    pb = qpack.PackedB(bt, b_zp, variant.nr)
    out = np.empty((a.shape[0], bt.shape[0]), np.int32)
    terms = pb.column_terms(a_zp + qpack.flip_of(a.dtype)[1])
    qpack.run_blocks(qpack.int32_blocks, variant, pb, a, (terms, pb.zp, pb.has_zp, out))
    return out, pb


SHAPES = [(1, 1, 1), (1, 784, 1024), (3, 5, 7), (4, 16, 16), (7, 13, 17), (8, 64, 32), (9, 3, 33),
          (17, 31, 15), (33, 129, 47), (64, 256, 64), (130, 77, 100), (300, 600, 40),
          # vnni512's wide tiles: few rows over 4 panels plus one left, 4 + 2 rows over 9 panels, 8 x 32 + 4 rows
          (2, 40, 70), (6, 21, 130), (12, 33, 80)]


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_variant_bit_exact(name, m, k, n):
    _need(name)
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    variant = qtile.VARIANTS[name]
    for a_dtype, b_dtype in ((np.uint8, np.int8), (np.int8, np.int8), (np.uint8, np.uint8)):
        ai, bi = np.iinfo(a_dtype), np.iinfo(b_dtype)
        a = rng.integers(ai.min, ai.max + 1, (m, k)).astype(a_dtype)
        if name == "avx2" and b_dtype == np.int8:  # 7-bit weights: pairs cannot saturate
            bt = rng.integers(-64, 64, (n, k)).astype(np.int8)
        elif name == "avx2":
            bt = rng.integers(64, 192, (n, k)).astype(np.uint8)  # - 128: 7-bit as well
        else:
            bt = rng.integers(bi.min, bi.max + 1, (n, k)).astype(b_dtype)
        a_zp = int(rng.integers(ai.min, ai.max + 1))
        b_zp = rng.integers(bi.min, bi.max + 1, n).astype(b_dtype) if n % 2 else np.array(0, b_dtype)
        got, pb = _run(variant, a, a_zp, bt, b_zp)
        if name == "avx2":
            assert pb.safe_pairs
        np.testing.assert_array_equal(got, _reference(a, a_zp, bt, b_zp))


@pytest.mark.parametrize("name", VARIANTS)
def test_extremes(name):
    """Every product at its largest magnitude: 255 * -128 (vnni512, generic) over a long K."""
    _need(name)
    variant = qtile.VARIANTS[name]
    a = np.full((5, 4099), 255, np.uint8)
    bt = np.full((18, 4099), -64 if name == "avx2" else -128, np.int8)
    got, _ = _run(variant, a, 0, bt, 0)
    np.testing.assert_array_equal(got, _reference(a, 0, bt, 0))


def test_avx2_safety_check():
    """Pairs whose u8 x s8 sum can leave int16 mark B unsafe; auto then leaves avx2 for BLAS or VNNI."""
    bt = np.zeros((3, 8), np.int8)
    bt[1, 2:4] = (64, 64)  # 255 * 128 = 32640: safe
    assert qpack.PackedB(bt, None, 16).safe_pairs
    bt[1, 2:4] = (64, 65)  # 255 * 129 = 32895 > 32767: vpmaddubsw would saturate
    pb = qpack.PackedB(bt, None, 16)
    assert not pb.safe_pairs
    bt[1, 2:4] = (0, 0)
    bt[2, 3:5] = (127, 127)  # k = 3 and 4 are in different pairs: safe
    assert qpack.PackedB(bt, None, 16).safe_pairs


def test_unsafe_weights_fall_back(monkeypatch):
    """Forced avx2 on 8-bit weights runs generic (exact); auto never picks avx2 for them."""
    _need("avx2")
    monkeypatch.setenv(qtile.ENV, "avx2")
    assert qtile.select(safe_pairs=True).name == "avx2"
    variant = qtile.select(safe_pairs=False)
    assert variant.name == "generic"
    rng = np.random.default_rng(3)
    a = rng.integers(200, 256, (6, 40)).astype(np.uint8)
    bt = rng.integers(100, 128, (5, 40)).astype(np.int8)
    got, pb = _run(variant, a, 3, bt, 0)
    assert not pb.safe_pairs
    np.testing.assert_array_equal(got, _reference(a, 3, bt, 0))
    monkeypatch.setenv(qtile.ENV, "auto")
    chosen = qtile.select(safe_pairs=False)
    assert chosen is None or chosen.name == "vnni512"


def test_env_override(monkeypatch):
    monkeypatch.setenv(qtile.ENV, "off")
    assert qtile.select(True) is None
    monkeypatch.setenv(qtile.ENV, "generic")
    assert qtile.select(True).name == "generic"
    monkeypatch.setenv(qtile.ENV, "bogus")
    with pytest.raises(ConfigError, match="KERNELKIT_INT8_GEMM"):
        qtile.select(True)
    monkeypatch.delenv(qtile.ENV)
    best = qtile.select(True)
    want = next((v for v in ("vnni512", "avx2") if qtile.available(v)), None)  # none under NUMBA_DISABLE_JIT
    assert (best and best.name) == want


@pytest.mark.parametrize("name", ["avx2", "vnni512"])
def test_forced_unavailable_is_typed(monkeypatch, name):
    """Forcing a variant on a CPU without it: Int8GemmUnavailableError (a DeviceError) naming the features."""
    monkeypatch.setattr(qtile, "host_features", lambda: frozenset({"sse4.2"}))
    monkeypatch.setenv(qtile.ENV, name)
    with pytest.raises(qtile.Int8GemmUnavailableError, match=name) as info:
        qtile.select(True)
    assert info.value.code == "KK_INT8_GEMM_UNAVAILABLE"
    monkeypatch.setenv(qtile.ENV, "auto")
    assert qtile.select(True) is None  # no micro-kernel: the float32-BLAS path


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("geometry", [
    dict(c=3, h=9, w=11, m=5, k=3, s=1, p=1, d=1),
    dict(c=8, h=7, w=7, m=33, k=1, s=1, p=0, d=1),
    dict(c=6, h=10, w=9, m=17, k=3, s=2, p=1, d=1),
    dict(c=4, h=12, w=12, m=16, k=3, s=1, p=2, d=2),
    dict(c=5, h=30, w=29, m=20, k=3, s=1, p=1, d=1),
    dict(c=3, h=31, w=33, m=24, k=7, s=2, p=3, d=1),
    dict(c=16, h=5, w=5, m=8, k=1, s=2, p=0, d=1),
])
@pytest.mark.parametrize("x_dtype", [np.int8, np.uint8])
def test_conv_rows(name, geometry, x_dtype):
    """The rows micro-kernel on the int8 im2col (padding = the zero point) or the input rows
    themselves (1x1 stride 1), requantized by conv_rows (in the registers for whole tiles, else
    through int32) = NumPy's requantize of the int64 convolution, bit for bit."""
    _need(name)
    g = geometry
    rng = np.random.default_rng(g["c"] * g["m"])
    kind = qtile.KIND[name]
    info = np.iinfo(x_dtype)
    x = rng.integers(info.min, info.max + 1, (g["c"], g["h"], g["w"])).astype(x_dtype)
    lim = 64 if name == "avx2" else 128
    w = rng.integers(-lim, lim, (g["m"], g["c"], g["k"], g["k"])).astype(np.int8)
    x_zp = int(rng.integers(info.min, info.max + 1))
    k, s, p, d = g["k"], g["s"], g["p"], g["d"]
    oh = (g["h"] + 2 * p - d * (k - 1) - 1) // s + 1
    ow = (g["w"] + 2 * p - d * (k - 1) - 1) // s + 1
    xp = np.pad(x.astype(np.int64) - x_zp, ((0, 0), (p, p), (p, p)))
    cols = np.stack([xp[:, i * d:i * d + s * (oh - 1) + 1:s, j * d:j * d + s * (ow - 1) + 1:s]
                     for i in range(k) for j in range(k)], axis=1).reshape(g["c"] * k * k, oh * ow)
    expect = w.reshape(g["m"], -1).astype(np.int64) @ cols  # (M, pixels), small enough for int32 and float32
    pb = qpack.PackedB(w.reshape(g["m"], -1), None, qtile.ROWS_MR[kind])
    shift = 128 if x_dtype == np.int8 else 0
    terms = pb.column_terms(x_zp + shift)
    n_pix = oh * ow
    if k == 1 and s == 1 and g["c"] % 4 == 0:
        rows = x.reshape(-1)
    else:
        col = np.empty((4 * pb.kq, n_pix), x_dtype)
        qpack.im2col_i8(x, col, k, k, s, s, d, d, p, p, oh, ow, np.asarray(x_zp, x_dtype)[()], 0, 4 * pb.kq)
        rows = col.reshape(-1)
        by_map = np.empty_like(col)  # the small-plane im2col (a map of the taps) gives the same rows
        taps = qpack.tap_offsets(g["h"], g["w"], k, k, s, s, d, d, p, p, oh, ow)
        qpack.im2col_i8_map(x, by_map, taps, np.asarray(x_zp, x_dtype)[()], 0, 4 * pb.kq)
        np.testing.assert_array_equal(by_map, col)
    m_pad = pb.n_panels * pb.nr
    bias = rng.integers(-5000, 5000, g["m"]).astype(np.int32)
    terms = pb.column_terms(x_zp + shift, bias)
    mult = rng.uniform(1e-4, 3e-3, g["m"]).astype(np.float32)
    y_dtype = np.uint8 if x_dtype == np.uint8 else np.int8
    yi = np.iinfo(y_dtype)
    zp, lo, hi = np.float32(yi.min + 100), np.float32(yi.min + 3), np.float32(yi.max)  # a clamp as a fused Relu6 makes
    acc = (expect + bias[:, None]).astype(np.int32)
    want = np.clip(np.rint(acc.astype(np.float32) * mult[:, None]) + zp, lo, hi).astype(y_dtype)
    out = np.empty((g["m"], n_pix), y_dtype)
    block = qpack.rows_block(m_pad, qtile.ROWS_NR[kind], n_pix)
    blocks = -(-n_pix // block)
    qpack.conv_rows(kind, pb.data, pb.kq, g["m"], m_pad, rows, n_pix, -128 if shift else 0, n_pix, block, terms,
                    mult, zp, lo, hi, out, 0, blocks)
    np.testing.assert_array_equal(out, want)
    assert len(np.unique(want)) > 20  # the values spread over the range, not all clamped


@pytest.mark.parametrize("op", ["Erf", "Relu", "Gelu", "Neg"])
def test_unary_in_place_equals_out_of_place(op):
    """unary._loop_inplace (the in-place call of the transformer's Erf) gives what the two-array loop
    gives, through both entries (the serial call and the threaded kernel); a transposed view of the
    output is not taken as in place."""
    from kernelkit_numba.kernels import unary

    x = np.random.default_rng(1).standard_normal((64, 48)).astype(np.float32)
    kernel = unary.KERNELS[op]
    want = kernel(x)
    y = x.copy()
    assert kernel(y, out=y) is y
    np.testing.assert_array_equal(y, want)
    spec = type("Spec", (), {"dtype": "float32", "shape": x.shape, "is_static": True, "layout": None})()
    call = kernel.serial([spec])
    y = x.copy()
    call(y, out=y)
    np.testing.assert_array_equal(y, want)
    sq = x[:48, :48].copy()
    out = sq.copy()
    call_sq = kernel.serial([type("Spec", (), {"dtype": "float32", "shape": (48, 48), "is_static": True,
                                               "layout": None})()])
    call_sq(out.T, out=out)  # same memory, other order: the two-array path
    np.testing.assert_array_equal(out, kernel(np.ascontiguousarray(sq.T)))


def _reference_and_numba(op, inputs, constants, monkeypatch, variant, domain="", attrs=None):
    from kernelkit.testing import run_single_op

    monkeypatch.setenv(qtile.ENV, variant)
    kw = dict(attrs=attrs, passes=False, constants=constants, domain=domain)
    (got,) = run_single_op(op, inputs, vendors=["numba"], fallback=False, **kw)
    (want,) = run_single_op(op, inputs, vendors=["reference"], **kw)
    return got, want


CONVS = [  # (x shape, w shape, attrs)
    ((1, 16, 12, 12), (24, 16, 1, 1), {}),
    ((2, 5, 11, 9), (8, 5, 3, 3), dict(pads=[1, 1, 1, 1])),
    ((1, 8, 13, 13), (16, 8, 3, 3), dict(pads=[1, 0, 2, 1], strides=[2, 2], dilations=[1, 2])),
    ((1, 24, 9, 9), (24, 1, 3, 3), dict(group=24, pads=[1, 1, 1, 1])),
    ((1, 40, 10, 10), (40, 1, 3, 3), dict(group=40, pads=[1, 1, 1, 1], strides=[2, 2])),
    ((1, 16, 8, 8), (16, 1, 5, 5), dict(group=16, pads=[2, 2, 2, 2], dilations=[2, 1])),
    ((1, 8, 20, 20), (8, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1])),  # a large plane: the NCHW kernel
    ((1, 4, 70, 69), (4, 1, 3, 3), dict(group=4, pads=[1, 0, 1, 1], strides=[2, 2])),  # NCHW, strided
    ((1, 3, 66, 66), (3, 1, 5, 5), dict(group=3, pads=[2, 2, 2, 2], strides=[1, 3], dilations=[1, 2])),
    # qdepthwise's channels-last kernel (channels a multiple of 16, at least 64): 3x3 stride 1 and 2 with
    # row tails, asymmetric padding, a 5x5 dilated kernel (the general taps loop), a batch of 2
    ((1, 64, 9, 11), (64, 1, 3, 3), dict(group=64, pads=[1, 1, 1, 1])),
    ((1, 96, 15, 14), (96, 1, 3, 3), dict(group=96, pads=[0, 1, 1, 0], strides=[2, 2])),
    ((2, 80, 10, 10), (80, 1, 5, 5), dict(group=80, pads=[2, 1, 2, 3], dilations=[1, 2])),
    ((1, 64, 16, 16), (64, 1, 3, 3), dict(group=64, pads=[1, 1, 1, 1], strides=[1, 2])),
    ((1, 64, 81), (64, 1, 5), dict(group=64, pads=[1, 2], strides=[2])),  # 1-D
    # stride 2 along rows of >= 48 outputs (the split im2col): 3x3 and a dilated 3x5, asymmetric padding
    ((1, 3, 100, 101), (16, 3, 3, 3), dict(pads=[1, 1, 1, 1], strides=[2, 2])),
    ((1, 5, 9, 104), (8, 5, 3, 5), dict(pads=[0, 3, 1, 2], strides=[1, 2], dilations=[2, 2])),
    ((1, 8, 12, 12), (12, 8, 3, 3), dict(pads=[1, 1, 1, 1])),  # 12 channels: a partial vnni512 weight panel
    ((1, 48, 17, 16), (48, 1, 3, 3), dict(group=48, pads=[1, 2, 0, 1], strides=[3, 3])),  # 3x3 stride 3: general taps
]


@pytest.mark.parametrize("variant", ["off", "generic", "avx2", "vnni512"])
@pytest.mark.parametrize("case", range(len(CONVS)))
@pytest.mark.parametrize("x_dtype", ["int8", "uint8"])
def test_qlinearconv_equals_reference(variant, case, x_dtype, monkeypatch):
    """QLinearConv on each micro-kernel (and the float32-BLAS path, and the channels-last depthwise
    kernel) = the reference bit for bit: bias, per-channel scales, a fused Relu."""
    if variant != "off":
        _need(variant)
    xs, ws, attrs = CONVS[case]
    rng = np.random.default_rng(case)
    info = np.iinfo(x_dtype)
    x = rng.integers(info.min, info.max + 1, xs).astype(x_dtype)
    lim = 64 if variant == "avx2" else 128
    w = rng.integers(-lim, lim, ws).astype(np.int8)
    m = ws[0]
    w_scale = rng.uniform(0.002, 0.01, m).astype(np.float32)
    bias = rng.integers(-3000, 3000, m).astype(np.int32)
    inputs = [x, np.float32(0.02), np.array(info.min + 77, x_dtype), w, w_scale, np.zeros(m, np.int8), np.float32(0.3),
              np.array(5, x_dtype), bias]
    got, want = _reference_and_numba("QLinearConv", inputs, (3, 4, 5, 8), monkeypatch, variant,
                                     attrs={**attrs, "activation": "Relu"} if case % 2 else attrs)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 10


@pytest.mark.parametrize("case", [0, 2, 9])  # 1x1 (rows, direct), 3x3 strided (rows, im2col), depthwise (qdepthwise)
def test_qlinearconv_kept_plan_equals_reference(case, monkeypatch):
    """QLinearConv keeps its prepared call between runs of a session (same read-only constants, shape,
    thread budget): the second and third runs, on other inputs, still equal the reference bit for bit."""
    from kernelkit.session import Session
    from kernelkit.testing import run_single_op, single_op_model

    monkeypatch.setenv(qtile.ENV, "auto")
    xs, ws, attrs = CONVS[case]
    rng = np.random.default_rng(200 + case)
    w = rng.integers(-128, 128, ws).astype(np.int8)
    m = ws[0]
    consts = [np.float32(0.02), np.array(3, np.int8), w, rng.uniform(0.002, 0.01, m).astype(np.float32),
              np.zeros(m, np.int8), np.float32(0.3), np.array(5, np.int8),
              rng.integers(-3000, 3000, m).astype(np.int32)]
    x0 = rng.integers(-128, 128, xs).astype(np.int8)
    model = single_op_model("QLinearConv", [x0, *consts], attrs, None, tuple(range(1, 9)), "")
    sess = Session(model, vendors=["numba"], fallback=False, passes=False)
    for _ in range(3):
        x = rng.integers(-128, 128, xs).astype(np.int8)
        (got,) = sess.run(None, {"in0": x})
        (want,) = run_single_op("QLinearConv", [x, *consts], attrs=attrs, constants=tuple(range(1, 9)),
                                vendors=["reference"], passes=False)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("band_bytes", [1, 40_000])
@pytest.mark.parametrize("case", [i for i, c in enumerate(CONVS) if c[0][1] >= 32 and c[1][1] == 1])
def test_qdepthwise_bands_equal_reference(band_bytes, case, monkeypatch):
    """qdepthwise's channels-last kernel cut into bands of one output row, and of a few (the buffer
    of a band reused by the next: its padding rows zeroed again), = the reference bit for bit."""
    from kernelkit_numba.kernels import qdepthwise

    monkeypatch.setattr(qdepthwise, "BAND_BYTES", band_bytes)
    xs, ws, attrs = CONVS[case]
    rng = np.random.default_rng(100 + case)
    x = rng.integers(-128, 128, xs).astype(np.int8)
    w = rng.integers(-128, 128, ws).astype(np.int8)
    m = ws[0]
    inputs = [x, np.float32(0.02), np.array(-3, np.int8), w, rng.uniform(0.002, 0.01, m).astype(np.float32),
              rng.integers(-5, 6, m).astype(np.int8), np.float32(0.3), np.array(5, np.int8),
              rng.integers(-3000, 3000, m).astype(np.int32)]
    got, want = _reference_and_numba("QLinearConv", inputs, (3, 4, 5, 8), monkeypatch, "off", attrs=attrs)
    np.testing.assert_array_equal(got, want)
    assert len(np.unique(want)) > 10


@pytest.mark.parametrize("variant", ["off", "generic", "avx2", "vnni512"])
@pytest.mark.parametrize("rows", [1, 7, 130])
def test_dynamic_quantize_matmul_equals_reference(variant, rows, monkeypatch):
    """DynamicQuantizeMatMul (A quantized straight into the panels) and MatMulInteger on each
    micro-kernel = the reference bit for bit."""
    if variant != "off":
        _need(variant)
    rng = np.random.default_rng(rows)
    a = rng.standard_normal((rows, 70)).astype(np.float32)
    lim = 64 if variant == "avx2" else 128
    b = rng.integers(-lim, lim, (70, 33)).astype(np.int8)
    b_zp = np.zeros(33, np.int8) if rows == 1 else rng.integers(-20, 20, 33).astype(np.int8)  # row sums too
    inputs = [a, b, rng.uniform(0.01, 0.02, 33).astype(np.float32), b_zp, rng.standard_normal(33).astype(np.float32)]
    got, want = _reference_and_numba("DynamicQuantizeMatMul", inputs, (1, 2, 3, 4), monkeypatch, variant,
                                     domain="com.microsoft")
    np.testing.assert_array_equal(got, want)
    au = rng.integers(0, 256, (rows, 70)).astype(np.uint8)
    got, want = _reference_and_numba("MatMulInteger", [au, b, np.uint8(9), np.int8(0)], (1, 2, 3), monkeypatch,
                                     variant)
    np.testing.assert_array_equal(got, want)


@pytest.mark.filterwarnings("ignore:invalid value encountered")
@pytest.mark.parametrize("variant", ["off", "generic", "avx2", "vnni512"])
@pytest.mark.parametrize("rows", [1, 130])
@pytest.mark.parametrize("value", [np.inf, -np.inf])
def test_dynamic_quantize_matmul_with_an_infinity_equals_reference(variant, rows, value, monkeypatch):
    """An infinity in A (scale inf): every path gives the reference's outputs, NaN where it has them
    (the float32-BLAS path's epilogue gave -inf)."""
    if variant != "off":
        _need(variant)
    rng = np.random.default_rng(rows)
    a = rng.standard_normal((rows, 70)).astype(np.float32)
    a[rows // 2, 3] = value
    lim = 64 if variant == "avx2" else 128
    b = rng.integers(-lim, lim, (70, 33)).astype(np.int8)
    inputs = [a, b, rng.uniform(0.01, 0.02, 33).astype(np.float32), rng.integers(-20, 20, 33).astype(np.int8),
              rng.standard_normal(33).astype(np.float32)]
    got, want = _reference_and_numba("DynamicQuantizeMatMul", inputs, (1, 2, 3, 4), monkeypatch, variant,
                                     domain="com.microsoft")
    np.testing.assert_array_equal(got, want)  # NaN where the reference has NaN


SMALL_A = {  # DynamicQuantizeMatMul's one-call path (qpack.dq_matmul_small): the range and parameters in Numba
    "mixed": lambda rng, shape: (rng.standard_normal(shape) * 7).astype(np.float32),
    "positive": lambda rng, shape: rng.uniform(0.5, 3, shape).astype(np.float32),  # zero point 0
    "negative": lambda rng, shape: rng.uniform(-6, -1, shape).astype(np.float32),  # zero point 255
    "zeros": lambda rng, shape: np.zeros(shape, np.float32),  # scale 1
    "minus_zero": lambda rng, shape: np.where(rng.uniform(size=shape) < 0.5, -0.0, rng.uniform(1, 2, shape)).astype(
        np.float32),  # the range's low end -0.0
    "nan": lambda rng, shape: np.where(np.arange(np.prod(shape)).reshape(shape) == 5, np.nan, 1).astype(np.float32),
}


@pytest.mark.filterwarnings("ignore:invalid value encountered")
@pytest.mark.parametrize("case", sorted(SMALL_A))
@pytest.mark.parametrize("shape", [(1, 70), (1, 3, 200), (8, 33), (2, 65, 70)])
@pytest.mark.parametrize("b_dtype", ["int8", "uint8"])
def test_dynamic_quantize_matmul_few_rows(case, shape, b_dtype, monkeypatch):
    """DynamicQuantizeMatMul in one Numba call (one shard: batch 1, or little work): range (as integer
    keys), scale, zero point, quantize, product and epilogue = the reference bit for bit (per-tensor
    and per-column scales, zero points, bias, -0.0); a NaN in A takes the general path (NaN out)."""
    _need("vnni512")
    rng = np.random.default_rng(len(case) * 100 + shape[-1])
    a = SMALL_A[case](rng, shape)
    info = np.iinfo(b_dtype)
    n = 40
    b = rng.integers(info.min, info.max + 1, (shape[-1], n)).astype(b_dtype)
    per_col = shape[0] != 1
    b_scale = rng.uniform(0.01, 0.02, n if per_col else ()).astype(np.float32)
    b_zp = rng.integers(info.min, info.max + 1, n).astype(b_dtype) if per_col else np.array(7, b_dtype)
    inputs = [a, b, b_scale, b_zp] + ([rng.standard_normal(n).astype(np.float32)] if shape[0] == 1 else [])
    got, want = _reference_and_numba("DynamicQuantizeMatMul", inputs, (1, 2, 3, 4), monkeypatch, "vnni512",
                                     domain="com.microsoft")
    np.testing.assert_array_equal(got, want)


@pytest.mark.filterwarnings("ignore:invalid value encountered")
@pytest.mark.parametrize("case", ["mixed", "positive", "minus_zero", "nan"])
@pytest.mark.parametrize("shape, n", [((1, 784), 700), ((1, 2, 300), 1000), ((8, 200), 1024)])
@pytest.mark.parametrize("b_dtype", ["int8", "uint8"])
@pytest.mark.parametrize("relu", [False, True])
def test_dynamic_quantize_matmul_column_shards(case, shape, n, b_dtype, relu, monkeypatch):
    """DynamicQuantizeMatMul of a few rows at two threads: B's column groups in shards
    (qpack.dq_matmul_panels, each quantizing A itself; a partial last group and panel) = the
    reference bit for bit, per-tensor and per-column scales and zero points, bias, the fused Relu;
    a NaN in A takes the general path."""
    from kernelkit.testing import run_single_op
    from kernelkit_numba.kernels import qgemm

    _need("vnni512")
    _two_thread_paths(monkeypatch)
    calls = []
    panels = qpack.dq_matmul_panels
    monkeypatch.setattr(qpack, "dq_matmul_panels", lambda *args: calls.append(args[-2:]) or panels(*args))
    rng = np.random.default_rng(len(case) * 100 + n)
    a = SMALL_A[case](rng, shape)
    info = np.iinfo(b_dtype)
    b = rng.integers(info.min, info.max + 1, (shape[-1], n)).astype(b_dtype)
    per_col = shape[0] != 1
    b_scale = rng.uniform(0.01, 0.02, n if per_col else ()).astype(np.float32)
    b_zp = rng.integers(info.min, info.max + 1, n).astype(b_dtype) if per_col else np.array(7, b_dtype)
    inputs = [a, b, b_scale, b_zp, rng.standard_normal(n).astype(np.float32)]
    attrs = {"activation": "Relu"} if relu else None
    monkeypatch.setenv(qtile.ENV, "vnni512")
    kw = dict(attrs=attrs, passes=False, constants=(1, 2, 3, 4), domain="com.microsoft")
    (want,) = run_single_op("DynamicQuantizeMatMul", inputs, vendors=["reference"], **kw)
    if relu:
        want = np.maximum(want, np.float32(0))
    (got,) = run_single_op("DynamicQuantizeMatMul", inputs, vendors=["numba"], fallback=False, threads=2, **kw)
    np.testing.assert_array_equal(got, want)
    groups = -(-n // (16 * qpack.GROUP_PANELS))
    assert 2.0 * a.size * n >= qgemm.COLUMN_SHARD_OPS
    assert sorted(calls) == [(0, groups // 2), (groups // 2, groups)]


def _two_thread_paths(monkeypatch):
    """Every DynamicQuantizeMatMul product on a session's threads, few rows in column shards (both
    off by default: qgemm.INT8_WORK, COLUMN_SHARD_OPS), so that two-thread tests reach them."""
    from kernelkit_numba.kernels import qgemm

    monkeypatch.setattr(qgemm, "COLUMN_SHARD_OPS", 1 << 20)
    monkeypatch.setattr(qgemm, "INT8_WORK", 32.0)


@pytest.mark.filterwarnings("ignore:invalid value encountered")
@pytest.mark.parametrize("case", ["mixed", "nan"])
@pytest.mark.parametrize("shape", [(1, 784), (3, 300), (2, 100, 96)])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("relu", [False, True])
def test_dynamic_quantize_matmul_split_outputs(case, shape, threads, relu, monkeypatch):
    """A merged DynamicQuantizeMatMul's ``split`` outputs (parts not on panel or column-group
    bounds, one empty) written by the epilogues themselves = the reference's parts bit for bit: the
    one-call path, column shards (few rows, two threads), row blocks (two threads), NaN's general
    path; each output C-contiguous."""
    _need("vnni512")
    from kernelkit.testing import run_single_op

    rng = np.random.default_rng(shape[-1])
    a = SMALL_A[case](rng, shape)
    split = [100, 0, 300, 372]
    n = sum(split)
    b = rng.integers(-128, 128, (shape[-1], n)).astype(np.int8)
    inputs = [a, b, rng.uniform(0.01, 0.02, n).astype(np.float32), rng.integers(-9, 9, n).astype(np.int8),
              rng.standard_normal(n).astype(np.float32)]
    attrs = {"split": split, **({"activation": "Relu"} if relu else {})}
    monkeypatch.setenv(qtile.ENV, "vnni512")
    _two_thread_paths(monkeypatch)
    kw = dict(attrs=attrs, passes=False, constants=(1, 2, 3, 4), domain="com.microsoft", n_outputs=len(split))
    want = run_single_op("DynamicQuantizeMatMul", inputs, vendors=["reference"], **kw)
    got = run_single_op("DynamicQuantizeMatMul", inputs, vendors=["numba"], fallback=False, threads=threads, **kw)
    assert len(got) == len(split)
    for g, w, width in zip(got, want, split):
        assert g.shape == shape[:-1] + (width,) and g.flags.c_contiguous
        np.testing.assert_array_equal(g, w)


POOLS = [
    ((1, 64, 112, 112), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),  # ResNet-18's
    ((2, 3, 9, 11), dict(kernel_shape=[2, 3], strides=[1, 2], pads=[0, 1, 1, 0], ceil_mode=1)),
    ((1, 4, 10, 10), dict(kernel_shape=[3, 3], strides=[3, 3], dilations=[2, 1])),
    ((2, 5, 17), dict(kernel_shape=[4], strides=[2], pads=[1, 2])),
]


@pytest.mark.parametrize("case", range(len(POOLS)))
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_integer_maxpool_equals_reference(case, dtype):
    """qpool's integer MaxPool (and its Indices) = the reference, strides 1, 2 and 3, dilation,
    padding, ceil_mode, 1-D."""
    from kernelkit.testing import run_single_op

    shape, attrs = POOLS[case]
    info = np.iinfo(dtype)
    x = np.random.default_rng(case).integers(info.min, info.max + 1, shape).astype(dtype)
    for outputs in (1, 2):
        got = run_single_op("MaxPool", [x], attrs, n_outputs=outputs, vendors=["numba"], fallback=False)
        want = run_single_op("MaxPool", [x], attrs, n_outputs=outputs, vendors=["reference"])
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)


@pytest.mark.filterwarnings("ignore:invalid value encountered")
@pytest.mark.parametrize("relu", [False, True])
def test_dynamic_quantize_matmul_bound_serial_call(relu, monkeypatch):
    """The serial call's pre-bound plain path (DynamicQuantizeMatMul.serial_call, qgemm._bind_small) in
    a one-thread session of symbolic batch, run after run: each run = the reference bit for bit through
    new inputs, a batch change (re-bound), a NaN (the general path, then back), KERNELKIT_INT8_GEMM
    switched to off (the float32-BLAS path) and back, and a non-contiguous feed."""
    from kernelkit.builder import GraphBuilder
    from kernelkit.session import Session

    _need("vnni512")
    monkeypatch.setenv(qtile.ENV, "vnni512")
    rng = np.random.default_rng(16)
    k, n = 90, 40
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    consts = [b, rng.uniform(0.01, 0.02, n).astype(np.float32), rng.integers(-9, 9, n).astype(np.int8),
              rng.standard_normal(n).astype(np.float32)]
    g = GraphBuilder("dqmm")
    x = g.input("x", ("N", k))
    y = g.op("DynamicQuantizeMatMul", x, *[g.constant(c, name=f"c{i}") for i, c in enumerate(consts)],
             domain="com.microsoft", **({"activation": "Relu"} if relu else {}))
    g.output(y)
    model = g.build()
    sess = Session(model, vendors=["numba"], fallback=False, passes=False, threads=1)
    ref = Session(model, vendors=["reference"], passes=False)
    step = next(s for s in sess.plan.steps if s.op.endswith("DynamicQuantizeMatMul"))
    feeds = [rng.standard_normal((1, k)), rng.standard_normal((1, k)) * 5, rng.standard_normal((3, k)),
             np.where(np.arange(k) == 4, np.nan, 1.0)[None], rng.standard_normal((1, k)), "off",
             rng.standard_normal((1, k)), "vnni512", rng.standard_normal((2 * k, 1)).reshape(2, k)[:, ::1],
             np.asfortranarray(rng.standard_normal((2, k))), rng.standard_normal((1, k)),
             *[rng.standard_normal((1, k)) * s for s in (1, 3, 0.1)]]
    bound = entry = 0
    for f in feeds:
        if isinstance(f, str):
            monkeypatch.setenv(qtile.ENV, f)
            continue
        a = f.astype(np.float32)
        p = step.kernel._plain
        entry += p is not None and p[0] == a.shape and p[18][0] is not p[18][1]  # this run calls the entry point
        (got,) = sess.run(None, {"x": a})
        (want,) = ref.run(None, {"x": a})
        np.testing.assert_array_equal(got, want)
        bound += step.kernel._plain is not None and step.kernel._plain[0] == a.shape
    assert bound >= 5  # the plain path was bound for most runs
    assert entry >= 2  # and its later runs called the compiled entry point (qgemm._entry)
