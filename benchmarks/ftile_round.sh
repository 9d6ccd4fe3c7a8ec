#!/usr/bin/env bash
# The float32 micro-kernels' round (kernels/ftile.py, docs/numba.md "fp32 micro-kernels (issue 11,
# session 5)") in one call to the GPU machine's Xeon, each part pinned to its own pair of cores so
# that they run side by side (they share the L3 and memory bandwidth: ratios within a part count):
#   CPUs 0,1   the three CNNs at 1 thread (then 2): numba (ftile on) / numba with KERNELKIT_F32_GEMM=off
#              / onnxruntime / reference, calls interleaved in one process (bench_e2e_interleaved.py)
#   CPUs 2,3   test_ftile.py on this CPU, then every dense conv layer (bench_ftile.py) and the kernels
#              alone against np.dot (bench_ftile.py raw)
#   CPUs 4,5   per-node profiles at 1 thread (profile_ops.py)
#   CPUs 6,7   the protocol's table for the three CNNs (test_bench_numba.py: each runtime in its own
#              process, quiet)
# Usage (repository root, after `source .whl/prelude.sh` on the device): bash benchmarks/ftile_round.sh OUTDIR
# Everything stops by BUDGET seconds (default 420) after the start, so that the files written so far
# come back from a device call with a time limit.
set -u
ROUND_BUDGET=420
. "$(dirname "$0")/_round.sh"
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc01
  for t in 1 2; do
    for m in resnet18 resnet50 mobilenetv2; do
      pinned 0,1 $PY benchmarks/bench_e2e_interleaved.py $m 15 $t 1 1
    done
  done > "$OUT/e2e.txt" 2>&1
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc23
  pinned 2,3 $PY -m pytest packages/cpu_numba/tests/test_ftile.py -q -p no:cacheprovider > "$OUT/tests.txt" 2>&1
  pinned 2,3 $PY benchmarks/bench_ftile.py 15 > "$OUT/bench_ftile.txt" 2>&1
  pinned 2,3 $PY benchmarks/bench_ftile.py raw 10 > "$OUT/bench_ftile_raw.txt" 2>&1
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc45
  for m in mobilenetv2 resnet50 resnet18; do
    pinned 4,5 $PY benchmarks/profile_ops.py $m 1 8
  done > "$OUT/profile.txt" 2>&1
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc67
  pinned 6,7 $PY benchmarks/test_bench_numba.py resnet18,resnet50,mobilenetv2 5 quiet > "$OUT/table.txt" 2>&1
) &
wait
