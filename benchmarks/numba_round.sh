#!/usr/bin/env bash
# The numba backend's measurement round (docs/benchmarks.md, "Numba backend"): every runtime in its
# own process, everything pinned to CPUs 0,1 (a 2-core stand-in on a bigger host); "loaded" runs a
# busy loop pinned to CPU 0 meanwhile. Usage (from the repository root):
#   bash benchmarks/numba_round.sh [quiet|loaded|quiet,loaded] [rounds] [models]
#   first-run (cold/warm cache), the thread micro-benchmark and the small-op table run with "quiet"
set -u
MODE=${1:-quiet,loaded}
ROUNDS=${2:-10}
MODELS=${3:-resnet18,resnet50,mobilenetv2,transformer,mlp,transformer_b8}
PY=${PYTHON:-python3}
export NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-/tmp/kk_numba_cache}
# steady-state tables: kernels compile in the warm-up calls, not in the background during timed
# blocks (docs/numba.md, "First call"); bench_first_run.py sets the start mode of its own processes
export KERNELKIT_NUMBA_START=${KERNELKIT_NUMBA_START:-eager}
pin() {
  if command -v taskset >/dev/null; then taskset -c 0,1 "$@"
  else "$PY" -c 'import os, sys; os.sched_setaffinity(0, {0, 1}); os.execvp(sys.argv[1], sys.argv[1:])' "$@"; fi
}
if [[ $MODE == *quiet* ]]; then
  pin $PY benchmarks/bench_first_run.py resnet18 /tmp/kk_first_run_cache
  pin $PY benchmarks/bench_threads.py 0,1 200
  $PY benchmarks/bench_pool.py --cpus 0,1   # pins itself; quiet and with a busy loop on CPU 0
  pin $PY benchmarks/bench_small_ops.py 30
fi
pin $PY benchmarks/test_bench_numba.py "$MODELS" "$ROUNDS" "$MODE"
