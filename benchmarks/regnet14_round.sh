#!/usr/bin/env bash
# RegNetY's 440-channel 1x1 layers and the Gemm heads at one thread (issue 11, session 14): one device call under
# one deadline (BUDGET seconds, default 150). Phase 1 alone on CPUs 0,1: the target's per-node check on RegNetY
# and ResNet-50, order rotated. Phase 2 side by side: the per-node A/Bs of conv_serial.COLS_TAIL and of the heads'
# streams (8 streams, the streams' prefetch into L1 / L2) in the models, and the heads alone by where their
# weights are.
#   bash benchmarks/regnet14_round.sh OUT
ROUND_BUDGET=150
cd "$(dirname "$0")" || exit 1
source ./_round.sh "$@"
NOTAIL="notail=kernels.conv_serial.COLS_TAIL=0"
S8="s8=kernels.fgemm.ROW_STREAMS=8"
Q16="q16=kernels.fgemm.ROW_STREAMS_AHEAD=16"
Q32L2="q32l2=kernels.fgemm.ROW_STREAMS_AHEAD=32;kernels.fgemm.ROW_STREAMS_HINT=2"
pinned 0,1 "$PY" ops_vs_reference.py regnet_y_400mf,resnet50 "${RUNS:-15}" --rotate > "$OUT/ops.txt" 2>&1
elapsed "phase 1"
pinned 0,1 "$PY" nodes_ab.py regnet_y_400mf 15 --rotate "$NOTAIL" "$S8" "$Q16" "$Q32L2" > "$OUT/ab_regnet.txt" 2>&1 &
pinned 2,3 "$PY" nodes_ab.py resnet50 9 --rotate "$S8" "$Q16" "$Q32L2" "blas=kernels.gemm.HEAD_ROW=0" \
  > "$OUT/ab_resnet50.txt" 2>&1 &
pinned 4,5 "$PY" head_in_model.py resnet50 9 "$S8" "$Q16" "$Q32L2" > "$OUT/in_resnet50.txt" 2>&1 &
pinned 6,7 "$PY" head_in_model.py regnet_y_400mf 15 "$S8" "$Q16" "$Q32L2" > "$OUT/in_regnet.txt" 2>&1 &
pinned 8 "$PY" bench_head_state.py 40 440x1000,2048x1000 s4+al,s8+al,s4+al+q16,s4+al+q32l2,s8+al+q16 \
  > "$OUT/state.txt" 2>&1 &
wait
elapsed total
ops_summary "$OUT/ops.txt"
for f in "$OUT"/ab_*.txt; do grep -i "^## \|^| kind\|^| Gemm\|440->440\|208->440\|^| \*\*sum\|^| all" "$f"; done
tables "$OUT"/in_*.txt
grep "dram" "$OUT/state.txt"
