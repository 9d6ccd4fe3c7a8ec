"""Session behaviour: device fallback and transfers, feeds and outputs, errors, class kernels,
threads, async runs, profiling and backend discovery."""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import EntryPoint

import kernelkit
import numpy as np
import pytest
from kernelkit import (
    Device,
    Graph,
    GraphBuilder,
    InputError,
    KernelExecutionError,
    Model,
    Node,
    Session,
    TensorSpec,
    UnsupportedOpError,
    Value,
    backends,
    devices,
)
from kernelkit.ops._util import same_as_input
from kernelkit.testing import assert_close, isolate_registries

DOMAIN = "kk.test"
REF = {"vendors": ["reference"]}


@pytest.fixture(autouse=True)
def sandbox(monkeypatch):
    """Ops, kernels and devices a test registers are undone afterwards."""
    isolate_registries(monkeypatch)


# -- a fake device whose tensors are tagged wrappers ----------------------------------------------
class Tagged:
    """A tensor on the fake device: a private copy of the data, recognisable by type."""

    def __init__(self, array):
        self.array = np.array(array, copy=True)

    shape = property(lambda self: self.array.shape)
    dtype = property(lambda self: self.array.dtype)


class FakeDevice(Device):
    name = "fake"

    def __init__(self):
        self.uploads = 0
        self.downloads = 0

    def upload(self, array):
        assert isinstance(array, np.ndarray)
        self.uploads += 1
        return Tagged(array)

    def download(self, tensor):
        assert isinstance(tensor, Tagged), f"download got {type(tensor).__name__}"
        self.downloads += 1
        return tensor.array.copy()

    def owns(self, tensor):
        return isinstance(tensor, Tagged)


@pytest.fixture
def fake():
    """Registers device 'fake' with Relu and kk.test::Shift (x + constant) kernels on it."""
    made = []
    kernelkit.register_device("fake", lambda options: made.append(FakeDevice()) or made[-1])
    kernelkit.register_op("Shift", domain=DOMAIN, inputs=["X", "S"], outputs=["Y"], infer=same_as_input)
    kernelkit.register_kernel("Shift", domain=DOMAIN, device="cpu", vendor="reference", dtype="float32",
                              priority=-100)(lambda x, s: x + s)

    @kernelkit.register_kernel("Shift", domain=DOMAIN, device="fake", vendor="test", dtype="float32")
    def shift(x, s):
        assert isinstance(x, Tagged) and isinstance(s, Tagged)
        return Tagged(x.array + s.array)

    @kernelkit.register_kernel("Relu", device="fake", vendor="test", dtype="float32")
    def relu(x):
        assert isinstance(x, Tagged)
        return Tagged(np.maximum(x.array, 0))

    return made


def _chain_model():
    """x -> Exp -> Shift(+k) -> Relu -> Neg -> y; Shift and Relu exist on the fake device."""
    g = GraphBuilder("chain")
    x = g.input("x", (2, 5), "float32")
    k = g.constant(np.linspace(-3, 1, 5, dtype=np.float32), name="k")
    y = g.op("Neg", g.op("Relu", g.op("Shift", g.op("Exp", x), k, domain=DOMAIN)))
    g.output(y)
    return g.build(), k.data


def test_fallback_places_other_ops_on_cpu_and_transfers_at_boundaries_only(fake, caplog):
    model, k = _chain_model()
    with caplog.at_level(logging.WARNING, logger="kernelkit.session"), \
            pytest.warns(kernelkit.FallbackWarning, match="2 node.*'fake'.*2 host<->device copies"):
        sess = Session(model, device="fake", passes=False)
    placement = sess.placement()
    assert {node: device for node, (device, _) in placement.items()} == {
        "Exp_0": "cpu", "Shift_0": "fake", "Relu_0": "fake", "Neg_0": "cpu"}
    assert placement["Relu_0"] == placement["Shift_0"] == ("fake", "test")
    warned = [r.getMessage() for r in caplog.records if "falling back" in r.getMessage()]
    assert len(warned) == 2 and any("'Exp_0'" in w for w in warned) and any("'Neg_0'" in w for w in warned)
    assert [(f["node"], f["device"], f["copies"]) for f in sess.fallbacks()] == [
        ("Exp_0", "cpu", ["Exp_0: cpu->fake"]), ("Neg_0", "cpu", ["Relu_0: fake->cpu"])]
    assert [s.op for s in sess.plan.steps] == ["Exp", "Copy", "kk.test::Shift", "Relu", "Copy", "Neg"]
    assert set(sess.devices()) == {"cpu", "fake"}
    dev = fake[0]
    x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    for run in range(2):
        (y,) = sess.run(None, {"x": x})
        assert_close(y, -np.maximum(np.exp(x) + k, 0))
        assert isinstance(y, np.ndarray)
        # per run: Exp's output goes up once and Relu's output comes down once; k goes up once per session
        assert (dev.uploads, dev.downloads) == (2 + run, 1 + run)


def test_without_fallback_a_missing_kernel_lists_existing_keys(fake):
    model, _ = _chain_model()
    with pytest.raises(UnsupportedOpError) as info:
        Session(model, device="fake", fallback=False)
    message = str(info.value)
    assert "'Exp_0'" in message and "'fake'" in message and "fallback=False" in message
    assert "(cpu, reference, float32)" in message


def test_vendor_fallback_is_logged_and_recorded(caplog):
    g = GraphBuilder("m")
    g.output(g.op("Exp", g.input("x", (3,), "float32"), name="e"))
    with caplog.at_level(logging.WARNING, logger="kernelkit.session"):
        sess = Session(g.build(), vendors=["no-such-vendor"])
    assert sess.placement()["e"][0] == "cpu"
    assert any("'e'" in r.getMessage() and "no-such-vendor" in r.getMessage() for r in caplog.records)
    with pytest.raises(UnsupportedOpError, match="no-such-vendor"):
        Session(g.build(), vendors=["no-such-vendor"], fallback=False)


def test_unknown_device_is_a_typed_error():
    g = GraphBuilder("m")
    g.output(g.op("Relu", g.input("x", (3,), "float32")))
    with pytest.raises(kernelkit.BackendUnavailableError, match="'nowhere'"):
        Session(g.build(), device="nowhere")


# -- feeds and outputs ----------------------------------------------------------------------------
def _relu_model(shape=(3, 4), dtype="float32"):
    g = GraphBuilder("relu")
    g.output(g.op("Relu", g.input("x", shape, dtype), name="r"))
    return g.build()


def test_concurrent_runs_from_four_threads_match_sequential_ones():
    g = GraphBuilder("m")
    x = g.input("x", ("N", 16), "float32")
    g.output(g.op("Tanh", g.op("Exp", g.op("Neg", g.op("Relu", x)))))
    sess = Session(g.build())
    rng = np.random.default_rng(1)
    feeds = [rng.standard_normal((1 + i % 5, 16)).astype(np.float32) for i in range(32)]
    expected = [sess.run(None, {"x": f})[0] for f in feeds]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda f: sess.run(None, {"x": f})[0], feeds))
    for e, r in zip(expected, got):
        np.testing.assert_array_equal(r, e)
    assert_close(expected[0], np.tanh(np.exp(-np.maximum(feeds[0], 0))))


@pytest.mark.parametrize("make", [
    lambda a: a,
    lambda a: np.asfortranarray(a),
    lambda a: np.concatenate([a, a], axis=1)[:, ::2],  # non-contiguous view
])
@pytest.mark.parametrize("read_only", [False, True])
def test_caller_arrays_are_never_mutated(make, read_only):
    x = make(np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32))
    x.flags.writeable = not read_only
    before = x.copy()
    (y,) = Session(_relu_model(), **REF).run(None, {"x": x})
    np.testing.assert_array_equal(x, before)
    assert x.flags.writeable is (not read_only)
    assert_close(y, np.maximum(before, 0))
    assert not np.shares_memory(y, x) and y.flags.writeable


def test_kernels_receive_read_only_feeds():
    kernelkit.register_op("Scribble", domain=DOMAIN, inputs=["X"], outputs=["Y"], infer=same_as_input)

    @kernelkit.register_kernel("Scribble", domain=DOMAIN, device="cpu", vendor="reference", dtype="float32")
    def scribble(x):
        x[...] = 0  # a buggy kernel: must not reach the caller's array
        return x

    g = GraphBuilder("m")
    g.output(g.op("Scribble", g.input("x", (4,), "float32"), domain=DOMAIN, name="bad"))
    x = np.ones(4, np.float32)
    with pytest.raises(KernelExecutionError, match="'bad'"):
        Session(g.build()).run(None, {"x": x})
    np.testing.assert_array_equal(x, np.ones(4, np.float32))


def test_outputs_are_fresh_arrays():
    # outputs: an identity of the input, a constant, r, and an identity of r (same buffer as r)
    g = GraphBuilder("m")
    x = g.input("x", (4,), "float32")
    r = g.op("Relu", x, name="r")
    g.output(g.op("Identity", x, name="ix"), g.constant(np.arange(4, dtype=np.float32), name="k"), r,
             g.op("Identity", r, name="ir"))
    model = g.build()
    const = model.graph.values["k"].data
    for passes in (False, None):
        sess = Session(model, passes=passes, **REF)
        x = np.array([-1, 2, -3, 4], np.float32)
        outs = sess.run(None, {"x": x})
        assert_close(outs[0], x)
        assert_close(outs[1], np.arange(4, dtype=np.float32))
        assert_close(outs[2], np.maximum(x, 0))
        assert_close(outs[3], np.maximum(x, 0))
        for i, out in enumerate(outs):
            assert out.flags.writeable
            assert not np.shares_memory(out, x) and not np.shares_memory(out, const)
            assert not any(np.shares_memory(out, other) for other in outs[i + 1:])
        outs[1][:] = 99  # scribbling on an output changes nothing for the next run
        assert_close(sess.run(["k"], {"x": x})[0], np.arange(4, dtype=np.float32))


def test_writable_constants_of_a_hand_built_model_stay_untouched():
    data = np.arange(3, dtype=np.float32)  # writable, owned by the caller
    graph = Graph([Node("Identity", ["k"], ["y"], name="id")], [], ["y", "k"],
                  {"k": Value("k", TensorSpec.of(data), data)}, name="m")
    for passes in (False, None):
        sess = Session(Model(graph), passes=passes)
        y, k = sess.run(None, {})
        assert not np.shares_memory(y, data) and not np.shares_memory(k, data)
        y[:] = -1
        k[:] = -1
        assert_close(sess.run(None, {})[0], np.arange(3, dtype=np.float32))
    np.testing.assert_array_equal(data, np.arange(3, dtype=np.float32))
    assert data.flags.writeable  # the caller's array keeps its flags


def test_input_errors_name_the_input():
    sess = Session(_relu_model((2, 3)))
    good = np.zeros((2, 3), np.float32)
    cases = [
        ({"y": good}, r"expects inputs \['x'\].*unknown: \['y'\].*missing: \['x'\]"),
        ({}, r"missing: \['x'\]"),
        ({"x": good.astype(np.float64)}, "'x'.*dtype float32, got float64"),
        ({"x": good[0]}, "'x'.*rank 2"),
        ({"x": np.zeros((2, 4), np.float32)}, r"'x'.*shape \(2, 3\), got \(2, 4\)"),
        ({"x": np.array(["a"], dtype=object)}, "'x'"),
    ]
    for feeds, pattern in cases:
        with pytest.raises(InputError, match=pattern):
            sess.run(None, feeds)
    with pytest.raises(InputError, match="dict"):
        sess.run(None, [good])
    with pytest.raises(InputError, match="not a string"):
        sess.run("r", {"x": good})
    with pytest.raises(InputError, match=r"unknown output.*\['nope'\]"):
        sess.run(["nope"], {"x": good})


def test_inconsistent_symbolic_dims_are_an_input_error():
    kernelkit.register_op("Shift", domain=DOMAIN, inputs=["X", "S"], outputs=["Y"], infer=same_as_input)
    kernelkit.register_kernel("Shift", domain=DOMAIN, device="cpu", vendor="reference", dtype="float32")(
        lambda x, s: x + s)
    g = GraphBuilder("m")
    a, b = g.input("a", ("N", 3), "float32"), g.input("b", ("N", 3), "float32")
    g.output(g.op("Shift", a, b, domain=DOMAIN))
    sess = Session(g.build())
    (y,) = sess.run(None, {"a": np.ones((5, 3), np.float32), "b": np.ones((5, 3), np.float32)})
    assert_close(y, np.full((5, 3), 2, np.float32))
    with pytest.raises(InputError, match="'b'.*'N'.*is 4.*bound to 5"):
        sess.run(None, {"a": np.ones((5, 3), np.float32), "b": np.ones((4, 3), np.float32)})


# -- failures and class kernels -------------------------------------------------------------------
def test_failed_run_names_the_node_and_the_session_still_runs():
    kernelkit.register_op("Fragile", domain=DOMAIN, inputs=["X"], outputs=["Y"], infer=same_as_input)

    @kernelkit.register_kernel("Fragile", domain=DOMAIN, device="cpu", vendor="reference", dtype="float32")
    def fragile(x):
        if (x < 0).any():
            raise ValueError("negative input")
        return np.sqrt(x)

    g = GraphBuilder("m")
    g.output(g.op("Fragile", g.op("Relu", g.input("x", (3,), "float32")), domain=DOMAIN, name="frag"))
    g.output(g.op("Fragile", g.input("z", (3,), "float32"), domain=DOMAIN, name="frag2"))
    sess = Session(g.build())
    good = np.array([1, 4, 9], np.float32)
    with pytest.raises(KernelExecutionError, match=r"'frag2'.*input shapes \[\(3,\)\].*negative input"):
        sess.run(None, {"x": good, "z": -good})
    outs = sess.run(None, {"x": good, "z": good})
    assert_close(outs[0], np.array([1, 2, 3], np.float32))
    assert_close(outs[1], np.array([1, 2, 3], np.float32))


class CountingKernel:
    """A class kernel recording its life cycle; computes y = x * factor."""

    log: list = []

    def prepare(self, specs, attrs):
        self.log.append(("prepare", tuple(specs[0].shape), self.context.node.name))
        self.factor = np.float32(attrs["factor"])

    def resize(self, specs):
        self.log.append(("resize", tuple(specs[0].shape)))

    def execute(self, x):
        self.log.append(("execute", x.shape))
        return x * self.factor


@pytest.fixture
def counting():
    CountingKernel.log = []
    kernelkit.register_op("Scale", domain=DOMAIN, inputs=["X"], outputs=["Y"], infer=same_as_input,
                          attrs={"factor": ("float", 1.0)})
    kernelkit.register_kernel("Scale", domain=DOMAIN, device="cpu", vendor="reference", dtype="float32")(
        CountingKernel)
    return CountingKernel.log


def test_class_kernel_life_cycle(counting):
    g = GraphBuilder("m")
    g.output(g.op("Scale", g.input("x", ("N", 2), "float32"), domain=DOMAIN, factor=3.0, name="sc"))
    sess = Session(g.build())
    assert counting == [("prepare", ("N", 2), "sc")]
    for n in (1, 1, 4):
        (y,) = sess.run(None, {"x": np.ones((n, 2), np.float32)})
        assert_close(y, np.full((n, 2), 3, np.float32))
    assert counting[1:] == [("resize", (1, 2)), ("execute", (1, 2)), ("execute", (1, 2)),
                            ("resize", (4, 2)), ("execute", (4, 2))]


def test_class_kernel_with_static_shapes_is_not_resized(counting):
    g = GraphBuilder("m")
    g.output(g.op("Scale", g.input("x", (2, 2), "float32"), domain=DOMAIN, factor=0.0))
    sess = Session(g.build())
    sess.run(None, {"x": np.ones((2, 2), np.float32)})
    sess.run(None, {"x": np.ones((2, 2), np.float32)})
    assert [entry[0] for entry in counting] == ["prepare", "execute", "execute"]


# -- async, profiling, backends -------------------------------------------------------------------
def test_run_async_equals_run():
    sess = Session(_relu_model(("N", 4)))
    x = np.random.default_rng(3).standard_normal((6, 4)).astype(np.float32)
    futures = [sess.run_async(None, {"x": x * i}) for i in range(4)]
    for i, fut in enumerate(futures):
        np.testing.assert_array_equal(fut.result(timeout=30)[0], sess.run(None, {"x": x * i})[0])
    with pytest.raises(InputError):  # feeds are checked before the run is queued
        sess.run_async(None, {"x": x.astype(np.float64)})


def test_profile_gives_per_node_rows():
    g = GraphBuilder("m")
    g.output(g.op("Neg", g.op("Exp", g.input("x", (8,), "float32"), name="e"), name="n"))
    sess = Session(g.build(), profile=True)
    for _ in range(3):
        sess.run(None, {"x": np.zeros(8, np.float32)})
    rows = sess.profile()
    assert [(r["node"], r["op"], r["calls"]) for r in rows] == [("e", "Exp", 3), ("n", "Neg", 3)]
    assert all(r["total_ms"] >= 0 and r["mean_ms"] * 3 == pytest.approx(r["total_ms"]) for r in rows)
    quiet = Session(g.build())
    quiet.run(None, {"x": np.zeros(8, np.float32)})
    assert all(r["calls"] == 0 for r in quiet.profile())


def _good_backend():
    kernelkit.register_device("plugged", lambda options: FakeDevice())


def test_broken_backend_entry_point_is_a_warning(monkeypatch):
    eps = [EntryPoint("broken", "kk_no_such_module_xyz:initialize", backends.GROUP),
           EntryPoint("good", f"{__name__}:_good_backend", backends.GROUP)]
    monkeypatch.setattr(backends, "entry_points", lambda group: [e for e in eps if e.group == group])
    monkeypatch.setattr(backends, "_loaded", {})
    monkeypatch.setattr(backends, "_done", False)
    with pytest.warns(RuntimeWarning, match="'broken'.*ModuleNotFoundError"):
        status = kernelkit.load_backends()
    assert status["good"] == "ok" and "ModuleNotFoundError" in status["broken"]
    assert "plugged" in devices.device_names()
    (y,) = Session(_relu_model((2,))).run(None, {"x": np.array([-1, 1], np.float32)})  # still works
    assert_close(y, np.array([0, 1], np.float32))


_LOADED: list[str] = []  # the fake backends below, in the order they were loaded


def _alpha_backend():
    _LOADED.append("alpha")


def _beta_backend():
    _LOADED.append("beta")
    kernelkit.register_device("beta-device", lambda options: FakeDevice())


@pytest.fixture
def two_backends(monkeypatch):
    eps = [EntryPoint("alpha", f"{__name__}:_alpha_backend", backends.GROUP),
           EntryPoint("beta", f"{__name__}:_beta_backend", backends.GROUP)]
    monkeypatch.setattr(backends, "entry_points", lambda group: [e for e in eps if e.group == group])
    monkeypatch.setattr(backends, "_loaded", {})
    monkeypatch.setattr(backends, "_done", False)
    _LOADED.clear()
    return _LOADED


def test_load_backends_by_name(two_backends):
    assert backends.backend_names() == ["alpha", "beta"]
    assert kernelkit.load_backends(names=["alpha", "no-such"]) == {"alpha": "ok"}
    assert kernelkit.load_backends(names=["alpha"]) == {"alpha": "ok"} and two_backends == ["alpha"]  # once
    assert kernelkit.load_backends() == {"alpha": "ok", "beta": "ok"} and two_backends == ["alpha", "beta"]
    assert kernelkit.load_backends() == {"alpha": "ok", "beta": "ok"} and two_backends == ["alpha", "beta"]


def test_names_for_vendors(two_backends):
    assert backends.names_for_vendors(None) is None
    assert backends.names_for_vendors(["alpha", "reference"]) == ("alpha",)
    assert backends.names_for_vendors(["reference"]) == ()
    assert backends.names_for_vendors(["alpha", "gamma"]) is None  # a vendor no backend is named after: all


def test_session_naming_its_vendors_loads_only_their_backends(two_backends):
    x = np.array([-1, 2], np.float32)
    (y,) = Session(_relu_model((2,)), vendors=["alpha", "reference"]).run(None, {"x": x})
    assert_close(y, np.array([0, 2], np.float32))
    assert two_backends == ["alpha"]
    Session(_relu_model((2,)), vendors=["reference"])
    assert two_backends == ["alpha"]
    Session(_relu_model((2,)))  # no vendors named: every backend
    assert two_backends == ["alpha", "beta"]


def test_a_device_of_a_backend_not_selected_still_loads_it(two_backends):
    with pytest.warns(Warning, match="fell back from device 'beta-device'"):  # no kernel of alpha's there
        sess = Session(_relu_model((2,)), device="beta-device", vendors=["alpha", "reference"])
    (y,) = sess.run(None, {"x": np.array([-1, 2], np.float32)})
    assert_close(y, np.array([0, 2], np.float32))
    assert two_backends == ["alpha", "beta"]
