"""Shape and dtype inference: the context an op's ``infer`` rule sees, helpers shared by the
rules, and the pass that runs them over a whole graph."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .activation import resolve as resolve_activation
from .errors import KernelkitError, ShapeError
from .geometry import auto_pads, conv_out_dim  # noqa: F401  (kept importable from here)
from .ir import Dim, Graph, Node, TensorSpec
from .registry import get_schema, normalize_attrs


class InferContext:
    """What an op's ``infer`` rule sees: input specs (None for absent optional inputs), the
    complete attributes, and constant input data where known (for Reshape's shape, etc.)."""

    def __init__(self, node: Node, inputs: list[TensorSpec | None], attrs: dict,
                 constants: list[np.ndarray | None]):
        self.node = node
        self.inputs = inputs
        self.attrs = attrs
        self._constants = constants
        self._fresh = 0

    @property
    def where(self) -> str:
        return f"node {self.node.name!r} ({self.node.op_id})"

    def value(self, i: int) -> np.ndarray | None:
        """The constant data of input ``i``, or None if it is only known at run time."""
        return self._constants[i] if i < len(self._constants) else None

    def has(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def error(self, message: str) -> ShapeError:
        return ShapeError(f"{self.where}: {message}")

    def symbol(self, tag: str = "d") -> str:
        """A fresh symbolic dimension for a size only known at run time."""
        self._fresh += 1
        return f"{self.node.name or self.node.op}:{tag}{self._fresh}"

    def axis(self, axis: int, rank: int) -> int:
        """Normalize a possibly negative axis, raising a ShapeError naming the node if out of range."""
        if not -rank <= axis < rank:  # a 0-d tensor has no axis at all
            raise self.error(f"axis {axis} is out of range for rank {rank}")
        return axis % rank


def broadcast_shapes(*shapes: Sequence[Dim], where: str = "") -> tuple[Dim, ...]:
    """NumPy/ONNX multidirectional broadcasting over shapes that may hold symbolic dims."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        known = {d for d in dims if isinstance(d, int) and d != 1}
        syms = {d for d in dims if isinstance(d, str)}
        if len(known) > 1:
            raise ShapeError(f"{where}: shapes {[tuple(s) for s in shapes]} do not broadcast")
        if known:
            out.append(known.pop())
        elif len(syms) == 1:
            out.append(syms.pop())
        elif syms:
            out.append(sorted(syms)[0])  # equal at run time or the run fails with a clear error
        else:
            out.append(1)
    return tuple(out)


def infer_node(node: Node, specs: list[TensorSpec | None], constants: list[np.ndarray | None]) -> list[TensorSpec]:
    """Run the op's rule for ``node``; errors name the node."""
    schema = get_schema(node.op, node.domain)
    where = f"node {node.name!r} ({node.op_id})"
    if not any(node.outputs):
        raise ShapeError(f"{where}: node has no outputs")
    n_in = len(node.inputs)
    if n_in < schema.min_inputs or n_in > schema.max_inputs:
        raise ShapeError(f"{where}: got {n_in} inputs, op takes "
                         f"{schema.min_inputs}..{schema.max_inputs if schema.max_inputs != float('inf') else 'any'}")
    for port, spec in zip(schema.inputs, specs):
        if spec is None and not port.optional:
            raise ShapeError(f"{where}: required input {port.name!r} is missing")
    attrs = normalize_attrs(schema, node.attrs, where)
    if attrs.get("activation") and "activation_params" in schema.attrs:  # a fused activation: known name?
        resolve_activation(attrs["activation"], attrs["activation_params"], where)
    ctx = InferContext(node, specs, attrs, constants)
    try:
        result = schema.infer(ctx)
    except KernelkitError:
        raise
    except Exception as exc:  # a rule crashed: report it against the node, not as a traceback
        raise ShapeError(f"{where}: shape inference failed: {type(exc).__name__}: {exc}") from exc
    if isinstance(result, TensorSpec):
        result = [result]
    result = list(result)
    if len(result) < len(node.outputs):
        raise ShapeError(f"{where}: rule gave {len(result)} outputs, node has {len(node.outputs)}")
    return result[: len(node.outputs)]


def infer_shapes(graph: Graph, input_specs: dict[str, TensorSpec] | None = None) -> None:
    """Infer every node output's spec in place. ``input_specs`` overrides graph input specs
    (e.g. concrete shapes for one run)."""
    for name, spec in (input_specs or {}).items():
        graph.values[name].spec = spec
    for name in graph.inputs:
        if graph.value(name).spec is None:
            raise ShapeError(f"graph input {name!r} has no shape/dtype")
    for node in graph.nodes:
        specs = [graph.value(i).spec if i else None for i in node.inputs]
        consts = [graph.values[i].data if i and i in graph.values else None for i in node.inputs]
        for name, spec in zip(node.inputs, specs):
            if name and spec is None:
                raise ShapeError(f"node {node.name!r} ({node.op_id}): input {name!r} has no known spec "
                                 f"(is the graph in topological order?)")
        for name, spec in zip(node.outputs, infer_node(node, specs, consts)):
            if name:
                value = graph.values.get(name)
                if value is None:
                    from .ir import Value
                    graph.values[name] = Value(name, spec)
                else:  # a layout the layout pass chose stays (shape rules give logical specs)
                    keep = value.spec is not None and value.spec.layout and spec.layout is None
                    value.spec = TensorSpec(spec.shape, spec.dtype, value.spec.layout) if keep else spec
