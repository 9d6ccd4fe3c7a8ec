#!/usr/bin/env bash
# Issue 11's per-node round on the device host (session 7): benchmarks/ops_vs_reference.py over the
# ten zoo models in three groups side by side on CPU pairs 0,1 / 2,3 / 4,5 (as session 6's Xeon round),
# each group with its own cold Numba cache; the results go to OUT/ops_N.txt, a summary to stdout.
#
#     BUDGET=285 bash benchmarks/ops_round.sh OUT [RUNS=7]
ROUND_BUDGET=285
# shellcheck source=/dev/null
source "$(dirname "$0")/_round.sh"
RUNS=${2:-7}
i=0
for group in efficientnet_b0,regnet_y_400mf,detection_head,mlp resnet18,mobilenet_v2,transformer,resnet50 gpt2,bert; do
  c=$((2 * i))
  ( export NUMBA_CACHE_DIR=/tmp/nc_ops$i; pinned "$c,$((c + 1))" "$PY" benchmarks/ops_vs_reference.py "$group" "$RUNS" \
      > "$OUT/ops_$i.txt" 2>&1 ) &
  i=$((i + 1))
done
wait
grep "Model name" "$OUT/env.txt"
for f in "$OUT"/ops_*.txt; do grep -E "^## |\*\*sum|nodes where|^  slower" "$f"; done
