"""cache=True: a second process loads compiled kernels from disk; Session(threads=...) reaches
Numba's thread count."""
import json
import os
import subprocess
import sys

import kernelkit
import numba
import numpy as np
import pytest
from kernelkit_numba import config

JIT_OFF = os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0")

_PROBE = """
import json, numpy as np
from numba.core.registry import CPUDispatcher
from kernelkit_numba.config import Twin, serial
from kernelkit_numba.kernels import softmax
softmax.softmax(np.ones((2, 3), np.float32))
with serial():
    softmax.softmax(np.ones((2, 3), np.float32))
found = [d for f in vars(softmax).values() if isinstance(f, Twin) for d in f.dispatchers]
jitted = [f for f in found if isinstance(f, CPUDispatcher) and f.signatures]
print(json.dumps([sum(sum(f.stats.cache_hits.values()) for f in jitted),
                  sum(sum(f.stats.cache_misses.values()) for f in jitted), len(jitted)]))
"""


@pytest.mark.skipif(JIT_OFF, reason="nothing is compiled or cached when NUMBA_DISABLE_JIT=1")
def test_second_process_loads_from_cache(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}

    def probe():
        out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True,
                             check=True, timeout=120)
        return json.loads(out.stdout.strip().splitlines()[-1])

    hits, misses, used = probe()
    assert used >= 2 and (hits, misses) == (0, used)  # empty cache dir: every kernel compiled and written
    assert probe() == [used, 0, used]  # second process: every kernel loaded, none compiled
    # (parallel and serial twins both: distinct cache entries, though one Python function)


def test_num_threads_context_sets_and_restores():
    before = numba.get_num_threads()
    with config.num_threads(1):
        assert numba.get_num_threads() == 1
    assert numba.get_num_threads() == before
    with config.num_threads(None):
        assert numba.get_num_threads() == before


def test_blas_threads_context_sets_and_restores():
    libs = config._blas_controllers()
    before = [lib.get_num_threads() for lib in libs]
    with config.blas_threads(1):
        assert all(lib.get_num_threads() == 1 for lib in libs)
    assert [lib.get_num_threads() for lib in libs] == before


def test_twin_runs_serial_copy_inside_serial(rng, monkeypatch):
    from kernelkit_numba.kernels import softmax

    x = rng.standard_normal((4, 5)).astype(np.float32)
    twin = softmax._shift_rows
    serial_fn = getattr(twin.serial, "py_func", twin.serial)
    calls = []
    if JIT_OFF:  # the twins are the plain functions: count calls instead of compiled signatures
        for name in ("serial", "parallel"):
            fn = getattr(twin, name)
            monkeypatch.setattr(twin, name, lambda *a, _f=fn, _n=name: calls.append(_n) or _f(*a))
    before = 0 if JIT_OFF else len(twin.parallel.signatures)
    with config.serial():
        got = softmax.softmax(x)
    if JIT_OFF:
        assert calls == ["serial"]
    else:
        assert len(twin.serial.signatures) >= 1 and len(twin.parallel.signatures) == before
    np.testing.assert_allclose(got, softmax.softmax(x), rtol=0, atol=0)  # serial == parallel, exactly here
    assert serial_fn.__qualname__ == "_shift_rows_serial"  # its own disk-cache entry


def _spy_conv(monkeypatch, threads, shape):
    from kernelkit_numba.kernels.conv import Conv

    seen = []
    original = Conv.compute

    def spy(self, *xs):
        seen.append((config.in_serial(), numba.get_num_threads(),
                     tuple(lib.get_num_threads() for lib in config._blas_controllers())))
        return original(self, *xs)

    g = kernelkit.GraphBuilder("t")
    x = g.input("x", shape)
    g.output(g.op("Conv", x, np.ones((8, shape[1], 3, 3), np.float32)))
    monkeypatch.setattr(Conv, "compute", spy)
    kernelkit.Session(g.build(), vendors=["numba"], fallback=False, threads=threads).run(
        None, {"x": np.ones(shape, np.float32)})
    return seen


def test_session_threads_one_runs_serial_with_one_blas_thread(monkeypatch):
    [(serial, _, blas)] = _spy_conv(monkeypatch, 1, (1, 2, 5, 5))
    assert serial and set(blas) <= {1}  # serial twins, and every BLAS library at one thread
    assert not config.in_serial()  # reset after the call


def test_large_call_runs_parallel_at_session_threads(monkeypatch):
    [(serial, threads, blas)] = _spy_conv(monkeypatch, 2, (1, 64, 64, 64))  # ~38 MFLOP: above SERIAL_WORK
    assert not serial and threads == min(2, config.max_threads()) and set(blas) <= {2}
