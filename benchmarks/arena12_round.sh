#!/usr/bin/env bash
# The hot memory plan on the device (issue 11, session 12, arena12): the Numba cache warmed by
# arena_hot.py (the plans of the ten models: arena and destination ages, HOT off and on) side by side
# on CPUs 2-15, then on CPUs 0,1 alone: arena_hot_ab.py's per-node A/B (reference, HOT=0, HOT=1 in one
# process) and turns.py's one-thread whole-model A/B, one model at a time, in LIMIT seconds.
#   bash benchmarks/arena12_round.sh OUT
out=${1:-out}
mkdir -p "$out"
export KERNELKIT_NUMBA_START=eager
cd "$(dirname "$0")" || exit 1
t0=$(date +%s)
lscpu | grep -E "Model name|L1d|L2|L3" > "$out/env.txt"
cat /sys/devices/system/cpu/cpu0/cache/index2/size >> "$out/env.txt" 2>&1
cpu=2
for m in bert detection_head,resnet18 mobilenet_v2,mlp resnet50 transformer,efficientnet_b0 regnet_y_400mf gpt2; do
  timeout 45 taskset -c $cpu,$((cpu + 1)) python3 arena_hot.py $m > "$out/plans_${m%%,*}.txt" 2>&1 &
  cpu=$((cpu + 2))
done
wait
echo "warm: $(( $(date +%s) - t0 )) s" >> "$out/env.txt"
left() { echo $(( ${LIMIT:-140} - ( $(date +%s) - t0 ) )); }
for m in detection_head resnet18 mobilenet_v2 bert; do
  l=$(left)
  [ "$l" -gt 8 ] || break
  timeout "$l" taskset -c 0,1 python3 arena_hot_ab.py $m "${RUNS:-7}" >> "$out/ab_nodes.txt" 2>&1
  echo "nodes $m: $(( $(date +%s) - t0 )) s" >> "$out/env.txt"
done
for m in resnet50 mobilenetv2 transformer mlp; do
  l=$(left)
  [ "$l" -gt 8 ] || break
  timeout "$l" taskset -c 0,1 python3 turns.py $m --runtimes numba1,reference1 --variant1 off=kernelkit.memory.HOT=0 \
    --rounds "${ROUNDS:-5}" --json "$out/turns.jsonl" > "$out/turns_$m.txt" 2>&1
  echo "turns $m: $(( $(date +%s) - t0 )) s" >> "$out/env.txt"
done
cat "$out/env.txt"
grep -h "sum\|##\|slower" "$out/ab_nodes.txt"
grep -h "^| [a-z]" "$out"/turns_*.txt
# the residual Add after the product (bench_residual_after_gemm.py): fgemm's product, then BLAS's
for gemm in auto off; do
  l=$(left)
  [ "$l" -gt 6 ] || break
  KERNELKIT_F32_GEMM=$gemm timeout "$l" taskset -c 0,1 python3 bench_residual_after_gemm.py 3072 20 \
    > "$out/residual_gemm_$gemm.txt" 2>&1
  tail -4 "$out/residual_gemm_$gemm.txt"
done
