"""kernelkit_converters.onnx.backend: the onnx.backend.base.Backend interface."""
from __future__ import annotations

import numpy as np
import pytest
from _onnx_util import node_model, run_ort
from kernelkit.errors import InputError, UnsupportedOpError
from kernelkit.testing import assert_close
from kernelkit_converters.onnx import backend
from kernelkit_converters.onnx.backend import KernelkitBackend

rng = np.random.default_rng(5)


def test_prepare_and_run_with_a_list_or_a_dict():
    a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 2)).astype(np.float32)
    model = node_model("MatMul", {"a": a, "b": b}, ["y"], opset=13)
    rep = KernelkitBackend.prepare(model)
    (want,) = run_ort(model, {"a": a, "b": b})
    assert_close(rep.run([a, b])[0], want)
    assert_close(rep.run({"a": a, "b": b})[0], want)
    assert_close(backend.run_model(model, [a, b])[0], want)
    with pytest.raises(InputError, match="takes 2 inputs"):
        rep.run([a])


def test_vendor_backends_run_with_fallback_off():
    x = rng.standard_normal((2, 3)).astype(np.float32)
    model = node_model("Relu", {"x": x}, ["y"], opset=14)
    rep = KernelkitBackend.for_vendor("reference").prepare(model)
    assert set(rep.session.placement().values()) == {("cpu", "reference")}
    nobody = KernelkitBackend.for_vendor("no_such_vendor")
    assert not nobody.is_compatible(model)
    with pytest.raises(UnsupportedOpError, match="fallback=False"):
        nobody.prepare(model)


def test_supports_device():
    assert backend.supports_device("CPU")
    assert not backend.supports_device("CUDA")
