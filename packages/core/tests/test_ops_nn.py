"""Neural-network reference ops (Conv, pools, norms, Resize, Pad, ...) against external oracles.

Every sample case an op declares runs through a full Session and is compared with onnx's
ReferenceEvaluator (opset 21). Where that evaluator is known to be wrong, the case goes to
onnxruntime instead (see ``_oracle``). Float16 cases run the oracle on the same values in float32
and round its answer to float16 (the correctly rounded result), compared at float16 tolerance.
"""
from __future__ import annotations

import kernelkit
import numpy as np
import pytest
from kernelkit import (
    KernelExecutionError,
    OpAttributeError,
    ShapeError,
    UnsupportedOpError,
    apply_activation,
)
from kernelkit.testing import assert_close, onnx_reference_run, run_single_op, sample_cases, single_op_model

NN_OPS = ["Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization", "InstanceNormalization",
          "LayerNormalization", "LRN", "PRelu", "Clip", "MaxPool", "AveragePool", "GlobalAveragePool",
          "GlobalMaxPool", "Softmax", "LogSoftmax", "Resize", "Pad", "Dropout", "DepthToSpace", "SpaceToDepth"]
FLOATS = ["float32", "float64", "float16"]


def ort_run(op, inputs, attrs=None, n_outputs=1):
    """Run one node with onnxruntime (CPU, 1 thread)."""
    import onnxruntime as ort
    from onnx import helper

    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    while names and not names[-1]:
        names.pop()
    outs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op, names, outs, **(attrs or {}))
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
           for n, x in zip(names, inputs) if n]
    graph = helper.make_graph([node], "oracle", ins, [helper.make_empty_tensor_value_info(o) for o in outs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return sess.run(None, {n: x for n, x in zip(names, inputs) if n})


def lrn_by_definition(x, *, size, alpha=1e-4, beta=0.75, bias=1.0):
    """LRN written straight from the ONNX spec, one channel at a time (float64)."""
    x = x.astype(np.float64)
    square_sum = np.zeros_like(x)
    for c in range(x.shape[1]):
        lo, hi = max(0, c - (size - 1) // 2), min(x.shape[1] - 1, c + -(-(size - 1) // 2))
        square_sum[:, c] = np.sum(x[:, lo:hi + 1] ** 2, axis=1)
    return [x / (bias + alpha / size * square_sum) ** beta]


def grouped_conv_transpose(inputs, attrs, n_outputs=1):
    """ConvTranspose with group > 1 as one ungrouped reference run per group (onnx's evaluator
    mishandles groups: it adds the whole bias per group and fails for group < channels)."""
    x, w, b = (inputs + [None])[:3]
    g = attrs.get("group", 1)
    rest = {k: v for k, v in attrs.items() if k != "group"}
    cg, mg = x.shape[1] // g, w.shape[1]
    parts = [onnx_reference_run("ConvTranspose", [x[:, i * cg:(i + 1) * cg], w[i * cg:(i + 1) * cg],
                                                  None if b is None else b[i * mg:(i + 1) * mg]], rest)[0]
             for i in range(g)]
    return [np.concatenate(parts, axis=1)]


def _keys(d, a):
    d = abs(d)
    if d <= 1:
        return ((a + 2) * d - (a + 3)) * d * d + 1
    return (((a * d - 5 * a) * d + 8 * a) * d - 4 * a) if d < 2 else 0.0


def resize_cubic_by_definition(x, scales, *, mode="cubic", antialias=0, exclude_outside=0, cubic_coeff_a=-0.75):
    """Resize cubic (half_pixel, scales) one axis at a time from Keys' kernel, in float64: a wide
    window of taps, outside taps clamped to the edge (or dropped with exclude_outside), weights
    normalized when antialias or exclude_outside rescale them."""
    y = x.astype(np.float64)
    for axis, scale in enumerate(np.asarray(scales, np.float64)):
        n_in, n_out = x.shape[axis], int(np.floor(scale * x.shape[axis]))
        if n_out == n_in and scale == 1.0:
            continue
        stretch = min(scale, 1.0) if antialias else 1.0
        m = np.zeros((n_out, n_in))
        for o in range(n_out):
            src = (o + 0.5) / scale - 0.5
            taps = [(k, _keys((k - src) * stretch, cubic_coeff_a)) for k in range(int(np.floor(src)) - 12,
                                                                                   int(np.floor(src)) + 13)]
            if exclude_outside:
                taps = [(k, w) for k, w in taps if 0 <= k < n_in]
            total = sum(w for _, w in taps) if antialias or exclude_outside else 1.0
            for k, w in taps:
                m[o, min(max(k, 0), n_in - 1)] += w / total
        y = np.moveaxis(np.tensordot(m, np.moveaxis(y, axis, 0), axes=1), 0, axis)
    return [y.astype(x.dtype)]


def _oracle(op, inputs, attrs, n_outputs):
    """The external answer for one case; routes around onnx ReferenceEvaluator's known bugs."""
    x = inputs[0]
    pads = attrs.get("pads", [])
    if op == "ConvTranspose" and attrs.get("group", 1) > 1:
        return grouped_conv_transpose(inputs, attrs)
    if op == "Resize" and attrs.get("mode") == "cubic":  # evaluator's cubic is float32-accurate only
        return resize_cubic_by_definition(x, inputs[2], **attrs)
    if op == "LRN":  # evaluator's channel loop runs over the batch size
        return lrn_by_definition(x, **attrs)
    if op == "GlobalMaxPool" and x.ndim != 4:  # evaluator mis-shapes non-4-D input
        return onnx_reference_run("ReduceMax", [x, np.arange(2, x.ndim)], {"keepdims": 1})
    if (op == "MaxPool" and (attrs.get("auto_pad") == "SAME_LOWER"  # wrong output size
                                    or pads[:len(pads) // 2] != pads[len(pads) // 2:])  # reads pads wrongly
            or op == "Pad" and (inputs[1] < 0).any()):  # evaluator rejects negative pads
        return ort_run(op, inputs, attrs, n_outputs)
    return onnx_reference_run(op, inputs, attrs, n_outputs)


def expected(op, inputs, attrs, n_outputs=1):
    """Oracle outputs, with fused activations applied after the oracle's plain op."""
    half = any(x is not None and x.dtype == np.float16 for x in inputs)
    ins = [x.astype(np.float32) if half and x is not None and x.dtype == np.float16 else x for x in inputs]
    plain = {k: v for k, v in attrs.items() if not k.startswith("activation")}
    outs = [np.asarray(o) for o in _oracle(op, ins, plain, n_outputs)]
    if attrs.get("activation"):
        params = attrs.get("activation_params", ())
        outs[0] = apply_activation(outs[0].astype(ins[0].dtype), attrs["activation"], params)
    want = inputs[0].dtype
    return [o.astype(want) if o.dtype.kind == "f" and o.dtype != want else o for o in outs]


def check(op, inputs, attrs, n_outputs=1, constants=()):
    got = run_single_op(op, inputs, attrs, n_outputs=n_outputs, constants=constants)
    want = expected(op, inputs, attrs, n_outputs)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, err_msg=f"{op} output {i} {attrs}")
    # the shape rule agrees with the kernel (static shapes: every dim known)
    graph = single_op_model(op, inputs, attrs, n_outputs, constants).graph
    for name, g in zip(graph.outputs, got):
        spec = graph.values[name].spec
        assert spec.dtype == g.dtype.name
        assert all(d == s for d, s in zip(spec.shape, g.shape) if isinstance(d, int)), (spec, g.shape)
        assert spec.rank == g.ndim
    return got


def _cases(dtypes):
    for op in NN_OPS:
        for dtype in dtypes:
            samples = sample_cases(op, dtype, seed=len(op))
            assert samples, op
            for i, case in enumerate(samples):
                yield pytest.param(op, *case, id=f"{op}-{dtype}-{i}")


@pytest.mark.parametrize("op, inputs, attrs, options", list(_cases(FLOATS)))
def test_samples_match_oracle(op, inputs, attrs, options):
    check(op, inputs, attrs, **options)


INT_CASES = [("Gemm", "int32"), ("Gemm", "int64"), ("MatMul", "int32"), ("MatMul", "int64"), ("MatMul", "uint32"),
             ("PRelu", "int32"), ("PRelu", "int64"), ("Clip", "int8"), ("Clip", "uint8"), ("Clip", "int64"),
             ("Pad", "int32"), ("Pad", "uint8"), ("DepthToSpace", "int64"), ("SpaceToDepth", "uint8"),
             ("MaxPool", "int8"), ("MaxPool", "uint8")]


@pytest.mark.parametrize("op, dtype", INT_CASES)
def test_integer_dtypes(op, dtype):
    for inputs, attrs, options in sample_cases(op, dtype, seed=7):
        check(op, inputs, attrs, **options)


def test_params_as_constants_give_static_shapes():
    """Pad/Resize/Clip parameters folded as constants: the rule computes the output shape exactly."""
    for op, params in (("Pad", (1, 2, 3)), ("Resize", (1, 2, 3)), ("Clip", (1, 2)), ("Dropout", (1, 2))):
        for inputs, attrs, _ in sample_cases(op, "float32", seed=3):
            consts = tuple(i for i in params if i < len(inputs) and inputs[i] is not None)
            got = check(op, inputs, attrs, constants=consts)
            spec = single_op_model(op, inputs, attrs, None, consts).graph
            assert spec.values[spec.outputs[0]].spec.shape == got[0].shape


# -- outputs beyond the first -------------------------------------------------------------------------
def test_maxpool_indices_match_onnxruntime():
    for inputs, attrs, _ in sample_cases("MaxPool", "float32", seed=5):
        y, idx = run_single_op("MaxPool", inputs, attrs, n_outputs=2)
        ey, eidx = ort_run("MaxPool", inputs, attrs, n_outputs=2)
        assert_close(y, ey)
        np.testing.assert_array_equal(idx, eidx, err_msg=str(attrs))
        assert idx.dtype == np.int64


@pytest.mark.parametrize("dtype", FLOATS)
def test_layernorm_mean_and_inv_std(dtype):
    for inputs, attrs, _ in sample_cases("LayerNormalization", dtype, seed=9):
        check("LayerNormalization", inputs, attrs, n_outputs=3)


def test_dropout_mask_and_training_refused():
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    y, mask = check("Dropout", [x, np.array(0.5, np.float32), np.array(False)], {}, n_outputs=2)
    assert mask.dtype == np.bool_ and mask.all()
    with pytest.raises(ShapeError, match="Dropout_0.*training_mode"):
        run_single_op("Dropout", [x, None, np.array(True)], {}, constants=(2,))
    with pytest.raises(KernelExecutionError, match="Dropout_0.*training_mode"):
        run_single_op("Dropout", [x, None, np.array(True)], {})


# -- fused activations --------------------------------------------------------------------------------
FUSED = [("Relu", ()), ("Clip", (-0.3, 0.4)), ("LeakyRelu", (0.2,)), ("Sigmoid", ()), ("HardSwish", ()),
         ("Tanh", ()), ("Gelu", ()), ("Gelu", (1.0,))]


@pytest.mark.parametrize("activation, params", FUSED)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_fused_activation_equals_op_then_activation(activation, params, dtype):
    rng = np.random.default_rng(11)
    x4, x2 = rng.uniform(-1, 1, (1, 4, 6, 6)).astype(dtype), rng.uniform(-1, 1, (3, 8)).astype(dtype)
    cases = [("Conv", [x4, rng.uniform(-1, 1, (6, 2, 3, 3)).astype(dtype), rng.uniform(-1, 1, 6).astype(dtype)],
              {"group": 2, "pads": [1, 1, 1, 1], "strides": [2, 1]}),
             ("ConvTranspose", [x4, rng.uniform(-1, 1, (4, 3, 2, 2)).astype(dtype), None], {"strides": [2, 2]}),
             ("Gemm", [x2, rng.uniform(-1, 1, (5, 8)).astype(dtype), rng.uniform(-1, 1, 5).astype(dtype)],
              {"transB": 1, "alpha": 0.5}),
             ("MatMul", [x2, rng.uniform(-1, 1, (8, 4)).astype(dtype)], {})]
    for op, inputs, attrs in cases:
        plain = run_single_op(op, inputs, attrs)[0]
        fused = run_single_op(op, inputs, {**attrs, "activation": activation, "activation_params": params})[0]
        assert_close(fused, apply_activation(plain.copy(), activation, params), err_msg=f"{op}+{activation}")


# -- oracle cross-checks for the routed cases ------------------------------------------------------
def test_grouped_conv_transpose_matches_onnxruntime():
    for inputs, attrs, _ in sample_cases("ConvTranspose", "float32", seed=2):
        if attrs.get("group", 1) > 1 and not attrs.get("activation"):
            assert_close(run_single_op("ConvTranspose", inputs, attrs)[0], ort_run("ConvTranspose", inputs, attrs)[0])


def test_lrn_matches_onnxruntime_where_it_applies():
    for inputs, attrs, _ in sample_cases("LRN", "float32", seed=4):
        if inputs[0].ndim == 4 and attrs["size"] % 2:  # onnxruntime: 4-D and odd sizes only
            assert_close(run_single_op("LRN", inputs, attrs)[0], ort_run("LRN", inputs, attrs)[0])


def test_conv_larger_against_onnxruntime():
    """A ResNet-like layer (more channels, batch 2) against onnxruntime in float32."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 16, 20, 20)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32) * 0.1
    b = rng.standard_normal(32).astype(np.float32)
    for attrs in ({"pads": [1, 1, 1, 1], "strides": [2, 2]}, {"group": 4, "dilations": [2, 2]}):
        ww = w[:, : 16 // attrs.get("group", 1)]
        assert_close(run_single_op("Conv", [x, ww, b], attrs)[0], ort_run("Conv", [x, ww, b], attrs)[0])


# -- errors name the node ---------------------------------------------------------------------------
def _conv_inputs():
    return [np.zeros((1, 3, 5, 5), np.float32), np.zeros((2, 3, 3, 3), np.float32)]


@pytest.mark.parametrize("op, inputs, attrs, error, pattern", [
    ("Conv", _conv_inputs(), {"padding": [1, 1]}, OpAttributeError, "Conv_0.*unknown attribute.*padding"),
    ("Conv", _conv_inputs(), {"group": "two"}, OpAttributeError, "Conv_0.*'group' expects int"),
    ("Conv", _conv_inputs(), {"strides": 2}, OpAttributeError, "Conv_0.*'strides' expects ints"),
    ("Conv", _conv_inputs(), {"group": 2}, ShapeError, "Conv_0.*group 2"),
    ("Conv", _conv_inputs(), {"pads": [1, 1]}, ShapeError, "Conv_0.*pads"),
    ("Conv", _conv_inputs(), {"auto_pad": "SAME"}, ShapeError, "Conv_0.*auto_pad"),
    ("Conv", [np.zeros((1, 3, 2, 2), np.float32), np.zeros((2, 3, 3, 3), np.float32)], {}, ShapeError,
     "Conv_0.*smaller than"),
    ("ConvTranspose", _conv_inputs(), {}, ShapeError, "ConvTranspose_0.*channels"),
    ("MaxPool", [np.zeros((1, 1, 4, 4), np.float32)], {}, OpAttributeError, "MaxPool_0.*kernel_shape"),
    ("AveragePool", [np.zeros((1, 1, 4, 4), np.float32)], {"kernel_shape": [2, 2], "strides": [0, 1]}, ShapeError,
     "AveragePool_0.*strides"),
    ("Gemm", [np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32)], {}, ShapeError, "Gemm_0.*inner"),
    ("MatMul", [np.zeros((2, 3), np.float32), np.zeros((4, 5), np.float32)], {}, ShapeError, "MatMul_0.*inner"),
    ("Softmax", [np.zeros((2, 3), np.float32)], {"axis": 2}, ShapeError, "Softmax_0.*axis 2"),
    ("Resize", [np.zeros((1, 1, 2, 2), np.float32), None, np.ones(4, np.float32)], {"mode": "bicubic"}, ShapeError,
     "Resize_0.*bicubic"),
    ("Resize", [np.zeros((1, 1, 2, 2), np.float32), None, np.ones(4, np.float32)],
     {"coordinate_transformation_mode": "tf_half_pixel_for_nn"}, ShapeError, "Resize_0.*tf_half_pixel_for_nn"),
    ("Pad", [np.zeros((2, 2), np.float32), np.array([1, 1], np.int64)], {"mode": "mirror"}, ShapeError,
     "Pad_0.*mirror"),
    ("PRelu", [np.zeros((2, 3), np.float32), np.zeros(2, np.float32)], {}, ShapeError, "PRelu_0.*broadcast"),
    ("BatchNormalization", [np.zeros((1, 2, 2), np.float32)] + [np.ones(2, np.float32)] * 4, {"training_mode": 1},
     ShapeError, "BatchNormalization_0.*inference"),
    ("DepthToSpace", [np.zeros((1, 3, 2, 2), np.float32)], {"blocksize": 2}, ShapeError, "DepthToSpace_0.*multiple"),
    ("LRN", [np.zeros((1, 3, 2, 2), np.float32)], {"size": 2.5}, OpAttributeError, "LRN_0.*'size' expects int"),
])
def test_bad_nodes_raise_typed_errors_naming_the_node(op, inputs, attrs, error, pattern):
    with pytest.raises(error, match=pattern):
        run_single_op(op, inputs, attrs)


def test_runtime_parameter_errors_name_the_node():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(KernelExecutionError, match="Pad_0.*pads"):
        run_single_op("Pad", [x, np.array([1, 1, 1], np.int64)], {})
    with pytest.raises(KernelExecutionError, match="Pad_0.*crop"):
        run_single_op("Pad", [x, np.array([0, -2, 0, -2], np.int64)], {})
    with pytest.raises(KernelExecutionError, match="Resize_0.*scales"):
        run_single_op("Resize", [x, None, np.array([1, 2, 3], np.float32)], {})
    with pytest.raises(ShapeError, match="Pad_0.*crop"):
        run_single_op("Pad", [x, np.array([0, -2, 0, -2], np.int64)], {}, constants=(1,))


def test_inputs_are_never_written():
    for op in NN_OPS:
        for inputs, attrs, _ in sample_cases(op, "float32", seed=1):
            before = [None if x is None else x.copy() for x in inputs]
            run_single_op(op, inputs, attrs, constants=(1,))  # a weight/parameter as a read-only constant
            for a, b in zip(inputs, before):
                assert a is None and b is None or np.array_equal(a, b), op


def test_kernels_are_registered_as_reference():
    for op in NN_OPS:
        keys = [k for k in kernelkit.kernels(op=op, vendor="reference")]
        assert keys and all(k.device == "cpu" for k in keys), op
    with pytest.raises(UnsupportedOpError):
        run_single_op("MaxPool", [np.zeros((1, 1, 4, 4), np.int32)], {"kernel_shape": [2, 2]}, fallback=False)
