"""Quantized reference ops (ops/quantize.py, ops/integer.py, ops/qlinear.py) against external oracles.

onnx's ReferenceEvaluator checks every sample where it implements the op (it lacks QGemm and the
fused ``activation``, and fails on per-row MatMulInteger zero points); onnxruntime checks
bit-exactness where its rounding is specified: QuantizeLinear, DynamicQuantizeLinear,
MatMulInteger, QLinearConv/QLinearMatMul/QGemm requantization. onnxruntime's AVX2 kernels without
VNNI saturate int16 pair sums of uint8 x int8 products (vpmaddubsw), so its integer products are
compared on operands that cannot saturate (7-bit weights, as ``reduce_range`` makes); kernelkit's
own products are exact at the extremes (checked against int64 NumPy).
"""
from __future__ import annotations

import numpy as np
import pytest
from kernelkit import ShapeError
from kernelkit.testing import assert_close, onnx_reference_run, run_single_op, sample_cases, single_op_model

ort = pytest.importorskip("onnxruntime")

OPS = {"QuantizeLinear": ("float32", "float16", "int32"), "DequantizeLinear": ("int8", "uint8", "int16", "uint16",
                                                                             "int32"),
       "DynamicQuantizeLinear": ("float32",), "MatMulInteger": ("int8", "uint8"), "ConvInteger": ("int8", "uint8"),
       "QLinearConv": ("int8", "uint8"), "QLinearMatMul": ("int8", "uint8")}
CASES = [(op, dt) for op, dts in OPS.items() for dt in dts]


def ort_run(op, inputs, out_dtypes, attrs=None, domain=""):
    """One node through onnxruntime (CPU, one thread); output dtypes given (ONNX needs them)."""
    from onnx import helper

    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, [f"out{i}" for i in range(len(out_dtypes))], domain=domain, **(attrs or {}))
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype), np.shape(x))
           for n, x in zip(names, inputs) if n]
    outs = [helper.make_tensor_value_info(f"out{i}", helper.np_dtype_to_tensor_dtype(np.dtype(d)), None)
            for i, d in enumerate(out_dtypes)]
    opsets = [helper.make_opsetid("", 21)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(helper.make_graph([node], "oracle", ins, outs), opset_imports=opsets)
    model.ir_version = 10
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sess.run(None, {n: np.asarray(x) for n, x in zip(names, inputs) if n})


def run(op, inputs, attrs=None, domain=""):
    return run_single_op(op, inputs, attrs, domain=domain, vendors=["reference"], fallback=False, passes=False)


def _onnx_oracle_applies(op, inputs, attrs) -> bool:
    if attrs.get("activation") or (op == "QuantizeLinear" and inputs[0].dtype == np.float16 != inputs[1].dtype):
        return False  # kernelkit's fused activation; float16 x with a float32 scale is opset 23's typing
    if op == "DynamicQuantizeLinear" and not np.any(inputs[0]):
        return False  # the evaluator divides by a zero scale; onnxruntime's scale 1 is checked below
    if op == "MatMulInteger" and len(inputs) > 2 and inputs[2] is not None and np.size(inputs[2]) > 1:
        return False  # its per-row zero point does not broadcast (onnx 1.23)
    return True


@pytest.mark.parametrize("op,dtype", CASES, ids=[f"{o}-{d}" for o, d in CASES])
def test_samples_match_onnx_reference(op, dtype):
    checked = 0
    for inputs, attrs, _ in sample_cases(op, dtype):
        got = run(op, inputs, attrs)
        if not _onnx_oracle_applies(op, inputs, attrs):
            continue
        want = onnx_reference_run(op, inputs, attrs, n_outputs=len(got))
        for g, w in zip(got, want):
            assert_close(g, w, err_msg=f"{op} {dtype} {attrs}")
        checked += 1
    assert checked


def test_quantize_rounds_half_to_even_and_saturates_like_onnxruntime():
    rng = np.random.default_rng(0)
    x = np.concatenate([np.arange(-300, 300, 0.5, dtype=np.float32),  # every tie, both signs
                        rng.standard_normal(4000).astype(np.float32) * 50, [np.float32(1e9), np.float32(-1e9)]])
    for zp in (np.uint8(128), np.int8(-3), np.uint8(0), np.int8(127)):
        for scale in (np.float32(1.0), np.float32(0.37), np.float32(3e-3)):
            (got,) = run("QuantizeLinear", [x, scale, zp])
            (want,) = ort_run("QuantizeLinear", [x, scale, zp], [zp.dtype])
            np.testing.assert_array_equal(got, want, err_msg=f"scale {scale} zp {zp}")
    assert run("QuantizeLinear", [np.array([0.5, 1.5, 2.5, -0.5, -1.5], np.float32), np.float32(1), np.int8(0)])[
        0].tolist() == [0, 2, 2, 0, -2]


def test_per_axis_quantize_and_dequantize_match_onnxruntime():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    scale = rng.uniform(0.01, 0.05, 4).astype(np.float32)
    zp = rng.integers(-20, 20, 4).astype(np.int8)
    (q,) = run("QuantizeLinear", [x, scale, zp], {"axis": 1})
    np.testing.assert_array_equal(q, ort_run("QuantizeLinear", [x, scale, zp], ["int8"], {"axis": 1})[0])
    (d,) = run("DequantizeLinear", [q, scale, zp], {"axis": 1})
    np.testing.assert_array_equal(d, ort_run("DequantizeLinear", [q, scale, zp], ["float32"], {"axis": 1})[0])


@pytest.mark.parametrize("x", [np.zeros((2, 3), np.float32), np.full((4,), -2.0, np.float32),
                               np.linspace(-1, 3, 50, dtype=np.float32), np.linspace(0.1, 7, 9, dtype=np.float32)],
                         ids=["zeros", "negative", "mixed", "positive"])
def test_dynamic_quantize_matches_onnxruntime_bit_for_bit(x):
    got = run("DynamicQuantizeLinear", [x])
    want = ort_run("DynamicQuantizeLinear", [x], ["uint8", "float32", "uint8"])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def _int8(rng, dtype, shape, low=None, high=None):
    info = np.iinfo(dtype)
    return rng.integers(info.min if low is None else low, (info.max if high is None else high) + 1, shape).astype(dtype)


@pytest.mark.parametrize("adt,bdt", [("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8")])
def test_matmul_integer_is_exact_and_matches_onnxruntime(adt, bdt):
    rng = np.random.default_rng(2)
    a = _int8(rng, adt, (3, 5, 300))
    b = _int8(rng, bdt, (300, 7))
    azp, bzp = _int8(rng, adt, ()), _int8(rng, bdt, ())
    (got,) = run("MatMulInteger", [a, b, azp, bzp])
    exact = (a.astype(np.int64) - int(azp)) @ (b.astype(np.int64) - int(bzp))
    np.testing.assert_array_equal(got, exact.astype(np.int32))  # at the extremes too
    b7 = _int8(rng, bdt, (300, 7), -64 if bdt == "int8" else 0, 63 if bdt == "int8" else 127)  # cannot saturate
    (got,) = run("MatMulInteger", [a, b7, azp, np.zeros((), bdt)])
    np.testing.assert_array_equal(got, ort_run("MatMulInteger", [a, b7, azp, np.zeros((), bdt)], ["int32"])[0])


def test_qlinear_ops_match_onnxruntime():
    rng = np.random.default_rng(3)
    x = _int8(rng, "uint8", (2, 8, 9, 9))
    w = _int8(rng, "int8", (6, 4, 3, 3), -64, 63)
    args = [x, np.float32(0.02), np.uint8(120), w, rng.uniform(0.002, 0.01, 6).astype(np.float32), np.zeros(6, np.int8),
            np.float32(0.05), np.uint8(100), rng.integers(-3000, 3000, 6).astype(np.int32)]
    attrs = {"group": 2, "pads": [1, 0, 1, 2], "strides": [2, 1]}
    np.testing.assert_array_equal(run("QLinearConv", args, attrs)[0], ort_run("QLinearConv", args, ["uint8"], attrs)[0])
    a, b = _int8(rng, "uint8", (4, 200)), _int8(rng, "int8", (200, 5), -64, 63)
    mm = [a, np.float32(0.03), np.uint8(128), b, np.float32(0.01), np.int8(0), np.float32(0.2), np.uint8(120)]
    np.testing.assert_array_equal(run("QLinearMatMul", mm)[0], ort_run("QLinearMatMul", mm, ["uint8"])[0])
    c = rng.integers(-4000, 4000, 5).astype(np.int32)
    gemm = [a, np.float32(0.03), np.uint8(128), b.T.copy(), rng.uniform(0.005, 0.01, 5).astype(np.float32),
            np.zeros(5, np.int8), c, np.float32(0.2), np.uint8(120)]
    got = run("QGemm", gemm, {"transB": 1}, domain="com.microsoft")[0]
    np.testing.assert_array_equal(got, ort_run("QGemm", gemm, ["uint8"], {"transB": 1}, domain="com.microsoft")[0])
    to_float = [a, np.float32(0.03), np.uint8(128), b, np.float32(0.01), np.int8(0), c]  # no y_zero_point: float
    got = run("QGemm", to_float, {"alpha": 0.5}, domain="com.microsoft")
    want = ort_run("QGemm", to_float, ["float32"], {"alpha": 0.5}, domain="com.microsoft")
    assert_close(got[0], want[0])


def test_fused_activation_is_a_clamp_of_the_quantized_output():
    """Q(relu(v)) == max(Q(v), zp) and Q(clip(v, lo, hi)) == clip(Q(v), Q(lo), Q(hi))."""
    rng = np.random.default_rng(4)
    a, b = _int8(rng, "int8", (5, 30)), _int8(rng, "int8", (30, 6))
    base = [a, np.float32(0.05), np.int8(3), b, np.float32(0.02), np.int8(0), np.float32(0.1), np.int8(-7)]
    (plain,) = run("QLinearMatMul", base)
    (relu,) = run("QLinearMatMul", base, {"activation": "Relu"})
    np.testing.assert_array_equal(relu, np.maximum(plain, -7))
    (clip,) = run("QLinearMatMul", base, {"activation": "Clip", "activation_params": [-1.0, 2.0]})
    np.testing.assert_array_equal(clip, np.clip(plain, -7 - 10, -7 + 20))


@pytest.mark.parametrize("op,inputs,match", [
    ("QuantizeLinear", [np.zeros((2, 3), np.float32), np.ones(4, np.float32)], "does not match axis"),
    ("QuantizeLinear", [np.zeros((2, 3), np.float64), np.float32(1)], "float32/float16/int32"),
    ("DequantizeLinear", [np.zeros((2, 3), np.float32), np.float32(1)], "must be one of"),
    ("DequantizeLinear", [np.zeros((2, 3), np.int8), np.float32(1), np.uint8(0)], "x's dtype"),
    ("MatMulInteger", [np.zeros((2, 3), np.int32), np.zeros((3, 2), np.int8)], "int8 or uint8"),
    ("QLinearMatMul", [np.zeros((2, 3), np.int8), np.ones(2, np.float32), np.int8(0), np.zeros((3, 2), np.int8),
                       np.float32(1), np.int8(0), np.float32(1), np.int8(0)], "a_scale must be a scalar"),
], ids=["q-axis", "q-dtype", "dq-dtype", "dq-zp", "mmi-dtype", "qlmm-scale"])
def test_bad_inputs_are_shape_errors_naming_the_node(op, inputs, match):
    with pytest.raises(ShapeError, match=match) as info:
        single_op_model(op, inputs)
    assert f"({op})" in str(info.value)


def test_bad_fused_activation_is_refused():
    args = [np.zeros((2, 3), np.int8), np.float32(1), np.int8(0), np.zeros((3, 2), np.int8), np.float32(1), np.int8(0),
            np.float32(1), np.int8(0)]
    with pytest.raises(ShapeError, match="activation 'Gelu'"):
        single_op_model("QLinearMatMul", args, {"activation": "Gelu"})
