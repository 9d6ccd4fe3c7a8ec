#!/usr/bin/env bash
# Every CPU measurement round of issues 10, 11, 16 and 17 plus the OpenCL script, in one call to the
# GPU machine (16-core Xeon + H100), each CPU round pinned to its own pair of cores so that they run
# side by side within one device call:
#   CPUs 0,1   numba_round.sh quiet,loaded (its busy loop takes CPU 0 in the loaded phase)
#   CPUs 2,3   host cost per node, memory plan, first run
#   CPUs 4,5   int8: the micro-kernel tests on this CPU (vnni512 where it has AVX-512 VNNI), the
#              micro-kernels' GOP/s, the four quantized models at 1 and 2 threads
#   CPUs 6,7   scale-out (local engine: 1 and 2 worker processes x 1 thread)
#   CPUs 8-15  the OpenCL round (benchmarks/gpu/issue12_round.sh bench,tests: run_gpu.py and the
#              OpenCL package tests on the NVIDIA device)
# The rounds share the host's memory bandwidth and L3, so they are a little slower than one round
# alone would be; ratios within a round are what counts. Usage (repository root, after
# `source .whl/prelude.sh` on the device): bash benchmarks/device_round.sh OUTDIR [ROUNDS]
set -u
OUT=${1:?output folder}
ROUNDS=${2:-10}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export KERNELKIT_NUMBA_START=eager
pinned() { local cpus=$1; shift; taskset -c "$cpus" "$@"; }
(
  NUMBA_CACHE_DIR=/tmp/kk_nc01 bash benchmarks/numba_round.sh quiet,loaded "$ROUNDS" > "$OUT/numba_round.txt" 2>&1
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc23
  pinned 2,3 $PY benchmarks/host_overhead.py --build 2000 20000 --repeats 40 > "$OUT/host_overhead.txt" 2>&1
  pinned 2,3 $PY benchmarks/memory_plan.py > "$OUT/memory_plan.txt" 2>&1
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc45
  pinned 4,5 $PY -m pytest packages/cpu_numba/tests/test_qtile.py -q -p no:cacheprovider > "$OUT/qtile_tests.txt" 2>&1
  pinned 4,5 $PY benchmarks/qtile_gops.py > "$OUT/qtile_gops.txt" 2>&1
  pinned 4,5 $PY benchmarks/quantized.py --threads 1 --rounds 15 --agreement 100 > "$OUT/quantized_1t.txt" 2>&1
  pinned 4,5 $PY benchmarks/quantized.py --threads 2 --rounds 15 --agreement 20 > "$OUT/quantized_2t.txt" 2>&1
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc67
  pinned 6,7 $PY benchmarks/scaleout.py 128 16 numba local > "$OUT/scaleout.txt" 2>&1
) &
if [ -z "${SKIP_GPU:-}" ]; then
  (pinned 8-15 bash benchmarks/gpu/issue12_round.sh "$OUT/gpu" "${GPU_STEPS:-bench,tests}" > "$OUT/run_gpu.txt" 2>&1) &
fi
wait
for f in "$OUT"/*.txt; do echo "=== $f"; tail -n 40 "$f"; done
