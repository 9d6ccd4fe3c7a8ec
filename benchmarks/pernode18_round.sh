#!/usr/bin/env bash
# Issue 11's per-node check on the final code of session 18 (docs/benchmarks.md, "Round 18"): ops_vs_reference.py
# (one thread, --rotate) over the ten zoo models in eight jobs side by side on the CPU pairs 0,1 ... 14,15, each job
# with its own cold Numba cache, the MLP at batch 1 and at its benchmark batch 64; OUT/ops_N.txt, then the summary.
#
#     BUDGET=240 RUNS=5 bash benchmarks/pernode18_round.sh OUT
ROUND_BUDGET=240
# shellcheck source=/dev/null
source "$(dirname "$0")/_round.sh"
RUNS=${RUNS:-5}
i=0
for group in resnet50 resnet18,transformer mobilenet_v2,detection_head efficientnet_b0 regnet_y_400mf gpt2 bert mlp; do
  c=$((2 * i))
  (
    export NUMBA_CACHE_DIR=/tmp/nc_ops$i
    pinned "$c,$((c + 1))" "$PY" benchmarks/ops_vs_reference.py "$group" "$RUNS" 1 --rotate > "$OUT/ops_$i.txt" 2>&1
    if [ "$group" = mlp ]; then
      pinned "$c,$((c + 1))" "$PY" benchmarks/ops_vs_reference.py mlp "$RUNS" 64 --rotate > "$OUT/ops_mlp64.txt" 2>&1
    fi
  ) &
  i=$((i + 1))
done
wait
elapsed ops >> "$OUT/env.txt"
grep "Model name" "$OUT/env.txt"
for f in "$OUT"/ops_*.txt; do grep -E "^## |\*\*sum|nodes where|^of them|^  slower|Traceback|Error" "$f"; done
