"""Fixtures shared by the toolbox tests (kernelkit bench/validate/bisect/graph)."""
from __future__ import annotations

import kernelkit as kk
import numpy as np
import pytest


@pytest.fixture
def conv_model():
    """Builds a Conv(3->4, 3x3, pad 1) + Relu + Add model on a batch-symbolic input."""
    return _conv_model


def _conv_model() -> kk.Model:
    rng = np.random.default_rng(0)
    g = kk.GraphBuilder("conv_net")
    x = g.input("x", ("N", 3, 8, 8), "float32")
    h = g.op("Conv", x, g.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"), pads=(1, 1, 1, 1),
             name="conv")
    h = g.op("Relu", h, name="relu")
    g.output(g.op("Add", h, g.constant(np.ones((4, 1, 1), np.float32), "b"), name="y"))
    return g.build()


@pytest.fixture
def conv_kkm(tmp_path):
    path = tmp_path / "conv.kkm"
    kk.save(_conv_model(), path)
    return path


@pytest.fixture
def conv_onnx(tmp_path):
    """The same Conv + Relu as an ONNX file (no Add)."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("kernelkit_converters")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "conv_onnx",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "conv.onnx"
    onnx.save(model, path)
    return path


@pytest.fixture
def run_cli(capsys):
    """``run_cli(*argv)`` -> (exit code, stdout, stderr) of ``kernelkit argv...``."""
    from kernelkit import cli

    def run(*argv):
        code = cli.main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run
