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
- A layout variant (a key with a layout, "NHWC", "NCHW8c"..., of any vendor, the reference's too)
  gets each sample's inputs re-laid into the layouts it declares, runs through the one kernel-call
  path (``kernelkit.invoke``) on its device, and its outputs are re-laid back to the default
  layout before the comparison. Samples whose shapes the layout cannot hold (a blocked axis that
  does not divide) count as declined.
"""
from __future__ import annotations

import functools

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import registry
from kernelkit.devices import create_device
from kernelkit.errors import BackendUnavailableError, ShapeError
from kernelkit.invoke import invoke
from kernelkit.ir import Node, TensorSpec
from kernelkit.layout import from_layout, physical_shape, to_layout
from kernelkit.registry import KernelKey, get_schema, kernel_entry, normalize_attrs, unregister_kernel
from kernelkit.testing import assert_close, run_single_op, sample_cases

SEED = 0


def _split_op(qualified: str) -> tuple[str, str]:
    domain, _, op = qualified.rpartition("::")
    return op, domain


def _targets() -> list[tuple[KernelKey, str]]:
    """(key, concrete dtype) pairs to check."""
    keys = [k for k in kk.kernels() if k.vendor != "reference" or k.layout]
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
    **{op: "quantizing NaN/inf (input or scale) to an integer type is undefined"
       for op in ("QuantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul", "QGemm",
                   "DynamicQuantizeMatMul", "QLinearAdd")},
}
NAN_ONLY: dict[str, str] = {}  # ops where +-inf is not meaningful but NaN is
NO_SPECIAL_VALUES["Resize"] = (
    "a tap whose weight is ~1e-7 off zero (ONNX's fractional resized length, e.g. 3 x float32(5/3)) decides "
    "whether NaN or inf reaches a neighbour: which outputs turn NaN is rounding, not semantics")


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
        if key.layout:
            outs = _run_laid_out(entry, schema, inputs, normalize_attrs(schema, attrs, where), len(expected))
            if outs is None:
                counts["declined"] += 1
                continue
        else:
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


def _run_laid_out(entry, schema, inputs, attrs: dict, n_outputs: int) -> list | None:
    """A layout variant's outputs for logical ``inputs``, back in the default layout: inputs re-laid
    as the kernel declares, the kernel bound and called once on its device. None when a value's
    shape does not fit its layout, or it has several outputs."""
    if n_outputs > 1:
        return None  # as the layout pass: a node with several outputs keeps the default layout
    specs = [TensorSpec.of(x) if x is not None else None for x in inputs]
    in_layouts, out_layouts = entry.layouts(schema, specs, attrs)
    try:
        for spec, lay in zip(specs, in_layouts):
            if spec is not None and lay:
                physical_shape(spec.shape, lay)
    except ShapeError:
        return None
    device = create_device(entry.key.device)
    laid = [device.upload(to_layout(np.asarray(x), lay)) if x is not None else None
            for x, lay in zip(inputs, in_layouts)]
    laid_specs = [TensorSpec(s.shape, s.dtype, lay) if s is not None else None for s, lay in zip(specs, in_layouts)]
    node = Node(schema.name, [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)],
                [f"out{j}" for j in range(n_outputs)], dict(attrs), "laid_out", schema.domain)
    outs = invoke(entry, node, attrs, laid, laid_specs, device)
    return [from_layout(np.asarray(device.download(y)), lay) for y, lay in zip(outs, out_layouts)]


def _id(target) -> str:
    key, dtype = target
    star = "(any)" if key.dtype == "*" else ""
    return f"{key.op}-{key.device}-{key.vendor}-{dtype}{star}" + (f"-{key.layout}" if key.layout else "")


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


# -- the out= convention: writing into a given output (and over an input) changes nothing -------------
def _out_targets() -> list[tuple[KernelKey, str]]:
    return [(k, k.dtype) for k in kk.kernels(device="cpu") if k.dtype != "*" and kernel_entry(k).takes_out]


OUT_TARGETS = _out_targets()


def _equal(actual, want, where: str) -> None:
    assert actual.shape == want.shape and actual.dtype == want.dtype, f"{where}: {actual.shape} {actual.dtype}"
    np.testing.assert_array_equal(actual, want, err_msg=where)  # the same computation: bit for bit


@pytest.mark.parametrize("target", OUT_TARGETS, ids=[_id(t) for t in OUT_TARGETS])
def test_kernel_with_out_writes_what_it_returns(target):
    """Each sample through a kernel that takes ``out=``: once allocating, once into a given array
    (with its declared scratch), and for the ops the memory plan runs in place, over its input."""
    from kernelkit.invoke import bind
    from kernelkit.ir import Node
    from kernelkit.memory import INPLACE_OPS

    key, dtype = target
    op, domain = _split_op(key.op)
    schema, entry, cpu = get_schema(op, domain), kernel_entry(key), kk.create_device("cpu")
    checked = 0
    for i, (inputs, attrs, _) in enumerate(sample_cases(op, dtype, SEED, domain)):
        where = f"{tuple(key)} sample {i} {attrs}"
        full = normalize_attrs(schema, attrs, where)
        specs = [TensorSpec.of(x) if x is not None else None for x in inputs]
        if entry.supports is not None and not entry.supports(specs, full):
            continue
        node = Node(op, [f"in{j}" for j in range(len(inputs))], ["y"], attrs, "node", domain)
        call = bind(entry, node, full, cpu, specs)
        run = call.execute if entry.is_class else call
        fresh = run(*inputs)
        want = np.asarray(fresh[0] if isinstance(fresh, (tuple, list)) else fresh)
        extra = {}
        scratch = entry.scratch(specs, full) if entry.scratch is not None else 0
        if scratch:
            extra["scratch"] = np.empty(scratch, np.uint8)
        out = np.empty(want.shape, want.dtype)
        got = run(*inputs, out=out, **extra)
        got = got[0] if isinstance(got, (tuple, list)) else got
        assert got is out, f"{where}: a kernel given out= returns it"
        _equal(out, want, where)
        first = inputs[0]
        if key.op in INPLACE_OPS and first is not None and first.shape == want.shape and first.dtype == want.dtype:
            over = np.array(first, copy=True)
            run(over, *inputs[1:], out=over, **extra)
            _equal(over, want, f"{where} (in place)")
        checked += 1
    assert checked, f"{tuple(key)}: no sample ran"


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
