"""convert(): inputs it accepts, symbolic dims, custom domains, the typed errors, save/load."""
from __future__ import annotations

import kernelkit
import numpy as np
import onnx
import pytest
from _onnx_util import node_model, run_kernelkit, run_ort
from kernelkit.errors import ModelFormatError, OpAttributeError, UnsupportedOpError
from kernelkit.ir import TensorSpec
from kernelkit.testing import assert_close
from kernelkit_converters.onnx import convert
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(3)


def _conv_model(batch="N", opset=17) -> onnx.ModelProto:
    """Conv -> Relu -> GlobalAveragePool -> Flatten with a batch dim given as ``batch``."""
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])
    model = helper.make_model(helper.make_graph(nodes, "conv", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("form", ["path", "str", "bytes", "proto"])
def test_accepts_path_bytes_and_proto(tmp_path, form):
    proto = _conv_model(batch=2)
    path = tmp_path / "m.onnx"
    onnx.save(proto, str(path))
    source = {"path": path, "str": str(path), "bytes": path.read_bytes(), "proto": proto}[form]
    model = convert(source)
    assert [n.op for n in model.graph.nodes] == ["Conv", "Relu", "GlobalAveragePool", "Flatten"]
    assert model.graph.values["y"].spec == TensorSpec((2, 4), "float32")


def test_symbolic_batch_stays_symbolic_and_resolves_per_run():
    model = _conv_model()
    converted = convert(model)
    assert converted.graph.values["x"].spec.shape == ("N", 3, 8, 8)
    assert converted.graph.values["y"].spec.shape == ("N", 4)
    session = kernelkit.Session(converted)
    for n in (1, 3):
        x = rng.standard_normal((n, 3, 8, 8)).astype(np.float32)
        (got,) = session.run(None, {"x": x})
        assert_close(got, run_ort(model, {"x": x})[0])


def test_unnamed_dynamic_dim_gets_a_symbol():
    model = _conv_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].Clear()
    spec = convert(model).graph.values["x"].spec
    assert isinstance(spec.shape[0], str) and spec.shape[1:] == (3, 8, 8)


def test_session_reads_an_onnx_path_and_saves_to_kkm(tmp_path):
    model = _conv_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    (direct,) = kernelkit.Session(str(path)).run(None, {"x": x})
    kernelkit.save(convert(path), tmp_path / "m.kkm")
    (loaded,) = kernelkit.Session(kernelkit.load(tmp_path / "m.kkm")).run(None, {"x": x})
    np.testing.assert_array_equal(direct, loaded)
    assert_close(direct, run_ort(model, {"x": x})[0])


@pytest.mark.parametrize("op,attrs", [("Unsqueeze", {"axes": [0]}), ("Clip", {"min": -0.5, "max": 0.5}),
                                      ("Softmax", {"axis": 1})])
def test_opset_below_11_is_upgraded(op, attrs):
    """Opset 9 models go through onnx's version converter (attributes to inputs, etc.)."""
    x = rng.standard_normal((3, 4, 2)).astype(np.float32)
    model = node_model(op, {"x": x}, ["y"], opset=9, **attrs)
    (y,) = run_kernelkit(model, {"x": x})
    assert_close(y, run_ort(model, {"x": x})[0])


def test_metadata_and_opsets():
    model = _conv_model()
    model.producer_name, model.producer_version = "pytorch", "2.13"
    converted = convert(model)
    assert converted.opsets[""] == 21
    assert converted.metadata["onnx_opset"] == "17" and converted.metadata["onnx_producer"] == "pytorch 2.13"


# -- custom domains -----------------------------------------------------------------------------
def _scale_rule(ctx):
    return ctx.inputs[0]


kernelkit.register_op("ScaleShift", domain="com.kernelkit.test", inputs=["X"], outputs=["Y"],
                      attrs={"scale": ("float", 1.0), "shift": ("float", 0.0)}, infer=_scale_rule, override=True)


@kernelkit.register_kernel("ScaleShift", domain="com.kernelkit.test", device="cpu", vendor="reference",
                           dtype="float32", priority=-100, override=True)
def _scale_shift(x, *, scale=1.0, shift=0.0):
    return (x * np.float32(scale) + np.float32(shift)).astype(np.float32)


def test_custom_domain_node_maps_to_the_registered_op():
    x = rng.standard_normal((2, 5)).astype(np.float32)
    model = node_model("ScaleShift", {"x": x}, ["y"], opset=17, domain="com.kernelkit.test",
                       extra_opsets=[("com.kernelkit.test", 1)], scale=2.0, shift=-1.0)
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.FLOAT
    model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = 2
    model.graph.output[0].type.tensor_type.shape.dim.add().dim_value = 5
    converted = convert(model)
    assert converted.graph.nodes[0].op_id == "com.kernelkit.test::ScaleShift"
    (y,) = kernelkit.Session(converted).run(None, {"x": x})
    np.testing.assert_allclose(y, x * 2 - 1, rtol=1e-6)


def test_custom_domain_wrong_attribute_is_an_attribute_error():
    x = rng.standard_normal((2, 5)).astype(np.float32)
    model = node_model("ScaleShift", {"x": x}, ["y"], opset=17, domain="com.kernelkit.test",
                       extra_opsets=[("com.kernelkit.test", 1)], scale="big")
    with pytest.raises(OpAttributeError, match="ScaleShift.*scale"):
        convert(model, check=False)


# -- errors ---------------------------------------------------------------------------------------
def test_unknown_op_lists_node_op_domain_opset_and_how_to_register():
    x = rng.standard_normal((3, 3)).astype(np.float32)
    model = node_model("Det", {"x": x}, ["y"], opset=17)
    model.graph.node[0].name = "my_det"
    with pytest.raises(UnsupportedOpError) as info:
        convert(model)
    message = str(info.value)
    for part in ("my_det", "'Det'", "ai.onnx", "opset 17", "register_op"):
        assert part in message


def test_unknown_custom_domain_op():
    x = rng.standard_normal((3,)).astype(np.float32)
    model = node_model("Mystery", {"x": x}, ["y"], opset=17, domain="org.nowhere", extra_opsets=[("org.nowhere", 3)])
    with pytest.raises(UnsupportedOpError, match="'Mystery'.*'org.nowhere'.*opset 3.*register_op"):
        convert(model, check=False)


def test_non_default_value_of_an_unsupported_attribute_is_refused():
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    inits = {"roi": np.zeros(0, np.float32), "scales": np.array([1, 1, 2, 2], np.float32)}
    model = node_model("Resize", {"x": x}, ["y"], opset=11, initializers=inits,
                       coordinate_transformation_mode="tf_half_pixel_for_nn")
    with pytest.raises(UnsupportedOpError, match="tf_half_pixel_for_nn"):
        convert(model)


def test_control_flow_subgraph_is_refused():
    then = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=then, name="branch")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(UnsupportedOpError, match="branch.*subgraph"):
        convert(model, check=False)


def test_sequence_input_is_a_format_error():
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("SequenceLength", ["s"], ["y"])], "g", [seq],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelFormatError, match="'s'.*not a tensor"):
        convert(model)


def test_garbage_bytes_and_missing_file(tmp_path):
    with pytest.raises(ModelFormatError, match="<bytes>"):
        convert(b"\x08\x07not a model at all\xff\xff")
    with pytest.raises(ModelFormatError, match="nothere.onnx"):
        convert(tmp_path / "nothere.onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\xff" * 64)
    with pytest.raises(ModelFormatError, match="bad.onnx"):
        convert(bad)
    with pytest.raises(ModelFormatError, match="takes a path"):
        convert(12345)


def test_checker_failure_is_a_format_error():
    model = _conv_model()
    model.graph.node[1].input[0] = "does_not_exist"
    with pytest.raises(ModelFormatError, match="onnx.checker"):
        convert(model)
    with pytest.raises(ModelFormatError, match="does_not_exist"):
        convert(model, check=False)


def test_missing_default_domain_import():
    model = _conv_model()
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("com.other", 1))
    with pytest.raises(ModelFormatError, match="default ONNX domain"):
        convert(model, check=False)


def test_shape_error_names_the_node():
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"], name="bad_mm")], "g", [a, b], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(kernelkit.ShapeError, match="bad_mm"):
        convert(model, check=False)


def test_convert_can_run_the_pass_pipeline():
    model = _conv_model()
    plain, optimized = convert(model), convert(model, passes=None)
    assert len(optimized.graph.nodes) < len(plain.graph.nodes)  # Relu fused into the Conv
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    a = kernelkit.Session(plain, passes=False).run(None, {"x": x})[0]
    b = kernelkit.Session(optimized, passes=False).run(None, {"x": x})[0]
    assert_close(b, a)


def test_onnx_loader_is_an_entry_point(tmp_path):
    """kernelkit finds this package's reader through the kernelkit.loaders group, by suffix."""
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="kernelkit.loaders") if e.name == ".onnx"]
    assert ep.load() is convert
    path = tmp_path / "relu.onnx"
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), str(path))
    model = kernelkit.load_model(path)
    x = np.array([[-1.0, 2.0, -3.0]], np.float32)
    (y,) = kernelkit.Session(model, vendors=["reference"]).run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_every_handler_module_is_found():
    """Handler modules are found, not listed: each public handlers/<name>.py fills the table."""
    import sys
    from pathlib import Path

    from kernelkit_converters.onnx import handlers

    public = sorted(p.stem for p in Path(handlers.__file__).parent.glob("*.py") if not p.stem.startswith("_"))
    assert {"legacy", "standard"} <= set(public)
    assert all(f"{handlers.__name__}.{name}" in sys.modules for name in public)
    assert handlers.lookup("", "Relu", 14) is not None and handlers.lookup("", "Squeeze", 11) is not None  # legacy.py
