"""Tiered start (kernelkit_numba.tiered): in a fresh process a session first runs on the reference
kernels while the numba kernels are imported, built and compiled (empty cache) or loaded (warm
cache) in the background (kernelkit.deferred), then on numba's; once the backend is loaded, the
first calls of a numba node run its reference kernel while a background thread compiles or loads
the numba code; results equal the reference both before and after the swap; a second process loads
from the cache (no compilation); eager mode, vendors=["numba"] and the session option switch
tiering off."""
import json
import os
import subprocess
import sys
import threading

import kernelkit
import numpy as np
import pytest
from kernelkit.errors import ConfigError
from kernelkit.testing import assert_close
from kernelkit_numba import config, tiered

JIT_OFF = os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0")


@pytest.fixture(autouse=True)
def _backend_loaded():
    """The in-process tests exercise per-node tiering: the numba kernels imported before their
    sessions (a first session would otherwise start deferred, on the reference plan)."""
    kernelkit.backends.load_backends(names=["numba"])

# A 1x1 Conv (bias + activation epilogue) then a Softmax: two numba kernels, two compilations.
_PROBE = """
import json, sys
import numpy as np
import kernelkit
from kernelkit.testing import assert_close
from numba.core import event
from kernelkit_numba import cache, tiered

compiled, hits = [], []
load = cache.CheckedCache.load_overload
def counted_load(self, sig, ctx):
    got = load(self, sig, ctx)
    hits.extend([1] if got is not None else [])
    return got
cache.CheckedCache.load_overload = counted_load
class Count(event.Listener):
    def on_start(self, ev):
        compiled.append(1)
    def on_end(self, ev):
        pass
event.register("numba:compile", Count())
rng = np.random.default_rng(0)
g = kernelkit.GraphBuilder("tiny")
x = g.input("x", (2, 8, 6, 6))
w = rng.standard_normal((8, 8, 1, 1)).astype(np.float32)
g.output(g.op("Softmax", g.op("Conv", x, w, np.ones(8, np.float32)), axis=1))
model = g.build()
feed = {"x": rng.standard_normal((2, 8, 6, 6)).astype(np.float32)}
want = kernelkit.Session(model, vendors=["reference"]).run(None, feed)[0]
vendors = json.loads(sys.argv[1])
options = json.loads(sys.argv[2])
if sys.argv[3] == "preload":  # the backend loaded before the session: no deferred start, stand-ins
    kernelkit.backends.load_backends(names=["numba"])
sess = kernelkit.Session(model, vendors=vendors, options=options)
first = sess.run(None, feed)[0]
assert_close(first, want, err_msg="first call")
after_first = tiered.stats()
deferred = "kernelkit_numba.kernels.conv" not in sys.modules  # the first run did not wait for the import
placed_first = sorted(set(v for _, v in sess.placement().values()))
tiered.wait(240)
sess.run(None, feed)
tiered.wait(240)
before = tiered.stats()["reference_calls"]
second = sess.run(None, feed)[0]
assert_close(second, want, err_msg="after the swap")
print(json.dumps({"first": after_first, "numba_ran_last": tiered.stats()["reference_calls"] == before,
                  "compiled": len(compiled), "hits": len(hits), "deferred": deferred, "placed_first": placed_first,
                  "placed_last": sorted(set(v for _, v in sess.placement().values()))}))
"""


def _probe(cache, vendors=None, options=None, env=None, preload=False) -> dict:
    env = {**{k: v for k, v in os.environ.items() if k != "KERNELKIT_NUMBA_START"}, "NUMBA_CACHE_DIR": str(cache),
           **(env or {})}
    out = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(vendors), json.dumps(options or {}),
                          "preload" if preload else "-"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def cold(tmp_path_factory):
    """The first process on an empty cache (default settings: tiered), and that cache."""
    cache = tmp_path_factory.mktemp("numba_cache")
    return cache, _probe(cache)


@pytest.mark.skipif(JIT_OFF, reason="nothing is compiled or cached when NUMBA_DISABLE_JIT=1")
def test_first_process_runs_reference_then_numba(cold):
    _, row = cold
    assert row["deferred"] and row["placed_first"] == ["reference"]  # the session started on the reference
    assert row["first"] == {"trials": 0, "failed": 0, "reference_calls": 0, "pending": 0}  # no stand-in needed
    assert row["compiled"] >= 2  # compiled in the background (the probe asserts results both times)
    assert row["numba_ran_last"] and row["placed_last"] == ["numba"]  # once upgraded, numba runs every node


@pytest.mark.skipif(JIT_OFF, reason="nothing is compiled or cached when NUMBA_DISABLE_JIT=1")
def test_second_process_loads_from_the_cache_in_the_background(cold):
    cache, _ = cold
    row = _probe(cache)
    assert row["compiled"] == 0 and row["hits"] >= 2  # loaded, nothing compiled
    assert row["deferred"] and row["placed_first"] == ["reference"]  # importing and loading are off-thread
    assert row["numba_ran_last"] and row["placed_last"] == ["numba"]


@pytest.mark.skipif(JIT_OFF, reason="nothing is compiled or cached when NUMBA_DISABLE_JIT=1")
def test_a_loaded_backend_stands_in_per_node(cold):
    cache, _ = cold
    row = _probe(cache, preload=True)  # the kernels imported before the session: numba's plan at once
    assert not row["deferred"] and row["placed_first"] == ["numba"]
    assert row["first"]["trials"] == 2 and row["first"]["reference_calls"] == 2  # both nodes stood in
    assert row["first"]["failed"] == 0 and row["compiled"] == 0 and row["hits"] >= 2
    assert row["numba_ran_last"]


@pytest.mark.skipif(JIT_OFF, reason="nothing is compiled or cached when NUMBA_DISABLE_JIT=1")
@pytest.mark.parametrize("how", ["env", "option", "vendors"])
def test_eager_runs_numba_from_the_first_call(cold, how):
    cache, _ = cold
    if how == "env":
        row = _probe(cache, env={"KERNELKIT_NUMBA_START": "eager"})
    elif how == "option":  # the session option wins over the environment
        row = _probe(cache, options={"numba_start": "eager"}, env={"KERNELKIT_NUMBA_START": "tiered"})
    else:  # vendors=["numba"]: numba kernels alone, no stand-in
        row = _probe(cache, vendors=["numba"])
    assert row["first"] == {"trials": 0, "failed": 0, "reference_calls": 0, "pending": 0}
    assert row["compiled"] == 0 and row["hits"] >= 2 and row["numba_ran_last"]
    assert not row["deferred"] and row["placed_first"] == ["numba"]


def test_bad_start_mode_is_a_config_error(monkeypatch):
    g = kernelkit.GraphBuilder("t")
    g.output(g.op("Softmax", g.input("x", (2, 3))))
    with pytest.raises(ConfigError, match="numba_start"):
        kernelkit.Session(g.build(), options={"numba_start": "lazy"})
    monkeypatch.setenv("KERNELKIT_NUMBA_START", "later")
    with pytest.raises(ConfigError, match="KERNELKIT_NUMBA_START"):
        kernelkit.Session(g.build())


def test_eager_from_the_environment_settles_the_nodes(monkeypatch):
    """$KERNELKIT_NUMBA_START=eager (the benchmarks set it) drops the tiered wrapper from a node's call:
    the mode read from the environment is a str of its own, and the wrapper tests it with ``is``
    (session 14: no node of those runs ever settled, each call kept the wrapper)."""
    monkeypatch.setenv("KERNELKIT_NUMBA_START", "".join(["ea", "ger"]))  # a str object unlike EAGER
    assert tiered.mode_of(None) is tiered.EAGER and tiered.mode_of({"numba_start": "tiered"}) is tiered.TIERED
    g = kernelkit.GraphBuilder("t")
    g.output(g.op("Mul", g.input("x", (2, 5)), np.float32(3.0)))
    model = g.build()
    x = {"x": np.arange(10, dtype=np.float32).reshape(2, 5)}
    sess = kernelkit.Session(model, threads=1)
    for _ in range(3):
        got = sess.run(None, x)[0]
    np.testing.assert_array_equal(got, x["x"] * np.float32(3.0))
    [step] = sess.plan.kernel_steps()
    call, settled = step.direct()
    assert settled and step.kernel._tier_mode is tiered.EAGER and not hasattr(call, "settled")


@pytest.mark.skipif(JIT_OFF, reason="no dispatcher when NUMBA_DISABLE_JIT=1")
def test_guarded_dispatcher_raises_instead_of_compiling_and_the_guard_reaches_shards():
    @config.jit
    def add_one(x):
        return x + 1

    seen, worker_ran = [], threading.Event()

    def shard(i):
        try:
            add_one(np.ones(2, np.float32))
            seen.append("compiled")
        except tiered.NotCompiled:
            seen.append("guarded")
        if threading.current_thread() is threading.main_thread():
            worker_ran.wait(10)  # hold the caller on its shard so that a pool worker runs the others
        else:
            worker_ran.set()

    with config.num_threads(2):
        tiered._guard.on = True
        try:
            with pytest.raises(tiered.NotCompiled):
                add_one(np.ones(2, np.float32))
            config.run_shards(shard, 4)  # pool workers see the caller's guard
        finally:
            tiered._guard.on = False
    assert worker_ran.is_set()
    assert seen == ["guarded"] * 4
    assert add_one(np.ones(2, np.float32)).tolist() == [2.0, 2.0]  # unguarded: compiles
    tiered._guard.on = True
    try:
        assert add_one(np.ones(2, np.float32)).tolist() == [2.0, 2.0]  # compiled: runs under the guard
    finally:
        tiered._guard.on = False


@pytest.mark.skipif(JIT_OFF, reason="no numba typing when NUMBA_DISABLE_JIT=1")
def test_trial_inputs_are_private_copies_typed_like_the_originals():
    from numba import typeof

    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for x in (a, np.asfortranarray(a), a[:, ::2], a.transpose(2, 0, 1), a[:, :, 1:], a[:1, :1, ::3]):
        y = tiered._copy_like(x)
        assert typeof(y) == typeof(x) and np.array_equal(y, x) and not np.shares_memory(x, y)


def test_benchmarks_wait_for_kernels_compiling_in_the_background(monkeypatch):
    from kernelkit import backends
    from kernelkit.tools.bench import bench

    backends.load_backends()
    assert tiered.wait in backends._settle_hooks  # the backend registers its wait
    calls = []
    monkeypatch.setattr(backends, "_settle_hooks", [calls.append])
    g = kernelkit.GraphBuilder("t")
    g.output(g.op("Softmax", g.input("x", (2, 3))))
    result = bench(g.build(), runs=2, warmup=1)
    assert calls == [None] and len(result.times_ms) == 2  # once, after the first run, before timing


def test_a_stand_in_that_fails_leaves_the_node_to_numba(monkeypatch):
    monkeypatch.setenv("KERNELKIT_NUMBA_START", "tiered")
    monkeypatch.setattr(tiered, "_ran", set())  # as in a fresh process: the first call stands in

    def broken(kernel, inputs, out):
        raise ValueError("no reference for this node")

    monkeypatch.setattr(tiered, "_reference", broken)
    g = kernelkit.GraphBuilder("t")
    g.output(g.op("Softmax", g.input("x", (2, 5)), axis=-1))
    model = g.build()
    x = {"x": np.arange(10, dtype=np.float32).reshape(2, 5)}
    sess = kernelkit.Session(model)
    got = sess.run(None, x)[0]
    assert_close(got, kernelkit.Session(model, vendors=["reference"]).run(None, x)[0])
    [step] = sess.plan.kernel_steps()
    assert step.kernel._tier_mode == tiered.EAGER and step.kernel._tier_trial is None


def test_background_loading_waits_for_an_idle_model_thread(monkeypatch):
    """A batch of trials starts once no stand-in ran for IDLE_S, or MAX_DELAY_S late at the latest
    (loading beside a first run slowed it down: docs/numba.md, warm start)."""
    import time

    monkeypatch.setattr(tiered, "IDLE_S", 0.02)
    monkeypatch.setattr(tiered, "MAX_DELAY_S", 0.3)
    monkeypatch.setattr(tiered, "_last_stand_in", 0.0)
    t0 = time.perf_counter()
    tiered._await_idle()  # no stand-in ran: at once
    assert time.perf_counter() - t0 < 0.2
    stop = threading.Event()

    def busy():  # a model's thread running stand-ins every 5 ms
        while not stop.is_set():
            tiered._last_stand_in = time.perf_counter()
            time.sleep(0.005)

    t = threading.Thread(target=busy)
    t.start()
    try:
        t0 = time.perf_counter()
        tiered._await_idle()
        waited = time.perf_counter() - t0
    finally:
        stop.set()
        t.join()
    assert 0.25 <= waited < 5.0  # MAX_DELAY_S bounds it
    t0 = time.perf_counter()
    tiered._await_idle()  # the model's thread has stopped: IDLE_S after its last stand-in
    assert time.perf_counter() - t0 < 0.5


def test_background_loading_waits_for_a_long_stand_in_to_end(monkeypatch):
    """A stand-in that runs longer than IDLE_S (a reference convolution on a busy box) keeps the
    batch waiting until it ends (MAX_DELAY_S at the latest), not IDLE_S after it started."""
    import time

    monkeypatch.setattr(tiered, "IDLE_S", 0.02)
    monkeypatch.setattr(tiered, "MAX_DELAY_S", 0.3)
    monkeypatch.setattr(tiered, "_last_stand_in", time.perf_counter())
    monkeypatch.setattr(tiered, "_standing_in", 1)  # started now, still running
    t0 = time.perf_counter()
    tiered._await_idle()
    assert 0.25 <= time.perf_counter() - t0 < 5.0
    calls = []

    class Kernel:  # the stand-in's bookkeeping around a reference call that fails (numba then runs)
        _tier_trial = None
        where = "node"

    monkeypatch.setattr(tiered, "_reference", lambda *a: calls.append(tiered._standing_in) or 1 / 0)
    monkeypatch.setattr(tiered, "_standing_in", 0)
    assert tiered._stand_in(Kernel(), lambda inputs, out: "numba", (), None) == "numba"
    assert calls == [1] and tiered._standing_in == 0


def test_reference_stand_ins_run_blas_at_one_thread(monkeypatch):
    """A stand-in runs where a numba kernel would: BLAS at one thread, as the numba kernels' own
    calls (a reference convolution at OpenBLAS's thread count collapses on a busy core)."""
    libs = config._blas_controllers()
    if not libs:
        pytest.skip("no BLAS library seen by threadpoolctl")
    before = [lib.get_num_threads() for lib in libs]
    monkeypatch.setattr(tiered, "_submit", lambda kernel, run, inputs, out: None)  # no trial: stand-ins only
    monkeypatch.setattr(tiered, "_ran", set())  # as in a fresh process: no kernel class ran numba yet
    g = kernelkit.GraphBuilder("mm")
    x = g.input("x", (8, 16))
    g.output(g.op("MatMul", x, np.ones((16, 4), np.float32)))
    sess = kernelkit.Session(g.build(), vendors=["numba", "reference"], options={"numba_start": "tiered"})
    try:
        for lib in libs:
            lib.set_num_threads(2)
        calls = tiered.stats()["reference_calls"]
        (y,) = sess.run(None, {"x": np.ones((8, 16), np.float32)})
        assert_close(y, np.full((8, 4), 16.0, np.float32))
        assert tiered.stats()["reference_calls"] > calls  # the stand-in ran
        assert all(lib.get_num_threads() == 1 for lib in libs)
    finally:
        for lib, n in zip(libs, before):
            lib.set_num_threads(n)
