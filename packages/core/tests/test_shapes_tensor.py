"""Shape and dtype inference of the tensor and elementwise ops: constant inputs give exact shapes,
run-time inputs give fresh symbolic dims of the right rank, a symbolic batch dim passes through,
and bad shapes are a ShapeError naming the node."""
from __future__ import annotations

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import TensorSpec as S

F, I64 = "float32", "int64"
FRESH = "?"  # a symbol made by the rule (not one of the inputs')


def infer(op, *inputs, outputs=None, **attrs):
    """Output specs of one node; TensorSpec inputs are graph inputs, arrays are constants."""
    g = kk.GraphBuilder("shapes")
    args = []
    for i, x in enumerate(inputs):
        if x is None:
            args.append(None)
        elif isinstance(x, S):
            args.append(g.input(f"in{i}", x.shape, x.dtype))
        else:
            args.append(g.constant(np.asarray(x)))
    out = g.op(op, *args, outputs=outputs, **attrs)
    return [v.spec for v in (out if isinstance(out, tuple) else (out,))]


def assert_specs(got, *want):
    assert len(got) == len(want), got
    for spec, (shape, dtype) in zip(got, want):
        assert spec.dtype == dtype, f"{spec} != {dtype}{shape}"
        assert len(spec.shape) == len(shape), f"{spec} != {dtype}{shape}"
        for d, w in zip(spec.shape, shape):
            if w == FRESH:
                assert isinstance(d, str) and d not in ("N", "M"), f"{spec}: wanted a fresh symbol, got {d!r}"
            else:
                assert d == w, f"{spec} != {dtype}{shape}"


def i64(*v):
    return np.array(v, np.int64)


CASES = [
    # elementwise
    ("Add", [S(("N", 3, 1), F), S((4,), F)], {}, [(("N", 3, 4), F)]),
    ("Pow", [S(("N", 2), F), S((2,), I64)], {}, [(("N", 2), F)]),
    ("Less", [S(("N", 1), I64), S((1, 5), I64)], {}, [(("N", 5), "bool")]),
    ("Not", [S(("N", 2), "bool")], {}, [(("N", 2), "bool")]),
    ("Max", [S(("N", 1), F), S((3,), F), S((), F)], {}, [(("N", 3), F)]),
    ("Where", [S(("N", 1), "bool"), S((1, 5), I64), S((), I64)], {}, [(("N", 5), I64)]),
    # reductions
    ("ReduceSum", [S(("N", 3, 4), F), i64(1)], {}, [(("N", 1, 4), F)]),
    ("ReduceMean", [S(("N", 3, 4), F), i64(-1, 1)], {"keepdims": 0}, [(("N",), F)]),
    ("ReduceMax", [S(("N", 3, 4), F)], {}, [((1, 1, 1), F)]),
    ("ReduceMin", [S(("N", 3, 4), F)], {"keepdims": 0}, [((), F)]),
    ("ReduceProd", [S(("N", 3), F), i64()], {"noop_with_empty_axes": 1}, [(("N", 3), F)]),
    ("ReduceSum", [S(("N", 3, 4), F), S((2,), I64)], {"keepdims": 0}, [((FRESH,), F)]),
    ("ReduceSum", [S(("N", 1, 4), F), S((2,), I64)], {}, [((FRESH, 1, FRESH), F)]),
    ("ArgMax", [S(("N", 3, 4), F)], {"axis": -1, "keepdims": 0}, [(("N", 3), I64)]),
    ("ArgMin", [S(("N", 3, 4), F)], {"axis": 1}, [(("N", 1, 4), I64)]),
    # layout
    ("Flatten", [S(("N", 3, 4, 4), F)], {}, [(("N", 48), F)]),
    ("Flatten", [S(("N", 3, 4), F)], {"axis": 0}, [((1, FRESH), F)]),
    ("Flatten", [S(("N", 1), F)], {"axis": 0}, [((1, "N"), F)]),
    ("Flatten", [S(("N", 3, 4), F)], {"axis": 2}, [((FRESH, 4), F)]),
    ("Flatten", [S((2, 3, 4), F)], {"axis": -1}, [((6, 4), F)]),
    ("Reshape", [S(("N", 3, 4), F), i64(0, -1)], {}, [(("N", 12), F)]),
    ("Reshape", [S(("N", 3, 4), F), i64(-1, 4)], {}, [((FRESH, 4), F)]),
    ("Reshape", [S(("N", 3, 4), F), i64(0, 3, 2, -1)], {}, [(("N", 3, 2, 2), F)]),
    ("Reshape", [S((2, 3, 4), F), i64(4, -1)], {}, [((4, 6), F)]),
    ("Reshape", [S((0, 3), F), i64(3, 0)], {"allowzero": 1}, [((3, 0), F)]),
    ("Reshape", [S(("N", 3), F), S((3,), I64)], {}, [((FRESH, FRESH, FRESH), F)]),
    ("Transpose", [S(("N", 3, 4), F)], {"perm": [2, 0, 1]}, [((4, "N", 3), F)]),
    ("Transpose", [S(("N", 3), F)], {}, [((3, "N"), F)]),
    ("Concat", [S(("N", 3), F), S(("N", 5), F)], {"axis": 1}, [(("N", 8), F)]),
    ("Concat", [S(("N", 3), F), S((2, 3), F)], {"axis": 0}, [((FRESH, 3), F)]),
    ("Concat", [S(("N", 3), F), S((2, "M"), F)], {"axis": 0}, [((FRESH, 3), F)]),
    ("Squeeze", [S((1, "N", 1, 4), F), i64(0, 2)], {}, [(("N", 4), F)]),
    ("Squeeze", [S((1, "N", 1, 4), F)], {}, [(("N", 4), F)]),
    ("Squeeze", [S((1, "N", 1, 4), F), S((2,), I64)], {}, [((FRESH, FRESH), F)]),
    ("Unsqueeze", [S(("N", 4), F), i64(0, -1)], {}, [((1, "N", 4, 1), F)]),
    ("Unsqueeze", [S(("N", 4), F), S((1,), I64)], {}, [((FRESH, FRESH, FRESH), F)]),
    ("Expand", [S(("N", 1), F), i64(1, 5)], {}, [(("N", 5), F)]),
    ("Expand", [S((3, 1), F), i64(2, 1, 1)], {}, [((2, 3, 1), F)]),
    ("Expand", [S((3, 1), F), S((3,), I64)], {}, [((FRESH, 3, FRESH), F)]),
    ("Tile", [S(("N", 2), F), i64(1, 3)], {}, [(("N", 6), F)]),
    ("Tile", [S(("N", 2), F), i64(2, 0)], {}, [((FRESH, 0), F)]),
    ("Tile", [S(("N", 2), F), S((2,), I64)], {}, [((FRESH, FRESH), F)]),
    # slicing and indexing
    ("Slice", [S(("N", 10), F), i64(2), i64(-1), i64(1)], {}, [(("N", 7), F)]),
    ("Slice", [S(("N", 10), F), i64(-1), i64(np.iinfo(np.int64).min), i64(1), i64(-3)], {}, [(("N", 4), F)]),
    ("Slice", [S((8, 10), F), i64(1, 20), i64(7, 0), i64(0, 1), i64(2, -4)], {}, [((3, 3), F)]),
    ("Slice", [S(("N", 10), F), S((1,), I64), S((1,), I64), i64(1)], {}, [(("N", FRESH), F)]),
    ("Slice", [S(("N", 10), F), S((1,), I64), S((1,), I64)], {}, [((FRESH, 10), F)]),
    ("Slice", [S(("N", 10), F), i64(0), i64(1), S((1,), I64)], {}, [((FRESH, FRESH), F)]),
    ("Gather", [S(("N", 5, 3), F), S((2, 2), I64)], {"axis": 1}, [(("N", 2, 2, 3), F)]),
    ("Gather", [S((5, 3), F), S((), "int32")], {}, [((3,), F)]),
    ("GatherElements", [S(("N", 5), F), S(("N", 2), I64)], {"axis": 1}, [(("N", 2), F)]),
    ("Split", [S(("N", 6), F)], {"axis": 1, "num_outputs": 3, "outputs": 3}, [(("N", 2), F)] * 3),
    ("Split", [S(("N", 7), F)], {"axis": 1, "num_outputs": 3, "outputs": 3}, [(("N", 3), F)] * 2 + [(("N", 1), F)]),
    ("Split", [S(("N", 6), F), i64(1, 5)], {"axis": -1, "outputs": 2}, [(("N", 1), F), (("N", 5), F)]),
    ("Split", [S(("N", 6), F), S((2,), I64)], {"axis": 1, "outputs": 2}, [(("N", FRESH), F)] * 2),
    ("Split", [S(("N", 6), F)], {"num_outputs": 2, "outputs": 2}, [((FRESH, 6), F)] * 2),
    ("TopK", [S(("N", 10), F), i64(3)], {}, [(("N", 3), F), (("N", 3), I64)]),
    ("TopK", [S(("N", 10), F), S((1,), I64)], {}, [(("N", FRESH), F), (("N", FRESH), I64)]),
    ("CumSum", [S(("N", 4), F), np.array(1, np.int32)], {}, [(("N", 4), F)]),
    # dtypes, shapes and constants
    ("Cast", [S(("N", 2), F)], {"to": 7}, [(("N", 2), I64)]),
    ("Cast", [S(("N", 2), I64)], {"to": 9}, [(("N", 2), "bool")]),
    ("CastLike", [S(("N", 2), F), S((1,), "float16")], {}, [(("N", 2), "float16")]),
    ("Shape", [S(("N", 3, 4), F)], {}, [((3,), I64)]),
    ("Shape", [S(("N", 3, 4), F)], {"start": 1}, [((2,), I64)]),
    ("Shape", [S(("N", 3, 4), F)], {"start": -1, "end": -5}, [((0,), I64)]),
    ("Size", [S(("N", 3), F)], {}, [((), I64)]),
    ("Constant", [], {"value_ints": [1, 2, 3]}, [((3,), I64)]),
    ("Constant", [], {"value_float": 2.0}, [((), F)]),
    ("Constant", [], {"value": np.zeros((2, 2), np.float16)}, [((2, 2), "float16")]),
    ("ConstantOfShape", [i64(2, 3)], {}, [((2, 3), F)]),
    ("ConstantOfShape", [S((2,), I64)], {"value": np.array([1], np.int32)}, [((FRESH, FRESH), "int32")]),
    ("Range", [np.array(0, np.int64), np.array(10, np.int64), np.array(3, np.int64)], {}, [((4,), I64)]),
    ("Range", [np.array(1.0, np.float32), np.array(0.0, np.float32), np.array(-0.25, np.float32)], {}, [((4,), F)]),
    ("Range", [S((), I64), np.array(10, np.int64), np.array(3, np.int64)], {}, [((FRESH,), I64)]),
]


@pytest.mark.parametrize("op, inputs, attrs, want", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_inferred_specs(op, inputs, attrs, want):
    attrs = dict(attrs)
    outputs = attrs.pop("outputs", None)
    assert_specs(infer(op, *inputs, outputs=outputs, **attrs), *want)


ERRORS = [
    ("Add", [S((2, 3), F), S((4,), F)], {}, "do not broadcast"),
    ("Where", [S((2,), F), S((2,), F), S((2,), F)], {}, "condition must be bool"),
    ("ReduceSum", [S((2, 3), F), i64(0, 0)], {}, "repeat"),
    ("ReduceSum", [S((2, 3), F), i64(2)], {}, "out of range"),
    ("ArgMax", [S((2, 3), F)], {"axis": 2}, "out of range"),
    ("Reshape", [S((2, 3), F), i64(4)], {}, "cannot reshape"),
    ("Reshape", [S((2, 3), F), i64(-1, -1)], {}, "more than one -1"),
    ("Reshape", [S((2, 3), F), S(("K",), I64)], {}, "static length"),
    ("Transpose", [S((2, 3), F)], {"perm": [0, 0]}, "not a permutation"),
    ("Concat", [S((2, 3), F), S((3, 3), F)], {"axis": 1}, "differ in dim 0"),
    ("Concat", [S((2, 3), F), S((2, 3), I64)], {"axis": 0}, "share dtype"),
    ("Squeeze", [S((2, 1), F), i64(0)], {}, "not 1"),
    ("Gather", [S((2, 3), F), S((2,), F)], {}, "int32 or int64"),
    ("GatherElements", [S((2, 3), F), S((3, 3), I64)], {"axis": 1}, "dims but on axis"),
    ("Split", [S((2, 6), F), i64(2, 3)], {"axis": 1, "outputs": 2}, "does not add up"),
    ("Split", [S((2, 6), F)], {"axis": 1, "outputs": 2}, "num_outputs"),
    ("Split", [S((2, 5), F)], {"axis": 1, "num_outputs": 4, "outputs": 4}, "cannot be split"),
    ("Slice", [S((4,), F), i64(0), i64(2), i64(0), i64(0)], {}, "contain 0"),
    ("Tile", [S((2, 3), F), i64(2)], {}, "repeats"),
    ("TopK", [S((2, 3), F), i64(4)], {}, "out of range"),
    ("Range", [np.array(0, np.int64), np.array(3, np.int64), np.array(0, np.int64)], {}, "delta is 0"),
    ("Range", [np.array(0, np.int64), np.array(3.0), np.array(1, np.int64)], {}, "share one of"),
    ("CumSum", [S((2, 3), F), np.array(2, np.int64)], {}, "out of range"),
]


@pytest.mark.parametrize("op, inputs, attrs, match", ERRORS, ids=[f"{c[0]}-{c[3]}" for c in ERRORS])
def test_bad_shapes_are_shape_errors_naming_the_node(op, inputs, attrs, match):
    attrs = dict(attrs)
    outputs = attrs.pop("outputs", None)
    with pytest.raises(kk.ShapeError, match=f"'{op}_0'.*{match}"):
        infer(op, *inputs, outputs=outputs, **attrs)


@pytest.mark.parametrize("op, attrs", [("Cast", {"to": 8}), ("Constant", {}),
                                       ("Constant", {"value_int": 1, "value_float": 1.0}),
                                       ("ConstantOfShape", {"value": np.zeros(2, np.float32)})])
def test_bad_attributes_are_attribute_errors(op, attrs):
    inputs = [S((2, 2), F)] if op == "Cast" else [i64(2)] if op == "ConstantOfShape" else []
    with pytest.raises(kk.OpAttributeError, match=f"'{op}_0'"):
        infer(op, *inputs, **attrs)


@pytest.mark.parametrize("batch", [1, 2, 5])
def test_symbolic_batch_runs_at_any_size(batch):
    """A small shape sub-graph on a symbolic batch: the inferred symbolic specs hold at run time."""
    g = kk.GraphBuilder("dyn")
    x = g.input("x", ("N", 3, 4), F)
    flat = g.op("Reshape", x, i64(0, -1))
    top, idx = g.op("TopK", flat, i64(2))
    total = g.op("ReduceSum", g.op("Cast", idx, to=1), i64(1), keepdims=0)
    g.output(top, total, g.op("Shape", x, start=0, end=1))
    model = g.build()
    assert [o.shape for o in kk.Session(model).get_outputs()] == [("N", 2), ("N",), (1,)]
    data = np.random.default_rng(batch).standard_normal((batch, 3, 4)).astype(F)
    top_v, total_v, shape_v = kk.Session(model, vendors=["reference"]).run(None, {"x": data})
    flat_data = data.reshape(batch, 12)
    np.testing.assert_array_equal(top_v, -np.sort(-flat_data, axis=1)[:, :2])
    np.testing.assert_array_equal(total_v, np.argsort(-flat_data, axis=1)[:, :2].sum(axis=1).astype(F))
    np.testing.assert_array_equal(shape_v, [batch])
