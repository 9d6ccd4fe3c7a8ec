"""Cross-package conformance: every registered kernel agrees with the NumPy reference.

One test per kernel key ``(op, device, vendor, dtype)`` of any vendor but "reference", from any
installed package (numba, opencl, plugins). Each runs the op's ``samples(rng, dtype)`` through a
full Session on the key's device with only that vendor (``fallback=False``, no graph passes, so
the kernel itself runs) and compares every output with the reference kernel's (``assert_close``).
A ``"*"`` key is checked for each dtype the reference has for the op (unless the same vendor also
has an exact key for that dtype, which is tested on its own).

- A sample that the kernel's ``supports()`` declines is skipped for that sample only and counted
  (``record_property("declined", n)``); a kernel that declines every sample fails.
- An op with a non-reference kernel but no samples fails: add ``samples`` to its schema.
- A device no installed backend can open (e.g. no OpenCL platform) skips that key with the reason.
"""
from __future__ import annotations

import functools

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import registry
from kernelkit.errors import BackendUnavailableError
from kernelkit.ir import TensorSpec
from kernelkit.registry import KernelKey, get_schema, kernel_entry, normalize_attrs, unregister_kernel
from kernelkit.testing import assert_close, run_single_op, sample_cases

SEED = 0


def _split_op(qualified: str) -> tuple[str, str]:
    domain, _, op = qualified.rpartition("::")
    return op, domain


def _targets() -> list[tuple[KernelKey, str]]:
    """(key, concrete dtype) pairs to check."""
    keys = [k for k in kk.kernels() if k.vendor != "reference"]
    exact = {(k.op, k.device, k.vendor, k.dtype) for k in keys}
    out = []
    for key in keys:
        if key.dtype != "*":
            out.append((key, key.dtype))
            continue
        op, domain = _split_op(key.op)
        ref_dtypes = sorted({k.dtype for k in kk.kernels(key.op, vendor="reference")} - {"*"})
        for dtype in ref_dtypes or ["float32"]:
            if (key.op, key.device, key.vendor, dtype) not in exact:
                out.append((key, dtype))
    return out


# NaN and +-inf (issue 13), in one place: every sample also runs with NaN, +inf and -inf written into
# the first three elements of its first float input, and kernels must agree with the reference on
# them too (NaN propagating as in NumPy). Ops here get no such variant; each says why.
NO_SPECIAL_VALUES = {
    "Cast": "NaN/inf to an integer type is undefined in C and NumPy alike",
    "CastLike": "NaN/inf to an integer type is undefined in C and NumPy alike",
}
NAN_ONLY = {  # +-inf is not meaningful here, NaN is
    "Resize": "interpolating beside +-inf multiplies it by a zero weight: inf or NaN depends on the formula",
}


def special_value_cases(op: str, cases) -> list:
    """The NaN/+inf/-inf variant of each sample that has a float input with elements."""
    if op in NO_SPECIAL_VALUES:
        return []
    out = []
    for inputs, attrs, options in cases:
        index = next((i for i, x in enumerate(inputs) if x is not None and np.asarray(x).dtype.kind == "f"
                      and np.asarray(x).size), None)
        if index is None:
            continue
        poisoned = np.array(inputs[index], copy=True)
        flat = poisoned.reshape(-1)
        specials = [np.nan] if op in NAN_ONLY else [np.nan, np.inf, -np.inf]
        flat[:len(specials)] = np.array(specials, poisoned.dtype)[:flat.size]
        out.append((inputs[:index] + [poisoned] + inputs[index + 1:], attrs, options))
    return out


@functools.cache
def _reference(op_id: str, dtype: str) -> tuple:
    """The op's samples for ``dtype``, plus their NaN/inf variants, with the reference kernels'
    outputs (computed once)."""
    op, domain = _split_op(op_id)
    results = []
    cases = sample_cases(op, dtype, SEED, domain)
    for n, (inputs, attrs, options) in enumerate(cases + special_value_cases(op, cases)):
        try:
            with np.errstate(all="ignore"):
                outs = run_single_op(op, inputs, attrs, domain=domain, passes=False, vendors=["reference"],
                                     fallback=False, **options)
        except kk.KernelkitError:
            if n < len(cases):
                raise
            continue  # the reference refuses this NaN/inf input on purpose (e.g. an index that is inf)
        results.append((inputs, attrs, options, outs))
    return tuple(results)


def _dispatch_dtype(schema, inputs) -> str | None:
    if inputs and schema.dispatch_input < len(inputs) and inputs[schema.dispatch_input] is not None:
        return np.asarray(inputs[schema.dispatch_input]).dtype.name
    return None  # ops without inputs key on their output dtype; the placement check covers them


def check_kernel(key: KernelKey, dtype: str) -> dict:
    """Run every sample of ``key.op`` on ``key`` and compare with the reference. Returns counts
    {"checked": n, "declined": n}; raises AssertionError on a mismatch or a missing sample set."""
    op, domain = _split_op(key.op)
    schema = get_schema(op, domain)
    assert schema.samples is not None, (
        f"op {key.op!r} has a {key.vendor} kernel but its schema declares no samples: add "
        f"samples(rng, dtype) to its register_op so that every kernel gets cross-checked")
    assert kk.kernels(key.op, device="cpu", vendor="reference", dtype=dtype) or \
        kk.kernels(key.op, device="cpu", vendor="reference", dtype="*"), (
        f"{tuple(key)} has no reference kernel for {dtype} to be checked against: the reference defines "
        f"correctness, so register one (or drop the dtype)")
    cases = _reference(key.op, dtype)
    assert cases, f"op {key.op!r}: samples(rng, {dtype!r}) gave no samples; make it cover every kernel dtype"
    entry = kernel_entry(key)
    counts = {"checked": 0, "declined": 0}
    for i, (inputs, attrs, options, expected) in enumerate(cases):
        where = f"{key.op} sample {i} {attrs}"
        got_dtype = _dispatch_dtype(schema, inputs)
        assert got_dtype in (None, dtype), f"{where}: samples(rng, {dtype!r}) gave a {got_dtype} dispatch input"
        if entry.supports is not None:
            specs = [TensorSpec.of(x) if x is not None else None for x in inputs]
            if not entry.supports(specs, normalize_attrs(schema, attrs, where)):
                counts["declined"] += 1
                continue
        with np.errstate(all="ignore"):
            outs = run_single_op(op, inputs, attrs, domain=domain, device=key.device, vendors=[key.vendor],
                                 fallback=False, passes=False, **options)
        assert len(outs) == len(expected), f"{where}: {len(outs)} outputs, reference gave {len(expected)}"
        for j, (actual, want) in enumerate(zip(outs, expected)):
            assert_close(actual, want, err_msg=f"{tuple(key)} {where} output {j}")
        counts["checked"] += 1
    assert counts["checked"], (f"{tuple(key)} declined all {len(cases)} samples of {key.op} for {dtype}: "
                               f"add samples it supports")
    return counts


def _id(target) -> str:
    key, dtype = target
    star = "(any)" if key.dtype == "*" else ""
    return f"{key.op}-{key.device}-{key.vendor}-{dtype}{star}"


TARGETS = _targets()


@pytest.mark.parametrize("target", TARGETS, ids=[_id(t) for t in TARGETS])
def test_kernel_matches_reference(target, record_property):
    key, dtype = target
    try:
        counts = check_kernel(key, dtype)
    except BackendUnavailableError as exc:
        pytest.skip(f"device {key.device!r} unavailable here: {exc}")
    record_property("declined", counts["declined"])
    record_property("checked", counts["checked"])


# -- the harness checks itself, so that a green run means something even with no backend ---------
SELFTEST = "conformance-selftest"


@pytest.fixture
def throwaway():
    """Register kernels under a test vendor; unregister them afterwards whatever happens."""
    made = []

    def register(op, fn, dtype="float32", supports=None):
        kk.register_kernel(op, device="cpu", vendor=SELFTEST, dtype=dtype, supports=supports)(fn)
        made.append((op, dtype))
        return KernelKey(op, "cpu", SELFTEST, dtype)

    yield register
    for op, dtype in made:
        unregister_kernel(op, device="cpu", vendor=SELFTEST, dtype=dtype)
    assert not kk.kernels(vendor=SELFTEST)


def test_harness_passes_a_correct_kernel(throwaway):
    key = throwaway("Relu", lambda x: np.maximum(x, x.dtype.type(0)))
    counts = check_kernel(key, "float32")
    cases = sample_cases("Relu", "float32")
    assert counts == {"checked": len(cases) + len(special_value_cases("Relu", cases)), "declined": 0}


def test_harness_fails_a_kernel_that_drops_nan(throwaway):
    key = throwaway("Relu", lambda x: np.where(x > 0, x, np.zeros_like(x)))  # NaN -> 0
    with pytest.raises(AssertionError, match="Relu"):
        check_kernel(key, "float32")


def test_harness_fails_a_wrong_kernel(throwaway):
    key = throwaway("Relu", lambda x: np.maximum(x, x.dtype.type(0)) + x.dtype.type(1e-3))
    with pytest.raises(AssertionError, match="Relu"):
        check_kernel(key, "float32")


def test_harness_fails_a_kernel_with_the_wrong_output_dtype(throwaway):
    key = throwaway("Relu", lambda x: np.maximum(x, 0).astype(np.float64))
    with pytest.raises(AssertionError, match="dtype"):
        check_kernel(key, "float32")


def test_harness_counts_declined_samples(throwaway):
    key = throwaway("Relu", lambda x: np.maximum(x, x.dtype.type(0)), supports=lambda specs, attrs: specs[0].rank > 0)
    scalar_cases = sum(1 for inputs, _, _ in sample_cases("Relu", "float32") if np.ndim(inputs[0]) == 0)
    assert scalar_cases, "Relu's samples should include a 0-d case for this test"
    counts = check_kernel(key, "float32")
    assert counts["declined"] == 2 * scalar_cases and counts["checked"] > 0  # with their NaN/inf variants


def test_harness_fails_a_kernel_that_declines_everything(throwaway):
    key = throwaway("Relu", lambda x: x, supports=lambda specs, attrs: False)
    with pytest.raises(AssertionError, match="declined all"):
        check_kernel(key, "float32")


def test_harness_fails_an_op_without_samples(throwaway):
    kk.register_op("SelftestNoSamples", domain=SELFTEST, inputs=["X"], outputs=["Y"],
                   infer=lambda ctx: ctx.inputs[0], override=True)
    kk.register_kernel("SelftestNoSamples", domain=SELFTEST, device="cpu", vendor=SELFTEST, dtype="float32")(
        lambda x: x)
    try:
        with pytest.raises(AssertionError, match="no samples"):
            check_kernel(KernelKey(f"{SELFTEST}::SelftestNoSamples", "cpu", SELFTEST, "float32"), "float32")
    finally:
        unregister_kernel("SelftestNoSamples", domain=SELFTEST, device="cpu", vendor=SELFTEST, dtype="float32")
        registry._OPS.pop(f"{SELFTEST}::SelftestNoSamples", None)  # no public unregister_op exists


def test_every_core_op_declares_samples():
    missing = [op for op in kk.ops() if "::" not in op and get_schema(op).samples is None]
    assert not missing, f"ops without samples: {missing}"


def test_every_target_has_a_readable_id():
    ids = [_id(t) for t in TARGETS]
    assert len(ids) == len(set(ids))


def test_harness_fails_a_dtype_the_reference_lacks(throwaway):
    key = throwaway("Relu", lambda x: x, dtype="uint8")
    with pytest.raises(AssertionError, match="no reference kernel for uint8"):
        check_kernel(key, "uint8")
