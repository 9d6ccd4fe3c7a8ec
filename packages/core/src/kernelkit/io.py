"""kernelkit's IR file (``.kkm``): one file, a fixed header, the graph as JSON, one weight blob.

Layout (all integers little-endian)::

    offset 0   header (72 bytes): magic b"\\x89KKM\\r\\n\\x1a\\n", format version u32, flags u32 (0),
               json length u64, blob offset u64, blob length u64, sha256 of the JSON (32 bytes)
    offset 72  the graph description, UTF-8 JSON (see docs/ir-format.md)
    blob       aligned to 64 bytes; each tensor (constant or tensor attribute) starts at a
               64-byte aligned offset inside it; the JSON lists offset, length, dtype, shape and
               sha256 per tensor. The file ends where the blob ends.

``load`` maps the file read-only (``mmap``) and returns constants as read-only views of the
mapping (no copy), after checking every offset, length, dtype and shape against the blob and,
unless ``verify=False``, every checksum. No pickle anywhere. ``save`` writes a temporary file in
the destination folder and renames it over the target, so a failed write leaves the old file.
"""
from __future__ import annotations

import base64
import hashlib
import json
import logging
import math
import mmap
import os
import secrets
import struct
from pathlib import Path
from typing import Any

import numpy as np

from .dtypes import DTYPES
from .errors import KernelkitError, ModelFormatError, brief
from .ir import Graph, Model, Node, TensorSpec, Value
from .limits import MAX_DIM, MAX_ELEMENTS, MAX_RANK, checked_count
from .untrusted import open_regular

log = logging.getLogger("kernelkit.io")

MAGIC = b"\x89KKM\r\n\x1a\n"
FORMAT_VERSION = 1
ALIGN = 64
_HEADER = struct.Struct("<8sIIQQQ32s")
HEADER_SIZE = _HEADER.size  # 72


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _le_dtype(name: str) -> np.dtype:
    return np.dtype(DTYPES[name]).newbyteorder("<")


# -- writing -----------------------------------------------------------------------------------
class _Blob:
    """Collects the tensors to write and assigns each an aligned offset in the blob."""

    def __init__(self):
        self.arrays: list[np.ndarray] = []
        self.entries: list[dict] = []
        self.size = 0

    def add(self, array: np.ndarray, where: str) -> int:
        name = array.dtype.name
        if name not in DTYPES:
            raise ModelFormatError(f"{where}: dtype {name!r} cannot be stored; known: {', '.join(DTYPES)}")
        data = np.asarray(array, dtype=_le_dtype(name), order="C")  # keeps 0-d arrays 0-d
        offset = _align(self.size)
        self.arrays.append(data)
        self.entries.append({"offset": offset, "length": data.nbytes, "dtype": name,
                             "shape": list(data.shape), "sha256": hashlib.sha256(_raw(data)).hexdigest()})
        self.size = offset + data.nbytes
        return len(self.entries) - 1


def _raw(data: np.ndarray) -> memoryview:
    return memoryview(data.reshape(-1).view(np.uint8))


def _encode_float(x: float):
    return x if math.isfinite(x) else repr(x)  # "nan", "inf", "-inf": JSON has no such numbers


def _encode_attr(value, blob: _Blob, where: str) -> dict:
    if isinstance(value, (bool, np.bool_, int, np.integer)):
        return {"type": "int", "value": int(value)}
    if isinstance(value, (float, np.floating)):
        return {"type": "float", "value": _encode_float(float(value))}
    if isinstance(value, str):
        return {"type": "string", "value": value}
    if isinstance(value, (bytes, bytearray)):
        return {"type": "bytes", "value": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, np.ndarray):
        return {"type": "tensor", "tensor": blob.add(value, where)}
    if isinstance(value, (list, tuple)):
        items = list(value)
        if all(isinstance(v, (bool, np.bool_, int, np.integer)) for v in items):
            return {"type": "ints", "value": [int(v) for v in items]}
        if all(isinstance(v, (int, float, np.integer, np.floating)) for v in items):
            return {"type": "floats", "value": [_encode_float(float(v)) for v in items]}
        if all(isinstance(v, str) for v in items):
            return {"type": "strings", "value": items}
    raise ModelFormatError(f"{where}: attribute value of type {type(value).__name__} cannot be stored "
                           f"(int, float, string, bytes, tensor, ints, floats, strings)")


def _spec_json(spec: TensorSpec | None):
    if spec is None:
        return None
    return {"shape": list(spec.shape), "dtype": spec.dtype, "layout": spec.layout}


def _describe(model: Model, blob: _Blob) -> dict:
    g = model.graph
    bad = [k for k, v in model.metadata.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
        raise ModelFormatError(f"model metadata {bad[0]!r}: keys and values must be strings")
    values = []
    for name, v in g.values.items():
        entry = {"name": name, "spec": _spec_json(v.spec)}
        if v.data is not None:
            entry["tensor"] = blob.add(np.asarray(v.data), f"value {name!r}")
        values.append(entry)
    nodes = []
    for n in g.nodes:
        attrs = {k: _encode_attr(a, blob, f"node {n.name!r} attribute {k!r}") for k, a in n.attrs.items()
                 if a is not None}
        nodes.append({"op": n.op, "domain": n.domain, "name": n.name, "inputs": list(n.inputs),
                      "outputs": list(n.outputs), "attrs": attrs})
    return {"producer": model.producer, "opsets": dict(model.opsets), "metadata": dict(model.metadata),
            "graph": {"name": g.name, "inputs": list(g.inputs), "outputs": list(g.outputs),
                      "values": values, "nodes": nodes},
            "tensors": blob.entries}


def save(model: Model, path) -> None:
    """Write ``model`` to ``path`` (a ``.kkm`` file) atomically."""
    path = Path(path)
    blob = _Blob()
    try:
        text = json.dumps(_describe(model, blob), allow_nan=False, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise ModelFormatError(f"{path}: model cannot be described as JSON: {exc}") from exc
    blob_offset = _align(HEADER_SIZE + len(text))
    header = _HEADER.pack(MAGIC, FORMAT_VERSION, 0, len(text), blob_offset, blob.size,
                          hashlib.sha256(text).digest())
    tmp = None
    try:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"
        # os.open with mode 0o666 lets the umask decide the permissions, as open() would
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), "wb") as f:
            f.write(header)
            f.write(text)
            f.write(b"\0" * (blob_offset - HEADER_SIZE - len(text)))
            pos = 0
            for data, entry in zip(blob.arrays, blob.entries):
                f.write(b"\0" * (entry["offset"] - pos))
                f.write(_raw(data))
                pos = entry["offset"] + entry["length"]
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise ModelFormatError(f"{path}: cannot write model file: {exc}") from exc
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    log.debug("saved %s: %d tensors, %d blob bytes", path, len(blob.entries), blob.size)


# -- reading -----------------------------------------------------------------------------------
class _Reader:
    """Typed access to the parsed JSON: every wrong type or missing key names the file and key."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, where: str, message: str) -> ModelFormatError:
        return ModelFormatError(f"{self.path}: {where}: {message}")

    def get(self, obj: dict, key: str, kind, where: str, default: Any = ...):
        if not isinstance(obj, dict):
            raise self.fail(where, f"expected an object, got {type(obj).__name__}")
        if key not in obj:
            if default is not ...:
                return default
            raise self.fail(where, f"missing key {key!r}")
        value = obj[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds:
            raise self.fail(f"{where}.{key}", f"expected {kinds[0].__name__}, got bool")
        if not isinstance(value, kinds):
            raise self.fail(f"{where}.{key}", f"expected {kinds[0].__name__}, got {type(value).__name__}")
        return value

    def strings(self, obj: dict, key: str, where: str) -> list[str]:
        items = self.get(obj, key, list, where)
        if not all(isinstance(s, str) for s in items):
            raise self.fail(f"{where}.{key}", "expected a list of strings")
        return items

    def shape(self, items, where: str, symbols: bool = True) -> tuple:
        """A shape: at most MAX_RANK dims, each an int in [0, MAX_DIM] or (``symbols``) a name."""
        if not isinstance(items, list) or len(items) > MAX_RANK or not all(
                (isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_DIM)
                or (symbols and isinstance(d, str) and d) for d in items):
            what = "non-negative ints or symbols" if symbols else "non-negative ints"
            raise self.fail(where, f"shape {brief(items)} is not a list of at most {MAX_RANK} {what}")
        return tuple(items)

    def dtype(self, name, where: str) -> str:
        if name not in DTYPES:
            raise self.fail(where, f"unknown dtype {name!r}; known: {', '.join(DTYPES)}")
        return name


def _read_tensors(r: _Reader, entries, mm, blob_offset: int, blob_len: int, verify: bool) -> list[np.ndarray]:
    if not isinstance(entries, list):
        raise r.fail("tensors", "expected a list")
    out = []
    for i, e in enumerate(entries):
        where = f"tensors[{i}]"
        offset = r.get(e, "offset", int, where)
        length = r.get(e, "length", int, where)
        dtype = r.dtype(r.get(e, "dtype", str, where), f"{where}.dtype")
        shape = r.shape(r.get(e, "shape", list, where), f"{where}.shape", symbols=False)
        digest = r.get(e, "sha256", str, where)
        if offset < 0 or length < 0 or offset + length > blob_len:
            raise r.fail(where, f"offset {offset} + length {length} is outside the blob ({blob_len} bytes)")
        if offset % ALIGN:
            raise r.fail(where, f"offset {offset} is not aligned to {ALIGN} bytes")
        dt = _le_dtype(dtype)
        count = checked_count(shape)  # Python ints, stops past MAX_ELEMENTS
        if count is None or count * dt.itemsize != length:
            need = f"more than {MAX_ELEMENTS} elements" if count is None else f"{count * dt.itemsize} bytes"
            raise r.fail(where, f"shape {brief(list(shape))} of {dtype} needs {need}, entry says {length}")
        start = blob_offset + offset
        if verify and hashlib.sha256(memoryview(mm)[start:start + length]).hexdigest() != digest:
            raise r.fail(where, f"sha256 mismatch ({dtype}{list(shape)} at blob offset {offset}): file is corrupt")
        try:
            if count == 0:
                arr = np.empty(shape, dt)
                arr.flags.writeable = False
            else:
                arr = np.frombuffer(mm, dtype=dt, count=count, offset=start).reshape(shape)
        except ValueError as exc:  # e.g. a dim NumPy cannot index, even with 0 elements
            raise r.fail(where, f"shape {list(shape)} cannot be mapped: {exc}") from None
        out.append(arr)
    return out


def _tensor_ref(r: _Reader, obj: dict, tensors: list, where: str) -> np.ndarray:
    index = r.get(obj, "tensor", int, where)
    if not 0 <= index < len(tensors):
        raise r.fail(f"{where}.tensor", f"index {index} is out of range ({len(tensors)} tensors)")
    return tensors[index]


def _decode_float(r: _Reader, x, where: str) -> float:
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    if x in ("nan", "inf", "-inf"):
        return float(x)
    raise r.fail(where, f"expected a float, got {brief(x)}")


def _decode_attr(r: _Reader, a: dict, tensors: list, where: str):
    kind = r.get(a, "type", str, where)
    if kind == "tensor":
        return _tensor_ref(r, a, tensors, where)
    if kind == "int":
        return r.get(a, "value", int, where)
    if kind == "float":
        return _decode_float(r, r.get(a, "value", (int, float, str), where), f"{where}.value")
    if kind == "string":
        return r.get(a, "value", str, where)
    if kind == "bytes":
        try:
            return base64.b64decode(r.get(a, "value", str, where), validate=True)
        except ValueError as exc:
            raise r.fail(f"{where}.value", f"invalid base64: {exc}") from exc
    if kind in ("ints", "floats", "strings"):
        items = r.get(a, "value", list, where)
        if kind == "floats":
            return tuple(_decode_float(r, x, f"{where}.value") for x in items)
        want = int if kind == "ints" else str
        if not all(isinstance(x, want) and not isinstance(x, bool) for x in items):
            raise r.fail(f"{where}.value", f"expected a list of {want.__name__}")
        return tuple(items)
    raise r.fail(f"{where}.type", f"unknown attribute type {kind!r}")


def _check_order(r: _Reader, graph: Graph) -> None:
    """Every node input must be fed, constant or produced by an earlier node (one linear scan; an
    out-of-order but acyclic graph is accepted through the slower level-set check)."""
    ready = set(graph.inputs) | {n for n, v in graph.values.items() if v.data is not None} | {""}
    if len(set(graph.inputs)) != len(graph.inputs):
        raise r.fail("graph.inputs", f"{brief(graph.inputs)} names an input twice")
    produced = set(ready)
    for node in graph.nodes:  # each value has one source: an input, a constant or one node
        twice = [o for o in node.outputs if o and o in produced]
        if twice:
            raise r.fail(f"node {node.name!r}", f"output {twice[0]!r} is also a graph input, a constant "
                                                f"or another node's output")
        produced.update(node.outputs)
    for node in graph.nodes:
        if not all(i in ready for i in node.inputs):
            try:
                graph.levels()
            except ModelFormatError as exc:
                raise r.fail("graph", str(exc)) from None
            return
        ready.update(node.outputs)


def _build_model(r: _Reader, doc: dict, tensors: list) -> Model:
    g = r.get(doc, "graph", dict, "json")
    graph = Graph(name=r.get(g, "name", str, "graph"), inputs=r.strings(g, "inputs", "graph"),
                  outputs=r.strings(g, "outputs", "graph"))
    for i, v in enumerate(r.get(g, "values", list, "graph")):
        where = f"graph.values[{i}]"
        name = r.get(v, "name", str, where)
        where = f"value {name!r}"
        if name in graph.values:
            raise r.fail(where, "value name is used twice")
        s = r.get(v, "spec", (dict, type(None)), where)
        spec = None
        if s is not None:
            spec = TensorSpec(r.shape(r.get(s, "shape", list, where), f"{where}.shape"),
                              r.dtype(r.get(s, "dtype", str, where), f"{where}.dtype"),
                              r.get(s, "layout", (str, type(None)), where, None))
        data = _tensor_ref(r, v, tensors, where) if "tensor" in v else None
        if data is not None and (spec is None or spec.shape != data.shape or spec.dtype != data.dtype.name):
            raise r.fail(where, f"spec {spec} does not match its tensor {data.dtype.name}{list(data.shape)}")
        graph.values[name] = Value(name, spec, data)
    for i, n in enumerate(r.get(g, "nodes", list, "graph")):
        where = f"graph.nodes[{i}]"
        name = r.get(n, "name", str, where)
        where = f"node {name!r}" if name else where
        raw_attrs = r.get(n, "attrs", dict, where, {})
        attrs = {k: _decode_attr(r, a, tensors, f"{where} attribute {k!r}") for k, a in raw_attrs.items()}
        graph.nodes.append(Node(r.get(n, "op", str, where), r.strings(n, "inputs", where),
                                r.strings(n, "outputs", where), attrs, name, r.get(n, "domain", str, where, "")))
    for name in graph.inputs + graph.outputs:
        if name not in graph.values:
            raise r.fail("graph", f"input/output {name!r} has no value entry")
    _check_order(r, graph)
    opsets = r.get(doc, "opsets", dict, "json", {"": 17})
    metadata = r.get(doc, "metadata", dict, "json", {})
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in opsets.values()):
        raise r.fail("opsets", "expected domain -> int")
    if not all(isinstance(v, str) for v in metadata.values()):
        raise r.fail("metadata", "expected key -> string")
    return Model(graph, opsets, r.get(doc, "producer", str, "json", "kernelkit"), metadata)


def load(path, *, verify: bool = True) -> Model:
    """Read a ``.kkm`` file. Constants are read-only views of a read-only mapping of the file.

    ``verify=False`` skips the sha256 checks (structure, offsets and sizes are still checked).
    Any problem raises ModelFormatError naming the file and the key or tensor."""
    if not isinstance(path, (str, os.PathLike)):
        raise ModelFormatError(f"model path must be a str or os.PathLike, got {type(path).__name__}")
    path = Path(path)
    r = _Reader(path)
    try:
        with open_regular(path) as f:  # a folder, a FIFO (which would block), a device: refused
            size = os.fstat(f.fileno()).st_size
            if size < HEADER_SIZE:
                raise r.fail("header", f"file is truncated ({size} bytes, header needs {HEADER_SIZE})")
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise ModelFormatError(f"{path}: cannot read model file: {exc}") from exc
    magic, version, flags, json_len, blob_offset, blob_len, json_digest = _HEADER.unpack_from(mm, 0)
    if magic != MAGIC:
        raise r.fail("header", f"bad magic {magic!r}: not a kernelkit model file")
    if version != FORMAT_VERSION:
        raise r.fail("header", f"unknown format version {version} (this kernelkit reads {FORMAT_VERSION})")
    if flags:
        raise r.fail("header", f"unknown flags {flags:#x}")
    if HEADER_SIZE + json_len > size or blob_offset + blob_len > size:
        raise r.fail("header", f"file is truncated: {size} bytes, header promises "
                               f"{max(HEADER_SIZE + json_len, blob_offset + blob_len)}")
    if blob_offset < HEADER_SIZE + json_len or blob_offset % ALIGN:
        raise r.fail("header", f"blob offset {blob_offset} overlaps the JSON or is not {ALIGN}-byte aligned")
    if blob_offset + blob_len != size:
        raise r.fail("header", f"{size - blob_offset - blob_len} unexpected trailing bytes")
    text = mm[HEADER_SIZE:HEADER_SIZE + json_len]
    if verify and hashlib.sha256(text).digest() != json_digest:
        raise r.fail("json", "sha256 mismatch: the graph description is corrupt")
    try:
        doc = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise r.fail("json", f"invalid JSON: {type(exc).__name__}: {exc}") from exc
    if not isinstance(doc, dict):
        raise r.fail("json", "expected an object at the top level")
    try:
        tensors = _read_tensors(r, r.get(doc, "tensors", list, "json"), mm, blob_offset, blob_len, verify)
        model = _build_model(r, doc, tensors)
    except ModelFormatError:
        raise
    except (KernelkitError, TypeError, ValueError, KeyError, AttributeError) as exc:
        raise r.fail("json", f"malformed graph description: {type(exc).__name__}: {exc}") from exc
    log.debug("loaded %s: %d nodes, %d tensors", path, len(model.graph.nodes), len(tensors))
    return model
