"""Numba kernels in the session's memory plan: they write into the arena (``out=``), run in place
where the plan says so, allocate little in a steady state, and still hand the caller fresh arrays
without touching its inputs. Also the kernel wrapper itself: ``takes_out`` from ``compute``'s
signature, and the pre-bound call (``bind``) against ``execute``."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from kernelkit import GraphBuilder, Session
from kernelkit.invoke import KernelContext
from kernelkit.ir import Node, TensorSpec
from kernelkit.registry import _accepted_attrs
from kernelkit.testing import assert_close
from kernelkit_numba._base import FunctionKernel, NumbaKernel, threaded
from kernelkit_numba.kernels import unary

NUMBA = {"vendors": ["numba"], "fallback": False, "passes": False}
REF = {"vendors": ["reference"], "fallback": False, "passes": False}


def _model(shape=(2, 8, 16, 16)):
    """Ops whose numba kernels all take out= and agree with the reference bit for bit."""
    g = GraphBuilder("arena")
    x = g.input("x", shape, "float32")
    k = g.constant(np.linspace(-1, 1, shape[-1]).astype(np.float32), name="k")
    a = g.op("Relu", x, name="relu")
    b = g.op("Add", a, k, name="add")  # in place over relu's block
    c = g.op("Neg", b, name="neg")  # in place again
    d = g.op("MaxPool", c, kernel_shape=[2, 2], strides=[2, 2], name="pool")
    e = g.op("Transpose", d, perm=[0, 2, 3, 1], name="t")
    f = g.op("Concat", e, e, axis=3, name="cat")
    p = g.op("Pad", f, np.array([0, 1, 0, 0, 0, 1, 0, 0], np.int64), name="pad")
    g.output(g.op("Mul", p, p, name="sq"))
    return g.build()


def _feed(shape=(2, 8, 16, 16), seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _arena_buffers(sess):
    return [a.buffer for pool in sess._executor._pools.values() for a in pool._free]


def test_numba_intermediates_live_in_the_arena_and_agree_with_the_reference():
    sess, ref = Session(_model(), **NUMBA), Session(_model(), **REF)
    kernels = [s for s in sess.plan.steps if s.kind == "kernel"]
    assert all(s.key.vendor == "numba" and s.takes_out for s in kernels)
    mem = sess.memory()
    assert mem["kernel_allocated_values"] == 0 and mem["planned_values"] == len(kernels) - 1
    assert mem["inplace_steps"] == 2 and mem["arena_bytes"] == mem["live_peak_bytes"] > 0
    x = _feed()
    for seed in range(3):  # the arena is reused: every run right
        x = _feed(seed=seed)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0])


def _steady_new_bytes(sess, feeds) -> tuple[int, int]:
    """(bytes a third run allocates beyond its outputs at its peak, the plan's live peak)."""
    sess.run(None, feeds)
    sess.run(None, feeds)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        outs = sess.run(None, feeds)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return peak - before - sum(o.nbytes for o in outs), sess.memory()["live_peak_bytes"]


def test_numba_steady_state_run_allocates_little_for_intermediates():
    sess = Session(_model((4, 16, 32, 32)), **NUMBA)
    new, live = _steady_new_bytes(sess, {"x": _feed((4, 16, 32, 32))})
    assert live >= 4 * 16 * 32 * 32 * 4  # relu/add/neg's block at least
    assert new <= 0.1 * live, (new, live)


def test_numba_outputs_are_fresh_and_caller_inputs_untouched():
    sess = Session(_model(), **NUMBA)
    x = _feed()
    kept = x.copy()
    first = sess.run(None, {"x": x})[0]
    second = sess.run(None, {"x": -x})[0]
    np.testing.assert_array_equal(x, kept)
    assert x.flags.writeable  # the feed was read through a read-only view, not frozen
    arena = _arena_buffers(sess)
    assert arena and all(not np.shares_memory(o, buf) for o in (first, second) for buf in arena)
    assert first.flags.owndata and first.flags.writeable and not np.shares_memory(first, second)
    again = sess.run(None, {"x": x})[0]
    np.testing.assert_array_equal(first, again)  # the second run did not write into the first's output


def test_an_elementwise_chain_runs_in_place_from_the_feed_on():
    g = GraphBuilder("chain")
    v = g.input("x", (3, 40), "float32")
    for i, op in enumerate(["Relu", "Neg", "Exp", "Sqrt", "Abs"]):
        v = g.op(op, v, name=f"n{i}")
    g.output(v)
    sess = Session(g.build(), **NUMBA, threads=1)
    assert sess.memory()["inplace_steps"] == 3
    x = _feed((3, 40), seed=4)
    kept = x.copy()
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_allclose(y, np.abs(np.sqrt(np.exp(-np.maximum(x, 0)))), rtol=1e-6)
    np.testing.assert_array_equal(x, kept)


@pytest.mark.parametrize("threads, fast", [(1, True), (2, True), (2, False)])
def test_the_bound_call_matches_execute(threads, fast, monkeypatch):
    """``bind(step)`` (the plan's call: the serial fast path for small work, else the generic one)
    against ``execute``, with and without ``out``, on a writable, a read-only and a strided input."""
    kernel_cls = threaded(unary.KERNELS["LeakyRelu"])
    if not fast:
        monkeypatch.setattr(kernel_cls, "serial_call", lambda self, step: None)
    k = kernel_cls()
    k.context = KernelContext(Node("LeakyRelu", ["x"], ["y"], {}, "n"), None, {}, threads)
    k.prepare([TensorSpec((6, 5), "float32")], {"alpha": 0.25})
    call = k.bind(None)
    assert call.__qualname__.startswith("_serial.") == fast  # which path the plan would take
    base = _feed((6, 10), seed=5)
    for x in (base[:, :5].copy(), np.ascontiguousarray(base[:, 5:]), base[:, ::2]):
        kept = x.copy()
        want = k.execute(x)
        np.testing.assert_array_equal(want, np.where(kept >= 0, kept, kept * np.float32(0.25)))
        np.testing.assert_array_equal(call(x), want)
        out = np.full((6, 5), np.nan, np.float32)
        assert call(x, out=out) is out
        np.testing.assert_array_equal(out, want)
        np.testing.assert_array_equal(x, kept)
        if x.flags.c_contiguous:  # in place, as the plan may ask
            over = x.copy()
            assert call(over, out=over) is over
            np.testing.assert_array_equal(over, want)
        ro = x.copy()
        ro.setflags(write=False)
        np.testing.assert_array_equal(call(ro), want)
        strided = np.full((5, 6), np.nan, np.float32).T  # a caller's out need not be contiguous
        assert call(x, out=strided) is strided
        np.testing.assert_array_equal(strided, want)


def test_takes_out_follows_compute_signature():
    class WithOut(NumbaKernel):
        def compute(self, x, *, out=None):
            y = np.empty_like(x) if out is None else out
            np.negative(x, out=y)
            return y

    class Without(NumbaKernel):
        def compute(self, x):
            return -x

    def fn_out(x, *, alpha=1.0, out=None):
        return np.multiply(x, alpha, out=out)

    def fn_plain(x, *, alpha=1.0):
        return x * alpha

    assert WithOut.takes_out and "out" in _accepted_attrs(WithOut)
    assert not Without.takes_out and "out" not in _accepted_attrs(Without)
    assert threaded(fn_out).takes_out and "out" in _accepted_attrs(threaded(fn_out))
    assert not threaded(fn_plain).takes_out and "out" not in _accepted_attrs(threaded(fn_plain))
    assert not FunctionKernel.takes_out
    k = threaded(fn_out)()
    k.prepare([TensorSpec((3,), "float32")], {"alpha": 2.0})
    out = np.empty(3, np.float32)
    assert k.execute(np.ones(3, np.float32), out=out) is out
    np.testing.assert_array_equal(out, np.full(3, 2, np.float32))
    w = WithOut()
    w.prepare([TensorSpec((3,), "float32")], {})
    np.testing.assert_array_equal(w.bind(None)(np.ones(3, np.float32)), -np.ones(3, np.float32))


def test_symbolic_batch_plans_per_shape_and_rebinds():
    """A symbolic batch dim: the serial fast path is bound once the shapes are known (resize),
    each batch size gets its own memory plan, and results stay exact."""
    g = GraphBuilder("dyn")
    x = g.input("x", ("N", 3, 8, 8), "float32")
    y = g.op("Neg", g.op("Relu", x, name="relu"), name="neg")
    g.output(g.op("MaxPool", g.op("Add", y, y, name="add"), kernel_shape=[2, 2], strides=[2, 2], name="pool"))
    sess, ref = Session(g.build(), **NUMBA, threads=1), Session(g.build(), **REF)
    for batch in (1, 3, 1, 2):
        feed = _feed((batch, 3, 8, 8), seed=batch)
        np.testing.assert_array_equal(sess.run(None, {"x": feed})[0], ref.run(None, {"x": feed})[0])
        mem = sess.memory()
        assert mem["planned_values"] == 3 and mem["live_peak_bytes"] >= batch * 3 * 8 * 8 * 4


def test_large_work_runs_sharded_through_the_bound_call():
    """Work above SERIAL_WORK at threads=2: the generic bound call with a thread budget of 2
    (shards on the pool) writes the same arena values as the reference computes."""
    shape = (4, 64, 128, 128)  # 8 units per element: 2**25, not below SERIAL_WORK
    g = GraphBuilder("big")
    x = g.input("x", shape, "float32")
    y = g.op("Relu", g.op("Add", x, x, name="add"), name="relu")
    g.output(g.op("ReduceMax", g.op("Neg", y, name="neg"), np.array([2, 3], np.int64), keepdims=0, name="max"))
    sess, ref = Session(g.build(), **NUMBA, threads=2), Session(g.build(), **REF)
    assert sess.memory()["planned_values"] == 3
    feed = _feed(shape, seed=9)
    for _ in range(2):
        np.testing.assert_array_equal(sess.run(None, {"x": feed})[0], ref.run(None, {"x": feed})[0])


@pytest.mark.parametrize("k_shape", [(5, 7), (7,), (5, 1), ()])
def test_in_place_over_the_second_operand(k_shape):
    """Sub(k, y) with y dying: the plan writes the result over y, the second operand, whatever
    the shape k broadcasts from."""
    g = GraphBuilder("second")
    x = g.input("x", (5, 7), "float32")
    k = g.constant(np.arange(1, 1 + int(np.prod(k_shape)), dtype=np.float32).reshape(k_shape), name="k")
    y = g.op("Relu", x, name="relu")
    g.output(g.op("Exp", g.op("Div", k, g.op("Sub", k, y, name="sub"), name="div"), name="exp"))
    sess, ref = Session(g.build(), **NUMBA), Session(g.build(), **REF)
    assert sess.memory()["inplace_steps"] == 2  # Sub over relu's block, Div over sub's
    feed = _feed((5, 7), seed=11)
    np.testing.assert_array_equal(sess.run(None, {"x": feed})[0], ref.run(None, {"x": feed})[0])


@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_scratch_is_kept_between_runs_conv_blocks_and_attention(threads):
    """The blocked im2col of a large Conv (a stem-like 7x7 stride 2) and Attention's score blocks
    reuse per-thread buffers: a steady run allocates (almost) nothing beyond its outputs. (At 2
    threads a pool thread makes its buffers the first time it claims a shard, which may be any run:
    there only the results are checked.)"""
    g = GraphBuilder("scratch")
    x = g.input("x", (1, 3, 96, 96), "float32")
    rng = np.random.default_rng(0)
    w = g.constant((rng.standard_normal((16, 3, 7, 7)) * 0.1).astype(np.float32), name="w")
    y = g.op("Conv", x, w, strides=[2, 2], pads=[3, 3, 3, 3], name="stem")  # 147 x 2304 columns: blocked
    q = g.input("q", (1, 4, 128, 32), "float32")
    att = g.op("Attention", q, q, q, name="att")
    g.output(g.op("Relu", y, name="r"))
    g.output(g.op("Neg", att, name="n"))
    model = g.build()
    feeds = {"x": _feed((1, 3, 96, 96)), "q": _feed((1, 4, 128, 32), seed=1)}
    sess = Session(model, **dict(NUMBA, threads=threads))
    ref = Session(model, **REF)
    assert {s.op: s.key.vendor for s in sess.plan.steps if s.kind == "kernel"}["Conv"] == "numba"
    if threads == 1:
        new, live = _steady_new_bytes(sess, feeds)
        assert new <= 0.1 * live, (new, live)
    for _ in range(3):
        for got, want in zip(sess.run(None, feeds), ref.run(None, feeds)):
            assert_close(got, want)
