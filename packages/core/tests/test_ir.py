"""The IR's structure: level sets, topological order, cycle detection, lookups and copies."""
from __future__ import annotations

import numpy as np
import pytest
from kernelkit import Graph, ModelFormatError, Node, TensorSpec, Value


def _graph(nodes, inputs=("x",), outputs=("y",), constants=()):
    values = {name: Value(name, TensorSpec((2,), "float32")) for name in inputs}
    for name in constants:
        data = np.zeros(2, np.float32)
        values[name] = Value(name, TensorSpec.of(data), data)
    return Graph(nodes, inputs, outputs, values, name="g")


def _names(levels):
    return [sorted(n.name for n in level) for level in levels]


def test_levels_of_a_diamond_with_a_constant():
    # x -> a, b (parallel); c reads a, b; d reads c and a constant
    nodes = [Node("Relu", ["x"], ["a"], name="A"), Node("Neg", ["x"], ["b"], name="B"),
             Node("Add", ["a", "b"], ["c"], name="C"), Node("Add", ["c", "k"], ["y"], name="D")]
    graph = _graph(nodes, constants=["k"])
    assert _names(graph.levels()) == [["A", "B"], ["C"], ["D"]]


def test_levels_treat_absent_optional_inputs_as_ready():
    nodes = [Node("Clip", ["x", "", "hi"], ["y"], name="clip")]
    assert _names(_graph(nodes, constants=["hi"]).levels()) == [["clip"]]


def test_levels_of_nodes_without_inputs_come_first():
    nodes = [Node("Add", ["x", "c"], ["y"], name="add"), Node("Constant", [], ["c"], name="const")]
    assert _names(_graph(nodes).levels()) == [["const"], ["add"]]


def test_toposort_reorders_nodes_stably():
    nodes = [Node("Neg", ["b"], ["y"], name="last"), Node("Relu", ["a"], ["b"], name="mid"),
             Node("Relu", ["x"], ["a"], name="first"), Node("Relu", ["x"], ["z"], name="side")]
    graph = _graph(nodes, outputs=("y", "z"))
    graph.toposort()
    assert [n.name for n in graph.nodes] == ["first", "side", "mid", "last"]


def test_cycle_is_detected_and_names_a_node():
    nodes = [Node("Relu", ["x", "q"], ["p"], name="P"), Node("Neg", ["p"], ["q"], name="Q")]
    with pytest.raises(ModelFormatError) as info:
        _graph(nodes).levels()
    message = str(info.value)
    assert "cycle" in message and "'P'" in message and "'q'" in message


def test_dangling_input_is_detected():
    nodes = [Node("Relu", ["x"], ["a"], name="ok"), Node("Add", ["a", "ghost"], ["y"], name="bad")]
    with pytest.raises(ModelFormatError, match="'bad'.*ghost"):
        _graph(nodes).levels()


def test_producers_consumers_and_fresh_names():
    nodes = [Node("Relu", ["x"], ["a"], name="A"), Node("Add", ["a", "a"], ["y"], name="B"),
             Node("Neg", ["a"], ["z"], name="C")]
    graph = _graph(nodes, outputs=("y", "z"))
    assert graph.producers()["a"].name == "A"
    assert [n.name for n in graph.consumers()["a"]] == ["B", "B", "C"]
    assert "y" not in graph.consumers()  # graph outputs are not readers
    assert graph.fresh_name("new") == "new"
    assert graph.fresh_name("x") == "x_1"
    assert graph.fresh_name("A") == "A_1"  # node names are taken too


def test_copy_shares_constants_but_not_structure():
    nodes = [Node("Add", ["x", "k"], ["y"], {"alpha": 1.0}, name="add")]
    graph = _graph(nodes, constants=["k"])
    dup = graph.copy()
    dup.nodes[0].inputs[0] = "other"
    dup.nodes[0].attrs["alpha"] = 2.0
    dup.values["k"].spec = None
    dup.outputs.append("z")
    assert graph.nodes[0].inputs == ["x", "k"] and graph.nodes[0].attrs == {"alpha": 1.0}
    assert graph.values["k"].spec is not None and graph.outputs == ["y"]
    assert dup.values["k"].data is graph.values["k"].data


def test_value_lookup_error_names_graph_and_value():
    with pytest.raises(ModelFormatError, match="'g'.*'nope'"):
        _graph([]).value("nope")


def test_tensor_spec_basics():
    spec = TensorSpec(("N", 3, np.int64(4)), np.float32)
    assert spec.shape == ("N", 3, 4) and isinstance(spec.shape[2], int)
    assert spec.dtype == "float32" and spec.rank == 3
    assert not spec.is_static and spec.size is None
    assert TensorSpec((2, 3), "int64").size == 6
    assert TensorSpec.of(np.zeros((4, 5), np.float16)) == TensorSpec((4, 5), "float16")
    assert str(spec) == "float32[N,3,4]"
    assert Node("Relu", [], [], domain="my.dom").op_id == "my.dom::Relu"
