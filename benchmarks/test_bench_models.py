"""Real models, batch 1: kernelkit's reference kernels (and numba when installed) side by side with
onnxruntime (1 and 2 threads) and onnx's ReferenceEvaluator, one benchmark group per model.

    pytest benchmarks/test_bench_models.py --benchmark-columns=mean,median,stddev,rounds
    python benchmarks/models/export.py     # optional: benchmark the torch exports instead of the zoo

Models come from $KERNELKIT_MODELS / the user cache (benchmarks/models/export.py) when exported
there, else from the torch-free builders in benchmarks/models/zoo.py (same architectures).
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import onnx
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("kernelkit_converters")

import kernelkit  # noqa: E402
from kernelkit.testing import MODEL_COSINE, cosine  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402

_spec = importlib.util.spec_from_file_location("kernelkit_zoo", Path(__file__).parent / "models" / "zoo.py")
zoo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(zoo)

MODEL_NAMES = ["resnet18", "resnet50", "mobilenet_v2", "transformer", "mlp"]
ROUNDS = {"onnx-reference-evaluator": 2}


def _models_dir() -> Path:
    if os.environ.get("KERNELKIT_MODELS"):
        return Path(os.environ["KERNELKIT_MODELS"])
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("kernelkit")) / "models"


def _load(name: str) -> tuple[onnx.ModelProto, str]:
    path = _models_dir() / f"{name}.onnx"
    if path.is_file():
        return onnx.load(str(path)), f"torch export {path}"
    return zoo.MODELS[name](), "benchmarks/models/zoo.py"


_cache: dict[str, tuple] = {}


def _model(name: str):
    if name not in _cache:
        proto, source = _load(name)
        shape = zoo.input_shape(proto, 1)
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        _cache[name] = (proto, source, x)
    return _cache[name]


def _ort(proto, threads: int):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    sess = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda x: sess.run(None, {"x": x})[0]


def _kernelkit(proto, vendors):
    sess = kernelkit.Session(convert(proto), vendors=vendors)
    return lambda x: sess.run(None, {"x": x})[0]


def _evaluator(proto):
    from onnx.reference import ReferenceEvaluator

    ev = ReferenceEvaluator(proto)
    return lambda x: ev.run(None, {"x": x})[0]


CONTENDERS = {
    "kernelkit-reference": lambda p: _kernelkit(p, ["reference"]),
    "kernelkit-numba": lambda p: _kernelkit(p, ["numba", "reference"]),
    "onnxruntime-1-thread": lambda p: _ort(p, 1),
    "onnxruntime-2-threads": lambda p: _ort(p, 2),
    "onnx-reference-evaluator": _evaluator,
}


@pytest.mark.parametrize("contender", list(CONTENDERS))
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_model_latency(benchmark, name, contender):
    if contender == "kernelkit-numba" and not kernelkit.kernels(vendor="numba"):
        pytest.skip("kernelkit-numba is not installed")
    proto, source, x = _model(name)
    run = CONTENDERS[contender](proto)
    benchmark.group = f"{name} (batch 1)"
    benchmark.extra_info["source"] = source
    y = benchmark.pedantic(run, args=(x,), rounds=ROUNDS.get(contender, 10), iterations=1, warmup_rounds=1)
    want = _ort(proto, 2)(x)
    assert cosine(y, want) >= MODEL_COSINE
