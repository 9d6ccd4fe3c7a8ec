"""Robustness of the file side: corrupted .kkm files, hostile deployment YAML and bad command
lines. Model and config files are data: any damage gives ModelFormatError / ConfigError naming the
file (or loads a model equal to the original when the damage hit padding), the CLI answers one
``error[...]`` line with status 2, and nothing crashes, hangs, executes or allocates gigabytes.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import time
import tracemalloc
import warnings

import kernelkit as kk
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernelkit import ConfigError, KernelkitError, ModelFormatError, Session, cli
from kernelkit.deploy import load_deployment
from kernelkit.fuzz import _paths  # every key/index path into a YAML tree
from kernelkit.testing import assert_close

HEADER = struct.Struct("<8sIIQQQ32s")
SCALE = int(os.environ.get("KK_FUZZ_SCALE", "1"))  # e.g. KK_FUZZ_SCALE=20 for a deeper local search
FUZZ = settings(max_examples=60 * SCALE, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


# -- a small model, saved once ------------------------------------------------------------------------
def _model():
    rng = np.random.default_rng(0)
    g = kk.GraphBuilder("small")
    x = g.input("x", ("N", 4), "float32")
    w = g.constant(rng.standard_normal((3, 4)).astype(np.float32), name="w")
    b = g.constant(rng.standard_normal(3).astype(np.float32), name="b")
    y = g.op("Gemm", x, w, b, transB=1, alpha=0.5, name="gemm")
    g.output(g.op("LeakyRelu", y, alpha=0.1, name="y"))
    return g.build()


def _expected(x, model):
    w, b = (model.graph.values[n].data for n in ("w", "b"))
    y = 0.5 * (x.astype(np.float64) @ w.T) + b
    return np.where(y >= 0, y, 0.1 * y).astype(np.float32)


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    path = tmp_path_factory.mktemp("kkm") / "small.kkm"
    kk.save(_model(), path)
    return path.read_bytes()


def _write(tmp_path, raw: bytes, name: str = "m.kkm"):
    path = tmp_path / name
    path.write_bytes(raw)
    return path


def _same_model(a: kk.Model, b: kk.Model) -> None:
    ga, gb = a.graph, b.graph
    assert (ga.name, ga.inputs, ga.outputs) == (gb.name, gb.inputs, gb.outputs)
    assert [(n.op, n.name, n.inputs, n.outputs, n.domain) for n in ga.nodes] == \
        [(n.op, n.name, n.inputs, n.outputs, n.domain) for n in gb.nodes]
    for na, nb in zip(ga.nodes, gb.nodes):
        assert na.attrs == nb.attrs
    assert set(ga.values) == set(gb.values)
    for name, va in ga.values.items():
        vb = gb.values[name]
        assert va.spec == vb.spec
        if va.data is not None:
            assert vb.data.dtype == va.data.dtype and vb.data.tobytes() == va.data.tobytes()
    assert (a.opsets, a.producer, a.metadata) == (b.opsets, b.producer, b.metadata)


def _load_or_reject(path, reference: kk.Model | None, verify: bool = True):
    """Load ``path``: a ModelFormatError naming it, or a model; with ``reference`` it must equal it."""
    try:
        model = kk.load(path, verify=verify)
    except ModelFormatError as exc:
        assert str(path) in str(exc)
        return None
    if reference is not None:
        _same_model(model, reference)
    return model


def _build_and_run_or_typed_error(model: kk.Model) -> None:
    """A model that loaded (checksums off) builds and runs, or fails with a KernelkitError."""
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            Session(model, vendors=["reference"]).run(None, {"x": x})
        except KernelkitError:
            pass


def test_saved_model_loads_and_runs(tmp_path, original):
    model = kk.load(_write(tmp_path, original))
    _same_model(model, _model())
    x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
    (y,) = Session(model, vendors=["reference"]).run(None, {"x": x})
    assert_close(y, _expected(x, model))


@FUZZ
@given(data=st.data())
def test_byte_flips_are_detected_or_harmless(tmp_path, original, data):
    raw = bytearray(original)
    for _ in range(data.draw(st.integers(1, 3))):
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] ^= data.draw(st.integers(1, 255))
    path = _write(tmp_path, bytes(raw))
    _load_or_reject(path, _model())  # checksums on: equal to the original or rejected
    model = _load_or_reject(path, None, verify=False)  # checksums off: structure still checked
    if model is not None:
        _build_and_run_or_typed_error(model)


@FUZZ
@given(keep=st.integers(0, 10**6), garbage=st.binary(min_size=1, max_size=80))
def test_truncated_or_extended_files_are_rejected(tmp_path, original, keep, garbage):
    for raw in (original[: keep % len(original)], original + garbage, garbage + original):
        for verify in (True, False):
            with pytest.raises(ModelFormatError, match="m.kkm"):
                kk.load(_write(tmp_path, raw), verify=verify)


def _parts(raw: bytes):
    header = HEADER.unpack_from(raw, 0)
    doc = json.loads(raw[HEADER.size:HEADER.size + header[3]])
    return header, doc, raw[header[4]:header[4] + header[5]]


def _with_json(raw: bytes, doc=None, text: bytes | None = None) -> bytes:
    """The file with its JSON replaced (consistent header and checksum), so that the loader's
    structural checks, not the checksum, must catch the damage."""
    header, _, blob = _parts(raw)
    text = json.dumps(doc).encode() if text is None else text
    offset = -(-(HEADER.size + len(text)) // 64) * 64
    head = HEADER.pack(header[0], header[1], header[2], len(text), offset, len(blob), hashlib.sha256(text).digest())
    return head + text + b"\0" * (offset - HEADER.size - len(text)) + blob


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)


@settings(max_examples=150 * SCALE, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_json_with_wrong_types_and_values_is_rejected_or_runs(tmp_path, original, data):
    _, doc, _ = _parts(original)
    for _ in range(data.draw(st.integers(1, 2))):
        path = data.draw(st.sampled_from([p for p in _paths(doc) if p]))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if data.draw(st.integers(0, 4)) == 0 and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(JSON_VALUES)
    model = _load_or_reject(_write(tmp_path, _with_json(original, doc)), None)
    if model is not None:
        _build_and_run_or_typed_error(model)


@pytest.mark.parametrize("mutate, fragment", [
    (lambda d: d["tensors"][0].update(shape=[2**31, 2**31], length=2**64), "outside the blob"),
    (lambda d: d["tensors"][0].update(shape=[0, 2**62], length=0), "tensors[0]"),
    (lambda d: d["tensors"][0].update(shape=[0, 2**70], length=0), "tensors[0]"),
    (lambda d: d["tensors"][0].update(offset=-2**70), "outside the blob"),
    (lambda d: d["tensors"].extend([d["tensors"][0]] * 2000), "tensors"),  # fine: many views of one blob
    (lambda d: d["graph"]["nodes"].append(dict(d["graph"]["nodes"][0], name="again")), "'again'"),
    (lambda d: d["graph"]["inputs"].append("x"), "names an input twice"),
    (lambda d: d["graph"]["nodes"][0].update(outputs=["w"]), "also a graph input, a constant"),
])
@pytest.mark.parametrize("verify", [True, False])
def test_absurd_json_claims_do_not_allocate(tmp_path, original, mutate, fragment, verify):
    _, doc, _ = _parts(original)
    mutate(doc)
    path = _write(tmp_path, _with_json(original, doc))
    tracemalloc.start()
    try:
        try:
            model = kk.load(path, verify=verify)
        except ModelFormatError as exc:
            assert str(path) in str(exc) and fragment in str(exc)
        else:
            assert len(model.graph.nodes) == 2  # only the duplicated tensor entries are harmless
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 * 2**20, f"loading allocated {peak / 2**20:.0f} MiB"


def test_a_node_without_outputs_is_a_typed_error(tmp_path, original):
    _, doc, _ = _parts(original)
    doc["graph"]["nodes"].append(dict(doc["graph"]["nodes"][1], name="dead", outputs=[]))
    model = kk.load(_write(tmp_path, _with_json(original, doc)))
    with pytest.raises(kk.ShapeError, match="node 'dead' .*no outputs"):  # a pass indexed outputs[0]
        Session(model)
    doc["graph"]["nodes"][1]["outputs"] = []  # as the JSON fuzzer found it: the graph output is lost
    model = kk.load(_write(tmp_path, _with_json(original, doc)))
    with pytest.raises(ModelFormatError, match=r"outputs \['y'\] are never produced"):
        Session(model)


@pytest.mark.parametrize("field, value", [(3, 2**63), (3, 2**64 - 1), (4, 2**63), (5, 2**64 - 1), (4, 64)])
def test_absurd_header_sizes_are_rejected_quickly(tmp_path, original, field, value):
    fields = list(HEADER.unpack_from(original, 0))
    fields[field] = value
    path = _write(tmp_path, HEADER.pack(*fields) + original[HEADER.size:])
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        with pytest.raises(ModelFormatError, match="header"):
            kk.load(path, verify=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20 and time.perf_counter() - t0 < 5


@pytest.mark.parametrize("text, fragment", [
    pytest.param(b"[" * 100_000, "RecursionError", id="deep-nesting"), (b"\xff\xfe{}", "UnicodeDecodeError"),
    (b'{"a": ' + b"9" * 5000 + b"}", "invalid JSON"), (b"null", "object at the top level"),
    (b"NaN", "object at the top level"), (b"", "invalid JSON"),
])
def test_garbage_json_with_a_valid_checksum(tmp_path, original, text, fragment):
    with pytest.raises(ModelFormatError, match=fragment):
        kk.load(_write(tmp_path, _with_json(original, text=text)))


@pytest.mark.parametrize("target", ["folder", "fifo", "nul", "int", "none"])
def test_paths_that_are_not_model_files(tmp_path, target):
    if target == "fifo":
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs on this platform")
        os.mkfifo(tmp_path / "pipe.kkm")  # opening it would block forever
    path = {"folder": tmp_path, "fifo": tmp_path / "pipe.kkm", "nul": f"{tmp_path}/a\0b.kkm",
            "int": 5, "none": None}[target]
    with pytest.raises(ModelFormatError):
        kk.load(path)
    with pytest.raises(ModelFormatError):
        Session(path)


# -- deployment YAML --------------------------------------------------------------------------------
@pytest.fixture
def folder(tmp_path, original):
    (tmp_path / "dep").mkdir()
    (tmp_path / "dep" / "m.kkm").write_bytes(original)
    np.savez(tmp_path / "dep" / "v.npz", x=np.ones((1, 4), np.float32))
    (tmp_path / "outside.kkm").write_bytes(original)
    return tmp_path / "dep"


def _deploy(folder, body):
    path = folder / "d.yml"
    (path.write_bytes if isinstance(body, bytes) else path.write_text)(body)
    return load_deployment(path)


@pytest.mark.parametrize("body, fragment", [
    ("!!python/object/apply:os.mkdir ['pwned']\n", "could not determine a constructor"),
    ("model: !!python/object/apply:os.mkdir ['pwned']\n", "could not determine a constructor"),
    ("model: !!python/name:os.system\n", "could not determine a constructor"),
    ("model: !!binary bS5ra20=\n", "model: expected str, got bytes"),
    ("- model: m.kkm\n", "top level: expected a mapping, got list"),
    ("42\n", "expected a mapping, got int"),
    ("", "expected a mapping, got NoneType"),
    ("~\n", "expected a mapping, got NoneType"),
    ("model: [m.kkm\n", "invalid YAML"),
    ("model:\tm.kkm\n\t- x", "invalid YAML"),
    (b"model: \xff\xfe\n", "cannot read deployment file"),
    pytest.param("model: m.kkm\noptions: " + "[" * 5000 + "]" * 5000 + "\n", "invalid YAML", id="deep-nesting"),
    ("model: [m.kkm]\n", "model: expected str, got list"),
    ("model: m.kkm\nversion: '1'\n", "version: expected int"),
    ("model: m.kkm\nthreads: 2.5\n", "threads: expected a positive int"),
    ("model: m.kkm\nthreads: 0\n", "threads: must be >= 1"),
    ("model: m.kkm\nfallback: 'yes please'\n", "fallback: expected bool"),
    ("model: m.kkm\nvendors: numba\n", "vendors: expected a list of strings"),
    ("model: m.kkm\npasses: [1]\n", "passes: expected a list of pass names"),
    ("model: m.kkm\nname: 2001-12-14\n", "name: expected str, got date"),
    ("model: m.kkm\n1: 2\n", r"unknown key(s) ['1']"),
    ("model: m.kkm\ninputs: {name: x}\n", "inputs: expected list"),
    ("model: m.kkm\ninputs: [x]\n", "inputs[0]: expected a mapping"),
    ("model: m.kkm\ninputs: [{name: x, shape: [.inf, 4]}]\n", "inputs[0].shape"),
    ("model: m.kkm\ninputs: [{name: x, shape: [-1, 4]}]\n", "inputs[0].shape"),
    ("model: m.kkm\ninputs: [{name: x, dtype: float128}]\n", "inputs[0].dtype: unknown dtype"),
    ("model: m.kkm\nmodel_sha256: 1234\n", "model_sha256: expected a quoted sha256"),
    ("model: m.kkm\nvalidation: {data: v.npz, tolerance: {float32: {rtol: .inf}}}\n", "finite and non-negative"),
    ("model: m.kkm\nvalidation: {data: v.npz, tolerance: {float32: {atol: .nan}}}\n", "finite and non-negative"),
    ("model: m.kkm\nvalidation: {data: v.npz, tolerance: {1: {rtol: 1}}}\n", "tolerance.1: unknown dtype"),
    ("model: ../outside.kkm\n", "escapes the deployment file's folder"),
    ("model: sub/../../outside.kkm\n", "escapes"),
    ("model: /etc/passwd\n", "must be a path relative"),
    ("model: '.'\n", "does not exist"),
    ('model: "m\\0.kkm"\n', "is not a usable path"),
    pytest.param("model: " + "a" * 5000 + "\n", "is not a usable path", id="name-too-long"),
    ("model: m.kkm\nvalidation: {data: ../../etc/passwd}\n", "validation.data"),
])
def test_bad_deployment_files_are_config_errors(folder, body, fragment):
    with pytest.raises(ConfigError, match=r"d\.yml") as info:
        _deploy(folder, body)
    assert fragment in str(info.value)
    assert not (folder / "pwned").exists()


def test_symlink_escaping_the_folder_is_a_config_error(folder):
    (folder / "link.kkm").symlink_to(folder.parent / "outside.kkm")
    with pytest.raises(ConfigError, match="escapes"):
        _deploy(folder, "model: link.kkm\n")


def test_a_good_deployment_still_runs(folder):
    dep = _deploy(folder, "model: m.kkm\ninputs: [{name: x, shape: [B, 4], dtype: float32}]\n")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    model = dep.model()
    (y,) = dep.session(vendors=["reference"]).run(None, {"x": x})
    assert_close(y, _expected(x, model))


YAML_SCALARS = st.none() | st.booleans() | st.integers(-10, 10) | st.floats() | st.text(max_size=8)
YAML_VALUES = st.recursive(YAML_SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
KEYS = ["version", "name", "model", "model_sha256", "device", "vendors", "fallback", "threads", "passes",
        "options", "inputs", "validation", "other"]


@settings(max_examples=80 * SCALE, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(doc=st.dictionaries(st.sampled_from(KEYS), YAML_VALUES, max_size=5), text=st.text(max_size=40))
def test_random_yaml_gives_config_errors_only(folder, doc, text):
    import yaml

    for body in (yaml.safe_dump(dict(doc, model="m.kkm")), yaml.safe_dump(doc), text):
        try:
            _deploy(folder, body)
        except ConfigError as exc:
            assert "d.yml" in str(exc)


# -- CLI --------------------------------------------------------------------------------------------
def _cli(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def cli_files(folder):
    np.save(folder / "obj.npy", np.array([object()], dtype=object), allow_pickle=True)
    np.save(folder / "f64.npy", np.ones((1, 4)))
    (folder / "garbage.npy").write_bytes(b"\x93NUMPY garbage")
    (folder / "bad.yml").write_text("model: ../outside.kkm\n")
    (folder / "corrupt.kkm").write_bytes(b"\x89KKM\r\n\x1a\n" + b"\0" * 10)
    return folder


@pytest.mark.parametrize("argv, code", [
    ([], "KK_USAGE"), (["bogus"], "KK_USAGE"), (["run", "--nope"], "KK_USAGE"), (["info"], "KK_USAGE"),
    (["run", "--benchmark", "many"], "KK_USAGE"), (["run", "{m}", "extra"], "KK_USAGE"),
    (["kernels", "--op"], "KK_USAGE"),
    (["run", "{d}/absent.kkm"], "KK_MODEL_FORMAT"), (["info", "{d}"], "KK_MODEL_FORMAT"),
    (["run", "{d}/corrupt.kkm"], "KK_MODEL_FORMAT"), (["run", "{d}/bad.yml"], "KK_CONFIG"),
    (["run", "{m}", "--seed", "-1"], "KK_INPUT"), (["run", "{m}", "--threads", "0"], "KK_INPUT"),
    (["run", "{m}", "--benchmark", "-1"], "KK_INPUT"), (["run", "{m}", "--input", "x"], "KK_INPUT"),
    (["run", "{m}", "--input", "=x.npy"], "KK_INPUT"), (["run", "{m}", "--input", "x={d}/obj.npy"], "KK_INPUT"),
    (["run", "{m}", "--input", "x={d}/f64.npy"], "KK_INPUT"),
    (["run", "{m}", "--input", "x={d}/garbage.npy"], "KK_INPUT"),
    (["run", "{m}", "--input", "x={d}/absent.npy"], "KK_INPUT"), (["run", "{m}", "--input", "x={d}"], "KK_INPUT"),
    (["run", "{m}", "--input", "nope={d}/f64.npy"], "KK_INPUT"), (["run", "{m}", "--validate"], "KK_INPUT"),
    (["run", "{m}", "--device", "nope"], "KK_BACKEND_UNAVAILABLE"),
    (["run", "{m}", "--output-dir", "{d}/m.kkm/sub"], "KK_IO"),
    (["info", "{m}", "--dim", "N=-1"], "KK_INPUT"),
])
def test_bad_command_lines_give_one_error_line_and_status_2(capsys, cli_files, argv, code):
    argv = [a.format(d=cli_files, m=cli_files / "m.kkm") for a in argv]
    status, _, err = _cli(capsys, *argv)
    lines = err.strip().splitlines()
    assert status == 2, err
    assert len(lines) == 1 and lines[0].startswith(f"error[{code}]: "), err
    assert "Traceback" not in err


def test_cli_still_runs_a_good_model(capsys, cli_files):
    np.save(cli_files / "x.npy", np.ones((2, 4), np.float32))
    status, out, err = _cli(capsys, "run", cli_files / "m.kkm", "--input", f"x={cli_files / 'x.npy'}",
                            "--output-dir", cli_files / "out", "--vendors", "reference")
    assert status == 0, err
    model = kk.load(cli_files / "m.kkm")
    assert_close(np.load(cli_files / "out" / "y.npy"), _expected(np.ones((2, 4), np.float32), model))
