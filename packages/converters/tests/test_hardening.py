"""Regression tests for issue 13, converter side: each test names the item it guards and failed on
870925c."""
from __future__ import annotations

import os
import threading

import onnx
import pytest
from kernelkit.errors import ModelFormatError, OpAttributeError
from kernelkit_converters.onnx import convert
from onnx import TensorProto, helper


def _model(node, opset: int = 17, shape=(2, 3), initializers=()) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))
    graph = helper.make_graph([node], "g", [x], [y], list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _external_model(folder, location: str, dims) -> str:
    tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=list(dims))
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value=location)
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(dims))
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [], [out], [tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path)


def _within(seconds: float, fn):
    """Run ``fn`` in a daemon thread; fail (instead of hanging the suite) if it has not returned."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s (hang)"
    if "error" in box:
        raise box["error"]
    return box.get("value")


# -- item 3: an external-data location that is a FIFO --------------------------------------------------
def test_external_data_fifo_is_refused_without_hanging(tmp_path):
    """Item 3: a FIFO named by external data inside the model folder is a ModelFormatError at once
    (870925c blocked forever in os.open waiting for a writer)."""
    os.mkfifo(tmp_path / "w.bin")
    path = _external_model(tmp_path, "w.bin", [3, 4])
    with pytest.raises(ModelFormatError, match="not a regular file"):
        _within(10, lambda: convert(path))
    try:  # release the thread if it did block (ENXIO: no reader waits, as it should be)
        os.close(os.open(tmp_path / "w.bin", os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


# -- item 8: untyped exceptions from the converter -----------------------------------------------------
def test_non_utf8_attribute_name_is_typed():
    """Item 8: a non-UTF-8 attribute name gave UnicodeDecodeError from onnx.checker."""
    node = helper.make_node("Relu", ["x"], ["y"])
    attr = node.attribute.add()
    attr.name, attr.type, attr.i = "ok", onnx.AttributeProto.INT, 1
    raw = _model(node).SerializeToString().replace(b"\x0a\x02ok", b"\x0a\x02\xff\xfe")
    for check in (True, False):
        with pytest.raises(ModelFormatError, match="not UTF-8"):
            convert(raw, check=check)


def test_softmax11_list_axis_without_checker_is_typed():
    """Item 8: Softmax-11 with an INTS ``axis`` and check=False raised TypeError in handlers/legacy.py."""
    with pytest.raises(OpAttributeError, match="axis.*INTS.*expects INT"):
        convert(_model(helper.make_node("Softmax", ["x"], ["y"], axis=[1, 2]), opset=11), check=False)


@pytest.mark.parametrize("dims", [[2**32, 2**32], [2**62, 4], [2**63 - 1, 2**63 - 1, 2]])
def test_external_data_with_huge_dims_is_typed(tmp_path, dims):
    """Item 8: dims whose int64 product wraps (to 0 for [2^32, 2^32]) gave ValueError; the count is
    now taken with Python ints and bounded."""
    (tmp_path / "w.bin").write_bytes(b"")
    path = _external_model(tmp_path, "w.bin", dims)
    with pytest.raises(ModelFormatError, match="elements"):
        convert(path)


def test_handler_failure_on_malformed_node_is_typed(monkeypatch):
    """Item 8: a handler that crashes on a malformed node (check=False) gives a ModelFormatError naming
    the node, never a bare TypeError."""
    from kernelkit_converters.onnx import handlers

    def trusting(node, ctx):  # reads an attribute as the schema says it is, without checking
        return int(node.attrs["alpha"][0])

    monkeypatch.setitem(handlers.HANDLERS, ("", "Elu", 6), trusting)
    with pytest.raises(ModelFormatError, match="node 'Elu_0'.*TypeError"):
        convert(_model(helper.make_node("Elu", ["x"], ["y"], alpha=1.5)), check=False)


@pytest.mark.parametrize("version", [2**40, 0, -3])
def test_opset_version_out_of_range_is_typed(version):
    """Found by the fuzz run: an opset_import version beyond a C int made onnx.defs raise TypeError."""
    model = _model(helper.make_node("Relu", ["x"], ["y"]))
    model.opset_import[0].version = version
    with pytest.raises(ModelFormatError, match="out of range"):
        convert(model.SerializeToString(), check=False)
