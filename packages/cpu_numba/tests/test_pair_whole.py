"""The cols halves on a one-thread session's tiles (issue 11, session 17; docs/numba.md, "ResNet-50's 14x14 1x1 halves
on the one-thread tiles"): cpair.COLS_WHOLE runs the full tiles of the two-thread cols halves (and of the refused
pair's whole-layer call) on the tile whose pixels sit at constant offsets (ftile.cols_driver_ahead's ``whole``), as a
one-thread session's calls do. A tile reads the same floats in the same order either way, so every half equals the
one-thread path bit for bit: the caller alone, the helper's half run by hand and the caller's call with the helper
asleep; ResNet-50's 14x14 expansion and projection (the panel at the cut split by pixels), a map whose last tile is
partial (the general tile), a narrow last panel, the residual and Relu."""
from __future__ import annotations

import functools
import os
import sys

import numpy as np
import pytest
from kernelkit.testing import assert_close
from kernelkit_numba.kernels import conv_serial, cpair, ftile, pairs, rnpair

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _conv_layers import (  # noqa: E402, I001
    _at, _cpair_of, _graph_conv, _half_by_hand, _helper_half, _kernel, _layer, _no_tail, _out_shape, _reference)

pytestmark = [pytest.mark.skipif(not pairs.X86, reason="pairs need x86-64 (pause, the cycle counter)"),
              pytest.mark.skipif(ftile.choice()[0] != rnpair.KIND or not rnpair.enabled(),
                                 reason="the pairs run on the AVX-512 tiles")]

RELU = {"activation": "Relu"}
# (x shape, weight shape, attrs, residual, PAIR_COLS_MAX): ResNet-50's 256 -> 1024 at 14x14 with the residual (22
# panels, the last of 16 channels; the cut inside the eleventh, split by pixels) and 1024 -> 256 (6 panels, the last
# of 16); 129 -> 144 at 13x13 (K odd past two chunks of 128, 169 pixels: the last tile of 1 pixel on the general
# tile); 257 -> 80 at 7x7 (a narrow last panel of 32) with the residual
CASES = [
    ((1, 256, 14, 14), (1024, 256, 1, 1), RELU, True, 196),
    ((1, 1024, 14, 14), (256, 1024, 1, 1), RELU, False, 196),
    ((1, 129, 13, 13), (144, 129, 1, 1), RELU, True, 196),
    ((1, 257, 7, 7), (80, 257, 1, 1), RELU, True, 0),
]


def _pair(case, monkeypatch, whole: bool, split: bool = True):
    xs, ws, attrs, res, most = case
    monkeypatch.setattr(conv_serial, "PAIR_COLS_MAX", most)
    monkeypatch.setattr(cpair, "COLS_WHOLE", whole)
    monkeypatch.setattr(cpair, "COLS_KC_ONE_THREAD", 1)
    monkeypatch.setattr(cpair, "COLS_SPLIT", split)
    # the K cuts off (on by default since session 17's F1): their sums run in another order, and this test is about
    # the halves' tiles, bit for bit the one-thread path (the cut: test_cols_k_split)
    monkeypatch.setattr(cpair, "K_SPLIT_PARALLEL", 0)
    monkeypatch.setattr(cpair, "COLS_K_SPLIT", False)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _cpair_of(fn)
    assert pair is not None and pair.desc[cpair.OP] == cpair.COLS and pair.cwhole == whole
    return fn, pair


@pytest.mark.parametrize("split", [True, False], ids=["split", "panels"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0][1]}x{c[0][2]}-{c[1][0]}")
def test_cols_halves_whole(case, split, quiet_server, monkeypatch):
    """COLS_WHOLE on and off: the caller alone, the helper's half by hand and the caller's whole-layer call (the
    helper asleep: the refused pair's driver, whole too) equal a one-thread session's call bit for bit, and the
    reference; the whole half is its own compiled half."""
    _no_tail(monkeypatch)
    xs, ws, attrs, res, _most = case
    inputs = _layer(case, 7)
    shape = _out_shape(xs, ws, attrs)
    one = conv_serial.serial_call(_kernel(xs, ws, attrs, 1, res), None)  # a one-thread session's call (cols tiles)
    want = _at(1, one, inputs, shape)
    assert_close(want, _reference(inputs, attrs), np.float32)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    plain_fn, plain = _pair(case, monkeypatch, False, split)
    np.testing.assert_array_equal(_at(2, plain_fn, inputs, shape), want)
    fn, pair = _pair(case, monkeypatch, True, split)
    assert pair.desc[cpair.FN] == 0  # (its half looked up at the first call)
    got = _at(2, fn, inputs, shape)
    assert srv.stats["alone"] == 2 and srv.stats["paired"] == 0
    ahead = cpair.COLS_AHEAD
    assert pair.desc[cpair.FN] == cpair.prepare(ahead, 0, True) != cpair.prepare(ahead, 0, False) == \
        plain.desc[cpair.FN]
    np.testing.assert_array_equal(got, want)
    assert (pair.desc[cpair.SIDE0 + cpair.S_NP] > 0) == split  # (COLS_SPLIT: the panel at the cut split by pixels)
    _half_by_hand(srv, pair.desc, cpair.YA, shape, want)  # the helper's half on the whole half
    srv.ctl[pairs.AWAKE] = 0  # the helper asleep: the caller's whole-layer call, the halves' driver and chunk
    alone = srv.stats["alone"]
    np.testing.assert_array_equal(_at(2, fn, inputs, shape), want)
    assert srv.stats["alone"] == alone


@pytest.mark.parametrize("projections", [True, False])
def test_pair_cols_projections(projections, quiet_server, monkeypatch):
    """conv_serial.PAIR_COLS_PROJECTIONS with PAIR_COLS_MAX 196: the expansion (256 -> 1024 at 14x14 +Z) pairs on the
    cols tiles either way, the projection (1024 -> 256) only where the switch is on (else the rows tiles); both
    outputs the one-thread path's (the rows halves within the fp32 tolerances of it, equal to the reference's)."""
    monkeypatch.setattr(conv_serial, "PAIR_COLS_PROJECTIONS", projections)
    monkeypatch.setattr(conv_serial, "PAIR_COLS_MAX", 196)
    # the cols halves' K cut off (on by default since session 17's F1: within the fp32 tolerances, test_cols_k_split),
    # so that the cols halves stay bit for bit the one-thread path; the rows halves keep K_SPLIT_PARALLEL's default
    monkeypatch.setattr(cpair, "COLS_K_SPLIT", False)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    for case, cols in ((CASES[0], True), (CASES[1], projections)):
        xs, ws, attrs, res, _most = case
        inputs = _layer(case, 8)
        shape = _out_shape(xs, ws, attrs)
        fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
        pair = _cpair_of(fn)
        assert pair is not None and pair.desc[cpair.OP] == (cpair.COLS if cols else cpair.ROWS)
        got = _at(2, fn, inputs, shape)
        assert_close(got, _reference(inputs, attrs), np.float32)
        one = _at(1, conv_serial.serial_call(_kernel(xs, ws, attrs, 1, res), None), inputs, shape)
        if cols:
            np.testing.assert_array_equal(got, one)
        else:
            assert_close(got, one, np.float32)


# COLS_K_SPLIT: ResNet-50's 14x14 projection (1024 -> 256: 6 panels, the last of 16), a quarter of it with the residual
# (256 -> 64 +Z: a narrow panel of 16), an odd K onto a narrow last panel (385 -> 80 at 13x13, a partial last tile)
K_CASES = [
    ((1, 1024, 14, 14), (256, 1024, 1, 1), RELU, False, 196),
    ((1, 256, 14, 14), (64, 256, 1, 1), RELU, True, 196),
    ((1, 385, 13, 13), (80, 385, 1, 1), {}, False, 196),
]


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "general"])
@pytest.mark.parametrize("case", K_CASES, ids=lambda c: f"{c[0][1]}x{c[0][2]}-{c[1][0]}" + ("+Z" if c[3] else ""))
def test_cols_k_split(case, whole, quiet_server, monkeypatch):
    """cpair.COLS_K_SPLIT with K_SPLIT_PARALLEL 196 on a projection that pairs on the cols tiles: K cut at the middle
    rounded to 16 (the writer unknown), every panel on both sides; the caller alone (both sides, the sums) equals the
    reference and the one-thread path within the fp32 tolerances, and so does a call whose output is the residual's
    memory (the residual copied); the helper's side by hand writes the caller's run of it into the layer's buffer bit
    for bit and no output element. The helper asleep: the K cut on the caller (K_SOLO), bit for bit the caller alone;
    with K_SOLO off the one-thread driver over the whole K, bit for bit the one-thread path."""
    xs, ws, attrs, res, most = case
    inputs = _layer(case, 9)
    shape = _out_shape(xs, ws, attrs)
    kern = _kernel(xs, ws, attrs, 1, res)
    one = _at(1, conv_serial.serial_call(kern, None), inputs, shape)
    assert_close(one, _reference(inputs, attrs), np.float32)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    for name, value in (("K_SPLIT_PARALLEL", 196), ("COLS_K_SPLIT", True), ("COLS_WHOLE", whole),
                        ("COLS_KC_ONE_THREAD", 1)):
        monkeypatch.setattr(cpair, name, value)
    monkeypatch.setattr(conv_serial, "PAIR_COLS_MAX", most)
    monkeypatch.setattr(cpair, "_cuts", {})
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _cpair_of(fn)
    k_n, m_n, l_n = ws[1], ws[0], shape[2] * shape[3]
    d = pair.desc
    assert pair is not None and d[cpair.OP] == cpair.COLS and d[cpair.KS_CUT] == (k_n // 2 + 8) // 16 * 16
    assert d[cpair.T_N] == 0 and pair.follow is None
    alone = srv.stats["alone"]
    got = _at(2, fn, inputs, shape)
    assert srv.stats["alone"] == alone + 1 and srv.stats["paired"] == 0
    assert_close(got, _reference(inputs, attrs), np.float32)
    assert_close(got, one, np.float32)
    part = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * (m_n * l_n)).from_address(int(d[cpair.KS_PART])))
    mine = part.copy()
    part[:] = np.nan
    y = _helper_half(srv, d, cpair.YA, shape)
    np.testing.assert_array_equal(part, mine)
    assert np.isnan(y).all()
    if res:  # the output over the residual: the pair gets a copy of it (side 0's sums go into the output first)
        z = inputs[3].copy()
        with conv_serial.config.num_threads(2):
            over = fn(*inputs[:3], z, out=z)
        assert over is z
        assert_close(z, one, np.float32)
    srv.ctl[pairs.AWAKE] = 0  # the helper asleep: both sides and the sums on the caller (cpair.K_SOLO), the pair's bits
    np.testing.assert_array_equal(_at(2, fn, inputs, shape), got)
    monkeypatch.setattr(cpair, "K_SOLO", False)  # off: the caller's whole-layer call (the one-thread driver, whole K)
    np.testing.assert_array_equal(_at(2, fn, inputs, shape), one)


def _r50_14x14_model(rng):
    """ResNet-50's 14x14 bottleneck and the next stage's first 1x1 and their input: 1024 -> 256 (Relu), the 3x3 of
    256, 256 -> 1024 with the block's input as the residual (fuse_residual's +Z) and Relu, then 1024 -> 512 (Relu)."""
    from kernelkit.builder import GraphBuilder

    g = GraphBuilder("r50_14x14")
    x = g.input("x", (1, 1024, 14, 14))

    conv = functools.partial(_graph_conv, g, rng, gain=1.0)

    a = g.op("Relu", conv(x, 256, 1024, 1))
    c = g.op("Relu", conv(a, 256, 256, 3, pads=[1, 1, 1, 1]))
    e = g.op("Relu", g.op("Add", conv(c, 1024, 256, 1), x))
    g.output(g.op("Relu", conv(e, 512, 1024, 1)))
    return g.build(), {"x": rng.standard_normal((1, 1024, 14, 14)).astype(np.float32)}


def test_r50_14x14_default_through_a_two_thread_session(monkeypatch, session_pair_calls):
    """The switches as they are by default (since session 17's F1: PAIR_COLS_MAX 196, COLS_WHOLE,
    COLS_KC_ONE_THREAD, K_SPLIT_PARALLEL 196, COLS_K_SPLIT) in a two-thread session of ResNet-50's 14x14 1x1 shapes:
    the projections (1024 -> 256, 1024 -> 512) pair on the cols tiles with their K cut, the expansion with the
    residual (256 -> 1024 +Z) on the whole tiles, uncut; every run, paired or not, equals the reference and the
    one-thread run within the fp32 tolerances."""
    from kernelkit import Session

    rng = np.random.default_rng(17)
    model, feeds = _r50_14x14_model(rng)
    want = Session(model, vendors=["reference"]).run(None, feeds)[0]
    one = Session(model, vendors=["numba"], threads=1).run(None, feeds)[0]
    bound = {}
    tiles_pair = cpair.tiles_pair

    def recorded(conv, step, cols, y_shape, k_n, l_n, *args, **kwargs):
        pair = tiles_pair(conv, step, cols, y_shape, k_n, l_n, *args, **kwargs)
        if pair is not None:
            bound[(k_n, int(y_shape[1]))] = (int(pair.desc[cpair.OP]), int(pair.desc[cpair.KS_CUT]), pair.cwhole)
        return pair

    monkeypatch.setattr(cpair, "tiles_pair", recorded)
    sess = Session(model, vendors=["numba"], fallback=False, threads=2)
    assert session_pair_calls(sess, feeds, want, one, 30)[0] >= 30
    assert sorted(bound) == [(256, 1024), (1024, 256), (1024, 512)], bound
    assert bound[256, 1024] == (cpair.COLS, 0, True), bound
    for layer in ((1024, 256), (1024, 512)):  # (K cut at the middle or the writer's cut: _cuts)
        op, cut, whole = bound[layer]
        assert op == cpair.COLS and whole and 0 < cut < 1024 and cut % 16 == 0, bound
