#!/usr/bin/env bash
# Two threads on the GPU machine's Xeon in one device call (docs/numba.md, "Two threads, again (issue
# 11, session 7)"): parts side by side, each pinned to its own two cores (they share the L3 and the
# memory bandwidth: compare within a part, and the same part of this tree against BASE):
#   CPUs 0,1 / 2,3     this tree / BASE: the protocol's table, quiet (test_bench_numba.py, each
#                      runtime in its own process); SWAP=1: the other way round
#   CPUs 4,5 / 6,7     this tree / BASE: the same, loaded (a busy loop on CPU 4 / 6); SWAP=1: swapped
#   CPUs 8,9 / 14,15   this tree with VARIANT_A / VARIANT_B (KERNELKIT_BENCH_SET), quiet
#   CPUs 10,11 / 12,13 this tree / BASE: per node 1t vs 2t and the pool's jobs (trace_nodes.py)
# Usage (repository root, after `source .whl/prelude.sh`):
#   BASE=dir MODELS=resnet18,mobilenetv2,transformer VARIANT_A=... VARIANT_B=... bash benchmarks/two_threads_round.sh OUT
# Everything stops BUDGET seconds (default 280) after the start.
set -u
ROUND_BUDGET=280
. "$(dirname "$0")/_round.sh"
MODELS=${MODELS:-resnet18,mobilenetv2,transformer}
ROUNDS=${ROUNDS:-5}
HERE=$(pwd)
{ lscpu; lscpu -e; $PY -c "import numba, numpy, onnxruntime; print(numba.__version__, numpy.__version__, onnxruntime.__version__)"; } > "$OUT/env.txt" 2>&1
base() {  # run "$@" in BASE with BASE's packages first on the path
  local src
  src=$(cd "$BASE" && pwd)
  (cd "$BASE" && export PYTHONPATH="$src/packages/core/src:$src/packages/cpu_numba/src:$src/packages/converters/src:${PYTHONPATH:-}" && "$@")
}
table() {  # cpus mode file [base]
  local cpus=$1 mode=$2 file=$3
  if [ "${4:-}" = base ]; then
    base pinned "$cpus" $PY benchmarks/test_bench_numba.py "$MODELS" "$ROUNDS" "$mode" > "$OUT/$file" 2>&1
  else
    pinned "$cpus" $PY benchmarks/test_bench_numba.py "$MODELS" "$ROUNDS" "$mode" > "$OUT/$file" 2>&1
  fi
}
nodes() {  # cpus file [base]
  local cpus=$1 file=$2 m
  for m in ${MODELS//,/ }; do
    if [ "${3:-}" = base ]; then
      base pinned "$cpus" $PY "$HERE/benchmarks/trace_nodes.py" "$m" --runs 10 --cpus "$cpus" --json
    else
      pinned "$cpus" $PY benchmarks/trace_nodes.py "$m" --runs 10 --cpus "$cpus" --json
    fi
  done > "$OUT/$file" 2>&1
}
Q_NEW=0,1 Q_BASE=2,3 L_NEW=4,5 L_BASE=6,7
if [ "${SWAP:-0}" = 1 ]; then Q_NEW=2,3 Q_BASE=0,1 L_NEW=6,7 L_BASE=4,5; fi  # a second pass, pairs swapped
( export NUMBA_CACHE_DIR=/tmp/kk_nc_qn; table $Q_NEW quiet table_new.txt ) &
if [ -n "${BASE:-}" ]; then
  ( export NUMBA_CACHE_DIR=/tmp/kk_nc_qb; table $Q_BASE quiet table_base.txt base ) &
  ( export NUMBA_CACHE_DIR=/tmp/kk_nc_lb; table $L_BASE loaded loaded_base.txt base ) &
  ( export NUMBA_CACHE_DIR=/tmp/kk_nc1213; nodes 12,13 nodes_base.txt base ) &
fi
( export NUMBA_CACHE_DIR=/tmp/kk_nc_ln; table $L_NEW loaded loaded_new.txt ) &
if [ -n "${VARIANT_A:-}" ]; then
  ( export NUMBA_CACHE_DIR=/tmp/kk_nc89 KERNELKIT_BENCH_SET=$VARIANT_A; echo "$VARIANT_A" > "$OUT/variant_a.txt"
    table 8,9 quiet table_a.txt ) &
fi
if [ -n "${VARIANT_B:-}" ]; then
  ( export NUMBA_CACHE_DIR=/tmp/kk_nc1415 KERNELKIT_BENCH_SET=$VARIANT_B; echo "$VARIANT_B" > "$OUT/variant_b.txt"
    table 14,15 quiet table_b.txt ) &
fi
( export NUMBA_CACHE_DIR=/tmp/kk_nc1011; nodes 10,11 nodes_new.txt ) &
wait
