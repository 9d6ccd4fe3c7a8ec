"""Session options that register kernels are scoped to that session (registry.KernelScope): a
second session without the option, and the process-wide registry, never see them."""
from __future__ import annotations

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import RegistryError, backends
from kernelkit.registry import KernelScope, select_kernel
from kernelkit.testing import assert_close, isolate_registries

OPTION = "test_scoped_relu"


@pytest.fixture(autouse=True)
def hook(monkeypatch):
    """A backend hook that, like opencl_custom_kernels, registers a kernel named by an option."""
    isolate_registries(monkeypatch)
    monkeypatch.setattr(backends, "_session_hooks", list(backends._session_hooks))

    def on_session(device, options, scope):
        if options.get(OPTION):
            @scope.register_kernel("Relu", device="cpu", vendor="scoped", dtype="float32", priority=100)
            def relu_plus(x):
                return np.maximum(x, 0) + np.float32(options[OPTION])

    backends.register_session_hook(on_session)


def _model():
    g = kk.GraphBuilder("relu")
    g.output(g.op("Relu", g.input("x", (4,), "float32"), name="r"))
    return g.build()


def test_option_kernel_is_seen_by_its_session_only():
    x = np.array([-1, 0, 1, 2], np.float32)
    with_option = kk.Session(_model(), options={OPTION: 10.0})
    assert with_option.placement() == {"r": ("cpu", "scoped")}
    assert_close(with_option.run(None, {"x": x})[0], np.maximum(x, 0) + 10)
    without = kk.Session(_model())  # built after, in the same process
    assert without.placement()["r"][1] != "scoped"
    assert_close(without.run(None, {"x": x})[0], np.maximum(x, 0))
    assert kk.kernels(vendor="scoped") == []  # the process-wide registry never had it
    assert_close(with_option.run(None, {"x": x})[0], np.maximum(x, 0) + 10)  # the first keeps its kernel


def test_two_sessions_with_different_options_do_not_mix():
    x = np.array([-1, 3, -2, 5], np.float32)
    one, two = (kk.Session(_model(), options={OPTION: v}) for v in (1.0, 2.0))  # same key, two scopes
    assert_close(one.run(None, {"x": x})[0], np.maximum(x, 0) + 1)
    assert_close(two.run(None, {"x": x})[0], np.maximum(x, 0) + 2)


def test_scope_selection_and_duplicates():
    scope = KernelScope()
    scope.register_kernel("Relu", device="cpu", vendor="mine", dtype="float32", priority=100)(lambda x: x)
    with pytest.raises(RegistryError, match="already registered"):
        scope.register_kernel("Relu", device="cpu", vendor="mine", dtype="float32")(lambda x: x)
    assert select_kernel("Relu", "cpu", "float32", scope=scope).key.vendor == "mine"
    assert select_kernel("Relu", "cpu", "float32").key.vendor != "mine"
    assert select_kernel("Relu", "cpu", "float32", ["reference"], scope=scope).key.vendor == "reference"


def test_two_parameter_hooks_still_work(monkeypatch):
    seen = []
    backends.register_session_hook(lambda device, options: seen.append((device, dict(options))))
    kk.Session(_model(), options={"x": 1})
    assert seen == [("cpu", {"x": 1})]
