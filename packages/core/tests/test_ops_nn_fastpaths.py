"""The reference kernels' fast paths (ops/conv.py, ops/pool.py, ops/_window.py, the norms) against
external oracles: onnx's ReferenceEvaluator, and onnxruntime where the evaluator is known to be
wrong (MaxPool with asymmetric pads). Each case is shaped to land on one particular path:

- Conv 1x1 without padding: the input (strided for stride > 1) is the matmul operand, no im2col;
- Conv depthwise (group == C_in, any channel multiplier): per-offset multiply-adds on flat shifted
  slices of the padded input's stride phases (strides, dilations, asymmetric and oversized pads);
- Conv im2col: one strided copy per kernel offset, padding never copied, offsets that only ever
  read padding (pads >= kernel extent) skipped;
- MaxPool without Indices: running maximum over unpadded offset regions (ceil_mode, dilations);
- BatchNormalization/Softmax/LayerNormalization with fewer temporaries; LayerNorm's Y-only call.
"""
from __future__ import annotations

import numpy as np
import pytest
from kernelkit import Session
from kernelkit.ops import batchnorm, conv, layernorm, pool, softmax
from kernelkit.ops._window import covers_all, kernel_offsets, window, windows
from kernelkit.testing import assert_close, onnx_reference_run, single_op_model

REFERENCE = {"vendors": ["reference"], "fallback": False}


def _run(op, inputs, attrs, n_outputs=1):
    """One node through a Session pinned to the reference kernels."""
    model = single_op_model(op, inputs, attrs, n_outputs)
    sess = Session(model, **REFERENCE)
    assert {vendor for _, vendor in sess.placement().values()} == {"reference"}
    return sess.run(None, {f"in{i}": x for i, x in enumerate(inputs) if x is not None})


def _ort(op, inputs, attrs, n_outputs=1):
    import onnxruntime as ort
    from onnx import helper

    names = [f"in{i}" for i in range(len(inputs))]
    node = helper.make_node(op, names, [f"out{i}" for i in range(n_outputs)], **attrs)
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
           for n, x in zip(names, inputs)]
    outs = [helper.make_empty_tensor_value_info(f"out{i}") for i in range(n_outputs)]
    model = helper.make_model(helper.make_graph([node], "oracle", ins, outs),
                              opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip(names, inputs)))


def _check(op, inputs, attrs, n_outputs=1, oracle=onnx_reference_run):
    """Reference kernel vs oracle; float16 cases get the float32 oracle rounded to float16."""
    dtype = inputs[0].dtype
    wide = [x.astype(np.float32) if x is not None and x.dtype == np.float16 else x for x in inputs]
    got = _run(op, inputs, attrs, n_outputs)
    want = oracle(op, wide, attrs, n_outputs)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, np.asarray(w).astype(dtype), err_msg=f"{op} output {i} {attrs}")
    return got


def _rand(rng, shape, dtype="float32"):
    return rng.uniform(-1, 1, shape).astype(dtype)


# ---- Conv: 1x1 without padding --------------------------------------------------------------------
POINTWISE = [
    ((1, 16, 9, 7), (24, 16, 1, 1), {}),
    ((3, 8, 5, 6), (12, 8, 1, 1), {}),  # batch > 1
    ((2, 8, 6, 6), (6, 4, 1, 1), {"group": 2}),
    ((1, 8, 9, 10), (5, 8, 1, 1), {"strides": [2, 3]}),  # strided: a strided view, no im2col
    ((2, 6, 7, 7), (4, 6, 1, 1), {"strides": [2, 2], "dilations": [3, 2]}),  # dilation is moot
    ((1, 4, 11), (3, 4, 1), {"strides": [4]}),  # 1-D
    ((1, 3, 4, 3, 5), (2, 3, 1, 1, 1), {}),  # 3-D
    ((1, 6, 5, 5), (4, 6, 1, 1), {"pads": [1, 0, 0, 2]}),  # padded 1x1: the general path
    ((1, 6, 5, 5), (4, 6, 1, 1), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("xs, ws, attrs", POINTWISE)
def test_conv_pointwise(xs, ws, attrs, dtype):
    rng = np.random.default_rng(len(xs) + sum(ws))
    x, w, b = _rand(rng, xs, dtype), _rand(rng, ws, dtype), _rand(rng, ws[:1], dtype)
    _check("Conv", [x, w, b], attrs)
    _check("Conv", [x, w], attrs)


# ---- Conv: depthwise ------------------------------------------------------------------------------
DEPTHWISE = [  # (x shape, channel multiplier, kernel, attrs)
    ((1, 6, 9, 11), 1, (3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 16, 9, 8), 1, (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((2, 4, 12, 13), 1, (3, 3), {"strides": [2, 3], "pads": [0, 2, 1, 0]}),
    ((1, 5, 13, 12), 1, (3, 2), {"dilations": [2, 3], "pads": [2, 1, 2, 3]}),
    ((1, 12, 7, 7), 1, (5, 5), {"pads": [2, 2, 2, 2], "strides": [2, 2]}),
    ((1, 3, 8, 9), 2, (3, 3), {"pads": [1, 1, 1, 1]}),  # channel multiplier 2
    ((2, 8, 6, 5), 3, (2, 3), {"strides": [1, 2]}),
    ((1, 6, 7, 6), 1, (3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 6, 7, 6), 1, (2, 2), {"auto_pad": "SAME_LOWER"}),
    ((1, 4, 5, 5), 1, (2, 2), {"pads": [3, 3, 3, 3]}),  # pads beyond the kernel: border reads only padding
    ((1, 5, 17), 1, (4,), {"pads": [2, 1], "strides": [2], "dilations": [2]}),  # 1-D
    ((1, 3, 5, 4, 6), 2, (3, 2, 3), {"pads": [1, 0, 1, 1, 1, 0]}),  # 3-D
    ((1, 32, 3, 3), 1, (3, 3), {"pads": [1, 1, 1, 1]}),
]


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("xs, mult, kernel, attrs", DEPTHWISE)
def test_conv_depthwise(xs, mult, kernel, attrs, dtype):
    rng = np.random.default_rng(xs[1] * 7 + mult)
    c = xs[1]
    x, w, b = _rand(rng, xs, dtype), _rand(rng, (c * mult, 1, *kernel), dtype), _rand(rng, (c * mult,), dtype)
    _check("Conv", [x, w, b], {**attrs, "group": c})
    _check("Conv", [x, w], {**attrs, "group": c})


@pytest.mark.parametrize("strides, dilations", [([1, 2], [1, 1]), ([3, 2], [2, 3]), ([2, 2], [2, 2])])
def test_conv_depthwise_kernel_direct(strides, dilations):
    """The private kernel itself: C-contiguous NCHW output, right values, every stride phase."""
    rng = np.random.default_rng(sum(strides))
    x, w = _rand(rng, (2, 10, 13, 12)), _rand(rng, (10, 1, 3, 3))
    attrs = {"strides": strides, "dilations": dilations, "pads": [1, 0, 2, 1]}
    win = window(x.shape[2:], (3, 3), **attrs)
    want = onnx_reference_run("Conv", [x, w], {"group": 10, **attrs})[0]
    got = conv._depthwise(x, w, win)
    assert got.flags.c_contiguous
    assert_close(got, want)


def test_conv_fused_activation_on_fast_paths():
    rng = np.random.default_rng(11)
    x = _rand(rng, (1, 8, 6, 6))
    for w, attrs in [(_rand(rng, (8, 1, 3, 3)), {"group": 8, "pads": [1, 1, 1, 1]}),
                     (_rand(rng, (5, 8, 1, 1)), {})]:
        b = _rand(rng, (w.shape[0],))
        got = _run("Conv", [x, w, b], {**attrs, "activation": "Clip", "activation_params": [-0.2, 0.3]})[0]
        plain = onnx_reference_run("Conv", [x, w, b], attrs)[0]
        assert_close(got, np.clip(plain, -0.2, 0.3))


# ---- Conv: im2col without a padded copy -----------------------------------------------------------
IM2COL = [
    ((1, 3, 15, 14), (4, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),  # a ResNet stem
    ((2, 4, 8, 8), (6, 4, 3, 3), {"pads": [1, 1, 1, 1]}),
    ((1, 4, 6, 7), (4, 2, 3, 3), {"group": 2, "pads": [0, 2, 1, 0], "dilations": [2, 1]}),
    ((1, 2, 5, 5), (3, 2, 2, 2), {"pads": [4, 3, 2, 4]}),  # corner outputs read only padding
    ((1, 3, 9, 9), (2, 3, 3, 3), {"auto_pad": "SAME_LOWER", "strides": [3, 2]}),
    ((1, 2, 4, 5, 4), (3, 2, 2, 3, 2), {"pads": [1, 0, 1, 0, 1, 1], "strides": [1, 2, 1]}),
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("xs, ws, attrs", IM2COL)
def test_conv_im2col(xs, ws, attrs, dtype):
    rng = np.random.default_rng(sum(xs))
    _check("Conv", [_rand(rng, xs, dtype), _rand(rng, ws, dtype), _rand(rng, ws[:1], dtype)], attrs)


@pytest.mark.parametrize("spatial, kernel, kw", [
    ((7, 6), (3, 3), {"pads": (1, 1, 1, 1)}),
    ((9, 5), (2, 3), {"strides": (2, 3), "dilations": (3, 1), "pads": (0, 2, 1, 0)}),
    ((4,), (2,), {"pads": (3, 3)}),
    ((6, 6), (3, 3), {}),
    ((7, 8), (3, 2), {"strides": (2, 2), "ceil_mode": True, "pads": (0, 1, 0, 0)}),
])
def test_kernel_offsets_match_padded_windows(spatial, kernel, kw):
    """Each offset's regions pick exactly the values the padded strided window view holds there
    (NaN marks padding: positions outside every region must be padding)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, *spatial))
    win = window(spatial, kernel, **kw)
    view = windows(x, win, fill=np.nan)  # (N, C, *out, *K)
    flat = view.reshape(*view.shape[:2 + win.rank], -1)
    seen = np.zeros(flat.shape, bool)
    for k, out, src in kernel_offsets(spatial, win):
        np.testing.assert_array_equal(flat[(slice(None), slice(None), *out, k)], x[(slice(None), slice(None), *src)])
        seen[(slice(None), slice(None), *out, k)] = True
    assert np.isnan(flat[~seen]).all()
    assert covers_all(spatial, win) == bool(seen.all())


# ---- MaxPool without Indices ----------------------------------------------------------------------
MAXPOOL = [
    ((1, 3, 9, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),  # the ResNet one
    ((2, 2, 8, 7), {"kernel_shape": [2, 3], "pads": [1, 0, 0, 2], "ceil_mode": 1, "strides": [2, 2]}),
    ((1, 2, 10, 9), {"kernel_shape": [3, 2], "dilations": [2, 3], "pads": [2, 1, 1, 1]}),
    ((1, 2, 7, 7), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 11), {"kernel_shape": [4], "strides": [3], "ceil_mode": 1}),
]


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
@pytest.mark.parametrize("xs, attrs", MAXPOOL)
def test_maxpool_running_max(xs, attrs, dtype):
    rng = np.random.default_rng(len(attrs))
    x = rng.integers(-120, 120, xs).astype(dtype) if dtype == "int8" else _rand(rng, xs, dtype)
    y = _check("MaxPool", [x], attrs, oracle=_ort)[0]
    both = _run("MaxPool", [x], attrs, n_outputs=2)  # the Indices path gives the same Y
    np.testing.assert_array_equal(both[0], y)


def test_maxpool_running_max_all_negative_and_nan():
    """Padding never wins over negative inputs; a NaN in a window propagates as on the Indices path."""
    x = np.full((1, 1, 4, 4), -5.0, np.float32)
    x[0, 0, 0, 3] = -7.0
    attrs = {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1], "strides": [2, 2]}
    np.testing.assert_array_equal(pool.max_pool(x, **attrs, output_count=1)[0], _ort("MaxPool", [x], attrs)[0])
    x[0, 0, 1, 2] = np.nan
    y = pool.max_pool(x, **attrs, output_count=1)[0]
    np.testing.assert_array_equal(y, pool.max_pool(x, **attrs, output_count=2)[0])
    assert np.isnan(y[0, 0, 1, 1]) and np.isnan(y).sum() == 1


# ---- norms and softmax with fewer temporaries -----------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_layernorm_y_only_and_all_outputs(dtype):
    rng = np.random.default_rng(5)
    x, s, b = _rand(rng, (2, 5, 16), dtype), _rand(rng, (16,), dtype), _rand(rng, (16,), dtype)
    y1 = _check("LayerNormalization", [x, s, b], {})[0]
    y3 = _check("LayerNormalization", [x, s, b], {"axis": -1}, n_outputs=3)
    np.testing.assert_array_equal(y1, y3[0])
    assert len(layernorm.layer_normalization(x, s, b, output_count=1)) == 1


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_batchnorm_softmax(dtype):
    rng = np.random.default_rng(6)
    x = _rand(rng, (2, 4, 5, 3), dtype)
    params = [_rand(rng, (4,), dtype), _rand(rng, (4,), dtype), _rand(rng, (4,), dtype),
              rng.uniform(0.2, 2, 4).astype(dtype)]
    _check("BatchNormalization", [x, *params], {"epsilon": 0.125})  # exact in float32, as ONNX stores it
    _check("Softmax", [x * 20], {"axis": 1})
    _check("LogSoftmax", [x * 20], {"axis": -1})


def test_fast_paths_leave_inputs_alone():
    """Kernels called directly with writable arrays never write into them."""
    rng = np.random.default_rng(7)
    x = _rand(rng, (1, 6, 7, 7))
    cases = [
        (conv.conv, [x, _rand(rng, (6, 1, 3, 3)), _rand(rng, (6,))], {"group": 6, "pads": [1] * 4}),
        (conv.conv, [x, _rand(rng, (4, 6, 1, 1)), _rand(rng, (4,))], {"activation": "Relu"}),
        (conv.conv, [x, _rand(rng, (4, 6, 3, 3))], {"pads": [1, 0, 1, 2]}),
        (pool.max_pool, [x], {"kernel_shape": [3, 3], "pads": [1] * 4, "output_count": 1}),
        (batchnorm.batch_normalization, [x, *(_rand(rng, (6,)) + 1.5 for _ in range(4))], {}),
        (softmax._softmax, [x], {"axis": 1}),
        (softmax._log_softmax, [x], {}),
        (layernorm.layer_normalization, [x, _rand(rng, (7,)), _rand(rng, (7,))], {"output_count": 1}),
    ]
    for fn, inputs, attrs in cases:
        before = [a.copy() for a in inputs]
        out = fn(*inputs, **attrs)
        for o in out if isinstance(out, tuple) else (out,):
            assert not any(np.shares_memory(o, a) for a in inputs), fn.__name__
        for a, b in zip(inputs, before):
            np.testing.assert_array_equal(a, b, err_msg=fn.__name__)


@pytest.mark.parametrize("ws, attrs", [((4, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),  # depthwise
                                       ((3, 4, 1, 1), {}),  # 1x1
                                       ((3, 4, 3, 3), {"pads": [1, 0, 1, 0], "strides": [2, 2]})])  # im2col
def test_conv_empty_batch(ws, attrs):
    x = np.zeros((0, 4, 6, 5), np.float32)
    w = np.ones(ws, np.float32)
    want = onnx_reference_run("Conv", [x, w], attrs)[0]
    assert_close(conv.conv(x, w, **attrs), want)
