"""GraphBuilder: write models in Python.

    g = GraphBuilder("net")
    x = g.input("x", (1, 3, 224, 224), "float32")
    y = g.op("Conv", x, w, b, strides=(2, 2), pads=(1, 1, 1, 1))
    g.output(g.op("Relu", y))
    model = g.build()
"""
from __future__ import annotations

import numpy as np

from .errors import ModelFormatError
from .ir import Graph, Model, Node, TensorSpec, Value
from .registry import get_schema
from .shape import infer_node


class GraphBuilder:
    """Builds a Graph node by node, inferring shapes as it goes so mistakes surface at the op."""

    def __init__(self, name: str = "graph", opset: int = 17):
        self._graph = Graph(name=name)
        self._opsets = {"": opset}
        self._counter: dict[str, int] = {}

    def _name(self, base: str) -> str:
        n = self._counter.get(base, 0)
        self._counter[base] = n + 1
        name = f"{base}_{n}"
        return name if name not in self._graph.values else self._graph.fresh_name(name)

    def input(self, name: str, shape, dtype="float32", layout: str | None = None) -> Value:
        if name in self._graph.values:
            raise ModelFormatError(f"value name {name!r} is used twice")
        value = Value(name, TensorSpec(shape, dtype, layout))  # TensorSpec checks the dims
        self._graph.values[name] = value
        self._graph.inputs.append(name)
        return value

    def constant(self, array, name: str | None = None) -> Value:
        try:
            data = np.array(array, copy=True)  # own the data: the caller may change theirs later
        except (TypeError, ValueError) as exc:  # ragged lists, objects without a usable __array__
            raise ModelFormatError(f"constant {name or '(unnamed)'!r} cannot be read as an array: {exc}") from exc
        data.flags.writeable = False
        name = name or self._name("const")
        if name in self._graph.values:
            raise ModelFormatError(f"value name {name!r} is used twice")
        value = Value(name, TensorSpec.of(data), data)
        self._graph.values[name] = value
        return value

    def _as_value(self, x) -> str:
        if x is None:
            return ""
        if isinstance(x, Value):
            return x.name
        if isinstance(x, str):
            self._graph.value(x)
            return x
        return self.constant(x).name

    def op(self, op: str, *inputs, domain: str = "", name: str | None = None, outputs: int | None = None,
           **attrs):
        """Add a node; returns its output Value, or a tuple of Values when it has several.

        Inputs may be Values, value names, arrays (made constants) or None (absent optional)."""
        schema = get_schema(op, domain)
        names = [self._as_value(x) for x in inputs]
        while names and names[-1] == "":
            names.pop()
        n_out = outputs if outputs is not None else sum(1 for p in schema.outputs if not p.optional) or 1
        node_name = name or self._name(op)
        out_names = [self._name(f"{node_name}_out") if n_out > 1 else node_name for _ in range(n_out)]
        out_names = [o if o not in self._graph.values else self._graph.fresh_name(o) for o in out_names]
        node = Node(op, names, out_names, {k: v for k, v in attrs.items() if v is not None}, node_name, domain)
        specs = [self._graph.value(i).spec if i else None for i in names]
        consts = [self._graph.value(i).data if i else None for i in names]
        result = infer_node(node, specs, consts)
        self._graph.nodes.append(node)
        values = []
        for o, spec in zip(out_names, result):
            v = Value(o, spec)
            self._graph.values[o] = v
            values.append(v)
        return values[0] if n_out == 1 else tuple(values)

    def output(self, *values) -> None:
        for v in values:
            name = v.name if isinstance(v, Value) else v
            self._graph.value(name)
            self._graph.outputs.append(name)

    def build(self) -> Model:
        if not self._graph.outputs:
            raise ModelFormatError(f"graph {self._graph.name!r} has no outputs; call GraphBuilder.output()")
        graph = self._graph.copy()
        return Model(graph, dict(self._opsets))
