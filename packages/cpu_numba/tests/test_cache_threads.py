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
from kernelkit_numba.kernels import softmax
softmax.softmax(np.ones((2, 3), np.float32))
jitted = [f for f in vars(softmax).values() if isinstance(f, CPUDispatcher) and f.signatures]
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
    assert used >= 1 and (hits, misses) == (0, used)  # empty cache dir: every kernel compiled and written
    assert probe() == [used, 0, used]  # second process: every kernel loaded, none compiled


def test_num_threads_context_sets_and_restores():
    before = numba.get_num_threads()
    with config.num_threads(1):
        assert numba.get_num_threads() == 1
    assert numba.get_num_threads() == before
    with config.num_threads(None):
        assert numba.get_num_threads() == before


def test_session_threads_reach_class_kernels(rng, monkeypatch):
    from kernelkit_numba.kernels.conv import Conv

    seen = []
    original = Conv.compute

    def spy(self, *xs):
        seen.append(numba.get_num_threads())
        seen.extend(lib.get_num_threads() for lib in config._blas_controllers())
        return original(self, *xs)

    g = kernelkit.GraphBuilder("t")
    x = g.input("x", (1, 2, 5, 5))
    g.output(g.op("Conv", x, rng.standard_normal((3, 2, 3, 3)).astype(np.float32)))
    monkeypatch.setattr(Conv, "compute", spy)
    kernelkit.Session(g.build(), vendors=["numba"], fallback=False, threads=1).run(
        None, {"x": np.ones((1, 2, 5, 5), np.float32)})
    assert seen and set(seen) == {1}  # numba's and every BLAS library's count
