"""The op kernels added for full coverage (typed.cl, index/scan/norm/resize/conv_transpose): bad
values read at run time are typed errors naming the op; cases beyond the op samples agree with
the reference (the conformance suite covers the samples themselves)."""
from __future__ import annotations

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import KernelkitError
from kernelkit.testing import assert_close, onnx_reference_run, run_single_op

GPU = {"device": "gpu", "vendors": ["opencl"], "fallback": False, "passes": False}


def _both(op, inputs, attrs=None, n_outputs=1, constants=()):
    got = run_single_op(op, inputs, attrs, n_outputs, constants, **GPU)
    want = run_single_op(op, inputs, attrs, n_outputs, constants, device="cpu", vendors=["reference"],
                         fallback=False, passes=False)
    return got, want


def test_gather_index_out_of_range_at_run_time_is_a_typed_error(rng):
    data = rng.standard_normal((5, 3)).astype(np.float32)
    with pytest.raises(KernelkitError, match="Gather"):
        run_single_op("Gather", [data, np.array([0, 5], np.int64)], {}, **GPU)


def test_gather_negative_indices_and_int64_data(rng):
    data = rng.integers(-1000, 1000, (4, 6, 2)).astype(np.int64)
    got, want = _both("Gather", [data, np.array([[-1, 0], [5, -6]], np.int64)], {"axis": 1})
    assert got[0].dtype == np.int64
    np.testing.assert_array_equal(got[0], want[0])


def test_pad_reflect_beyond_the_input_matches_the_oracle(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    pads = np.array([5, 0, 4, 7], np.int64)  # wider than the axes: reflection repeats periodically
    got = run_single_op("Pad", [x, pads], {"mode": "reflect"}, **GPU)
    oracle = onnx_reference_run("Pad", [x, pads], {"mode": "reflect"})
    assert_close(got[0], oracle[0])


def test_pad_runtime_crop_too_large_is_a_typed_error(rng):
    x = rng.standard_normal((2, 3)).astype(np.float32)
    with pytest.raises(KernelkitError, match="Pad"):
        run_single_op("Pad", [x, np.array([0, -4, 0, 0], np.int64)], {"mode": "edge"}, **GPU)


def test_compare_where_cast_chain_against_numpy(rng):
    g = kk.GraphBuilder("chain")
    a = g.input("a", (3, 1, 5), "float32")
    b = g.input("b", (4, 1), "float32")
    mask = g.op("Greater", a, b)
    picked = g.op("Where", mask, a, b)
    g.output(g.op("Cast", picked, to=7), g.op("Not", mask))  # int64
    sess = kk.Session(g.build(), **GPU)
    av = rng.uniform(-50, 50, (3, 1, 5)).astype(np.float32)
    bv = rng.uniform(-50, 50, (4, 1)).astype(np.float32)
    av_before = av.copy()
    as_int, inverted = sess.run(None, {"a": av, "b": bv})
    np.testing.assert_array_equal(as_int, np.where(av > bv, av, bv).astype(np.int64))
    np.testing.assert_array_equal(inverted, ~(av > bv))
    np.testing.assert_array_equal(av, av_before)


def test_topk_with_nan_and_ties_matches_the_reference():
    x = np.array([[1.0, np.nan, 3.0, 3.0, -1.0, np.nan]], np.float32)
    for largest in (0, 1):
        got, want = _both("TopK", [x, np.array([4], np.int64)], {"largest": largest}, n_outputs=2)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])


def test_topk_k_out_of_range_at_run_time_is_a_typed_error(rng):
    x = rng.standard_normal((2, 3)).astype(np.float32)
    with pytest.raises(KernelkitError, match="TopK"):
        run_single_op("TopK", [x, np.array([4], np.int64)], {}, 2, **GPU)


def test_argmax_nan_first_and_last(rng):
    x = np.array([[0.5, np.nan, 2.0, np.nan], [1.0, 4.0, 4.0, -2.0]], np.float32)
    for last in (0, 1):
        got, want = _both("ArgMax", [x], {"axis": 1, "select_last_index": last})
        np.testing.assert_array_equal(got[0], want[0])


def test_layer_norm_stats_outputs_and_conv_transpose_activation(rng):
    x = rng.standard_normal((3, 2, 8)).astype(np.float32)
    got, want = _both("LayerNormalization", [x, rng.standard_normal((2, 8)).astype(np.float32)],
                      {"axis": 1}, n_outputs=3)
    for g_, w_ in zip(got, want):
        assert_close(g_, w_)
    xt = rng.standard_normal((2, 4, 5, 5)).astype(np.float32)
    wt = rng.standard_normal((4, 3, 4, 4)).astype(np.float32)
    got, want = _both("ConvTranspose", [xt, wt, rng.standard_normal(6).astype(np.float32)],
                      {"group": 2, "strides": [3, 2], "pads": [2, 1, 0, 1], "dilations": [1, 2],
                       "activation": "Clip", "activation_params": [-0.5, 0.5]})
    assert_close(got[0], want[0])


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the reference's INT_MIN / -1
def test_integer_division_by_zero_is_a_typed_error_and_int_min_wraps():
    a = np.array([7, -7, np.iinfo(np.int32).min], np.int32)
    with pytest.raises(KernelkitError, match="Div"):
        run_single_op("Div", [a, np.array([2, 0, 1], np.int32)], {}, **GPU)
    got, want = _both("Div", [a, np.array([2, 2, -1], np.int32)])
    np.testing.assert_array_equal(got[0], want[0])
    big = np.array([np.iinfo(np.int64).max, 5], np.int64)
    got, want = _both("Add", [big, np.array([1, -9], np.int64)])  # wraps around, as NumPy
    np.testing.assert_array_equal(got[0], want[0])
