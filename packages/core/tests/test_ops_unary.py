"""The unary table (ops/unary.py) and Identity vs onnx's ReferenceEvaluator (opset 21), over every
dtype each reference kernel is registered for, every sample, and the attribute modes."""
from __future__ import annotations

import kernelkit as kk
import numpy as np
import pytest
import scipy.special
from kernelkit.dtypes import ALL_TYPES
from kernelkit.ops.unary import UNARY
from kernelkit.testing import assert_close, check_against_onnx, run_single_op, sample_cases

REFERENCE = {"passes": False, "vendors": ["reference"], "fallback": False}  # the NumPy kernels themselves


def _params():
    for op in UNARY:
        dtypes = {k.dtype for k in kk.kernels(op, device="cpu", vendor="reference")}
        for dtype in sorted(ALL_TYPES if "*" in dtypes else dtypes):
            yield pytest.param(op, dtype, id=f"{op}-{dtype}")


@pytest.mark.parametrize("op, dtype", list(_params()))
def test_samples_match_onnx(op, dtype):
    cases = sample_cases(op, dtype)
    assert cases, f"{op} has no samples for {dtype}"
    for inputs, attrs, options in cases:
        if dtype == "float64" and op in FLOAT64_ORACLE:
            check_float64(op, inputs[0], attrs)
        else:
            check_against_onnx(op, inputs, onnx_float_attrs(op, attrs), options.get("n_outputs"), **REFERENCE)


def _gelu(x, approximate="none"):
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + scipy.special.erf(x / np.sqrt(2)))


# onnx's reference computes these in float32 even for float64 inputs (Erf via np.vectorize(otypes="f"),
# HardSwish via HardSigmoid with alpha=float32(1/6)); for float64 the oracle is scipy / the formula
FLOAT64_ORACLE = {
    "Erf": lambda x: scipy.special.erf(x),
    "Gelu": _gelu,
    "HardSwish": lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
}


def check_float64(op, x, attrs):
    (got,) = run_single_op(op, [x], attrs, **REFERENCE)
    assert_close(got, FLOAT64_ORACLE[op](x, **attrs), err_msg=f"{op} {attrs}")


def onnx_float_attrs(op, attrs):
    """ONNX stores float attributes as float32: pass every float attribute (defaults included)
    rounded to float32 so that both sides compute with the same value in float64."""
    schema = kk.get_schema(op)
    full = {k: d for k, (t, d) in schema.attrs.items() if t == "float"} | dict(attrs)
    return {k: float(np.float32(v)) if isinstance(v, float) else v for k, v in full.items()}


ATTRIBUTE_MODES = [
    ("LeakyRelu", {"alpha": 0.3}), ("LeakyRelu", {"alpha": 0.0}), ("HardSigmoid", {"alpha": 0.5, "beta": 0.25}),
    ("Elu", {"alpha": 0.5}), ("Selu", {"alpha": 2.0, "gamma": 0.5}), ("Gelu", {"approximate": "tanh"}),
    ("Gelu", {"approximate": "none"}),
]


@pytest.mark.parametrize("op, attrs", ATTRIBUTE_MODES, ids=lambda v: str(v))
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_attribute_modes_match_onnx(op, attrs, dtype):
    x = np.random.default_rng(1).uniform(-4, 4, size=(3, 17)).astype(dtype)
    if dtype == "float64" and op in FLOAT64_ORACLE:
        check_float64(op, x, attrs)
    else:
        check_against_onnx(op, [x], onnx_float_attrs(op, attrs), **REFERENCE)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning", "ignore:invalid value:RuntimeWarning")
def test_special_values_match_onnx():
    x = np.array([0.0, -0.0, np.inf, -np.inf, 1e-30, -1e30], np.float32)
    for op in ["Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Floor", "Ceil", "Exp", "Softplus"]:
        check_against_onnx(op, [x], **REFERENCE)


def test_identity_returns_a_fresh_equal_array():
    x = np.arange(5, dtype=np.int64)
    (got,) = check_against_onnx("Identity", [x], **REFERENCE)
    got[0] = 99
    assert x[0] == 0
