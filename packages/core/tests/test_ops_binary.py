"""Elementwise binary, variadic and logic ops vs onnx's ReferenceEvaluator (opset 21): every dtype
their reference kernel is registered for, every case their ``samples`` give, plus the edge cases
ONNX pins down (integer division truncation, NaN propagation, mixed-type Pow, broadcasting)."""
from __future__ import annotations

import kernelkit as kk
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernelkit.testing import assert_close, check_against_onnx, onnx_reference_run, run_single_op, sample_cases

BINARY_OPS = ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Equal", "Less", "LessOrEqual",
              "Greater", "GreaterOrEqual", "And", "Or", "Xor", "Not"]

REFERENCE = {"passes": False, "vendors": ["reference"], "fallback": False}  # the NumPy kernels themselves


@pytest.mark.parametrize("op, dtype", [pytest.param(op, k.dtype, id=f"{op}-{k.dtype}") for op in BINARY_OPS
                                       for k in kk.kernels(op, device="cpu", vendor="reference")])
def test_samples_match_onnx(op, dtype):
    cases = sample_cases(op, dtype)
    assert cases, f"{op} has no samples for {dtype}"
    for inputs, attrs, options in cases:
        if op == "Mean":  # onnx's reference Mean adds in place into input 0, so it cannot broadcast it
            check_mean(inputs)
        else:
            check_against_onnx(op, inputs, attrs, options.get("n_outputs"), **REFERENCE)


def check_mean(inputs):
    """Mean against onnx's reference Sum divided by the input count (ONNX's definition of Mean)."""
    (total,) = onnx_reference_run("Sum", inputs)
    (got,) = run_single_op("Mean", inputs, **REFERENCE)
    assert_close(got, (total / total.dtype.type(len(inputs))).astype(total.dtype))


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_integer_div_truncates_toward_zero(dtype):
    a = np.array([7, -7, 7, -7, 0, 5, -1], dtype)
    b = np.array([2, 2, -2, -2, 3, 5, 3], dtype)
    (got,) = check_against_onnx("Div", [a, b], **REFERENCE)
    np.testing.assert_array_equal(got, np.array([3, -3, -3, 3, 0, 1, 0], dtype))


def test_int64_div_is_exact_beyond_float_precision():
    a = np.array([2**62 + 1, -(2**62) - 3], np.int64)
    b = np.array([1, 1], np.int64)
    (got,) = run_single_op("Div", [a, b], **REFERENCE)
    np.testing.assert_array_equal(got, a)


def test_integer_div_by_zero_is_a_typed_error():
    with pytest.raises(kk.KernelExecutionError, match="Div.*division by zero"):
        run_single_op("Div", [np.array([1, 2], np.int32), np.array([1, 0], np.int32)], **REFERENCE)


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_max_min_propagate_nan(op):
    a = np.array([1.0, np.nan, 3.0], np.float32)
    b = np.array([np.nan, 2.0, 0.5], np.float32)
    (got,) = check_against_onnx(op, [a, b], **REFERENCE)
    assert np.isnan(got[:2]).all() and not np.isnan(got[2])


@pytest.mark.parametrize("base, exponent", [("float32", "int64"), ("float64", "float32"), ("int64", "int32")])
def test_pow_mixed_dtypes_keep_base_dtype(base, exponent):
    x = np.array([[0.5, 2.0, 3.0], [1.5, 4.0, 1.0]]).astype(base)
    y = np.array([2, 3, 1]).astype(exponent)
    (got,) = check_against_onnx("Pow", [x, y], **REFERENCE)
    assert got.dtype == np.dtype(base)


def test_unsigned_sub_wraps_like_onnx():
    a, b = np.array([1, 200], np.uint8), np.array([2, 100], np.uint8)
    (got,) = check_against_onnx("Sub", [a, b], **REFERENCE)
    np.testing.assert_array_equal(got, np.array([255, 100], np.uint8))


def test_mean_of_four_inputs_broadcasts():
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(s).astype(np.float32) for s in [(2, 1, 4), (3, 1), (4,), ()]]
    check_mean(xs)
    (got,) = run_single_op("Mean", xs, **REFERENCE)
    assert_close(got, (xs[0] + xs[1] + xs[2] + xs[3]) / np.float32(4))


def test_incompatible_shapes_are_a_shape_error_naming_the_node():
    with pytest.raises(kk.ShapeError, match="Add_0.*do not broadcast"):
        run_single_op("Add", [np.zeros((2, 3), np.float32), np.zeros((4,), np.float32)])


def test_mixed_dtypes_are_a_shape_error():
    with pytest.raises(kk.ShapeError, match="different dtypes"):
        run_single_op("Mul", [np.zeros(3, np.float32), np.zeros(3, np.float64)])


def test_variadic_op_without_inputs_is_a_shape_error():
    g = kk.GraphBuilder("empty")
    with pytest.raises(kk.ShapeError, match="at least one input"):
        g.op("Sum")


def test_where_dispatches_on_x_dtype():
    cond = np.array([[True, False], [False, True]])
    x, y = np.arange(4, dtype=np.int16).reshape(2, 2), np.full((1, 2), -1, np.int16)
    (got,) = check_against_onnx("Where", [cond, x, y], **REFERENCE)
    np.testing.assert_array_equal(got, np.array([[0, -1], [-1, 3]], np.int16))
    with pytest.raises(kk.ShapeError, match="condition must be bool"):
        run_single_op("Where", [x, x, y])


def test_inputs_are_not_mutated():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones(3, np.float32)
    a0, b0 = a.copy(), b.copy()
    for op in ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Sum"]:
        run_single_op(op, [a, b], **REFERENCE)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


@st.composite
def broadcast_pair(draw):
    """Two shapes that broadcast: a common shape, each side dropping leading dims or setting 1s."""
    shape = draw(st.lists(st.integers(1, 4), min_size=0, max_size=4))

    def side():
        dims = [1 if draw(st.booleans()) else d for d in shape]
        return tuple(dims[draw(st.integers(0, len(dims))):])

    return side(), side()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broadcast_pair(), st.sampled_from(["Add", "Sub", "Mul", "Div", "Pow", "Max", "Less", "Equal"]),
       st.sampled_from(["float32", "int32"]))
def test_broadcasting_property_matches_onnx(shapes, op, dtype):
    rng = np.random.default_rng(0)
    a = (rng.uniform(0.5, 3, shapes[0]) if op == "Pow" else rng.uniform(-9, 9, shapes[0])).astype(dtype)
    b = (rng.uniform(0, 3, shapes[1]) if op == "Pow" else rng.uniform(1, 9, shapes[1])).astype(dtype)
    check_against_onnx(op, [a, b], **REFERENCE)
