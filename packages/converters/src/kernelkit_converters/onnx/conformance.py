"""ONNX's backend node tests (all of them) run through ``onnx.backend.test``.

Shared by tests/test_onnx_backend.py and benchmarks/models/conformance_report.py. Outputs are
compared with ``kernelkit.testing.assert_close`` (kernelkit's tolerances), not ONNX's. For a vendor
other than the reference, a test runs when the vendor has a kernel for every node of it (fallback
is off, so a missing kernel is a coverage gap, counted apart, not a wrong answer). A test using an
op listed in ``backend_exclusions.UNSUPPORTED_OPS`` is excluded with that op's reason; any other
test runs, so an op nobody implemented or excluded is a failure.
"""
from __future__ import annotations

import re
import unittest
import warnings
from functools import cache, lru_cache

import kernelkit
from kernelkit.errors import KernelkitError, UnsupportedOpError
from kernelkit.session import Session
from kernelkit.testing import assert_close
from onnx import ModelProto
from onnx.backend.test import BackendTest

from .backend import VENDOR_DEVICES, KernelkitBackend
from .backend_exclusions import UNSUPPORTED_OPS, exclusions
from .importer import convert

_FREE_OPS = {"Constant"}  # become graph constants during conversion
_EXPANDED = re.compile(r"(.*)_expanded(_ver\d+)?$")


@lru_cache(maxsize=1)
def _node_cases() -> dict[str, ModelProto]:
    """Every ONNX node test name -> its model."""
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings():  # generating ONNX's expected outputs warns about inf/nan casts
        warnings.simplefilter("ignore")
        return {case.name: case.model for case in load_model_tests(kind="node")}


def _op_types(model: ModelProto) -> tuple[str, ...]:
    return tuple(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}::{n.op_type}" for n in model.graph.node)


def node_tests() -> dict[str, str]:
    """Every ONNX node test -> the op it tests: the test's ops other than ``Constant``, joined by
    ``+``; an ``_expanded`` test (the op's function body) counts for its base test's op."""
    all_ops = {name: _op_types(model) for name, model in _node_cases().items()}
    picked = {}
    for name, op_types in all_ops.items():
        base = _EXPANDED.match(name)
        if base and base.group(1) in all_ops:
            op_types = all_ops[base.group(1)]
        main = sorted(set(op_types) - _FREE_OPS) or sorted(set(op_types))
        picked[name] = "+".join(main)
    return picked


def _unsupported(model: ModelProto) -> str | None:
    """The exclusion reason of the first op of ``model`` listed in ``UNSUPPORTED_OPS``, if any."""
    registered = set(kernelkit.ops())
    for op in _op_types(model):
        if op in UNSUPPORTED_OPS and op not in registered:
            return f"{op}: {UNSUPPORTED_OPS[op]}"
    return None


def installed_vendors() -> list[str]:
    """Built-in vendors with kernels registered whose device can be opened here."""
    usable = []
    for vendor in sorted({k.vendor for k in kernelkit.kernels()} & set(VENDOR_DEVICES)):
        try:
            kernelkit.create_device(VENDOR_DEVICES[vendor], {})
        except KernelkitError:
            continue
        usable.append(vendor)
    return usable


@cache
def _converted(name: str):
    """Node test ``name`` converted once for every vendor's kernel check (None if it does not convert)."""
    try:
        return convert(_node_cases()[name], check=False)
    except Exception:  # noqa: BLE001 - the test itself reports it
        return None


def has_kernels(vendor: str, name: str) -> bool:
    """Whether a fallback-free session on ``vendor`` can be built for node test ``name``; errors other
    than a missing kernel count as buildable (the test then reports them)."""
    if vendor == "reference":
        return True
    model = _converted(name)
    if model is None:
        return True
    try:
        Session(model, device=VENDOR_DEVICES[vendor], vendors=[vendor], fallback=False)
    except UnsupportedOpError as exc:
        return "no kernel" not in str(exc)
    except Exception:  # noqa: BLE001 - reported by the test itself
        return True
    return True


def vendor_tests(vendor: str) -> tuple[dict[str, str], dict[str, str]]:
    """(tests to run -> op, tests skipped for lack of a ``vendor`` kernel -> op)."""
    tests = node_tests()
    if vendor == "reference":
        return tests, {}
    have = {k.op for k in kernelkit.kernels(vendor=vendor)}
    run, missing = {}, {}
    for name, op in tests.items():
        if _unsupported(_node_cases()[name]):
            run[name] = op  # excluded by backend_test, with the reason
            continue
        ok = all(part in have for part in _op_types(_node_cases()[name]) if part not in _FREE_OPS)
        (run if ok and has_kernels(vendor, name) else missing)[name] = op
    return run, missing


class KernelkitBackendTest(BackendTest):
    """``BackendTest`` comparing with kernelkit's tolerances (per dtype) instead of ONNX's."""

    @classmethod
    def assert_similar_outputs(cls, ref_outputs, outputs, rtol, atol, model_dir=None) -> None:
        assert len(outputs) == len(ref_outputs), f"{len(outputs)} outputs, expected {len(ref_outputs)}"
        for i, (got, want) in enumerate(zip(outputs, ref_outputs)):
            assert_close(got, want, err_msg=f"output {i}")


def backend_test(vendor: str, module: str):
    """A unittest class holding ``vendor``'s node tests (CPU variants) minus the exclusions.

    Returns (class, {name: op} of the tests in it, {name: reason} excluded, {name: op} lacking a
    kernel of this vendor)."""
    backend = KernelkitBackend.for_vendor(vendor)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner = KernelkitBackendTest(backend, module)
    items = runner._test_items["NodeModel"]  # name -> TestItem(func, proto), as BackendTest built them
    rules = [(re.compile(p), reason) for p, reason in exclusions(vendor).items()]
    run, missing = vendor_tests(vendor)
    chosen, excluded = {}, {}
    for name, op in sorted(run.items()):
        reason = next((r for p, r in rules if p.fullmatch(name.removeprefix("test_"))), None)
        reason = reason or _unsupported(_node_cases()[name])
        if reason is not None:
            excluded[name] = reason
        elif f"{name}_cpu" in items:
            chosen[name] = op
    body = {f"{name}_cpu": items[f"{name}_cpu"].func for name in chosen}
    case = type(f"OnnxNodeTest_{vendor}", (unittest.TestCase,), {"__module__": module, **body})
    return case, chosen, excluded, missing
