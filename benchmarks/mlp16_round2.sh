#!/usr/bin/env bash
# Issue 11, session 16 (mlp16): the second Xeon call. The Numba cache warmed, then the MLP's turns alone on CPUs 0,1
# (--probe) with the one-thread candidates against the defaults, then mlp_parts.py (each product alone, B cold) on
# CPU 2. ~100 s.
#     OUT=/tmp/out bash benchmarks/mlp16_round2.sh
# (Run while fgemm's three one-thread switches were off: since, numba 1t is what the variants measured; add
# --variant1 "old=kernels.fgemm.PACK_ALIGN_ONE_THREAD=0;kernels.fgemm.WHOLE_ONE_THREAD=0;kernels.fgemm.MR_ONE_THREAD=0"
# through MLP_MORE for the old code.)
# Settings (kernels.fgemm): new = PACK_ALIGN_ONE_THREAD 64 + WHOLE_ONE_THREAD 2 (whole row tiles, each tile a function
# of its own) + MR_ONE_THREAD 12; nal = new without the alignment; w1m12 = the whole tiles inlined (WHOLE 1), 12 rows
# (call 1's alw12); w2 = new with the 8-row tiles; w1 = the 8-row tiles inlined, aligned.
set -u
OUT=${OUT:-/tmp/out}
source "$(dirname "$0")/_round.sh" "$OUT"  # warm_cache, elapsed; OUT/env.txt
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
F=kernels.fgemm
AL="$F.PACK_ALIGN_ONE_THREAD=64"
V_NEW="new=$AL;$F.WHOLE_ONE_THREAD=2;$F.MR_ONE_THREAD=12"
V_NAL="nal=$F.WHOLE_ONE_THREAD=2;$F.MR_ONE_THREAD=12"
V_W1M12="w1m12=$AL;$F.WHOLE_ONE_THREAD=1;$F.MR_ONE_THREAD=12"
V_W2="w2=$AL;$F.WHOLE_ONE_THREAD=2"
V_W1="w1=$AL;$F.WHOLE_ONE_THREAD=1"
warm_cache "2 3 4 5 6" ${WARM_S:-30} mlp:numba1 "mlp:numba1:$F.WHOLE_ONE_THREAD=2,$F.MR_ONE_THREAD=12" \
  "mlp:numba1:$F.WHOLE_ONE_THREAD=1,$F.MR_ONE_THREAD=12" "mlp:numba1:$F.WHOLE_ONE_THREAD=2" \
  "mlp:numba1:$F.WHOLE_ONE_THREAD=1"
elapsed warm >> "$OUT/env.txt"
cd "$(dirname "$0")" || exit 1
timeout ${MLP_S:-55} taskset -c 0,1 python3 turns.py mlp --rounds ${MR:-12} --runtimes numba1,reference1,ort1 \
  --variant1 "$V_NEW" --variant1 "$V_NAL" --variant1 "$V_W1M12" --variant1 "$V_W2" ${MLP_MORE:-} --probe \
  --json "$OUT/mlp.jsonl" > "$OUT/mlp.txt" 2>&1
elapsed "mlp rc $?" >> "$OUT/env.txt"
timeout ${PARTS_S:-25} taskset -c 2 python3 mlp_parts.py ${PARTS_R:-50} "$V_NEW" "$V_NAL" "$V_W1M12" "$V_W2" "$V_W1" \
  > "$OUT/parts.txt" 2>&1
elapsed parts >> "$OUT/env.txt"
grep "Model name" "$OUT/env.txt"; tail -3 "$OUT/env.txt"
echo "== parts"; grep "^| " "$OUT/parts.txt" | grep -v "^| node\|profiled\|sum\|blas hot\|fgemm hot" | cut -c1-90
echo "== mlp"; python3 turns.py --from-json "$OUT/mlp.jsonl" 2>&1 | grep -v "^|---" | cut -c1-1200
