"""The layer set-up the pair tests share (test_rnpair.py, test_tail.py, test_pair_phases.py, test_wino_ahead.py): a
Conv kernel prepared for a layer's shapes at a thread budget, the layer's read-only inputs, the reference's output (the
residual added, Relu where the attributes ask), a call at a given budget into a NaN-filled output, the one-thread
path's output, a bound call's pair, and the helper's half of a pair run by hand."""
from __future__ import annotations

import numpy as np
from kernelkit.invoke import KernelContext
from kernelkit.ir import Node, TensorSpec
from kernelkit.testing import assert_close, run_single_op
from kernelkit_numba import config
from kernelkit_numba.kernels import conv_serial, cpair, fpair, pairs, rnpair
from kernelkit_numba.kernels.conv import Conv


def _ro(a):
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


def _out_shape(xs, ws, attrs):
    s = attrs.get("strides", [1, 1])[0]
    return (xs[0], ws[0], (xs[2] - 1) // s + 1, (xs[3] - 1) // s + 1)


def _kernel(xs, ws, attrs, threads, res):
    names = ["x", "w", "b"] + (["z"] if res else [])
    k = Conv()
    k.context = KernelContext(Node("Conv", names, ["y"], {}, "n"), None, {}, threads)
    specs = [TensorSpec(xs, "float32"), TensorSpec(ws, "float32"), TensorSpec((ws[0],), "float32")]
    if res:
        specs.append(TensorSpec(_out_shape(xs, ws, attrs), "float32"))
    k.prepare(specs, attrs)
    return k


def _layer(case, seed=0):
    xs, ws, attrs, res, _op = case
    rng = np.random.default_rng(seed)
    x = _ro(rng.standard_normal(xs).astype(np.float32))
    w = _ro(rng.standard_normal(ws).astype(np.float32) * np.float32(0.1))
    b = _ro(rng.standard_normal(ws[0]).astype(np.float32))
    z = _ro(rng.standard_normal(_out_shape(xs, ws, attrs)).astype(np.float32)) if res else None
    return [x, w, b] + ([z] if res else [])


def _reference(inputs, attrs):
    conv_attrs = {k: v for k, v in attrs.items() if not k.startswith("activation")}
    (y,) = run_single_op("Conv", inputs[:3], conv_attrs, vendors=["reference"])
    if len(inputs) > 3:
        y = y + inputs[3]
    return (np.maximum(y, 0) if attrs.get("activation") == "Relu" else y).astype(np.float32)


def _at(threads, fn, inputs, shape):
    with config.num_threads(threads):
        return fn(*inputs, out=np.full(shape, np.nan, np.float32))


def _one_thread(case, seed):
    """(inputs, output shape, the one-thread path's output) of the layer ``case`` (its inputs of ``seed``), that
    output checked against the reference within the fp32 tolerances."""
    xs, ws, attrs, res, _op = case
    inputs = _layer(case, seed)
    shape = _out_shape(xs, ws, attrs)
    one = _at(1, _kernel(xs, ws, attrs, 1, res).compute, inputs, shape)
    assert_close(one, _reference(inputs, attrs), np.float32)
    return inputs, shape, one


def _off_and_on(case, seed, srv, monkeypatch, module, switch: str, pair_of):
    """A switch's A/B on the layer ``case`` (inputs of ``seed``), the helper ``srv`` awake: the layer's two-thread bound
    call with ``module.switch`` off (its output checked against the one-thread path's within the fp32 tolerances) and
    then on (monkeypatched): (inputs, output shape, the one-thread output, the off call's pair, its output, the on
    call, its pair), the pairs by ``pair_of``."""
    xs, ws, attrs, res = case[:4]
    inputs, shape, one = _one_thread(case, seed)
    srv.ctl[pairs.AWAKE] = 1
    monkeypatch.setattr(module, switch, False)
    off = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    want = _at(2, off, inputs, shape)
    assert_close(want, one, np.float32)
    monkeypatch.setattr(module, switch, True)
    fn = conv_serial.bound_compute(_kernel(xs, ws, attrs, 2, res))
    return inputs, shape, one, pair_of(off), want, fn, pair_of(fn)


def _alone_claims_all(srv, fn, inputs, shape, want, d, units: int) -> None:
    """cpair's units claimed by both sides (SUB_SPLIT's copy, STEM_SPLIT's phases), the helper ``srv`` never coming:
    the bound call ``fn`` runs alone, bit for bit ``want``, its caller having claimed and done every one of the
    ``units`` (descriptor ``d``), the raw input's address cleared after the call."""
    alone = srv.stats["alone"]
    got = _at(2, fn, inputs, shape)
    assert srv.stats["alone"] == alone + 1 and srv.stats["paired"] == 0
    np.testing.assert_array_equal(got, want)
    assert d[cpair.U_CLAIM] == (units << 32) | units and d[cpair.U_DONE] == units and d[cpair.U_X] == 0


def _graph_conv(g, rng, t, m: int, c: int, k: int, gain: float = 0.5, **attrs):
    """A Conv of ``m`` output channels over ``c`` input channels a group, ``k`` x ``k``, in the GraphBuilder ``g``
    on ``t``: weights of ``rng``'s normals times gain / sqrt(c k k), a bias of normals times 0.1 (the small models'
    layers)."""
    w = g.constant((rng.standard_normal((m, c, k, k)) * (gain / np.sqrt(c * k * k))).astype(np.float32))
    b = g.constant(rng.standard_normal(m).astype(np.float32) * np.float32(0.1))
    return g.op("Conv", t, w, b, **attrs)


def _no_tail(monkeypatch) -> None:
    """cpair.TAIL and rnpair.TAIL_DIRECT off (on by default since issue 11, session 19): for the tests of the cuts
    that a claimed middle replaces (the halves as bound, COLS_SPLIT's, FOLLOW's, SUB_OWN's, EXPAND_PIXELS',
    DIRECT_ROWS')."""
    monkeypatch.setattr(cpair, "TAIL", False)
    monkeypatch.setattr(rnpair, "TAIL_DIRECT", False)


def _pair_of(fn):
    """The rnpair.Pair a bound call closes over, or None."""
    cells = [c.cell_contents for c in getattr(fn, "__closure__", None) or ()
             if isinstance(c.cell_contents, rnpair.Pair)]
    return cells[0] if cells else None


def _cells(fn) -> dict:
    """A bound call's closure by name (its filled cells only: a nested function defined after has none yet)."""
    cells, code = {}, getattr(fn, "__code__", None)
    for name, c in zip(code.co_freevars if code else (), getattr(fn, "__closure__", None) or ()):
        try:
            cells[name] = c.cell_contents
        except ValueError:
            pass
    return cells


def _cpair_of(fn):
    """The cpair.Pair a bound call closes over, or None."""
    pairs_ = [c for c in _cells(fn).values() if isinstance(c, cpair.Pair)]
    return pairs_[0] if pairs_ else None


def _helper_half(srv, desc, ya, shape):
    """The helper's half of ``desc``'s job, run by hand on this thread through fpair's loop into a fresh NaN
    output (the descriptor's output slot ``ya``): published as job 9 with this descriptor, whatever the last
    call published (a call the caller ran alone publishes none)."""
    y = np.full(shape, np.nan, np.float32)
    desc[ya] = y.ctypes.data
    srv.ctl[pairs.DESC] = desc.ctypes.data
    srv.ctl[pairs.STATE] = 9 * 4 + pairs.OPEN
    assert fpair.pair_serve(srv.ctl, 1 << 22, 1 << 40) == 0
    return y


def _k_part(desc, m_n: int, l_n: int) -> np.ndarray:
    """A K-cut pair's buffer of side 1's partial sums (the descriptor's ``KS_PART``), as an array over its memory."""
    return np.ctypeslib.as_array((np.ctypeslib.ctypes.c_float * (m_n * l_n)).from_address(int(desc[cpair.KS_PART])))


def _k_side_by_hand(srv, desc, shape, m_n: int, l_n: int):
    """A K-cut pair's helper side run by hand (_helper_half) after a call the caller ran alone: it writes the partial
    sums the caller's run of it wrote into the layer's buffer, bit for bit, and no output element."""
    part = _k_part(desc, m_n, l_n)
    mine = part.copy()
    part[:] = np.nan
    y = _helper_half(srv, desc, cpair.YA, shape)
    np.testing.assert_array_equal(part, mine)
    assert np.isnan(y).all()


def _half_by_hand(srv, desc, ya, shape, want):
    """_helper_half, which must write part of the output but not all of it (its half), equal to ``want`` there bit
    for bit."""
    y = _helper_half(srv, desc, ya, shape)
    written = ~np.isnan(y)
    assert written.any() and not written.all()
    np.testing.assert_array_equal(y[written], want[written])
