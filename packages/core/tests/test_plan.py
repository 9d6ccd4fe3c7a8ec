"""The compiled plan and its memory: steps and slots, the arena planner (lifetimes, best fit,
in-place, views, scratch), re-planning per input shape, ``Session.memory()``, the ``out=`` and
``bind(step)`` conventions, ``run_async`` copies and fallback warnings."""
from __future__ import annotations

import threading
import time
import tracemalloc
import warnings

import kernelkit
import numpy as np
import pytest
from kernelkit import FallbackWarning, GraphBuilder, KernelkitWarning, Session
from kernelkit.memory import Block, live_peak, place_blocks
from kernelkit.ops._util import same_as_input
from kernelkit.testing import assert_close, isolate_registries

DOMAIN = "kk.plan"
REF = {"vendors": ["reference"]}


@pytest.fixture(autouse=True)
def sandbox(monkeypatch):
    isolate_registries(monkeypatch)


def _chain(ops, shape=(4, 256)):
    g = GraphBuilder("chain")
    x = g.input("x", shape, "float32")
    for i, op in enumerate(ops):
        x = g.op(op, x, name=f"n{i}")
    g.output(x)
    return g.build()


def _arena_of(sess: Session):
    """The arena buffers of the session's cached memory plans."""
    return [a.buffer for pool in sess._executor._pools.values() for a in pool._free]


# -- the plan ---------------------------------------------------------------------------------------
def test_plan_lists_steps_with_keys_attrs_specs_slots_and_layout():
    g = GraphBuilder("m")
    x = g.input("x", (2, 8), "float32")
    y = g.op("LeakyRelu", g.op("Relu", x, name="r"), alpha=0.5, name="lr")
    g.output(g.op("Softmax", y, axis=1, name="sm"))
    sess = Session(g.build(), passes=False, **REF)
    plan = sess.plan
    assert [s.name for s in plan.steps] == ["r", "lr", "sm"]
    assert [tuple(s.key) for s in plan.steps] == [(op, "cpu", "reference", "float32", "") for op in
                                                  ("Relu", "LeakyRelu", "Softmax")]  # "": the default layout
    assert plan.steps[1].attrs == {"alpha": 0.5} and plan.steps[2].attrs == {"axis": 1}
    assert [str(s.output_specs[0]) for s in plan.steps] == ["float32[2,8]"] * 3
    assert plan.steps[0].layout == (None,)
    # slots connect the steps: each step reads the slot the previous one wrote
    assert plan.steps[0].input_slots == (plan.slot_of["x"],)
    assert plan.steps[1].input_slots == plan.steps[0].output_slots
    assert plan.output_slots == {"sm": plan.steps[2].output_slots[0]}
    assert all(s.takes_out for s in plan.steps)
    assert "LeakyRelu" in str(plan) and plan.table()[1]["attrs"] == {"alpha": 0.5}
    (out,) = sess.run(None, {"x": np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)})
    assert_close(out.sum(axis=1), np.ones(2, np.float32))


def test_graph_ordering_is_linear_and_keeps_level_order():
    n = 3000  # quadratic ordering took seconds here; the linear one is instant
    model = _chain(["Neg"] * n, shape=(2,))
    model.graph.nodes.reverse()  # a file may list nodes in any order
    sess = Session(model, passes=False, **REF)
    assert [s.name for s in sess.plan.steps] == [f"n{i}" for i in range(n)]
    (y,) = sess.run(None, {"x": np.array([1, -2], np.float32)})
    np.testing.assert_array_equal(y, np.array([1, -2], np.float32))  # an even number of negations


# -- the arena planner --------------------------------------------------------------------------------
def test_blocks_alive_together_never_overlap():
    rng = np.random.default_rng(0)
    for _ in range(30):
        blocks = []
        for _ in range(40):
            start = int(rng.integers(0, 50))
            blocks.append(Block(int(rng.integers(1, 20)) * 64, start, start + int(rng.integers(0, 10))))
        top = place_blocks(blocks)
        for i, a in enumerate(blocks):
            assert a.offset % 64 == 0 and a.offset + a.nbytes <= top
            for b in blocks[i + 1:]:
                if a.start <= b.end and b.start <= a.end:  # alive at a common step
                    assert a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset
        assert top >= live_peak(blocks, 60)


def test_best_fit_reuses_the_smallest_gap_that_fits():
    big, small_gap_left, keeper = Block(4096, 0, 1), Block(1024, 0, 3), Block(2048, 0, 3)
    late = Block(1024, 2, 3)  # after `big` died: the 4096 gap and the space on top both fit
    top = place_blocks([big, small_gap_left, keeper, late])
    assert late.offset == big.offset  # reused, not stacked on top
    assert top == 4096 + 2048 + 1024 == live_peak([big, small_gap_left, keeper, late], 4)
    # a chain of same-size temporaries needs only two blocks
    chain = [Block(512, i, i + 1) for i in range(10)]
    assert place_blocks(chain) == 1024


def test_elementwise_ops_run_in_place_when_their_input_dies():
    sess = Session(_chain(["Relu", "Neg", "Exp", "Tanh", "Sigmoid"]), passes=False, **REF)
    mem = sess.memory()
    assert mem["inplace_steps"] == 3  # Neg, Exp and Tanh write over Relu's block; Sigmoid is the output
    assert mem["arena_bytes"] == mem["live_peak_bytes"] == 4 * 256 * 4
    x = np.random.default_rng(1).standard_normal((4, 256)).astype(np.float32)
    (y,) = sess.run(None, {"x": x})
    assert_close(y, 1 / (1 + np.exp(-np.tanh(np.exp(-np.maximum(x, 0))))))


def test_an_in_place_chain_shares_one_arena_view():
    """Values placed alike hold the same array object, so a ufunc handed it as input and ``out``
    skips its overlap check; the results stay right."""
    sess = Session(_chain(["Relu", "Neg", "Exp", "Tanh", "Sigmoid"]), passes=False, **REF)
    pool = sess._executor.pool_for(None)
    arena = pool.take()
    try:
        slots = [s.output_slots[0] for s in sess.plan.steps[:4]]
        views = [arena.template[s] for s in slots]
        assert all(v is views[0] for v in views) and views[0].flags.writeable
    finally:
        pool.give(arena)
    x = np.random.default_rng(1).standard_normal((4, 256)).astype(np.float32)
    for _ in range(2):
        (y,) = sess.run(None, {"x": x})
        assert_close(y, 1 / (1 + np.exp(-np.tanh(np.exp(-np.maximum(x, 0))))))


def test_in_place_never_clobbers_a_value_still_needed():
    g = GraphBuilder("m")
    x = g.input("x", (3, 64), "float32")
    a = g.op("Relu", x, name="a")
    view = g.op("Reshape", a, np.array([64, 3], np.int64), name="view")  # a view of a's block
    b = g.op("Neg", a, name="b")  # a's last direct reader: in place would clobber `view`
    c = g.op("Exp", b, name="c")  # b dies here: may run in place
    g.output(g.op("Add", c, g.op("Reshape", view, np.array([3, 64], np.int64), name="back"), name="d"))
    sess = Session(g.build(), passes=False, **REF)
    steps = {s.name: s.index for s in sess.plan.steps}
    mem = sess._executor.pool_for(None).mem
    assert steps["b"] not in mem.inplace and steps["c"] in mem.inplace
    x = np.random.default_rng(2).standard_normal((3, 64)).astype(np.float32)
    for _ in range(2):
        (y,) = sess.run(None, {"x": x})
        assert_close(y, np.exp(-np.maximum(x, 0)) + np.maximum(x, 0))


def test_constants_and_feeds_are_never_written():
    g = GraphBuilder("m")
    x = g.input("x", (4, 32), "float32")
    k = g.constant(np.full((4, 32), 2, np.float32), name="k")
    y = g.op("Relu", g.op("Add", g.op("Neg", x), k, name="add"), name="relu")
    g.output(g.op("Exp", g.op("Mul", k, y), name="out"))
    model = g.build()
    data = model.graph.values["k"].data
    sess = Session(model, passes=False, **REF)
    x = np.ones((4, 32), np.float32)
    for _ in range(3):
        (out,) = sess.run(None, {"x": x})
    assert_close(out, np.exp(2 * np.maximum(2 - x, 0)))
    np.testing.assert_array_equal(data, np.full((4, 32), 2, np.float32))
    np.testing.assert_array_equal(x, np.ones((4, 32), np.float32))


def test_outputs_are_fresh_arrays_never_views_of_the_arena():
    g = GraphBuilder("m")
    x = g.input("x", (8, 8), "float32")
    a = g.op("Relu", x, name="a")
    g.output(g.op("Flatten", a, axis=0, name="flat"), g.op("Identity", a, name="same"), g.op("Neg", a, name="neg"))
    sess = Session(g.build(), passes=False, **REF)
    first = sess.run(None, {"x": np.ones((8, 8), np.float32)})
    arena = _arena_of(sess)
    assert arena and all(not np.shares_memory(o, buf) for o in first for buf in arena)
    sess.run(None, {"x": -np.ones((8, 8), np.float32)})  # reuses the arena
    assert_close(first[0], np.ones((1, 64), np.float32))
    assert_close(first[1], np.ones((8, 8), np.float32))


def test_scratch_is_declared_and_handed_over():
    seen = []

    def scratch_bytes(specs, attrs):
        return specs[0].size * 4 * 3

    kernelkit.register_op("Triple", domain=DOMAIN, inputs=["X"], outputs=["Y"], infer=same_as_input)

    @kernelkit.register_kernel("Triple", domain=DOMAIN, device="cpu", vendor="reference", dtype="float32",
                               scratch=scratch_bytes)
    def triple(x, *, out=None, scratch=None):
        seen.append(None if scratch is None else (scratch.nbytes, scratch.ctypes.data % 64))
        return np.multiply(x, 3, out=out)

    g = GraphBuilder("m")
    t = g.op("Triple", g.input("x", (5, 7), "float32"), domain=DOMAIN)
    g.output(g.op("Neg", t))
    sess = Session(g.build(), passes=False, **REF)
    mem = sess.memory()
    assert mem["scratch_bytes"] == 5 * 7 * 4 * 3
    assert mem["arena_bytes"] >= mem["scratch_bytes"] + 5 * 7 * 4
    (y,) = sess.run(None, {"x": np.ones((5, 7), np.float32)})
    assert_close(y, np.full((5, 7), -3, np.float32))
    assert seen == [(5 * 7 * 4 * 3, 0)]


def test_a_kernel_that_ignores_out_still_lands_in_the_plan():
    kernelkit.register_op("Lazy", domain=DOMAIN, inputs=["X"], outputs=["Y"], infer=same_as_input)

    @kernelkit.register_kernel("Lazy", domain=DOMAIN, device="cpu", vendor="reference", dtype="float32")
    def lazy(x, *, out=None):
        return x  # returns its input: the value must not alias x's block

    g = GraphBuilder("m")
    a = g.op("Relu", g.input("x", (16,), "float32"), name="a")
    b = g.op("Lazy", a, domain=DOMAIN, name="b")
    c = g.op("Neg", a, name="c")  # a dies here; with in-place, c would overwrite a
    g.output(g.op("Sub", b, c, name="d"))
    sess = Session(g.build(), passes=False, **REF)
    x = np.arange(-8, 8, dtype=np.float32)
    (d,) = sess.run(None, {"x": x})
    assert_close(d, 2 * np.maximum(x, 0))


def test_dynamic_shapes_plan_once_per_input_shape():
    sess = Session(_chain(["Relu", "Exp", "Neg"], shape=("N", 128)), passes=False, **REF)
    assert not sess.plan.static
    for n in (2, 3, 2, 3, 2):
        x = np.full((n, 128), -1, np.float32)
        (y,) = sess.run(None, {"x": x})
        assert_close(y, -np.ones((n, 128), np.float32))
        assert sess.memory()["input_shapes"] == {"x": (n, 128)}
        assert sess.memory()["arena_bytes"] == n * 128 * 4
    assert sorted(sess._executor._pools) == [((2, 128),), ((3, 128),)]
    assert sess.memory({"x": (7, 128)})["live_peak_bytes"] == 7 * 128 * 4


def test_shape_computations_are_planned_for_concrete_inputs():
    g = GraphBuilder("m")
    x = g.input("x", ("N", 4, 8), "float32")
    shape = g.op("Concat", g.op("Slice", g.op("Shape", x), np.array([0], np.int64), np.array([1], np.int64)),
                 np.array([-1], np.int64), axis=0)
    flat = g.op("Reshape", g.op("Relu", x), shape)
    g.output(g.op("Exp", g.op("Neg", flat)))
    sess = Session(g.build(), **REF)
    x = np.zeros((3, 4, 8), np.float32)
    (y,) = sess.run(None, {"x": x})
    assert y.shape == (3, 32)
    mem = sess.memory()
    assert mem["planned_values"] >= 2 and mem["arena_bytes"] >= 3 * 32 * 4


def test_steady_state_runs_allocate_little_for_intermediates():
    sess = Session(_chain(["Relu", "Neg", "Exp", "Sigmoid", "Tanh", "Abs", "Sqrt"], shape=(64, 1024)),
                   passes=False, **REF)
    x = np.random.default_rng(3).standard_normal((64, 1024)).astype(np.float32)
    sess.run(None, {"x": x})
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        (y,) = sess.run(None, {"x": x})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    new = peak - before - y.nbytes
    assert new <= 0.1 * sess.memory()["live_peak_bytes"], new


def test_concurrent_runs_use_separate_arenas():
    sess = Session(_chain(["Relu", "Neg", "Exp"], shape=(32, 32)), passes=False, **REF)
    xs = [np.full((32, 32), i / 10, np.float32) for i in range(16)]
    results = [None] * 16

    def work(i):
        for _ in range(5):
            results[i] = sess.run(None, {"x": xs[i]})[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for x, y in zip(xs, results):
        assert_close(y, np.exp(-np.maximum(x, 0)))


# -- kernels: bind(step) ------------------------------------------------------------------------------
class BoundKernel:
    binds = 0

    def prepare(self, specs, attrs):
        self.factor = np.float32(attrs["factor"])

    def resize(self, specs):
        pass

    def bind(self, step):
        BoundKernel.binds += 1
        factor, name = self.factor, step.name
        assert step.output_specs[0].dtype == "float32" and name == "sc"

        def call(x, *, out=None):
            return np.multiply(x, factor, out=out)
        return call

    def execute(self, x, *, out=None):
        raise AssertionError("the session calls what bind(step) returned")


def test_class_kernel_bind_hook_prebinds_the_call_and_rebinds_on_resize():
    BoundKernel.binds = 0
    kernelkit.register_op("Scale", domain=DOMAIN, inputs=["X"], outputs=["Y"], infer=same_as_input,
                          attrs={"factor": ("float", 1.0)})
    kernelkit.register_kernel("Scale", domain=DOMAIN, device="cpu", vendor="reference", dtype="float32")(BoundKernel)
    g = GraphBuilder("m")
    g.output(g.op("Neg", g.op("Scale", g.input("x", ("N", 2), "float32"), domain=DOMAIN, factor=3.0, name="sc")))
    sess = Session(g.build(), passes=False, **REF)
    assert sess.plan.steps[0].takes_out and BoundKernel.binds == 1
    for n in (1, 1, 4):
        (y,) = sess.run(None, {"x": np.ones((n, 2), np.float32)})
        assert_close(y, np.full((n, 2), -3, np.float32))
    assert BoundKernel.binds == 3  # at compile, then for (1, 2) and (4, 2)


class ShapeKernel:
    """Keeps the batch of its latest ``resize`` (per-node state) and checks every call against it;
    ``bind`` counts its calls and gives a call that counts its own, without and with the settled
    wrapper (``step.direct``)."""

    calls = plain_calls = 0
    thread_safe = True  # the plan adds no lock: the executor's gate alone keeps the state right
    plain_safe = False  # the settled call says thread_safe

    def prepare(self, specs, attrs):
        self.rows, self.ready = specs[0].shape[0], False

    def resize(self, specs):
        self.rows = specs[0].shape[0]

    def bind(self, step):
        rows = self.rows

        def plain(x, *, out=None):
            ShapeKernel.plain_calls += 1
            assert not isinstance(rows, str) and x.shape[0] == rows == self.rows, (x.shape, rows, self.rows)
            time.sleep(0.0005)  # a concurrent run of other shapes would resize it now, if it could
            return np.multiply(x, 2.0, out=out)

        def call(x, *, out=None):
            ShapeKernel.calls += 1
            return plain(x, out=out)

        call.settled = lambda: plain if self.ready else None
        plain.thread_safe = self.plain_safe
        return call

    def execute(self, x, *, out=None):
        raise AssertionError("the session calls what bind(step) returned")


def _shape_session():
    ShapeKernel.calls = ShapeKernel.plain_calls = 0
    kernelkit.register_op("Twice", domain=DOMAIN, inputs=["X"], outputs=["Y"], infer=same_as_input)
    kernelkit.register_kernel("Twice", domain=DOMAIN, device="cpu", vendor="reference", dtype="float32")(ShapeKernel)
    g = GraphBuilder("m")
    g.output(g.op("Neg", g.op("Twice", g.input("x", ("N", 3), "float32"), domain=DOMAIN, name="tw")))
    return Session(g.build(), passes=False, **REF)


def test_runs_of_the_bound_shapes_call_the_kernel_directly_and_settle():
    """A symbolic plan checks shapes per node only in the first run of new input shapes; later runs
    of those shapes call ``step.direct()``: the kernel's settled call once it says so."""
    sess = _shape_session()
    kernel = sess.plan.steps[0].kernel
    for n in (2, 2, 2, 5, 5, 2):
        (y,) = sess.run(None, {"x": np.ones((n, 3), np.float32)})
        np.testing.assert_array_equal(y, np.full((n, 3), -2, np.float32))
    assert ShapeKernel.calls == 6  # not settled: the wrapper runs every time
    kernel.ready = True
    for _ in range(8):  # settled within the next power-of-two run
        sess.run(None, {"x": np.ones((2, 3), np.float32)})
    calls = ShapeKernel.calls
    for _ in range(3):
        sess.run(None, {"x": np.ones((2, 3), np.float32)})
    assert ShapeKernel.calls == calls and ShapeKernel.plain_calls == 17


def test_a_settled_call_that_keeps_no_state_runs_without_the_nodes_lock(monkeypatch):
    """A kernel that is not thread-safe runs under its node's lock, unless the call it settles on
    says ``thread_safe``: then ``step.direct()`` gives that call itself."""
    monkeypatch.setattr(ShapeKernel, "thread_safe", False)
    sess = _shape_session()
    step = sess.plan.steps[0]
    sess.run(None, {"x": np.ones((2, 3), np.float32)})
    call, settled = step.direct()
    assert not settled and call.__qualname__.endswith("locked.<locals>.call")
    step.kernel.ready = True
    call, settled = step.direct()
    assert settled and call.__qualname__.endswith("locked.<locals>.call")  # plain keeps state: locked
    monkeypatch.setattr(ShapeKernel, "plain_safe", True)
    sess.run(None, {"x": np.ones((3, 3), np.float32)})  # new shapes: bound again, a plain call that says so
    call, settled = step.direct()
    assert settled and call.__qualname__ == "ShapeKernel.bind.<locals>.plain" and call.thread_safe


def test_concurrent_runs_of_different_shapes_never_share_a_kernel_state():
    """Runs of other input shapes wait for the runs of the bound ones (and rebind alone): a
    kernel's per-shape state is never changed under a running call."""
    sess = _shape_session()
    sess.plan.steps[0].kernel.ready = True
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(25):
                n = int(rng.integers(1, 4))
                x = rng.standard_normal((n, 3)).astype(np.float32)
                (y,) = sess.run(None, {"x": x})
                np.testing.assert_array_equal(y, -2 * x)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def test_a_run_sets_the_ignore_error_state_once_and_restores_the_callers():
    """The executor runs every step under NumPy's error state "ignore" (``step.quiet``): a
    reference kernel's overflow or 0/0 warns or raises nowhere, and the caller's state is back after."""
    g = GraphBuilder("m")
    x = g.input("x", (2,), "float32")
    g.output(g.op("Div", g.op("Mul", x, x, name="sq"), x, name="dv"))
    sess = Session(g.build(), passes=False, **REF)
    assert all(s.quiet for s in sess.plan.steps)
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        (y,) = sess.run(None, {"x": np.array([1e30, 0.0], np.float32)})
        assert np.geterr()["over"] == "raise"
    assert np.isinf(y[0]) and np.isnan(y[1])


# -- session semantics ----------------------------------------------------------------------------------
def test_run_async_copies_its_feeds_before_returning():
    started = threading.Event()
    kernelkit.register_op("Slow", domain=DOMAIN, inputs=["X"], outputs=["Y"], infer=same_as_input)

    @kernelkit.register_kernel("Slow", domain=DOMAIN, device="cpu", vendor="reference", dtype="float32")
    def slow(x):
        started.set()
        time.sleep(0.05)
        return x * 2

    g = GraphBuilder("m")
    g.output(g.op("Slow", g.input("x", (64,), "float32"), domain=DOMAIN))
    sess = Session(g.build(), **REF)
    for i in range(5):
        x = np.full(64, i, np.float32)
        future = sess.run_async(None, {"x": x})
        x[:] = -100  # the caller reuses its buffer at once
        np.testing.assert_array_equal(future.result(timeout=30)[0], np.full(64, 2 * i, np.float32))
    assert started.is_set()


def test_fallback_warns_once_with_a_kernelkit_warning_class():
    g = GraphBuilder("m")
    x = g.input("x", (3,), "float32")
    g.output(g.op("Neg", g.op("Exp", x, name="e"), name="n"))
    with pytest.warns(FallbackWarning, match=r"2 node\(s\) fell back") as record:
        sess = Session(g.build(), vendors=["nobody"])
    assert len([w for w in record if issubclass(w.category, KernelkitWarning)]) == 1
    assert [(f["node"], f["op"], f["device"], f["copies"]) for f in sess.fallbacks()] == [
        ("e", "Exp", "cpu", []), ("n", "Neg", "cpu", [])]
    assert "nobody" in sess.fallbacks()[0]["reason"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        with pytest.raises(FallbackWarning):
            Session(g.build(), vendors=["nobody"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Session(g.build(), **REF).fallbacks() == []  # nothing to say: no warning
