"""ONNX's backend node tests, picked for kernelkit's op set, run through ``onnx.backend.test``.

Shared by tests/test_onnx_backend.py and the report script (benchmarks/models/conformance_report.py).
Outputs are compared with ``kernelkit.testing.assert_close`` (kernelkit's tolerances), not ONNX's.
"""
from __future__ import annotations

import re
import unittest
import warnings
from functools import lru_cache

import kernelkit
from kernelkit.testing import assert_close
from onnx.backend.test import BackendTest

from .backend import VENDOR_DEVICES, KernelkitBackend
from .backend_exclusions import exclusions

_FREE_OPS = {"Constant"}  # become graph constants during conversion
_EXPANDED = re.compile(r"(.*)_expanded(_ver\d+)?$")


@lru_cache(maxsize=1)
def _node_test_ops() -> dict[str, tuple[str, ...]]:
    """Every ONNX node test -> the op types (domain-qualified if not default) of its graph."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():  # generating ONNX's expected outputs warns about inf/nan casts
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    out = {}
    for case in cases:
        out[case.name] = tuple(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}"
                               for n in case.model.graph.node)
    return out


def node_tests(ops=None) -> dict[str, str]:
    """Node tests of the ops in ``ops`` (default: kernelkit's op set) whose every node is in the
    set -> the op tested (an ``_expanded`` test, its function body, counts for its base test's op)."""
    ops = set(kernelkit.ops() if ops is None else ops) | _FREE_OPS
    all_tests = _node_test_ops()
    picked = {}
    for name, op_types in all_tests.items():
        if not op_types or not set(op_types) <= ops:
            continue
        base = _EXPANDED.match(name)
        if base:
            base_ops = all_tests.get(base.group(1), ())
            if len(base_ops) == 1 and base_ops[0] in ops:
                picked[name] = base_ops[0]
        else:
            main = [o for o in op_types if o not in _FREE_OPS] or list(op_types)
            picked[name] = main[-1] if len(set(main)) == 1 else "+".join(sorted(set(main)))
    return picked


def installed_vendors() -> list[str]:
    """Built-in vendors with kernels registered whose device can be opened here."""
    usable = []
    for vendor in sorted({k.vendor for k in kernelkit.kernels()} & set(VENDOR_DEVICES)):
        try:
            kernelkit.create_device(VENDOR_DEVICES[vendor], {})
        except kernelkit.KernelkitError:
            continue
        usable.append(vendor)
    return usable


def vendor_tests(vendor: str) -> dict[str, str]:
    """The node tests for ``vendor``: those of ops it has a kernel for (the reference: all)."""
    tests = node_tests()
    if vendor == "reference":
        return tests
    have = {k.op for k in kernelkit.kernels(vendor=vendor)}
    return {name: op for name, op in tests.items() if all(part in have for part in op.split("+"))}


class KernelkitBackendTest(BackendTest):
    """``BackendTest`` comparing with kernelkit's tolerances (per dtype) instead of ONNX's."""

    @classmethod
    def assert_similar_outputs(cls, ref_outputs, outputs, rtol, atol, model_dir=None) -> None:
        assert len(outputs) == len(ref_outputs), f"{len(outputs)} outputs, expected {len(ref_outputs)}"
        for i, (got, want) in enumerate(zip(outputs, ref_outputs)):
            assert_close(got, want, err_msg=f"output {i}")


def backend_test(vendor: str, module: str) -> tuple[type[unittest.TestCase], dict[str, str], dict[str, str]]:
    """A unittest class holding ``vendor``'s node tests (CPU variants) minus the exclusions.

    Returns (class, name -> op of the tests in it, name -> reason of the excluded ones)."""
    backend = KernelkitBackend.for_vendor(vendor)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner = KernelkitBackendTest(backend, module)
    items = runner._test_items["NodeModel"]  # name -> TestItem(func, proto); built by BackendTest
    rules = [(re.compile(p), reason) for p, reason in exclusions(vendor).items()]
    chosen, excluded = {}, {}
    for name, op in sorted(vendor_tests(vendor).items()):
        reason = next((r for p, r in rules if p.fullmatch(name)), None)
        if reason is not None:
            excluded[name] = reason
        elif f"{name}_cpu" in items:
            chosen[name] = op
    body = {f"{name}_cpu": items[f"{name}_cpu"].func for name in chosen}
    case = type(f"OnnxNodeTest_{vendor}", (unittest.TestCase,), {"__module__": module, **body})
    return case, chosen, excluded
