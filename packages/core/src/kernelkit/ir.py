"""The graph IR: Model, Graph, Node, Value and TensorSpec.

Values are named (as in ONNX); a node refers to its inputs and outputs by name, and an absent
optional input is the empty string. Constants (initializers) are Values that carry ``data``.
Shapes hold ints or strings; a string is a symbolic dimension resolved per run.
"""
from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .dtypes import dtype_name
from .errors import ModelFormatError, ShapeError, brief

Dim = int | str


def _dim(d, shape) -> Dim:
    """A dim as stored: a symbol name, or a non-negative int (integral floats such as 2.0 pass)."""
    if isinstance(d, str) and d:
        return d
    if isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0:
        return int(d)
    if isinstance(d, (float, np.floating)) and d >= 0 and float(d).is_integer():
        return int(d)
    raise ShapeError(f"shape {brief(shape)}: dim {d!r} is neither a non-negative int nor a symbol name")


@dataclass(frozen=True)
class TensorSpec:
    """The static description of a tensor: shape (ints or symbol names), dtype name, layout."""

    shape: tuple[Dim, ...]
    dtype: str
    layout: str | None = None

    def __post_init__(self):
        try:
            dims = tuple(self.shape)
        except TypeError:
            raise ShapeError(f"shape {brief(self.shape)} is not a sequence of dims") from None
        object.__setattr__(self, "shape", tuple(_dim(d, dims) for d in dims))
        object.__setattr__(self, "dtype", dtype_name(self.dtype))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def size(self) -> int | None:
        """Number of elements, or None when a dimension is symbolic."""
        return int(np.prod(self.shape, dtype=np.int64)) if self.is_static else None

    @classmethod
    def of(cls, array) -> "TensorSpec":
        array = np.asarray(array)
        return cls(array.shape, array.dtype.name)

    def __str__(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        return f"{self.dtype}[{dims}]" + (f"@{self.layout}" if self.layout else "")


@dataclass
class Value:
    """A named tensor in a graph: a graph input, a node output or a constant (``data`` set)."""

    name: str
    spec: TensorSpec | None = None
    data: np.ndarray | None = None

    @property
    def is_constant(self) -> bool:
        return self.data is not None

    def __repr__(self) -> str:
        kind = "const " if self.is_constant else ""
        return f"Value({self.name!r}, {kind}{self.spec})"


@dataclass
class Node:
    """One op application. ``inputs``/``outputs`` are value names; '' marks an absent optional input."""

    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    domain: str = ""

    @property
    def op_id(self) -> str:
        """The op's qualified name: ``domain::op`` for custom domains, ``op`` for the default one."""
        return f"{self.domain}::{self.op}" if self.domain else self.op

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.op_id}, {self.inputs} -> {self.outputs})"


class Graph:
    """Nodes in topological order plus the values they connect."""

    def __init__(self, nodes=(), inputs=(), outputs=(), values=None, name: str = "graph"):
        self.name = name
        self.nodes: list[Node] = list(nodes)
        self.inputs: list[str] = list(inputs)
        self.outputs: list[str] = list(outputs)
        self.values: dict[str, Value] = dict(values or {})

    # -- lookups -------------------------------------------------------------------------------
    def value(self, name: str) -> Value:
        try:
            return self.values[name]
        except KeyError:
            raise ModelFormatError(f"graph {self.name!r} has no value named {name!r}") from None

    def spec(self, name: str) -> TensorSpec | None:
        return self.values[name].spec if name in self.values else None

    @property
    def constants(self) -> dict[str, np.ndarray]:
        return {n: v.data for n, v in self.values.items() if v.data is not None}

    def producers(self) -> dict[str, Node]:
        """Map each node output name to the node producing it."""
        return {out: node for node in self.nodes for out in node.outputs if out}

    def consumers(self) -> dict[str, list[Node]]:
        """Map each value name to the nodes reading it (graph outputs are not counted)."""
        users: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in node.inputs:
                if name:
                    users.setdefault(name, []).append(node)
        return users

    def fresh_name(self, base: str) -> str:
        """A value or node name not used yet in this graph."""
        taken = set(self.values) | {n.name for n in self.nodes}
        if base not in taken:
            return base
        i = 1
        while f"{base}_{i}" in taken:
            i += 1
        return f"{base}_{i}"

    # -- ordering ------------------------------------------------------------------------------
    def levels(self) -> list[list[Node]]:
        """Topological order as level sets: each level holds the nodes whose inputs are all ready
        once the previous levels ran, the unit of parallel or asynchronous scheduling.

        Kahn's algorithm, O(nodes + edges): each node waits on a count of unready inputs; within a
        level nodes keep their order in ``nodes``."""
        ready = set(self.inputs) | {n for n, v in self.values.items() if v.data is not None} | {""}
        self._check_single_sources(ready)
        waiting: dict[str, list[int]] = {}  # value name -> indices of nodes that wait on it
        pending = [0] * len(self.nodes)
        level: list[int] = []
        for i, node in enumerate(self.nodes):
            missing = {name for name in node.inputs if name not in ready}
            for name in missing:
                waiting.setdefault(name, []).append(i)
            pending[i] = len(missing)
            if not missing:
                level.append(i)
        out: list[list[Node]] = []
        done = 0
        while level:
            out.append([self.nodes[i] for i in level])
            done += len(level)
            nxt = []
            for i in level:
                for name in self.nodes[i].outputs:
                    if name:
                        ready.add(name)
                    for j in waiting.pop(name, ()) if name else ():
                        pending[j] -= 1
                        if not pending[j]:
                            nxt.append(j)
            level = sorted(nxt)
        if done < len(self.nodes):
            stuck = [n for n, p in zip(self.nodes, pending) if p]
            missing = sorted({i for n in stuck for i in n.inputs if i not in ready})
            node = next(n for n in stuck if any(i not in ready for i in n.inputs))
            raise ModelFormatError(
                f"graph {self.name!r} has a cycle or dangling inputs at node {node.name!r}: "
                f"values {missing[:8]} are never produced"
            )
        missing = [name for name in self.outputs if name not in ready]
        if missing:
            raise ModelFormatError(f"graph {self.name!r}: outputs {missing} are never produced")
        return out

    def _check_single_sources(self, sources: set[str]) -> None:
        """Each value comes from one place (a graph input, a constant or one node output)."""
        if len(set(self.inputs)) != len(self.inputs):
            raise ModelFormatError(f"graph {self.name!r} lists an input twice: {self.inputs}")
        produced = set(sources)
        for node in self.nodes:
            for name in node.outputs:
                if name and name in produced:
                    raise ModelFormatError(f"graph {self.name!r}: node {node.name!r} writes {name!r}, which is "
                                           f"already a graph input, a constant or another node's output")
                produced.add(name)

    def toposort(self) -> None:
        """Reorder ``nodes`` topologically (stable by level)."""
        self.nodes = [n for level in self.levels() for n in level]

    def iter_constant_bytes(self) -> Iterator[tuple[str, np.ndarray]]:
        for name, value in self.values.items():
            if value.data is not None:
                yield name, value.data

    def copy(self) -> "Graph":
        """A structural copy; constant arrays are shared (they are treated as read-only)."""
        g = Graph(name=self.name, inputs=self.inputs, outputs=self.outputs)
        g.nodes = [Node(n.op, list(n.inputs), list(n.outputs), copy.copy(n.attrs), n.name, n.domain)
                   for n in self.nodes]
        g.values = {k: Value(v.name, v.spec, v.data) for k, v in self.values.items()}
        return g

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.nodes)} nodes, inputs={self.inputs}, outputs={self.outputs})"


@dataclass
class Model:
    """A graph plus metadata (producer, opset imports, free-form metadata)."""

    graph: Graph
    opsets: dict[str, int] = field(default_factory=lambda: {"": 17})
    producer: str = "kernelkit"
    metadata: dict[str, str] = field(default_factory=dict)

    def copy(self) -> "Model":
        return Model(self.graph.copy(), dict(self.opsets), self.producer, dict(self.metadata))
