"""A review of the K-cut pairs that session 17 turned on (issue 11; docs/numba.md, "MobileNetV2's projections cut by
their input channels at two threads" and "ResNet-50's projections cut by their input channels at two threads"):
cpair.K_SPLIT (784), K_SPLIT_COLS, K_SOLO. A refused K-cut pair runs both its sides on the caller (K_SOLO); where it
was refused because another caller holds the helper's slot, the helper may be running that caller's side 1 at the
same moment, in the helper's own scratch (fpair.helper_buffer "cpair.scratch"): the caller's run of side 1 must keep
out of it (it ran there until this review: each call's tiles stored into the other's partial sums). Checked by a
sentinel in the helper's scratch, which the caller's solo run must leave as it was, and by the output, which must be
the caller alone's bits (the pair's) and within the fp32 tolerances of the reference."""
from __future__ import annotations

import functools
import os
import sys

import numpy as np
import pytest
from kernelkit.testing import assert_close
from kernelkit_numba.kernels import cpair, dwtile, fpair, ftile, pairs

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # (test_cpair's layers and helpers)
from test_cpair import CLIP6, _alone, _calls, _inputs, _reference, _run  # noqa: E402

pytestmark = [pytest.mark.skipif(not pairs.X86, reason="pairs need x86-64 (pause, the cycle counter)"),
              pytest.mark.skipif(ftile.choice()[0] != cpair.KIND or not dwtile.enabled(),
                                 reason="conv pairs run on the AVX-512 tiles")]

SENTINEL = np.float32(-12345.5)

# (x shape, weight shape, attrs, bias, residual, the switch that cuts its K): MobileNetV2's 14x14 projection with the
# residual (the rows tiles, K_SPLIT on by default), an odd K with the clamp and no bias, and the 7x7 projections on the
# cols tiles (K_SPLIT_COLS), with the residual and without
CASES = [
    ((1, 576, 14, 14), (96, 576, 1, 1), {}, True, True, ("K_SPLIT", 784)),
    ((1, 385, 14, 14), (36, 385, 1, 1), CLIP6, False, False, ("K_SPLIT", 784)),
    ((1, 960, 7, 7), (160, 960, 1, 1), {}, True, True, ("K_SPLIT_COLS", 49)),
    ((1, 385, 7, 7), (112, 385, 1, 1), CLIP6, True, False, ("K_SPLIT_COLS", 49)),
]


def _ids(case):
    return f"{case[0][1]}x{case[0][2]}-{case[1][0]}" + ("+Z" if case[4] else "") + ("" if case[3] else "-nobias")


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_solo_keeps_out_of_the_helpers_scratch(case, quiet_server, monkeypatch):
    """A K-cut pair refused because another caller holds the helper's slot (pair_run's 3: the helper may be running
    that caller's side 1 in its scratch) runs both sides on the caller (K_SOLO) without writing a float of the
    helper's scratch, and its output is the caller alone's (the pair's) bits, within the tolerances of the
    reference; so is a refusal with the helper asleep."""
    name, value = case[5]
    monkeypatch.setattr(cpair, name, value)
    assert cpair.K_SOLO
    srv = quiet_server
    (x, w, b, z, attrs), shape, want, alone, desc = _alone(case[:5], srv)
    assert desc[cpair.KS_CUT] > 0 and desc[cpair.OP] == (cpair.COLS if name == "K_SPLIT_COLS" else cpair.ROWS)
    assert_close(alone, _reference(x, w, b, z, attrs), np.float32)
    _f1, f2 = _calls(x, w, b, z, attrs)
    helper = fpair.helper_buffer("cpair.scratch", 1)  # (the helper's scratch, grown at bind to its largest side 1)
    for held in (True, False):
        srv.ctl[pairs.AWAKE] = 1
        f2(*_inputs(x, w, b, z), out=np.empty(shape, np.float32))  # (bound, its first calls made)
        if held:
            srv.ctl[pairs.SLOT] = 1  # another caller's job: the helper would be running its side 1 now
        else:
            srv.ctl[pairs.AWAKE] = 0  # asleep: refused (and woken)
        helper[:] = SENTINEL
        paired, alone_n = srv.stats["paired"], srv.stats["alone"]
        try:
            got = _run(f2, x, w, b, z, shape)
        finally:
            srv.ctl[pairs.SLOT] = 0
        assert srv.stats["paired"] == paired and srv.stats["alone"] == alone_n  # (not run through the helper's ctl)
        assert (helper == SENTINEL).all(), "the solo run wrote into the helper's scratch"
        np.testing.assert_array_equal(got, alone)
    assert_close(want, alone, np.float32)



# cuts a writer of another kind may leave in _cuts (one input channel on a side, 8, a cut off the 16s, the last 16)
ODD_CUTS = (1, 8, 100, -16, -1)


@pytest.mark.parametrize("case", [CASES[0], CASES[2], CASES[3]], ids=_ids)
def test_k_cut_anywhere(case, quiet_server, monkeypatch):
    """The K cut is where the layer that wrote the input cut its channels (_cuts, by the input's name), so any cut in
    (0, K) may come: a side of one input channel, 8, one off the multiples of 16, all but the last 16 or the last
    one. The caller alone equals the reference within the fp32 tolerances at each."""
    name, value = case[5]
    monkeypatch.setattr(cpair, name, value)
    srv = quiet_server
    k_n = case[1][1]
    for cut in ODD_CUTS:
        cut = cut % k_n
        monkeypatch.setattr(cpair, "_k_cut", lambda step, k, cut=cut: cut)
        (x, w, b, z, attrs), shape, want, alone, desc = _alone(case[:5], srv)
        assert desc[cpair.KS_CUT] == cut
        assert not np.isnan(alone).any()
        assert_close(alone, _reference(x, w, b, z, attrs), np.float32, err_msg=f"cut {cut}")
        assert_close(alone, want, np.float32, err_msg=f"cut {cut}")


# the bound parallel call's one-image projections as the defaults pair them (conv_serial.PAIR_COLS_MAX 196,
# cpair.COLS_K_SPLIT, K_SPLIT_PARALLEL 196): ResNet-50's 1024 -> 256 at 14x14 at half its channels with Relu, the same
# with the residual, an odd K onto 112 channels (two 48-channel panels and one of 16) on an odd map; the second item
# PAIR_COLS_MAX (0: the rows tiles)
PARALLEL = [
    (((1, 512, 14, 14), (128, 512, 1, 1), {"activation": "Relu"}, False, None), 196),
    (((1, 512, 14, 14), (128, 512, 1, 1), {"activation": "Relu"}, True, None), 196),
    (((1, 385, 13, 13), (112, 385, 1, 1), {}, True, None), 196),
    (((1, 512, 14, 14), (128, 512, 1, 1), {"activation": "Relu"}, True, None), 0),
]


def _pids(p):
    (xs, ws, _attrs, res, _op), most = p
    return f"{xs[1]}x{xs[2]}-{ws[0]}" + ("+Z" if res else "") + ("-cols" if most else "-rows")


@pytest.mark.parametrize("p", PARALLEL, ids=_pids)
def test_parallel_k_cut_defaults(p, quiet_server, monkeypatch):
    """The bound parallel call's K-cut pair at the defaults: the caller alone equals the reference and the one-thread
    path within the fp32 tolerances, also with the output over the residual's memory; refused with the slot held by
    another caller (K_SOLO) and with the helper asleep, the caller alone's bits without a float written into the
    helper's scratch; a batch of two (no K cut: the pool's shards) and a second layer of other shapes bound after it
    (its own descriptor and buffer) within the tolerances."""
    from _conv_layers import _at, _cpair_of, _kernel, _layer, _out_shape
    from _conv_layers import _reference as reference
    from kernelkit_numba.kernels import conv_serial

    case, most = p
    xs, ws, attrs, res, _op = case
    monkeypatch.setattr(conv_serial, "PAIR_COLS_MAX", most)
    monkeypatch.setattr(cpair, "_cuts", {})
    inputs = _layer(case, 3)
    shape = _out_shape(xs, ws, attrs)
    one = _at(1, conv_serial.serial_call(_kernel(xs, ws, attrs, 1, res), None), inputs, shape)
    want = reference(inputs, attrs)
    assert_close(one, want, np.float32)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    pair = _cpair_of(fn)
    assert pair is not None and pair.desc[cpair.KS_CUT] > 0
    assert pair.desc[cpair.OP] == (cpair.COLS if most else cpair.ROWS)
    got = _at(2, fn, inputs, shape)
    assert_close(got, want, np.float32)
    assert_close(got, one, np.float32)
    if res:
        z = inputs[3].copy()
        with conv_serial.config.num_threads(2):
            assert fn(*inputs[:3], z, out=z) is z
        np.testing.assert_array_equal(z, got)
    helper = fpair.helper_buffer("cpair.scratch", 1)
    for held in (True, False):
        srv.ctl[pairs.AWAKE] = 1
        if held:
            srv.ctl[pairs.SLOT] = 1
        else:
            srv.ctl[pairs.AWAKE] = 0
        helper[:] = SENTINEL
        try:
            again = _at(2, fn, inputs, shape)
        finally:
            srv.ctl[pairs.SLOT] = 0
        assert (helper == SENTINEL).all(), "the solo run wrote into the helper's scratch"
        np.testing.assert_array_equal(again, got)
    srv.ctl[pairs.AWAKE] = 1
    batch = ((2,) + xs[1:], ws, attrs, res, None)
    b_inputs = _layer(batch, 4)
    b_shape = _out_shape(batch[0], ws, attrs)
    b_fn = conv_serial.bound_compute(_kernel(batch[0], ws, attrs, 2, res))
    assert_close(_at(2, b_fn, b_inputs, b_shape), reference(b_inputs, attrs), np.float32)
    other = ((1, xs[1] // 2, 12, 12), (ws[0] // 2, xs[1] // 2, 1, 1), attrs, res, None)
    o_inputs = _layer(other, 5)
    o_shape = _out_shape(other[0], other[1], attrs)
    o_fn = conv_serial.bound_compute(_kernel(other[0], other[1], attrs, 2, res))
    assert_close(_at(2, o_fn, o_inputs, o_shape), reference(o_inputs, attrs), np.float32)
    np.testing.assert_array_equal(_at(2, fn, inputs, shape), got)  # (the first layer's pair as it was)


def _projections_model(rng, side: int, wide: int = 1024):
    """ResNet-50's 14x14 1x1 layers on a ``side`` x ``side`` map (test_pair_whole's model): a projection that reads the
    graph's input (no writer in _cuts), the 3x3, the expansion with the block's input as the residual, and a
    projection that reads a Relu of an Add (a writer that is no conv)."""
    from _conv_layers import _graph_conv
    from kernelkit.builder import GraphBuilder

    g = GraphBuilder("projections")
    x = g.input("x", (1, wide, side, side))

    conv = functools.partial(_graph_conv, g, rng, gain=1.0)

    a = g.op("Relu", conv(x, wide // 4, wide, 1))
    c = g.op("Relu", conv(a, wide // 4, wide // 4, 3, pads=[1, 1, 1, 1]))
    e = g.op("Relu", g.op("Add", conv(c, wide, wide // 4, 1), x))
    g.output(g.op("Relu", conv(e, wide // 2, wide, 1)))
    return g.build(), {"x": rng.standard_normal((1, wide, side, side)).astype(np.float32)}


def test_concurrent_runs_with_k_cuts(session_pair_calls):
    """Two-thread sessions at the defaults whose projections cut their K (the first reading the graph's input, the
    last a Relu of an Add): two threads running one session at once, and a second session of other shapes (the same
    tensor names: _cuts' entries by name) running beside them, so that a pair finds the helper's slot held by another
    caller's job and runs its K cut on the caller (K_SOLO) while the helper runs that job's side 1; every output
    equals the reference within the fp32 tolerances. Before this review's fixes it did not (54-58 % of one session's
    output off, in every try): a refused K-cut pair's solo run (cpair.K_SOLO) and a Winograd or direct pair run alone
    (rnpair's ``alone``: the helper not usable, which it may be while it still runs another caller's job) both ran
    their side 1 in the helper's buffers, without the slot; it fails with either fix alone on this box (the rnpair one
    with the 3x3 layer)."""
    import threading
    import time

    from kernelkit import Session

    rng = np.random.default_rng(11)
    m1, f1 = _projections_model(rng, 14)
    m2, f2 = _projections_model(rng, 13, 512)
    want1 = Session(m1, vendors=["reference"]).run(None, f1)[0]
    want2 = Session(m2, vendors=["reference"]).run(None, f2)[0]
    s1 = Session(m1, vendors=["numba"], fallback=False, threads=2)
    s2 = Session(m2, vendors=["numba"], fallback=False, threads=2)
    one1 = Session(m1, vendors=["numba"], threads=1).run(None, f1)[0]
    assert session_pair_calls(s1, f1, want1, one1, 10)[0] >= 10  # (compiled, the helper serving)
    assert_close(s2.run(None, f2)[0], want2, np.float32)
    srv = fpair.server()
    errors, runs = [], [0]
    stop = time.perf_counter() + 5

    def loop(sess, feeds, want):
        try:
            while time.perf_counter() < stop:
                srv.until = 0.0  # (the back-off of a loaded box cleared: pairs keep being tried)
                assert_close(sess.run(None, feeds)[0], want, np.float32)
                runs[0] += 1
        except AssertionError as e:  # (reported on the test's thread)
            errors.append(e)

    threads = [threading.Thread(target=loop, args=a) for a in ((s1, f1, want1), (s1, f1, want1), (s2, f2, want2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert runs[0] >= 3
