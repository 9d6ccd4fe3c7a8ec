#!/usr/bin/env bash
# The MLP and the Gemm heads at one thread (issue 11, session 12): one device call, jobs side by side on
# separate CPUs under one deadline (BUDGET seconds, default 112), the Numba cache warmed first.
#   bash benchmarks/gemm12_round.sh OUT
ROUND_BUDGET=112
cd "$(dirname "$0")" || exit 1
source ./_round.sh "$@"
t0=$(date +%s)
# warm the cache: the one-thread kernels of each model and the variants' extra drivers, side by side (_round.sh's
# warm_cache since session 14)
warm_cache "0 1 2 3 4 5 6" 60 mlp:numba1 mlp:numba1:kernels.fgemm.B_AHEAD_ONE_THREAD=8 \
  mlp:numba1:kernels.fgemm.B_AHEAD_ONE_THREAD=16 mlp:numba1:kernels.fgemm.PACK_A_ONE_THREAD=1 resnet50:numba1 \
  resnet18:numba1 mobilenetv2:numba1 &
pinned 7 timeout 60 "$PY" -c "
import numpy as np
from kernelkit_numba.kernels import fgemm
w = np.ones((64, 100), np.float32); x = np.ones((1, 100), np.float32); out = np.empty((1, 64), np.float32)
for a in (0, 16, 32, 64):
    fgemm.row(2, fgemm.Packed(w, w.T, 2), ahead=a)(x, out)" >> "$OUT/warm.txt" 2>&1 &
wait
echo "warm: $(( $(date +%s) - t0 )) s" >> "$OUT/warm.txt"
MLP=(--variant1 ahead8=kernels.fgemm.B_AHEAD_ONE_THREAD=8 --variant1 ahead16=kernels.fgemm.B_AHEAD_ONE_THREAD=16
     --variant1 packa=kernels.fgemm.PACK_A_ONE_THREAD=1)
pinned 0,1 "$PY" turns.py mlp --rounds "${ROUNDS:-9}" --runtimes numba1,reference1,ort1 "${MLP[@]}" \
  --json "$OUT/turns_mlp.jsonl" > "$OUT/turns_mlp.txt" 2>&1 &
pinned 8,9 "$PY" turns.py resnet50,resnet18 --rounds "${ROUNDS_R:-5}" --runtimes numba1,reference1,ort1 \
  --variant1 old=kernels.gemm.HEAD_ROW=0 --json "$OUT/turns_resnet.jsonl" > "$OUT/turns_resnet.txt" 2>&1 &
( pinned 2 "$PY" mlp_parts.py 120 ahead8=kernels.fgemm.B_AHEAD_ONE_THREAD=8 \
    ahead16=kernels.fgemm.B_AHEAD_ONE_THREAD=16 packa=kernels.fgemm.PACK_A_ONE_THREAD=1 > "$OUT/mlp_parts.txt" 2>&1
  pinned 2 "$PY" bench_heads.py 150 > "$OUT/heads.txt" 2>&1 ) &
pinned 4,5 "$PY" ops_vs_reference.py resnet18,mobilenet_v2 7 > "$OUT/ops.txt" 2>&1 &
wait
echo "total: $(( $(date +%s) - t0 )) s" >> "$OUT/warm.txt"
lscpu | grep "Model name"
# the turns' tables last, from the blocks written so far (turns.py --from-json since session 14; 1t / LABEL above 1:
# the variant faster than numba 1t)
for f in "$OUT"/turns_*.jsonl; do "$PY" turns.py --from-json "$f"; done
grep -h "^| \(1x\|784\|1024\|numba\|ORT\|reference\|ahead\|packa\|products\|gemm\|sum\|profiled\)" "$OUT/mlp_parts.txt" \
  "$OUT/heads.txt" 2>/dev/null | head -60
grep -h -i "gemm\|verdict\|slower" "$OUT/ops.txt" 2>/dev/null | head -20
