#!/usr/bin/env bash
# MobileNetV2 at two threads per kind and loaded (issue 11, session 17; docs/numba.md, "MobileNetV2's projections cut
# by their input channels at two threads"): mnv217's Xeon call (~70 s after a warm cache). The cache warmed on CPUs
# 4-11, then side by side: turns.py quiet on CPUs 0,1 (numba, ORT 2t, numba 1t and two variants, --probe), loaded on
# 2,3 (numba, numba 1t, a variant), nodes_ab2t.py mobilenet_v2 twice (4,5 and 6,7, the variants in reversed order),
# outside_time.py mobilenet_v2 on 8,9. Prints the tables last. Rounds QR, LR; runs NR, OR; limits WARM_S, BUDGET (s).
# The call ran K_SPLIT=196 and 784 as variants of a default of 0; with 784 the default since, ks0 (the old default)
# takes the place of ks784 here:
#     OUT=/tmp/out QR=12 LR=12 bash benchmarks/mnv17_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=${BUDGET:-104} source benchmarks/_round.sh "$OUT"
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
S="kernels.cpair.STEM_SPLIT=1"
F="kernels.cpair.FOLLOW=1"; K1="kernels.cpair.K_SPLIT=196"; K0="kernels.cpair.K_SPLIT=0"
C="kernels.cpair.SERIAL_COLS_MAX=196"
{ git log --oneline -1; git status --short | head; date -u; } >> "$OUT/env.txt" 2>&1
warm_cache "4,5 6,7 8,9 10,11" "${WARM_S:-42}" mobilenetv2:numba1 mobilenetv2:numba2 \
  "mobilenetv2:numba2:kernels.cpair.STEM_SPLIT=1,kernels.cpair.K_SPLIT=0" "mobilenetv2:numba2:$C"
elapsed warm >> "$OUT/env.txt"
pinned 0,1 "$PY" benchmarks/turns.py mobilenetv2 --rounds "${QR:-14}" --probe --runtimes numba,ort2,numba1 \
  --variant "stem=$S" --variant "ks0=$K0" --json "$OUT/quiet.jsonl" > "$OUT/quiet.txt" 2>&1 &
pinned 2,3 "$PY" benchmarks/turns.py mobilenetv2 --mode loaded --rounds "${LR:-12}" --runtimes numba,numba1 \
  --variant "stem=$S" --json "$OUT/loaded.jsonl" > "$OUT/loaded.txt" 2>&1 &
pinned 4,5 "$PY" benchmarks/nodes_ab2t.py mobilenet_v2 "${NR:-24}" "stem=$S" "ks196=$K1" "ks0=$K0" "cols=$C" "follow=$F" \
  > "$OUT/nodesA.txt" 2>&1 &
pinned 6,7 "$PY" benchmarks/nodes_ab2t.py mobilenet_v2 "${NR:-24}" "follow=$F" "cols=$C" "ks0=$K0" "ks196=$K1" "stem=$S" \
  > "$OUT/nodesB.txt" 2>&1 &
pinned 8,9 "$PY" benchmarks/outside_time.py mobilenet_v2 "${OR:-12}" "stem=$S" > "$OUT/outside.txt" 2>&1 &
wait
elapsed jobs >> "$OUT/env.txt"
for f in quiet loaded; do "$PY" benchmarks/turns.py --from-json "$OUT/$f.jsonl" \
  --blocks pair_stalls,pair_backoffs > "$OUT/$f.table" 2>&1; done
tail -4 "$OUT/env.txt"
grep -c . "$OUT/warm.err" 2>/dev/null
for f in nodesA nodesB; do echo "== $f"; grep "^|" "$OUT/$f.txt" | grep -v "^|---" | grep -i "sum\|kind\|@14\|@28\|3x3\|@7 " | cut -c1-200 | head -30; done
echo "== outside"; grep "^| \*\*sum\|^| session\|^| numba" "$OUT/outside.txt" | head -8
for f in quiet loaded; do echo "== $f"; grep "^|" "$OUT/$f.table" | grep -v "^|---" | cut -c1-260 | tail -12; done
