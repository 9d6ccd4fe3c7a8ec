"""The handler table: ONNX (domain, op_type, since_version) -> a function building kernelkit nodes.

A handler gets the ONNX node (attributes already decoded to Python values) and the conversion
context, and returns kernelkit ``Node``s whose inputs and attributes follow opset 21, the form core
ops take. ``standard.py`` lists the op versions that already have that form; ``legacy.py`` holds the
handlers that move attributes to inputs or rewrite older semantics.

    @register_handler("MyOp", 1, domain="com.example")
    def my_op(node, ctx):
        return [ctx.make_node(node, op="MyOp", domain="com.example")]
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx.defs
import onnx.helper
from kernelkit.discovery import import_submodules
from kernelkit.errors import RegistryError, UnsupportedOpError, brief
from kernelkit.ir import Graph, Node, TensorSpec, Value
from kernelkit.registry import get_schema, normalize_attrs, op_id

log = logging.getLogger("kernelkit.converters.onnx")

DEFAULT_DOMAINS = ("", "ai.onnx")
MIN_OPSET = 11


@dataclass
class OnnxNode:
    """An ONNX node as handlers see it: attributes decoded, the opset version it was written at."""

    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]
    name: str
    opset: int               # the model's opset for this node's domain
    since_version: int       # the ONNX schema version that opset selects (opset for custom domains)

    @property
    def where(self) -> str:
        dom = f"{self.domain}::" if self.domain else ""
        return f"node {self.name!r} ({dom}{self.op_type}, opset {self.opset})"

    def input(self, i: int) -> str:
        return self.inputs[i] if i < len(self.inputs) else ""


Handler = Callable[[OnnxNode, "ConvertContext"], list[Node]]
HANDLERS: dict[tuple[str, str, int], Handler] = {}


def register_handler(op_type: str, *since_versions: int, domain: str = "", override: bool = False):
    """Decorator registering ``fn(node, ctx) -> [Node]`` for each ONNX ``since_version`` given."""
    domain = "" if domain in DEFAULT_DOMAINS else domain

    def decorate(fn: Handler) -> Handler:
        for version in since_versions:
            key = (domain, op_type, int(version))
            if key in HANDLERS and not override:
                raise RegistryError(f"an ONNX handler for {key} is already registered; pass override=True")
            HANDLERS[key] = fn
        return fn

    return decorate


def onnx_attr_default(op_type: str, since_version: int, name: str):
    """The default ONNX declares for an attribute, or a sentinel when it has none."""
    try:
        schema = onnx.defs.get_schema(op_type, since_version, "")
    except onnx.defs.SchemaError:
        return _NO_DEFAULT
    attr = schema.attributes.get(name)
    if attr is None or attr.default_value.type == 0:  # UNDEFINED: no default declared
        return _NO_DEFAULT
    return onnx.helper.get_attribute_value(attr.default_value)


_NO_DEFAULT = object()


def _same(a, b) -> bool:
    if isinstance(b, bytes):
        b = b.decode()
    if isinstance(a, bytes):
        a = a.decode()
    try:
        return bool(np.array_equal(np.asarray(a), np.asarray(b)))
    except Exception:  # noqa: BLE001 - incomparable values are different
        return False


@dataclass
class ConvertContext:
    """What handlers may use: the graph under construction and ONNX's inferred value specs."""

    graph: Graph
    onnx_specs: dict[str, TensorSpec] = field(default_factory=dict)
    source: str = "model"
    taken: set[str] = field(default_factory=set)  # every value and node name of the ONNX graph

    def fresh(self, base: str) -> str:
        """A value or node name used nowhere in the model yet (it is reserved)."""
        name, i = base, 0
        while name in self.taken or name in self.graph.values:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name

    def constant(self, array, base: str) -> str:
        """Add a read-only constant and return its name."""
        data = np.array(array, copy=True)
        data.flags.writeable = False
        name = self.fresh(base)
        self.graph.values[name] = Value(name, TensorSpec.of(data), data)
        return name

    def const_value(self, name: str) -> np.ndarray | None:
        value = self.graph.values.get(name) if name else None
        return value.data if value is not None else None

    def spec(self, name: str) -> TensorSpec | None:
        """The value's spec as ONNX shape inference (or the graph) knows it, else None."""
        value = self.graph.values.get(name)
        if value is not None and value.spec is not None:
            return value.spec
        return self.onnx_specs.get(name)

    def make_node(self, node: OnnxNode, *, op: str | None = None, inputs=None, outputs=None,
                  attrs: dict | None = None, domain: str | None = None, name: str | None = None) -> Node:
        """A kernelkit node for ``node`` (optionally changed); its attributes are checked against the
        kernelkit schema: ONNX attributes kernelkit lacks are dropped when they hold ONNX's default,
        anything else is an error naming the node."""
        op = op or node.op_type
        domain = node.domain if domain is None else domain
        attrs = dict(node.attrs if attrs is None else attrs)
        schema = get_schema(op, domain)
        for key in sorted(set(attrs) - set(schema.attrs)):
            default = onnx_attr_default(node.op_type, node.since_version, key) if not domain else _NO_DEFAULT
            if default is not _NO_DEFAULT and _same(attrs[key], default):
                log.debug("%s: dropping attribute %s=%r (ONNX default)", node.where, key, attrs[key])
                del attrs[key]
            elif not domain:
                raise UnsupportedOpError(
                    f"{self.source}: {node.where}: attribute {key}={brief(attrs[key])} is not supported by "
                    f"kernelkit's {op_id(op, domain)} (it supports {sorted(schema.attrs) or 'no attributes'})")
        for key, (kind, _default) in schema.attrs.items():  # ONNX strings are bytes
            if kind == "string" and isinstance(attrs.get(key), bytes):
                attrs[key] = attrs[key].decode()
            elif kind == "strings" and isinstance(attrs.get(key), (list, tuple)):
                attrs[key] = [s.decode() if isinstance(s, bytes) else s for s in attrs[key]]
        out_node = Node(op, list(node.inputs if inputs is None else inputs),
                        list(node.outputs if outputs is None else outputs), attrs,
                        name or node.name, domain)
        normalize_attrs(schema, attrs, f"{self.source}: {node.where}")  # OpAttributeError naming the node
        return out_node


def passthrough(node: OnnxNode, ctx: ConvertContext) -> list[Node]:
    """The node already has opset 21's inputs and attributes: copy it."""
    return [ctx.make_node(node)]


def lookup(domain: str, op_type: str, since_version: int) -> Handler | None:
    return HANDLERS.get(("" if domain in DEFAULT_DOMAINS else domain, op_type, since_version))


def handled_versions(op_type: str, domain: str = "") -> list[int]:
    """The since_versions the table covers for an op."""
    return sorted(v for d, o, v in HANDLERS if d == domain and o == op_type)


import_submodules(__name__)  # every handlers/<name>.py fills the table (legacy, standard, ...), sorted
