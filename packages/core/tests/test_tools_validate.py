"""kernelkit validate (CLI and kernelkit.tools.validate), and deployment --validate without
expected outputs."""
from __future__ import annotations

import json
import textwrap

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import tools
from kernelkit.testing import isolate_registries


@pytest.fixture
def broken_relu(monkeypatch):
    """A wrong Relu kernel (adds 0.01) registered above every other CPU Relu kernel."""
    isolate_registries(monkeypatch)
    kk.register_kernel("Relu", device="cpu", vendor="broken", dtype="float32", priority=1000)(
        lambda x: np.maximum(x, 0) + np.float32(0.01))


def test_validate_against_onnxruntime_figures(tmp_path, conv_onnx):
    ort = pytest.importorskip("onnxruntime")
    x = np.random.default_rng(5).standard_normal((2, 3, 8, 8)).astype(np.float32)
    result = tools.validate(conv_onnx, inputs={"x": x}, vendors=["reference"])
    assert result.against == "onnxruntime" and result.passed
    [c] = result.outputs
    want = ort.InferenceSession(str(conv_onnx), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = kk.Session(conv_onnx, vendors=["reference"]).run(None, {"x": x})[0]
    assert c.name == "y" and c.shape == (2, 4, 8, 8) and (c.rtol, c.atol) == kk.testing.TOLERANCES["float32"]
    assert c.max_abs == pytest.approx(float(np.max(np.abs(got.astype(np.float64) - want))))
    assert c.cosine == pytest.approx(kk.testing.cosine(got, want))


def test_validate_cli_pass_json_and_inputs(run_cli, tmp_path, conv_onnx):
    pytest.importorskip("onnxruntime")
    np.savez(tmp_path / "in.npz", x=np.ones((3, 3, 8, 8), np.float32))
    code, out, err = run_cli("validate", conv_onnx, "--inputs", tmp_path / "in.npz", "--json",
                             tmp_path / "v.json", "--vendors", "reference")
    assert code == 0, err
    assert "vs onnxruntime" in out and "pass" in out and "cosine" in out
    doc = json.loads((tmp_path / "v.json").read_text())
    assert doc["passed"] and doc["inputs"]["x"]["shape"] == [3, 3, 8, 8]
    assert set(doc["outputs"][0]) >= {"name", "cosine", "max_abs_error", "max_rel_error", "rtol", "atol", "passed"}


def test_validate_fails_on_a_wrong_kernel(run_cli, conv_kkm, broken_relu):
    result = tools.validate(conv_kkm, against="reference", vendors=["broken", "reference"])
    assert not result.passed
    [c] = result.outputs
    assert c.max_abs == pytest.approx(0.01, rel=1e-3) and not c.passed
    code, out, _ = run_cli("validate", conv_kkm, "--against", "reference", "--vendors", "broken,reference")
    assert code == 1 and "FAIL" in out


def test_validate_against_onnxruntime_needs_onnx(run_cli, conv_kkm):
    code, _, err = run_cli("validate", conv_kkm, "--against", "onnxruntime")
    assert code == 2 and "needs an .onnx MODEL" in err


def test_deployment_validate_without_expected_outputs(run_cli, tmp_path, conv_onnx, broken_relu):
    pytest.importorskip("onnxruntime")
    (tmp_path / "deploy.yml").write_text(textwrap.dedent(f"""\
        model: {conv_onnx.name}
        vendors: [reference]
        passes: []
        """))
    code, out, err = run_cli("run", tmp_path / "deploy.yml", "--validate")
    assert code == 0 and "vs onnxruntime" in out, out + err
    # inputs only in the validation data: they are used, and a wrong kernel is caught
    np.savez(tmp_path / "inputs.npz", x=np.full((2, 3, 8, 8), -1.0, np.float32))
    (tmp_path / "deploy2.yml").write_text(textwrap.dedent(f"""\
        model: {conv_onnx.name}
        vendors: [broken, reference]
        passes: []
        validation: {{data: inputs.npz}}
        """))
    code, out, err = run_cli("run", tmp_path / "deploy2.yml", "--validate")
    assert code == 1 and "FAIL" in out and "[2, 4, 8, 8]" in out, out + err
