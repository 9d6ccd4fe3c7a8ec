#!/usr/bin/env bash
# ResNet-50's 3x3 layers, stem and pool at two threads (issue 11, session 18; docs/numba.md, "ResNet-50's strided 3x3
# layers at two threads cut by rows"): c3x18's Xeon call (one call of 150 s). The Numba cache warmed (CPUs 2-13), then
# side by side: turns.py quiet on CPUs 0,1 (numba, ORT 2t, numba 1t and the c3x variant: DIRECT_ROWS, PAD_SPLIT and
# STEM_SPLIT, the callers' serial pads and phases moved into the halves), loaded on 2,3 (numba, numba 1t, c3x),
# nodes_ab2t.py resnet50 on 4,5 (per kind: 2t / 1t and default / each variant), pair_halves.py resnet50 on 8,9 (the
# default's halves traced per kind, and default / rows). Prints the tables last. Rounds QR, LR; runs NR, HR; BUDGET (s).
#     OUT=/tmp/out bash benchmarks/c3x18_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=${BUDGET:-138} source "$(dirname "$0")/_round.sh" "$OUT"
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
R="kernels.rnpair.DIRECT_ROWS=1"; P="kernels.rnpair.PAD_SPLIT=1"; S="kernels.cpair.STEM_SPLIT=1"
C="$R;$P;$S"
{ git log --oneline -1; git status --short | head; date -u; } >> "$OUT/env.txt" 2>&1
warm_cache "2,3 4,5 6,7 8,9 10,11 12,13" "${WARM_S:-34}" resnet50:numba1 resnet50:numba2 resnet18:numba1 \
  resnet18:numba2 "resnet50:numba2:$(echo "$C" | tr ";" ",")" "resnet18:numba2:$(echo "$C" | tr ";" ",")"
elapsed warm >> "$OUT/env.txt"
pinned 0,1 "$PY" benchmarks/turns.py resnet50,resnet18 --rounds "${QR:-12}" --runtimes numba,ort2,numba1 \
  --variant "c3x=$C" --json "$OUT/quiet.jsonl" > "$OUT/quiet.txt" 2>&1 &
pinned 2,3 "$PY" benchmarks/turns.py resnet50,resnet18 --mode loaded --rounds "${LR:-4}" --runtimes numba,numba1 \
  --variant "c3x=$C" --json "$OUT/loaded.jsonl" > "$OUT/loaded.txt" 2>&1 &
pinned 4,5 "$PY" benchmarks/nodes_ab2t.py resnet50 "${NR:-10}" "rows=$R" "pad=$P" "stem=$S" "c3x=$C" \
  > "$OUT/nodes.txt" 2>&1 &
pinned 8,9 "$PY" benchmarks/pair_halves.py resnet50 "${HR:-8}" "rows=$R" > "$OUT/halves.txt" 2>&1 &
wait
elapsed jobs >> "$OUT/env.txt"
for f in quiet loaded; do "$PY" benchmarks/turns.py --from-json "$OUT/$f.jsonl" \
  --blocks pair_stalls,pair_backoffs > "$OUT/$f.table" 2>&1; done
tail -4 "$OUT/env.txt"; grep -c . "$OUT/warm.err" 2>/dev/null
echo "== nodes"; grep "^|" "$OUT/nodes.txt" | grep -v "^|---" \
  | cut -c1-220 | head -30
echo "== halves"; grep "^|" "$OUT/halves.txt" | grep -v "^|---" | cut -c1-220 | head -40
for f in quiet loaded; do echo "== $f"; grep "^|" "$OUT/$f.table" | grep -v "^|---" | cut -c1-260 | tail -14; done
