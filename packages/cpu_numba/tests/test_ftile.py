"""The float32 conv micro-kernels (ftile.py): every variant this CPU has against a float64 NumPy
product (rows tiles: channel and pixel tails, K chunks, residual, Relu/Clip, NaN kept; cols tiles for
small maps), the Conv kernel forced onto each variant through a Session against the reference
kernels (1x1 direct, strided/padded im2col, the blocked im2col of large maps, 7x7 maps, fused
residual + activation), and KERNELKIT_F32_GEMM with its typed errors."""
from __future__ import annotations

import numpy as np
import pytest
from kernelkit.errors import ConfigError
from kernelkit.testing import assert_close, run_single_op
from kernelkit_numba.kernels import ftile

VARIANTS = ["generic", "avx2", "avx512"]
ROW_VARIANTS = VARIANTS + ["avx512x12"]  # the rows tiles also on 12-row panels (ftile.ROWS12)
INF = np.float32(np.inf)


def _row_kind(name):
    """(kind, the variant it needs) of a name in ROW_VARIANTS."""
    return (ftile.ROWS12, "avx512") if name == "avx512x12" else (ftile.KIND[name], name)


def _need(name):
    if not ftile.available(name):
        missing = [f for f in ftile._NEEDS[name] if f not in ftile.host_features()]
        why = f"this CPU lacks {', '.join(missing)}" if missing else "NUMBA_DISABLE_JIT=1: no compiled tiles"
        pytest.skip(f"{why} ({name} cannot run here)")


def _want(w, x, b, z, lo, hi):
    v = w.astype(np.float64) @ x.astype(np.float64) + b[:, None]
    if z is not None:
        v = v + z
    return np.minimum(np.maximum(v, lo), hi)


def _close(got, want, k):
    """float32 sums of k products against float64 rounded to float32: float32's tolerance."""
    assert_close(got, want.astype(np.float32), err_msg=f"K = {k}")


def _rows(kind, w, x, b, z, lo, hi, kc=None, threads=1, x_col0=0, pad_cols=0, pack=False):
    """conv_tiles over all shards of ftile.plan; x given with ``pad_cols`` extra columns (a column
    block inside a wider matrix, as the blocked im2col passes it)."""
    m_n, k_n = w.shape
    n_pix = x.shape[1]
    wide = np.zeros((k_n, n_pix + pad_cols), np.float32)
    wide[:, x_col0:x_col0 + n_pix] = x
    wp = ftile.pack_weights(w, ftile.MR[kind])
    out = np.full((m_n, n_pix), np.nan, np.float32)
    block, blocks, groups, kc0 = ftile.plan(kind, m_n, k_n, n_pix, threads)
    zz = np.zeros(1, np.float32) if z is None else z.reshape(-1)
    zero = np.zeros(m_n, np.float32)
    ftile.conv_tiles(kind, wp, k_n, m_n, wide.reshape(-1), x_col0, n_pix + pad_cols, n_pix, b, zero, zz, z is not None,
                     np.float32(lo), np.float32(hi), out.reshape(-1), 0, n_pix, block, groups,
                     kc or kc0, pack, np.empty(ftile.scratch_size(kind, False, n_pix, block, kc or kc0, pack),
                                               np.float32), 0, blocks * groups)
    return out


ROW_SHAPES = [(1, 1, 1), (5, 3, 7), (8, 16, 32), (9, 17, 33), (13, 300, 100), (24, 16, 700), (64, 147, 257),
              (70, 64, 49), (3, 600, 31)]


@pytest.mark.parametrize("name", ROW_VARIANTS)
@pytest.mark.parametrize("m,k,n", ROW_SHAPES)
def test_rows_tiles(name, m, k, n):
    kind, need = _row_kind(name)
    _need(need)
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    w = (rng.standard_normal((m, k)) / np.sqrt(k)).astype(np.float32)  # sums of order 1, as trained layers'
    x = rng.standard_normal((k, n)).astype(np.float32)
    b, z = rng.standard_normal(m).astype(np.float32), rng.standard_normal((m, n)).astype(np.float32)
    for zz, lo, hi, kc, threads in [(None, -INF, INF, None, 1), (z, 0, INF, 7, 2), (z, -0.5, 0.5, 64, 3),
                                    (None, 0, 6, None, 2)]:
        for pack in (False, True):  # the rows read in place, or copied into tile order first
            _close(_rows(kind, w, x, b, zz, lo, hi, kc, threads, pack=pack), _want(w, x, b, zz, lo, hi), k)
    # a column block inside a wider matrix (the blocked im2col's buffer)
    for pack in (False, True):
        got = _rows(kind, w, x, b, None, -INF, INF, x_col0=3, pad_cols=5, pack=pack)
        _close(got, _want(w, x, b, None, -INF, INF), k)


@pytest.mark.parametrize("name", ROW_VARIANTS)
@pytest.mark.parametrize("m,k,n", [(13, 300, 100), (64, 147, 257), (70, 64, 49), (24, 16, 700)])
def test_rows_tiles_tile_major(name, m, k, n, monkeypatch):
    """The tile-major loop order (ftile.ROWS_TILE_MAJOR: each pixel tile over every weight panel per
    K chunk; plan's chunks of KC_TILE_MAJOR), rows in place and packed, at 1-3 threads' plans."""
    kind, need = _row_kind(name)
    _need(need)
    monkeypatch.setattr(ftile, "ROWS_TILE_MAJOR", True)
    monkeypatch.setattr(ftile, "KC_TILE_MAJOR", 64)
    rng = np.random.default_rng(m + k + n)
    w = (rng.standard_normal((m, k)) / np.sqrt(k)).astype(np.float32)
    x = rng.standard_normal((k, n)).astype(np.float32)
    b, z = rng.standard_normal(m).astype(np.float32), rng.standard_normal((m, n)).astype(np.float32)
    assert ftile.plan(kind, m, k, n, 1)[3] <= 64
    for zz, lo, hi, threads in [(None, -INF, INF, 1), (z, 0, INF, 2), (z, -0.5, 0.5, 3)]:
        for pack in (False, True):
            _close(_rows(kind, w, x, b, zz, lo, hi, None, threads, pack=pack), _want(w, x, b, zz, lo, hi), k)


@pytest.mark.parametrize("name", ROW_VARIANTS)
def test_rows_tiles_keep_nan_and_inf(name):
    """NaN in the input stays NaN through the clamp (as NumPy's maximum/minimum); inf is clamped."""
    kind, need = _row_kind(name)
    _need(need)
    w = np.ones((13, 4), np.float32)
    x = np.ones((4, 40), np.float32)
    x[2, 5], x[1, 37] = np.nan, np.inf
    for lo, hi in [(-INF, INF), (0, INF), (0, 6)]:
        got = _rows(kind, w, x, np.zeros(13, np.float32), None, lo, hi)
        np.testing.assert_array_equal(got, _want(w, x, np.zeros(13, np.float32), None, lo, hi).astype(np.float32))


def test_rows_kind_takes_12_row_panels_where_they_waste_little(monkeypatch):
    """With ROWS12_ON, avx512 products of 96+ weight rows whose last 12-row panel wastes at most 1/32
    of the rows run on ROWS12; fewer rows, other variants and ROWS12_ON off (the default) keep their
    own kind."""
    avx512 = ftile.KIND["avx512"]
    monkeypatch.setattr(ftile, "ROWS12_ON", True)
    assert [ftile.rows_kind(avx512, m) for m in (64, 96, 128, 160, 256, 320, 2048)] == \
        [avx512, ftile.ROWS12, ftile.ROWS12, avx512, ftile.ROWS12, ftile.ROWS12, ftile.ROWS12]
    assert ftile.rows_kind(ftile.KIND["avx2"], 256) == ftile.KIND["avx2"]
    assert ftile.rows_kind(ftile.KIND["generic"], 256) == ftile.KIND["generic"]
    assert ftile.MR[ftile.ROWS12] == 12 and ftile.NR[ftile.ROWS12] == ftile.NR[avx512]
    monkeypatch.setattr(ftile, "ROWS12_ON", False)
    assert ftile.rows_kind(avx512, 256) == avx512
    assert ftile.rows_kind(avx512, 256, one_thread=True) == ftile.ROWS12  # ROWS12_ONE_THREAD
    monkeypatch.setattr(ftile, "ROWS12_ONE_THREAD", False)
    assert ftile.rows_kind(avx512, 256, one_thread=True) == avx512


def test_12_row_tiles_own_chunk_and_block(monkeypatch):
    """KC12 / BLOCK_BYTES12 (off: 0) set the K chunk and pixel block of ROWS12's plans only, and the
    tiles give the same sums on them (three chunks of 100, blocks of two tiles)."""
    _need("avx512")
    rows12, avx512 = ftile.ROWS12, ftile.KIND["avx512"]
    before = ftile.plan(avx512, 100, 300, 200, 1)
    assert ftile.plan(rows12, 100, 300, 200, 1) == before  # the same rule while off
    monkeypatch.setattr(ftile, "KC12", 128)
    monkeypatch.setattr(ftile, "BLOCK_BYTES12", 4 * 100 * 64)
    assert ftile.plan(rows12, 100, 300, 200, 1) == (64, 4, 1, 100)
    assert ftile.plan(avx512, 100, 300, 200, 1) == before
    rng = np.random.default_rng(12)
    w = (rng.standard_normal((100, 300)) / np.sqrt(300)).astype(np.float32)
    x = rng.standard_normal((300, 200)).astype(np.float32)
    b, z = rng.standard_normal(100).astype(np.float32), rng.standard_normal((100, 200)).astype(np.float32)
    for pack in (False, True):
        _close(_rows(rows12, w, x, b, z, 0, INF, pack=pack), _want(w, x, b, z, 0, INF), 300)


def _cols(kind, w, x, b, z, lo, hi, kc):
    m_n, k_n = w.shape
    n_pix = x.shape[1]
    width = ftile.COLS_WIDTH[kind]
    wp = ftile.pack_weights(w, width)
    out = np.full((m_n, n_pix), np.nan, np.float32)
    zz = np.zeros(1, np.float32) if z is None else z.reshape(-1)
    acc = np.empty(ftile.scratch_size(kind, True, n_pix), np.float32)
    ftile.conv_cols(kind, wp, k_n, m_n, x.reshape(-1), n_pix, n_pix, b, zz, z is not None, np.float32(lo),
                    np.float32(hi), out.reshape(-1), n_pix, kc, acc, 0, -(-m_n // width))
    return out


@pytest.mark.parametrize("name", ["avx2", "avx512"])
@pytest.mark.parametrize("m,k,n", [(16, 5, 7), (48, 300, 49), (64, 70, 13), (160, 960, 49), (32, 1, 1), (80, 33, 64)])
def test_cols_tiles(name, m, k, n):
    _need(name)
    kind = ftile.KIND[name]
    rng = np.random.default_rng(m + k + n)
    w = (rng.standard_normal((m, k)) / np.sqrt(k)).astype(np.float32)  # sums of order 1, as trained layers'
    x = rng.standard_normal((k, n)).astype(np.float32)
    b, z = rng.standard_normal(m).astype(np.float32), rng.standard_normal((m, n)).astype(np.float32)
    for zz, lo, hi, kc in [(None, -INF, INF, 512), (z, 0, INF, 64), (z, -0.5, 0.5, 7), (None, 0, 6, 1)]:
        _close(_cols(kind, w, x, b, zz, lo, hi, kc), _want(w, x, b, zz, lo, hi), k)


@pytest.mark.parametrize("name", ["avx2", "avx512"])
def test_cols_tiles_keep_nan_and_inf(name):
    """The cols tiles' epilogue (avx512: transposed in registers, one masked store per channel row):
    NaN stays NaN through the clamp, inf is clamped, the residual's NaN too; 16 and 48 channels."""
    _need(name)
    kind = ftile.KIND[name]
    for m in (16, 48):
        w = np.ones((m, 4), np.float32)
        x = np.ones((4, 20), np.float32)
        x[2, 5], x[1, 17], x[3, 8] = np.nan, np.inf, -np.inf
        z = np.zeros((m, 20), np.float32)
        z[m - 1, 3], z[0, 19] = np.nan, 7.0
        b = np.arange(m, dtype=np.float32) / m
        for zz, lo, hi in [(None, -INF, INF), (z, 0, INF), (z, 0, 6), (None, -1, 1)]:
            want = _want(w, x, b, zz, lo, hi).astype(np.float32)
            np.testing.assert_array_equal(_cols(kind, w, x, b, zz, lo, hi, 512), want)


@pytest.mark.parametrize("m,k,n", [(48, 512, 16), (16, 5, 8), (64, 70, 13), (96, 300, 33), (32, 1, 1)])
def test_cols8_tiles(m, k, n):
    """conv_cols8, the avx512 cols tile of 8 pixels (Winograd's 16 tile columns of a 7x7 map)."""
    _need("avx512")
    rng = np.random.default_rng(m + k + n)
    w = (rng.standard_normal((m, k)) / np.sqrt(k)).astype(np.float32)
    x = rng.standard_normal((k, n)).astype(np.float32)
    b, z = rng.standard_normal(m).astype(np.float32), rng.standard_normal((m, n)).astype(np.float32)
    wp = ftile.pack_weights(w, ftile.COLS_WIDTH[2])
    acc = np.empty(ftile.scratch_size(2, 2, n), np.float32)
    assert ftile.cols_mode(2, 16) == 2 and ftile.cols_mode(2, 49) == 1 and ftile.cols_mode(1, 16) == 1
    for zz, lo, hi, kc in [(None, -INF, INF, 512), (z, 0, INF, 64), (z, -0.5, 0.5, 7)]:
        out = np.full((m, n), np.nan, np.float32)
        ftile.conv_cols8(wp, k, m, x.reshape(-1), n, n, b, np.zeros(1, np.float32) if zz is None else zz.reshape(-1),
                         zz is not None, np.float32(lo), np.float32(hi), out.reshape(-1), n, kc, acc, 0, -(-m // 48))
        _close(out, _want(w, x, b, zz, lo, hi), k)


# Conv through a Session, the kernel forced onto each variant: 1x1 direct (channel and pixel tails),
# strided / padded im2col, 7x7 and 14x14 maps (cols tiles where the channels allow), the stem-like
# blocked im2col, batch 2, Winograd
CONV_CASES = [
    ((1, 16, 9, 11), (24, 16, 1, 1), {}),
    ((2, 13, 12, 12), (19, 13, 1, 1), {"activation": "Relu"}),
    ((1, 8, 17, 15), (12, 8, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 2], "activation": "Clip",
                                     "activation_params": [-0.5, 0.5]}),
    ((1, 32, 7, 7), (64, 32, 3, 3), {"pads": [1, 1, 1, 1], "activation": "Relu"}),
    ((2, 40, 7, 7), (48, 40, 1, 1), {}),
    ((1, 24, 7, 7), (20, 24, 1, 1), {"activation": "Relu"}),
    ((1, 3, 64, 64), (16, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3], "activation": "Relu"}),
    ((1, 6, 20, 20), (10, 6, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    ((1, 16, 28, 27), (32, 16, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "activation": "Relu"}),  # 14x14
    ((1, 16, 14, 13), (136, 16, 1, 1), {"activation": "Relu"}),  # M >= 128: rows copied into tile order (pack)
    # 12-row panels on avx512 (ftile.rows_kind): 1x1 direct (M = 96: 8 panels), im2col (M = 132, pack)
    ((1, 16, 14, 13), (96, 16, 1, 1), {"activation": "Relu"}),
    ((1, 8, 15, 14), (132, 8, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    # Winograd's position GEMMs: F(2x2, 3x3) on 14x14 (49 tile columns), F(4x4, 3x3) (64 columns, M % 16 = 8;
    # two images' 98)
    ((1, 16, 14, 14), (32, 16, 3, 3), {"pads": [1, 1, 1, 1], "activation": "Relu"}),
    ((1, 8, 30, 29), (24, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 16, 14, 14), (48, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    # the implicit GEMM (strided, output rows of 28+ pixels; the 7x7/2 stem-like case above too): two images,
    # asymmetric pads, 39-pixel rows (32 + a one-vector tile of 7); stride 3 with a 5x5 kernel
    ((2, 8, 60, 78), (12, 8, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 2], "activation": "Relu"}),
    ((1, 4, 90, 95), (20, 4, 5, 5), {"strides": [3, 3], "pads": [2, 2, 2, 2]}),
    # strided 3x3 of K > 256 (conv.gather_wins: rows copied into tile order from the padded column phases):
    # 15x15 outputs (runs across output rows), asymmetric pads with 96 rows (12-row panels on avx512), two
    # images, a map of several pixel blocks, K = 1152 in two chunks
    ((1, 32, 30, 29), (40, 32, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "activation": "Relu"}),
    ((2, 32, 20, 22), (96, 32, 3, 3), {"strides": [2, 2], "pads": [1, 0, 1, 2]}),
    ((1, 32, 64, 64), (24, 32, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "activation": "Clip",
                                       "activation_params": [-0.5, 0.5]}),
    ((1, 128, 16, 16), (24, 128, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    # F(2x2, 3x3) on small maps (conv.WINO_SMALL, 128+ input channels): 7x7 (16 tile columns: the 8-pixel
    # cols tile on avx512), 9x9 (25 columns), two images
    ((1, 128, 7, 7), (48, 128, 3, 3), {"pads": [1, 1, 1, 1], "activation": "Relu"}),
    ((2, 128, 9, 9), (32, 128, 3, 3), {"pads": [1, 1, 1, 1]}),
]


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("x_shape, w_shape, attrs", CONV_CASES)
@pytest.mark.parametrize("with_z", [False, True])
def test_conv_session_on_each_variant(check, rng, monkeypatch, name, x_shape, w_shape, attrs, with_z):
    _need(name)
    monkeypatch.setenv(ftile.ENV, name)
    monkeypatch.setattr(ftile, "ROWS12_ON", with_z)  # 12-row panels (avx512, 96+ rows) in half the runs
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in (x_shape, w_shape, w_shape[:1]))
    inputs = [x, w, b]
    if with_z:
        y = run_single_op("Conv", inputs, {k: v for k, v in attrs.items() if not k.startswith("activation")},
                          vendors=["reference"])[0]
        inputs.append(rng.standard_normal(y.shape).astype(np.float32))
    check("Conv", inputs, attrs, constants=(1, 2))


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("name", ["avx2", "avx512"])
def test_strided_deep_k_takes_the_gather(rng, monkeypatch, name, threads):
    """conv.gather_wins: a strided 3x3 of K > 256 on a map too large for the cols tiles runs
    ftile.conv_gather (rows copied into tile order from the padded phases, no im2col), at 1-3
    threads' shard plans (pixel blocks x panel groups), with the residual and a clamp, against the
    reference kernels; GATHER off takes the im2col path to the same result."""
    from kernelkit_numba.kernels import conv

    _need(name)
    monkeypatch.setenv(ftile.ENV, name)
    monkeypatch.setattr(conv, "DIRECT", False)  # (avx512 would take fdirect.py's direct convolution)
    monkeypatch.setattr(ftile, "ROWS12_ON", threads == 2)  # 96 rows: 12-row panels (avx512) at 2 threads
    calls = []
    real = ftile.conv_gather
    monkeypatch.setattr(ftile, "conv_gather", lambda *a: (calls.append(a[0]), real(*a)))
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 40, 33, 31), (96, 40, 3, 3), (96,)))
    plain = {"strides": [2, 2], "pads": [1, 1, 1, 1]}
    attrs = {**plain, "activation": "Clip", "activation_params": [-1.0, 1.5]}
    want0 = run_single_op("Conv", [x, w, b], plain, vendors=["reference"])[0]
    z = rng.standard_normal(want0.shape).astype(np.float32)
    want = run_single_op("Conv", [x, w, b, z], attrs, vendors=["reference"])[0]
    got = run_single_op("Conv", [x, w, b, z], attrs, constants=(1, 2), vendors=["numba", "reference"],
                        threads=threads)[0]
    assert calls, "the gather path did not run"
    assert_close(got, want)
    monkeypatch.setattr(conv, "GATHER", False)
    calls.clear()
    got = run_single_op("Conv", [x, w, b, z], attrs, constants=(1, 2), vendors=["numba", "reference"],
                        threads=threads)[0]
    assert not calls
    assert_close(got, want)


def test_conv_blocked_im2col_on_the_tiles(check, rng, monkeypatch):
    """The blocked im2col (column matrices over 1 MiB, limits lowered) with the rows tiles per block."""
    from kernelkit_numba.kernels import conv

    monkeypatch.setattr(conv, "_COL_BYTES", 0)
    monkeypatch.setattr(conv, "_COL_BLOCK_BYTES", 1 << 10)
    monkeypatch.setattr(conv, "_BLOCKED_MIN_COLS", 1)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 3, 23, 21), (8, 3, 7, 7), (8,)))
    attrs = {"strides": [2, 2], "pads": [3, 3, 3, 3], "activation": "Relu"}
    y = run_single_op("Conv", [x, w, b], {"strides": [2, 2], "pads": [3, 3, 3, 3]}, vendors=["reference"])[0]
    check("Conv", [x, w, b], attrs, constants=(1, 2))
    check("Conv", [x, w, b, rng.standard_normal(y.shape).astype(np.float32)], attrs, constants=(1, 2))


def test_weights_as_a_graph_input_are_packed_every_call(rng, monkeypatch):
    """A weight that is not a constant (a writable array each run) is packed per call, not cached."""
    import kernelkit
    from kernelkit_converters.onnx import convert
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Conv", ["x", "w"], ["y"])]
    io = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6]),
          helper.make_tensor_value_info("w", TensorProto.FLOAT, [16, 8, 1, 1])]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 6])]
    model = convert(helper.make_model(helper.make_graph(nodes, "g", io, out),
                                      opset_imports=[helper.make_opsetid("", 21)]))
    sess = kernelkit.Session(model, vendors=["numba"], fallback=False)
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    for _ in range(2):
        w = rng.standard_normal((16, 8, 1, 1)).astype(np.float32)
        want = np.einsum("mc,nchw->nmhw", w[:, :, 0, 0], x)
        assert_close(sess.run(None, {"x": x, "w": w})[0], want)


def test_env_override(monkeypatch):
    monkeypatch.setenv(ftile.ENV, "off")
    assert ftile.select() is None
    monkeypatch.setenv(ftile.ENV, "generic")
    assert ftile.choice() == (0, True)
    monkeypatch.setenv(ftile.ENV, "bogus")
    with pytest.raises(ConfigError, match="KERNELKIT_F32_GEMM"):
        ftile.select()
    monkeypatch.delenv(ftile.ENV)
    best = ftile.select()
    if ftile.available("avx512"):
        assert best == ftile.KIND["avx512"]
    elif ftile.available("avx2"):
        assert best == ftile.KIND["avx2"]
    else:
        assert best is None


@pytest.mark.parametrize("name", ["avx2", "avx512"])
def test_forced_unavailable_is_typed(monkeypatch, name):
    """Forcing a variant on a CPU without it: F32GemmUnavailableError (a DeviceError) naming the features;
    auto then runs BLAS."""
    monkeypatch.setattr(ftile, "host_features", lambda: frozenset({"sse4.2"}))
    monkeypatch.setenv(ftile.ENV, name)
    with pytest.raises(ftile.F32GemmUnavailableError, match=name) as info:
        ftile.select()
    assert info.value.code == "KK_F32_GEMM_UNAVAILABLE"
    monkeypatch.setenv(ftile.ENV, "auto")
    assert ftile.select() is None


def test_small_maps_take_winograd(check, rng, monkeypatch):
    """A 3x3 layer on a 7x7 map with 128+ input channels runs F(2x2, 3x3) on the cols tiles
    (conv.WINO_SMALL) where the CPU has a cols variant, with and without the fused residual; with
    WINO_SMALL off it runs the direct cols tiles (conv.DIRECT_SMALL off: on, an avx512 CPU runs fdirect.py's
    direct convolution there, test_fdirect.py)."""
    from kernelkit_numba.kernels import conv, winograd

    monkeypatch.setattr(conv, "DIRECT_SMALL", False)
    calls = []
    real = winograd.conv3x3
    monkeypatch.setattr(winograd, "conv3x3", lambda *a, **k: calls.append(1) or real(*a, **k))
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((1, 128, 7, 7), (64, 128, 3, 3), (64,)))
    attrs = {"pads": [1, 1, 1, 1], "activation": "Relu"}
    z = rng.standard_normal((1, 64, 7, 7)).astype(np.float32)
    for small in (True, False):
        monkeypatch.setattr(conv, "WINO_SMALL", small)
        calls.clear()
        check("Conv", [x, w, b], attrs, constants=(1, 2))
        check("Conv", [x, w, b, z], attrs, constants=(1, 2))
        assert bool(calls) == (small and ftile.select() in ftile.COLS_LANES)


def test_strided_layers_take_the_implicit_gemm(check, rng, monkeypatch):
    """A 3x3/2 layer with 28+ output columns runs ftile.conv_implicit (conv.IMPLICIT) where the CPU
    has an avx2 or avx512 variant, with and without the fused residual; 1x1/2 and IMPLICIT off do not."""
    from kernelkit_numba.kernels import conv

    calls = []
    real, real_driver = ftile.conv_implicit, ftile.implicit_driver
    monkeypatch.setattr(ftile, "conv_implicit", lambda *a: calls.append(1) or real(*a))
    # a bound serial call (conv_serial) runs the variant's driver itself, bound when the session is built
    monkeypatch.setattr(ftile, "implicit_driver", lambda kind: lambda *a: calls.append(1) or real_driver(kind)(*a))
    cases = [((1, 16, 60, 60), (24, 16, 3, 3), 1, True), ((1, 16, 60, 60), (24, 16, 1, 1), 0, False)]
    for (xs, ws, pad, takes), on in [(c, on) for c in cases for on in (True, False)]:
        monkeypatch.setattr(conv, "IMPLICIT", on)
        x, w, b = (rng.standard_normal(s).astype(np.float32) for s in (xs, ws, ws[:1]))
        attrs = {"strides": [2, 2], "pads": [pad] * 4, "activation": "Relu"}
        y = run_single_op("Conv", [x, w, b], {"strides": [2, 2], "pads": [pad] * 4}, vendors=["reference"])[0]
        calls.clear()
        check("Conv", [x, w, b], attrs, constants=(1, 2))
        check("Conv", [x, w, b, rng.standard_normal(y.shape).astype(np.float32)], attrs, constants=(1, 2))
        assert bool(calls) == (on and takes and ftile.select() in (1, 2))


@pytest.mark.parametrize("c,h,w,k,s,p", [(3, 30, 28, 7, 2, 3), (5, 13, 17, 5, 3, 2), (4, 17, 20, 3, 2, 0),
                                         (2, 9, 8, 4, 3, 3)])
def test_padded_phases(c, h, w, k, s, p):
    """ftile.phases_padded against its definition: xpp[b, c, r, q] = x[c, r - ph, (q - pl) s + b], 0 outside,
    in two channel ranges (its shards)."""
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    x = np.random.default_rng(c + h + w).standard_normal((c, h, w)).astype(np.float32)
    hp, qp, pl, _, koff = ftile.implicit_geometry(c, k, k, s, p, p, oh, ow)
    xpp = np.full(s * c * hp * qp, np.nan, np.float32)
    ftile.phases_padded(x, xpp, s, p, pl, hp, qp, 0, c // 2)
    ftile.phases_padded(x, xpp, s, p, pl, hp, qp, c // 2, c)
    want = np.zeros((s, c, hp, qp), np.float32)
    for b in range(s):
        for r in range(hp):
            for q in range(qp):
                if 0 <= r - p < h and 0 <= (q - pl) * s + b < w:
                    want[b, :, r, q] = x[:, r - p, (q - pl) * s + b]
    np.testing.assert_array_equal(xpp.reshape(want.shape), want)
    assert koff.min() >= 0 and koff.max() + (oh - 1) * s * qp + ow <= xpp.size  # every read stays inside


@pytest.mark.parametrize("stride", [1, 2])
def test_one_thread_14x14_pointwise_on_the_cols_tiles(rng, monkeypatch, stride):
    """conv.FTILE_COLS_MAX_ONE_THREAD = 196: a one-thread session's 1x1 layer on a 14x14 map (and the
    1x1/2 shortcut to one) runs on the cols tiles, with the residual and Relu, against the reference;
    at two threads the limit stays FTILE_COLS_MAX. Stride 2 with FTILE_COLS_KC_ONE_THREAD = 48 (K = 128 in
    three chunks)."""
    from kernelkit_numba.kernels import conv

    _need("avx512")
    monkeypatch.setenv(ftile.ENV, "avx512")
    monkeypatch.setattr(conv, "FTILE_COLS_MAX_ONE_THREAD", 196)
    monkeypatch.setattr(conv, "FTILE_COLS_KC_ONE_THREAD", 48 if stride == 2 else 0)
    assert conv.ftile_cols(2, 48, 196, 128, one_thread=True) and not conv.ftile_cols(2, 48, 196, 128)
    calls = []
    real = ftile.cols_driver
    monkeypatch.setattr(ftile, "cols_driver", lambda kind: (calls.append(kind), real(kind))[1])
    hw = 14 * stride
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((1, 128, hw, hw), (48, 128, 1, 1), (48,)))
    plain = {"strides": [stride, stride]}
    z = rng.standard_normal((1, 48, 14, 14)).astype(np.float32)
    attrs = {**plain, "activation": "Relu"}
    want = run_single_op("Conv", [x, w, b, z], attrs, vendors=["reference"])[0]
    got = run_single_op("Conv", [x, w, b, z], attrs, constants=(1, 2), vendors=["numba", "reference"], threads=1)[0]
    assert calls, "the cols tiles did not run"
    assert_close(got, want)


@pytest.mark.parametrize("hw,stride", [(14, 1), (7, 1), (14, 2)])
def test_one_thread_pointwise_cols_chunk_defaults(rng, monkeypatch, hw, stride):
    """The one-thread 1x1 calls on the cols tiles take K in chunks of conv.FTILE_COLS_KC_ONE_THREAD (14x14 maps)
    and FTILE_COLS_KC_SMALL_ONE_THREAD (7x7, and the 1x1/2 shortcut to 7x7) as set, K = 300 in three uneven
    chunks of the default 128, 80 channels (a last panel of 32), with the residual and Relu, against the
    reference."""
    from kernelkit_numba.kernels import conv

    _need("avx512")
    monkeypatch.setenv(ftile.ENV, "avx512")
    out_hw = hw // stride
    want_kc = conv.FTILE_COLS_KC_SMALL_ONE_THREAD if out_hw * out_hw <= conv.FTILE_COLS_MAX \
        else conv.FTILE_COLS_KC_ONE_THREAD
    assert want_kc and 300 > 2 * want_kc
    kcs = []

    def recording(real):  # the plain driver or the prefetching one (conv.COLS_AHEAD_ONE_THREAD)
        def make(*key):
            driver = real(*key)
            return lambda *a: (kcs.append(a[13]), driver(*a))[1]
        return make

    monkeypatch.setattr(ftile, "cols_driver", recording(ftile.cols_driver))
    monkeypatch.setattr(ftile, "cols_driver_ahead", recording(ftile.cols_driver_ahead))
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((1, 300, hw, hw), (80, 300, 1, 1), (80,)))
    z = rng.standard_normal((1, 80, out_hw, out_hw)).astype(np.float32)
    attrs = {"strides": [stride, stride], "activation": "Relu"}
    want = run_single_op("Conv", [x, w, b, z], attrs, vendors=["reference"])[0]
    got = run_single_op("Conv", [x, w, b, z], attrs, constants=(1, 2), vendors=["numba", "reference"], threads=1)[0]
    assert kcs and set(kcs) == {want_kc}, kcs
    assert_close(got, want)


def _one_thread_1x1_against_reference(rng, n_n, k_n, m_n, hw, stride=1):
    """A one-thread session's 1x1 Conv (n_n images of k_n channels on hw x hw, m_n outputs, the stride) with the
    residual and Relu, then without either, each against the reference (the weights and bias constants)."""
    out_hw = -(-hw // stride)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((n_n, k_n, hw, hw), (m_n, k_n, 1, 1), (m_n,)))
    z = rng.standard_normal((n_n, m_n, out_hw, out_hw)).astype(np.float32)
    for inputs, attrs in (([x, w, b, z], {"strides": [stride, stride], "activation": "Relu"}),
                          ([x, w, b], {"strides": [stride, stride]})):
        want = run_single_op("Conv", inputs, attrs, vendors=["reference"])[0]
        got = run_single_op("Conv", inputs, attrs, constants=(1, 2), vendors=["numba", "reference"], threads=1)[0]
        assert_close(got, want)


@pytest.mark.parametrize("ahead", [16, 3])
@pytest.mark.parametrize("hw,stride", [(14, 1), (7, 1), (14, 2)])
@pytest.mark.parametrize("m_n,n_n", [(80, 1), (112, 2)])
def test_one_thread_pointwise_cols_ahead(rng, monkeypatch, ahead, hw, stride, m_n, n_n):
    """conv.COLS_AHEAD_ONE_THREAD: a one-thread session's 1x1 layer on the cols tiles that prefetch their
    weights ``ahead`` steps on (ftile.cols_driver_ahead) on a 14x14 and a 7x7 map and the 1x1/2 shortcut to
    7x7, K = 300 in three uneven chunks of the default 128 (the prefetch runs past a chunk's and a panel's
    end), 80 channels (a last panel of two vectors) and 112 (one vector), batch 1 and 2, with and without the
    residual, Relu, against the reference."""
    from kernelkit_numba.kernels import conv

    _need("avx512")
    monkeypatch.setenv(ftile.ENV, "avx512")
    monkeypatch.setattr(conv, "COLS_AHEAD_ONE_THREAD", ahead)
    calls = []
    real = ftile.cols_driver_ahead
    monkeypatch.setattr(ftile, "cols_driver_ahead", lambda *a: (calls.append(a), real(*a))[1])
    _one_thread_1x1_against_reference(rng, n_n, 300, m_n, hw, stride)
    assert calls and set(calls) == {(ftile.COLS8_KIND, ahead, ftile.COLS_WHOLE_ONE_THREAD)}, calls


@pytest.mark.parametrize("shape", ["4x6", "3x8", "3x7", "2x14"])
@pytest.mark.parametrize("hw,stride", [(14, 1), (7, 1), (14, 2)])
@pytest.mark.parametrize("m_n", [128, 80])
def test_one_thread_pointwise_cols_tile_shapes(rng, monkeypatch, shape, hw, stride, m_n):
    """conv.COLS_TILE_ONE_THREAD / COLS_TILE_SMALL_ONE_THREAD: a one-thread session's 1x1 layer on a 14x14
    and a 7x7 map (and the 1x1/2 shortcut to 7x7) on the 4 x 6, 3 x 8 and 2 x 14 cols tiles
    (ftile.cols_shape_driver, with the weights' prefetch and whole tiles of the defaults: a 7x7 map's last tile
    of 7 pixels on 2 x 14 the general one), K = 136 in uneven chunks (FTILE_COLS_KC_ONE_THREAD /
    FTILE_COLS_KC_SMALL_ONE_THREAD = 48), with and without the residual, Relu, against the reference. 80 channels
    are no multiple of 64 or 32: 4 x 6 and 2 x 14 leave them on the 3 x 7 tile (3 x 8 runs its narrow last panel);
    "3x7" is the default tile through the switch."""
    from kernelkit_numba.kernels import conv

    _need("avx512")
    monkeypatch.setenv(ftile.ENV, "avx512")
    monkeypatch.setattr(conv, "FTILE_COLS_MAX_ONE_THREAD", 196)
    monkeypatch.setattr(conv, "COLS_TILE_ONE_THREAD", shape)
    monkeypatch.setattr(conv, "COLS_TILE_SMALL_ONE_THREAD", shape)
    monkeypatch.setattr(conv, "FTILE_COLS_KC_ONE_THREAD", 48)
    monkeypatch.setattr(conv, "FTILE_COLS_KC_SMALL_ONE_THREAD", 48)
    out_hw = hw // stride
    cv, mp = (int(v) for v in shape.split("x"))
    taken = shape != "3x7" and m_n % (16 * cv) == 0
    assert (conv.cols_shape_one_thread(ftile.COLS8_KIND, m_n, out_hw * out_hw) == (cv, mp)) == taken
    calls = []
    real = ftile.cols_shape_driver
    monkeypatch.setattr(ftile, "cols_shape_driver", lambda *a: (calls.append(a), real(*a))[1])
    _one_thread_1x1_against_reference(rng, 1, 136, m_n, hw, stride)
    assert bool(calls) == taken, calls


@pytest.mark.parametrize("m_n", [120, 100, 64])
@pytest.mark.parametrize("hw", [28, 15])
def test_one_thread_pointwise_rows_prefetch(rng, monkeypatch, m_n, hw):
    """ftile.ROWS_PREFETCH: a one-thread session's 1x1 layer on the rows tiles whose tiles prefetch the next
    tile's output and residual rows (12-row panels for 120 channels, 8-row for 100 and 64; a 15x15 map's 225
    pixels end on a masked tile and a half one), K = 70 in chunks of 32 (ftile.KC), with and without the
    residual, Relu, against the reference; the prefetching driver is the one taken."""
    _need("avx512")
    monkeypatch.setenv(ftile.ENV, "avx512")
    monkeypatch.setattr(ftile, "ROWS_PREFETCH", 1)
    monkeypatch.setattr(ftile, "KC", 32)
    monkeypatch.setattr(ftile, "KC12", 32)
    built = []
    real = ftile.rows_driver_order
    monkeypatch.setattr(ftile, "rows_driver_order", lambda *a: (built.append(a), real(*a))[1])
    _one_thread_1x1_against_reference(rng, 1, 70, m_n, hw)
    assert built and all(a[2] for a in built), built


@pytest.mark.parametrize("align", [64, 0])
def test_packed_weights_and_thread_buffers_aligned(rng, monkeypatch, align):
    """ftile.PACK_ALIGN / config.BUFFER_ALIGN (issue 11, session 15): the packed weights (pack_weights, and
    pack_batched's rows) and the thread buffers start on a cache line where the switch is 64, and hold the
    same panels either way ([panel][k][r], the last panel's rows zero)."""
    from kernelkit_numba import config

    monkeypatch.setattr(ftile, "PACK_ALIGN", align)
    monkeypatch.setattr(config, "BUFFER_ALIGN", align)
    w = rng.standard_normal((50, 37)).astype(np.float32)
    got = ftile.pack_weights(w, 12)
    want = np.zeros((5, 37, 12), np.float32)
    for p in range(5):
        rows = w[12 * p:12 * p + 12]
        want[p, :, :rows.shape[0]] = rows.T
    np.testing.assert_array_equal(got, want.reshape(-1))
    u = rng.standard_normal((3, 40, 24)).astype(np.float32)
    batched = ftile.pack_batched(u, 16)
    for i in range(3):
        np.testing.assert_array_equal(batched[i], ftile.pack_weights(u[i], 16))
    buf = config.thread_buffer("test_aligned", 1000 + 3, np.float32)
    assert buf.size == 1003 and buf.dtype == np.float32
    if align:
        for a in (got, batched, buf):
            assert a.ctypes.data % align == 0
        assert (batched.strides[0] % align) == 0


@pytest.mark.parametrize("whole", [True, False])
@pytest.mark.parametrize("hw,stride", [(14, 1), (7, 1), (13, 1), (14, 2)])
@pytest.mark.parametrize("m_n,n_n", [(80, 1), (96, 2)])
def test_one_thread_pointwise_cols_whole_tiles(rng, monkeypatch, whole, hw, stride, m_n, n_n):
    """ftile.COLS_WHOLE_ONE_THREAD (issue 11, session 15): a one-thread session's 1x1 layer on the cols tiles
    runs its tiles of 7 valid pixels on the tile with constant pixel offsets: 14x14 and 7x7 maps (every tile
    whole), 13x13 (169 = 24 x 7 + 1: the last tile on the general one), the 1x1/2 shortcut to 7x7; 80 channels
    (a last panel of two vectors: the narrow tiles) and 96; batch 1 and 2; K = 300 in chunks of 128; with and
    without the residual, Relu; against the reference, with the driver the switch names taken."""
    from kernelkit_numba.kernels import conv

    _need("avx512")
    monkeypatch.setenv(ftile.ENV, "avx512")
    monkeypatch.setattr(ftile, "COLS_WHOLE_ONE_THREAD", whole)
    calls = []
    real = ftile.cols_driver_ahead
    monkeypatch.setattr(ftile, "cols_driver_ahead", lambda *a: (calls.append(a), real(*a))[1])
    _one_thread_1x1_against_reference(rng, n_n, 300, m_n, hw, stride)
    if whole or conv.COLS_AHEAD_ONE_THREAD:
        assert calls and set(calls) == {(ftile.COLS8_KIND, int(conv.COLS_AHEAD_ONE_THREAD), whole)}, calls


@pytest.mark.parametrize("xahead", [8, 3])
@pytest.mark.parametrize("m_n,hw", [(108, 17), (64, 30), (100, 15)])
def test_one_thread_pointwise_rows_pixels_ahead(rng, monkeypatch, xahead, m_n, hw):
    """ftile.ROWS_X_AHEAD_ONE_THREAD (issue 11, session 15): a one-thread session's 1x1 layer on the rows tiles
    that read their pixel rows in place (fewer than PACK_MIN_M weight rows) prefetch row k + xahead: 12-row
    panels for 108 channels, 8-row for 64 and 100; 17x17 (289 = 9 x 32 + 1: a half tile), 30x30 (900 = 28 x 32
    + 4), 15x15 (a masked tile and a half one); K = 70 in chunks of 32 (the prefetch past a chunk's and the
    rows' end); batch 2; with and without the residual, Relu; against the reference; the prefetching driver
    taken."""
    _need("avx512")
    monkeypatch.setenv(ftile.ENV, "avx512")
    monkeypatch.setattr(ftile, "ROWS_X_AHEAD_ONE_THREAD", xahead)
    monkeypatch.setattr(ftile, "KC", 32)
    monkeypatch.setattr(ftile, "KC12", 32)
    assert not ftile.pack_rows(m_n, 70, hw * hw)
    built = []
    real = ftile.rows_driver_order
    monkeypatch.setattr(ftile, "rows_driver_order", lambda *a: (built.append(a), real(*a))[1])
    _one_thread_1x1_against_reference(rng, 2, 70, m_n, hw)
    assert built and all(len(a) == 4 and a[3] == xahead for a in built), built


@pytest.mark.parametrize("m_n,hw,k_n", [(108, 16, 70), (100, 15, 33), (136, 28, 70), (64, 30, 45), (136, 17, 33)])
def test_one_thread_pointwise_rows_nt_stores(rng, monkeypatch, m_n, hw, k_n):
    """ftile.ROWS_NT_ONE_THREAD (issue 11, session 15): a one-thread session's 1x1 layer on the rows tiles stores
    its full tiles' outputs non-temporal where a tile's rows are whole 64-byte lines (16x16 and 28x28 maps;
    15x15, 30x30 and 17x17 rows are not: the plain stores), bit for bit the switch's off output and within the
    reference's tolerance: 12-row panels (108, 136 channels: packed) and 8-row (100, 64: in place), masked and half
    tiles (15x15, 17x17, 28x28's 784 = 24 x 32 + 16, 30x30), odd K, batch 2 (the second image's rows off a line
    where M x pixels is not a multiple of 16), with the residual and Relu and without; the non-temporal driver
    taken at one thread only, and only where K is one chunk."""
    _need("avx512")
    monkeypatch.setenv(ftile.ENV, "avx512")
    built = []
    real = ftile.rows_driver_ahead
    monkeypatch.setattr(ftile, "rows_driver_ahead", lambda *a: (built.append(a), real(*a))[1])
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, k_n, hw, hw), (m_n, k_n, 1, 1), (m_n,)))
    z = rng.standard_normal((2, m_n, hw, hw)).astype(np.float32)
    for inputs, attrs in (([x, w, b, z], {"activation": "Relu"}), ([x, w, b], {})):
        want = run_single_op("Conv", inputs, attrs, vendors=["reference"])[0]
        got = {}
        for threads in (1, 2):
            for nt in (False, True):
                monkeypatch.setattr(ftile, "ROWS_NT_ONE_THREAD", nt)
                built.clear()
                got[threads, nt] = run_single_op("Conv", inputs, attrs, constants=(1, 2),
                                                 vendors=["numba", "reference"], threads=threads)[0]
                assert_close(got[threads, nt], want)
                taken = [a for a in built if len(a) > 2 and a[2]]
                assert bool(taken) == (nt and threads == 1), (threads, nt, built)
            np.testing.assert_array_equal(got[threads, True], got[threads, False])
    monkeypatch.setattr(ftile, "ROWS_NT_ONE_THREAD", True)
    monkeypatch.setattr(ftile, "KC", 32)  # K in chunks: the earlier chunks' sums are read back, no nt driver
    monkeypatch.setattr(ftile, "KC12", 32)
    built.clear()
    _one_thread_1x1_against_reference(rng, 1, k_n, m_n, hw)
    assert built and not any(len(a) > 2 and a[2] for a in built), built


@pytest.mark.parametrize("kind_name", ["avx512", "avx512x12"])
@pytest.mark.parametrize("ldo,o_col0", [(256, 0), (256, 16), (784, 0), (260, 0), (256, 4)])
def test_rows_driver_nt_bit_for_bit(rng, kind_name, ldo, o_col0):
    """The rows driver with non-temporal stores (rows_driver_ahead's ``nt``) writes what the plain one writes, on
    every path: the output's rows on 64 bytes (ldo 256, 784 from column 0 or 16) or not (ldo 260, column 4: the
    plain stores), K in one chunk and in three (the earlier chunks' sums read back), with the residual and a
    clamp and without, pixel rows packed and in place; the columns around the written ones untouched."""
    _need("avx512")
    kind = ftile.ROWS12 if kind_name == "avx512x12" else ftile.KIND["avx512"]
    m_n, k_n, n_pix = 20, 37, 200  # two panels of 12 (the last of 8 rows) or three of 8 (the last of 4); 6 x 32 + 8
    w = rng.standard_normal((m_n, k_n)).astype(np.float32)
    x = rng.standard_normal(k_n * n_pix).astype(np.float32)
    z = rng.standard_normal(m_n * ldo).astype(np.float32)
    bias = rng.standard_normal(m_n).astype(np.float32)
    zeros = np.zeros(m_n, np.float32)
    wp = ftile.pack_weights(w, ftile.MR[kind])
    for kc, pack, has_z, lo, hi in ((k_n, False, True, 0.0, np.inf), (13, True, False, -0.5, 0.5),
                                    (k_n, True, False, -np.inf, np.inf), (13, False, True, 0.0, 6.0)):
        outs = []
        for nt in (False, True):
            out = ftile.config.aligned_empty(m_n * ldo, np.float32, 64)
            out[...] = 7.0
            xp = np.zeros(n_pix * kc, np.float32)
            drv = ftile.rows_driver_ahead(kind, 0, nt)
            assert (drv is ftile.rows_driver(kind)) == (not nt)
            blocks = -(-n_pix // 64)
            drv(wp, k_n, m_n, x, 0, n_pix, n_pix, bias, zeros, z, has_z, np.float32(lo), np.float32(hi), out, o_col0,
                ldo, 64, 1, kc, pack, xp, 0, blocks)
            outs.append(out)
        np.testing.assert_array_equal(outs[1], outs[0])
        got = outs[0].reshape(m_n, ldo)
        want = w.astype(np.float64) @ x.reshape(k_n, n_pix) + bias[:, None]
        if has_z:
            want = want + z.reshape(m_n, ldo)[:, o_col0:o_col0 + n_pix]
        want = np.clip(want, lo, hi)
        np.testing.assert_allclose(got[:, o_col0:o_col0 + n_pix], want, rtol=1e-4, atol=1e-4)
        assert (got[:, :o_col0] == 7.0).all() and (got[:, o_col0 + n_pix:] == 7.0).all()
