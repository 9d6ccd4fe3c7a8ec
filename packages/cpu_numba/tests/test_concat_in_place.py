"""Concat in place (kernelkit.memory.NEST_CONCAT): the memory plan nests the blocks of a Concat's inputs in
its output's block where numba's Concat opts in (``inputs_in_place``), the producers write into their parts
of the output and the Concat skips them; against the reference session (which keeps its plan), over runs
that reuse the arena, and the cases that must not nest (an axis with more than 1 before it, an input read
after the Concat, a repeated input)."""
from __future__ import annotations

import numpy as np
import pytest
from kernelkit import GraphBuilder, Session
from kernelkit import memory as kmemory
from kernelkit.testing import assert_close
from kernelkit_numba.kernels import concat as concat_mod

SHAPE = (1, 8, 10, 10)


def _model(axis=1, late_reader=False, repeat=False, twice=False, shape=SHAPE):
    g = GraphBuilder("cat")
    x = g.input("x", shape)
    a, b, c = g.op("Relu", x), g.op("Neg", x), g.op("Abs", x)
    parts = (a, b, a) if repeat else (a, b, c)
    cat = g.op("Concat", *parts, axis=axis)
    if twice:  # a Concat of a Concat: nested twice
        cat = g.op("Concat", cat, g.op("Exp", x), axis=axis)
    y = g.op("Mul", cat, g.constant(np.float32(2)))
    if late_reader:  # b is read after the Concat: its block cannot be the Concat's
        y = g.op("Add", y, g.op("Concat", b, b, b, axis=axis) if not twice else y)
    g.output(y)
    return g.build()


def _feed(seed, shape=SHAPE):
    return {"x": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}


@pytest.fixture(autouse=True)
def _nest_on(monkeypatch):
    """The switch on (its default is the Xeon's word: docs/numba.md, session 13)."""
    monkeypatch.setattr(kmemory, "NEST_CONCAT", True)


@pytest.fixture
def skipped(monkeypatch):
    """How many inputs numba's Concat found in place."""
    count = [0]
    real = concat_mod._in_place

    def spy(x, part):
        hit = real(x, part)
        count[0] += hit
        return hit

    monkeypatch.setattr(concat_mod, "_in_place", spy)
    return count


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kw, nested", [({}, 3), ({"twice": True}, 5), ({"repeat": True}, 2),
                                        ({"late_reader": True}, 3), ({"axis": 2}, 0),
                                        ({"axis": -1, "shape": (1, 1, 5, 16)}, 0)])
def test_nested_concat_matches_reference(skipped, kw, nested, threads):
    model = _model(**kw)
    shape = kw.get("shape", SHAPE)
    sess = Session(model, vendors=["numba", "reference"], threads=threads, fallback=False)
    ref = Session(model, vendors=["reference"], threads=1, fallback=False)
    for seed in range(3):  # the arena reused: every run right
        got, want = sess.run(None, _feed(seed, shape))[0], ref.run(None, _feed(seed, shape))[0]
        assert_close(got, want)
    assert sess.memory()["nested_blocks"] == nested
    assert ref.memory()["nested_blocks"] == 0  # the reference's Concat does not opt in
    assert (skipped[0] > 0) == (nested > 0)


def test_axis_with_ones_before_it_nests():
    """(1, 1, 5, 16) along axis 2: only 1s before it, each input one run of the output's bytes."""
    model = _model(axis=2, shape=(1, 1, 8, 16))
    sess = Session(model, vendors=["numba", "reference"], threads=1, fallback=False)
    got = sess.run(None, _feed(0, (1, 1, 8, 16)))[0]
    assert sess.memory()["nested_blocks"] == 3
    want = Session(model, vendors=["reference"], fallback=False).run(None, _feed(0, (1, 1, 8, 16)))[0]
    assert_close(got, want)


def test_switch_off_keeps_the_copy(monkeypatch, skipped):
    monkeypatch.setattr(kmemory, "NEST_CONCAT", False)
    sess = Session(_model(), vendors=["numba", "reference"], threads=1, fallback=False)
    got = sess.run(None, _feed(0))[0]
    assert sess.memory()["nested_blocks"] == 0 and skipped[0] == 0
    monkeypatch.setattr(kmemory, "NEST_CONCAT", True)  # read when a plan's memory is planned
    on = Session(_model(), vendors=["numba", "reference"], threads=1, fallback=False)
    np.testing.assert_array_equal(on.run(None, _feed(0))[0], got)
    assert on.memory()["arena_bytes"] < sess.memory()["arena_bytes"]


def test_the_switch_is_read_when_the_node_is_bound(monkeypatch, skipped):
    """A session bound with the switch on keeps finding its nested inputs in place after the switch is put back
    (nodes_ab.py's variants: read on each call, the nested inputs went through NumPy's overlap copies), and
    one bound with it off never checks."""
    on = Session(_model(), vendors=["numba", "reference"], threads=1, fallback=False)
    on.run(None, _feed(0))
    monkeypatch.setattr(kmemory, "NEST_CONCAT", False)
    off = Session(_model(), vendors=["numba", "reference"], threads=1, fallback=False)
    want = Session(_model(), vendors=["reference"], threads=1, fallback=False).run(None, _feed(1))[0]
    skipped[0] = 0
    assert_close(on.run(None, _feed(1))[0], want)
    assert skipped[0] == 2 * 3 and on.memory()["nested_blocks"] == 3  # each input found in place, then skipped
    skipped[0] = 0
    monkeypatch.setattr(kmemory, "NEST_CONCAT", True)
    assert_close(off.run(None, _feed(1))[0], want)
    assert skipped[0] == 0 and off.memory()["nested_blocks"] == 0


def test_kernel_copies_inputs_not_in_place():
    """The serial call with some inputs at their part of ``out`` and some elsewhere copies only the others."""
    call = concat_mod._concat_serial([_spec((1, 2, 3)), _spec((1, 4, 3))], axis=1)
    out = np.full((1, 6, 3), -1, np.float32)
    first = out[:, :2]
    first[...] = 7
    other = np.arange(12, dtype=np.float32).reshape(1, 4, 3)
    assert call(first, other, out=out) is out
    np.testing.assert_array_equal(out, np.concatenate([np.full((1, 2, 3), 7, np.float32), other], axis=1))


def _spec(shape):
    from kernelkit.ir import TensorSpec

    return TensorSpec(shape, "float32")
