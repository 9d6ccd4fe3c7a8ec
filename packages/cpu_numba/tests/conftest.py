"""Shared helpers: run one op through a Session on the numba kernels only (fallback off) and on
the NumPy reference, and compare within kernelkit.testing.TOLERANCES."""
from __future__ import annotations

import importlib
import pkgutil

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from kernelkit.testing import assert_close, run_single_op

# Core registers its op modules from kernelkit/ops/__init__.py; importing every module here as
# well is a no-op once that list is complete and keeps these tests independent of its progress.
for _mod in pkgutil.iter_modules(importlib.import_module("kernelkit.ops").__path__):
    if not _mod.name.startswith("_"):
        importlib.import_module(f"kernelkit.ops.{_mod.name}")

# every example builds a session; JIT compilation happens once per kernel (then the disk cache)
settings.register_profile("numba", max_examples=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                                 HealthCheck.function_scoped_fixture])
settings.load_profile("numba")


def check_against_reference(op, inputs, attrs=None, *, constants=(), n_outputs=None):
    """Run ``op`` with vendor numba (no fallback) and with the reference; outputs must agree."""
    got = run_single_op(op, inputs, attrs, n_outputs, constants, vendors=["numba"], fallback=False)
    want = run_single_op(op, inputs, attrs, n_outputs, constants, vendors=["reference"], fallback=False)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert_close(g, w, err_msg=f"{op} output {i} attrs={attrs} shapes={[np.shape(x) for x in inputs]}")
    return got


@pytest.fixture
def check():
    """``check(op, inputs, attrs, constants=..., n_outputs=...)``: numba vs reference (a pure
    function, so hypothesis may reuse it across examples)."""
    return check_against_reference


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
