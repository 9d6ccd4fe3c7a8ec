"""Start-up of the float32 micro-kernels (ftile.py, issue 11 session 6): a process compiles (or loads)
only the drivers of the variant it runs, a switch of KERNELKIT_F32_GEMM compiles the new one then,
and the disk cache keys each variant's drivers (closures over LLVM IR intrinsics) so that an entry
written for one variant or CPU is never loaded for another, while the same variant on the same CPU
loads it in the next process. Each probe runs in a fresh process (compiled code is per process)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kernelkit_numba.kernels import ftile

JIT_OFF = os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0")
NO_JIT = pytest.mark.skipif(JIT_OFF, reason="nothing is compiled or cached when NUMBA_DISABLE_JIT=1")
BEST = "avx512" if ftile.available("avx512") else "avx2" if ftile.available("avx2") else None

# Three convolutions that take the three kinds of ftile driver where the variant has them: a 1x1 (rows
# tiles), a 3x3 with 128 channels on a 14x14 map (Winograd's batched GEMMs), a 1x1 with K = 128 on a
# 7x7 map (cols tiles: avx2/avx512 only). Prints which compiled dispatchers of ftile.py hold code, and
# the largest error against a reference session.
_SESSION = """
import gc, json, os, sys
import numpy as np
import kernelkit
from kernelkit.testing import assert_close
from kernelkit_converters.onnx import convert
from numba.core.registry import CPUDispatcher
from onnx import TensorProto, helper, numpy_helper
from kernelkit_numba.cache import CLOSURE_KEY
from kernelkit_numba.kernels import ftile

rng = np.random.default_rng(0)
convs = [("a", 16, 32, 10, 1), ("b", 128, 128, 14, 3), ("c", 128, 32, 7, 1)]
nodes, inits, inputs, outputs, feed = [], [], [], [], {}
for name, c, m, hw, k in convs:
    w = (rng.standard_normal((m, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    inits += [numpy_helper.from_array(w, name + "_w"), numpy_helper.from_array(b, name + "_b")]
    nodes.append(helper.make_node("Conv", [name + "_x", name + "_w", name + "_b"], [name + "_y"], pads=[k // 2] * 4))
    inputs.append(helper.make_tensor_value_info(name + "_x", TensorProto.FLOAT, [1, c, hw, hw]))
    outputs.append(helper.make_tensor_value_info(name + "_y", TensorProto.FLOAT, [1, m, hw, hw]))
    feed[name + "_x"] = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
model = convert(helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, inits),
                                  opset_imports=[helper.make_opsetid("", 21)]))
want = kernelkit.Session(model, vendors=["reference"]).run(None, feed)


def compiled():
    out = {}
    for d in [o for o in gc.get_objects() if type(o).__name__ == "CPUDispatcher"]:
        if d.py_func.__module__ == ftile.__name__ and d.overloads:
            key = getattr(d.py_func, CLOSURE_KEY, d.py_func.__qualname__)
            out[key] = len(d.overloads)
    return out


sess = kernelkit.Session(model, vendors=["numba"], fallback=False)
runs = []
for value in sys.argv[1].split(","):
    os.environ[ftile.ENV] = value
    got = sess.run(None, feed)
    for g, w in zip(got, want):
        assert_close(g, w)
    runs.append({"value": value, "variant": ftile.variant_name(), "compiled": compiled()})
print(json.dumps(runs))
"""

# conv_tiles on the variant KERNELKIT_F32_GEMM names, against a float64 product; prints the rows
# driver's cache hits and misses in this process.
_TILES = """
import json
import numpy as np
from kernelkit_numba.kernels import ftile

kind = ftile.select()
rng = np.random.default_rng(1)
m_n, k_n, n_pix = 24, 40, 100
w = rng.standard_normal((m_n, k_n)).astype(np.float32)
x = rng.standard_normal((k_n, n_pix)).astype(np.float32)
b = rng.standard_normal(m_n).astype(np.float32)
out = np.zeros((m_n, n_pix), np.float32)
block, blocks, groups, kc = ftile.plan(kind, m_n, k_n, n_pix, 1)
ftile.conv_tiles(kind, ftile.pack_weights(w, ftile.MR[kind]), k_n, m_n, x.reshape(-1), 0, n_pix, n_pix, b,
                 np.zeros(m_n, np.float32), np.zeros(1, np.float32), False, np.float32(-np.inf), np.float32(np.inf),
                 out.reshape(-1), 0, n_pix, block, groups, kc, False, np.empty(1, np.float32), 0, blocks * groups)
want = w.astype(np.float64) @ x.astype(np.float64) + b[:, None]
d = ftile.rows_driver(kind)
print(json.dumps({"kind": kind, "err": float(np.abs(out - want).max()), "hits": sum(d.stats.cache_hits.values()),
                  "misses": sum(d.stats.cache_misses.values())}))
"""


def _probe(code: str, env: dict, *args: str):
    env = {**os.environ, "KERNELKIT_NUMBA_START": "eager", **env}
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _variants(compiled: dict) -> set:
    """The variants whose drivers hold compiled code (keys ftile.<driver>.<variant>); the generic
    tiles' helpers count as generic."""
    return {key.rsplit(".", 1)[-1] if key.startswith("ftile.") else "generic" for key in compiled}


@NO_JIT
@pytest.mark.parametrize("value", ["generic", "auto"])
def test_a_session_compiles_only_the_variant_it_runs(tmp_path, value):
    """A Session (rows tiles, Winograd on the tiles, cols tiles) compiles the drivers of its variant
    alone, each with one signature: the rows driver serves Conv and Winograd's batched GEMMs alike."""
    if value == "auto" and BEST is None:
        pytest.skip("auto runs the BLAS path on a CPU without AVX2")
    (run,) = _probe(_SESSION, {"NUMBA_CACHE_DIR": str(tmp_path)}, value)
    assert run["variant"] == (BEST if value == "auto" else "generic")
    assert _variants(run["compiled"]) == {run["variant"]}, run
    assert all(n == 1 for k, n in run["compiled"].items() if k.startswith("ftile.")), run
    rows = f"ftile.rows.{run['variant']}"
    assert rows in run["compiled"] and any(k.startswith("ftile.batched") for k in run["compiled"]), run
    if value == "auto":  # the 7x7 map on the cols tiles
        assert f"ftile.cols.{BEST}" in run["compiled"], run


@NO_JIT
@pytest.mark.skipif(BEST is None, reason="only the generic variant runs on this CPU")
def test_switching_the_variant_compiles_the_new_one(tmp_path):
    """KERNELKIT_F32_GEMM is read on every call: switching it in a running session compiles the new
    variant then (results checked against the reference after each switch); off adds nothing."""
    first, second, third = _probe(_SESSION, {"NUMBA_CACHE_DIR": str(tmp_path)}, f"{BEST},generic,off")
    assert _variants(first["compiled"]) == {BEST}
    assert _variants(second["compiled"]) == {BEST, "generic"}
    assert third["variant"] is None and third["compiled"] == second["compiled"]


@NO_JIT
def test_variant_drivers_are_cached_under_their_own_stable_key():
    """Each variant's driver has its own index key (the variant's name, not a pickle of the closure's
    intrinsics, which differs in every process), and the key carries Numba's CPU name and features."""
    from numba import types
    from numba.core.registry import cpu_target

    codegen = cpu_target.target_context.codegen()
    sig = (types.int64,)
    keys = {kind: ftile.rows_driver(kind)._cache.made()._index_key(sig, codegen) for kind in (0, 1, 2)}
    assert len({k[2] for k in keys.values()}) == 3
    assert all(k[1] == codegen.magic_tuple() for k in keys.values())
    assert ftile.cols_driver(2)._cache.made()._index_key(sig, codegen) != keys[2]
    probe = ("from numba import types; from numba.core.registry import cpu_target; "
             "from kernelkit_numba.kernels import ftile; "
             "print(repr(ftile.rows_driver(2)._cache.made()._index_key((types.int64,), "
             "cpu_target.target_context.codegen())))")
    again = [subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                            timeout=300).stdout for _ in range(2)]
    assert again[0] == again[1] == repr(keys[2]) + "\n"


@NO_JIT
def test_cached_drivers_load_only_for_their_variant_and_cpu(tmp_path):
    """The next process on the same variant and CPU loads the driver (no compilation); another CPU
    (NUMBA_CPU_NAME=generic: another key) or another variant compiles its own, each result exact."""
    cache = {"NUMBA_CACHE_DIR": str(tmp_path)}
    generic = {**cache, ftile.ENV: "generic"}
    first = _probe(_TILES, generic)
    assert first["misses"] == 1 and first["hits"] == 0
    again = _probe(_TILES, generic)
    assert again["hits"] == 1 and again["misses"] == 0
    other_cpu = _probe(_TILES, {**generic, "NUMBA_CPU_NAME": "generic"})
    assert other_cpu["misses"] == 1 and other_cpu["hits"] == 0
    runs = [first, again, other_cpu]
    if BEST is not None:
        best = _probe(_TILES, {**cache, ftile.ENV: BEST})
        assert best["kind"] == ftile.KIND[BEST] and best["misses"] == 1 and best["hits"] == 0
        runs.append(best)
    for run in runs:
        assert run["err"] < 1e-4, run


def test_progress_line_names_a_variant_driver_by_its_variant():
    from contextlib import contextmanager
    from types import SimpleNamespace

    from kernelkit_numba import progress

    shown = []

    @contextmanager
    def task(description):  # stands in for kernelkit.progress.task
        shown.append(description)
        yield

    line = progress._Line(task)
    line.on_start(SimpleNamespace(data={"dispatcher": ftile.rows_driver(0)}))
    line.on_end(None)
    assert shown == ["kernelkit-numba: compiling ftile.rows.generic (0 compiled)"]
