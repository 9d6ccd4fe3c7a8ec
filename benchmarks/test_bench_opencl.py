"""The OpenCL backend on PoCL (this machine's CPU) next to the numba backend and the reference, on
the graphs benchmarks/gpu/run_gpu.py measures on the GPU (ResNet-18, ResNet-50, MobileNetV2 with
folded BatchNorm), batch 1, plus SGEMM. No target: it is for CI and the record.

    pytest benchmarks/test_bench_opencl.py --benchmark-columns=mean,median,rounds
    KK_BENCH_RES=224 pytest benchmarks/test_bench_opencl.py     # full resolution (default 112)
"""
from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("kernelkit_opencl")

import kernelkit as kk  # noqa: E402
from kernelkit.testing import MODEL_COSINE, cosine  # noqa: E402

_spec = importlib.util.spec_from_file_location("kk_gpu_models", Path(__file__).parent / "gpu" / "models.py")
models = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(models)

RES = int(os.environ.get("KK_BENCH_RES", "112"))
BACKENDS = {  # name -> Session arguments
    "opencl-pocl": {"device": "gpu", "fallback": False, "options": {"opencl_device": "pocl"}},
    "numba": {"vendors": ["numba", "reference"]},
    "reference": {"vendors": ["reference"]},
}
_cache: dict = {}


def _case(name):
    if name not in _cache:
        model = models.MODELS[name](1, RES)
        x = np.random.default_rng(0).standard_normal((1, 3, RES, RES)).astype(np.float32)
        _cache[name] = (model, x, kk.Session(model, vendors=["reference"]).run(None, {"x": x})[0])
    return _cache[name]


@pytest.mark.parametrize("backend", list(BACKENDS))
@pytest.mark.parametrize("name", ["resnet18", "resnet50", "mobilenetv2"])
def test_model(benchmark, name, backend):
    if backend == "numba":
        pytest.importorskip("kernelkit_numba")
    model, x, want = _case(name)
    sess = kk.Session(model, **BACKENDS[backend])
    got = sess.run(None, {"x": x})[0]  # warm-up: builds programs / JIT
    assert cosine(got, want) >= MODEL_COSINE
    benchmark.group = f"{name} b1 {RES}x{RES}"
    benchmark.pedantic(sess.run, args=(None, {"x": x}), rounds=3, warmup_rounds=1)


@pytest.mark.parametrize("n", [256, 512])
@pytest.mark.parametrize("backend", ["opencl-pocl", "numba", "reference"])
def test_sgemm(benchmark, n, backend):
    if backend == "numba":
        pytest.importorskip("kernelkit_numba")
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
    g = kk.GraphBuilder("sgemm")
    g.output(g.op("MatMul", g.input("a", (n, n)), g.constant(b)))
    sess = kk.Session(g.build(), **BACKENDS[backend])
    np.testing.assert_allclose(sess.run(None, {"a": a})[0], a @ b, rtol=1e-4, atol=1e-3 * n ** 0.5)
    benchmark.group = f"sgemm {n}"
    benchmark.extra_info["gflops"] = 2 * n**3 / 1e9
    benchmark.pedantic(sess.run, args=(None, {"a": a}), rounds=5, warmup_rounds=1)
