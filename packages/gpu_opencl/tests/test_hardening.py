"""Regression tests for issue 13, OpenCL side: each test names the item it guards and failed on
870925c."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

_READ_ONLY_PROBE = """
import json, warnings
import numpy as np
from kernelkit.testing import run_single_op
x = np.array([-1.5, 0.0, 2.0, 3.25], np.float32)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    got = run_single_op("Relu", [x], device="gpu", fallback=False)[0]
print(json.dumps({"got": got.tolist(), "warnings": [str(w.message) for w in caught]}))
"""


def _probe_read_only_home(tmp_path, **env_extra) -> dict:
    blocker = tmp_path / "not-a-folder"  # a file: nothing can be created below it, even by root
    blocker.write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("POCL_CACHE_DIR", "KERNELKIT_CACHE_DIR",
                                                            "PYOPENCL_NO_CACHE")}
    env.update(HOME=str(blocker / "home"), XDG_CACHE_HOME=str(blocker / "cache"), **env_extra)
    out = subprocess.run([sys.executable, "-c", _READ_ONLY_PROBE], env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_read_only_home_and_xdg_cache(tmp_path):
    """Item 6: with HOME and XDG_CACHE_HOME unwritable, OpenCL kernels still run right: with a valid
    KERNELKIT_CACHE_DIR the caches go there, without one they stay in memory, each with a warning
    (870925c: NotADirectoryError from pyopencl's invoker cache in every kernel; PoCL listed no device)."""
    cache = tmp_path / "kk-cache"
    first = _probe_read_only_home(tmp_path, KERNELKIT_CACHE_DIR=str(cache))
    assert first["got"] == [0.0, 0.0, 2.0, 3.25]
    assert any("pyopencl's caching is off" in w for w in first["warnings"]), first["warnings"]
    assert list((cache / "opencl" / "programs").glob("*.bin")), "program cache not written to KERNELKIT_CACHE_DIR"
    assert (cache / "pocl").is_dir()  # PoCL's cache redirected beside ours
    second = _probe_read_only_home(tmp_path, POCL_CACHE_DIR=str(cache / "pocl"))
    assert second["got"] == [0.0, 0.0, 2.0, 3.25]
    assert any("kept in memory only" in w for w in second["warnings"]), second["warnings"]
