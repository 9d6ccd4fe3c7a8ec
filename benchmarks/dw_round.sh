#!/usr/bin/env bash
# The depthwise / MaxPool round (kernels/dwtile.py, docs/numba.md "Depthwise and pooling (issue 11,
# session 6)") in one call to the GPU machine's Xeon, each part pinned to its own pair of cores so
# that they run side by side (they share the L3 and memory bandwidth: ratios within a part count):
#   CPUs 0,1   MobileNetV2 and ResNet-18 at 1 and 2 threads: numba (tiles) / numba with
#              KERNELKIT_F32_DEPTHWISE=off / onnxruntime / reference, calls interleaved (bench_e2e_interleaved.py)
#   CPUs 2,3   test_dwtile.py on this CPU, then every depthwise layer and ResNet's MaxPool as one-node
#              models at 1 and 2 threads (bench_depthwise.py)
#   CPUs 4,5   per-node profiles of MobileNetV2 at 2 and 1 threads (profile_ops.py)
#   CPUs 6,7   the shard pool's trace of MobileNetV2 at 2 threads (trace_pool.py), then the protocol's
#              table for MobileNetV2 (test_bench_numba.py: each runtime in its own process, quiet)
#   CPUs 8,9   MobileNetV2 at 2 threads with config.SERIAL_WORK lowered (bench_serial_work.py)
# Usage (repository root, after `source .whl/prelude.sh` on the device): bash benchmarks/dw_round.sh OUTDIR
# Everything stops by BUDGET seconds (default 270) after the start.
set -u
ROUND_BUDGET=270
. "$(dirname "$0")/_round.sh"
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc01
  for t in 1 2; do
    pinned 0,1 $PY benchmarks/bench_e2e_interleaved.py mobilenetv2 15 $t 1 0 1
    pinned 0,1 $PY benchmarks/bench_e2e_interleaved.py resnet18 10 $t 1 0 1
  done > "$OUT/e2e.txt" 2>&1
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc23
  pinned 2,3 $PY -m pytest packages/cpu_numba/tests/test_dwtile.py -q -x -p no:cacheprovider > "$OUT/tests.txt" 2>&1
  pinned 2,3 $PY benchmarks/bench_depthwise.py 20 1,2 > "$OUT/bench_depthwise.txt" 2>&1
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc45
  for t in 2 1; do
    pinned 4,5 $PY benchmarks/profile_ops.py mobilenetv2 $t 8
  done > "$OUT/profile.txt" 2>&1
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc67
  pinned 6,7 $PY benchmarks/trace_pool.py mobilenetv2 --threads 2 --cpus 6,7 > "$OUT/trace.txt" 2>&1
  pinned 6,7 $PY benchmarks/test_bench_numba.py mobilenetv2 5 quiet > "$OUT/table.txt" 2>&1
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc89
  pinned 8,9 $PY benchmarks/bench_serial_work.py mobilenetv2 30 25,23,21,19 10,20 > "$OUT/serial_work.txt" 2>&1
) &
wait
