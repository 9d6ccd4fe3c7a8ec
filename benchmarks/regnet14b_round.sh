#!/usr/bin/env bash
# regnet14's second device call (issue 11, session 14; it ran at c075b10, where fgemm.ROW_STREAMS_AHEAD was 16: with
# today's default of 0, KERNELKIT_BENCH_SET=kernels.fgemm.ROW_STREAMS_AHEAD=16 repeats phase 1's sessions): phase 1
# alone on CPUs 0,1, the target's per-node check on RegNetY, ResNet-50 and MobileNetV2 (order rotated); phase 2
# side by side, the heads in the model without the prefetch (q0) and at 32 steps, the heads alone by where
# their weights are, and RegNetY whole at one thread in turns against COLS_TAIL off and q0.
#   bash benchmarks/regnet14b_round.sh OUT
ROUND_BUDGET=95
cd "$(dirname "$0")" || exit 1
source ./_round.sh "$@"
Q0="q0=kernels.fgemm.ROW_STREAMS_AHEAD=0"
Q32="q32=kernels.fgemm.ROW_STREAMS_AHEAD=32"
pinned 0,1 "$PY" ops_vs_reference.py regnet_y_400mf,resnet50,mobilenet_v2 "${RUNS:-15}" --rotate > "$OUT/ops.txt" 2>&1
elapsed "phase 1"
pinned 0,1 "$PY" head_in_model.py resnet50 15 "$Q0" "$Q32" > "$OUT/in_resnet50.txt" 2>&1 &
pinned 2,3 "$PY" head_in_model.py mobilenet_v2 21 "$Q0" "$Q32" > "$OUT/in_mobilenet_v2.txt" 2>&1 &
pinned 4,5 "$PY" head_in_model.py regnet_y_400mf 21 "$Q0" "$Q32" > "$OUT/in_regnet.txt" 2>&1 &
pinned 6,7 "$PY" turns.py regnet_y_400mf --rounds 5 --runtimes numba1,reference1 \
  --variant1 "notail1=kernels.conv_serial.COLS_TAIL=0" --variant1 "q01=kernels.fgemm.ROW_STREAMS_AHEAD=0" \
  > "$OUT/turns.txt" 2>&1 &
pinned 8 "$PY" bench_head_state.py 30 440x1000,512x1000,1280x1000,2048x1000 s4+al,s4+al+q8,s4+al+q16,s4+al+q32 \
  > "$OUT/state.txt" 2>&1 &
wait
elapsed total
ops_summary "$OUT/ops.txt"
tables "$OUT"/in_*.txt
grep "dram" "$OUT/state.txt"
tables "$OUT/turns.txt" | tail -8
