"""Models quantized by onnxruntime's quantizer (through kernelkit_converters.quantize) run on kernelkit
and agree with onnxruntime running the same int8 model: cosine >= 0.999 and the same top-1 on 100
inputs, on the numba kernels (fused QDQ groups) and on the reference kernels op by op.

Small versions of benchmarks/models/zoo.py's ResNet-18 and MobileNetV2 (static, QDQ, per-channel)
and the MLP and transformer encoder (dynamic). Weights are 7-bit (``reduce_range``) so that
onnxruntime's AVX2 kernels, which saturate uint8 x int8 pair sums without VNNI, compute the exact
products here too (docs/quantization.md)."""
from __future__ import annotations

import builtins
import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest

pytest.importorskip("kernelkit_converters")
ort = pytest.importorskip("onnxruntime")

import kernelkit  # noqa: E402
from kernelkit.cli import main  # noqa: E402
from kernelkit.errors import ConfigError  # noqa: E402
from kernelkit.testing import cosine  # noqa: E402
from kernelkit_converters import quantize as quantize_module  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402
from kernelkit_converters.quantize import MissingQuantizerError, quantize  # noqa: E402

_spec = importlib.util.spec_from_file_location("kernelkit_zoo", Path(__file__).parents[1] / "benchmarks/models/zoo.py")
zoo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(zoo)

MODES = {"resnet18": "static", "mobilenet_v2": "static", "mlp": "dynamic", "transformer": "dynamic"}
COSINE = 0.999


def _inputs(proto, batch, seed):
    return np.random.default_rng(seed).standard_normal(zoo.input_shape(proto, batch)).astype(np.float32)


@pytest.fixture(scope="module", params=sorted(MODES))
def quantized(request, tmp_path_factory):
    name = request.param
    folder = tmp_path_factory.mktemp(name)
    proto = zoo.SMALL[name]()
    onnx.save(proto, folder / "float.onnx")
    calibration = None
    if MODES[name] == "static":
        calibration = folder / "calibration"
        calibration.mkdir()
        for i in range(8):
            np.save(calibration / f"{i}.npy", _inputs(proto, 1, 100 + i))
    path = quantize(folder / "float.onnx", folder / "int8.onnx", mode=MODES[name], calibration=calibration,
                    reduce_range=True)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    oracle = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return name, proto, path, oracle


@pytest.mark.parametrize("vendors,passes", [(None, None), (["reference"], False)], ids=["numba-fused", "reference"])
def test_int8_model_agrees_with_onnxruntime(quantized, vendors, passes):
    name, proto, path, oracle = quantized
    model = convert(path)
    ops = {n.op for n in model.graph.nodes}
    assert ops & ({"QuantizeLinear", "DequantizeLinear"} if MODES[name] == "static" else
                  {"DynamicQuantizeLinear", "MatMulInteger"}), ops
    session = kernelkit.Session(model, vendors=vendors, passes=passes)
    x = _inputs(proto, 100, 0)
    (want,) = oracle.run(None, {"x": x})
    (got,) = session.run(None, {"x": x})
    assert cosine(got, want) >= COSINE, name
    np.testing.assert_array_equal(got.argmax(-1), want.argmax(-1), err_msg=f"{name}: top-1 differs")
    if passes is None and MODES[name] == "static":  # the QDQ groups became integer kernels on numba
        fused = [n.op_id for n in session.graph.nodes if n.op_id in ("QLinearConv", "com.microsoft::QGemm")]
        assert fused and all(session.placement()[n.name] == ("cpu", "numba") for n in session.graph.nodes
                             if n.op_id in ("QLinearConv", "com.microsoft::QGemm")), name


def test_cli_convert_quantize(tmp_path, capsys):
    proto = zoo.SMALL["resnet18"]()
    onnx.save(proto, tmp_path / "cnn.onnx")
    (tmp_path / "calib").mkdir()
    for i in range(2):
        np.save(tmp_path / "calib" / f"{i}.npy", _inputs(proto, 1, i))
    assert main(["convert", str(tmp_path / "cnn.onnx"), "-o", str(tmp_path / "cnn.kkm"), "--quantize", "static",
                 "--calibration", str(tmp_path / "calib")]) == 0
    model = kernelkit.load(tmp_path / "cnn.kkm")
    assert "QuantizeLinear" in {n.op for n in model.graph.nodes}
    assert main(["convert", str(tmp_path / "cnn.onnx"), "-o", str(tmp_path / "x.kkm"), "--quantize", "static"]) == 2
    assert "KK_CONFIG" in capsys.readouterr().err


def test_calibration_folder_errors(tmp_path):
    with pytest.raises(ConfigError, match="no .npy or .npz"):
        quantize_module.calibration_feeds(tmp_path, ["x"])
    np.save(tmp_path / "a.npy", np.zeros(3, np.float32))
    with pytest.raises(ConfigError, match="one-input model"):
        quantize_module.calibration_feeds(tmp_path, ["x", "y"])
    np.save(tmp_path / "b.npy", np.array([object()], dtype=object), allow_pickle=True)
    with pytest.raises(ConfigError, match="cannot be read"):  # no pickle: model inputs are data
        quantize_module.calibration_feeds(tmp_path, ["x"])


def test_missing_onnxruntime_is_a_typed_error(monkeypatch, tmp_path):
    real_import = builtins.__import__

    def no_onnxruntime(name, *args, **kwargs):
        if name.startswith("onnxruntime"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_onnxruntime)
    with pytest.raises(MissingQuantizerError, match="pip install onnxruntime"):
        quantize(tmp_path / "m.onnx", tmp_path / "q.onnx", mode="dynamic")
