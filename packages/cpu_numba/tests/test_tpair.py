"""The transformer's attention (by heads), LayerNorm and Softmax (by rows) at two threads as two halves on
fpair's helper (kernels/tpair.py): the caller alone, the helper's half run by hand, a busy slot, the helper
asleep or backed off, the pool's worker spinning, the switches, and a small encoder block through a
two-thread session. The LayerNorm and Softmax halves run the one-thread path's row kernels, so they equal it
bit for bit; the attention halves (fgemm's tiles where the one-thread path takes BLAS) are checked against
the reference and the one-thread path within the fp32 tolerances, and the helper's copy of a half bit for
bit against the caller's."""
from __future__ import annotations

import time

import numpy as np
import pytest
from kernelkit import Session
from kernelkit.builder import GraphBuilder
from kernelkit.invoke import KernelContext
from kernelkit.ir import Node, TensorSpec
from kernelkit.testing import assert_close, run_single_op
from kernelkit_numba import config, shards
from kernelkit_numba.kernels import attention, fpair, norm, pairs, softmax, tpair

pytestmark = pytest.mark.skipif(not pairs.X86 or not tpair.enabled(),
                                reason="pairs need x86-64 (pause, the cycle counter) and compiled code")

NINF = np.float32(-np.inf)
# (Q, K, V shapes, mask shape or None, attrs): the transformer's 3-D projections (4 heads); 4-D with BERT's
# padding bias (six (batch, head) pairs, keys != queries, dv != dk); three heads of one item (odd: each cut in
# two by query rows) with a (queries, keys) mask; grouped-query heads in 3-D
CASES = [
    ((1, 24, 64), (1, 24, 64), (1, 24, 64), None, {"q_num_heads": 4, "kv_num_heads": 4}),
    ((2, 3, 10, 8), (2, 3, 13, 8), (2, 3, 13, 12), (2, 1, 1, 13), {}),
    ((1, 3, 9, 16), (1, 3, 9, 16), (1, 3, 9, 16), (9, 9), {"scale": 0.3}),
    ((1, 7, 32), (1, 5, 16), (1, 5, 16), None, {"q_num_heads": 4, "kv_num_heads": 2}),
]


def _ro(a):
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


def _operands(case, seed=0):
    qs, ks, vs, ms, _attrs = case
    rng = np.random.default_rng(seed)
    ops = [_ro(rng.uniform(-1, 1, s).astype(np.float32) * f) for s, f in ((qs, 1), (ks, 3), (vs, 1))]
    if ms is not None:
        mask = np.where(rng.uniform(size=ms) < 0.3, np.float32(-10000), rng.uniform(-1, 1, ms)).astype(np.float32)
        if ms == (9, 9):
            mask[np.triu_indices(9, 1)] = NINF  # causal
        ops.append(_ro(mask))
    return ops


def _kernel(case, threads):
    qs, ks, vs, ms, attrs = case
    names = ["q", "k", "v"] + (["m"] if ms else [])
    k = attention.Attention()
    k.context = KernelContext(Node("Attention", names, ["y"], {}, "n"), None, {}, threads)
    k.prepare([TensorSpec(s, "float32") for s in (qs, ks, vs) + ((ms,) if ms else ())], attrs)
    return k


def _at(threads, fn, *args, **kw):
    was = getattr(config._local, "threads", None)
    config._local.threads = threads
    try:
        return fn(*args, **kw)
    finally:
        config._local.threads = was


def _helper_half(srv, desc, out):
    """Republish the last job with its output at ``out`` (NaN): fpair's helper loop runs the second half."""
    out[...] = np.nan
    desc[tpair.YA] = out.ctypes.data
    srv.ctl[pairs.DESC] = desc.ctypes.data  # this job's descriptor, whatever the last call published
    srv.ctl[pairs.STATE] = 9 * 4 + pairs.OPEN
    assert fpair.pair_serve(srv.ctl, 1 << 22, 1 << 40) == 0
    assert srv.ctl[pairs.STATE] == 9 * 4 + pairs.DONE
    written = ~np.isnan(out)
    assert written.any() and not written.all()  # the second half only
    return written


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])))
@pytest.mark.parametrize("rows", [None, 4])
def test_attention_caller_alone_and_helper_half(case, rows, quiet_server, monkeypatch):
    """The helper 'spinning' but never coming: the caller claims the second half; the result equals the
    reference and the one-thread path; the helper's loop run by hand serves a republished job's second half,
    bit for bit the caller's. ``rows``: blocks of 4 query rows (attention.SCRATCH_BYTES)."""
    if rows:
        monkeypatch.setattr(attention, "SCRATCH_BYTES", 4 * rows * case[1][-2])
    inputs = _operands(case)
    attrs = case[4]
    want = run_single_op("Attention", inputs, attrs, vendors=["reference"])[0]
    one = _at(1, _kernel(case, 1).compute, *inputs)
    k = _kernel(case, 2)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    got = _at(2, k.compute, *inputs)
    assert srv.stats["alone"] == 1 and srv.stats["paired"] == 0
    assert srv.ctl[pairs.SLOT] == 0
    assert_close(got, want, np.float32)
    assert_close(got, one, np.float32)
    (made,) = k._pairs.values()
    assert made and made.desc[tpair.OP] == tpair.OP_ATTN
    out = np.empty_like(got)
    written = _helper_half(srv, made.desc, out)
    np.testing.assert_array_equal(out[written], got[written])


def test_attention_special_values(quiet_server):
    """A NaN in Q makes its row NaN, a query row masked with -inf everywhere gives zeros (the reference's rules),
    through the halves."""
    case = CASES[2]
    q, k, v, mask = (np.array(a) for a in _operands(case, 3))
    q[0, 0, 1, 2] = np.nan
    mask[4] = NINF
    inputs = [_ro(a) for a in (q, k, v, mask)]
    quiet_server.ctl[pairs.AWAKE] = 1
    got = _at(2, _kernel(case, 2).compute, *inputs)
    assert quiet_server.stats["alone"] == 1
    assert np.isnan(got[0, 0, 1]).all() and (got[0, :, 4] == 0).all()
    assert_close(got, run_single_op("Attention", inputs, case[4], vendors=["reference"])[0], np.float32)


@pytest.mark.parametrize("op", ["norm", "softmax"])
def test_rows_equal_the_one_thread_path(op, quiet_server):
    """LayerNorm and Softmax by rows: the caller alone and the helper's half equal the one-thread path bit for
    bit (its row kernels), and the reference within the tolerances."""
    rng = np.random.default_rng(2)
    x = _ro(rng.standard_normal((3, 60, 400)).astype(np.float32) * 3)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    if op == "norm":
        scale, bias = _ro(rng.standard_normal(400).astype(np.float32)), _ro(rng.standard_normal(400).astype(np.float32))
        one = _at(1, norm.layer_normalization, x, scale, bias, epsilon=1e-5)
        got = _at(2, norm.layer_normalization, x, scale, bias, epsilon=1e-5)
        want = run_single_op("LayerNormalization", [x, scale, bias], {"epsilon": 1e-5}, 3, vendors=["reference"])
        for g, o, w in zip(got, one, want):
            np.testing.assert_array_equal(g, o)
            assert_close(g, w, np.float32)
        got = got[0]
    else:
        one = _at(1, softmax.softmax, x)
        got = _at(2, softmax.softmax, x)
        np.testing.assert_array_equal(got, one)
        assert_close(got, run_single_op("Softmax", [x], {"axis": -1}, vendors=["reference"])[0], np.float32)
    assert srv.stats["alone"] == 1
    made = next(m for key, m in tpair._norms.items() if key[1] == (180, 400) and key[0] == (
        tpair.OP_NORM if op == "norm" else tpair.OP_SOFTMAX))
    out = np.empty_like(got)
    written = _helper_half(srv, made.desc, out)
    np.testing.assert_array_equal(out[written], got[written])
    assert written[-1].all() and not written[0].any()  # the last rows


def test_busy_slot_asleep_back_off_pool_and_switch(quiet_server, monkeypatch):
    """A held slot, the pool's worker spinning, a one-thread budget or the switch off: the general path (no
    job); the helper asleep or backed off: both halves on the caller, no job."""
    case = CASES[1]
    inputs = _operands(case, 1)
    srv = quiet_server
    srv.ctl[pairs.AWAKE] = 1
    want = _at(2, _kernel(case, 2).compute, *inputs)  # (a job: the caller claims the helper's half too)
    k = _kernel(case, 2)
    srv.ctl[pairs.SLOT] = 1
    assert_close(_at(2, k.compute, *inputs), want, np.float32)
    assert srv.ctl[pairs.JOB] == 1 and srv.stats["alone"] == 1  # (only the first kernel's)
    srv.ctl[pairs.SLOT] = 0
    srv.ctl[pairs.AWAKE] = 0  # asleep: both halves on the caller, bit for bit the pair's
    np.testing.assert_array_equal(_at(2, k.compute, *inputs), want)
    srv.ctl[pairs.AWAKE] = 1
    srv.until = time.perf_counter() + 60  # backed off
    np.testing.assert_array_equal(_at(2, k.compute, *inputs), want)
    assert srv.ctl[pairs.JOB] == 1
    srv.until = 0.0
    monkeypatch.setattr(shards.POOL, "workers_spinning", lambda: True)
    assert_close(_at(2, k.compute, *inputs), want, np.float32)
    monkeypatch.setattr(shards.POOL, "workers_spinning", lambda: False)
    assert_close(_at(1, k.compute, *inputs), want, np.float32)
    monkeypatch.setattr(tpair, "ON", False)
    assert_close(_at(2, k.compute, *inputs), want, np.float32)
    assert srv.ctl[pairs.JOB] == 1
    monkeypatch.setattr(tpair, "ON", True)
    np.testing.assert_array_equal(_at(2, k.compute, *inputs), want)
    assert srv.ctl[pairs.JOB] == 2


def test_a_backed_off_helper_backs_the_pool_off(quiet_server, monkeypatch):
    """POOL_BACKOFF: a node that finds the helper backed off (here by a product's pair, as fpair.run's) backs the
    shard pool off, so that its look at the free cores decides the end; asleep: no; off: the pairs' back-off
    alone."""
    calls = []
    monkeypatch.setattr(shards.POOL, "_back_off", lambda why: calls.append(why))
    case = CASES[0]
    inputs = _operands(case, 2)
    k = _kernel(case, 2)
    srv = quiet_server
    _at(2, k.compute, *inputs)  # asleep: both halves on the caller, no back-off
    assert calls == []
    srv.ctl[pairs.AWAKE] = 1
    srv.until = time.perf_counter() + 60
    _at(2, k.compute, *inputs)
    assert len(calls) == 1
    monkeypatch.setattr(tpair, "POOL_BACKOFF", False)
    _at(2, k.compute, *inputs)
    assert len(calls) == 1 and srv.ctl[pairs.JOB] == 0


def test_rows_kernels_take_two_threads_where_they_pair(monkeypatch):
    """LayerNorm's and Softmax's kernels get the session's two threads where they pair (ROWS_MIN elements,
    rows to cut), one thread otherwise."""
    def budget(op, shape, attrs, threads=2):
        k = norm.LayerNormKernel() if op == "LayerNormalization" else softmax.SoftmaxKernel()
        k.context = KernelContext(Node(op, ["x"], ["y"], {}, "n"), None, {}, threads)
        k.prepare([TensorSpec(shape, "float32")] * (3 if op == "LayerNormalization" else 1), attrs)
        return k.static_threads() or 2

    assert budget("LayerNormalization", (1, 512, 256), {}) == 2
    assert budget("Softmax", (4, 128, 128), {}) == 2
    assert budget("LayerNormalization", (1, 512, 256), {}, threads=1) == 1
    assert budget("Softmax", (4, 128, 128), {"axis": 1}) == 1
    assert budget("LayerNormalization", (1, 16, 256), {}) == 1
    monkeypatch.setattr(tpair, "ON", False)
    assert budget("LayerNormalization", (1, 512, 256), {}) == 1


def _encoder(rng):
    """Attention over 4 heads of 64 (the benchmark transformer's), LayerNorm, Softmax."""
    g = GraphBuilder("enc")
    x = g.input("x", (1, 128, 256))

    def proj(t):  # a Gemm on the rows, as the converter makes of the benchmark's MatMul + Add
        w = g.constant((rng.standard_normal((256, 256)) * 0.06).astype(np.float32))
        rows = g.op("Reshape", t, g.constant(np.array([128, 256], np.int64)))
        y = g.op("Gemm", rows, w, g.constant(rng.standard_normal(256).astype(np.float32)))
        return g.op("Reshape", y, g.constant(np.array([1, 128, 256], np.int64)))

    def heads(t, perm):
        return g.op("Transpose", g.op("Reshape", t, g.constant(np.array([1, 128, 4, 64], np.int64))), perm=perm)

    q, kt, v = heads(proj(x), [0, 2, 1, 3]), heads(proj(x), [0, 2, 3, 1]), heads(proj(x), [0, 2, 1, 3])
    s = g.op("Softmax", g.op("Mul", g.op("MatMul", q, kt), g.constant(np.float32(0.125))), axis=-1)
    y = g.op("Reshape", g.op("Transpose", g.op("MatMul", s, v), perm=[0, 2, 1, 3]),
             g.constant(np.array([1, 128, 256], np.int64)))
    y = g.op("LayerNormalization", g.op("Add", y, x), g.constant(np.ones(256, np.float32)),
             g.constant(np.zeros(256, np.float32)), axis=-1, epsilon=1e-5)
    g.output(g.op("Softmax", y, axis=-1))
    return g.build(), {"x": rng.standard_normal((1, 128, 256)).astype(np.float32)}


def test_encoder_through_a_two_thread_session(monkeypatch, session_pair_calls):
    """The block in a two-thread session runs its attention, LayerNorm and Softmax as pairs on fpair's helper
    thread, publishes no pool job, and equals the reference and the one-thread run on every run."""
    monkeypatch.setattr(shards.POOL, "workers_spinning", lambda: False)  # (other tests' pool workers)
    monkeypatch.setattr(shards.POOL, "has_spin_worker", lambda: False)
    monkeypatch.setattr(tpair, "ROWS_MIN", 1 << 15)  # the block's 128 x 256 LayerNorm and Softmax pair too
    calls = {tpair.OP_ATTN: 0, tpair.OP_NORM: 0, tpair.OP_SOFTMAX: 0}
    go = tpair._go

    def counted(made, *arrays):
        done = go(made, *arrays)
        calls[int(made.desc[tpair.OP])] += done
        return done

    monkeypatch.setattr(tpair, "_go", counted)
    model, feeds = _encoder(np.random.default_rng(4))
    want = Session(model, vendors=["reference"]).run(None, feeds)[0]
    one = Session(model, vendors=["numba", "reference"], threads=1).run(None, feeds)[0]
    sess = Session(model, vendors=["numba", "reference"], fallback=False, threads=2)
    assert [s.op for s in sess.plan.kernel_steps()].count("Attention") == 1
    tried, jobs = session_pair_calls(sess, feeds, want, one, 15)
    assert tried >= 15 and jobs == 0
    assert all(n > 0 for n in calls.values()), calls
