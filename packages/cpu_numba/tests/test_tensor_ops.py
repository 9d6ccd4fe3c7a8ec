"""Property tests for the data-movement and remaining compute kernels (numba vs the reference,
fallback off): Transpose, Slice, Expand, Tile, DepthToSpace/SpaceToDepth, Pad, Concat, Split,
Gather, GatherElements, Where, PRelu, LRN, TopK, ReduceProd, Resize; zero-size batch/channel axes
for the normalizations and global pools; typed errors for bad indices."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernelkit.errors import KernelkitError
from kernelkit.testing import run_single_op

FEW = settings(max_examples=20, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
SHAPES = st.lists(st.integers(1, 5), min_size=1, max_size=4)


def _x(shape, seed):
    return np.random.default_rng(seed).uniform(-3, 3, shape).astype(np.float32)


@FEW
@given(SHAPES, st.randoms(use_true_random=False), st.integers(0, 99))
def test_transpose(check, shape, rnd, seed):
    perm = list(range(len(shape)))
    rnd.shuffle(perm)
    check("Transpose", [_x(shape, seed)], {"perm": perm})


@FEW
@given(SHAPES, st.data())
def test_slice(check, shape, data):
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True))
    starts = [data.draw(st.integers(-7, 7)) for _ in axes]
    ends = [data.draw(st.integers(-7, 7) | st.sampled_from([2**62, -2**62])) for _ in axes]
    steps = [data.draw(st.sampled_from([1, 2, 3, -1, -2])) for _ in axes]
    i64 = [np.array(v, np.int64) for v in (starts, ends, axes, steps)]
    check("Slice", [_x(shape, len(axes))] + i64, constants=(1, 2, 3, 4))


@FEW
@given(SHAPES, st.data())
def test_expand_and_tile(check, shape, data):
    x = _x([data.draw(st.sampled_from([1, d])) for d in shape], len(shape))
    lead = data.draw(st.lists(st.integers(1, 3), max_size=2))
    target = lead + [d if data.draw(st.booleans()) else 1 for d in shape]
    check("Expand", [x, np.array(target, np.int64)], constants=(1,))
    repeats = [data.draw(st.integers(0, 3)) for _ in shape]
    check("Tile", [x, np.array(repeats, np.int64)], constants=(1,))


@FEW
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 4), st.integers(1, 4),
       st.sampled_from(["DCR", "CRD"]), st.integers(0, 99))
def test_depth_space(check, b, n, c, h, w, mode, seed):
    check("DepthToSpace", [_x((n, c * b * b, h, w), seed)], {"blocksize": b, "mode": mode})
    check("SpaceToDepth", [_x((n, c, h * b, w * b), seed)], {"blocksize": b})


@FEW
@given(SHAPES, st.data(), st.sampled_from(["constant", "reflect", "edge", "wrap"]))
def test_pad(check, shape, data, mode):
    lo = 0 if mode == "constant" else -1  # non-constant modes may crop only while the axis stays non-empty
    pads = [data.draw(st.integers(-d if mode == "constant" else max(lo, 1 - d), 4)) for d in shape]
    pads += [data.draw(st.integers(-(d + min(p, 0)) if mode == "constant" else 0, 3)) for d, p in zip(shape, pads)]
    value = [] if mode != "constant" else [np.array(data.draw(st.sampled_from([0.0, -1.5])), np.float32)]
    check("Pad", [_x(shape, abs(sum(pads))), np.array(pads, np.int64)] + value, {"mode": mode}, constants=(1,))


@FEW
@given(SHAPES, st.data())
def test_concat_split(check, shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    parts = []
    for i in range(data.draw(st.integers(1, 3))):
        s = list(shape)
        s[axis] = data.draw(st.integers(0, 3))
        parts.append(_x(s, i))
    check("Concat", parts, {"axis": axis})
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    s = list(shape)
    s[axis] = sum(sizes)
    check("Split", [_x(s, 5), np.array(sizes, np.int64)], {"axis": axis}, constants=(1,), n_outputs=len(sizes))


def test_split_gives_views_on_one_thread_and_its_parts_feed_numba_kernels(rng, monkeypatch):
    """concat.split on one thread returns views of its input, as the reference; sharded (several
    threads, a large tensor) it copies. A graph where the strided parts feed numba kernels (Sigmoid,
    Mul, Pow, Transpose, Concat, Reshape + MatMul, as GPT-2's Q/K/V and the detection head's decode)
    matches the reference at one and two threads."""
    import kernelkit
    from kernelkit import GraphBuilder
    from kernelkit.testing import assert_close
    from kernelkit_numba import config
    from kernelkit_numba.kernels.concat import split

    x = rng.standard_normal((1, 6, 85)).astype(np.float32)
    parts = split(x, [2, 2, 81], axis=-1)
    assert all(np.shares_memory(p, x) for p in parts)
    big = rng.standard_normal((64, 2, 4096)).astype(np.float32)
    monkeypatch.setattr(config, "MIN_SHARD_WORK", 1000)
    with config.num_threads(2):
        copied = split(big, [1, 1], axis=1)
    assert not any(np.shares_memory(p, big) for p in copied)
    np.testing.assert_array_equal(copied[1], big[:, 1:])

    g = GraphBuilder("split_views")
    v = g.input("x", (1, 16, 96), "float32")
    a, b, c = g.op("Split", v, np.array([32, 32, 32], np.int64), axis=2, outputs=3)
    s = g.op("Sigmoid", a)
    m = g.op("Mul", b, s)
    p = g.op("Pow", c, np.array(2.0, np.float32))
    t = g.op("Transpose", g.op("Reshape", m, np.array([1, 16, 4, 8], np.int64)), perm=[0, 2, 1, 3])
    q = g.op("Transpose", g.op("Reshape", p, np.array([1, 16, 4, 8], np.int64)), perm=[0, 2, 3, 1])
    g.output(g.op("MatMul", t, q))
    g.output(g.op("Concat", a, c, m, axis=1))
    model = g.build()
    feed = {"x": rng.standard_normal((1, 16, 96)).astype(np.float32)}
    want = kernelkit.Session(model, vendors=["reference"]).run(None, feed)
    for threads in (1, 2):
        got = kernelkit.Session(model, vendors=["numba", "reference"], threads=threads).run(None, feed)
        for w, o in zip(want, got):
            assert_close(o, w)


@FEW
@given(SHAPES, st.data())
def test_gather_and_gather_elements(check, shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    d = shape[axis]
    ind_shape = data.draw(st.lists(st.integers(0, 3), max_size=2))
    idx = np.random.default_rng(d).integers(-d, d, ind_shape).astype(np.int64)
    x = _x(shape, len(ind_shape))
    check("Gather", [x, idx], {"axis": axis})
    el_shape = [data.draw(st.integers(1, 4)) if k == axis % len(shape) else n for k, n in enumerate(shape)]
    el = np.random.default_rng(d + 1).integers(-d, d, el_shape).astype(np.int64)
    check("GatherElements", [x, el], {"axis": axis})


@FEW
@given(SHAPES, st.data())
def test_where_and_prelu(check, shape, data):
    def sub():  # a shape broadcasting to ``shape``
        k = data.draw(st.integers(0, len(shape)))
        return [d if data.draw(st.booleans()) else 1 for d in shape[len(shape) - k:]]
    r = np.random.default_rng(len(shape))
    check("Where", [r.random(sub()) < 0.5, _x(sub(), 1), _x(sub(), 2)])
    check("PRelu", [_x(shape, 3), _x(sub(), 4)])


@FEW
@given(st.integers(1, 3), st.integers(1, 9), st.lists(st.integers(1, 4), min_size=1, max_size=2), st.integers(1, 6),
       st.floats(1e-4, 1.0), st.floats(0.25, 1.0), st.floats(0.5, 2.0))
def test_lrn(check, n, c, spatial, size, alpha, beta, bias):
    check("LRN", [_x([n, c] + spatial, c)], {"size": size, "alpha": alpha, "beta": beta, "bias": bias})


@FEW
@given(SHAPES, st.data(), st.sampled_from([0, 1]), st.booleans())
def test_topk(check, shape, data, largest, with_nan):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    k = data.draw(st.integers(0, shape[axis]))
    r = np.random.default_rng(sum(shape))
    x = r.integers(-2, 3, shape).astype(np.float32)  # few distinct values: ties are common
    if with_nan:
        x.reshape(-1)[r.integers(0, x.size)] = np.nan
    check("TopK", [x, np.array([k], np.int64)], {"axis": axis, "largest": largest}, constants=(1,))


@FEW
@given(SHAPES, st.data(), st.sampled_from([0, 1]))
def test_reduce_prod(check, shape, data, keepdims):
    rank = len(shape)
    axes = data.draw(st.lists(st.integers(-rank, rank - 1), max_size=rank, unique_by=lambda a: a % rank))
    x = np.random.default_rng(rank).uniform(0.5, 1.5, shape).astype(np.float32)
    check("ReduceProd", [x, np.array(axes, np.int64)], {"keepdims": keepdims}, constants=(1,))


TRANSFORMS = ["half_pixel", "half_pixel_symmetric", "asymmetric", "align_corners", "pytorch_half_pixel"]


@FEW
@given(st.lists(st.integers(1, 5), min_size=3, max_size=4), st.data(), st.sampled_from(["nearest", "linear"]),
       st.sampled_from(TRANSFORMS),
       st.sampled_from(["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]), st.booleans())
def test_resize(check, shape, data, mode, transform, nearest, by_scales):
    attrs = {"mode": mode, "coordinate_transformation_mode": transform, "nearest_mode": nearest}
    x = _x(shape, len(shape))
    if by_scales:
        scales = [1.0, 1.0] + [data.draw(st.sampled_from([0.5, 0.75, 1.0, 1.5, 2.0, 3.0])) for _ in shape[2:]]
        inputs = [x, None, np.array(scales, np.float32)]
    else:
        sizes = shape[:2] + [data.draw(st.integers(1, 9)) for _ in shape[2:]]
        inputs = [x, None, None, np.array(sizes, np.int64)]
    check("Resize", inputs, attrs, constants=(len(inputs) - 1,))


@pytest.mark.parametrize("shape, scales", [
    ((1, 4, 10, 10), (1, 1, 2, 2)),  # the detection head's x2: H into the output, W repeated first
    ((2, 3, 5, 17), (1, 1, 2, 1)),  # only H scaled: runs of one row
    ((1, 3, 4, 8), (1, 1, 3, 2)),  # runs of exactly _REPEAT_MIN_RUN
    ((1, 2, 3, 4), (1, 1, 2, 2)),  # runs of 8: repeats, then one copy
    ((1, 5, 20), (1, 2, 1)),  # a channel axis scaled
    ((2, 3, 4, 5), (2, 1, 1, 1)),  # the batch axis
    ((1, 2, 6, 6), (1, 1, 1.5, 2)),  # not a repeat: the gather
])
@pytest.mark.parametrize("into", [True, False])
@pytest.mark.parametrize("plans", [True, False])
@pytest.mark.parametrize("by_sizes", [False, True])
def test_resize_integer_factors_into_the_output(monkeypatch, shape, scales, into, plans, by_sizes):
    """Nearest upsampling by integer factors (resize._repeat): the last step as a broadcast copy
    straight into a given output, or the repeats and a copy; the repeat looked up by shape and
    scales / sizes (``_repeat_plan``) or derived per call; exactly the reference's values."""
    from kernelkit.ops import resize as reference
    from kernelkit_numba.kernels import resize

    monkeypatch.setattr(resize, "REPEAT_INTO", into)
    monkeypatch.setattr(resize, "REPEAT_PLANS", plans)
    x = _x(shape, 3)
    s = np.array(scales, np.float32)
    args = (None, None, np.floor(s * np.array(shape)).astype(np.int64)) if by_sizes else (None, s)
    want = reference.resize(x, *args)
    for _ in range(2):  # the second call finds the plan
        out = np.full(want.shape, np.nan, np.float32)
        assert resize.resize(x, *args, out=out) is out
        np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(resize.resize(x, *args), want)
    with pytest.raises(ValueError):  # a bad scale still fails where the plan is looked up
        resize.resize(x, None, -s, out=out)


def _zero_size_cases():
    r = np.random.default_rng(0)
    for shape in [(0, 3, 4, 5), (2, 0, 4, 5)]:
        c = shape[1]
        x = np.zeros(shape, np.float32)
        yield "GlobalAveragePool", [x], {}
        yield "GlobalMaxPool", [x], {}
        yield "BatchNormalization", [x] + [r.uniform(0.5, 1.5, c).astype(np.float32) for _ in range(4)], {}
        yield "InstanceNormalization", [x] + [r.uniform(0.5, 1.5, c).astype(np.float32) for _ in range(2)], {}
        yield "LayerNormalization", [x, np.ones(shape[1:], np.float32)], {"axis": 1}
        yield "LayerNormalization", [x, np.ones(shape[-1:], np.float32)], {"axis": -1}


@pytest.mark.parametrize("op, inputs, attrs", list(_zero_size_cases()),
                         ids=lambda v: v if isinstance(v, str) else None)
def test_zero_size_batch_or_channel(check, op, inputs, attrs):
    got = check(op, inputs, attrs)
    assert got[0].shape[:2] == inputs[0].shape[:2] and got[0].size == 0


@pytest.mark.parametrize("op, inputs, attrs", [
    ("Gather", [np.ones((3, 2), np.float32), np.array([3], np.int64)], {}),
    ("GatherElements", [np.ones((3, 2), np.float32), np.array([[0, -4]], np.int64)], {}),
    ("Pad", [np.ones((0, 2), np.float32), np.array([1, 0, 1, 0], np.int64)], {"mode": "edge"}),
])
def test_bad_input_is_a_typed_error_naming_the_node(op, inputs, attrs):
    with pytest.raises(KernelkitError, match=op):
        run_single_op(op, inputs, attrs, vendors=["numba"], fallback=False)


def test_inputs_left_untouched():
    x = _x((2, 3, 4), 0)
    before = x.copy()
    x.flags.writeable = False
    for op, extra, attrs in [("Transpose", [], {"perm": [2, 0, 1]}), ("LRN", [], {"size": 3}),
                             ("Pad", [np.array([1, 1, 1, 1, 1, 1], np.int64)], {"mode": "reflect"}),
                             ("TopK", [np.array([2], np.int64)], {})]:
        run_single_op(op, [x] + extra, attrs, vendors=["numba"], fallback=False)
    np.testing.assert_array_equal(x, before)


@FEW
@given(SHAPES, st.data(), st.sampled_from(["Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"]),
       st.sampled_from(["And", "Or", "Xor"]))
def test_comparisons_and_logic(check, shape, data, cmp, logic):
    def sub():  # a shape broadcasting with ``shape``
        k = data.draw(st.integers(0, len(shape)))
        return [d if data.draw(st.booleans()) else 1 for d in shape[len(shape) - k:]]
    r = np.random.default_rng(len(shape))
    a, b = r.integers(-1, 2, shape).astype(np.float32), r.integers(-1, 2, sub()).astype(np.float32)
    a.reshape(-1)[0] = np.nan  # NaN compares false (and unequal)
    check(cmp, [a, b] if data.draw(st.booleans()) else [b, a])
    check(logic, [r.random(sub()) < 0.5, r.random(shape) < 0.5])


@pytest.mark.parametrize("into", ["x", "y", "fresh"])
@pytest.mark.parametrize("shapes", [((1, 1, 6, 6), (1, 3, 6, 6), ()), ((2, 3, 4), (2, 3, 4), (2, 3, 4)),
                                    ((5,), (5,), (1,)), ((4, 1), (1, 7), (4, 7))])
def test_where_into_an_operands_memory(into, shapes):
    """The planner may hand Where the memory of X or Y as its output (same shape): each masked copy
    then skips that operand and the answer is np.where's."""
    from kernelkit_numba.kernels.where import where

    r = np.random.default_rng(len(shapes[0]))
    cond = r.random(shapes[0]) < 0.5
    x, y = (r.standard_normal(s).astype(np.float32) for s in shapes[1:])
    want = np.where(cond, x, y)
    out = {"x": x, "y": y}.get(into) if {"x": x, "y": y}.get(into, want).shape == want.shape else None
    if out is None:
        out = np.empty_like(want)
    assert where(cond, x, y, out=out) is out
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("shapes", [((1, 1, 6, 6), (1, 3, 6, 6), ()), ((2, 3, 4), (2, 3, 4), (2, 3, 4)),
                                    ((4, 1), (1, 7), (4, 7)), ((3,), (), (3,))])
def test_where_serial_call(shapes):
    """where.serial (static shapes, one thread): the two copies straight into ``out`` or a new array,
    np.where's answer; dynamic shapes get no serial call."""
    from kernelkit.ir import TensorSpec
    from kernelkit_numba.kernels.where import where

    r = np.random.default_rng(len(shapes[0]) + 7)
    cond = r.random(shapes[0]) < 0.5
    x, y = (r.standard_normal(s).astype(np.float32) for s in shapes[1:])
    specs = [TensorSpec(cond.shape, "bool"), TensorSpec(x.shape, "float32"), TensorSpec(y.shape, "float32")]
    call = where.serial(specs)
    want = np.where(cond, x, y)
    np.testing.assert_array_equal(call(cond, x, y), want)
    out = np.full(want.shape, np.nan, np.float32)
    assert call(cond, x, y, out=out) is out
    np.testing.assert_array_equal(out, want)
    assert where.serial([TensorSpec(("N",) + cond.shape, "bool")] + specs[1:]) is None


def test_concat_serial_call(check, rng):
    """concat.serial (static shapes, one dtype): np.concatenate into ``out`` along any axis, negative
    axes too, the detection head's decode parts; dynamic shapes or mixed ranks get no serial call."""
    from kernelkit.ir import TensorSpec
    from kernelkit_numba.kernels.concat import concat

    parts = [rng.standard_normal(s).astype(np.float32) for s in [(1, 3, 4, 4, 2), (1, 3, 4, 4, 2), (1, 3, 4, 4, 81)]]
    for axis in (-1, 4):
        call = concat.serial([TensorSpec(p.shape, "float32") for p in parts], axis=axis)
        out = np.full((1, 3, 4, 4, 85), np.nan, np.float32)
        assert call(*parts, out=out) is out
        np.testing.assert_array_equal(out, np.concatenate(parts, axis=-1))
    check("Concat", parts, {"axis": -1})
    check("Concat", [rng.standard_normal((1, 5, 3, 3)).astype(np.float32),
                     rng.standard_normal((1, 2, 3, 3)).astype(np.float32)], {"axis": 1})
    assert concat.serial([TensorSpec(("N", 2), "float32"), TensorSpec((1, 2), "float32")], axis=0) is None


@pytest.mark.parametrize("src, dst", [("float32", "int32"), ("float32", "int64"), ("float32", "bool"),
                                      ("float32", "float64"), ("int64", "float32"), ("int64", "int32"),
                                      ("bool", "float32"), ("int32", "bool")])
def test_cast_serial_call(src, dst):
    """cast.serial (one thread): NumPy's conversion, the reference kernel's values (truncation
    toward zero, round to nearest, wrap-around, x != 0), a C-contiguous result also from a strided
    input; its ``bare`` call (a plan's step: the executor sets the error state) gives the same."""
    from kernelkit.ir import TensorSpec
    from kernelkit.ops.cast import ONNX_DTYPE_NUMBERS
    from kernelkit.ops.cast import cast as reference
    from kernelkit_numba.kernels.typed_index import cast

    r = np.random.default_rng(3)
    x = (r.standard_normal((4, 6)) * 1e3).astype(src) if src != "bool" else r.random((4, 6)) < 0.5
    if src == "int64":
        x[0, :3] = [2**40 + 3, -(2**33) - 1, 16777217]  # wraps to int32; rounds to float32
    if src == "float32":
        x[1, :4] = [-0.0, 0.75, -2.5, 3e9 if dst == "int64" else 7.0]
    view = x[:, ::2]
    to = ONNX_DTYPE_NUMBERS[dst]
    call = cast.serial([TensorSpec(view.shape, src)], to=to)
    want = reference(view, to=to)
    for fn in (call, call.bare):
        got = fn(view)
        assert got.dtype == np.dtype(dst) and got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)


def test_split_serial_call(rng, monkeypatch):
    """concat.split's serial call (static shape, one thread): views of the input, equal to np.split,
    for a constant ``split`` (its slices made once, a new array taken up), ``num_outputs``, negative
    axes; a writable ``split`` (a graph input) is read on every call; a dynamic shape gets none. (Narrow
    parts are copies by default: test_elementwise_views.py; here every part is a view.)"""
    from kernelkit.ir import TensorSpec
    from kernelkit_numba.kernels import concat
    from kernelkit_numba.kernels.concat import split

    monkeypatch.setattr(concat, "SPLIT_NARROW", 0)

    x = rng.standard_normal((1, 8, 12)).astype(np.float32)
    sizes = np.array([4, 3, 5], np.int64)
    sizes.setflags(write=False)
    call = split.serial([TensorSpec(x.shape, "float32"), TensorSpec((3,), "int64")], axis=-1)
    for s in (sizes, sizes, np.array([6, 6], np.int64), np.array([2, 10], np.int64)):
        parts = call(x, s)
        want = np.split(x, np.cumsum(s)[:-1], axis=-1)
        assert len(parts) == len(want) and all(np.shares_memory(p, x) for p in parts)
        for p, w in zip(parts, want):
            np.testing.assert_array_equal(p, w)
    even = split.serial([TensorSpec(x.shape, "float32")], axis=1, num_outputs=2)
    for p, w in zip(even(x), np.split(x, 2, axis=1)):
        np.testing.assert_array_equal(p, w)
    assert split.serial([TensorSpec(("N", 8, 12), "float32")], axis=1, num_outputs=2) is None


def test_gather_serial_call_checks_constant_indices_once(rng, monkeypatch):
    """Gather's serial call checks a read-only (constant) indices array on its first call only; a
    writable one (a graph input) on every call; out-of-range indices still raise."""
    from kernelkit.ir import TensorSpec
    from kernelkit_numba.kernels import gather as mod

    x = rng.standard_normal((1, 6, 5)).astype(np.float32)
    const = np.array(-1, np.int64)
    const.setflags(write=False)
    call = mod.gather.serial([TensorSpec(x.shape, "float32"), TensorSpec((), "int64")], axis=1)
    seen = []
    checked = mod._checked
    monkeypatch.setattr(mod, "_checked", lambda i, d: seen.append(1) or checked(i, d))
    for _ in range(3):
        np.testing.assert_array_equal(call(x, const), x[:, -1])
    assert seen == [1]
    live = np.array(2, np.int64)
    for v in (2, 3):
        live[...] = v
        np.testing.assert_array_equal(call(x, live), x[:, v])
    assert seen == [1, 1, 1]
    with pytest.raises(IndexError):  # the session wraps it as a KernelExecutionError, as the reference's
        call(x, np.array(6, np.int64))
