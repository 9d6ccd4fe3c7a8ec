#!/usr/bin/env bash
# The Gemm heads in the model (issue 11, session 13): one device call, jobs side by side on separate CPUs
# under one deadline (BUDGET seconds, default 158). Session 13's call ran this with ROW_STREAMS=4 and the
# page-aligned head as the default; the variants here are the next A/B (8 streams, real huge pages).
#   bash benchmarks/heads13_round.sh OUT
ROUND_BUDGET=158
cd "$(dirname "$0")" || exit 1
source ./_round.sh "$@"
OLD="kernels.fgemm.ROW_STREAMS=1;kernels.gemm.HEAD_ALIGN=0"
V=("old=$OLD" "s8=kernels.fgemm.ROW_STREAMS=8" "hp=kernels.gemm.HEAD_ALIGN=2097152"
   "s8hp=kernels.fgemm.ROW_STREAMS=8;kernels.gemm.HEAD_ALIGN=2097152" "np=kernels.gemm.HEAD_ALIGN=0"
   "blas=kernels.gemm.HEAD_ROW=0")
# the turns' processes load a warm cache: its models' sessions built first on their own pair
( pinned 10,11 "$PY" -c "
import sys; sys.path.insert(0, '.')
from test_bench_numba import apply_bench_set, model_case, kernelkit_session
for name in ('resnet18', 'mobilenetv2'):
    proto, model, feed, g = model_case(name)
    for spec in ('', 'kernels.fgemm.ROW_STREAMS=1,kernels.gemm.HEAD_ALIGN=0'):
        apply_bench_set(spec)
        for rt in ('numba1', 'numba'):
            kernelkit_session(model, rt).run(None, feed)
" > "$OUT/warm.txt" 2>&1
  pinned 10,11 "$PY" turns.py resnet18,mobilenetv2 --rounds "${ROUNDS:-6}" --runtimes numba1,numba,reference1 \
    --variant1 "old1=$OLD" --variant "old=$OLD" --json "$OUT/turns.jsonl" > "$OUT/turns.txt" 2>&1 ) &
pinned 0,1 "$PY" ops_vs_reference.py resnet18,resnet50,mobilenet_v2,efficientnet_b0 5 > "$OUT/ops.txt" 2>&1 &
for pair in "2,3 resnet18 21" "4,5 mobilenet_v2 21" "6,7 resnet50 9" "8,9 efficientnet_b0 15"; do
  set -- $pair
  ( pinned "$1" "$PY" nodes_ab.py "$2" "$3" "${V[@]}" > "$OUT/ab_$2.txt" 2>&1
    pinned "$1" "$PY" head_in_model.py "$2" 9 "old=$OLD" "s8=kernels.fgemm.ROW_STREAMS=8" \
      "hp=kernels.gemm.HEAD_ALIGN=2097152" > "$OUT/in_$2.txt" 2>&1 ) &
done
pinned 12 "$PY" bench_head_state.py 60 512x1000,1280x1000,2048x1000 a0,s4+al,s8+al,s4+hp,s8+hp > "$OUT/state.txt" 2>&1 &
wait
elapsed total
for f in "$OUT"/ab_*.txt; do grep -i "^## \|^| kind\|^| Gemm" "$f"; done
tables "$OUT"/in_*.txt
grep -i "gemm\|slower\|^##" "$OUT/ops.txt" | head -30
grep "dram" "$OUT/state.txt"
grep -h "^|" "$OUT/turns.txt" | tail -4
