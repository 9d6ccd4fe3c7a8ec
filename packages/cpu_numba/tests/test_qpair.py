"""Batch-1 DynamicQuantizeMatMul as two halves on two cores (kernels/qpair.py): the helper's half,
the caller's, the caller alone, a busy slot, NaN, the session's path at two threads and the
back-off, each bit for bit the reference kernel's product."""
from __future__ import annotations

import time

import numpy as np
import pytest
from kernelkit import Session
from kernelkit.testing import run_single_op, single_op_model
from kernelkit_numba import by_kind
from kernelkit_numba.kernels import fpair, qgemm, qpack, qpair, qtile

pytestmark = pytest.mark.skipif(not qpair.X86, reason="pairs need x86-64 (pause, the cycle counter)")


def _need_vnni():
    if not qtile.available("vnni512"):
        pytest.skip("vnni512 cannot run here")


def _inputs(rng, shape, n, b_dtype=np.int8, per_col=False, case="mixed"):
    a = rng.standard_normal(shape).astype(np.float32)
    if case == "positive":
        a = np.abs(a) + np.float32(0.5)
    elif case == "nan":
        a.reshape(-1)[shape[-1] // 2] = np.nan
    info = np.iinfo(b_dtype)
    b = rng.integers(info.min, info.max + 1, (shape[-1], n)).astype(b_dtype)
    b_scale = rng.uniform(0.01, 0.02, n if per_col else ()).astype(np.float32)
    b_zp = rng.integers(info.min, info.max + 1, n).astype(b_dtype) if per_col else np.array(3, b_dtype)
    bias = rng.standard_normal(n).astype(np.float32)
    return [a, b, b_scale, b_zp, bias]


def _want(inputs, relu):
    kw = dict(passes=False, constants=(1, 2, 3, 4), domain="com.microsoft")
    (want,) = run_single_op("DynamicQuantizeMatMul", inputs, vendors=["reference"], **kw)
    return np.maximum(want, np.float32(0)) if relu else want


def _bound(inputs, relu, threads=2, monkeypatch=None):
    """A numba session of the one node, run until its product is bound; (session, feeds, kernel)."""
    model = single_op_model("DynamicQuantizeMatMul", inputs, {"activation": "Relu"} if relu else None,
                            constants=(1, 2, 3, 4), domain="com.microsoft")
    sess = Session(model, vendors=["numba"], fallback=False, threads=threads, passes=False)
    feeds = {"in0": inputs[0]}
    sess.run(None, feeds)
    kernel = next(s.kernel for s in sess._executor.plan.steps if getattr(s, "kernel", None) is not None)
    return sess, feeds, kernel


def _pair_of(inputs, relu=False):
    """(kind, descriptor and its arrays, A as 2-D, the serial call's result) of a bound product."""
    sess, feeds, kernel = _bound(inputs, relu, threads=1)
    want = sess.run(None, feeds)[0]
    head = kernel._small[6]
    x2 = np.ascontiguousarray(inputs[0]).reshape(-1, inputs[0].shape[-1])
    x2.setflags(write=False)
    made = qpair.descriptor(head, x2.shape, qgemm.activation_code(kernel))
    return head[0], made, x2, want.reshape(-1)


@pytest.mark.parametrize("shape,n", [((1, 784), 1024), ((3, 300), 1000), ((8, 200), 300)])
@pytest.mark.parametrize("per_col", [False, True])
@pytest.mark.parametrize("relu", [False, True])
def test_helper_and_caller_halves(shape, n, per_col, relu):
    """The helper's spin claims a published job and runs the upper half; the caller's half the lower:
    together the one-thread product bit for bit (a partial last panel and column group at N 1000, 300)."""
    _need_vnni()
    rng = np.random.default_rng(n + shape[0])
    inputs = _inputs(rng, shape, n, np.uint8 if per_col else np.int8, per_col)
    kind, (desc, _arrays), x2, want = _pair_of(inputs, relu)
    flat = np.full(want.size, np.nan, np.float32)
    desc[qpair.X2], desc[qpair.M], desc[qpair.FLAT] = x2.ctypes.data, x2.shape[0], flat.ctypes.data
    ctl = np.zeros(8, np.int64)
    ctl[qpair.DESC] = desc.ctypes.data
    ctl[qpair.STATE] = 5 * 4 + qpair.OPEN  # job 5, open
    assert fpair.pair_serve(ctl, 1 << 22, 1 << 40) == 0  # fpair's loop (the half by address): claimed, ran,
    # then idled out
    assert ctl[qpair.STATE] == 5 * 4 + qpair.DONE
    split = int(desc[qpair.SPLIT]) * qpack.GROUP_PANELS * 16
    out = flat.reshape(x2.shape[0], n)
    assert np.isnan(out[:, :split]).all() and not np.isnan(out[:, split:]).any()
    assert by_kind.specialize(qpair._half, kind)(desc, 0)
    np.testing.assert_array_equal(flat, want)
    np.testing.assert_array_equal(flat, _want(inputs, relu).reshape(-1))


def test_caller_alone_busy_slot_and_nan():
    """No helper: the caller claims the second half itself (2); a held slot: nothing done (3); a NaN
    in A: 0 (the general path)."""
    _need_vnni()
    rng = np.random.default_rng(1)
    inputs = _inputs(rng, (1, 784), 1024)
    kind, (desc, _arrays), x2, want = _pair_of(inputs)
    run = by_kind.specialize(qpair.pair_run, kind)
    ctl = np.zeros(8, np.int64)
    flat = np.empty(want.size, np.float32)
    assert run(ctl, desc, x2, flat, qpair.NO_RES) == 2
    np.testing.assert_array_equal(flat, want)
    assert ctl[qpair.STATE] == 1 * 4 + qpair.TAKEN and ctl[qpair.SLOT] == 0
    ctl[qpair.SLOT] = 1
    assert run(ctl, desc, x2, np.empty(want.size, np.float32), qpair.NO_RES) == 3
    ctl[qpair.SLOT] = 0
    bad = x2.copy()
    bad[0, 5] = np.nan
    bad.setflags(write=False)
    assert run(ctl, desc, bad, np.empty(want.size, np.float32), qpair.NO_RES) == 0


@pytest.mark.filterwarnings("ignore:invalid value encountered")
@pytest.mark.parametrize("case", ["mixed", "positive", "nan"])
@pytest.mark.parametrize("relu", [False, True])
def test_session_pairs_at_two_threads(case, relu):
    """A two-thread session's batch-1 product takes the pair path (the helper woken, then the product
    in halves) and equals the reference bit for bit on every run; a NaN in A the general path."""
    _need_vnni()
    rng = np.random.default_rng(7)
    inputs = _inputs(rng, (1, 784), 1024, case=case)
    want = _want(inputs, relu)
    sess, feeds, kernel = _bound(inputs, relu)
    if case == "nan":  # the general path, never bound
        for _ in range(5):
            np.testing.assert_array_equal(sess.run(None, feeds)[0], want)
        assert kernel._plain is None
        return
    pair = kernel._plain[19]
    assert pair is not None
    helper = pair[0]
    helper.until = 0.0
    before = dict(helper.stats)
    deadline = time.perf_counter() + 60

    def helper_seen():  # woken by these calls, or already awake from an earlier test and serving halves
        return helper.stats["wakes"] > before["wakes"] or helper.stats["paired"] > before["paired"]

    while True:
        got = sess.run(None, feeds)[0]
        np.testing.assert_array_equal(got, want)
        tried = helper.stats["paired"] + helper.stats["alone"] - before["paired"] - before["alone"]
        if (tried >= 20 and helper_seen()) or time.perf_counter() > deadline:
            break  # (under pytest-xdist the other worker may hold the second core for a while)
        helper.until = 0.0  # a loaded test machine's back-off: try again
    assert helper_seen()
    assert tried >= 20
    import threading  # one helper thread for every pair, int8 and float32 (fpair's)

    assert helper is fpair.server() and sum("-pair-" in t.name for t in threading.enumerate()) == 1


def test_one_thread_and_switch_off(monkeypatch):
    """No pair at one thread, under KERNELKIT_INT8_PAIR=off, for the few-column last layer, or for
    many rows under KERNELKIT_INT8_PAIR=few."""
    _need_vnni()
    rng = np.random.default_rng(3)
    inputs = _inputs(rng, (1, 784), 1024)
    assert _bound(inputs, False, threads=1)[2]._plain[19] is None
    assert _bound(_inputs(rng, (1, 1024), 10), False)[2]._plain[19] is None
    monkeypatch.setenv(qpair.ENV, "off")
    assert _bound(inputs, False)[2]._plain[19] is None
    monkeypatch.delenv(qpair.ENV, raising=False)  # by default many rows pair their row blocks
    assert _bound(_inputs(rng, (40, 784), 1024), False)[2]._plain[19] is not None
    monkeypatch.setenv(qpair.ENV, "few")  # few rows only: many rows run on the caller
    assert _bound(_inputs(rng, (40, 784), 1024), False)[2]._plain[19] is None
    assert _bound(inputs, False)[2]._plain[19] is not None


def test_back_off_on_stalls_and_misses(monkeypatch):
    """A stall (the caller waited for the helper's half longer than STALL_S) or MISSES unclaimed jobs
    in a row stop the pairs for a back-off that doubles while the signs go on (on fpair's helper, the
    one for every pair, with qpair's strict stall rule: qgemm's ``result(done, strict=True)``)."""
    helper = fpair.FPairServer(99)
    helper.ctl[fpair.OWN] = 1 << 40  # no slack for the caller's own half under the strict rule
    helper.stall = 100
    helper.ctl[qpair.WAITED] = 50
    helper.result(1, strict=True)
    assert helper.until == 0.0 and helper.stats["paired"] == 1
    helper.ctl[qpair.WAITED] = 500
    helper.result(1, strict=True)
    first = helper.until - time.perf_counter()
    assert helper.stats["stalls"] == 1 and 0 < first <= qpair.MIN_BACKOFF_S
    helper.ctl[qpair.AWAKE] = 1
    assert not helper.usable()
    for _ in range(qpair.MISSES):
        helper.result(2)
    assert helper.stats["backoffs"] == 2 and helper.until - time.perf_counter() > first


def _rows_model(rng, m, k, n, kind):
    """One DynamicQuantizeMatMul of m rows with one of the transformer's epilogues: ``split`` (the merged
    Q/K/V), a Gelu, or a residual and a LayerNormalization; (inputs, attrs, outputs)."""
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    inputs = [a, b, rng.uniform(0.01, 0.02, n).astype(np.float32), rng.integers(-128, 128, n).astype(np.int8),
              rng.standard_normal(n).astype(np.float32)]
    if kind == "split":
        return inputs, {"split": [n // 3, n // 3, n - 2 * (n // 3)]}, 3
    if kind == "gelu":
        return inputs, {"activation": "Gelu"}, 1
    inputs += [rng.standard_normal((m, n)).astype(np.float32), rng.uniform(0.5, 2, n).astype(np.float32),
               rng.standard_normal(n).astype(np.float32)]
    return inputs, {"norm_epsilon": 1e-5}, 1


@pytest.mark.parametrize("kind", ["split", "gelu", "norm"])
@pytest.mark.parametrize("m,k,n", [(128, 256, 768), (100, 130, 200)])
def test_row_block_halves_at_two_threads(kind, m, k, n, monkeypatch):
    """A two-thread session's product of many rows runs as two halves of A's row blocks (the caller's
    and the helper's, A's range found once) with every epilogue (parts, Gelu, residual and norm), equal
    to the one-thread session bit for bit on every run (and the reference, without Gelu and norm)."""
    _need_vnni()
    monkeypatch.setenv(qpair.ENV, "rows")
    rng = np.random.default_rng(m + n)
    inputs, attrs, n_out = _rows_model(rng, m, k, n, kind)
    consts = tuple(i for i in range(1, len(inputs)) if i != 5)  # the residual is an input
    kw = dict(attrs=attrs, n_outputs=n_out, constants=consts, domain="com.microsoft")
    model = single_op_model("DynamicQuantizeMatMul", inputs, attrs, n_out, consts, "com.microsoft")
    feeds = {f"in{i}": x for i, x in enumerate(inputs) if i not in consts}
    want = Session(model, vendors=["numba"], fallback=False, threads=1, passes=False).run(None, feeds)
    if kind == "split":  # numba's Gelu and LayerNormalization loops are its own (equal to its nodes: test_pass_qmerge)
        ref = run_single_op("DynamicQuantizeMatMul", inputs, vendors=["reference"], passes=False, **kw)
        for w, r in zip(want, ref):
            np.testing.assert_array_equal(w, r)
    sess = Session(model, vendors=["numba"], fallback=False, threads=2, passes=False)
    sess.run(None, feeds)
    kernel = next(s.kernel for s in sess._executor.plan.steps if getattr(s, "kernel", None) is not None)
    pair = kernel._plain[19]
    assert pair is not None and pair[1][qpair.MODE] == qpair.ROWS
    helper = pair[0]
    before = helper.stats["paired"] + helper.stats["alone"]
    deadline = time.perf_counter() + 60
    while True:
        helper.until = 0.0
        got = sess.run(None, feeds)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
        if helper.stats["paired"] + helper.stats["alone"] - before >= 10 or time.perf_counter() > deadline:
            break
    assert helper.stats["paired"] + helper.stats["alone"] - before >= 10


def test_row_block_helper_half(monkeypatch):
    """The helper's spin runs the upper row blocks of a ROWS job that the caller published (A's scale,
    zero point and mult found first), the caller's half the lower: the one-thread product bit for bit."""
    _need_vnni()
    monkeypatch.setenv(qpair.ENV, "rows")
    rng = np.random.default_rng(11)
    inputs, attrs, _ = _rows_model(rng, 96, 200, 300, "norm")
    consts = (1, 2, 3, 4, 6, 7)
    model = single_op_model("DynamicQuantizeMatMul", inputs, attrs, 1, consts, "com.microsoft")
    (want,) = Session(model, vendors=["numba"], fallback=False, threads=1, passes=False).run(
        None, {"in0": inputs[0], "in5": inputs[5]})
    sess = Session(model, vendors=["numba"], fallback=False, threads=2, passes=False)
    sess.run(None, {"in0": inputs[0], "in5": inputs[5]})
    kernel = next(s.kernel for s in sess._executor.plan.steps if getattr(s, "kernel", None) is not None)
    kind, desc = kernel._plain[19][5], kernel._plain[19][1].copy()
    x2 = inputs[0].copy()
    x2.setflags(write=False)
    res = inputs[5].copy()
    flat = np.full(want.size, np.nan, np.float32)
    mult = np.empty(int(desc[qpair.BSCALE_N]), np.float32)
    b_scale = np.ascontiguousarray(inputs[2])
    finite, scale, zp = qpack.dq_params(x2, b_scale, mult)
    assert finite
    fvals = np.array([scale, 1e-5], np.float64)
    desc[qpair.X2], desc[qpair.M], desc[qpair.FLAT], desc[qpair.RES] = x2.ctypes.data, 96, flat.ctypes.data, \
        res.ctypes.data
    desc[qpair.MULT], desc[qpair.FVALS], desc[qpair.ZP] = mult.ctypes.data, fvals.ctypes.data, zp
    ctl = np.zeros(8, np.int64)
    ctl[qpair.DESC] = desc.ctypes.data
    ctl[qpair.STATE] = 3 * 4 + qpair.OPEN
    assert fpair.pair_serve(ctl, 1 << 22, 1 << 40) == 0
    assert ctl[qpair.STATE] == 3 * 4 + qpair.DONE
    cut = int(desc[qpair.SPLIT]) * int(desc[qpair.BLOCK]) * 300
    assert np.isnan(flat[:cut]).all() and not np.isnan(flat[cut:]).any()
    assert by_kind.specialize(qpair._half, kind)(desc, 0)
    np.testing.assert_array_equal(flat.reshape(want.shape), want)
