"""Fixtures for the OpenCL backend tests (PoCL here and in CI; any OpenCL device works)."""
from __future__ import annotations

import kernelkit as kk
import numpy as np
import pytest


def _has_opencl() -> bool:
    try:
        from kernelkit_opencl.runtime import list_devices

        return bool(list_devices())
    except Exception:  # noqa: BLE001
        return False


# CI installs the pocl extra, so a missing platform is a broken environment, not a reason to skip:
# fail loudly instead of passing vacuously.
@pytest.fixture(scope="session", autouse=True)
def opencl_present():
    assert _has_opencl(), "no OpenCL device: install the pocl extra (pip install '.[pocl]')"


@pytest.fixture
def device():
    from kernelkit_opencl.runtime import OpenCLDevice

    return OpenCLDevice({"opencl_tune": False})


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    """An empty kernelkit cache folder (programs, tuned parameters) for this test."""
    monkeypatch.setenv("KERNELKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def cnn():
    """Builds the small CNN used across these tests: ``cnn(batch)`` -> Model."""
    return small_cnn


def small_cnn(batch: int = 2):
    """Conv(+Relu) -> depthwise Conv(Clip) -> Add -> MaxPool -> GlobalAveragePool -> Flatten -> Gemm."""
    rng = np.random.default_rng(7)
    g = kk.GraphBuilder("small_cnn")
    x = g.input("x", (batch, 3, 12, 12), "float32")
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    y = g.op("Conv", x, w1, np.zeros(8, np.float32), pads=[1, 1, 1, 1], activation="Relu")
    w2 = rng.standard_normal((8, 1, 3, 3)).astype(np.float32) * 0.3
    z = g.op("Conv", y, w2, None, pads=[1, 1, 1, 1], group=8, activation="Clip", activation_params=[0.0, 6.0])
    s = g.op("Add", y, z)
    p = g.op("MaxPool", s, kernel_shape=[2, 2], strides=[2, 2])
    f = g.op("Flatten", g.op("GlobalAveragePool", p), axis=1)
    out = g.op("Gemm", f, rng.standard_normal((5, 8)).astype(np.float32), np.ones(5, np.float32), transB=1)
    g.output(out, p)
    return g.build()
