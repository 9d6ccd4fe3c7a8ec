"""ONNX -> kernelkit IR.

``onnx`` parses, checks and infers shapes; this module only maps the graph: initializers to
read-only constants (tensors.py), graph inputs to specs (symbolic dims stay symbolic), and each node
through the handler table (handlers/) into opset-21-shaped kernelkit nodes.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

import onnx
import onnx.checker
import onnx.defs
import onnx.helper
import onnx.inliner
import onnx.shape_inference
import onnx.version_converter
from google.protobuf.message import DecodeError
from kernelkit.errors import KernelkitError, ModelFormatError, OpAttributeError, UnsupportedOpError
from kernelkit.ir import Graph, Model, Node, TensorSpec, Value
from kernelkit.passes import PassContext, run_passes
from kernelkit.passes.builtin import fold_node
from kernelkit.registry import ops as kernelkit_ops
from kernelkit.shape import infer_node, infer_shapes
from onnx import AttributeProto, ModelProto, TensorProto

from .handlers import DEFAULT_DOMAINS, MIN_OPSET, ConvertContext, OnnxNode, handled_versions, lookup, passthrough
from .tensors import numpy_dtype, to_array

log = logging.getLogger("kernelkit.converters.onnx")

_FOLD_CONTEXT = PassContext()

OUTPUT_OPSET = 21  # the form of kernelkit's core ops
_CHECK_LIMIT = 2**31 - 1  # protobuf's in-memory limit for the checker


def _load(model, base_dir) -> tuple[ModelProto, str, Path | None]:
    if isinstance(model, ModelProto):
        return model, "<ModelProto>", Path(base_dir) if base_dir is not None else None
    if isinstance(model, (bytes, bytearray, memoryview)):
        proto = ModelProto()
        try:
            proto.ParseFromString(bytes(model))
        except DecodeError as exc:
            raise ModelFormatError(f"<bytes>: not an ONNX model ({exc})") from exc
        return proto, "<bytes>", Path(base_dir) if base_dir is not None else None
    if not isinstance(model, (str, os.PathLike)):
        raise ModelFormatError(f"convert() takes a path, bytes or onnx.ModelProto, got {type(model).__name__}")
    path = Path(model)
    if not path.is_file():
        raise ModelFormatError(f"{path}: no such model file")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except (DecodeError, ValueError, OSError) as exc:
        raise ModelFormatError(f"{path}: not an ONNX model ({type(exc).__name__}: {exc})") from exc
    return proto, str(path), Path(base_dir) if base_dir is not None else path.parent


def _check_strings(proto: ModelProto, source: str) -> None:
    """Every protobuf ``string`` field must be UTF-8. ONNX's .proto is proto2, so a non-UTF-8 name
    parses as ``bytes`` and later breaks onnx.checker (UnicodeDecodeError) or our own messages."""
    stack = [(proto, "model")]
    while stack:
        message, path = stack.pop()
        for field, value in message.ListFields():
            repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
            values = value if repeated else (value,)
            if field.type == field.TYPE_STRING:
                if not all(isinstance(v, str) for v in values):
                    raise ModelFormatError(f"{source}: {path}.{field.name}: a string that is not UTF-8")
            elif field.type == field.TYPE_MESSAGE:
                stack.extend((v, f"{path}.{field.name}") for v in values)


def _check_attr_types(proto_node, op_type: str, domain: str, opset: int, where: str) -> None:
    """Attribute types must match the ONNX schema, also with ``check=False`` (handlers read them as
    the schema says: an INTS ``axis`` for Softmax-11 would otherwise end in a TypeError)."""
    if domain:
        return
    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except onnx.defs.SchemaError:
        return
    for attr in proto_node.attribute:
        spec = schema.attributes.get(attr.name)
        if spec is not None and int(spec.type.value) != attr.type:
            kinds = AttributeProto.AttributeType
            got = kinds.Name(attr.type) if attr.type in kinds.values() else attr.type
            raise OpAttributeError(f"{where}: attribute {attr.name!r} has type {got}, "
                                   f"ONNX {op_type}-{schema.since_version} expects {spec.type.name}")


def _opsets(proto: ModelProto, source: str) -> dict[str, int]:
    opsets: dict[str, int] = {}
    for entry in proto.opset_import:
        domain = "" if entry.domain in DEFAULT_DOMAINS else entry.domain
        if not 0 < entry.version < 2**31:  # onnx.defs takes a C int
            raise ModelFormatError(f"{source}: opset_import {entry.domain or 'ai.onnx'!r} version {entry.version} "
                                   f"is out of range")
        opsets[domain] = int(entry.version)
    if "" not in opsets:
        raise ModelFormatError(f"{source}: the model imports no version of the default ONNX domain")
    return opsets


def _upgrade(proto: ModelProto, opset: int, source: str) -> ModelProto:
    """Models older than opset 11 are lifted with onnx's version converter."""
    log.info("%s: upgrading opset %d to %d with onnx.version_converter", source, opset, MIN_OPSET)
    try:
        return onnx.version_converter.convert_version(proto, MIN_OPSET)
    except Exception as exc:
        raise ModelFormatError(f"{source}: opset {opset} is older than {MIN_OPSET} and onnx's version "
                               f"converter could not upgrade it: {exc}") from exc


def _checkable(proto: ModelProto, arrays: dict) -> ModelProto:
    """The model as the checker can see it: external tensors (already read safely) inlined."""
    external = {t.name for t in proto.graph.initializer if t.data_location == TensorProto.EXTERNAL}
    if not external:
        return proto
    copy = ModelProto()
    copy.CopyFrom(proto)
    for tensor in copy.graph.initializer:
        if tensor.name in external:
            tensor.ClearField("external_data")
            tensor.data_location = TensorProto.DEFAULT
            tensor.raw_data = arrays[tensor.name].tobytes()
    return copy


def _check(proto: ModelProto, source: str) -> None:
    if proto.ByteSize() > _CHECK_LIMIT:
        log.warning("%s: model over 2 GiB in memory, skipping onnx.checker", source)
        return
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as exc:
        raise ModelFormatError(f"{source}: onnx.checker rejected the model: {exc}") from exc


def _spec(type_proto, name: str, where: str) -> TensorSpec:
    if not type_proto.HasField("tensor_type"):
        raise ModelFormatError(f"{where}: value {name!r} is not a tensor (sequences/maps are not supported)")
    tensor_type = type_proto.tensor_type
    dtype = numpy_dtype(tensor_type.elem_type, f"{where}: value {name!r}")
    if not tensor_type.HasField("shape"):
        raise ModelFormatError(f"{where}: value {name!r} has no shape (not even a rank)")
    dims = []
    for axis, dim in enumerate(tensor_type.shape.dim):
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        elif dim.dim_param:
            dims.append(dim.dim_param)
        else:
            dims.append(f"{name}:{axis}")
    return TensorSpec(tuple(dims), dtype.name)


def _inferred_specs(proto: ModelProto, source: str) -> dict[str, TensorSpec]:
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
    except Exception as exc:  # noqa: BLE001 - kernelkit's own inference still runs
        log.warning("%s: onnx shape inference failed (%s); continuing without it", source, exc)
        return {}
    specs = {}
    for info in list(inferred.graph.value_info) + list(inferred.graph.output):
        try:
            specs[info.name] = _spec(info.type, info.name, source)
        except KernelkitError:
            continue
    return specs


def _attr_value(attr: AttributeProto, where: str, base_dir: Path | None):
    kind = attr.type
    if kind == AttributeProto.TENSOR:
        return to_array(attr.t, f"{where} attribute {attr.name!r}", base_dir)
    if kind == AttributeProto.TENSORS:
        return [to_array(t, f"{where} attribute {attr.name!r}", base_dir) for t in attr.tensors]
    if kind in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
        raise UnsupportedOpError(f"{where}: attribute {attr.name!r} holds a subgraph; control flow "
                                 f"(If/Loop/Scan) is not supported")
    if kind in (AttributeProto.SPARSE_TENSOR, AttributeProto.SPARSE_TENSORS,
                AttributeProto.TYPE_PROTO, AttributeProto.TYPE_PROTOS):
        raise UnsupportedOpError(f"{where}: attribute {attr.name!r} of type "
                                 f"{AttributeProto.AttributeType.Name(kind)} is not supported")
    return onnx.helper.get_attribute_value(attr)


def _since_version(op_type: str, domain: str, opset: int) -> int | None:
    if domain:
        return opset
    try:
        return onnx.defs.get_schema(op_type, opset, "").since_version
    except onnx.defs.SchemaError:
        return None


def _handler(node: OnnxNode, source: str):
    handler = lookup(node.domain, node.op_type, node.since_version)
    if handler is not None:
        return handler
    covered = handled_versions(node.op_type, node.domain)
    if node.domain and covered:  # custom-domain handlers apply from their version on
        older = [v for v in covered if v <= node.opset]
        if older:
            return lookup(node.domain, node.op_type, older[-1])
    qualified = f"{node.domain}::{node.op_type}" if node.domain else node.op_type
    if not covered and qualified in kernelkit_ops():
        return passthrough  # an op registered by the user under this domain and name
    how = (f"register it with kernelkit.register_op({node.op_type!r}, domain={node.domain!r}, inputs=[...], "
           f"outputs=[...], attrs={{...}}, infer=...) and a kernel with kernelkit.register_kernel(...)")
    if covered:
        how = (f"converted versions are {covered}; add one with "
               f"kernelkit_converters.onnx.register_handler({node.op_type!r}, {node.since_version})")
    raise UnsupportedOpError(
        f"{source}: node {node.name!r}: op_type {node.op_type!r} in domain {node.domain or 'ai.onnx'!r} "
        f"(opset {node.opset}, schema version {node.since_version}) is not supported; {how}")


def _check_supported(proto: ModelProto, opsets: dict[str, int], source: str) -> None:
    """One UnsupportedOpError naming every op type no handler converts (with its count and first
    node), so a user learns all of them at once rather than one per attempt."""
    missing: dict[str, list] = {}  # qualified op -> [count, first node, reason]
    for index, proto_node in enumerate(proto.graph.node):
        domain = "" if proto_node.domain in DEFAULT_DOMAINS else proto_node.domain
        if domain not in opsets:
            continue  # reported by the conversion itself
        qualified = f"{domain}::{proto_node.op_type}" if domain else proto_node.op_type
        if qualified in missing:
            missing[qualified][0] += 1
            continue
        name = proto_node.name or f"{proto_node.op_type}_{index}"
        since = _since_version(proto_node.op_type, domain, opsets[domain])
        node = OnnxNode(proto_node.op_type, domain, [], [], {}, name, opsets[domain],
                        since if since is not None else opsets[domain])
        if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in proto_node.attribute):
            missing[qualified] = [1, name, f"node {name!r} holds a subgraph; control flow (If/Loop/Scan) "
                                           f"is not supported"]
            continue
        try:
            _handler(node, source)
        except UnsupportedOpError as exc:
            missing[qualified] = [1, name, str(exc).removeprefix(f"{source}: ")]
    if not missing:
        return
    lines = [f"  - {op}: {count} node{'s' if count > 1 else ''}, first {first!r}; {reason}"
             for op, (count, first, reason) in missing.items()]
    raise UnsupportedOpError(
        f"{source}: {len(missing)} op type{'s are' if len(missing) > 1 else ' is'} not supported:\n"
        + "\n".join(lines)
        + "\nTo convert this model, register each op (kernelkit.register_op with a shape rule, and a kernel "
          "with kernelkit.register_kernel; docs/extending.md), or, to build and time the model before the "
          "kernels exist, register the op and run it as a stub: kernelkit.Session(model, stub_ops=[...]).")


def _add_node(graph: Graph, node: Node, source: str) -> None:
    """Append a converted node and infer its outputs' specs right away (later handlers see them)."""
    for name in node.inputs:
        if name and (name not in graph.values or graph.values[name].spec is None):
            raise ModelFormatError(f"{source}: node {node.name!r} reads {name!r}, which no earlier node, "
                                   f"input or initializer provides (graph not in topological order?)")
    if fold_node(graph, node, _FOLD_CONTEXT):  # core's folding, node by node: later shape rules see the values
        return  # evaluated now (constant inputs, or Shape/Size of a static spec): its outputs are constants
    specs = [graph.values[i].spec if i else None for i in node.inputs]
    consts = [graph.values[i].data if i else None for i in node.inputs]
    graph.nodes.append(node)
    for name, spec in zip(node.outputs, infer_node(node, specs, consts)):
        if name:
            graph.values[name] = Value(name, spec)


def _convert_graph(proto: ModelProto, opsets: dict[str, int], source: str, base_dir: Path | None,
                   arrays: dict, onnx_specs: dict) -> Graph:
    g = proto.graph
    graph = Graph(name=g.name or "onnx_graph")
    taken = {v for n in g.node for v in list(n.input) + list(n.output)}
    taken |= {i.name for i in g.input} | {t.name for t in g.initializer} | {n.name for n in g.node}
    ctx = ConvertContext(graph, onnx_specs, source, set(taken))
    if len(g.sparse_initializer):
        raise ModelFormatError(f"{source}: sparse initializer {g.sparse_initializer[0].values.name!r} "
                               f"is not supported")
    for name, data in arrays.items():
        graph.values[name] = Value(name, TensorSpec.of(data), data)
    for info in g.input:
        if info.name in arrays:  # IR < 4 lists initializers among the inputs
            continue
        graph.values[info.name] = Value(info.name, _spec(info.type, info.name, f"{source}: graph input"))
        graph.inputs.append(info.name)
    _check_supported(proto, opsets, source)
    used_names: set[str] = set()
    for index, proto_node in enumerate(g.node):
        domain = "" if proto_node.domain in DEFAULT_DOMAINS else proto_node.domain
        name = proto_node.name
        if not name or name in used_names:
            name = ctx.fresh(f"{proto_node.op_type}_{index}")
        used_names.add(name)
        if domain not in opsets:
            raise ModelFormatError(f"{source}: node {name!r} uses domain {domain!r}, which the model does "
                                   f"not import (opset_import)")
        opset = opsets[domain]
        where = f"{source}: node {name!r} ({proto_node.op_type})"
        _check_attr_types(proto_node, proto_node.op_type, domain, opset, where)
        attrs = {a.name: _attr_value(a, where, base_dir) for a in proto_node.attribute}
        outputs = list(proto_node.output)
        while outputs and not outputs[-1]:
            outputs.pop()
        since = _since_version(proto_node.op_type, domain, opset)
        node = OnnxNode(proto_node.op_type, domain, list(proto_node.input), outputs, attrs, name, opset,
                        since if since is not None else opset)
        try:
            converted = _handler(node, source)(node, ctx)
        except (TypeError, ValueError, IndexError, KeyError, OverflowError) as exc:  # malformed node, check=False
            raise ModelFormatError(f"{where}: cannot convert this node: {type(exc).__name__}: "
                                   f"{str(exc)[:200]}") from exc
        for new in converted:
            _add_node(graph, new, source)
    for info in g.output:
        if info.name not in graph.values:
            raise ModelFormatError(f"{source}: graph output {info.name!r} is produced by no node")
        graph.outputs.append(info.name)
    return graph


def convert(model, *, base_dir=None, check: bool = True, passes=False) -> Model:
    """Convert an ONNX model (a path, serialized bytes or an ``onnx.ModelProto``) into a kernelkit Model.

    External data is read from ``base_dir`` (default: the model file's folder; bytes and protos have
    none unless given). ``check`` runs ``onnx.checker``. ``passes`` optionally runs graph passes on
    the result (False: none, the default - a Session runs them; None: the default pipeline; or a
    list of pass names). Errors are typed: ModelFormatError (file, tensor), UnsupportedOpError
    (node, op_type, domain, opset), OpAttributeError and ShapeError (node).
    """
    proto, source, base = _load(model, base_dir)
    _check_strings(proto, source)
    opsets = _opsets(proto, source)
    if opsets[""] < MIN_OPSET:
        proto = _upgrade(proto, opsets[""], source)
        opsets = _opsets(proto, source)
    if len(proto.functions):
        proto = onnx.inliner.inline_local_functions(proto)
    arrays = {t.name: to_array(t, f"{source}: initializer {t.name!r}", base) for t in proto.graph.initializer}
    checkable = _checkable(proto, arrays)
    if check:
        _check(checkable, source)
    onnx_specs = _inferred_specs(checkable, source)
    graph = _convert_graph(proto, opsets, source, base, arrays, onnx_specs)
    graph.toposort()
    infer_shapes(graph)
    if passes is not False:
        run_passes(graph, passes, PassContext())
        graph.toposort()
        infer_shapes(graph)
    out_opsets = {d: v for d, v in opsets.items() if d}
    out_opsets[""] = OUTPUT_OPSET
    metadata = {p.key: p.value for p in proto.metadata_props}
    metadata["onnx_opset"] = str(opsets[""])
    if proto.producer_name:
        metadata["onnx_producer"] = f"{proto.producer_name} {proto.producer_version}".strip()
    return Model(graph, out_opsets, producer="kernelkit_converters.onnx", metadata=metadata)
