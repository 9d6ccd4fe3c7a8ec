"""Even halves for the serial pairs' 1x1 layers (issue 11, session 16; docs/numba.md, "MobileNetV2's small layers at
two threads"): cpair.SPLIT_SERIAL (the cols panel at the middle split by pixels in a one-image serial pair, as
COLS_SPLIT's in the bound parallel call), cpair.PIXEL_EVEN (a cut by pixels at the tile boundary nearest the middle)
and cpair.SERIAL_COLS_MAX (the 14x14 layers' pairs on the cols tiles). Each half is one call of the one-thread driver
over its part, so the caller alone (the helper 'spinning' but never coming) equals the one-thread path bit for bit and
the helper's half run by hand equals the caller's copy (test_cpair's check), and the cut is the even one: odd panel
counts (160 and 320 channels of 48-channel panels, 40 channels of 8-row panels), maps whose last tile is short (196,
784 pixels), the residual and the clamp; the depthwise layer after a split expansion cuts its planes at the split
panel's end. cpair.K_SPLIT (a projection's input channels cut between the sides, the caller adding the two sides' sums
after the join) sums in another order: against the reference and the one-thread path within the fp32 tolerances, the
helper's side against the caller's bit for bit."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from kernelkit_numba.kernels import cpair, dwtile, ftile, pairs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # (test_cpair's layers and helpers)
from _conv_layers import _graph_conv, _k_side_by_hand  # noqa: E402
from test_cpair import CLIP6, _alone, _calls, _check_halves, _dw, _last_desc, _layer, _out_shape, _run  # noqa: E402, I001

pytestmark = [pytest.mark.skipif(not pairs.X86, reason="pairs need x86-64 (pause, the cycle counter)"),
              pytest.mark.skipif(ftile.choice()[0] != cpair.KIND or not dwtile.enabled(),
                                 reason="conv pairs run on the AVX-512 tiles")]

# (x shape, weight shape, attrs, bias, residual): MobileNetV2's 7x7 projections on the cols tiles (160 channels:
# three 48-channel panels and one of 16; 320: six and one of 32; with the residual), an expansion there (960: 20
# panels, no split), projections by pixels at 14x14 (196 pixels: six tiles of 32 and one of 4) and 28x28 (784), with
# the residual, and an odd channel count by pixels (40 channels: five 8-row panels)
COLS = [
    ((1, 960, 7, 7), (160, 960, 1, 1), {}, True, True),
    ((1, 576, 7, 7), (160, 576, 1, 1), {}, True, False),
    ((1, 960, 7, 7), (320, 960, 1, 1), {}, True, False),
    ((1, 160, 7, 7), (960, 160, 1, 1), CLIP6, True, False),
]
PIXELS = [
    ((1, 576, 14, 14), (96, 576, 1, 1), {}, True, True),
    ((1, 384, 14, 14), (64, 384, 1, 1), {}, False, True),
    ((1, 192, 28, 28), (32, 192, 1, 1), {}, True, True),
    ((1, 120, 14, 14), (40, 120, 1, 1), CLIP6, True, False),
]


@pytest.fixture(autouse=True)
def pair_tiles(monkeypatch):
    """The one-thread path on the pairs' tiles (test_cpair's two_thread_tiles: the rows tiles at 14x14, where a
    one-thread session takes the cols ones; and the 8-row ones, where it takes the 12-row ones from 96 weight rows:
    ftile.ROWS12_ONE_THREAD, whose sums may round the last bit otherwise), so that the halves equal it bit for bit."""
    from kernelkit_numba.kernels import conv

    monkeypatch.setattr(conv, "FTILE_COLS_MAX_ONE_THREAD", conv.FTILE_COLS_MAX)
    monkeypatch.setattr(ftile, "ROWS12_ONE_THREAD", False)


def _ids(c):
    return f"{c[0][1]}x{c[0][2]}-{c[1][0]}" + ("+Z" if c[4] else "")


def _desc(case, srv):
    """(the descriptor of the layer's pair after one call of the caller alone (the helper never comes), the layer's
    output shape)."""
    x, w, b, z, attrs = _layer(case)
    shape = _out_shape(x.shape, w.shape, attrs)
    _f1, f2 = _calls(x, w, b, z, attrs)
    srv.ctl[pairs.AWAKE] = 1
    _run(f2, x, w, b, z, shape)
    return _last_desc(srv, f2), shape


def _share(desc, side: int, m_n: int, l_n: int, cols: bool) -> int:
    """The outputs (channels x pixels) a side of the descriptor computes."""
    b = cpair.SIDE0 + side * cpair.SIDE_N
    if cols:
        width = ftile.COLS_WIDTH[cpair.KIND]
        c0, c1 = int(desc[b + cpair.S_C0]) * width, min(m_n, int(desc[b + cpair.S_MC]) * width)
        whole = max(0, c1 - c0) * l_n
        if desc[b + cpair.S_NP] > 0:  # the split panel's pixels
            q = int(desc[b + cpair.S_BLOCK])
            whole += (min(m_n, (q + 1) * width) - q * width) * int(desc[b + cpair.S_NP])
        return whole
    return int(desc[b + cpair.S_MC]) * int(desc[b + cpair.S_NP])


def _even_cols(desc, shape) -> int:
    """A cols pair: its sides compute every output once, within one 7-pixel tile of a panel of half each; the
    layer's channel count."""
    assert desc[cpair.OP] == cpair.COLS
    m_n, l_n = shape[1], shape[2] * shape[3]
    s0, s1 = _share(desc, 0, m_n, l_n, True), _share(desc, 1, m_n, l_n, True)
    assert s0 + s1 == m_n * l_n
    assert abs(s0 - s1) <= 2 * ftile.COLS_WIDTH[cpair.KIND] * ftile.COLS_MP[cpair.KIND]
    return m_n


@pytest.mark.parametrize("case", COLS, ids=_ids)
def test_split_serial_cols(case, quiet_server, monkeypatch):
    """SPLIT_SERIAL: both halves equal the one-thread path bit for bit (test_cpair's check), and each side
    computes half of the outputs within one 7-pixel tile of a panel."""
    monkeypatch.setattr(cpair, "SPLIT_SERIAL", True)
    _check_halves(case, quiet_server)
    desc, shape = _desc(case, quiet_server)
    m_n = _even_cols(desc, shape)
    if m_n % (2 * ftile.COLS_WIDTH[cpair.KIND]):  # an odd panel count: a panel split by pixels
        assert desc[cpair.SIDE0 + cpair.S_NP] > 0 and desc[cpair.SIDE0 + cpair.SIDE_N + cpair.S_NP] > 0


@pytest.mark.parametrize("case", COLS[:3], ids=_ids)
def test_whole_panels_without_the_switch(case, quiet_server, monkeypatch):
    """SPLIT_SERIAL off: the serial pair keeps whole panels (the caller the first half, rounded up)."""
    monkeypatch.setattr(cpair, "SPLIT_SERIAL", False)
    desc, shape = _desc(case, quiet_server)
    assert desc[cpair.SIDE0 + cpair.S_NP] == 0
    panels = -(-shape[1] // ftile.COLS_WIDTH[cpair.KIND])
    assert desc[cpair.SIDE0 + cpair.S_MC] == -(-panels // 2)


@pytest.mark.parametrize("case", PIXELS, ids=_ids)
def test_pixel_even(case, quiet_server, monkeypatch):
    """PIXEL_EVEN on a projection by pixels (PIXEL_TILES 1: every projection by pixels): both halves equal the
    one-thread path bit for bit, and the cut is the tile boundary nearest the middle pixel."""
    monkeypatch.setattr(cpair, "PIXEL_TILES", 1)
    monkeypatch.setattr(cpair, "PIXEL_EVEN", True)
    monkeypatch.setattr(cpair, "K_SPLIT", 0)  # (the projections' halves by pixels, not their K cut)
    _check_halves(case, quiet_server)
    desc, shape = _desc(case, quiet_server)
    assert desc[cpair.OP] == cpair.ROWS
    nr, l_n = ftile.NR[cpair.KIND], shape[2] * shape[3]
    p = int(desc[cpair.SIDE0 + cpair.SIDE_N + cpair.S_P0])
    assert p % nr == 0 and abs(p - l_n / 2) <= nr / 2
    assert desc[cpair.SIDE0 + cpair.S_NP] == p and desc[cpair.SIDE0 + cpair.SIDE_N + cpair.S_NP] == l_n - p
    monkeypatch.setattr(cpair, "PIXEL_EVEN", False)  # the old cut: the first half of the tiles, rounded up
    desc, _shape = _desc(case, quiet_server)
    tiles = -(-l_n // nr)
    assert desc[cpair.SIDE0 + cpair.SIDE_N + cpair.S_P0] == -(-tiles // 2) * nr


def test_depthwise_after_a_split_expansion(quiet_server, monkeypatch):
    """A 7x7 expansion of 176 channels (three 48-channel panels and one of 32) split by pixels records its channel
    cut at the split panel's end for the depthwise layer that reads it (_cuts, by the output's name); depthwise
    halves of odd plane counts (176 at stride 1 with the residual, 344 at stride 2) match the reference
    (test_cpair's check)."""
    from test_cpair import _kernel

    monkeypatch.setattr(cpair, "SPLIT_SERIAL", True)
    monkeypatch.setattr(cpair, "_cuts", {})
    x, w, b, z, attrs = _layer(((1, 96, 7, 7), (176, 96, 1, 1), CLIP6, True, False))
    step = type("Step", (), {"outputs": ("e",), "inputs": ("x",)})()
    pair = cpair.tiles_pair(_kernel(x, w, b, z, attrs, 2), step, True, (1, 176, 7, 7), 96, 49, 0.0, 6.0, False)
    assert pair is not None and pair.desc[cpair.SIDE0 + cpair.S_NP] > 0
    assert cpair._cuts[("e", 176)] == 2 * ftile.COLS_WIDTH[cpair.KIND]
    for c, stride, res in ((176, 1, True), (344, 2, False)):  # (344: 21.5 vectors of 16 planes)
        quiet_server.ctl[:] = 0  # (each check counts its jobs from the first)
        quiet_server.stats.update(alone=0, paired=0)
        _check_halves(((1, c, 14, 14), (c, 1, 3, 3), _dw(c, stride), True, res), quiet_server)


# MobileNetV2's 1x1 layers at 14x14 that SERIAL_COLS_MAX puts on the cols tiles (K of 128 or more, channels in
# 16s): 96 channels (two 48-channel panels), 64 (a panel and one of 16, split by pixels), with the residual
SERIAL_COLS = [
    ((1, 576, 14, 14), (96, 576, 1, 1), {}, True, True),
    ((1, 384, 14, 14), (64, 384, 1, 1), {}, False, True),
    ((1, 192, 14, 14), (64, 192, 1, 1), {}, True, False),
    ((1, 160, 14, 14), (176, 160, 1, 1), CLIP6, True, False),
]


@pytest.mark.parametrize("case", SERIAL_COLS, ids=_ids)
def test_serial_cols_max(case, quiet_server, monkeypatch):
    """SERIAL_COLS_MAX 196: a 14x14 layer's serial pair takes the cols tiles, as the one-thread path does
    (conv.FTILE_COLS_MAX_ONE_THREAD), both halves equal that path bit for bit, and the cut is even (a panel split by
    pixels where the panels are odd); 0: the rows tiles."""
    from kernelkit_numba.kernels import conv

    monkeypatch.setattr(conv, "FTILE_COLS_MAX_ONE_THREAD", 196)  # (the one-thread path's own rule)
    monkeypatch.setattr(cpair, "SERIAL_COLS_MAX", 196)
    _check_halves(case, quiet_server)
    _even_cols(*_desc(case, quiet_server))
    monkeypatch.setattr(cpair, "SERIAL_COLS_MAX", 0)
    assert _desc(case, quiet_server)[0][cpair.OP] == cpair.ROWS


def test_serial_cols_max_keeps_small_k_on_rows(quiet_server, monkeypatch):
    """An expansion of K 64 at 14x14 (MobileNetV2's 64 -> 384) stays on the rows tiles with SERIAL_COLS_MAX (K below
    conv.FTILE_COLS_MIN_K), paired by channels as before."""
    monkeypatch.setattr(cpair, "SERIAL_COLS_MAX", 196)
    desc, _shape = _desc(((1, 64, 14, 14), (384, 64, 1, 1), CLIP6, True, False), quiet_server)
    assert desc[cpair.OP] == cpair.ROWS and desc[cpair.SIDE0 + cpair.SIDE_N + cpair.S_C0] == 192


def _tail_model(rng):
    """MobileNetV2's 14x14 and 7x7 blocks in a row: 96 -> 576 at 14x14, depthwise, 576 -> 96 with the residual, then
    96 -> 576, a stride-2 depthwise to 7x7 and 576 -> 160, with its input."""
    from kernelkit.builder import GraphBuilder

    g = GraphBuilder("tail")
    x = g.input("x", (1, 96, 14, 14))

    def conv(t, m, c, k, clip=True, **attrs):
        y = _graph_conv(g, rng, t, m, c, k, **attrs)
        return g.op("Clip", y, g.constant(np.float32(0)), g.constant(np.float32(6))) if clip else y

    e = conv(x, 576, 96, 1)
    d = conv(e, 576, 1, 3, group=576, pads=[1, 1, 1, 1])
    r = g.op("Add", conv(d, 96, 576, 1, clip=False), x)
    e2 = conv(r, 576, 96, 1)
    d2 = conv(e2, 576, 1, 3, group=576, pads=[1, 1, 1, 1], strides=[2, 2])
    g.output(conv(d2, 160, 576, 1, clip=False))
    return g.build(), {"x": rng.standard_normal((1, 96, 14, 14)).astype(np.float32)}


def _tail_pairs(monkeypatch, session_pair_calls, seed: int):
    """_tail_model (its weights and input of ``seed``) in a two-thread session, the helper's thread running: 30 pair
    calls taken, each run's output equal to the reference's and the one-thread run's within the fp32 tolerances.
    The shard pool's workers read as neither spinning nor asleep (as test_cpair's batch test): a worker another test
    left spinning sends a one-image layer to the pool instead of its pair (conv_serial._pair_now), which on CI's two
    busy cores took 11 of the 30 calls in 60 s."""
    from kernelkit import Session
    from kernelkit_numba import shards

    model, feeds = _tail_model(np.random.default_rng(seed))
    want = Session(model, vendors=["reference"]).run(None, feeds)[0]
    one = Session(model, vendors=["numba"], threads=1).run(None, feeds)[0]
    monkeypatch.setattr(shards.POOL, "workers_spinning", lambda: False)
    monkeypatch.setattr(shards.POOL, "workers_asleep", lambda: False)
    sess = Session(model, vendors=["numba"], fallback=False, threads=2)
    assert session_pair_calls(sess, feeds, want, one, 30)[0] >= 30


def test_switches_through_a_two_thread_session(monkeypatch, session_pair_calls):
    """With SPLIT_SERIAL, PIXEL_EVEN and SERIAL_COLS_MAX on, the 14x14 and 7x7 blocks in a two-thread session (the
    helper's thread running) pair and equal the reference and the one-thread run within the fp32 tolerances."""
    for name, value in (("SPLIT_SERIAL", True), ("PIXEL_EVEN", True), ("SERIAL_COLS_MAX", 196)):
        monkeypatch.setattr(cpair, name, value)
    _tail_pairs(monkeypatch, session_pair_calls, 11)


# K_SPLIT's projections: 576 -> 96 and 384 -> 64 at 14x14 with the residual, 192 -> 32 at 28x28 with the residual, an
# odd K (385) onto 36 channels (four 8-row panels and one of 4) with the clamp
K_LAYERS = [
    ((1, 576, 14, 14), (96, 576, 1, 1), {}, True, True),
    ((1, 384, 14, 14), (64, 384, 1, 1), {}, False, True),
    ((1, 192, 28, 28), (32, 192, 1, 1), {}, True, True),
    ((1, 385, 14, 14), (36, 385, 1, 1), CLIP6, True, False),
]


@pytest.mark.parametrize("case", K_LAYERS, ids=_ids)
def test_k_split(case, quiet_server, monkeypatch):
    """K_SPLIT 784: the caller alone (both sides, then the sums and the epilogue) equals the reference and the
    one-thread path within the fp32 tolerances; the helper's side run by hand writes the same partial sums as the
    caller's run of it, bit for bit, into the layer's buffer and nothing into the output; the cut is the middle
    rounded to 16 where the input's writer is unknown."""
    from kernelkit.testing import assert_close
    from test_cpair import _reference

    monkeypatch.setattr(cpair, "K_SPLIT", 784)
    srv = quiet_server
    (x, w, b, z, attrs), shape, want, alone, desc = _alone(case, srv)
    assert srv.stats["alone"] == 1 and srv.stats["paired"] == 0
    assert_close(alone, _reference(x, w, b, z, attrs), np.float32)
    assert_close(alone, want, np.float32)
    k_n, m_n, l_n = w.shape[1], shape[1], shape[2] * shape[3]
    assert desc[cpair.OP] == cpair.ROWS and desc[cpair.KS_CUT] == (k_n // 2 + 8) // 16 * 16
    _k_side_by_hand(srv, desc, shape, m_n, l_n)


@pytest.mark.parametrize("case", K_LAYERS[:2], ids=_ids)
def test_k_solo(case, quiet_server, monkeypatch):
    """K_SOLO (on, with K_SPLIT on by default): a K-cut pair refused (the helper asleep) runs both sides and the sums
    on the caller, bit for bit the pair's output whether the helper came or not; K_SOLO off: the one-thread path's
    call over the whole K instead (within the fp32 tolerances of the K cut's)."""
    from kernelkit.testing import assert_close

    assert cpair.K_SPLIT >= 196 and cpair.K_SOLO
    srv = quiet_server
    (x, w, b, z, attrs), shape, want, alone, desc = _alone(case, srv)
    assert desc[cpair.KS_CUT] > 0 and srv.stats["alone"] == 1
    f1, f2 = _calls(x, w, b, z, attrs)
    for first in (True, False):  # its first call refused (pair_run's dispatcher), then after a pair (its entry)
        srv.ctl[pairs.AWAKE] = 0  # asleep: the pair refuses (and wakes it), the caller runs the K cut alone
        paired, alone_n = srv.stats["paired"], srv.stats["alone"]
        solo = _run(f2, x, w, b, z, shape)
        assert srv.stats["paired"] == paired and srv.stats["alone"] == alone_n
        np.testing.assert_array_equal(solo, alone)
        if first:
            srv.ctl[pairs.AWAKE] = 1
            np.testing.assert_array_equal(_run(f2, x, w, b, z, shape), alone)
            assert srv.stats["alone"] == alone_n + 1
    monkeypatch.setattr(cpair, "K_SOLO", False)
    srv.ctl[pairs.AWAKE] = 0
    one = _run(f2, x, w, b, z, shape)
    np.testing.assert_array_equal(one, want)  # (the one-thread path's bits)
    assert_close(one, solo, np.float32)


# K_SPLIT_COLS's projections on the cols tiles: MobileNetV2's 960 -> 160 +Z and 960 -> 320 at 7x7, an odd K (385) onto
# 112 channels (two 48-channel panels and one of 16) with the clamp
K_COLS = [
    ((1, 960, 7, 7), (160, 960, 1, 1), {}, True, True),
    ((1, 960, 7, 7), (320, 960, 1, 1), {}, True, False),
    ((1, 385, 7, 7), (112, 385, 1, 1), CLIP6, True, False),
]


@pytest.mark.parametrize("case", K_COLS, ids=_ids)
def test_k_split_cols(case, quiet_server, monkeypatch):
    """K_SPLIT_COLS 49: the caller alone (every panel on both sides, then the sums and the epilogue) equals the
    reference and the one-thread path within the fp32 tolerances; the helper's side run by hand writes the caller's
    partial sums bit for bit into the layer's buffer and nothing into the output; a refused pair (K_SOLO) the caller
    alone's bits; off, an expansion and a K below K_SPLIT_MIN_K: no cut."""
    from kernelkit.testing import assert_close
    from test_cpair import _reference

    monkeypatch.setattr(cpair, "K_SPLIT_COLS", 0)
    assert _desc(case, quiet_server)[0][cpair.KS_CUT] == 0
    monkeypatch.setattr(cpair, "K_SPLIT_COLS", 49)
    srv = quiet_server
    (x, w, b, z, attrs), shape, want, alone, desc = _alone(case, srv)
    assert_close(alone, _reference(x, w, b, z, attrs), np.float32)
    assert_close(alone, want, np.float32)
    k_n, m_n, l_n = w.shape[1], shape[1], shape[2] * shape[3]
    panels = -(-m_n // ftile.COLS_WIDTH[cpair.KIND])
    assert desc[cpair.OP] == cpair.COLS and desc[cpair.KS_CUT] == (k_n // 2 + 8) // 16 * 16
    side1 = cpair.SIDE0 + cpair.SIDE_N
    assert tuple(desc[cpair.SIDE0:cpair.SIDE0 + 4]) == tuple(desc[side1:side1 + 4]) == (0, panels, 0, 0)
    _k_side_by_hand(srv, desc, shape, m_n, l_n)
    f1, f2 = _calls(x, w, b, z, attrs)
    srv.ctl[pairs.AWAKE] = 0  # asleep: refused, the caller runs the K cut alone (K_SOLO)
    np.testing.assert_array_equal(_run(f2, x, w, b, z, shape), alone)
    srv.ctl[pairs.AWAKE] = 1
    if z is not None:  # the output over its residual: the residual copied first (side 0's sums go into the output)
        over = np.array(z, copy=True)
        f2(x, w, b, over, out=over)
        np.testing.assert_array_equal(over, alone)
    for small in (((1, 160, 7, 7), (960, 160, 1, 1), CLIP6, True, False),
                  ((1, 120, 7, 7), (96, 120, 1, 1), {}, True, False)):
        assert _desc(small, srv)[0][cpair.KS_CUT] == 0


@pytest.mark.parametrize("case", [((1, 144, 56, 56), (144, 1, 3, 3), _dw(144), True, True),
                                  ((1, 384, 14, 14), (384, 1, 3, 3), _dw(384), True, False),
                                  ((1, 960, 7, 7), (960, 1, 3, 3), _dw(960), True, False),
                                  ((1, 192, 28, 28), (192, 1, 3, 3), _dw(192, 2), True, False)], ids=_ids)
def test_dw_solo(case, quiet_server, monkeypatch):
    """DW_SOLO (on): a depthwise pair refused (the helper asleep) runs both halves on the caller, bit for bit the
    pair's output with the caller alone, whatever bits dwtile's plane driver alone gives (stride 1: the last bits
    otherwise); off, the serial plane driver's output, the one-thread path's; both within the tolerances."""
    from kernelkit.testing import assert_close

    assert cpair.DW_SOLO
    srv = quiet_server
    (x, w, b, z, attrs), shape, want, alone, desc = _alone(case, srv)
    assert desc[cpair.OP] == cpair.DEPTHWISE
    _f1, f2 = _calls(x, w, b, z, attrs)
    srv.ctl[pairs.AWAKE] = 0
    alone_n = srv.stats["alone"]
    np.testing.assert_array_equal(_run(f2, x, w, b, z, shape), alone)
    assert srv.stats["alone"] == alone_n and srv.stats["paired"] == 0
    monkeypatch.setattr(cpair, "DW_SOLO", False)
    one = _run(f2, x, w, b, z, shape)
    np.testing.assert_array_equal(one, want)
    assert_close(one, alone, np.float32)


def test_k_split_off_and_small(quiet_server, monkeypatch):
    """K_SPLIT 0 (off), a map above K_SPLIT's pixels, an expansion and a K below K_SPLIT_MIN_K: no cut."""
    for k_split, case in ((0, K_LAYERS[0]), (196, K_LAYERS[2]), (784, ((1, 96, 14, 14), (576, 96, 1, 1), CLIP6, True,
                                                                       False)),
                          (784, ((1, 96, 14, 14), (24, 96, 1, 1), {}, True, False))):
        monkeypatch.setattr(cpair, "K_SPLIT", k_split)
        assert _desc(case, quiet_server)[0][cpair.KS_CUT] == 0


def test_k_split_cut_at_the_depthwise_cut(monkeypatch):
    """A projection after a paired depthwise layer cuts its K where that layer cut its planes (_cuts by the
    depthwise output's name)."""
    from test_cpair import _kernel

    monkeypatch.setattr(cpair, "K_SPLIT", 196)
    monkeypatch.setattr(cpair, "_cuts", {("e", 576): 288})
    dstep = type("Step", (), {"outputs": ("d",), "inputs": ("e",)})()
    xd, wd, bd, zd, ad = _layer(((1, 576, 14, 14), (576, 1, 3, 3), _dw(576), True, False))
    dk = _kernel(xd, wd, bd, zd, ad, 2)
    assert cpair.depthwise_pair(dk, dstep, (1, 576, 14, 14), (1, 576, 14, 14), 1, 1, 1, 0.0, 6.0, False) is not None
    assert cpair._cuts[("d", 576)] == 288
    cpair._cuts[("d", 576)] = 304  # (as if the expansion had cut there)
    pstep = type("Step", (), {"outputs": ("p",), "inputs": ("d",)})()
    x, w, b, z, attrs = _layer(K_LAYERS[0])
    pair = cpair.tiles_pair(_kernel(x, w, b, z, attrs, 2), pstep, False, (1, 96, 14, 14), 576, 196, -np.inf, np.inf,
                            True)
    assert pair is not None and pair.desc[cpair.KS_CUT] == 304


def test_k_split_through_a_two_thread_session(monkeypatch, session_pair_calls):
    """With K_SPLIT on, the 14x14 and 7x7 blocks in a two-thread session (the helper's thread running) pair, the
    14x14 projection by its K, and equal the reference and the one-thread run within the fp32 tolerances."""
    monkeypatch.setattr(cpair, "K_SPLIT", 196)
    _tail_pairs(monkeypatch, session_pair_calls, 13)
