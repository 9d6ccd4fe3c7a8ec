"""fdirect.py: strided float32 convolutions as direct convolutions on ftile's cols tiles (conv.DIRECT),
against the reference kernels: panels of 48 channels with a last one of 16 or 32, rows not a multiple
of the 7-pixel tile (the overlapping last tile), K in several chunks, residual and clamps, 1-3
threads' shard plans, batch 2, the 7x7/2 stem's shape class, and DIRECT off to the same result."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernelkit.testing import assert_close, run_single_op
from kernelkit_numba.kernels import conv, fdirect, ftile

FEW = settings(max_examples=25, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _need_avx512():
    if not ftile.available("avx512"):
        pytest.skip("the direct convolution runs on avx512 only (this CPU or NUMBA_DISABLE_JIT lacks it)")


@pytest.fixture
def direct_calls(monkeypatch):
    """The calls of fdirect.conv (their stride) while a test runs, with the avx512 variant forced and
    every K taken (DIRECT_MIN_K 0: the stems' K too) and every row length (DIRECT_MIN_FILL 0)."""
    _need_avx512()
    monkeypatch.setenv(ftile.ENV, "avx512")
    monkeypatch.setattr(conv, "DIRECT_MIN_K", 0)
    monkeypatch.setattr(conv, "DIRECT_MIN_FILL", 0.0)
    calls = []
    real = fdirect.conv
    monkeypatch.setattr(fdirect, "conv", lambda *a: (calls.append(a[0]), real(*a)))
    return calls


def _run(x, w, b, z, attrs, threads):
    inputs = [x, w, b] if z is None else [x, w, b, z]
    return run_single_op("Conv", inputs, attrs, constants=(1, 2), vendors=["numba", "reference"],
                         threads=threads)[0]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("m_n", [64, 80, 96])
def test_direct_matches_reference(rng, monkeypatch, direct_calls, threads, m_n):
    """3x3/2 pads 1 from 40@31x33 (rows of 16 and 17 pixels: a last tile overlapping the one before)
    into 64 (48 + 16), 80 (48 + 32) and 96 (2 x 48) channels, K = 360 in chunks of 96, with the residual
    and a clamp; DIRECT off runs another path to the same result."""
    monkeypatch.setattr(fdirect, "KC", 96)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 40, 31, 33), (m_n, 40, 3, 3), (m_n,)))
    plain = {"strides": [2, 2], "pads": [1, 1, 1, 1]}
    attrs = {**plain, "activation": "Clip", "activation_params": [-1.0, 1.5]}
    want0 = run_single_op("Conv", [x, w, b], plain, vendors=["reference"])[0]
    z = rng.standard_normal(want0.shape).astype(np.float32)
    want = run_single_op("Conv", [x, w, b, z], attrs, vendors=["reference"])[0]
    assert_close(_run(x, w, b, None, plain, threads), want0)
    assert_close(_run(x, w, b, z, attrs, threads), want)
    assert direct_calls and set(direct_calls) == {2}
    monkeypatch.setattr(conv, "DIRECT", False)
    direct_calls.clear()
    assert_close(_run(x, w, b, z, attrs, threads), want)
    assert not direct_calls


@pytest.mark.parametrize("threads", [1, 2])
def test_direct_stem_and_stride_3(rng, direct_calls, threads):
    """The stem's class (3 input channels, 7x7/2 pads 3, rows of 49 pixels: 7-pixel tiles) with Relu,
    and a 5x5/3 with asymmetric pads (its own driver, the stride a constant of the tiles)."""
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((1, 3, 98, 98), (64, 3, 7, 7), (64,)))
    attrs = {"strides": [2, 2], "pads": [3, 3, 3, 3], "activation": "Relu"}
    want = run_single_op("Conv", [x, w, b], attrs, vendors=["reference"])[0]
    assert_close(_run(x, w, b, None, attrs, threads), want)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((1, 20, 30, 29), (112, 20, 5, 5), (112,)))
    attrs = {"strides": [3, 3], "pads": [2, 0, 1, 3]}
    want = run_single_op("Conv", [x, w, b], attrs, vendors=["reference"])[0]
    assert_close(_run(x, w, b, None, attrs, threads), want)
    assert set(direct_calls) == {2, 3}


@pytest.mark.parametrize("wide", [(3, 8), (4, 6), None])
def test_direct_wide_rows(rng, monkeypatch, direct_calls, wide):
    """Output rows of 61 pixels (fdirect.WIDE's tiles: 8 pixels, the last tile overlapping; 4 x 6 on 128
    channels, 3 x 8 and 3 x 7 on 80 = 48 + 32), with the residual, K in chunks."""
    monkeypatch.setattr(fdirect, "WIDE", wide)
    monkeypatch.setattr(fdirect, "KC", 20)
    m_n = 128 if wide == (4, 6) else 80
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((1, 5, 9, 121), (m_n, 5, 3, 3), (m_n,)))
    attrs = {"strides": [2, 2], "pads": [1, 1, 1, 1]}
    want0 = run_single_op("Conv", [x, w, b], attrs, vendors=["reference"])[0]
    z = rng.standard_normal(want0.shape).astype(np.float32)
    want = run_single_op("Conv", [x, w, b, z], attrs, vendors=["reference"])[0]
    assert_close(_run(x, w, b, z, attrs, 1), want)
    assert_close(_run(x, w, b, None, attrs, 2), want0)
    assert direct_calls and fdirect.tile_shape(m_n, 61) == (wide or (3, 7))


@pytest.mark.parametrize("threads", [1, 2])
def test_direct_stem_on_wide_tile(rng, monkeypatch, direct_calls, threads):
    """fdirect.WIDE_TILE (issue 11, session 14): the 7x7/2 stem's shape (3 -> 64 channels, pads 3, rows of 60
    pixels: 10 tiles of 6) with Relu on 4 x 6 tiles, one 64-channel panel, against the reference; "3x8" and ""
    (WIDE) name the tiles they say."""
    monkeypatch.setattr(fdirect, "WIDE_TILE", "4x6")
    assert fdirect.tile_shape(64, 112) == (4, 6) and fdirect.tile_shape(80, 112) == (3, fdirect.MP)  # 4 x 6: 64s
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((1, 3, 120, 120), (64, 3, 7, 7), (64,)))
    attrs = {"strides": [2, 2], "pads": [3, 3, 3, 3], "activation": "Relu"}
    want = run_single_op("Conv", [x, w, b], attrs, vendors=["reference"])[0]
    assert_close(_run(x, w, b, None, attrs, threads), want)
    assert direct_calls and set(direct_calls) == {2}
    monkeypatch.setattr(fdirect, "WIDE_TILE", "3x8")
    assert fdirect.tile_shape(64, 112) == (3, 8)
    monkeypatch.setattr(fdirect, "WIDE_TILE", "")
    assert fdirect.tile_shape(64, 112) == fdirect.WIDE


def test_default_dispatch(rng, monkeypatch):
    """By default (avx512): ResNet's 3x3/2 layers and the 512@7 3x3 layers direct, the 7x7/2 stem (K =
    147) on the implicit GEMM (DIRECT_MIN_K), strided layers with rows of 10 or 15 pixels (7-pixel tiles
    filled by 0.71: DIRECT_MIN_FILL) on im2col + the rows tiles, with the same results."""
    _need_avx512()
    monkeypatch.setenv(ftile.ENV, "avx512")
    calls = []
    real = fdirect.conv
    monkeypatch.setattr(fdirect, "conv", lambda *a: (calls.append(a[0]), real(*a)))
    avx512 = ftile.KIND["avx512"]
    assert conv.direct_wins(avx512, 3, 3, 2, 2, 1, 1, 128, 28, 784, 576)
    assert conv.direct_wins(avx512, 3, 3, 1, 1, 1, 1, 512, 7, 49, 4608)
    assert not conv.direct_wins(avx512, 7, 7, 2, 2, 1, 1, 64, 112, 12544, 147)
    assert conv.direct_wins(avx512, 3, 3, 2, 2, 1, 1, 256, 20, 400, 1152)  # rows of 20 in 21: the head's 40 -> 20
    assert not conv.direct_wins(avx512, 3, 3, 2, 2, 1, 1, 512, 10, 100, 2304)  # Conv_107: 10 in 14
    assert not conv.gather_wins(avx512, 3, 3, 2, 2, 1, 1, 10, 2304, 512, 100)  # im2col + the rows tiles
    monkeypatch.setattr(conv, "DIRECT_MIN_FILL", 0.0)
    assert conv.direct_wins(avx512, 3, 3, 2, 2, 1, 1, 512, 10, 100, 2304)
    monkeypatch.setattr(conv, "DIRECT_MIN_FILL", 0.85)
    for xs, ws, attrs, direct in [((1, 3, 60, 60), (64, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}, False),
                                  ((1, 32, 7, 7), (64, 32, 3, 3), {"pads": [1, 1, 1, 1]}, True),
                                  ((2, 128, 7, 7), (64, 128, 3, 3), {"pads": [1, 1, 1, 1]}, True),  # not F(2x2)
                                  ((1, 32, 28, 28), (64, 32, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, True),
                                  ((1, 32, 30, 30), (64, 32, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, False),
                                  ((1, 64, 20, 20), (128, 64, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}, False)]:
        calls.clear()
        x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
        want = run_single_op("Conv", [x, w], attrs, vendors=["reference"])[0]
        got = run_single_op("Conv", [x, w], attrs, constants=(1,), vendors=["numba", "reference"])[0]
        assert_close(got, want)
        assert bool(calls) == direct, (xs, ws)


@pytest.mark.parametrize("threads", [1, 2])
def test_unfilled_rows_on_cols_tiles(rng, monkeypatch, threads):
    """A strided layer whose rows of 10 pixels fill fdirect's 7-pixel tiles by 0.71 (the detection head's
    Conv_107 class, DIRECT_MIN_FILL): im2col + the cols tiles (UNFILLED_COLS), with the bias and Relu; the
    rows tiles when UNFILLED_COLS is off, and fdirect at DIRECT_MIN_FILL 0, to the same result (one and two
    threads)."""
    _need_avx512()
    monkeypatch.setenv(ftile.ENV, "avx512")
    calls = []
    for name in ("conv_cols", "conv_tiles"):
        real = getattr(ftile, name)
        monkeypatch.setattr(ftile, name, lambda *a, real=real, name=name: (calls.append(name), real(*a))[1])
    direct = []
    real_direct = fdirect.conv
    monkeypatch.setattr(fdirect, "conv", lambda *a: (direct.append(a[0]), real_direct(*a))[1])
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((1, 64, 20, 20), (128, 64, 3, 3), (128,)))
    attrs = {"strides": [2, 2], "pads": [1, 1, 1, 1], "activation": "Relu"}
    want = run_single_op("Conv", [x, w, b], attrs, vendors=["reference"])[0]
    assert_close(_run(x, w, b, None, attrs, threads), want)
    assert set(calls) == {"conv_cols"} and not direct
    calls.clear()
    monkeypatch.setattr(conv, "UNFILLED_COLS", False)
    assert_close(_run(x, w, b, None, attrs, threads), want)
    assert set(calls) == {"conv_tiles"} and not direct
    monkeypatch.setattr(conv, "DIRECT_MIN_FILL", 0.0)
    assert_close(_run(x, w, b, None, attrs, threads), want)
    assert direct or threads > 1  # (one image at two threads: rnpair's pair of fdirect)


def test_direct_not_taken(rng, monkeypatch, direct_calls):
    """Too few channels, a map of rows under 7 pixels, a dilation, or a variant other than avx512:
    the other paths."""
    for xs, ws, attrs in [((1, 8, 30, 30), (32, 8, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
                          ((1, 8, 11, 11), (64, 8, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
                          ((1, 8, 30, 30), (64, 8, 3, 3), {"strides": [2, 2], "dilations": [2, 2]})]:
        x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
        want = run_single_op("Conv", [x, w], attrs, vendors=["reference"])[0]
        got = run_single_op("Conv", [x, w], attrs, constants=(1,), vendors=["numba", "reference"])[0]
        assert_close(got, want)
    assert not direct_calls
    assert not conv.direct_wins(ftile.KIND["avx2"], 3, 3, 2, 2, 1, 1, 64, 28, 784, 576)
    assert conv.direct_wins(ftile.KIND["avx512"], 3, 3, 2, 2, 1, 1, 64, 28, 784, 576)
    assert not conv.direct_wins(ftile.KIND["avx512"], 3, 3, 1, 1, 1, 1, 512, 14, 196, 4608)
    monkeypatch.setattr(conv, "DIRECT_SMALL", False)
    assert not conv.direct_wins(ftile.KIND["avx512"], 3, 3, 1, 1, 1, 1, 512, 7, 49, 4608)


@st.composite
def strided_cases(draw):
    """Convolutions the direct path takes: 64-128 output channels in 16s, kernels 2-7, strides 2-3 on
    maps whose output rows have 7-12 pixels, or stride 1 on maps of at most 8x8 outputs, any pads, fused
    and unfused activations."""
    k = draw(st.integers(2, 7))
    s = draw(st.integers(1, 3))
    pads = [draw(st.integers(0, min(3, k - 1))) for _ in range(4)]
    ow = draw(st.integers(7, 8 if s == 1 else 12))
    w_in = (ow - 1) * s + k - pads[1] - pads[3] + draw(st.integers(0, s - 1))
    if s == 1:  # stride 1: maps of at most 64 output pixels (DIRECT_SMALL_PIXELS)
        h_in = (draw(st.integers(1, 8)) - 1) + k - pads[0] - pads[2]
        if h_in < 1:
            h_in, pads[0], pads[2] = k, 0, 0
    else:
        h_in = draw(st.integers(max(1, k - pads[0] - pads[2]), 20))
    c = draw(st.integers(1, 12))
    m = 16 * draw(st.integers(4, 8))
    act, params = draw(st.sampled_from([("", ()), ("Relu", ()), ("Clip", (-0.5, 0.5)), ("LeakyRelu", (0.2,))]))
    attrs = {"strides": [s, s], "pads": pads, "activation": act, "activation_params": list(params)}
    return (draw(st.integers(1, 2)), c, h_in, w_in), (m, c, k, k), attrs, draw(st.integers(0, 2**16))


@pytest.fixture
def small_on(monkeypatch):
    monkeypatch.setattr(conv, "DIRECT_SMALL", True)


@FEW
@given(strided_cases())
def test_direct_matches_reference_hypothesis(direct_calls, small_on, case):
    x_shape, w_shape, attrs, seed = case
    r = np.random.default_rng(seed)
    x = r.uniform(-1, 1, x_shape).astype(np.float32)
    w = r.uniform(-1, 1, w_shape).astype(np.float32)
    b = r.uniform(-1, 1, w_shape[0]).astype(np.float32)
    want = run_single_op("Conv", [x, w, b], attrs, vendors=["reference"])[0]
    got = run_single_op("Conv", [x, w, b], attrs, constants=(1, 2), vendors=["numba"], fallback=False)[0]
    assert_close(got, want, err_msg=f"{x_shape} {w_shape} {attrs}")
    assert direct_calls


@pytest.mark.parametrize("ahead", [8, 3])
@pytest.mark.parametrize("m_n", [80, 96])
def test_direct_weights_ahead(rng, monkeypatch, direct_calls, ahead, m_n):
    """fdirect.AHEAD (the tiles' weights prefetched ``ahead`` steps on into L1): 3x3/2 pads 1 from 40@29x31
    into 80 (48 + 32) and 96 channels at one thread, K = 360 in chunks of 96 (the last chunk's prefetches
    run past its panel), with and without the residual, Relu, against the reference; the driver taken is
    the prefetching one."""
    monkeypatch.setattr(fdirect, "KC", 96)
    monkeypatch.setattr(fdirect, "AHEAD", ahead)
    built = []
    real = fdirect.driver_ahead
    monkeypatch.setattr(fdirect, "driver_ahead", lambda *a: (built.append(a[3]), real(*a))[1])
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((1, 40, 29, 31), (m_n, 40, 3, 3), (m_n,)))
    plain = {"strides": [2, 2], "pads": [1, 1, 1, 1]}
    attrs = {**plain, "activation": "Relu"}
    want0 = run_single_op("Conv", [x, w, b], plain, vendors=["reference"])[0]
    z = rng.standard_normal(want0.shape).astype(np.float32)
    want = run_single_op("Conv", [x, w, b, z], attrs, vendors=["reference"])[0]
    assert_close(_run(x, w, b, None, plain, 1), want0)
    assert_close(_run(x, w, b, z, attrs, 1), want)
    assert direct_calls and set(built) == {ahead}


@pytest.mark.parametrize("m_n, ow_n", [(64, 14), (96, 28), (128, 14), (80, 14)])
def test_direct_one_thread_tile(rng, monkeypatch, direct_calls, m_n, ow_n):
    """fdirect.TILE_ONE_THREAD "2x14" (issue 11, session 17): 3x3/2 pads 1 into rows of 14 and 28 pixels (one and two
    tiles of 14; its store in two transposed groups of 7) on panels of 32 channels (64, 96, 128), K = 360 in chunks
    of 96 (partial sums in the scratch), with and without the residual, Relu and a clamp, batch 2, against the
    reference at one thread; the 2 x 14 driver taken at one thread only, and not where it does not fit (80
    channels: not whole panels of 32; rows of 7 and the wide rows)."""
    monkeypatch.setattr(fdirect, "KC", 96)
    monkeypatch.setattr(fdirect, "TILE_ONE_THREAD", "2x14")
    shapes = []
    real = fdirect.driver_ahead
    monkeypatch.setattr(fdirect, "driver_ahead", lambda *a: (shapes.append(a[1:3]), real(*a))[1])
    h = 2 * ow_n  # (3x3/2 pads 1: ResNet's 56 -> 28, 28 -> 14)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((2, 40, h, h), (m_n, 40, 3, 3), (m_n,)))
    plain = {"strides": [2, 2], "pads": [1, 1, 1, 1]}
    attrs = {**plain, "activation": "Relu"}
    clip = {**plain, "activation": "Clip", "activation_params": [-0.5, 2.0]}
    want0 = run_single_op("Conv", [x, w, b], plain, vendors=["reference"])[0]
    assert want0.shape[-1] == ow_n
    z = rng.standard_normal(want0.shape).astype(np.float32)
    want = run_single_op("Conv", [x, w, b, z], attrs, vendors=["reference"])[0]
    want_c = run_single_op("Conv", [x, w, b, z], clip, vendors=["reference"])[0]
    assert_close(_run(x, w, b, None, plain, 1), want0)
    assert_close(_run(x, w, b, z, attrs, 1), want)
    assert_close(_run(x, w, b, z, clip, 1), want_c)
    fits = m_n % 32 == 0
    assert direct_calls and set(shapes) == ({(2, 14)} if fits else {(3, fdirect.MP)})
    shapes.clear()
    assert_close(_run(x, w, b, z, attrs, 2), want)
    assert (2, 14) not in shapes
    assert fdirect.tile_shape(128, 7, 1) == (3, fdirect.MP) and fdirect.tile_shape(64, 112, 1) == fdirect.WIDE
    assert fdirect.tile_shape(128, 28, 2) == (3, fdirect.MP) and fdirect.tile_shape(128, 28, 1) == (2, 14)


@pytest.mark.parametrize("tile", ["", "2x14"])
@pytest.mark.parametrize("n_n, c_n, hw, m_n", [(1, 40, 28, 80), (2, 300, 56, 64), (1, 120, 14, 96), (2, 136, 27, 112)])
def test_sub_direct_one_thread(rng, monkeypatch, tile, n_n, c_n, hw, m_n):
    """conv_serial.SUB_DIRECT_ONE_THREAD (issue 11, session 17): a one-thread session's 1x1/2 convolution on fdirect's
    tiles over the input in place (no subsampled copy): maps 28 -> 14, 56 -> 28, 14 -> 7 and 27 -> 14 (an odd map: its
    last row and column read), 80 (48 + 32), 64, 96 and 112 (48 + 48 + 16) channels (panels of 32 on 2 x 14 where the
    rows are whole tiles of 14), K = 300 in chunks of 96 (partial sums in the scratch), batch 2, with and without the
    residual, Relu, against the reference; the driver taken at one thread, and neither at two threads nor with the
    switch off (the subsampled copy: the same values within the tolerance)."""
    from kernelkit_numba.kernels import conv_serial

    _need_avx512()
    monkeypatch.setenv(ftile.ENV, "avx512")
    monkeypatch.setattr(fdirect, "KC", 96)
    monkeypatch.setattr(fdirect, "TILE_ONE_THREAD", tile)
    monkeypatch.setattr(conv_serial, "SUB_DIRECT_ONE_THREAD", True)
    shapes = []
    real = fdirect.driver_ahead
    monkeypatch.setattr(fdirect, "driver_ahead", lambda *a: (shapes.append(a[:3]), real(*a))[1])
    out_hw = -(-hw // 2)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((n_n, c_n, hw, hw), (m_n, c_n, 1, 1), (m_n,)))
    z = rng.standard_normal((n_n, m_n, out_hw, out_hw)).astype(np.float32)
    cases = (([x, w, b, z], {"strides": [2, 2], "activation": "Relu"}), ([x, w, b], {"strides": [2, 2]}))
    wants = [run_single_op("Conv", inputs, attrs, vendors=["reference"])[0] for inputs, attrs in cases]
    for (inputs, attrs), want in zip(cases, wants):
        got = run_single_op("Conv", inputs, attrs, constants=(1, 2), vendors=["numba", "reference"], threads=1)[0]
        assert_close(got, want)
    wide = tile == "2x14" and out_hw % 14 == 0 and m_n % 32 == 0
    assert set(shapes) == {(2, 2, 14) if wide else (2, 3, fdirect.MP)}, shapes
    shapes.clear()
    for threads in (2, 1):
        if threads == 1:
            monkeypatch.setattr(conv_serial, "SUB_DIRECT_ONE_THREAD", False)
        for (inputs, attrs), want in zip(cases, wants):
            got = run_single_op("Conv", inputs, attrs, constants=(1, 2), vendors=["numba", "reference"],
                                threads=threads)[0]
            assert_close(got, want)
    assert not shapes
