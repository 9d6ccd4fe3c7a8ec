"""Issue 13 item 5: a corrupt Numba cache is detected, discarded and recompiled with one warning,
in the process that meets it, and later processes load the repaired cache (870925c failed every
numba kernel in every later process with UnpicklingError/EOFError)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

JIT_OFF = os.environ.get("NUMBA_DISABLE_JIT", "0") not in ("", "0")

_PROBE = """
import json, warnings
import numpy as np
from numba.core.registry import CPUDispatcher
from kernelkit.testing import run_single_op
from kernelkit_numba.kernels import softmax
x = np.array([[1, 2, 3], [-1, 0, 40]], np.float32)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    got = run_single_op("Softmax", [x], vendors=["numba"], fallback=False)[0]
want = run_single_op("Softmax", [x], vendors=["reference"])[0]
jitted = [f for f in vars(softmax).values() if isinstance(f, CPUDispatcher) and f.signatures]
print(json.dumps({"close": bool(np.allclose(got, want, rtol=1e-5, atol=1e-6)),
                  "hits": sum(sum(f.stats.cache_hits.values()) for f in jitted),
                  "misses": sum(sum(f.stats.cache_misses.values()) for f in jitted),
                  "warnings": [str(w.message) for w in caught if "numba cache" in str(w.message)]}))
"""


def _probe(cache: Path, before: str = "") -> dict:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    out = subprocess.run([sys.executable, "-c", before + _PROBE], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _corrupt(cache: Path, suffix: str, how: str) -> int:
    files = list(cache.rglob(f"*{suffix}"))
    for f in files:
        data = f.read_bytes()
        if how == "truncate":
            f.write_bytes(data[: len(data) // 3])  # EOFError / UnpicklingError
        elif how == "garbage":
            f.write_bytes(b"\x80\x04\x95" + os.urandom(64))  # UnpicklingError
        else:  # "utf8": a pickled str whose bytes are not UTF-8
            f.write_bytes(b"\x80\x04X\x04\x00\x00\x00\xff\xfe\xfd\xfc.")
    return len(files)


@pytest.mark.skipif(JIT_OFF, reason="nothing is compiled or cached when NUMBA_DISABLE_JIT=1")
def test_corrupt_numba_cache_is_discarded_and_recompiled(tmp_path):
    first = _probe(tmp_path)
    assert first["close"] and first["misses"] > 0 and not first["warnings"]
    for suffix, how in ((".nbc", "truncate"), (".nbi", "utf8")):  # EOFError/UnpicklingError, UnicodeDecodeError
        assert _corrupt(tmp_path, suffix, how) > 0
        hurt = _probe(tmp_path)  # the process that meets the damage: right answer, one warning
        assert hurt["close"], (suffix, how)
        assert len(hurt["warnings"]) == 1, (suffix, how, hurt["warnings"])
        assert hurt["hits"] == 0 and hurt["misses"] > 0
    healed = _probe(tmp_path)  # the next one loads what the previous one wrote back
    assert healed["close"] and not healed["warnings"] and healed["hits"] > 0 and healed["misses"] == 0, healed


@pytest.mark.skipif(JIT_OFF, reason="nothing is compiled or cached when NUMBA_DISABLE_JIT=1")
def test_a_change_anywhere_in_the_package_recompiles_its_kernels(tmp_path):
    """Numba alone would reuse softmax's cached code after a helper module it inlines changed; the
    index key carries the package's source fingerprint, so another fingerprint is a cache miss."""
    from kernelkit_numba import cache

    assert len(cache.package_fingerprint()) == 64
    assert _probe(tmp_path)["misses"] > 0
    again = _probe(tmp_path)
    assert again["hits"] > 0 and again["misses"] == 0, again
    edited = "import kernelkit_numba.cache as c\nc.package_fingerprint = lambda: 'edited'\n"
    changed = _probe(tmp_path, before=edited)
    assert changed["close"] and changed["hits"] == 0 and changed["misses"] > 0, changed
    assert _probe(tmp_path)["misses"] == 0  # the original sources' entries are still there
