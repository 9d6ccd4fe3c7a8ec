"""Results that do not depend on what an earlier process compiled (issue 11, session 13; cache.py).

A process that compiles a kernel and a later one that loads it from the same Numba cache must compute
the same bits: rnpair's F(4x4) pair half loaded from a warm cache ran the copies of its callees that
Numba links into the caller (optimised again, ``reassoc``), where the compiling process had bound them
to the callees' own code, and both its static and its DYNAMIC halves differed in the last bits from the
compiling process's (and from each other). And a module switch that a kernel's code is built from keys
its cache entry (``cache.baked``): a process with another value (a test's monkeypatch, an A/B run's
``--variant``) compiles its own code instead of loading the other value's."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import llvmlite.binding as ll
import pytest
from kernelkit_numba import cache
from kernelkit_numba.kernels import ftile, pairs, rnpair
from numba import types

JIT_OFF = os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0")
NO_JIT = pytest.mark.skipif(JIT_OFF, reason="nothing is compiled or cached when NUMBA_DISABLE_JIT=1")
PAIRS = pytest.mark.skipif(JIT_OFF or not pairs.X86 or ftile.choice()[0] != rnpair.KIND or not rnpair.enabled(),
                           reason="the ResNet pairs run on the AVX-512 tiles (x86-64)")
TESTS = str(Path(__file__).resolve().parent)

# test_rnpair's F(4x4) layer (64@28, the residual) through the pair half run by the caller alone, with
# the static halves and with DYNAMIC chunks, and through the one-thread path; prints the outputs' bytes
# (hex) and whether this process compiled the half or loaded it.
_LAYER = """
import json, sys
import pytest
sys.path.insert(0, TESTS)
from kernelkit_numba import shards
from kernelkit_numba.kernels import conv_serial, fpair, pairs, rnpair
import test_rnpair as T

mp = pytest.MonkeyPatch()
srv = fpair.FPairServer(0)
mp.setattr(fpair, "_server", [srv])
mp.setattr(srv, "wake", lambda: None)
for name in ("backed_off", "workers_spinning", "workers_asleep"):
    mp.setattr(shards.POOL, name, lambda: False)
srv.ctl[pairs.AWAKE] = 1
xs, ws, attrs, res, _op = T.LAYERS[0]
inputs = T._layer(T.LAYERS[0], 2)
shape = T._out_shape(xs, ws, attrs)
out = {}
for dyn in (False, True):
    mp.setattr(rnpair, "DYNAMIC", dyn)
    mp.setattr(rnpair, "DYN_CHUNKS", 8)
    mp.setattr(rnpair, "DYN_MIN_TILES", 12)
    fn = conv_serial.bound_compute(T._kernel(xs, ws, attrs, 2, res))
    out["dynamic" if dyn else "static"] = T._at(2, fn, inputs, shape).tobytes().hex()
out["one"] = T._at(1, T._kernel(xs, ws, attrs, 1, res).compute, inputs, shape).tobytes().hex()
out["alone"] = srv.stats["alone"]
half = rnpair._build()  # a dispatcher of the same half: its overload comes from this process's cache
half.compile((rnpair.numba.types.int64,) * 2)
out["half_loaded"] = sum(half._cache_hits.values())
print(json.dumps(out))
""".replace("TESTS", repr(TESTS))


def _probe(script: str, cache_dir, **env) -> dict:
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "NUMBA_CACHE_DIR": str(cache_dir), **env})
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@PAIRS
def test_a_loading_process_computes_what_the_compiling_one_did(tmp_path):
    """Two processes, one fresh cache: the first compiles rnpair's half, the second loads it; the layer's
    static halves, DYNAMIC chunks and one-thread path are bit for bit the same in both, and the static
    halves equal the chunks in each (before: the loading process's halves differed from the compiling
    one's and from each other)."""
    first = _probe(_LAYER, tmp_path)
    second = _probe(_LAYER, tmp_path)
    assert first["alone"] == second["alone"] == 2
    assert second["half_loaded"] == 1
    for row in (first, second):
        assert row["static"] == row["dynamic"]
    for name in ("static", "dynamic", "one"):
        assert first[name] == second[name], name


@PAIRS
def test_copies_of_callees_are_local_to_their_caller():
    """A kernel's module holds its callees' copies as local (internal) functions: its object file calls
    them wherever it is loaded, never another definition of the same name (cache.SelfContainedLibrary)."""
    assert cache.self_contained()
    half = rnpair._build()
    half.compile((types.int64,) * 2)
    cres = next(iter(half.overloads.values()))
    module = cres.library._get_module_for_linking()  # the compiled module's, or the cached bitcode's
    own = cres.fndesc.mangled_name[4:]  # _ZN15kernelkit_numba... without _ZN: the wrappers carry it too
    copies = [fn for fn in module.functions if not fn.is_declaration and cache._OURS in fn.name and own not in fn.name]
    assert len(copies) >= 5  # winograd's transforms, ftile's batched products and drivers, fdirect's drivers
    assert [fn.name for fn in copies if fn.linkage != ll.Linkage.internal] == []


@NO_JIT
def test_a_switch_a_kernel_is_built_from_keys_its_entry(monkeypatch):
    """cache.baked: the values a kernel's code is built from (globals it reads, its closure's cells, the
    same of the kernels it calls) are in its key, and nothing else: a rebuilt closure with the same
    values has the same key."""
    half = rnpair._build()
    key = cache.baked(half.py_func)
    assert cache.baked(rnpair._build().py_func) == key
    monkeypatch.setattr(ftile, "ROWS_TILE_MAJOR", not ftile.ROWS_TILE_MAJOR)  # read by ftile's builders
    monkeypatch.setattr(ftile, "_built", {})
    tm = cache.baked(rnpair._build().py_func)
    assert tm != key
    monkeypatch.setattr(ftile, "ROWS_TILE_MAJOR", not ftile.ROWS_TILE_MAJOR)
    monkeypatch.setattr(ftile, "_built", {})
    assert cache.baked(rnpair._build().py_func) == key
    monkeypatch.setattr(rnpair, "NDESC", rnpair.NDESC + 1)  # a global the half's code reads
    assert cache.baked(rnpair._build().py_func) != key


# ftile's batched products on the rows tiles of kind 0 (any CPU), ROWS_TILE_MAJOR from $TILE_MAJOR; prints the
# product's bytes and whether this process loaded the batched driver or compiled it.
_BATCHED = """
import json, os
import numpy as np
from kernelkit_numba.kernels import ftile
ftile.ROWS_TILE_MAJOR = os.environ["TILE_MAJOR"] == "1"
rng = np.random.default_rng(0)
m_n, c_n, nt = 8, 12, 40
u = rng.standard_normal((4, m_n, c_n)).astype(np.float32)
v = rng.standard_normal((4, c_n * nt)).astype(np.float32)
mo = np.zeros((4, m_n * nt), np.float32)
wp = np.ascontiguousarray(ftile.pack_batched(u, ftile.MR[0]).reshape(4, -1))
scratch = np.zeros(ftile.scratch_size(0, 0, nt), np.float32)
ftile.batched_gemms(0, 0, wp, m_n, c_n, v, nt, mo, np.zeros(m_n, np.float32), 1, scratch, 0, 4)
want = np.einsum("pmc,pcn->pmn", u, v.reshape(4, c_n, nt)).reshape(4, -1)
d = ftile._batched(0, 0)
print(json.dumps({"err": float(np.abs(mo - want).max()), "loaded": sum(d._cache_hits.values()),
                  "compiled": sum(d._cache_misses.values())}))
"""


@NO_JIT
def test_a_variant_process_does_not_load_the_default_code(tmp_path):
    """One cache, three processes: ROWS_TILE_MAJOR on (an A/B run's variant) compiles ftile's batched
    driver (its rows driver tile-major); the default then compiles its own (before: it loaded the
    variant's, whose key was the driver's name alone); a second default loads that."""
    variant = _probe(_BATCHED, tmp_path, TILE_MAJOR="1")
    default = _probe(_BATCHED, tmp_path, TILE_MAJOR="0")
    again = _probe(_BATCHED, tmp_path, TILE_MAJOR="0")
    for row in (variant, default, again):
        assert row["err"] < 1e-4
    assert variant["compiled"] == 1 and default["compiled"] == 1 and default["loaded"] == 0
    assert again["loaded"] == 1 and again["compiled"] == 0


# One closure of this package's kind (a pair half's ``half(int64, int64) -> int64``, keyed by its variant's
# name: CLOSURE_KEY) built for each K in $KS, in a module of its own so that every process compiles the same
# functions in the same order; prints, per K, whether this process loaded it, the N of its name, and its
# results for a few arguments through the dispatcher and through its C address looked up by name
# (pairs.function_address, as the pair halves are run) once every K is built.
_MODULE = """
import numba
from kernelkit_numba import cache


def build(k):
    def half(a, b):
        return a * k + b
    half._kernelkit_cache_key = f"probe half {k}"
    return cache.checked(numba.njit(cache=True)(half))
"""
_HALVES = """
import ctypes, json, os, sys
sys.path.insert(0, os.environ["MODULE_DIR"])
import probe_halves
from kernelkit_numba.kernels import pairs
args = [(0, 0), (1, 2), (-7, 3), (1 << 40, -5)]
built = {k: probe_halves.build(k) for k in map(int, os.environ["KS"].split(","))}
for d in built.values():
    pairs.function_address(d)  # compiled or loaded, one after another
out = {}
for k, d in built.items():
    c = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)(pairs.function_address(d))
    cres = next(iter(d.overloads.values()))
    out[k] = {"loaded": sum(d._cache_hits.values()), "uid": cres.fndesc.uid, "by_address": [c(*a) for a in args],
              "by_dispatcher": [d(*a) for a in args]}
print(json.dumps(out))
"""


@NO_JIT
def test_entries_written_by_two_processes_load_into_one(tmp_path):
    """Two processes on one cache each compile one variant of the same closure (the same name but for N, at
    the same count of compiled functions: the same N before); a third loads both, and every result through
    each variant's dispatcher and through its C address looked up by name after both were loaded is the
    variant's own, bit for bit as in the process that wrote it (before: both addresses led to the variant
    loaded last). The N of an entry's names comes from its key (cache.derived_uid), not from the process."""
    (tmp_path / "mod").mkdir()
    (tmp_path / "mod" / "probe_halves.py").write_text(_MODULE)
    env = {"MODULE_DIR": str(tmp_path / "mod")}
    first = _probe(_HALVES, tmp_path / "cache", KS="3", **env)
    second = _probe(_HALVES, tmp_path / "cache", KS="5", **env)
    both = _probe(_HALVES, tmp_path / "cache", KS="3,5", **env)
    assert first["3"]["loaded"] == second["5"]["loaded"] == 0
    assert both["3"]["loaded"] == both["5"]["loaded"] == 1
    assert first["3"]["uid"] != second["5"]["uid"]
    for k, writer in (("3", first), ("5", second)):
        want = [a * int(k) + b for a, b in [(0, 0), (1, 2), (-7, 3), (1 << 40, -5)]]
        assert writer[k]["by_address"] == writer[k]["by_dispatcher"] == want
        assert both[k]["by_address"] == both[k]["by_dispatcher"] == want
        assert both[k]["uid"] == writer[k]["uid"] >= 1 << 62


def test_constants_that_code_built_once_reads():
    """cache.built_once_readers (benchmarks/nodes_ab.py refuses such a variant): the switches that builders
    bake in are found through the builders made once a process (ftile.ROWS_TILE_MAJOR: ftile's batched driver
    and rnpair's and cpair's halves, through the rows drivers they build; fdirect.MP: rnpair's half), a
    switch read on each call (rnpair.DYNAMIC, rnpair.BY_M_TILES) by none."""
    from kernelkit_numba.kernels import cpair, fdirect  # noqa: F401 (their builders are scanned)

    def readers(module, name):
        return [r.removeprefix("kernelkit_numba.kernels.") for r in cache.built_once_readers(module.__name__, name)]

    assert {"ftile._batched", "rnpair.half_address", "cpair.half_address"} <= set(readers(ftile, "ROWS_TILE_MAJOR"))
    assert "rnpair.half_address" in readers(fdirect, "MP")
    assert readers(rnpair, "DYNAMIC") == readers(rnpair, "BY_M_TILES") == []
