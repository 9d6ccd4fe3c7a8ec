"""Add/Sub/Mul/Div at one thread where NumPy would take its general iterator (binary.VIEW_ROWS: small
calls in one 5-D broadcasting Numba loop, larger views whose last axes are contiguous as rows): a Split's
parts along the last axis and along the channels, slices, transposes, broadcasts and small tensors give
the NumPy ufunc's values bit for bit, with the switch on and off, and never write into the caller's
arrays."""
import kernelkit
import numpy as np
import pytest
from kernelkit.ir import TensorSpec
from kernelkit_numba.kernels import binary

CODES = {"Add": binary.ADD, "Sub": binary.SUB, "Mul": binary.MUL, "Div": binary.DIV}
UFUNCS = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


def _values(rng, shape):
    """Random values with the edges mixed in: NaN, +-inf, +-0, huge and tiny."""
    x = rng.standard_normal(shape).astype(np.float32)
    edges = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3e38, -1e-38, 1e-45], np.float32)
    flat = x.reshape(-1)
    flat[rng.integers(0, flat.size, min(flat.size, 8))] = edges[:min(flat.size, 8)]
    return x


def _views(rng):
    """(name, a, b) operand pairs: views of every kind the serial call meets, and a few contiguous ones."""
    s = _values(rng, (1, 3, 10, 10, 85))
    xy, wh, rest = s[..., 0:2], s[..., 2:4], s[..., 4:]
    c = _values(rng, (2, 6, 5, 7))
    two = np.array(2.0, np.float32)
    return [
        ("split part x scalar", xy, two), ("scalar x split part", two, wh), ("split part x split part", xy, wh),
        ("wide split part x scalar", rest, np.array([0.5], np.float32)),
        ("split part x contiguous", xy, np.ascontiguousarray(wh)),
        ("contiguous x split part", np.ascontiguousarray(wh), xy),
        ("channel parts", c[:, 1:4], c[:, 3:6]), ("channel part x scalar", c[:, 2:5], np.array(-3.0, np.float32)),
        ("row slice", c[:, :, 1:4, :], c[:, :, 2:5, :]),
        ("stepped slice", c[:, :, :, ::2], np.array(1.5, np.float32)),
        ("transpose", c.transpose(0, 1, 3, 2), np.array(0.25, np.float32)),
        ("transpose pair", c.transpose(0, 1, 3, 2), c.transpose(0, 1, 3, 2)[::-1]),
        ("broadcast view", np.broadcast_to(c[:, :1], c.shape), c[:, :, :, :]),
        ("one element", s[0, 0, 0, 0, 1:2], np.array(7.0, np.float32)),
        ("three elements", s[0, 0, 0, :3, 0], s[0, 0, 1, :3, 1]),
        ("contiguous", c, c[::-1].copy()), ("contiguous x scalar", c, two),
        ("grid broadcast", np.ascontiguousarray(xy), _values(rng, (1, 1, 10, 10, 2))),
        ("anchor broadcast", _values(rng, (1, 3, 1, 1, 2)), xy),
        ("per-channel", c, _values(rng, (1, 6, 1, 1))), ("lower rank", _values(rng, (7,)), c[:, 1:3]),
        ("both broadcast", _values(rng, (2, 1, 5, 1)), _values(rng, (6, 1, 7))),
        ("rank 1 views", s[0, 0, 0, :, 3], s[0, 0, 1, :, 5]),
    ]


@pytest.mark.parametrize("on, small", [(True, 4096), (True, 0), (False, 4096)])
@pytest.mark.parametrize("op", sorted(CODES))
def test_serial_call_on_views_equals_the_ufunc(monkeypatch, op, on, small):
    """SMALL 0: the larger calls' paths (rows of a view, the ufunc for broadcasts) on the same operands."""
    monkeypatch.setattr(binary, "VIEW_ROWS", on)
    monkeypatch.setattr(binary, "SMALL", small)
    rng = np.random.default_rng(11)
    for name, a, b in _views(rng):
        a_was, b_was = a.copy(), b.copy()
        specs = [TensorSpec(a.shape, "float32"), TensorSpec(b.shape, "float32")]
        call = binary._ufunc_serial(CODES[op])(specs)
        with np.errstate(all="ignore"):
            want = UFUNCS[op](a, b)
        out = np.full(want.shape, 99.0, np.float32)
        got = call(a, b, out=out)
        assert got is out, name
        np.testing.assert_array_equal(got, want, err_msg=f"{op} {name}")
        np.testing.assert_array_equal(call(a, b), want, err_msg=f"{op} {name}, out=None")
        with np.errstate(all="ignore"):  # as a plan's run sets it for the bare call
            np.testing.assert_array_equal(call.bare(a, b, out=np.empty_like(want)), want, err_msg=f"{op} {name} bare")
        np.testing.assert_array_equal(a, a_was, err_msg=name)
        np.testing.assert_array_equal(b, b_was, err_msg=name)


def test_an_overlapping_out_is_left_to_the_ufunc(monkeypatch):
    """An ``out`` that shares memory with a view operand (not a plan's, a caller's) gets NumPy's values,
    which copy the operand first."""
    monkeypatch.setattr(binary, "VIEW_ROWS", True)
    rng = np.random.default_rng(3)
    s = _values(rng, (4, 6))
    want = np.multiply(s[:, 1:4], np.float32(3.0))
    call = binary._ufunc_serial(binary.MUL)([TensorSpec((4, 3), "float32"), TensorSpec((), "float32")])
    base = s.copy()
    out = base[:, 0:3]  # not contiguous: the ufunc
    call(base[:, 1:4], np.array(3.0, np.float32), out=out)
    np.testing.assert_array_equal(out, want)
    flat = np.zeros(40, np.float32)
    view = flat[:24].reshape(4, 6)[:, 1:4]
    view[...] = s[:, 1:4]
    dst = flat[2:14].reshape(4, 3)  # contiguous, and overlapping the view's memory
    call(view, np.array(3.0, np.float32), out=dst)
    np.testing.assert_array_equal(dst, want)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("on", [True, False])
def test_split_then_elementwise_in_a_session(monkeypatch, on, threads):
    """The detection head's decode: Split along the last axis, each part through Mul/Add/Sub/Div with a
    scalar, a broadcast constant and each other, then Concat; the numba session (its Split returns views)
    equals the reference session bit for bit, and the caller's feed is unchanged."""
    monkeypatch.setattr(binary, "VIEW_ROWS", on)
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
