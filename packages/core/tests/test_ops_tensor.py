"""Tensor, reduction and index ops vs onnx's ReferenceEvaluator (opset 21), over every dtype their
reference kernel is registered for and every case their ``samples`` give; each case runs once
with all inputs fed at run time (shape inference sees symbolic sizes) and once with all inputs
constant (shape inference must then be exact)."""
from __future__ import annotations

import kernelkit as kk
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernelkit.testing import check_against_onnx, run_single_op, sample_cases

TENSOR_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ArgMax", "ArgMin",
              "Flatten", "Reshape", "Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements",
              "Squeeze", "Unsqueeze", "Expand", "Tile", "Cast", "CastLike", "Shape", "Size", "Constant",
              "ConstantOfShape", "Range", "TopK", "CumSum", "Where"]

REFERENCE = {"passes": False, "vendors": ["reference"], "fallback": False}  # the NumPy kernels themselves


def op_dtype_params(ops):
    return [pytest.param(op, key.dtype, id=f"{op}-{key.dtype}")
            for op in ops for key in kk.kernels(op, device="cpu", vendor="reference")]


def check_samples(op, dtype):
    cases = sample_cases(op, dtype)
    assert cases, f"{op} has no samples for {dtype}"
    for inputs, attrs, options in cases:
        n = options.get("n_outputs")
        check_against_onnx(op, inputs, attrs, n, **REFERENCE)
        check_against_onnx(op, inputs, attrs, n, constants=range(len(inputs)), **REFERENCE)


@pytest.mark.parametrize("op, dtype", op_dtype_params(TENSOR_OPS))
def test_samples_match_onnx(op, dtype):
    check_samples(op, dtype)


def i64(*v):
    return np.array(v, np.int64)


X = np.arange(12, dtype=np.float32).reshape(3, 4)
RUNTIME_ERRORS = [
    ("Gather", [X, i64(0, 3)], {}, "out of range"),
    ("Gather", [X, i64(-4)], {}, "out of range"),
    ("GatherElements", [X, np.full((3, 4), 4, np.int64)], {"axis": 1}, "out of range"),
    ("Reshape", [X, i64(5, -1)], {}, "cannot reshape"),
    ("Reshape", [X, i64(-1, -1)], {}, "more than one -1"),
    ("Slice", [X, i64(0), i64(2), i64(0), i64(0)], {}, "contain 0"),
    ("Slice", [X, i64(0), i64(2), i64(2)], {}, "out of range"),
    ("Split", [X, i64(1, 2)], {"axis": 1}, "does not add up"),
    ("Squeeze", [X, i64(0)], {}, "not 1"),
    ("Unsqueeze", [X, i64(0, 0)], {}, "repeat"),
    ("Expand", [X, i64(2, 4)], {}, "broadcast"),
    ("Tile", [X, i64(2, -1)], {}, "non-negative"),
    ("TopK", [X, i64(5)], {}, "out of range"),
    ("Range", [np.array(1, np.int64), np.array(5, np.int64), np.array(0, np.int64)], {}, "delta is 0"),
    ("CumSum", [X, np.array(3, np.int64)], {}, "not one axis"),
    ("ReduceSum", [X, i64(1, -1)], {}, "repeat"),
    ("ArgMax", [np.zeros((2, 0), np.float32)], {"axis": 1}, "empty axis"),
    ("Div", [i64(1, 2), i64(1, 0)], {}, "division by zero"),
]


@pytest.mark.parametrize("op, inputs, attrs, match", RUNTIME_ERRORS, ids=[f"{c[0]}-{c[3]}" for c in RUNTIME_ERRORS])
def test_bad_runtime_inputs_are_typed_errors_naming_the_node(op, inputs, attrs, match):
    """Values only known at run time (indices, shapes, axes) that do not fit: a KernelkitError
    naming the node, never a crash, a wrap-around or a silent wrong answer."""
    originals = [np.array(x, copy=True) for x in inputs]
    with pytest.raises(kk.KernelkitError, match=f"'{op}_0'.*{match}"):
        run_single_op(op, inputs, attrs, **REFERENCE)
    for x, x0 in zip(inputs, originals):
        np.testing.assert_array_equal(x, x0)


@pytest.mark.parametrize("op, inputs, attrs", [
    ("Reshape", [X, i64(2, 6)], {}), ("Squeeze", [X[None], i64(0)], {}), ("Unsqueeze", [X, i64(0)], {}),
    ("Flatten", [X], {}), ("Slice", [X, i64(0), i64(2)], {}), ("Transpose", [X], {}),
    ("Expand", [X, i64(3, 4)], {}), ("Identity", [X], {}), ("Split", [X, i64(1, 3)], {"axis": 1}),
])
def test_outputs_are_fresh_arrays_never_views_of_the_feed(op, inputs, attrs):
    n = 2 if op == "Split" else None
    outs = run_single_op(op, inputs, attrs, n_outputs=n, **REFERENCE)
    for out in outs:
        assert not np.shares_memory(out, inputs[0])
        out[...] = -1  # writable, and writing does not reach the caller's array
    np.testing.assert_array_equal(X, np.arange(12, dtype=np.float32).reshape(3, 4))


def test_topk_ties_come_out_lowest_index_first():
    x = np.array([[3, 1, 3, 2, 3], [0, 0, 0, 0, 0]], np.int32)
    values, indices = check_against_onnx("TopK", [x, i64(3)], **REFERENCE)
    np.testing.assert_array_equal(indices, [[0, 2, 4], [0, 1, 2]])
    values, indices = check_against_onnx("TopK", [x, i64(2)], {"largest": 0}, **REFERENCE)
    np.testing.assert_array_equal(indices, [[1, 3], [0, 1]])


def test_reduce_over_empty_set_gives_identity_elements():
    x = np.zeros((0, 3), np.float32)
    for op, fill in [("ReduceSum", 0.0), ("ReduceProd", 1.0), ("ReduceMax", -np.inf), ("ReduceMin", np.inf)]:
        (got,) = run_single_op(op, [x, i64(0)], {"keepdims": 0}, **REFERENCE)
        np.testing.assert_array_equal(got, np.full(3, fill, np.float32))


def test_slice_with_extreme_bounds_and_negative_steps_matches_onnx():
    x = np.arange(60, dtype=np.int32).reshape(3, 4, 5)
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    cases = [([hi], [lo], [2], [-1]), ([-100], [100], [1], [3]), ([2, 3], [-10, 0], [0, 2], [-1, -2]),
             ([lo], [hi], [-1], [2])]
    for starts, ends, axes, steps in cases:
        check_against_onnx("Slice", [x, i64(*starts), i64(*ends), i64(*axes), i64(*steps)], **REFERENCE)


@st.composite
def slice_args(draw):
    shape = draw(st.lists(st.integers(0, 6), min_size=1, max_size=3))
    rank = len(shape)
    axes = draw(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=rank, unique_by=lambda a: a % rank))
    bound = st.one_of(st.integers(-9, 9), st.sampled_from([np.iinfo(np.int64).min, np.iinfo(np.int64).max]))
    starts = [draw(bound) for _ in axes]
    ends = [draw(bound) for _ in axes]
    steps = [draw(st.integers(1, 3) | st.integers(-3, -1)) for _ in axes]
    return shape, starts, ends, axes, steps


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slice_args())
def test_slice_property_matches_onnx(args):
    shape, starts, ends, axes, steps = args
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    check_against_onnx("Slice", [x, i64(*starts), i64(*ends), i64(*axes), i64(*steps)],
                       constants=(1, 2, 3, 4), **REFERENCE)


@st.composite
def reshape_args(draw):
    shape = draw(st.lists(st.integers(1, 4), min_size=0, max_size=4))
    target = list(draw(st.permutations(shape)))
    if target and draw(st.booleans()):
        target[draw(st.integers(0, len(target) - 1))] = -1
    for i in range(min(len(shape), len(target))):  # 0 copies the input dim: only where it agrees
        if target[i] == shape[i] and draw(st.booleans()):
            target[i] = 0
    return shape, target


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reshape_args())
def test_reshape_property_matches_onnx(args):
    shape, target = args
    x = np.arange(int(np.prod(shape)), dtype=np.int32).reshape(shape)
    check_against_onnx("Reshape", [x, i64(*target)], constants=(1,), **REFERENCE)
