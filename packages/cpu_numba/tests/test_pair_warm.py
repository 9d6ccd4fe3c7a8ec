"""An expansion's halves pull their lines in first (issue 11, session 18; docs/numba.md, "ResNet-50's expansions and
strided 1x1 layers at two threads"): cpair.WARM's pass reads every line of a side's input (bit 1) and of the residual's
rows of its output channels (bit 2) before its tiles run. It changes no arithmetic, so every half equals the pair
without it bit for bit: the caller alone, the helper's half run by hand and the helper asleep; ResNet-50's 14x14
expansion on the cols tiles (the panel at the cut split by pixels), an expansion on the rows tiles cut by channels, the
1x1/2 shortcut to 14x14 (the caller's subsampled copy), and where the switch takes no layer."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from kernelkit.testing import assert_close
from kernelkit_numba.kernels import conv_serial, cpair, ftile, pairs, rnpair

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _conv_layers import _at, _cells, _cpair_of, _half_by_hand, _kernel, _layer, _no_tail, _out_shape, _reference  # noqa: E402, I001

pytestmark = [pytest.mark.skipif(not pairs.X86, reason="pairs need x86-64 (pause, the cycle counter)"),
              pytest.mark.skipif(ftile.choice()[0] != rnpair.KIND or not rnpair.enabled(),
                                 reason="the pairs run on the AVX-512 tiles")]

RELU = {"activation": "Relu"}
# (x shape, weight shape, attrs, residual, PAIR_COLS_MAX, the pair's op): ResNet-50's 256 -> 1024 at 14x14 +Z on the
# cols tiles; 64 -> 200 at 13x13 +Z on the rows tiles (25 panels of 8: the caller 13, a last tile of 9 pixels);
# ResNet-50's 1x1/2 512 -> 1024 from 28x28 (its input subsampled by the caller), on the cols tiles without a residual;
# 96 -> 192 at 12x12 on the rows tiles, no residual (bit 2 reads nothing)
CASES = [
    ((1, 256, 14, 14), (1024, 256, 1, 1), RELU, True, 196, cpair.COLS),
    ((1, 64, 13, 13), (200, 64, 1, 1), RELU, True, 0, cpair.ROWS),
    ((1, 512, 28, 28), (1024, 512, 1, 1), {"strides": [2, 2]}, False, 196, cpair.COLS),
    ((1, 96, 12, 12), (192, 96, 1, 1), {}, False, 0, cpair.ROWS),
]


def _pair(case, monkeypatch, warm: int):
    xs, ws, attrs, res, most, op = case
    monkeypatch.setattr(conv_serial, "PAIR_COLS_MAX", most)
    monkeypatch.setattr(cpair, "WARM", warm)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _cpair_of(fn)
    assert pair is not None and pair.desc[cpair.OP] == op and pair.desc[cpair.KS_CUT] == 0
    return fn, pair


@pytest.mark.parametrize("warm", [1, 2, 3])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0][1]}x{c[0][2]}-{c[1][0]}" + ("+Z" if c[3] else ""))
def test_warm_halves(case, warm, quiet_server, monkeypatch):
    """WARM on: the descriptor holds its bits; the caller alone, the helper's half by hand and the call with the
    helper asleep equal the pair without it bit for bit (and the one-thread path, the reference within the fp32
    tolerances)."""
    xs, ws, attrs, res, _most, _op = case
    inputs = _layer(case[:5], 11)
    shape = _out_shape(xs, ws, attrs)
    one = _at(1, conv_serial.serial_call(_kernel(xs, ws, attrs, 1, res), None), inputs, shape)
    assert_close(one, _reference(inputs, attrs), np.float32)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    plain_fn, plain = _pair(case, monkeypatch, 0)
    want = _at(2, plain_fn, inputs, shape)
    assert plain.desc[cpair.XW] == 0
    np.testing.assert_array_equal(want, one)
    fn, pair = _pair(case, monkeypatch, warm)
    assert pair.desc[cpair.XW] == warm
    got = _at(2, fn, inputs, shape)
    assert srv.stats["paired"] == 0 and srv.stats["alone"] >= 2  # (the caller ran both halves)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(_at(2, fn, inputs, shape), want)  # (the second call: the bound entry point)
    if xs[2] == _out_shape(xs, ws, attrs)[2]:  # (a shortcut's helper half reads the caller's subsampled copy: the
        # call before left it in the buffer, which the hand-run half reads through the descriptor)
        _half_by_hand(srv, pair.desc, cpair.YA, shape, want)
    srv.ctl[pairs.AWAKE] = 0  # the helper asleep: the caller's whole-layer call
    np.testing.assert_array_equal(_at(2, fn, inputs, shape), want)


def test_warm_takes(quiet_server, monkeypatch):
    """WARM's bits go only into the bound parallel call's one-image expansions up to WARM_MAX pixels: not into a
    projection (a K cut or not), not above WARM_MAX, not with the switch off."""
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    monkeypatch.setattr(conv_serial, "PAIR_COLS_MAX", 196)
    monkeypatch.setattr(cpair, "WARM", 3)

    def bits(xs, ws, res=False):
        pair = _cpair_of(conv_serial.bound_compute(_kernel(xs, ws, {}, 2, res)))
        assert pair is not None
        return int(pair.desc[cpair.XW])

    assert bits((1, 256, 14, 14), (1024, 256, 1, 1), True) == 3
    assert bits((1, 1024, 14, 14), (256, 1024, 1, 1)) == 0  # a projection (K cut)
    monkeypatch.setattr(cpair, "K_SPLIT_PARALLEL", 0)
    assert bits((1, 1024, 14, 14), (256, 1024, 1, 1)) == 0  # a projection by channels
    assert bits((1, 128, 28, 28), (512, 128, 1, 1), True) == 0  # 784 pixels, above WARM_MAX
    monkeypatch.setattr(cpair, "WARM_MAX", 784)
    assert bits((1, 128, 28, 28), (512, 128, 1, 1), True) == 3
    monkeypatch.setattr(cpair, "WARM", 0)
    assert bits((1, 256, 14, 14), (1024, 256, 1, 1), True) == 0


# SUB_OWN: 1x1/2 shortcuts on the rows tiles (conv_serial.PAIR_COLS_MAX 0): ResNet-50's 256 -> 512 from 56x56 (784
# output pixels, 25 tiles of 32: the cut at pixel 416, inside output row 14), 64 -> 128 from 28x28 with the residual
# and Relu (196 pixels, 7 tiles: the cut at 128), 33 -> 80 from 29x29 (15 x 15 outputs)
OWN = [
    ((1, 256, 56, 56), (512, 256, 1, 1), {"strides": [2, 2]}, False, 0, cpair.ROWS),
    ((1, 64, 28, 28), (128, 64, 1, 1), {"strides": [2, 2], **RELU}, True, 0, cpair.ROWS),
    ((1, 33, 29, 29), (80, 33, 1, 1), {"strides": [2, 2]}, False, 0, cpair.ROWS),
]


def _own_pair(case, monkeypatch, own: bool):
    xs, ws, attrs, res, most, _op = case
    monkeypatch.setattr(conv_serial, "PAIR_COLS_MAX", most)
    monkeypatch.setattr(cpair, "SUB_SPLIT", True)
    monkeypatch.setattr(cpair, "SUB_OWN", own)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    cells = _cells(fn)
    pair = _cpair_of(fn)
    assert pair is not None and pair.desc[cpair.OP] == cpair.ROWS and cells["sub_in_pair"]
    return fn, pair, cells["buf"]


@pytest.mark.parametrize("case", OWN, ids=lambda c: f"{c[0][1]}x{c[0][2]}-{c[1][0]}")
def test_sub_own(case, quiet_server, monkeypatch):
    """cpair.SUB_OWN (with SUB_SPLIT): the layer cut by pixels, U_N the own-pixels mark; the caller alone copies
    both sides' pixels and equals SUB_SPLIT's channel cut bit for bit (and the one-thread path and the reference within
    the fp32 tolerances); the helper's half by hand over a buffer of NaN copies exactly its own pixels (the caller's
    left NaN) and writes its part of the output, bit for bit; the helper asleep: the caller copies and runs alone."""
    _no_tail(monkeypatch)
    xs, ws, attrs, res, _most, _op = case
    inputs = _layer(case[:5], 12)
    shape = _out_shape(xs, ws, attrs)
    one = _at(1, conv_serial.serial_call(_kernel(xs, ws, attrs, 1, res), None), inputs, shape)
    assert_close(one, _reference(inputs, attrs), np.float32)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    plain_fn, plain, _ = _own_pair(case, monkeypatch, False)
    s0, s1 = cpair.SIDE0, cpair.SIDE0 + cpair.SIDE_N
    assert plain.desc[cpair.U_N] > 0 and plain.desc[s1 + cpair.S_P0] == 0  # (the channel cut)
    want = _at(2, plain_fn, inputs, shape)
    assert_close(want, one, np.float32)
    fn, pair, buf = _own_pair(case, monkeypatch, True)
    d = pair.desc
    cut = int(d[s1 + cpair.S_P0])
    assert d[cpair.U_N] == cpair.OWN_PIXELS and cut > 0 and d[s0 + cpair.S_NP] == cut
    assert d[s0 + cpair.S_MC] == d[s1 + cpair.S_MC] == ws[0]
    got = _at(2, fn, inputs, shape)
    assert srv.stats["paired"] == 0 and d[cpair.U_X] == 0
    np.testing.assert_array_equal(got, want)
    x = inputs[0]
    copy = np.ascontiguousarray(x[0, :, ::2, ::2])
    np.testing.assert_array_equal(buf[0], copy)
    buf[:] = np.nan
    d[cpair.U_X] = x.ctypes.data
    _half_by_hand(srv, d, cpair.YA, shape, want)  # the helper's side: its own pixels copied, then its tiles
    d[cpair.U_X] = 0
    flat = buf[0].reshape(xs[1], -1)
    assert np.isnan(flat[:, :cut]).all()
    np.testing.assert_array_equal(flat[:, cut:], copy.reshape(xs[1], -1)[:, cut:])
    srv.ctl[pairs.AWAKE] = 0  # the helper asleep: the pair refuses, the caller copies and runs the layer alone
    buf[:] = np.nan
    np.testing.assert_array_equal(_at(2, fn, inputs, shape), want)
    np.testing.assert_array_equal(buf[0], copy)


def test_sub_own_takes(quiet_server, monkeypatch):
    """SUB_OWN needs SUB_SPLIT and the rows tiles: without SUB_SPLIT no own-pixels mark and the channel cut; on the cols
    tiles (512 -> 1024 to 14x14 under PAIR_COLS_MAX 196) SUB_SPLIT's units."""
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    monkeypatch.setattr(cpair, "SUB_OWN", True)
    monkeypatch.setattr(conv_serial, "PAIR_COLS_MAX", 0)
    xs, ws = (1, 256, 56, 56), (512, 256, 1, 1)
    pair = _cpair_of(conv_serial.bound_compute(_kernel(xs, ws, {"strides": [2, 2]}, 2, False)))
    assert pair.desc[cpair.U_N] == 0 and pair.desc[cpair.SIDE0 + cpair.SIDE_N + cpair.S_P0] == 0
    monkeypatch.setattr(cpair, "SUB_SPLIT", True)
    monkeypatch.setattr(conv_serial, "PAIR_COLS_MAX", 196)
    xs, ws = (1, 512, 28, 28), (1024, 512, 1, 1)
    pair = _cpair_of(conv_serial.bound_compute(_kernel(xs, ws, {"strides": [2, 2]}, 2, False)))
    assert pair.desc[cpair.OP] == cpair.COLS and pair.desc[cpair.U_N] == cpair.SUB_UNITS


@pytest.mark.parametrize("most", [3136, 784])
def test_expand_pixels(most, quiet_server, monkeypatch):
    """cpair.EXPAND_PIXELS: the bound parallel call's expansions on the rows tiles on maps of at least that many pixels
    cut by pixels (the caller's part whole tiles, every channel on both sides), the smaller ones by channels; the caller
    alone and the helper's half by hand equal the channel cut bit for bit; 64 -> 256 at 56x56 +Z, 128 -> 512 at 28x28
    +Z."""
    _no_tail(monkeypatch)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    s0, s1 = cpair.SIDE0, cpair.SIDE0 + cpair.SIDE_N
    for xs, ws in (((1, 64, 56, 56), (256, 64, 1, 1)), ((1, 128, 28, 28), (512, 128, 1, 1))):
        case = (xs, ws, RELU, True, 196)
        inputs = _layer(case, 13)
        shape = _out_shape(xs, ws, RELU)
        monkeypatch.setattr(cpair, "EXPAND_PIXELS", 0)
        plain_fn = conv_serial.bound_compute(_kernel(xs, ws, RELU, 2, True))
        plain = _cpair_of(plain_fn)
        assert plain.desc[cpair.OP] == cpair.ROWS and plain.desc[s1 + cpair.S_C0] > 0  # (the channel cut)
        want = _at(2, plain_fn, inputs, shape)
        assert_close(want, _reference(inputs, RELU), np.float32)
        monkeypatch.setattr(cpair, "EXPAND_PIXELS", most)
        fn = conv_serial.bound_compute(_kernel(xs, ws, RELU, 2, True))
        d = _cpair_of(fn).desc
        l_n = xs[2] * xs[3]
        if l_n < most:
            assert d[s1 + cpair.S_C0] > 0 and d[s1 + cpair.S_P0] == 0
            continue
        cut = int(d[s1 + cpair.S_P0])
        assert cut > 0 and cut % ftile.NR[cpair.KIND] == 0 and d[s0 + cpair.S_NP] == cut
        assert d[s0 + cpair.S_MC] == d[s1 + cpair.S_MC] == ws[0]
        np.testing.assert_array_equal(_at(2, fn, inputs, shape), want)
        _half_by_hand(srv, d, cpair.YA, shape, want)
