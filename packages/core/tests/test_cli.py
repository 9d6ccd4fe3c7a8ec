"""The kernelkit command line, driven through cli.main([...]) with captured output."""
from __future__ import annotations

import re
import sys
import textwrap

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import cli
from kernelkit.ir import TensorSpec

REF = ["--vendors", "reference"]


@pytest.fixture
def relu_model(tmp_path):
    g = kk.GraphBuilder("relu_net")
    x = g.input("x", ("N", 4), "float32")
    g.output(g.op("Relu", x, name="y"))
    path = tmp_path / "relu.kkm"
    kk.save(g.build(), path)
    return path


def _run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _assert_error(code, err, kind, *fragments):
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err  # one line, no traceback
    assert lines[0].startswith(f"error[{kind}]: "), err
    for fragment in fragments:
        assert fragment in lines[0], err


# -- run ---------------------------------------------------------------------------------------
def test_run_with_inputs_saves_outputs(capsys, tmp_path, relu_model):
    x = np.array([[-1.5, 2.0, -0.0, 3.25], [4, -5, 6, -7]], np.float32)
    np.save(tmp_path / "x.npy", x)
    out_dir = tmp_path / "out"
    code, out, err = _run(capsys, "run", relu_model, "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", out_dir,
                          *REF)
    assert code == 0, err
    saved = np.load(out_dir / "y.npy")
    np.testing.assert_array_equal(saved, np.maximum(x, 0))
    assert "[2, 4]" in out and "float32" in out and str(out_dir / "y.npy") in out
    assert re.search(r"\b0\b.*\b6\b.*\b1\.90625\b", out), out  # min, max, mean of the output


def test_run_prints_one_line_about_fallbacks(capsys, relu_model):
    code, out, err = _run(capsys, "run", relu_model, "--vendors", "nobody")
    assert code == 0, err
    lines = [line for line in out.splitlines() if line.startswith("fallback:")]
    assert len(lines) == 1 and re.fullmatch(r"fallback: 1 node\(s\) not on cpu vendors \['nobody'\]: 1 on cpu/\w+; "
                                            r"0 host<->device copies added \(kernelkit info lists them\)", lines[0])
    assert "FallbackWarning" not in err  # the warning became that line


def test_info_shows_the_memory_plan(capsys, relu_model):
    code, out, err = _run(capsys, "info", relu_model, "--dim", "N=8", *REF)
    assert code == 0, err
    assert "memory plan (bytes)" in out and "live peak" in out
    sess = kk.Session(kk.load(relu_model), vendors=["reference"])
    assert sess.memory({"x": (8, 4)})["weights_bytes"] == 0


def test_run_with_random_inputs(capsys, tmp_path, relu_model):
    code, out, _ = _run(capsys, "run", relu_model, "--seed", 3, "--output-dir", tmp_path, *REF)
    assert code == 0
    assert "input x: random float32[1, 4] (symbolic dims set to 1)" in out
    expected = np.maximum(np.random.default_rng(3).standard_normal((1, 4)).astype(np.float32), 0)
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), expected)


def test_run_benchmark_prints_latency(capsys, relu_model):
    code, out, _ = _run(capsys, "run", relu_model, "--benchmark", 4, *REF)
    assert code == 0
    assert all(col in out for col in ("mean", "p50", "p90", "p99", "p99.9", "max", "inf/s")), out
    row = re.search(r"kernelkit\s*│\s*4\s*│\s*([\d.]+)\s*│\s*([\d.]+)\s*│\s*([\d.]+)", out)
    assert row and float(row.group(1)) > 0 and float(row.group(3)) > 0, out  # mean, min


def test_output_names_are_made_safe_file_names(capsys, tmp_path):
    g = kk.GraphBuilder("odd")
    x = g.input("x", (2,), "float32")
    g.output(g.op("Neg", x, name="../evil/name:0"))
    kk.save(g.build(), tmp_path / "odd.kkm")
    code, _, _ = _run(capsys, "run", tmp_path / "odd.kkm", "--output-dir", tmp_path / "o", *REF)
    assert code == 0
    assert [p.name for p in (tmp_path / "o").iterdir()] == [".._evil_name_0.npy"]


DEPLOY = """\
    model: relu.kkm
    vendors: [reference]
    inputs: [{name: x, shape: [3, 4], dtype: float32}]
    validation: {data: check.npz}
"""


@pytest.fixture
def deployment(tmp_path, relu_model):
    x = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    np.savez(tmp_path / "check.npz", x=x, y=np.maximum(x, 0))
    path = tmp_path / "relu.yml"
    path.write_text(textwrap.dedent(DEPLOY))
    return path


def test_run_deployment_uses_its_settings(capsys, deployment):
    code, out, _ = _run(capsys, "run", deployment)
    assert code == 0
    assert "input x: random float32[3, 4]" in out  # the YAML's shape, not the file's symbolic one


def test_run_validate_passes_and_fails(capsys, tmp_path, deployment):
    code, out, _ = _run(capsys, "run", deployment, "--validate")
    assert code == 0 and "pass" in out and "y" in out
    x = np.load(tmp_path / "check.npz")["x"]
    np.savez(tmp_path / "check.npz", x=x, y=np.maximum(x, 0) + 1)
    code, out, _ = _run(capsys, "run", deployment, "--validate")
    assert code == 1 and "FAIL" in out and re.search(r"│\s*1\s*│", out)  # max |error| is 1


# -- errors ------------------------------------------------------------------------------------
def test_missing_model_file(capsys, tmp_path):
    code, _, err = _run(capsys, "run", tmp_path / "absent.kkm")
    _assert_error(code, err, "KK_MODEL_FORMAT", "absent.kkm", "cannot read")


def test_corrupt_model_file(capsys, relu_model):
    relu_model.write_bytes(b"not a model at all" * 10)
    code, _, err = _run(capsys, "info", relu_model)
    _assert_error(code, err, "KK_MODEL_FORMAT", str(relu_model), "bad magic")


@pytest.mark.parametrize("argv,kind,fragment", [
    (["--input", "x"], "KK_INPUT", "expected name=file.npy"),
    (["--input", "z=missing.npy"], "KK_INPUT", "cannot read missing.npy"),
    (["--device", "tpu"], "KK_BACKEND_UNAVAILABLE", "'tpu'"),
    (["--vendors", "nobody", "--validate"], "KK_INPUT", "--validate needs a deployment"),
    (["--benchmark", "-1"], "KK_INPUT", "--benchmark must be >= 0"),
    (["--threads", "0"], "KK_INPUT", "--threads >= 1"),
])
def test_run_user_errors(capsys, relu_model, argv, kind, fragment):
    code, _, err = _run(capsys, "run", relu_model, *argv)
    _assert_error(code, err, kind, fragment)


def test_npz_given_as_one_input(capsys, tmp_path, relu_model):
    np.savez(tmp_path / "two.npz", a=np.zeros(2), b=np.ones(2))
    code, _, err = _run(capsys, "run", relu_model, "--input", f"x={tmp_path / 'two.npz'}", *REF)
    _assert_error(code, err, "KK_INPUT", "several arrays")


def test_wrong_input_shape_and_unknown_input(capsys, tmp_path, relu_model):
    np.save(tmp_path / "bad.npy", np.zeros((2, 5), np.float32))
    code, _, err = _run(capsys, "run", relu_model, "--input", f"x={tmp_path / 'bad.npy'}", *REF)
    _assert_error(code, err, "KK_INPUT", "input 'x'", "(2, 5)")
    code, _, err = _run(capsys, "run", relu_model, "--input", f"q={tmp_path / 'bad.npy'}", *REF)
    _assert_error(code, err, "KK_INPUT", "['q']", "['x']")


def test_bad_deployment_file(capsys, tmp_path, relu_model):
    path = tmp_path / "bad.yml"
    path.write_text("model: relu.kkm\nthreds: 2\n")
    code, _, err = _run(capsys, "run", path)
    _assert_error(code, err, "KK_CONFIG", str(path), "threds")


def test_unwritable_output_dir(capsys, tmp_path, relu_model):
    (tmp_path / "file").write_text("")
    code, _, err = _run(capsys, "run", relu_model, "--output-dir", tmp_path / "file" / "sub", *REF)
    _assert_error(code, err, "KK_IO", "file")


def test_usage_errors_exit_2(capsys):
    assert cli.main([]) == 2
    assert cli.main(["run", "--benchmark", "many"]) == 2
    assert cli.main(["--help"]) == 0
    assert "run" in capsys.readouterr().out


# -- info --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def scaled_op():
    """A custom op with a flops function: y = 2 x, counted as one FLOP per element."""
    def infer(ctx):
        return ctx.inputs[0]

    def flops(ctx):
        return ctx.inputs[0].size

    kk.register_op("Scale2", domain="test.cli", inputs=["X"], outputs=["Y"], infer=infer, flops=flops,
                   override=True)
    kk.register_kernel("Scale2", domain="test.cli", device="cpu", vendor="reference", dtype="float32",
                       override=True)(lambda x: x * np.float32(2))
    return "Scale2"


def test_info_reports_model_facts(capsys, tmp_path, scaled_op):
    g = kk.GraphBuilder("info_net")
    x = g.input("x", ("N", 3, 5), "float32")
    h = g.op("Scale2", x, domain="test.cli")
    h = g.op("Add", h, g.constant(np.ones((3, 5), np.float32), "bias"))
    g.output(g.op("Relu", h, name="y"))
    kk.save(g.build(), tmp_path / "info.kkm")
    code, out, err = _run(capsys, "info", tmp_path / "info.kkm", "--dim", "N=4", *REF)
    assert code == 0, err
    assert "info_net" in out and "['N', 3, 5]" in out  # the file's symbolic shape is shown
    assert re.search(r"test\.cli::Scale2\s*│\s*1\s*│", out)
    assert "parameters: 15 (0.000 MB)" in out
    assert "FLOPs: 60 (with N=4)" in out  # 4*3*5 elements, from the op's flops function
    assert re.search(r"ops without a flops function count 0: .*Add.*Relu", out)
    assert "passes fired:" in out
    assert re.search(r"cpu\s*│\s*reference\s*│\s*\d", out)


def test_info_symbolic_dims_default_to_one(capsys, tmp_path, scaled_op):
    g = kk.GraphBuilder("sym")
    g.output(g.op("Scale2", g.input("x", ("B", 7), "float32"), domain="test.cli"))
    kk.save(g.build(), tmp_path / "sym.kkm")
    code, out, _ = _run(capsys, "info", tmp_path / "sym.kkm", *REF)
    assert code == 0 and "FLOPs: 7 (with B=1)" in out


def test_info_bad_dim(capsys, relu_model):
    code, _, err = _run(capsys, "info", relu_model, "--dim", "N=x")
    _assert_error(code, err, "KK_INPUT", "SYMBOL=INT")


# -- kernels -----------------------------------------------------------------------------------
def test_kernels_table(capsys):
    keys = kk.kernels(op="Relu", vendor="reference")
    code, out, _ = _run(capsys, "kernels", "--op", "Relu", "--vendor", "reference")
    assert code == 0 and keys
    assert f"registered kernels ({len(keys)})" in out
    for key in keys:
        assert re.search(rf"Relu\s*│\s*cpu\s*│\s*reference\s*│\s*{key.dtype}\s*│\s*-100", out), key


def test_kernels_filter_without_match(capsys):
    code, out, _ = _run(capsys, "kernels", "--op", "Relu", "--vendor", "nobody")
    assert code == 0 and "registered kernels (0)" in out


def test_kernels_unknown_op_suggests_close_names(capsys):
    code, out, err = _run(capsys, "kernels", "--op", "Convv")
    _assert_error(code, err, "KK_INPUT", "'Convv'", "did you mean", "Conv")
    assert out == ""
    code, _, err = _run(capsys, "kernels", "--op", "relu")
    _assert_error(code, err, "KK_INPUT", "did you mean Relu")
    code, _, err = _run(capsys, "kernels", "--op", "Qwertyuiop")
    _assert_error(code, err, "KK_INPUT", "no kernel is registered", "kernelkit kernels lists all")


def test_kernels_and_info_json(capsys, tmp_path, relu_model):
    import json

    code, out, _ = _run(capsys, "kernels", "--op", "Relu", "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == len(kk.kernels(op="Relu"))
    ref = next(r for r in rows if r["vendor"] == "reference" and r["dtype"] == "float32")
    assert ref == {"op": "Relu", "device": "cpu", "vendor": "reference", "dtype": "float32", "layout": "",
                   "priority": -100, "implementation": ref["implementation"]}
    assert ref["implementation"].startswith("kernelkit.ops.")
    code, out, _ = _run(capsys, "info", relu_model, "--dim", "N=3", "--json", *REF)
    facts = json.loads(out)
    assert code == 0 and facts["name"] == "relu_net" and facts["dims"] == {"N": 3}
    assert facts["io"] == [{"kind": "input", "name": "x", "shape": ["N", 4], "dtype": "float32"},
                           {"kind": "output", "name": "y", "shape": ["N", 4], "dtype": "float32"}]
    assert facts["ops"] == {"Relu": {"file": 1, "after_passes": 1}} and facts["parameters"] == 0
    assert facts["placement"] == [{"device": "cpu", "vendor": "reference", "nodes": 1, "ops": ["Relu"]}]
    assert facts["layouts"] == {} and facts["reorders"] == 0
    code, out, _ = _run(capsys, "info", relu_model, "--json", tmp_path / "i.json", *REF)
    assert code == 0 and "inputs and outputs" in out and json.loads((tmp_path / "i.json").read_text())["flops"] == 0


def test_every_flag_has_help():
    parser = cli._parser()
    subs = next(a for a in parser._actions if a.choices and isinstance(a.choices, dict)).choices
    for name, sub in [("kernelkit", parser), *subs.items()]:
        for action in sub._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help text"


# -- convert -----------------------------------------------------------------------------------
def test_convert_without_the_extra(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "kernelkit_converters.onnx", None)  # import raises ImportError
    code, _, err = _run(capsys, "convert", tmp_path / "m.onnx", "-o", tmp_path / "m.kkm")
    _assert_error(code, err, "KK_MISSING_EXTRA", "converters")


def test_convert_onnx_model(capsys, tmp_path):
    pytest.importorskip("kernelkit_converters.onnx")
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "onnx_relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), tmp_path / "m.onnx")
    code, out, err = _run(capsys, "convert", tmp_path / "m.onnx", "-o", tmp_path / "m.kkm")
    assert code == 0, err
    assert "wrote" in out and "sha256" in out
    model = kk.load(tmp_path / "m.kkm")
    assert model.graph.values[model.graph.inputs[0]].spec == TensorSpec((2, 3), "float32")
    x = np.array([[-1, 0, 1], [2, -3, 4]], np.float32)
    [y] = kk.Session(model, vendors=["reference"]).run(None, {model.graph.inputs[0]: x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))


def test_version_lists_kernelkit_and_every_installed_backend(capsys):
    from importlib.metadata import entry_points

    code, out, _ = _run(capsys, "--version")
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0].startswith(f"kernelkit {kk.__version__} (Python {sys.version.split()[0]}"), out
    for ep in entry_points(group="kernelkit.backends"):  # what is installed, read independently
        dist = ep.dist
        assert any(line.startswith(f"{dist.name} {dist.version}") and ep.name in line for line in lines), out
    code, short, _ = _run(capsys, "-V")
    assert code == 0 and short == out
