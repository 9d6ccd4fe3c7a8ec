"""The converter-side passes: where they fire, where they must not, and that numbers do not change."""
from __future__ import annotations

import kernelkit
import numpy as np
import pytest
from _onnx_util import run_ort
from kernelkit.testing import assert_close
from kernelkit_converters.onnx import convert
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(11)


def _flatten_chain(batch="N", target_tail=(-1,), index=0):
    """x.view(x.size(index), *target_tail) as PyTorch exports it, then MatMul + Add."""
    k = 4 * 5 * 6
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
        helper.make_node("Concat", ["n1", "tail"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["f"]),
        helper.make_node("MatMul", ["f", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(index, np.int64), "i"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array(target_tail, np.int64), "tail"),
             numpy_helper.from_array(rng.standard_normal((k, 7)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(7).astype(np.float32), "b")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4, 5, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 7])
    model = helper.make_model(helper.make_graph(nodes, "flat", [x], [y], inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _compare(model, batch=3):
    x = rng.standard_normal((batch, 4, 5, 6)).astype(np.float32)
    converted = convert(model)
    optimized = kernelkit.Session(converted)
    plain = kernelkit.Session(converted, passes=False)
    got = optimized.run(None, {"x": x})[0]
    assert_close(got, plain.run(None, {"x": x})[0])
    assert_close(got, run_ort(model, {"x": x})[0])
    return optimized


def test_symbolic_flatten_chain_folds_and_matmul_add_becomes_gemm():
    session = _compare(_flatten_chain())
    assert session.passes_fired.get("onnx_fold_shape_reshape") == 1
    assert session.passes_fired.get("onnx_matmul_add_to_gemm") == 1
    ops = [n.op for n in session.graph.nodes]
    assert ops == ["Reshape", "Gemm"]
    reshape = session.graph.nodes[0]
    np.testing.assert_array_equal(session.graph.values[reshape.inputs[1]].data, [0, -1])


def test_static_batch_chain_folds_too():
    session = _compare(_flatten_chain(batch=2), batch=2)
    assert [n.op for n in session.graph.nodes] == ["Reshape", "Gemm"]


def test_symbol_at_another_position_becomes_minus_one():
    """x.reshape(120, x.size(0)): N cannot be copied with 0 (position 1 of x is 4), but it is the
    only unknown entry, so the element count gives it: target [120, -1]."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "i"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "zero"], ["n1"]),
             helper.make_node("Concat", ["head", "n1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    inits = [numpy_helper.from_array(np.array(v, np.int64), name)
             for v, name in ((0, "i"), ([0], "zero"), ([120], "head"))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 5, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [120, "N"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    session = kernelkit.Session(convert(model))
    assert session.passes_fired.get("onnx_fold_shape_reshape") == 1
    (reshape,) = session.graph.nodes
    np.testing.assert_array_equal(session.graph.values[reshape.inputs[1]].data, [120, -1])
    x = rng.standard_normal((3, 4, 5, 6)).astype(np.float32)
    assert_close(session.run(None, {"x": x})[0], run_ort(model, {"x": x})[0])


def test_two_unknown_dims_do_not_fold():
    """[N, -1] where N comes from an unrelated input that Reshape cannot copy: N and -1 both
    unknown, so the target stays computed at run time."""
    model = _flatten_chain()
    model.graph.input.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["M", 2]))
    model.graph.node[0].input[0] = "z"
    session = kernelkit.Session(convert(model))
    assert "onnx_fold_shape_reshape" not in session.passes_fired
    x = rng.standard_normal((3, 4, 5, 6)).astype(np.float32)
    z = np.zeros((3, 2), np.float32)
    assert_close(session.run(None, {"x": x, "z": z})[0], run_ort(model, {"x": x, "z": z})[0])


def _linear_3d(a_shape, bias_shape=(5,), then=None):
    nodes = [helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
    if then:
        nodes[-1].output[0] = "z"
        nodes.append(helper.make_node(then, ["z"], ["y"]))
    inits = [numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(bias_shape).astype(np.float32), "b")]
    graph = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info("a", TensorProto.FLOAT, a_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, a_shape[:-1] + [5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("a_shape", [[2, 3, 4], [2, 2, 3, 4]])
def test_nd_matmul_add_becomes_reshape_gemm_reshape(a_shape):
    """A linear layer over (batch, seq, K) with static leading dims: Reshape -> Gemm -> Reshape."""
    model = _linear_3d(a_shape)
    session = kernelkit.Session(convert(model))
    assert session.passes_fired.get("onnx_matmul_add_to_gemm") == 1
    assert [n.op for n in session.graph.nodes] == ["Reshape", "Gemm", "Reshape"]
    a = rng.standard_normal(a_shape).astype(np.float32)
    (got,) = session.run(None, {"a": a})
    assert got.shape == tuple(a_shape[:-1]) + (5,)
    assert_close(got, run_ort(model, {"a": a})[0])


def test_gelu_after_nd_linear_fuses_across_the_reshape():
    model = _linear_3d([2, 3, 4], then="Gelu")
    session = kernelkit.Session(convert(model))
    assert [n.op for n in session.graph.nodes] == ["Reshape", "Gemm", "Reshape"]
    assert session.graph.nodes[1].attrs["activation"] == "Gelu"
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    assert_close(session.run(None, {"a": a})[0], run_ort(model, {"a": a})[0])


@pytest.mark.parametrize("case", ["symbolic_batch", "per_row_bias"])
def test_nd_matmul_add_left_alone(case):
    """A symbolic leading dim keeps MatMul + Add (so the output keeps its symbol's name); a bias
    that is not per column is not a Gemm's C."""
    model = _linear_3d(["N", 3, 4]) if case == "symbolic_batch" else _linear_3d([2, 3, 4], bias_shape=(3, 1))
    session = kernelkit.Session(convert(model))
    assert "onnx_matmul_add_to_gemm" not in session.passes_fired
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    assert_close(session.run(None, {"a": a})[0], run_ort(model, {"a": a})[0])


@pytest.mark.parametrize("case", ["bias_not_constant", "two_readers", "bias_widens"])
def test_matmul_add_not_fused_where_not_exact(case):
    a_shape = [3, 4]
    nodes = [helper.make_node("MatMul", ["a", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])]
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, a_shape)]
    inits = [numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "w")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    bias = rng.standard_normal((2, 3, 5) if case == "bias_widens" else (5,)).astype(np.float32)
    if case == "bias_not_constant":
        inputs.append(helper.make_tensor_value_info("b", TensorProto.FLOAT, [5]))
    else:
        inits.append(numpy_helper.from_array(bias, "b"))
    if case == "two_readers":
        nodes.append(helper.make_node("Relu", ["m"], ["r"]))
        outputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "mm", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = kernelkit.Session(convert(model, check=False))
    assert "onnx_matmul_add_to_gemm" not in session.passes_fired
    feeds = {"a": rng.standard_normal(a_shape).astype(np.float32)}
    if case == "bias_not_constant":
        feeds["b"] = bias
    for got, want in zip(session.run(None, feeds), kernelkit.Session(convert(model, check=False), passes=False)
                         .run(None, feeds)):
        assert_close(got, want)
