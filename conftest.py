"""Settings for every test directory of the workspace (pytest loads this file first)."""
import os
from pathlib import Path

import pytest

# Numba kernels compile on their first call in tests, as before tiered start: a test of a session
# then checks the numba kernels from its first run, not their reference stand-ins (tiered start has
# its own tests: packages/cpu_numba/tests/test_tiered.py, which set the mode per process).
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")

# pytest-xdist's workers for the default run (addopts: -n auto --dist loadfile): one per CPU this process
# may run on (its affinity, so `taskset -c 0,1 python3 -m pytest` starts two; xdist's own count is the
# machine's physical cores), at most MAX_WORKERS: each worker compiles and holds its own numba kernels
# (about 1.5 GB at the end of a run). PYTEST_XDIST_AUTO_NUM_WORKERS still sets the number; -n N or -n 0 too.
# In one process: `python3 -m pytest benchmarks` (pytest-benchmark times nothing under xdist) and a run of
# one file (`python3 -m pytest path/to/test_x.py[::test]`: one worker would run it all anyway).
MAX_WORKERS = 8
BENCHMARKS = Path(__file__).resolve().parent / "benchmarks"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    paths = {Path(str(arg).split("::")[0]).resolve() for arg in config.args}
    if paths and all(p.is_relative_to(BENCHMARKS) for p in paths):
        return 0
    if len(paths) == 1 and next(iter(paths)).is_file():
        return 0
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # xdist's own hook reads it
    return max(1, min(len(os.sched_getaffinity(0)), MAX_WORKERS))
