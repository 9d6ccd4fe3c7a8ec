"""Issue 14's converter behaviour: every unsupported op named in one error, constant folding of
new ops at conversion, and oracles for node tests whose expected data is too coarse."""
from __future__ import annotations

import warnings

import kernelkit
import numpy as np
import pytest
from _onnx_util import node_model, run_kernelkit, run_ort
from kernelkit.errors import UnsupportedOpError
from kernelkit.testing import assert_close
from kernelkit_converters.onnx import convert
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(14)


def test_every_unsupported_op_is_listed_in_one_error():
    nodes = [helper.make_node("RandomNormalLike", ["x"], ["a"], name="noise_a"),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("RandomNormalLike", ["b"], ["c"], name="noise_b"),
             helper.make_node("Mystery", ["c"], ["d"], domain="org.nowhere", name="mystery_1"),
             helper.make_node("Mod", ["d", "d"], ["y"], fmod=1)]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.nowhere", 1)])
    with pytest.raises(UnsupportedOpError) as info:
        convert(model, check=False)
    message = str(info.value)
    assert "2 op types are not supported" in message
    assert "RandomNormalLike: 2 nodes, first 'noise_a'" in message
    assert "org.nowhere::Mystery: 1 node, first 'mystery_1'" in message
    assert "register_op" in message and "stub_ops" in message
    assert "- Mod" not in message and "Relu" not in message


def test_op_with_constant_inputs_folds_at_conversion():
    """As in ViT's TorchScript export, where Mod reads only constants."""
    a = numpy_helper.from_array(np.array([7, -7, 9], np.int64), "a")
    b = numpy_helper.from_array(np.array([3, 3, -4], np.int64), "b")
    nodes = [helper.make_node("Mod", ["a", "b"], ["m"]), helper.make_node("Add", ["x", "m"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.INT64, [3])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [3])
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [a, b]),
                              opset_imports=[helper.make_opsetid("", 17)])
    converted = convert(model)
    assert [n.op for n in converted.graph.nodes] == ["Add"]
    assert converted.graph.values["m"].data.tolist() == [1, 2, -3]  # Python's sign rule, fmod=0


def test_roialign_matches_onnxruntime():
    """ONNX's roialign_aligned_* node tests store outputs rounded to 4 digits (excluded there);
    onnxruntime (RoiAlign 16) is the oracle here."""
    x = rng.standard_normal((1, 2, 10, 10)).astype(np.float32)
    rois = np.array([[0, 0, 9, 9], [0, 5, 4, 9], [5.5, 5, 9, 9.5], [-1, 2, 3.3, 11]], np.float32)
    for mode in ("half_pixel", "output_half_pixel"):
        model = node_model("RoiAlign", {"x": x, "rois": rois, "idx": np.zeros(4, np.int64)}, ["y"], opset=16,
                           coordinate_transformation_mode=mode, output_height=5, output_width=4,
                           sampling_ratio=2, spatial_scale=1.0)
        feeds = {"x": x, "rois": rois, "idx": np.zeros(4, np.int64)}
        (want,), (got,) = run_ort(model, feeds), run_kernelkit(model, feeds, vendors=["reference"])
        assert_close(got, want)


@pytest.mark.parametrize("op,opset,attrs,dtype", [
    ("GRU", 14, {"hidden_size": 5, "direction": "bidirectional", "linear_before_reset": 1}, np.float32),
    ("LSTM", 14, {"hidden_size": 5, "direction": "reverse"}, np.float32),
    ("RNN", 14, {"hidden_size": 5, "activations": ["Relu"]}, np.float32),
])
def test_recurrent_layers_with_sequence_lens_match_onnxruntime(op, opset, attrs, dtype):
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    n_dir = 2 if attrs.get("direction") == "bidirectional" else 1
    seq, batch, inp, hidden = 6, 3, 4, attrs["hidden_size"]
    feeds = {"x": rng.standard_normal((seq, batch, inp)).astype(dtype)}
    inits = {"w": rng.uniform(-0.5, 0.5, (n_dir, gates * hidden, inp)).astype(dtype),
             "r": rng.uniform(-0.5, 0.5, (n_dir, gates * hidden, hidden)).astype(dtype),
             "b": rng.uniform(-0.5, 0.5, (n_dir, 2 * gates * hidden)).astype(dtype),
             "lens": np.array([6, 2, 4], np.int32)}
    outputs = ["y", "y_h"] + (["y_c"] if op == "LSTM" else [])
    model = node_model(op, feeds, outputs, opset=opset, initializers=inits, **attrs)
    want, got = run_ort(model, feeds), run_kernelkit(model, feeds, vendors=["reference"])
    for g, w in zip(got, want):
        assert_close(g, w)


def test_nonmaxsuppression_matches_onnxruntime():
    xy = rng.uniform(0, 20, (2, 30, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(2, 8, (2, 30, 2))], axis=2).astype(np.float32)
    scores = rng.uniform(0, 1, (2, 3, 30)).astype(np.float32)
    feeds = {"boxes": boxes, "scores": scores}
    inits = {"k": np.array([5], np.int64), "iou": np.array([0.3], np.float32), "st": np.array([0.2], np.float32)}
    model = node_model("NonMaxSuppression", feeds, ["sel"], opset=11, initializers=inits)
    (want,), (got,) = run_ort(model, feeds), run_kernelkit(model, feeds, vendors=["reference"])
    np.testing.assert_array_equal(got, want)


def test_group_normalization_18_takes_per_group_scale():
    x = rng.standard_normal((2, 6, 3, 3)).astype(np.float32)
    inits = {"s": rng.standard_normal(3).astype(np.float32), "b": rng.standard_normal(3).astype(np.float32)}
    model = node_model("GroupNormalization", {"x": x}, ["y"], opset=18, initializers=inits, num_groups=3)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, 3, 3]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.reference import ReferenceEvaluator
        (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    session = kernelkit.Session(convert(model, check=False), vendors=["reference"])  # 18 is deprecated: no checker
    (got,) = session.run(None, {"x": x})
    assert_close(got, want)
