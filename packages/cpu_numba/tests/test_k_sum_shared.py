"""cpair.K_SUM_UNITS (issue 11, session 18; docs/numba.md, "The K cuts' sum on both sides"): a K-cut pair's sum
(side 0's partial sums + side 1's + the bias (+ the residual), clamped) shared by the two sides in units of output
channels claimed from one word once both sides' partial sums are done, where the caller ran it alone after the join
(cpair._k_sum). Every element is the same expression, so the output must be the caller's sum's bit for bit whoever
adds which unit: checked against the pair with the switch off (and that against the reference and the one-thread path
within the fp32 tolerances), for a caller alone, for each side's part of the protocol run by hand (the caller's side
joining only where the helper has claimed side 1, the helper's side adding only the units left to it) and through a
two-thread session with fpair's helper running."""
from __future__ import annotations

import numba
import numpy as np
import pytest
from _conv_layers import _at, _cpair_of, _k_part, _kernel, _one_thread, _reference
from kernelkit.testing import assert_close
from kernelkit_numba.kernels import conv_serial, cpair, dwtile, fpair, ftile, pairs

pytestmark = [pytest.mark.skipif(not pairs.X86, reason="pairs need x86-64 (pause, the cycle counter)"),
              pytest.mark.skipif(ftile.choice()[0] != cpair.KIND or not dwtile.enabled(),
                                 reason="conv pairs run on the AVX-512 tiles")]

RELU = {"activation": "Relu"}

# (layer case, cols max): ResNet-50's 28x28 projection at a quarter of its channels on the rows tiles (K_SPLIT_PARALLEL
# 784) with the residual and Relu, an odd K onto 36 channels (units of 2 and 3 channels), and a 14x14 projection on the
# cols tiles (COLS_K_SPLIT at the default 196, a narrow last panel) with the residual
LAYERS = [
    (((1, 192, 28, 28), (48, 192, 1, 1), RELU, True, None), 0),
    (((1, 385, 14, 14), (36, 385, 1, 1), {}, False, None), 0),
    (((1, 256, 14, 14), (64, 256, 1, 1), RELU, True, None), 196),
]


def _ids(layer):
    case, most = layer
    return f"{case[0][1]}x{case[0][2]}-{case[1][0]}" + ("+Z" if case[3] else "") + ("-cols" if most else "-rows")


@numba.njit
def _side(fn, addr, side):
    """The pair's compiled half ``fn`` of side ``side`` on this thread (fpair's call of it)."""
    return pairs._call2(fn, addr, side)


def _bound(layer, units, monkeypatch):
    case, most = layer
    xs, ws, attrs, res, _op = case
    monkeypatch.setattr(cpair, "K_SPLIT_PARALLEL", 784)
    monkeypatch.setattr(cpair, "K_SUM_UNITS", units)
    monkeypatch.setattr(conv_serial, "PAIR_COLS_MAX", most)
    monkeypatch.setattr(cpair, "_cuts", {})
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _cpair_of(fn)
    assert pair is not None and pair.desc[cpair.KS_CUT] > 0
    assert pair.desc[cpair.OP] == (cpair.COLS if most else cpair.ROWS)
    return fn, pair


@pytest.mark.parametrize("layer", LAYERS, ids=_ids)
def test_k_sum_shared_by_hand(layer, quiet_server, monkeypatch):
    """K_SUM_UNITS 16 (36 channels: 16 units of 2 or 3): the caller alone (the helper never comes: the caller's side
    returns after its partial sums, side 1 adds every unit) equals the pair with the switch off bit for bit (and the
    reference and the one-thread path within the tolerances). By hand, from side 0's partial sums: the caller's side
    with the job still open adds no unit; the helper's side with the caller's first j units claimed adds the others,
    those channels the caller alone's bits and the first j the partial sums; the caller's side with the helper claimed
    (the state word) and its side counted done adds the units the helper left, the others its partial sums; with the
    helper's side not done it gives up after its longest wait (KS_WAIT) and adds none."""
    case, _most = layer
    xs, ws, attrs, res, _op = case
    inputs, shape, one = _one_thread(case, 3)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    fn0, pair0 = _bound(layer, 0, monkeypatch)
    assert pair0.desc[cpair.KS_UNITS] == 0
    off = _at(2, fn0, inputs, shape)
    assert_close(off, _reference(inputs, attrs), np.float32)
    assert_close(off, one, np.float32)
    fn, pair = _bound(layer, 16, monkeypatch)
    d = pair.desc
    m_n, l_n = ws[0], shape[2] * shape[3]
    units = int(d[cpair.KS_UNITS])
    assert units == 16
    alone = srv.stats["alone"]
    got = _at(2, fn, inputs, shape)
    assert srv.stats["alone"] == alone + 1 and srv.stats["paired"] == 0
    np.testing.assert_array_equal(got, off)
    assert d[cpair.KS_DONE] == 2 and d[cpair.KS_CLAIM] & 0xFFFFFFFF >= d[cpair.KS_CLAIM] >> 32  # (every unit claimed)

    def words(done, lo, hi, state):
        d[cpair.KS_DONE], d[cpair.KS_CLAIM] = done, (hi << 32) | lo
        d[cpair.KS_CTL] = srv.ctl.ctypes.data
        srv.ctl[pairs.STATE] = 9 * 4 + state

    # side 0 with the job open: its partial sums, no unit added
    y0 = np.full(shape, np.nan, np.float32)
    d[cpair.YA] = y0.ctypes.data
    if res:
        d[cpair.ZA] = inputs[3].ctypes.data
    words(0, 0, units, pairs.OPEN)
    _side(d[cpair.FN], d.ctypes.data, 0)
    assert d[cpair.KS_DONE] == 1 and d[cpair.KS_CLAIM] == units << 32
    assert not np.isnan(y0).any() and not np.array_equal(y0, off)
    for j in (0, 5, units - 1):
        c = j * m_n // units  # the helper's side, the caller's first j units claimed: it adds the rest
        _k_part(d, m_n, l_n)[:] = np.nan
        y = y0.copy()
        d[cpair.YA] = y.ctypes.data
        words(1, j, units, pairs.OPEN)
        srv.ctl[pairs.DESC] = d.ctypes.data
        assert fpair.pair_serve(srv.ctl, 1 << 22, 1 << 40) == 0  # (fpair's helper loop: it claims side 1 and runs it)
        assert d[cpair.KS_DONE] == 2 and d[cpair.KS_CLAIM] == (j << 32) | j
        np.testing.assert_array_equal(y[:, c:], off[:, c:])
        np.testing.assert_array_equal(y[:, :c], y0[:, :c])
        # the caller's side, the helper having claimed side 1 (its partial sums in the buffer: counted done) and the
        # units from the back down to j: the caller adds [0, j)
        y = y0.copy()
        d[cpair.YA] = y.ctypes.data
        words(1, 0, j, pairs.CLAIMED)
        _side(d[cpair.FN], d.ctypes.data, 0)
        assert d[cpair.KS_DONE] == 2 and d[cpair.KS_CLAIM] == (j << 32) | j
        np.testing.assert_array_equal(y[:, :c], off[:, :c])
        np.testing.assert_array_equal(y[:, c:], y0[:, c:])
    # the caller's side, the helper having claimed side 1 but its partial sums not done: it waits K_SUM_WAIT_US at most,
    # then leaves every unit to the helper (its wait then pair_job's, which the stall rule reads)
    assert d[cpair.KS_WAIT] == int(cpair.K_SUM_WAIT_US * 1e-6 * pairs.cycle_rate()) > 0
    d[cpair.KS_WAIT] = 20000
    y = y0.copy()
    d[cpair.YA] = y.ctypes.data
    words(0, 0, units, pairs.CLAIMED)
    _side(d[cpair.FN], d.ctypes.data, 0)
    assert d[cpair.KS_DONE] == 1 and d[cpair.KS_CLAIM] == units << 32
    np.testing.assert_array_equal(y, y0)
    srv.ctl[pairs.STATE] = 0


def test_k_sum_units_rule(quiet_server, monkeypatch):
    """The units are K_SUM_UNITS but at most the output channels (a unit a channel at least); none without a K cut
    (an expansion) or with the switch at 0."""
    quiet_server.ctl[pairs.AWAKE] = 1
    layer = LAYERS[1]
    for units, want in ((0, 0), (3, 3), (16, 16), (100, 36)):
        _fn, pair = _bound(layer, units, monkeypatch)
        assert pair.desc[cpair.KS_UNITS] == want
    expansion = ((1, 64, 28, 28), (256, 64, 1, 1), RELU, True, None)
    xs, ws, attrs, res, _op = expansion
    pair = _cpair_of(conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res)))
    assert pair is not None and pair.desc[cpair.KS_CUT] == 0 and pair.desc[cpair.KS_UNITS] == 0


def _chain(rng):
    """A 28x28 projection (rows tiles, K_SPLIT_PARALLEL 784) after an expansion, then a 14x14 one on the cols tiles
    reading a Relu of an Add (COLS_K_SPLIT), ResNet-50's shapes at a quarter of their channels."""
    from kernelkit.builder import GraphBuilder

    g = GraphBuilder("k_sum_shared")
    x = g.input("x", (1, 64, 28, 28))

    def conv(t, m, c, **attrs):
        w = g.constant((rng.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32))
        b = g.constant(rng.standard_normal(m).astype(np.float32) * np.float32(0.1))
        return g.op("Conv", t, w, b, **attrs)

    e = g.op("Relu", conv(x, 256, 64))
    p = g.op("Relu", conv(e, 64, 256))
    s = g.op("Relu", g.op("Add", conv(p, 256, 64, strides=[2, 2]), conv(e, 256, 256, strides=[2, 2])))
    g.output(g.op("Relu", conv(s, 128, 256)))
    return g.build(), {"x": rng.standard_normal((1, 64, 28, 28)).astype(np.float32)}


def test_k_sum_shared_in_a_session(monkeypatch, session_pair_calls):
    """Two-thread sessions with fpair's helper running, K_SUM_UNITS 16 against 0 (K_SPLIT_PARALLEL 784): every run,
    paired or not, the switch-off session's output bit for bit, and within the tolerances of the reference."""
    from kernelkit import Session

    rng = np.random.default_rng(5)
    model, feeds = _chain(rng)
    want = Session(model, vendors=["reference"]).run(None, feeds)[0]
    one = Session(model, vendors=["numba"], threads=1).run(None, feeds)[0]
    monkeypatch.setattr(cpair, "K_SPLIT_PARALLEL", 784)
    monkeypatch.setattr(cpair, "K_SUM_UNITS", 0)
    off = Session(model, vendors=["numba"], fallback=False, threads=2)
    assert session_pair_calls(off, feeds, want, one, 6)[0] >= 6
    base = off.run(None, feeds)[0]
    monkeypatch.setattr(cpair, "K_SUM_UNITS", 16)
    sess = Session(model, vendors=["numba"], fallback=False, threads=2)
    outs = []

    class _Keep:
        def run(self, *args):
            out = sess.run(*args)
            outs.append(out[0].copy())
            return out

    assert session_pair_calls(_Keep(), feeds, want, one, 12)[0] >= 12
    assert len(outs) >= 3
    for out in outs:
        np.testing.assert_array_equal(out, base)
