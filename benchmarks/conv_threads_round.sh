#!/usr/bin/env bash
# Two-thread convolutions on the GPU machine's Xeon in one device call (docs/numba.md, "Two threads
# with the micro-kernels (issue 11, session 6)"): four parts side by side, each pinned to its own
# two cores (they share the L3 and memory bandwidth: compare within a part):
#   CPUs 0,1   this tree: the protocol's table (test_bench_numba.py, each runtime in its own process)
#   CPUs 2,3   the baseline tree BASE (another checkout's root, e.g. `git archive` of main): the same
#   CPUs 4,5   this tree: the shard pool's trace of ResNet-18/50 at 2 threads (trace_pool.py), then
#              per layer 1t vs 2t with the shard trace and variants (bench_conv_threads.py)
#   CPUs 6,7   this tree: whole models 1t / 2t with session 5's settings as a variant and with the pool
#              never backing off, interleaved; per-node profiles of ResNet-18 at 2 and 1 threads
# Usage (repository root, after `source .whl/prelude.sh`): BASE=dir bash benchmarks/conv_threads_round.sh OUT
# Everything stops BUDGET seconds (default 330) after the start.
set -u
ROUND_BUDGET=330
. "$(dirname "$0")/_round.sh"
OLD="winograd._TRANSFORM_WORK=40.0,winograd._OUT_WORK=40.0,winograd._TRANSFORM4_WORK=60.0,winograd._OUT4_WORK=60.0"
OLD="$OLD,conv._IM2COL_WORK=2.0,conv.WINO_SMALL=0,ftile.BALANCED_PLAN=0,conv.IMPLICIT=0"
{ lscpu; lscpu -e; $PY -c "import numba, numpy, onnxruntime; print(numba.__version__, numpy.__version__, onnxruntime.__version__)"; } > "$OUT/env.txt" 2>&1
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc01
  pinned 0,1 $PY benchmarks/test_bench_numba.py resnet18,resnet50,mobilenetv2 5 quiet > "$OUT/table.txt" 2>&1
) &
if [ -n "${BASE:-}" ]; then
  (
    export NUMBA_CACHE_DIR=/tmp/kk_nc23
    src=$(cd "$BASE" && pwd)
    export PYTHONPATH="$src/packages/core/src:$src/packages/cpu_numba/src:$src/packages/converters/src:${PYTHONPATH:-}"
    cd "$BASE" && pinned 2,3 $PY benchmarks/test_bench_numba.py resnet18,resnet50,mobilenetv2 5 quiet > "$OUT/table_base.txt" 2>&1
  ) &
fi
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc45
  pinned 4,5 $PY benchmarks/bench_conv_threads.py 15 "$OLD" conv.IMPLICIT=0 conv.WINO_FTILE_MIN_C=64 \
    > "$OUT/layers.txt" 2>&1
  {
    for m in resnet18 resnet50; do
      pinned 4,5 $PY benchmarks/trace_pool.py $m --threads 2 --runs 10 --cpus 4,5
    done
    pinned 4,5 env KERNELKIT_NUMBA_SPIN_US=2000 $PY benchmarks/trace_pool.py resnet18 --threads 2 --runs 10 --cpus 4,5
  } > "$OUT/trace.txt" 2>&1
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc67
  pinned 6,7 env KK_MODELS=resnet18,resnet50 $PY benchmarks/bench_conv_threads.py 10 "$OLD" \
    pool.backoff=0,pool._serial_until=0.0 > "$OUT/models.txt" 2>&1
  pinned 6,7 $PY benchmarks/profile_ops.py resnet18 2 8 > "$OUT/profile2.txt" 2>&1
  pinned 6,7 $PY benchmarks/profile_ops.py resnet18 1 8 > "$OUT/profile1.txt" 2>&1
) &
wait
