#!/usr/bin/env bash
# ResNet-50's 1x1 layers at one thread (issue 11, session 11, r50t11b): the switches of that round in
# turns (CPUs 0,1) and per node in the model (nodes_ab.py, CPUs 2,3), side by side, each under the time
# left of LIMIT seconds; the Numba cache warmed first (no new drivers: the cols and 12-row rows drivers
# are the defaults').
#   bash benchmarks/r50t11b_round.sh OUT
out=${1:-out}
mkdir -p "$out"
export KERNELKIT_NUMBA_START=eager
cd "$(dirname "$0")" || exit 1
t0=$(date +%s)
timeout 90 taskset -c 0 python3 -c "
import sys; sys.path.insert(0, '.')
from test_bench_numba import model_case, kernelkit_session
proto, model, feed, g = model_case('resnet50'); kernelkit_session(model, 'numba1').run(None, feed)" \
  > "$out/warm.txt" 2>&1
echo "warm: $(( $(date +%s) - t0 )) s" >> "$out/warm.txt"
V=("cols196=kernels.conv.FTILE_COLS_MAX_ONE_THREAD=196"
   "c196k128=kernels.conv.FTILE_COLS_MAX_ONE_THREAD=196;kernels.conv.FTILE_COLS_KC_ONE_THREAD=128"
   "kc512=kernels.ftile.KC12=512" "blk1m12=kernels.ftile.BLOCK_BYTES12=1048576")
T=()
for v in "${V[@]}"; do T+=(--variant1 "$v"); done
left=$(( ${LIMIT:-300} - ( $(date +%s) - t0 ) ))
timeout $left taskset -c 0,1 python3 turns.py resnet50 --rounds "${ROUNDS:-9}" --runtimes numba1,reference1,ort1 \
  "${T[@]}" --json "$out/turns_r50.jsonl" > "$out/turns_r50.txt" 2>&1 &
timeout $left taskset -c 2,3 python3 nodes_ab.py resnet50 "${RUNS:-9}" "${V[@]:0:3}" > "$out/nodes_r50.txt" 2>&1 &
wait
echo "total: $(( $(date +%s) - t0 )) s" >> "$out/warm.txt"
lscpu | grep -E "Model name|L1d|L2|L3" > "$out/env.txt"
