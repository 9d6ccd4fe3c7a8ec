"""ONNX's backend node tests over kernelkit's op set, once per installed vendor, fallback off.

The tests of each op come from ``onnx.backend.test`` (its node test cases); which run, and the
exclusions with their reasons, are decided in kernelkit_converters.onnx.conformance and
backend_exclusions. Outputs are compared with kernelkit.testing.assert_close.
"""
from __future__ import annotations

import pytest

pytest.importorskip("kernelkit_converters")

from kernelkit_converters.onnx.conformance import backend_test, installed_vendors  # noqa: E402

for _vendor in installed_vendors():
    _case, _tests, _excluded, _missing = backend_test(_vendor, __name__)
    globals()[_case.__name__] = _case
