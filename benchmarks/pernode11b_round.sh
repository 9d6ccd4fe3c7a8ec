#!/usr/bin/env bash
# Issue 11's per-node check on the device (issue 11, session 11, pernode11b): the Numba cache warmed by
# one ops_vs_reference.py process per model side by side, then the four models on CPUs 0,1 alone, then
# bench_pernode11.py's nodes alone on CPU 0 in the time left of LIMIT seconds.
#   bash benchmarks/pernode11b_round.sh OUT
out=${1:-out}
mkdir -p "$out"
export KERNELKIT_NUMBA_START=eager
cd "$(dirname "$0")" || exit 1
t0=$(date +%s)
lscpu | grep -E "Model name|L1d|L2|L3" > "$out/env.txt"
cpu=0
for m in detection_head regnet_y_400mf resnet50 bert; do
  timeout 60 taskset -c $cpu,$((cpu + 1)) python3 ops_vs_reference.py $m 1 > "$out/warm_$m.txt" 2>&1 &
  cpu=$((cpu + 2))
done
wait
echo "warm: $(( $(date +%s) - t0 )) s" >> "$out/env.txt"
left=$(( ${LIMIT:-140} - ( $(date +%s) - t0 ) ))
timeout $left taskset -c 0,1 python3 ops_vs_reference.py detection_head,regnet_y_400mf,resnet50,bert "${RUNS:-7}" \
  > "$out/ops.txt" 2>&1
echo "ops: $(( $(date +%s) - t0 )) s" >> "$out/env.txt"
left=$(( ${LIMIT:-140} - ( $(date +%s) - t0 ) ))
[ "$left" -gt 5 ] && timeout $left taskset -c 0 python3 bench_pernode11.py 10 > "$out/alone.txt" 2>&1
echo "total: $(( $(date +%s) - t0 )) s" >> "$out/env.txt"
