"""A Concat that writes a graph output with non-temporal stores (``kernels.concat.OUTPUT_NT``): the serial
call's fresh array against NumPy's concatenate (a copy: bit for bit) and a session against the reference
session, at the detection head's shapes and at sizes whose parts start off the 32-byte line; where it must
not stream (an arena output, a strided input, an axis with more than 1 before it, below the size, the switch
off) it runs NumPy's concatenate."""
from __future__ import annotations

import numba
import numpy as np
import pytest
from kernelkit import GraphBuilder, Session
from kernelkit.ir import TensorSpec
from kernelkit.testing import assert_close
from kernelkit_numba.kernels import concat as concat_mod

HEAD = ((1, 4800, 85), (1, 1200, 85), (1, 300, 85))  # the detection head's Concat_285 (2.1 MB out)


def _inputs(shapes, seed=0):
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    edge = np.array([np.nan, np.inf, -0.0], np.float32)  # copied as they are
    xs[-1].reshape(-1)[:3] = edge[:xs[-1].size]
    return xs


def _same(a, b) -> bool:
    """Bit for bit (NaN included)."""
    return a.shape == b.shape and np.array_equal(np.ascontiguousarray(a).view(np.uint32),
                                                 np.ascontiguousarray(b).view(np.uint32))


def _serial(shapes, axis, monkeypatch, threshold=1):
    monkeypatch.setattr(concat_mod, "OUTPUT_NT", threshold)  # read when the call is bound
    return concat_mod._concat_serial([TensorSpec(s, "float32") for s in shapes], axis=axis)


@pytest.mark.parametrize("shapes,axis", [
    (HEAD, 1),
    (((1, 3, 5), (1, 7, 5), (1, 1, 5), (1, 2, 5)), 1),  # parts of 15, 35, 5, 10 floats: every start off a line
    (((1, 1), (1, 100), (1, 3)), -1),  # a part shorter than the scalars before the first line
    (((33,), (1,), (70,)), 0),
    (((2, 9, 4),), 0),  # one input: its copy
])
def test_streamed_output_equals_numpy_bit_for_bit(shapes, axis, monkeypatch):
    xs = _inputs(shapes)
    call = _serial(shapes, axis, monkeypatch)
    want = np.concatenate(xs, axis=axis)
    for _ in range(2):  # a fresh array each call, the inputs untouched
        before = [x.copy() for x in xs]
        y = call(*xs)
        assert y.dtype == np.float32 and y.shape == want.shape and y.flags.c_contiguous and y.flags.owndata
        assert _same(y, want)
        assert all(_same(a, b) for a, b in zip(xs, before))
    assert call(*xs) is not call(*xs)


def test_where_it_does_not_stream_numpy_concatenates(monkeypatch):
    calls = []

    def nt_copy(*args):
        calls.append(args)
        raise AssertionError("streamed where it must not")

    monkeypatch.setattr(concat_mod, "_nt_copy", nt_copy)
    xs = _inputs(HEAD)
    want = np.concatenate(xs, axis=1)
    # an arena output (out= given) is written by NumPy, as before
    out = np.full(want.shape, 7.0, np.float32)
    assert _serial(HEAD, 1, monkeypatch)(*xs, out=out) is out and _same(out, want)
    # a strided input: NumPy's concatenate
    strided = [np.asfortranarray(xs[0]), xs[1], xs[2]]
    assert _same(_serial(HEAD, 1, monkeypatch)(*strided), want)
    # below the size, the switch off
    assert _same(_serial(HEAD, 1, monkeypatch, threshold=4 * want.size + 4)(*xs), want)
    assert _same(_serial(HEAD, 1, monkeypatch, threshold=0)(*xs), want)
    # more than 1 before the axis: the parts are not contiguous stretches of the output
    shapes = ((2, 3, 4), (2, 5, 4))
    ys = _inputs(shapes)
    assert _same(_serial(shapes, 1, monkeypatch)(*ys), np.concatenate(ys, axis=1))
    assert calls == []


def _model():
    """The detection head's output: three heads' decoded rows, reshaped and concatenated as the graph output."""
    g = GraphBuilder("heads")
    parts = []
    for k, rows in enumerate((4800, 1200, 300)):
        x = g.input(f"x{k}", (1, rows, 85))
        parts.append(g.op("Mul", g.op("Sigmoid", x), g.constant(np.float32(2))))
    g.output(g.op("Concat", *parts, axis=1))
    return g.build()


@pytest.mark.parametrize("threads", [1, 2])
def test_a_session_with_a_streamed_output_agrees_with_the_reference(threads, monkeypatch):
    monkeypatch.setattr(concat_mod, "OUTPUT_NT", 1)
    streamed, nt_copy = [], concat_mod._nt_copy
    monkeypatch.setattr(concat_mod, "_nt_copy", lambda *a: streamed.append(a[2]) or nt_copy(*a))
    model = _model()
    ref = Session(model, vendors=["reference"], threads=1)
    nb = Session(model, vendors=["numba", "reference"], threads=threads)
    rng = np.random.default_rng(3)
    for _ in range(3):  # fresh outputs over runs, none a view of another
        feed = {f"x{k}": rng.standard_normal((1, rows, 85)).astype(np.float32)
                for k, rows in enumerate((4800, 1200, 300))}
        got, want = nb.run(None, feed)[0], ref.run(None, feed)[0]
        assert_close(got, want)
    # the serial call streamed the three parts in each run (a copy is below the two-thread sessions' shards too);
    # under NUMBA_DISABLE_JIT (no compiled stores) NumPy's concatenate
    assert streamed == ([] if numba.config.DISABLE_JIT else [0, 4800 * 85, 6000 * 85] * 3)


# kernels.concat.ARENA_NT: the same streamed copy into an arena block (out= given, the plan's, not nested)
NECK = ((1, 256, 40, 40), (1, 128, 40, 40))  # the detection head's Concat_153 (2.5 MB out)


def _arena_serial(shapes, axis, monkeypatch, threshold=1, nest=False):
    monkeypatch.setattr(concat_mod, "ARENA_NT", threshold)  # read when the call is bound, as NEST_CONCAT
    monkeypatch.setattr(concat_mod.kmemory, "NEST_CONCAT", nest)
    return concat_mod._concat_serial([TensorSpec(s, "float32") for s in shapes], axis=axis)


@pytest.mark.parametrize("shapes,axis", [
    (NECK, 1),
    (((1, 3, 5), (1, 7, 5), (1, 1, 5), (1, 2, 5)), 1),  # every part's start off the 32-byte line
    (((1, 1), (1, 100), (1, 3)), -1),
])
def test_streamed_arena_output_equals_numpy_bit_for_bit(shapes, axis, monkeypatch):
    xs = _inputs(shapes)
    want = np.concatenate(xs, axis=axis)
    streamed, nt_copy = [], concat_mod._nt_copy
    monkeypatch.setattr(concat_mod, "_nt_copy", lambda *a: streamed.append(a[2]) or nt_copy(*a))
    call = _arena_serial(shapes, axis, monkeypatch)
    arena = np.full(want.size + 40, 7.0, np.float32)
    out = arena[16:16 + want.size].reshape(want.shape)  # a block inside a larger buffer, 64-byte aligned or not
    for _ in range(2):
        before = [x.copy() for x in xs]
        assert call(*xs, out=out) is out and _same(out, want)
        assert all(_same(a, b) for a, b in zip(xs, before))
        assert (arena[:16] == 7).all() and (arena[16 + want.size:] == 7).all()  # nothing written around it
    starts = np.cumsum([0] + [x.size for x in xs[:-1]]).tolist()
    assert streamed == ([] if numba.config.DISABLE_JIT else starts * 2)


def test_where_the_arena_copy_does_not_stream_numpy_concatenates(monkeypatch):
    def nt_copy(*args):
        raise AssertionError("streamed where it must not")

    monkeypatch.setattr(concat_mod, "_nt_copy", nt_copy)
    monkeypatch.setattr(concat_mod, "OUTPUT_NT", 0)
    xs = _inputs(NECK)
    want = np.concatenate(xs, axis=1)

    def into_out(call, inputs):
        out = np.full(want.shape, 7.0, np.float32)
        assert call(*inputs, out=out) is out and _same(out, want)

    into_out(_arena_serial(NECK, 1, monkeypatch, threshold=0), xs)  # the switch off (the default)
    into_out(_arena_serial(NECK, 1, monkeypatch, threshold=4 * want.size + 4), xs)  # below the size
    into_out(_arena_serial(NECK, 1, monkeypatch), [np.asfortranarray(xs[0]), xs[1]])  # a strided input
    into_out(_arena_serial(NECK, 1, monkeypatch, nest=True), xs)  # nested plans: their own path
    assert _same(_arena_serial(NECK, 1, monkeypatch)(*xs), want)  # a graph output is OUTPUT_NT's
    # an input that overlaps the output (not the plan's, which nests or keeps them apart): NumPy's overlap copy
    half = NECK[1]
    out = np.concatenate([xs[1], np.zeros(half, np.float32)], axis=1)
    src = out[:, :half[1]]  # the output's first part itself
    expected = np.concatenate([xs[1], xs[1]], axis=1)
    assert _arena_serial((half, half), 1, monkeypatch)(src, src, out=out) is out and _same(out, expected)
    # more than 1 before the axis: the parts are not contiguous stretches of the output
    shapes = ((2, 3, 4), (2, 5, 4))
    ys = _inputs(shapes)
    out = np.empty((2, 8, 4), np.float32)
    assert _arena_serial(shapes, 1, monkeypatch)(*ys, out=out) is out and _same(out, np.concatenate(ys, axis=1))


def _neck():
    """The detection head's neck: an upsampled map concatenated on channels with an earlier one (both in the
    arena), then read by a 1x1 convolution (the Concat's output is not a graph output)."""
    rng = np.random.default_rng(5)
    g = GraphBuilder("neck")
    x = g.input("x", (1, 8, 20, 20))
    skip = g.op("Relu", g.op("Conv", x, g.constant(rng.standard_normal((128, 8, 1, 1)).astype(np.float32))))
    low = g.op("Relu", g.op("Conv", x, g.constant(rng.standard_normal((64, 8, 3, 3)).astype(np.float32)),
                            strides=[2, 2], pads=[1, 1, 1, 1]))
    up = g.op("Resize", low, g.constant(np.zeros(0, np.float32)), g.constant(np.array([1, 1, 2, 2], np.float32)),
              mode="nearest")
    cat = g.op("Concat", up, skip, axis=1)
    g.output(g.op("Conv", cat, g.constant(rng.standard_normal((16, 192, 1, 1)).astype(np.float32))))
    return g.build()


def test_a_session_with_a_streamed_arena_concat_agrees_with_the_reference(monkeypatch):
    monkeypatch.setattr(concat_mod.kmemory, "NEST_CONCAT", False)
    streamed, nt_copy = [], concat_mod._nt_copy
    monkeypatch.setattr(concat_mod, "_nt_copy", lambda *a: streamed.append(a[2]) or nt_copy(*a))
    model = _neck()
    ref = Session(model, vendors=["reference"], threads=1)
    plain = Session(model, vendors=["numba", "reference"], threads=1)
    monkeypatch.setattr(concat_mod, "ARENA_NT", 1)
    nb = Session(model, vendors=["numba", "reference"], threads=1)
    rng = np.random.default_rng(4)
    for _ in range(3):  # the arena reused over runs
        feed = {"x": rng.standard_normal((1, 8, 20, 20)).astype(np.float32)}
        got = nb.run(None, feed)[0]
        assert_close(got, ref.run(None, feed)[0])
        assert _same(got, plain.run(None, feed)[0])  # the copy changes no bit
    assert streamed == ([] if numba.config.DISABLE_JIT else [0, 64 * 400] * 3)
