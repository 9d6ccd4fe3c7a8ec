"""kernelkit bisect (CLI and kernelkit.tools.bisect) with deliberately wrong kernels registered at a
higher priority: the culprit is named with its kernel key and fused activation, and its repro test
fails until the wrong kernel is unregistered, then passes."""
from __future__ import annotations

import importlib.util
import json

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import tools
from kernelkit.errors import FallbackWarning
from kernelkit.ops.conv import conv as reference_conv
from kernelkit.registry import unregister_kernel
from kernelkit.testing import isolate_registries


def forgetful_conv(x, w, b=None, **attrs):
    """A wrong Conv kernel: ignores the activation fused into it."""
    return reference_conv(x, w, b, **{**attrs, "activation": "", "activation_params": ()})


@pytest.fixture
def registries(monkeypatch):
    isolate_registries(monkeypatch)


def _load_test(folder):
    [path] = folder.glob("test_*.py")
    spec = importlib.util.spec_from_file_location(f"repro_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [getattr(module, n) for n in dir(module) if n.startswith("test_")]


def test_bisect_clean_model_finds_nothing(conv_kkm, tmp_path):
    result = tools.bisect(conv_kkm, vendors=["reference"], repro_dir=tmp_path / "repro")
    assert result.culprit is None and result.repro is None and not (tmp_path / "repro").exists()
    assert [c.node for c in result.checks] == ["conv", "y"] and all(c.passed for c in result.checks)
    assert result.checks[0].activation == "Relu" and result.outputs[0].max_abs == 0.0


def test_bisect_names_the_wrong_kernel_and_its_repro_fails_then_passes(conv_kkm, tmp_path, registries):
    kk.register_kernel("Conv", device="cpu", vendor="forgetful", dtype="float32", priority=1000)(forgetful_conv)
    result = tools.bisect(conv_kkm, repro_dir=tmp_path / "repro")
    culprit = result.culprit
    assert culprit.node == "conv" and culprit.key == ("Conv", "cpu", "forgetful", "float32")
    assert culprit.activation == "Relu"  # the fused activation the kernel forgot
    assert [c.node for c in result.failing] == ["conv"]  # Add ran on the reference's inputs: it agrees
    [out] = culprit.outputs
    assert not out.passed and out.max_abs > 0.1
    assert not result.outputs[0].passed  # and the model's output is wrong too
    folder = result.repro
    assert {p.name for p in folder.iterdir()} == {"node.kkm", "inputs.npz", "report.json", "test_conv.py"}
    node = kk.load(folder / "node.kkm")
    assert [n.op for n in node.graph.nodes] == ["Conv"] and node.graph.nodes[0].attrs["activation"] == "Relu"
    with np.load(folder / "inputs.npz") as data:
        assert data["in0"].shape == (1, 3, 8, 8)
    assert json.loads((folder / "report.json").read_text())["key"] == ["Conv", "cpu", "forgetful", "float32"]
    [test] = _load_test(folder)
    with pytest.raises(AssertionError):
        test()
    unregister_kernel("Conv", device="cpu", vendor="forgetful", dtype="float32")
    with pytest.warns(FallbackWarning, match="forgetful"):
        test()  # the kernel is gone: the repro passes (on the kernel selection falls back to)
    assert tools.bisect(conv_kkm).culprit is None


def test_bisect_cli(run_cli, conv_kkm, tmp_path, registries):
    kk.register_kernel("Add", device="cpu", vendor="offbyone", dtype="float32", priority=1000)(
        lambda a, b: a + b + np.float32(1e-3))
    code, out, err = run_cli("bisect", conv_kkm, "--batch", 2, "--repro", tmp_path / "r", "--json", tmp_path / "b.json")
    assert code == 1, err
    assert "first node out of tolerance: 'y' (Add), kernel ('Add', 'cpu', 'offbyone', 'float32')" in out
    assert (tmp_path / "r" / "test_y.py").exists()
    doc = json.loads((tmp_path / "b.json").read_text())
    assert doc["culprit"]["node"] == "y" and doc["nodes"][0]["passed"] and not doc["nodes"][1]["passed"]
    assert doc["culprit"]["outputs"][0]["max_abs_error"] == pytest.approx(1e-3, rel=1e-2)
    code, out, _ = run_cli("bisect", conv_kkm, "--vendors", "reference", "--repro", tmp_path / "r2")
    assert code == 0 and "all 2 nodes agree" in out


def test_bisect_names_a_crashing_kernel(conv_kkm, tmp_path, registries):
    def crash(a, b):
        raise ValueError("boom")

    kk.register_kernel("Add", device="cpu", vendor="crashy", dtype="float32", priority=1000)(crash)
    result = tools.bisect(conv_kkm, vendors=["crashy", "reference"], repro_dir=tmp_path / "r")
    assert "boom" in result.run_error and result.outputs == []
    c = result.culprit
    assert c.node == "y" and c.key == ("Add", "cpu", "crashy", "float32") and "boom" in c.error
    [test] = _load_test(result.repro)
    with pytest.raises(kk.KernelExecutionError, match="boom"):
        test()


def test_bisect_multi_output_int_and_folded_outputs(tmp_path, registries):
    """Split (two outputs), a Shape->Cast output that the passes fold into a constant, int outputs."""
    g = kk.GraphBuilder("edge")
    x = g.input("x", ("B", 6), "float32")
    a, b = g.op("Split", x, np.array([2, 4], np.int64), axis=1, outputs=2, name="split")
    g.output(g.op("Mul", a, a, name="sq"), g.op("Cast", g.op("Shape", b, name="shape"), to=1, name="cast"),
             g.op("ArgMax", b, axis=1, name="argmax"))
    model = g.build()
    result = tools.bisect(model, batch=3, vendors=["reference"])
    assert result.culprit is None and {c.node for c in result.checks} >= {"split", "sq", "argmax"}
    assert [o.name for o in result.outputs] == ["sq", "cast", "argmax"] and all(o.passed for o in result.outputs)
    kk.register_kernel("ArgMax", device="cpu", vendor="wrong", dtype="float32", priority=1000)(
        lambda x, *, axis=0, keepdims=1, select_last_index=0: np.argmin(x, axis=axis, keepdims=bool(keepdims)))
    result = tools.bisect(model, batch=3)
    assert result.culprit.node == "argmax" and result.culprit.key == ("ArgMax", "cpu", "wrong", "float32")
    [out] = result.culprit.outputs
    assert out.dtype == "int64" and (out.rtol, out.atol) == (0.0, 0.0) and not out.passed


def test_bisect_reports_a_pass_that_changes_the_result(conv_kkm, registries):
    def drop_bias(graph, ctx):
        """A wrong pass: turns the Add of the bias into a Relu."""
        for node in graph.nodes:
            if node.op == "Add":
                node.op, node.inputs = "Relu", node.inputs[:1]
                return 1
        return 0

    kk.register_pass("drop_bias", drop_bias)
    result = tools.bisect(conv_kkm, vendors=["reference"])
    assert result.culprit is None  # every kernel is right...
    [changed] = result.passes  # ...but the graph after passes computes something else
    assert changed.name == "y" and not changed.passed and changed.max_abs == pytest.approx(1.0)
