#!/usr/bin/env bash
# The float32 GEMM round (kernels/fgemm.py, docs/numba.md "fp32 GEMM micro-kernels (issue 11, session
# 6)") in one call to the GPU machine's Xeon, each part pinned to its own pair of cores so that they
# run side by side (they share the L3 and memory bandwidth: ratios within a part count):
#   CPUs 0,1   the MLP, the transformer and the transformer at batch 8, at 1 and 2 threads: numba /
#              numba with KERNELKIT_F32_GEMM=off / onnxruntime (/ reference), calls interleaved in one
#              process (bench_e2e_interleaved.py)
#   CPUs 2,3   test_fgemm.py on this CPU, then the kernels per shape against np.dot and ORT's MatMul
#              at 1 and 2 threads (bench_fgemm.py)
#   CPUs 4,5   the protocol's table (test_bench_numba.py: each runtime in its own process, quiet)
#   CPUs 6,7   the MLP's per-run host cost (bench_fgemm.py mlp) and per-node minima against
#              onnxruntime's (bench_transformer_ops.py)
# Usage (repository root, after `source .whl/prelude.sh` on the device): bash benchmarks/fgemm_round.sh OUTDIR
# Everything stops by BUDGET seconds (default 270) after the start, so that the files written so far
# come back from a device call with a time limit.
set -u
ROUND_BUDGET=270
. "$(dirname "$0")/_round.sh"
ROUNDS=${ROUNDS:-15}
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc01
  for t in 1 2; do
    pinned 0,1 $PY benchmarks/bench_e2e_interleaved.py mlp "$ROUNDS" $t 1 1
    pinned 0,1 $PY benchmarks/bench_e2e_interleaved.py transformer "$ROUNDS" $t 1 1
  done > "$OUT/e2e.txt" 2>&1
  for t in 1 2; do
    pinned 0,1 $PY benchmarks/bench_e2e_interleaved.py transformer_b8 $(( ROUNDS / 2 + 1 )) $t 1 1
  done >> "$OUT/e2e.txt" 2>&1
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc23
  pinned 2,3 $PY -m pytest packages/cpu_numba/tests/test_fgemm.py -q -x -p no:cacheprovider > "$OUT/tests.txt" 2>&1
  pinned 2,3 $PY benchmarks/bench_fgemm.py $(( ROUNDS * 2 )) 1 > "$OUT/bench_fgemm.txt" 2>&1
  pinned 2,3 $PY benchmarks/bench_fgemm.py $(( ROUNDS * 2 )) 2 >> "$OUT/bench_fgemm.txt" 2>&1
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc45
  pinned 4,5 $PY benchmarks/test_bench_numba.py mlp,transformer,transformer_b8 5 quiet > "$OUT/table.txt" 2>&1
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc67
  pinned 6,7 $PY benchmarks/bench_fgemm.py mlp 200 > "$OUT/ops.txt" 2>&1
  pinned 6,7 $PY benchmarks/bench_transformer_ops.py transformer,mlp 8 >> "$OUT/ops.txt" 2>&1
) &
wait
