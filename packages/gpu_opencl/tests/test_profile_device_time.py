"""Session.profile()'s device_ms: OpenCL event time per node, through the public API, and
kernelkit bench --profile on the gpu device."""
from __future__ import annotations

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import tools


def test_profile_device_ms_per_node(rng, cnn):
    sess = kk.Session(cnn(), device="gpu", fallback=False, profile=True, options={"opencl_profile": True})
    x = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    sess.run(None, {"x": x})
    sess.reset_profile()  # forgets the first run's events too
    assert all(r["device_ms"] is None and r["calls"] == 0 for r in sess.profile())
    sess.run(None, {"x": x})
    rows = sess.profile()
    timed = [r for r in rows if r["device_ms"] is not None]
    assert timed and all(r["device_ms"] > 0 for r in timed)
    conv = [r for r in rows if r["op"] == "Conv"]
    assert conv and all(r["device_ms"] is not None and r["vendor"] == "opencl" for r in conv)
    # each node's device time matches the launches of its kernels: their sum is the device total
    total = sum(r["total_ms"] for r in sess._devices["gpu"].kernel_profile(reset=False))
    assert sum(r["device_ms"] for r in timed) == pytest.approx(total, rel=1e-9)


def test_bench_profile_on_gpu_reports_device_time(cnn):
    r = tools.bench(cnn(), device="gpu", runs=2, warmup=1, profile=True)
    assert r.device == "gpu" and r.stats["runs"] == 2
    conv = [x for x in r.profile if x["op"] == "Conv"]
    assert conv and all(x["calls"] == 2 and x["device_ms"] > 0 for x in conv)
    gpus = r.environment["gpus"]  # the OpenCL devices, with their driver versions
    assert gpus and all(g["name"] and g["driver"] and g["platform"] for g in gpus)
    assert r.environment["devices"]["gpu"].startswith("gpu: ")
