"""Every handler of the ONNX table, at each opset variant, against onnxruntime."""
from __future__ import annotations

import kernelkit
import numpy as np
import onnx.defs
import pytest
from _onnx_util import node_model, run_kernelkit, run_ort
from kernelkit.testing import assert_close
from kernelkit_converters.onnx.handlers import HANDLERS, MIN_OPSET, handled_versions
from kernelkit_converters.onnx.handlers.standard import SAME_AS_OPSET21

rng = np.random.default_rng(7)
X4 = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)


def _agree(model, feeds, n_outputs=None):
    got, want = run_kernelkit(model, feeds), run_ort(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_close(g, w)
    return got


def _onnx_versions(op: str) -> set[int]:
    versions = set()
    for opset in range(MIN_OPSET, onnx.defs.onnx_opset_version() + 1):
        try:
            versions.add(onnx.defs.get_schema(op, opset, "").since_version)
        except onnx.defs.SchemaError:
            pass
    return versions


def test_table_covers_every_version_of_every_core_op():
    """Each core op ONNX defines has a handler for every schema version from opset 11 to the newest
    onnx knows; a new onnx release with a new version fails here until the version is reviewed."""
    missing = {}
    for op in kernelkit.ops():
        if "::" in op:
            continue
        versions = _onnx_versions(op)
        gap = sorted(versions - set(handled_versions(op)))
        if gap:
            missing[op] = gap
    assert not missing, f"ONNX versions without a handler: {missing}"


@pytest.mark.parametrize("op", sorted(SAME_AS_OPSET21))
def test_passthrough_versions_fit_the_core_schema(op):
    """A copied op version has no input kernelkit lacks, and each attribute kernelkit lacks has a
    default in ONNX (dropped when it holds it, rejected otherwise)."""
    schema = kernelkit.get_schema(op)
    for version in SAME_AS_OPSET21[op]:
        onnx_schema = onnx.defs.get_schema(op, version, "")
        assert len(onnx_schema.inputs) <= len(schema.inputs) or schema.inputs[-1].variadic, (op, version)
        for name, attr in onnx_schema.attributes.items():
            assert name in schema.attrs or attr.default_value.type != 0, (op, version, name)
    assert all(HANDLERS[("", op, v)] is not None for v in SAME_AS_OPSET21[op])


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("op", ["Squeeze", "Unsqueeze"])
def test_squeeze_unsqueeze_axes(op, opset):
    x = rng.standard_normal((3, 1, 4)).astype(np.float32)
    axes = [1] if op == "Squeeze" else [0, 3]
    if opset == 11:
        model = node_model(op, {"x": x}, ["y"], opset=11, axes=axes)
    else:
        model = node_model(op, {"x": x}, ["y"], opset=13, initializers={"axes": np.array(axes, np.int64)})
    (y,) = _agree(model, {"x": x})
    assert y.shape == ((3, 4) if op == "Squeeze" else (1, 3, 1, 1, 4))


def test_squeeze_11_without_axes_drops_all_ones():
    x = rng.standard_normal((1, 3, 1, 2)).astype(np.float32)
    (y,) = _agree(node_model("Squeeze", {"x": x}, ["y"], opset=11), {"x": x})
    assert y.shape == (3, 2)


@pytest.mark.parametrize("opset,split", [(11, [1, 3]), (11, None), (13, [2, 2]), (13, None), (18, None)])
def test_split_versions(opset, split):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    attrs, inits = {"axis": 0}, {}
    if split is not None and opset == 11:
        attrs["split"] = split
    elif split is not None:
        inits["split"] = np.array(split, np.int64)
    if opset == 18 and split is None:
        attrs["num_outputs"] = 2
    outs = _agree(node_model("Split", {"x": x}, ["a", "b"], opset=opset, initializers=inits, **attrs), {"x": x})
    assert [o.shape[0] for o in outs] == (split or [2, 2])


REDUCE_CASES = [(op, v) for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd")
                for v in (11, 13, 18) if not (op == "ReduceSum" and v == 18)]


@pytest.mark.parametrize("op,opset", REDUCE_CASES)
@pytest.mark.parametrize("axes,keepdims", [([1, -1], 1), ([2], 0), (None, 1)])
def test_reduce_axes_attribute_or_input(op, opset, axes, keepdims):
    as_input = opset >= 18 or (op == "ReduceSum" and opset >= 13)
    inits, attrs = {}, {"keepdims": keepdims}
    if axes is not None and as_input:
        inits["axes"] = np.array(axes, np.int64)
    elif axes is not None:
        attrs["axes"] = axes
    x = rng.uniform(0.5, 1.5, (2, 3, 4)).astype(np.float32)
    _agree(node_model(op, {"x": x}, ["y"], opset=opset, initializers=inits, **attrs), {"x": x})


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 0), (11, -1), (11, 3), (13, 1), (13, -1)])
def test_softmax_axis_semantics(op, opset, axis):
    """Before opset 13 the input is flattened to 2-D at ``axis``; from 13 the op is per axis."""
    (y,) = _agree(node_model(op, {"x": X4}, ["y"], opset=opset, axis=axis), {"x": X4})
    if op == "Softmax" and opset == 11:
        rows = y.reshape(int(np.prod(X4.shape[:axis % 4])), -1)
        np.testing.assert_allclose(rows.sum(axis=1), 1.0, rtol=1e-5)


def test_softmax_11_on_symbolic_input():
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    model = node_model("Softmax", {"x": x}, ["y"], opset=11, axis=1, input_shapes={"x": ["N", 4, 5]})
    _agree(model, {"x": x})


@pytest.mark.parametrize("opset", [10, 12, 13])
def test_dropout_is_identity_at_inference(opset):
    attrs = {"ratio": 0.3} if opset == 10 else {}
    inits = {"ratio": np.array(0.3, np.float32)} if opset >= 12 else {}
    model = node_model("Dropout", {"x": X4}, ["y"], opset=max(opset, 11), initializers=inits, **attrs) \
        if opset != 10 else node_model("Dropout", {"x": X4}, ["y"], opset=10, **attrs)
    (y,) = run_kernelkit(model, {"x": X4})
    np.testing.assert_array_equal(y, X4)


@pytest.mark.parametrize("opset", [11, 13, 18, 19])
def test_resize_empty_roi_and_scales_mean_absent(opset):
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    inits = {"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
             "sizes": np.array([1, 2, 6, 8], np.int64)}
    model = node_model("Resize", {"x": x}, ["y"], opset=opset, initializers=inits, mode="nearest")
    (y,) = _agree(model, {"x": x})
    assert y.shape == (1, 2, 6, 8)


@pytest.mark.parametrize("opset", [11, 13])
def test_resize_scales_linear(opset):
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    inits = {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 2], np.float32)}
    _agree(node_model("Resize", {"x": x}, ["y"], opset=opset, initializers=inits, mode="linear"), {"x": x})


@pytest.mark.parametrize("field,value,dtype", [
    ("value_float", 2.5, np.float32), ("value_floats", [1.0, 2.0], np.float32),
    ("value_int", 3, np.int64), ("value_ints", [4, 5], np.int64)])
def test_constant_fields_become_constants(field, value, dtype):
    from onnx import helper

    x = np.array(7, dtype)
    node_c = helper.make_node("Constant", [], ["c"], **{field: value})
    node_a = helper.make_node("Add", ["x", "c"], ["y"])
    graph = helper.make_graph([node_c, node_a], "g", [helper.make_tensor_value_info(
        "x", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), [])],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), np.shape(value))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    (y,) = _agree(model, {"x": x})
    np.testing.assert_array_equal(y, np.asarray(value, dtype) + x)


@pytest.mark.parametrize("opset", [11, 12, 13])
def test_clip_min_max_inputs(opset):
    inits = {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}
    _agree(node_model("Clip", {"x": X4}, ["y"], opset=opset, initializers=inits), {"x": X4})


@pytest.mark.parametrize("opset", [11, 13, 19])
def test_pad_without_axes_input(opset):
    inits = {"pads": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64), "value": np.array(0.5, np.float32)}
    _agree(node_model("Pad", {"x": X4}, ["y"], opset=opset, initializers=inits, mode="constant"), {"x": X4})


def test_batchnorm_9_has_no_training_mode():
    c = X4.shape[1]
    inits = {"s": rng.uniform(0.5, 1.5, c).astype(np.float32), "b": rng.standard_normal(c).astype(np.float32),
             "m": rng.standard_normal(c).astype(np.float32), "v": rng.uniform(0.5, 1.5, c).astype(np.float32)}
    _agree(node_model("BatchNormalization", {"x": X4}, ["y"], opset=11, initializers=inits, epsilon=1e-3), {"x": X4})


@pytest.mark.parametrize("opset", [11, 19])
def test_averagepool_versions(opset):
    _agree(node_model("AveragePool", {"x": X4}, ["y"], opset=opset, kernel_shape=[2, 2], ceil_mode=1,
                      count_include_pad=1, pads=[1, 1, 1, 1], strides=[2, 2]), {"x": X4})


def test_averagepool_ceil_last_window_on_pad_matches_onnxruntime():
    """The ONNX node test of this case holds 4-digit expected values (excluded there); the exact
    answer is onnxruntime's."""
    x = rng.uniform(0, 1, (1, 3, 2, 2)).astype(np.float32)
    _agree(node_model("AveragePool", {"x": x}, ["y"], opset=19, kernel_shape=[3, 3], ceil_mode=1,
                      count_include_pad=1, pads=[1, 1, 1, 1], strides=[3, 3]), {"x": x})


def test_default_valued_newer_attribute_is_dropped():
    x = rng.standard_normal((2, 3)).astype(np.float32)
    model = node_model("Cast", {"x": x}, ["y"], opset=25, to=onnx.TensorProto.DOUBLE, saturate=1)
    (y,) = _agree(model, {"x": x})
    assert y.dtype == np.float64
