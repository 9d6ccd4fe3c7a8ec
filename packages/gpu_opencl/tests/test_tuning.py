"""Tuning for a fast cold start (issue 12): shipped per-device tables, bounded searches, one program
per tile shared by every epilogue and split, programs built in parallel equal to serial builds."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest
from kernelkit.testing import assert_close

CANDS = [{"TM": 1}, {"TM": 2}, {"TM": 4}]
FAKE = "Fake GPU 9000"


@pytest.fixture
def tables(tmp_path, monkeypatch, tmp_cache):
    """An empty folder of shipped tables in place of the package's, forgotten tables reloaded."""
    from kernelkit_opencl import tuning

    folder = tmp_path / "tables"
    folder.mkdir()
    monkeypatch.setattr(tuning, "TABLE_DIR", folder)
    monkeypatch.setattr(tuning, "_tables", None)
    monkeypatch.setattr(tuning, "_loaded_from", None)
    monkeypatch.delenv(tuning.ENV_TABLES, raising=False)
    return folder


def _write_table(folder, device, entries):
    (folder / "fake.json").write_text(json.dumps({"device": device, "entries": entries}))


def _recorder(times=None):
    calls = []

    def run(p):
        calls.append(p["TM"])
        if times:
            time.sleep(times[p["TM"]])

    return run, calls


def test_shipped_table_skips_the_search_for_its_device_only(tables):
    from kernelkit_opencl import tuning

    _write_table(tables, FAKE, {"gemm|mm|00|64x64x64x1": {"TM": 4}})
    run, calls = _recorder()
    before = tuning.searches
    got = tuning.choose("id|gemm|mm|00|64x64x64x1", CANDS, run, True, table=(FAKE, "gemm|mm|00|64x64x64x1"))
    assert got == {"TM": 4} and calls == [] and tuning.searches == before
    assert tuning.lookup("id|gemm|mm|00|64x64x64x1") is None  # a table hit is not copied to the cache file

    # another device (or another shape class) is searched, and the winner persisted
    got = tuning.choose("id2|gemm|mm|00|64x64x64x1", CANDS, run, True, table=("Other GPU", "gemm|mm|00|64x64x64x1"))
    assert calls and tuning.searches == before + 1
    assert tuning.lookup("id2|gemm|mm|00|64x64x64x1") == got

    # the cache file wins over the table (a device tuned locally keeps its own choice)
    tuning.store("id|gemm|mm|00|64x64x64x1", {"TM": 2})
    got = tuning.choose("id|gemm|mm|00|64x64x64x1", CANDS, run, True, table=(FAKE, "gemm|mm|00|64x64x64x1"))
    assert got == {"TM": 2}


def test_shipped_entry_that_is_no_candidate_is_ignored(tables, monkeypatch):
    from kernelkit_opencl import tuning

    _write_table(tables, FAKE, {"k": {"TM": 0, "EVIL": "x"}})
    run, calls = _recorder()
    assert tuning.choose("id|k", CANDS, run, False, table=(FAKE, "k")) == CANDS[0]
    monkeypatch.setattr(tuning, "_tables", None)
    _write_table(tables, FAKE, {"k": {"TM": 2}})
    monkeypatch.setenv(tuning.ENV_TABLES, "0")  # tables off: the device default
    assert tuning.choose("id|k", CANDS, run, False, table=(FAKE, "k")) == CANDS[0]
    (tables / "broken.json").write_text("{not json")
    monkeypatch.delenv(tuning.ENV_TABLES)
    monkeypatch.setattr(tuning, "_tables", None)
    assert tuning.choose("id|k", CANDS, run, False, table=(FAKE, "k")) == {"TM": 2}  # the good file still counts


def test_export_table_round_trip(tables, tmp_path):
    from kernelkit_opencl import tuning

    tuning.store("abc|gemm|conv|00|64x64x64x1", {"TM": 2})
    tuning.store("abc|gemm|mm|00|8x8x8x1", {"TM": 4})
    tuning.store("other|gemm|mm|00|8x8x8x1", {"TM": 1})  # another device: not exported
    assert tuning.export_table(FAKE, "abc", tables / "fake.json") == 2
    data = json.loads((tables / "fake.json").read_text())
    assert data == {"device": FAKE, "entries": {"gemm|conv|00|64x64x64x1": {"TM": 2}, "gemm|mm|00|8x8x8x1": {"TM": 4}}}
    assert tuning.shipped(FAKE) == data["entries"] and tuning.shipped("Other GPU") == {}


def test_search_is_bounded(tables, monkeypatch):
    """A candidate twice as slow as the best so far is dropped after one timed run, and a search
    stops when its time budget is spent (keeping the best so far)."""
    from kernelkit_opencl import tuning

    run, calls = _recorder({1: 0.0, 2: 0.03, 4: 0.0})
    assert tuning.choose("id|a", CANDS, run, True) in (CANDS[0], CANDS[2])
    assert calls.count(1) == 3 and calls.count(2) == 2  # warm-up + one timed run, then dropped
    monkeypatch.setattr(tuning, "SEARCH_BUDGET_S", 0.0)
    run, calls = _recorder()
    assert tuning.choose("id|b", CANDS, run, True) == CANDS[0]
    assert set(calls) == {1}


def test_search_prefers_a_tile_its_kind_already_uses(tables, monkeypatch):
    """Within 3 % of the best, a tile already chosen for the same kernel kind wins: a session then
    needs fewer programs (cold start)."""
    from kernelkit_opencl import tuning

    class Clock:
        now = 0.0

        def perf_counter(self):
            return self.now

    clock = Clock()
    monkeypatch.setattr(tuning, "time", clock)
    monkeypatch.setattr(tuning, "_chosen", {})

    def runner(ms):
        def run(p):
            clock.now += ms[p["TM"]] * 1e-3
        return run

    assert tuning.choose("id|gemm|conv|00|a", CANDS, runner({1: 1.0, 2: 0.99, 4: 2.0}), True) == {"TM": 2}
    assert tuning.choose("id|gemm|conv|00|b", CANDS, runner({1: 0.985, 2: 1.0, 4: 3.0}), True) == {"TM": 2}
    assert tuning.choose("id|gemm|conv|00|c", CANDS, runner({1: 0.50, 2: 1.0, 4: 3.0}), True) == {"TM": 1}
    assert tuning.choose("id|gemm|mm|00|d", CANDS, runner({1: 0.98, 2: 1.0, 4: 3.0}), True) == {"TM": 1}
    # a wider tolerance (table generation: fewer programs) keeps the fastest of the used tiles
    monkeypatch.setenv(tuning.ENV_SHARE, "0.6")
    assert tuning.choose("id|gemm|conv|00|e", CANDS, runner({1: 0.75, 2: 0.70, 4: 0.5}), True) == {"TM": 2}


def test_known_device_uses_its_table_on_a_real_launch(tables, device, rng):
    """Through run_gemm on this OpenCL device, named in a table: no search, the table's tile."""
    from kernelkit_opencl import tuning
    from kernelkit_opencl.kernels import gemm

    call = gemm.GemmCall(40, 24, 16, 16, 24, 24)
    pick = gemm._candidates(device, call)[-1]
    _write_table(tables, device.cl_device.name, {"gemm|mm|00|64x32x16x1": pick})
    device.tune = True
    a = rng.standard_normal((40, 16)).astype(np.float32)
    b = rng.standard_normal((16, 24)).astype(np.float32)
    A, B, C = device.upload(a), device.upload(b), device.empty((40, 24), np.float32)
    before = tuning.searches
    gemm.run_gemm(device, call, A, B, None, C)
    assert tuning.searches == before
    assert device._memo.get(("gemm-tiles", False, False, False, 64, 32, 16, 1, False)) == pick
    assert_close(device.download(C), a @ b)


def test_one_program_serves_every_epilogue_and_split(device, rng, tmp_cache):
    """Bias, residual, Relu and split-K are arguments: one build for all of them (fewer cold builds)."""
    from kernelkit_opencl.kernels import gemm

    p = gemm.CPU_TILES[1]
    M, N, K = 9, 13, 40
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    bias = rng.standard_normal(N).astype(np.float32)
    z = rng.standard_normal((M, N)).astype(np.float32)
    A, B, BI, Z = (device.upload(v) for v in (a, b, bias, z))
    built = device.programs.built
    for split, with_bias, with_z, act in [(1, False, False, "Relu"), (1, True, False, ""), (1, True, True, "Relu"),
                                          (2, True, True, "Relu"), (3, False, True, ""), (2, True, False, "")]:
        out = device.empty((M, N), np.float32)
        call = gemm.GemmCall(M, N, K, K, N, N, bias_sn=1, activation=act)
        gemm._launch(device, call, dict(p, SPLIT_K=split), A, B, BI if with_bias else None, out,
                     Z if with_z else None)
        want = a @ b + (bias if with_bias else 0) + (z if with_z else 0)
        want = np.maximum(want, 0) if act else want
        assert_close(device.download(out), want.astype(np.float32), err_msg=f"{split} {with_bias} {with_z} {act}")
    assert device.programs.built - built <= 1  # 0 when an earlier test built it in this process


def test_parallel_builds_equal_serial_builds(device, rng, tmp_path, monkeypatch):
    """The search's thread-pool builds give the same programs (same results, bit for bit) as
    building one after another."""
    from kernelkit_opencl import tuning
    from kernelkit_opencl.kernels import gemm
    from kernelkit_opencl.programs import ProgramCache

    M, N, K = 21, 19, 33
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    A, B = device.upload(a), device.upload(b)
    call = gemm.GemmCall(M, N, K, K, N, N)
    tiles = gemm.CPU_TILES[:2]
    device.async_build = False  # builds here, in this thread or tuning's pool (on GPUs it defaults on)
    results = []
    for mode in ("serial", "parallel"):
        monkeypatch.setenv("KERNELKIT_CACHE_DIR", str(tmp_path / mode))
        device.programs = ProgramCache(device.context, device.cl_device)  # nothing built yet
        device._kernels.clear()
        device._memo.clear()

        def build(p):
            gemm._kernel(device, call, p)

        if mode == "serial":
            for p in tiles:
                build(p)
        else:
            monkeypatch.setattr(tuning.os, "cpu_count", lambda: 4)
            tuning.prebuild(build, tiles)
        assert device.programs.built == len(tiles)
        outs = []
        for p in tiles:
            out = device.empty((M, N), np.float32)
            gemm._launch(device, call, p, A, B, None, out)
            outs.append(device.download(out))
        results.append(outs)
    for s, p in zip(*results):
        np.testing.assert_array_equal(s, p)
    assert_close(results[1][0], a @ b)


def test_background_builds_give_the_reference_results(cnn, tmp_cache):
    """opencl_async_build (default on GPUs): a cold first run whose programs compile in the
    background (launches deferred behind user events) matches the reference, and so do the
    captured and replayed runs after it; the programs were built exactly once."""
    import kernelkit as kk

    model = cnn(2)
    x = np.random.default_rng(3).standard_normal((2, 3, 12, 12)).astype(np.float32)
    want = kk.Session(model, device="cpu").run(None, {"x": x})
    from kernelkit_opencl.programs import ProgramCache

    sess = kk.Session(model, device="gpu", fallback=False,
                      options={"opencl_async_build": True, "opencl_tune": False})
    dev = sess._devices["gpu"]
    assert dev.async_build
    dev.programs = ProgramCache(dev.context, dev.cl_device)  # nothing built in this process yet
    built = dev.programs.built
    for _ in range(4):  # cold (deferred launches), captured, replayed twice
        got = sess.run(None, {"x": x})
        for g, w in zip(got, want):
            assert_close(g, w)
    assert dev._launcher is not None  # the first run did defer launches
    assert dev.programs.built - built == len(dev.programs._pending)


def test_background_build_error_is_raised_not_hung(device, tmp_cache):
    import kernelkit as kk

    device.async_build = True
    bad = "__kernel void broken(__global float* x) { x[0] = undefined_symbol_kk + 1.0f; }\n"
    knl = device.kernel(bad, "broken", {"N": 5})
    assert knl.knl is None  # compiling in the background
    out = device.empty((4,), np.float32)
    device.launch(knl, (4,), None, [out.buffer], [], [out], "broken")
    with pytest.raises(kk.KernelBuildError, match="undefined_symbol_kk"):
        device.download(out)
    device.synchronize()  # the error was reported once; the device stays usable


def test_search_ranks_by_the_device_time_run_reports(tables):
    """A ``run`` that returns the kernels' device time is ranked by it, not by the host's wall
    time (which, for short kernels, is enqueue and wait overhead)."""
    from kernelkit_opencl import tuning

    wall = {1: 0.0, 2: 0.004, 4: 0.002}  # host: TM 1 looks fastest
    device_s = {1: 3e-3, 2: 1e-3, 4: 2e-3}  # device: TM 2 is

    def run(p):
        time.sleep(wall[p["TM"]])
        return device_s[p["TM"]]

    assert tuning.choose("id|gemm|mm|00|dev", CANDS, run, True) == {"TM": 2}


def test_time_launches_measures_kernels_on_a_profiling_queue(device, rng):
    """``time_launches`` runs the launches (results as usual) on a profiling queue of its own,
    returns their summed device time and leaves the session's profile alone."""
    from kernelkit_opencl.kernels import gemm

    a = rng.standard_normal((64, 48)).astype(np.float32)
    b = rng.standard_normal((48, 40)).astype(np.float32)
    A, B, C = device.upload(a), device.upload(b), device.empty((64, 40), np.float32)
    call = gemm.GemmCall(64, 40, 48, 48, 40, 40)
    events_before = len(device._events)
    took = device.time_launches(lambda: gemm._launch(device, call, dict(gemm.CPU_TILES[1], SPLIT_K=2), A, B, None, C))
    assert 0 < took < 10 and len(device._events) == events_before
    assert_close(device.download(C), a @ b)
    assert device.time_launches(lambda: None) == 0.0


def test_split_k_candidates_come_first_where_tiles_are_few():
    """ResNet-18 batch 1's late convolutions (few output tiles) meet split-K (2..16) first; large
    shapes get the 128-bit load tiles, and the register-capped builds only on NVIDIA."""
    from types import SimpleNamespace

    from kernelkit_opencl.kernels import gemm

    def dev(vendor):
        return SimpleNamespace(platform=SimpleNamespace(is_gpu=True),
                               cl_device=SimpleNamespace(max_compute_units=132, vendor=vendor))

    late = gemm.GemmCall(512, 49, 4608, 4608, 49, 49)  # layer 4 3x3 conv of ResNet-18 b1
    cands = gemm._candidates(dev("NVIDIA Corporation"), late)
    assert cands[0].get("SPLIT_K", 1) > 1
    assert {p.get("SPLIT_K") for p in cands} >= {2, 4, 8, 16}
    big = gemm.GemmCall(4096, 4096, 4096, 4096, 4096, 4096)
    cands = gemm._candidates(dev("NVIDIA Corporation"), big)
    assert "SPLIT_K" not in cands[0] and all(p in cands for p in gemm.GPU_LARGE + gemm.GPU_NVIDIA)
    other = gemm._candidates(dev("Intel"), big)
    assert not any("REGS" in p for p in other) and all(p in other for p in gemm.GPU_LARGE)
    assert gemm.build_options(gemm.GPU_NVIDIA[0]) == ("-cl-nv-maxrregcount=128",)
    assert "REGS" not in gemm.program_defines(gemm.GPU_NVIDIA[0])
