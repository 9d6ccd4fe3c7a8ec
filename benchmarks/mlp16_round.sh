#!/usr/bin/env bash
# Issue 11, session 16 (mlp16; docs/numba.md, "The MLP's products at one thread, B on a cache line"): one Xeon
# call. The Numba cache warmed (each setting's drivers, side by side), then mlp_parts.py (each product alone, B
# cold, GFLOP/s, every setting in one process) on CPU 2 beside the transformer's turns on 4,5 (fgemm.PACK_ALIGN
# 64 for its MatMul products at one and two threads), then the MLP's turns alone on CPUs 0,1 (--probe). ~130 s.
#     OUT=/tmp/out bash benchmarks/mlp16_round.sh
# (Run while fgemm's three one-thread switches were off: since, numba 1t is what the variants measured; add
# --variant1 "old=kernels.fgemm.PACK_ALIGN_ONE_THREAD=0;kernels.fgemm.WHOLE_ONE_THREAD=0;kernels.fgemm.MR_ONE_THREAD=0"
# through MLP_MORE for the old code.)
# Settings (kernels.fgemm): al = PACK_ALIGN_ONE_THREAD 64 (Gemm's one-thread B on a cache line), alw = al +
# WHOLE_ONE_THREAD (whole row tiles without the last-row selects), alw12 = alw + 12/8-row tiles (MR.2 12); mlp_parts
# also al12, alk256 / alwk256 (K chunks of 256), hp (B on huge pages), ala16 (B_AHEAD_ONE_THREAD 16).
set -u
OUT=${OUT:-/tmp/out}
source "$(dirname "$0")/_round.sh" "$OUT"  # warm_cache, elapsed; OUT/env.txt
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
F=kernels.fgemm
AL="$F.PACK_ALIGN_ONE_THREAD=64"
W="$F.WHOLE_ONE_THREAD=1"
V_AL="al=$AL"
V_ALW="alw=$AL;$W"
V_ALW12="alw12=$AL;$W;$F.MR.2=12"
V_AL12="al12=$AL;$F.MR.2=12"
V_K256="alk256=$AL;$F.KC=256"
V_WK256="alwk256=$AL;$W;$F.KC=256"
V_HP="hp=$F.PACK_ALIGN_ONE_THREAD=2097152"
V_A16="ala16=$AL;$F.B_AHEAD_ONE_THREAD=16"
V_T="al1=$F.PACK_ALIGN=64"
warm_cache "2 3 4 5 6 7,8 9,10" ${WARM_S:-35} mlp:numba1 "mlp:numba1:$W" "mlp:numba1:$W,$F.MR.2=12" \
  "mlp:numba1:$F.MR.2=12" "mlp:numba1:$F.B_AHEAD_ONE_THREAD=16" transformer:numba1 transformer:numba2
elapsed warm >> "$OUT/env.txt"
cd "$(dirname "$0")" || exit 1
timeout ${PARTS_S:-40} taskset -c 2 python3 mlp_parts.py ${PARTS_R:-60} "$V_AL" "$V_ALW" "$V_ALW12" "$V_AL12" \
  "$V_K256" "$V_WK256" "$V_HP" "$V_A16" > "$OUT/parts.txt" 2>&1 &
timeout ${PARTS_S:-40} taskset -c 4,5 python3 turns.py transformer --rounds ${TR:-8} --runtimes numba1,numba \
  --variant1 "$V_T" --variant "al2=$F.PACK_ALIGN=64" --probe --json "$OUT/tr.jsonl" > "$OUT/tr.txt" 2>&1 &
wait
elapsed parts >> "$OUT/env.txt"
timeout ${MLP_S:-50} taskset -c 0,1 python3 turns.py mlp --rounds ${MR:-10} --runtimes numba1,reference1,ort1 \
  --variant1 "$V_AL" --variant1 "$V_ALW" --variant1 "$V_ALW12" ${MLP_MORE:-} --probe \
  --json "$OUT/mlp.jsonl" > "$OUT/mlp.txt" 2>&1
elapsed "mlp rc $?" >> "$OUT/env.txt"
grep "Model name" "$OUT/env.txt"; tail -3 "$OUT/env.txt"
echo "== parts"; grep "^| " "$OUT/parts.txt" | grep -v "^| node\|profiled\|sum" | cut -c1-90
for j in tr mlp; do echo "== $j"; python3 turns.py --from-json "$OUT/$j.jsonl" 2>&1 | grep -v "^|---" | cut -c1-900; done
