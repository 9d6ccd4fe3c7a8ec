"""Deployment YAML: parsing, strict keys and types, path containment, sessions and validation."""
from __future__ import annotations

import hashlib
import os
import textwrap

import kernelkit as kk
import numpy as np
import pytest
from kernelkit.deploy import load_deployment
from kernelkit.errors import ConfigError, InputError


@pytest.fixture
def folder(tmp_path):
    g = kk.GraphBuilder("relu_net")
    x = g.input("x", ("N", 4), "float32")
    g.output(g.op("Relu", x, name="y"))
    kk.save(g.build(), tmp_path / "net.kkm")
    return tmp_path


def _write(folder, body: str, name: str = "deploy.yml"):
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


FULL = """
    name: relu
    model: net.kkm
    device: cpu
    vendors: [reference]
    fallback: false
    threads: 2
    passes: []
    options: {note: hello}
    inputs:
      - name: x
        shape: [2, 4]
        dtype: float32
"""


def test_full_file_parses_and_runs(folder):
    dep = load_deployment(_write(folder, FULL))
    assert dep.name == "relu" and dep.model_path == (folder / "net.kkm").resolve()
    assert (dep.device, dep.vendors, dep.fallback, dep.threads, dep.passes) == ("cpu", ("reference",), False, 2, [])
    sess = dep.session()
    assert sess.vendors == ("reference",) and sess.threads == 2 and sess.fallback is False
    assert sess.options["note"] == "hello"
    assert sess.get_inputs()[0].shape == (2, 4)  # the declared shape fixed the symbolic batch
    x = np.array([[-1, 2, -3, 4], [5, -6, 7, -8]], np.float32)
    [y] = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    assert set(sess.placement().values()) == {("cpu", "reference")}
    with pytest.raises(InputError):
        sess.run(None, {"x": np.zeros((3, 4), np.float32)})


def test_minimal_file_uses_defaults(folder):
    dep = load_deployment(_write(folder, "model: net.kkm\n"))
    assert (dep.name, dep.device, dep.vendors, dep.fallback, dep.threads, dep.inputs) == \
        ("deploy", "cpu", None, True, None, [])
    [y] = dep.session(vendors=["reference"]).run(None, {"x": np.array([[-1, 1, 0, 2]] * 3, np.float32)})
    assert y.shape == (3, 4) and y.min() == 0 and y.max() == 2


def test_session_overrides(folder):
    sess = load_deployment(_write(folder, FULL)).session(threads=1, vendors=None)
    assert sess.threads == 1 and sess.vendors is None


def test_symbolic_shape_may_be_renamed_or_kept(folder):
    dep = load_deployment(_write(folder, """
        model: net.kkm
        inputs: [{name: x, shape: [batch, 4]}]
    """))
    assert dep.session().get_inputs()[0].shape == ("batch", 4)


@pytest.mark.parametrize("body,key,fragment", [
    ("model: net.kkm\nmodle: typo\n", "modle", "unknown key"),
    ("model: net.kkm\ninputs: [{name: x, shap: [1, 4]}]\n", "inputs[0].shap", "unknown key"),
    ("model: net.kkm\nvalidation: {data: net.kkm, tolerence: {}}\n", "validation.tolerence", "unknown key"),
    ("device: cpu\n", "model", "required key is missing"),
    ("model: 3\n", "model", "expected str"),
    ("model: net.kkm\nthreads: '2'\n", "threads", "positive int"),
    ("model: net.kkm\nthreads: true\n", "threads", "got bool"),
    ("model: net.kkm\nthreads: 0\n", "threads", ">= 1"),
    ("model: net.kkm\nfallback: 'yes'\n", "fallback", "expected bool"),
    ("model: net.kkm\nvendors: numba\n", "vendors", "list of strings"),
    ("model: net.kkm\nvendors: [numba, 3]\n", "vendors", "list of strings"),
    ("model: net.kkm\npasses: 3\n", "passes", "true, false or a list"),
    ("model: net.kkm\noptions: [1]\n", "options", "expected dict"),
    ("model: net.kkm\ninputs: {x: 1}\n", "inputs", "expected list"),
    ("model: net.kkm\ninputs: [{name: x, shape: [1, -4]}]\n", "inputs[0].shape", "non-negative"),
    ("model: net.kkm\ninputs: [{name: x, dtype: float128}]\n", "inputs[0].dtype", "unknown dtype"),
    ("model: net.kkm\ninputs: [7]\n", "inputs[0]", "expected a mapping"),
    ("model: net.kkm\nmodel_sha256: abc\n", "model_sha256", "64 hex digits"),
    ("model: net.kkm\nversion: 2\n", "version", "unknown deployment file version 2"),
    ("model: net.kkm\nvalidation: {data: net.kkm, tolerance: {float32: {rtol: x}}}\n",
     "validation.tolerance.float32.rtol", "a number"),
    ("model: net.kkm\nvalidation: {data: net.kkm, tolerance: {complex64: {rtol: 1}}}\n",
     "validation.tolerance.complex64", "unknown dtype"),
    ("model: missing.kkm\n", "model", "does not exist"),
])
def test_bad_keys_and_types_name_file_and_key(folder, body, key, fragment):
    path = _write(folder, body)
    with pytest.raises(ConfigError) as info:
        load_deployment(path)
    message = str(info.value)
    assert str(path) in message and key in message and fragment in message, message


@pytest.mark.parametrize("body", ["- just\n- a list\n", "model: [unclosed\n", "42\n", ""])
def test_not_a_mapping_or_not_yaml(folder, body):
    path = _write(folder, body)
    with pytest.raises(ConfigError, match=str(path)):
        load_deployment(path)


def test_only_safe_yaml_is_read(folder):
    marker = folder / "pwned"
    path = _write(folder, f"model: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_deployment(path)
    assert not marker.exists()


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_deployment(tmp_path / "absent.yml")


# -- paths ------------------------------------------------------------------------------------
@pytest.fixture
def nested(folder):
    sub = folder / "deploy"
    sub.mkdir()
    return sub


def test_model_path_escaping_the_folder_is_rejected(folder, nested):
    path = _write(nested, "model: ../net.kkm\n")  # the file exists, but outside the YAML's folder
    with pytest.raises(ConfigError, match="model: '../net.kkm' escapes"):
        load_deployment(path)


def test_absolute_model_path_is_rejected(folder, nested):
    path = _write(nested, f"model: {folder / 'net.kkm'}\n")
    with pytest.raises(ConfigError, match="model: .* must be a path relative"):
        load_deployment(path)


def test_symlink_out_of_the_folder_is_rejected(folder, nested):
    os.symlink(folder / "net.kkm", nested / "link.kkm")
    path = _write(nested, "model: link.kkm\n")
    with pytest.raises(ConfigError, match="escapes"):
        load_deployment(path)


def test_validation_data_escaping_is_rejected(folder, nested):
    (nested / "net.kkm").write_bytes((folder / "net.kkm").read_bytes())
    np.savez(folder / "outside.npz", x=np.zeros((1, 4), np.float32))
    path = _write(nested, "model: net.kkm\nvalidation: {data: ../outside.npz}\n")
    with pytest.raises(ConfigError, match="validation.data: '../outside.npz' escapes"):
        load_deployment(path)


def test_subfolder_paths_are_fine(folder):
    sub = folder / "models"
    sub.mkdir()
    (sub / "net.kkm").write_bytes((folder / "net.kkm").read_bytes())
    assert load_deployment(_write(folder, "model: models/./net.kkm\n")).model_path == (sub / "net.kkm").resolve()


# -- model checks -----------------------------------------------------------------------------
def test_model_sha256_is_checked(folder):
    digest = hashlib.sha256((folder / "net.kkm").read_bytes()).hexdigest()
    assert load_deployment(_write(folder, f"model: net.kkm\nmodel_sha256: {digest.upper()}\n")).session()
    path = _write(folder, f"model: net.kkm\nmodel_sha256: '{'0' * 64}'\n")
    with pytest.raises(ConfigError, match=f"{path}: model_sha256 does not match net.kkm"):
        load_deployment(path).session()


@pytest.mark.parametrize("inputs,key,fragment", [
    ("[{name: image}]", "inputs[0].name", "no input 'image'"),
    ("[{name: x, dtype: float64}]", "inputs[0].dtype", "does not match"),
    ("[{name: x, shape: [1, 4, 1]}]", "inputs[0].shape", "rank 3"),
    ("[{name: x, shape: [1, 5]}]", "inputs[0].shape", "does not fit"),
])
def test_declared_inputs_must_fit_the_model(folder, inputs, key, fragment):
    path = _write(folder, f"model: net.kkm\ninputs: {inputs}\n")
    with pytest.raises(ConfigError) as info:
        load_deployment(path).session()
    assert str(path) in str(info.value) and key in str(info.value) and fragment in str(info.value)


def test_unknown_pass_names_the_file(folder):
    path = _write(folder, "model: net.kkm\npasses: [no_such_pass]\n")
    with pytest.raises(ConfigError, match=f"{path}: passes: unknown pass.*no_such_pass"):
        load_deployment(path).session()


# -- validation -------------------------------------------------------------------------------
def _validation_file(folder, expected_shift: float = 0.0):
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    np.savez(folder / "check.npz", x=x, y=np.maximum(x, 0) + np.float32(expected_shift), unrelated=np.ones(2))
    return _write(folder, """
        model: net.kkm
        validation:
          data: check.npz
          tolerance:
            float32: {rtol: 0.0, atol: 0.01}
    """)


def test_validation_passes_against_expected_outputs(folder):
    dep = load_deployment(_validation_file(folder))
    assert dep.tolerance == {"float32": (0.0, 0.01)}
    [check] = dep.validate()
    assert check.name == "y" and check.dtype == "float32" and check.passed
    assert check.max_abs_error == 0.0 and check.cosine == pytest.approx(1.0)


def test_validation_uses_the_tolerance_by_dtype(folder):
    [within] = load_deployment(_validation_file(folder, expected_shift=0.005)).validate()
    assert within.passed and within.max_abs_error == pytest.approx(0.005, rel=1e-3)
    [beyond] = load_deployment(_validation_file(folder, expected_shift=0.05)).validate()
    assert not beyond.passed and beyond.max_abs_error == pytest.approx(0.05, rel=1e-3)


def test_validation_data_must_hold_inputs_and_an_output(folder):
    np.savez(folder / "bad.npz", x=np.zeros((1, 4), np.float32))
    path = _write(folder, "model: net.kkm\nvalidation: {data: bad.npz}\n")
    with pytest.raises(ConfigError, match="at least one output"):
        load_deployment(path).validate()


def test_validation_without_data_configured(folder):
    with pytest.raises(ConfigError, match="no validation data"):
        load_deployment(_write(folder, "model: net.kkm\n")).validate()


def test_pickled_validation_data_is_refused(folder):
    np.save(folder / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (folder / "obj.npz").write_bytes((folder / "obj.npy").read_bytes())  # not even a zip
    path = _write(folder, "model: net.kkm\nvalidation: {data: obj.npz}\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load_deployment(path).validate()
