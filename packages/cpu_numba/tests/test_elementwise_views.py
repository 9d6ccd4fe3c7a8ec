"""The detection head's decode on numba: a Split's parts along the last axis (views, or copies of their own
where the rows are narrower than a cache line: concat.SPLIT_NARROW) through Add/Sub/Mul/Div with scalars,
broadcast constants and each other equal the reference bit for bit, and never write into the caller's
arrays."""
import kernelkit
import numpy as np
import pytest
from kernelkit.ir import TensorSpec


def _values(rng, shape):
    """Random values with the edges mixed in: NaN, +-inf, +-0, huge and tiny."""
    x = rng.standard_normal(shape).astype(np.float32)
    edges = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3e38, -1e-38, 1e-45], np.float32)
    flat = x.reshape(-1)
    flat[rng.integers(0, flat.size, min(flat.size, 8))] = edges[:min(flat.size, 8)]
    return x


@pytest.mark.parametrize("threads", [1, 2])
def test_split_then_elementwise_in_a_session(threads):
    """The detection head's decode: Split along the last axis, each part through Mul/Add/Sub/Div with a
    scalar, a broadcast constant and each other, then Concat; the numba session (its Split returns views)
    equals the reference session bit for bit, and the caller's feed is unchanged."""
    rng = np.random.default_rng(5)
    g = kernelkit.GraphBuilder("decode")
    x = g.input("x", (1, 3, 6, 6, 12))
    xy, wh, rest = g.op("Split", x, np.array([2, 2, 8], np.int64), axis=4, outputs=3)
    grid = rng.standard_normal((1, 1, 6, 6, 2)).astype(np.float32)
    a = g.op("Add", g.op("Mul", xy, np.array(2.0, np.float32)), grid)
    b = g.op("Div", np.array(1.0, np.float32), g.op("Sub", wh, xy))
    c = g.op("Mul", rest, np.array(0.5, np.float32))
    g.output(g.op("Concat", a, b, c, axis=4))
    model = g.build()
    feed = {"x": _values(rng, (1, 3, 6, 6, 12))}
    kept = feed["x"].copy()
    want = kernelkit.Session(model, vendors=["reference"]).run(None, feed)[0]
    sess = kernelkit.Session(model, vendors=["numba", "reference"], threads=threads,
                             options={"numba_start": "eager"})
    for _ in range(3):  # the arena reused across runs
        np.testing.assert_array_equal(sess.run(None, feed)[0], want)
    np.testing.assert_array_equal(feed["x"], kept)
    assert {s.key.vendor for s in sess.plan.kernel_steps() if s.op in ("Mul", "Add", "Sub", "Div")} == {"numba"}


@pytest.mark.parametrize("narrow", [64, 0])
def test_split_copies_its_narrow_parts(monkeypatch, narrow):
    """Split's serial call: parts whose rows are narrower than SPLIT_NARROW bytes (and of at most
    SPLIT_NARROW_MAX bytes) come back as arrays of their own (C order, not sharing the input), the others
    as views; the values are np.split's, the input
    is unchanged, and a part along the channels (rows of H * W values) stays a view."""
    from kernelkit_numba.kernels import concat

    monkeypatch.setattr(concat, "SPLIT_NARROW", narrow)
    rng = np.random.default_rng(2)
    for shape, copied in (((1, 3, 4, 4, 85), narrow > 0), ((1, 3, 40, 40, 85), False)):  # 38 KB parts: views
        x = _values(rng, shape)
        kept = x.copy()
        call = concat._split_serial([TensorSpec(x.shape, "float32")], axis=4)
        sizes = np.array([2, 2, 81], np.int64)
        for _ in range(2):  # the slices are made once per split constant
            got = call(x, sizes)
            for part, want in zip(got, np.split(x, [2, 4], axis=4)):
                np.testing.assert_array_equal(part, want)
            owned = [p.flags.c_contiguous and not np.shares_memory(p, x) for p in got]
            assert owned == [copied, copied, False]
        np.testing.assert_array_equal(x, kept)
    c = _values(rng, (2, 6, 5, 7))
    parts = concat._split_serial([TensorSpec(c.shape, "float32")], axis=1, num_outputs=3)(c)
    assert all(np.shares_memory(p, c) for p in parts)
    for part, want in zip(parts, np.split(c, 3, axis=1)):
        np.testing.assert_array_equal(part, want)
