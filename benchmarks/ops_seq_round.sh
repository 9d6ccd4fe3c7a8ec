#!/usr/bin/env bash
# Issue 11's per-node round on the device host, one model at a time (session 8):
# benchmarks/ops_vs_reference.py for each zoo model in turn, pinned to CPUs 0,1, one process a model
# (one Numba cache for all), each model's table to OUT/ops_MODEL.txt as it ends, then the summary.
# Models in order of interest; those the time budget leaves out are skipped (``pinned``).
#
#     BUDGET=285 bash benchmarks/ops_seq_round.sh OUT [RUNS=5] [MODELS=bert,gpt2,...]
ROUND_BUDGET=285
# shellcheck source=/dev/null
source "$(dirname "$0")/_round.sh"
RUNS=${2:-5}
MODELS=${3:-bert,gpt2,detection_head,regnet_y_400mf,transformer,resnet18,efficientnet_b0,mlp,mobilenet_v2,resnet50}
export NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-/tmp/nc_ops_seq}
for m in ${MODELS//,/ }; do
  pinned 0,1 "$PY" benchmarks/ops_vs_reference.py "$m" "$RUNS" > "$OUT/ops_$m.txt" 2>&1
done
grep "Model name" "$OUT/env.txt"
for m in ${MODELS//,/ }; do
  [ -f "$OUT/ops_$m.txt" ] && grep -E "^## |\*\*sum|nodes where|^  slower" "$OUT/ops_$m.txt"
done
