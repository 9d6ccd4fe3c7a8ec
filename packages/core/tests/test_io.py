"""The .kkm IR file: round trips, read-only mapping, corruption detection, atomic writes."""
from __future__ import annotations

import hashlib
import json
import math
import mmap
import struct

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import io as kio
from kernelkit.dtypes import DTYPES
from kernelkit.errors import ModelFormatError
from kernelkit.ir import Graph, Model, Node, TensorSpec, Value


def _model_with(constants: dict[str, np.ndarray], attrs: dict | None = None) -> Model:
    """A graph whose constants and one custom-domain node's attributes are what a test wants."""
    g = Graph(name="io_test", inputs=["x"], outputs=["y"])
    g.values["x"] = Value("x", TensorSpec(("N", 3, "H"), "float32", "NCHW"))
    g.values["y"] = Value("y", TensorSpec(("N", 3, "H"), "float32"))
    for name, arr in constants.items():
        g.values[name] = Value(name, TensorSpec.of(arr), arr)
    g.nodes.append(Node("Custom", ["x", ""] + list(constants), ["y"], dict(attrs or {}), "custom_0", "test.io"))
    return Model(g, {"": 21, "test.io": 1}, "pytest", {"purpose": "round trip", "empty": ""})


def _assert_same_array(a: np.ndarray, b: np.ndarray) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_array_equal(a, b)


def _roundtrip(model: Model, tmp_path, **kw) -> Model:
    path = tmp_path / "m.kkm"
    kk.save(model, path)
    return kk.load(path, **kw)


# -- round trips -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_roundtrip_every_dtype(tmp_path, dtype):
    rng = np.random.default_rng(0)
    arr = (rng.random((4, 5)) < 0.5) if dtype == "bool" else (rng.uniform(-100, 100, (4, 5))).astype(dtype)
    model = _model_with({"w": arr, "w_t": arr.T})  # a non-contiguous view is stored contiguous
    back = _roundtrip(model, tmp_path)
    _assert_same_array(back.graph.values["w"].data, arr)
    _assert_same_array(back.graph.values["w_t"].data, arr.T)
    assert back.graph.values["w"].spec == TensorSpec((4, 5), dtype)


def test_roundtrip_graph_structure_and_symbolic_dims(tmp_path):
    model = _model_with({"w": np.arange(3, dtype=np.float32)})
    back = _roundtrip(model, tmp_path)
    g, g0 = back.graph, model.graph
    assert (g.name, g.inputs, g.outputs) == (g0.name, g0.inputs, g0.outputs)
    assert g.values["x"].spec == TensorSpec(("N", 3, "H"), "float32", "NCHW")
    assert g.values["y"].spec.shape == ("N", 3, "H") and g.values["y"].spec.layout is None
    [node] = g.nodes
    assert (node.op, node.domain, node.name, node.inputs, node.outputs) == \
        ("Custom", "test.io", "custom_0", ["x", "", "w"], ["y"])
    assert back.opsets == {"": 21, "test.io": 1}
    assert back.producer == "pytest" and back.metadata == {"purpose": "round trip", "empty": ""}


def test_roundtrip_attributes_of_every_type(tmp_path):
    tensor_attr = np.arange(6, dtype=np.int64).reshape(2, 3)
    attrs = {"i": 7, "neg": -3, "big": 2**62, "flag": True, "np_int": np.int32(5),
             "f": 0.1, "nan": float("nan"), "inf": float("inf"), "ninf": float("-inf"), "np_f": np.float32(2.5),
             "s": "héllo \"quoted\"\n", "b": bytes(range(256)), "t": tensor_attr,
             "scalar_t": np.array(1.5, np.float16),
             "ints": (1, -2, 3), "floats": [0.5, 1e-30, float("inf")], "strings": ["a", "", "ü"],
             "empty": [], "mixed_num": (1, 2.5)}
    back = _roundtrip(_model_with({}, attrs), tmp_path).graph.nodes[0].attrs
    assert set(back) == set(attrs)
    assert back["i"] == 7 and back["neg"] == -3 and back["big"] == 2**62 and back["flag"] == 1
    assert back["np_int"] == 5 and type(back["np_int"]) is int
    assert back["f"] == 0.1 and math.isnan(back["nan"]) and back["inf"] == math.inf and back["ninf"] == -math.inf
    assert back["np_f"] == 2.5 and type(back["np_f"]) is float
    assert back["s"] == attrs["s"] and back["b"] == attrs["b"] and isinstance(back["b"], bytes)
    _assert_same_array(back["t"], tensor_attr)
    _assert_same_array(back["scalar_t"], attrs["scalar_t"])
    assert back["ints"] == (1, -2, 3) and back["floats"] == (0.5, 1e-30, math.inf)
    assert back["strings"] == ("a", "", "ü") and back["empty"] == () and back["mixed_num"] == (1.0, 2.5)


def test_roundtrip_empty_and_scalar_tensors(tmp_path):
    consts = {"e0": np.zeros((0,), np.float32), "e1": np.zeros((3, 0, 2), np.int64),
              "s": np.array(42, np.int32), "one": np.ones((1,), np.bool_)}
    back = _roundtrip(_model_with(consts), tmp_path).graph
    for name, arr in consts.items():
        _assert_same_array(back.values[name].data, arr)
        assert not back.values[name].data.flags.writeable


def test_big_endian_input_is_stored_little_endian(tmp_path):
    arr = np.arange(5, dtype=">f4") * 1.5
    back = _roundtrip(_model_with({"w": arr}), tmp_path).graph.values["w"].data
    np.testing.assert_array_equal(back, arr)
    assert back.dtype.name == "float32"


def test_tensors_are_aligned_in_the_blob(tmp_path):
    path = tmp_path / "m.kkm"
    kk.save(_model_with({"a": np.ones(3, np.int8), "b": np.ones(5, np.float64)}), path)
    header, doc, _ = _parts(path)
    assert header[4] % kio.ALIGN == 0
    assert [t["offset"] % kio.ALIGN for t in doc["tensors"]] == [0, 0]


def test_loaded_model_runs_and_matches_numpy(tmp_path):
    g = kk.GraphBuilder("relu_net")
    x = g.input("x", ("N", 4), "float32")
    g.output(g.op("Relu", x))
    back = _roundtrip(g.build(), tmp_path)
    feed = np.array([[-1.0, 0.5, -0.25, 3.0]], np.float32)
    [y] = kk.Session(back, vendors=["reference"]).run(None, {"x": feed})
    _assert_same_array(y, np.maximum(feed, 0))


# -- mapping ----------------------------------------------------------------------------------
def test_weights_are_read_only_views_of_a_mapping(tmp_path):
    arr = np.arange(1000, dtype=np.float32)
    data = _roundtrip(_model_with({"w": arr}), tmp_path).graph.values["w"].data
    assert not data.flags.writeable
    with pytest.raises(ValueError):
        data.flags.writeable = True
    with pytest.raises(ValueError):
        data[0] = 1.0
    base = data
    while isinstance(base, (np.ndarray, memoryview)):
        base = base.base if isinstance(base, np.ndarray) else base.obj
    assert isinstance(base, mmap.mmap), f"weights are not backed by the file mapping (base {type(base)})"
    assert not data.flags.owndata


def test_verify_false_skips_checksums_but_not_structure(tmp_path):
    path = tmp_path / "m.kkm"
    kk.save(_model_with({"w": np.zeros(16, np.uint8)}), path)
    header, doc, raw = _parts(path)
    blob_at = header[4] + doc["tensors"][0]["offset"]
    raw[blob_at] = 9
    path.write_bytes(bytes(raw))
    with pytest.raises(ModelFormatError, match="sha256"):
        kk.load(path)
    assert kk.load(path, verify=False).graph.values["w"].data[0] == 9


# -- corruption -------------------------------------------------------------------------------
def _parts(path):
    raw = bytearray(path.read_bytes())
    header = struct.unpack_from("<8sIIQQQ32s", raw, 0)
    doc = json.loads(raw[kio.HEADER_SIZE:kio.HEADER_SIZE + header[3]])
    return header, doc, raw


def _rewrite(path, mutate=None, text: bytes | None = None):
    """Replace the JSON (via ``mutate(doc)`` or raw ``text``) with a consistent header and checksum."""
    header, doc, raw = _parts(path)
    blob = raw[header[4]:header[4] + header[5]]
    if text is None:
        mutate(doc)
        text = json.dumps(doc).encode()
    offset = -(-(kio.HEADER_SIZE + len(text)) // 64) * 64
    head = struct.pack("<8sIIQQQ32s", header[0], header[1], header[2], len(text), offset, len(blob),
                       hashlib.sha256(text).digest())
    path.write_bytes(head + text + b"\0" * (offset - kio.HEADER_SIZE - len(text)) + bytes(blob))


@pytest.fixture
def saved(tmp_path):
    path = tmp_path / "model.kkm"
    kk.save(_model_with({"w": np.arange(12, dtype=np.float32).reshape(3, 4), "k": np.ones(2, np.int64)},
                        {"t": np.ones(3, np.float32)}), path)
    return path


def _expect(path, *fragments, verify=True):
    with pytest.raises(ModelFormatError) as info:
        kk.load(path, verify=verify)
    message = str(info.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def _set_header(path, index, value):
    header, _, raw = _parts(path)
    fields = list(header)
    fields[index] = value
    raw[:kio.HEADER_SIZE] = struct.pack("<8sIIQQQ32s", *fields)
    path.write_bytes(bytes(raw))


def test_bad_magic(saved):
    _set_header(saved, 0, b"PK\x03\x04xxxx")
    _expect(saved, "bad magic")


def test_unknown_version(saved):
    _set_header(saved, 1, 99)
    _expect(saved, "unknown format version 99")


def test_unknown_flags(saved):
    _set_header(saved, 2, 4)
    _expect(saved, "flags")


@pytest.mark.parametrize("keep", [0, 10, kio.HEADER_SIZE + 5, -1])
def test_truncated_file(saved, keep):
    raw = saved.read_bytes()
    saved.write_bytes(raw[:keep] if keep >= 0 else raw[:-1])
    _expect(saved, "truncated")


def test_trailing_bytes(saved):
    saved.write_bytes(saved.read_bytes() + b"junk")
    _expect(saved, "trailing")


def test_missing_file(tmp_path):
    _expect(tmp_path / "nope.kkm", "cannot read")


def test_json_checksum_mismatch(saved):
    header, _, raw = _parts(saved)
    raw[kio.HEADER_SIZE + 3] ^= 0x01
    saved.write_bytes(bytes(raw))
    _expect(saved, "json", "sha256")


def test_bad_json(saved):
    _rewrite(saved, text=b'{"graph": {"name": "x",')
    _expect(saved, "invalid JSON")


def test_deeply_nested_json(saved):
    _rewrite(saved, text=b"[" * 200_000 + b"]" * 200_000)
    _expect(saved, "invalid JSON")


def test_nodes_out_of_order_but_acyclic_load(tmp_path):
    g = Graph(name="g", inputs=["x"], outputs=["z"])
    for name in "xyz":
        g.values[name] = Value(name, TensorSpec((2,), "float32"))
    g.nodes = [Node("Relu", ["y"], ["z"], {}, "second"), Node("Neg", ["x"], ["y"], {}, "first")]
    path = tmp_path / "m.kkm"
    kk.save(Model(g), path)
    back = kk.load(path)
    assert [n.name for n in back.graph.nodes] == ["second", "first"]  # stored as given
    assert [[n.name for n in level] for level in back.graph.levels()] == [["first"], ["second"]]


def test_cycle_is_rejected(saved):
    def mutate(doc):
        node = doc["graph"]["nodes"][0]
        node["inputs"] = ["y"]  # the node reads its own output
    _rewrite(saved, mutate)
    _expect(saved, "graph", "cycle")


def test_tensor_checksum_mismatch(saved):
    header, doc, raw = _parts(saved)
    raw[header[4] + doc["tensors"][1]["offset"]] ^= 0xFF
    saved.write_bytes(bytes(raw))
    _expect(saved, "tensors[1]", "sha256")


@pytest.mark.parametrize("field,value,fragment", [
    ("offset", 10**9, "outside the blob"),
    ("offset", -64, "outside the blob"),
    ("offset", 8, "not aligned"),
    ("length", 10**9, "outside the blob"),
    ("length", 4, "needs 48 bytes"),
    ("shape", [5, 4], "needs 80 bytes"),
    ("shape", [3, -4], "shape"),
    ("shape", "3x4", "expected list"),
    ("dtype", "complex64", "unknown dtype 'complex64'"),
    ("dtype", "float64", "needs 96 bytes"),
])
def test_bad_tensor_entry(saved, field, value, fragment):
    _rewrite(saved, lambda doc: doc["tensors"][0].__setitem__(field, value))
    _expect(saved, "tensors[0]", fragment)


def test_missing_tensor_key(saved):
    _rewrite(saved, lambda doc: doc["tensors"][0].pop("sha256"))
    _expect(saved, "tensors[0]", "missing key 'sha256'")


def test_spec_does_not_match_tensor(saved):
    def mutate(doc):
        [w] = [v for v in doc["graph"]["values"] if v["name"] == "w"]
        w["spec"]["shape"] = [4, 3]
    _rewrite(saved, mutate)
    _expect(saved, "value 'w'", "does not match")


def test_tensor_index_out_of_range(saved):
    def mutate(doc):
        doc["graph"]["nodes"][0]["attrs"]["t"]["tensor"] = 17
    _rewrite(saved, mutate)
    _expect(saved, "node 'custom_0' attribute 't'", "out of range")


@pytest.mark.parametrize("mutate,fragment", [
    (lambda d: d["graph"].__setitem__("nodes", 3), "graph.nodes"),
    (lambda d: d["graph"]["nodes"][0].__setitem__("inputs", ["x", 5]), "list of strings"),
    (lambda d: d["graph"]["nodes"][0]["attrs"].__setitem__("a", {"type": "complex", "value": 1}),
     "unknown attribute type 'complex'"),
    (lambda d: d["graph"]["nodes"][0]["attrs"].__setitem__("a", {"type": "bytes", "value": "@@@"}),
     "invalid base64"),
    (lambda d: d["graph"]["nodes"][0]["attrs"].__setitem__("a", {"type": "ints", "value": [1, "2"]}),
     "list of int"),
    (lambda d: d["graph"]["nodes"][0].__setitem__("inputs", ["never_made"]), "never_made"),
    (lambda d: d["graph"]["values"].append(d["graph"]["values"][0]), "used twice"),
    (lambda d: d["graph"]["values"][0]["spec"].__setitem__("dtype", "float128"), "unknown dtype"),
    (lambda d: d["graph"]["outputs"].append("ghost"), "'ghost'"),
    (lambda d: d.__setitem__("metadata", {"k": 1}), "metadata"),
    (lambda d: d.pop("graph"), "missing key 'graph'"),
])
def test_malformed_graph_description(saved, mutate, fragment):
    _rewrite(saved, mutate)
    _expect(saved, fragment)


def test_any_single_byte_flip_is_detected_or_harmless(saved):
    """Flipping one byte anywhere either raises ModelFormatError or hits padding (same model)."""
    original = saved.read_bytes()
    reference = kk.load(saved)
    rng = np.random.default_rng(1)
    positions = list(range(kio.HEADER_SIZE)) + list(rng.integers(kio.HEADER_SIZE, len(original), 150))
    for pos in positions:
        raw = bytearray(original)
        raw[pos] ^= 0x5A
        saved.write_bytes(bytes(raw))
        try:
            model = kk.load(saved)
        except ModelFormatError as exc:
            assert str(saved) in str(exc)
            continue
        for name, value in reference.graph.values.items():
            if value.data is not None:
                _assert_same_array(model.graph.values[name].data, value.data)


# -- writing ----------------------------------------------------------------------------------
def test_failed_write_leaves_the_old_file(saved, monkeypatch):
    before = saved.read_bytes()

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(kio.os, "replace", broken_replace)
    with pytest.raises(ModelFormatError, match="cannot write"):
        kk.save(_model_with({"w": np.zeros(3, np.float32)}), saved)
    monkeypatch.undo()
    assert saved.read_bytes() == before
    assert sorted(p.name for p in saved.parent.iterdir()) == [saved.name]  # no temp file left
    _assert_same_array(kk.load(saved).graph.values["w"].data, np.arange(12, dtype=np.float32).reshape(3, 4))


def test_unstorable_attribute_fails_before_touching_the_file(saved):
    before = saved.read_bytes()
    with pytest.raises(ModelFormatError, match="node 'custom_0' attribute 'cfg'"):
        kk.save(_model_with({}, {"cfg": {"not": "storable"}}), saved)
    assert saved.read_bytes() == before
    assert sorted(p.name for p in saved.parent.iterdir()) == [saved.name]


def test_unstorable_dtype_names_the_value(tmp_path):
    g = Graph(name="g", inputs=[], outputs=["c"])
    g.values["c"] = Value("c", None, np.zeros(2, np.complex64))
    with pytest.raises(ModelFormatError, match="value 'c'.*complex64"):
        kk.save(Model(g), tmp_path / "c.kkm")
    assert not (tmp_path / "c.kkm").exists()


def test_save_over_a_loaded_mapped_file(saved):
    """Replacing a file whose weights are still mapped keeps the old views valid (rename, not rewrite)."""
    old = kk.load(saved)
    kk.save(_model_with({"w": np.full((3, 4), 7, np.float32), "k": np.ones(2, np.int64)}), saved)
    _assert_same_array(old.graph.values["w"].data, np.arange(12, dtype=np.float32).reshape(3, 4))
    _assert_same_array(kk.load(saved).graph.values["w"].data, np.full((3, 4), 7, np.float32))


def test_saved_file_gets_ordinary_permissions(tmp_path):
    (tmp_path / "plain").write_bytes(b"")
    kk.save(_model_with({}), tmp_path / "m.kkm")
    assert (tmp_path / "m.kkm").stat().st_mode == (tmp_path / "plain").stat().st_mode
