"""Runtime behaviour of the OpenCL backend: device selection, errors, async, threads, buffer pool."""
from __future__ import annotations

import subprocess
import sys
import threading

import kernelkit as kk
import numpy as np
import pytest
from kernelkit.testing import assert_close


def _reference(model, feeds):
    return kk.Session(model).run(None, feeds)


def test_entry_point_registers_device_and_kernels():
    from importlib.metadata import entry_points

    eps = [ep for ep in entry_points(group="kernelkit.backends") if ep.name == "opencl"]
    assert eps and eps[0].value == "kernelkit_opencl:initialize"
    assert kk.load_backends()["opencl"] == "ok"
    keys = kk.kernels(device="gpu", vendor="opencl")
    ops = {k.op for k in keys}
    assert {"Conv", "MatMul", "Gemm", "Add", "Relu", "MaxPool", "Softmax"} <= ops


def test_every_kernel_family_is_found_and_registered():
    """No hand-kept list: each public module of kernels/ is imported and its register() run."""
    from pathlib import Path

    import kernelkit_opencl.kernels

    kk.load_backends()
    folder = Path(kernelkit_opencl.kernels.__file__).parent
    public = sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))
    assert {"conv", "elementwise", "typed"} <= set(public)
    assert all(f"kernelkit_opencl.kernels.{name}" in sys.modules for name in public)
    modules = {kk.registry.kernel_entry(k).impl.__module__ for k in kk.kernels(device="gpu", vendor="opencl")}
    assert {f"kernelkit_opencl.kernels.{name}" for name in ("typed", "resize", "scan")} <= modules


def test_initialize_does_not_touch_opencl():
    code = ("import pyopencl as cl\n"
            "def boom(*a, **k): raise AssertionError('OpenCL probed at registration')\n"
            "cl.get_platforms = boom\n"
            "import kernelkit as kk\n"
            "assert kk.load_backends()['opencl'] == 'ok', kk.load_backends()\n"
            "assert kk.kernels(op='Conv', device='gpu')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


def test_session_on_gpu_reports_device_and_placement(rng, cnn):
    model = cnn()
    x = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    sess = kk.Session(model, device="gpu", fallback=False)
    assert set(sess.placement().values()) == {("gpu", "opencl")}
    assert "gpu:" in sess.devices()["gpu"] and "OpenCL" in sess.devices()["gpu"]
    for got, want in zip(sess.run(None, {"x": x}), _reference(model, {"x": x})):
        assert_close(got, want)


def test_device_option_and_env_var_select_device(monkeypatch, cnn):
    from kernelkit_opencl.runtime import OpenCLDevice, list_devices

    name = list_devices()[0].name
    dev = OpenCLDevice({"opencl_device": name.split()[0].lower()})
    assert dev.cl_device.name == name
    monkeypatch.setenv("KERNELKIT_OPENCL_DEVICE", "0")
    assert OpenCLDevice({}).cl_device.name == name
    monkeypatch.setenv("KERNELKIT_OPENCL_DEVICE", "no-such-vendor-xyz")
    with pytest.raises(kk.BackendUnavailableError, match="no-such-vendor-xyz.*available"):
        kk.Session(cnn(), device="gpu")


def test_missing_platform_is_typed_error_only_when_gpu_is_asked_for(monkeypatch, rng, cnn):
    import pyopencl as cl

    def none():
        raise cl.LogicError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")

    monkeypatch.setattr(cl, "get_platforms", none)
    model = cnn()
    x = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    assert kk.kernels(op="Conv", device="gpu")  # registration needs no platform
    assert kk.Session(model).run(None, {"x": x})[0].shape == (2, 5)  # CPU sessions unaffected
    with pytest.raises(kk.BackendUnavailableError, match="no OpenCL platform"):
        kk.Session(model, device="gpu")


def test_run_async_equals_run_and_does_not_block(rng, cnn):
    model = cnn()
    sess = kk.Session(model, device="gpu", fallback=False)
    feeds = [{"x": rng.standard_normal((2, 3, 12, 12)).astype(np.float32)} for _ in range(4)]
    sync = [sess.run(None, f) for f in feeds]
    futures = [sess.run_async(None, f) for f in feeds]  # all enqueued before any result is read
    for fut, want in zip(futures, sync):
        for a, b in zip(fut.result(timeout=60), want):
            np.testing.assert_array_equal(a, b)


def test_run_async_reports_errors_through_the_future(cnn):
    sess = kk.Session(cnn(), device="gpu", fallback=False)
    with pytest.raises(kk.InputError):
        sess.run_async(None, {"y": np.zeros(1, np.float32)})  # bad feeds: raised at once, as on CPU


def test_two_sessions_in_two_threads(rng, cnn):
    model = cnn()
    feeds = [{"x": rng.standard_normal((2, 3, 12, 12)).astype(np.float32)} for _ in range(2)]
    want = [_reference(model, f) for f in feeds]
    got: dict = {}
    errors: list = []

    def work(i):
        try:
            sess = kk.Session(model, device="gpu", fallback=False)
            got[i] = [sess.run(None, feeds[i]) for _ in range(3)]
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    for i in range(2):
        for run in got[i]:
            for a, b in zip(run, want[i]):
                assert_close(a, b)


def test_buffer_pool_reuses_intermediates_across_runs(rng, cnn):
    sess = kk.Session(cnn(), device="gpu", fallback=False)
    x = {"x": rng.standard_normal((2, 3, 12, 12)).astype(np.float32)}
    first = sess.run(None, x)
    pool = sess._devices["gpu"].pool
    allocated = pool.allocated
    for _ in range(3):
        again = sess.run(None, x)
    assert pool.allocated == allocated, "steady-state runs must not create buffers"
    assert pool.reused > 0
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


def test_caller_may_change_feeds_while_a_run_is_in_flight(rng, cnn):
    x = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    keep = x.copy()
    sess = kk.Session(cnn(), device="gpu", fallback=False)
    fut = sess.run_async(None, {"x": x})
    x[...] = 0  # the upload works on a private copy
    want = _reference(cnn(), {"x": keep})
    for got, ref in zip(fut.result(timeout=60), want):
        assert_close(got, ref)
        assert got.flags.writeable and got.flags.owndata
    np.testing.assert_array_equal(x, 0)


def test_fp16_policy_half_storage_float_math_and_fallback(rng):
    x = rng.uniform(-3, 3, (4, 5)).astype(np.float16)
    got = kk.testing.run_single_op("Sigmoid", [x], device="gpu", fallback=False)[0]
    want = kk.testing.run_single_op("Sigmoid", [x])[0]
    assert_close(got, want)
    xc = rng.standard_normal((1, 2, 5, 5)).astype(np.float16)
    w = rng.standard_normal((2, 2, 3, 3)).astype(np.float16)
    got = kk.testing.run_single_op("Conv", [xc, w], device="gpu", fallback=False)[0]
    assert got.dtype == np.float16
    assert_close(got, kk.testing.run_single_op("Conv", [xc, w])[0], "float16")
    with pytest.raises(kk.UnsupportedOpError, match="float16"):  # still float32 only: a clear refusal
        kk.testing.run_single_op("BatchNormalization", [xc, *(np.ones(2, np.float16),) * 4], device="gpu",
                                 fallback=False)


def test_profile_uses_event_timestamps(rng, cnn):
    sess = kk.Session(cnn(), device="gpu", fallback=False, options={"opencl_profile": True})
    sess.run(None, {"x": rng.standard_normal((2, 3, 12, 12)).astype(np.float32)})
    rows = sess._devices["gpu"].kernel_profile()
    labels = {r["kernel"].split()[0] for r in rows}
    assert {"conv", "depthwise", "Add", "max_pool", "global_pool", "gemm"} <= labels
    assert all(r["total_ms"] > 0 and r["calls"] >= 1 for r in rows)


@pytest.mark.parametrize("shape", [(3, 5), (600, 1000)])  # small: private copy; large: blocking write
def test_upload_is_safe_against_later_changes(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    keep = x.copy()
    g = kk.GraphBuilder("relu")
    g.output(g.op("Relu", g.input("x", shape)))
    sess = kk.Session(g.build(), device="gpu", fallback=False)
    fut = sess.run_async(None, {"x": x})
    x[...] = -1.0
    np.testing.assert_array_equal(fut.result(timeout=60)[0], np.maximum(keep, 0))


def test_tensors_beyond_32_bit_indexing_are_refused(device):
    with pytest.raises(kk.DeviceError, match="32-bit"):
        device.empty((1 << 16, 1 << 15), np.float32)  # 2**31 elements: never silently wrapped
