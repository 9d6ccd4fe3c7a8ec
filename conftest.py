"""Settings for every test directory of the workspace (pytest loads this file first)."""
import os

# Numba kernels compile on their first call in tests, as before tiered start: a test of a session
# then checks the numba kernels from its first run, not their reference stand-ins (tiered start has
# its own tests: packages/cpu_numba/tests/test_tiered.py, which set the mode per process).
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
