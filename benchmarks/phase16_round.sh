#!/usr/bin/env bash
# ResNet-50's pairs per kind of layer (issue 11, session 16; docs/numba.md, "ResNet-50's pairs per kind of layer"):
# the Numba cache warmed (CPUs 2-15), then pair_halves.py alone on CPUs 0,1 (per kind: 2t / 1t, the halves in turn,
# the traced halves of the default, and default / variant for the first phases both halves share), then the whole
# models in turns with all three on (quiet on 0,1; loaded on 2,3 beside it). Prints the per-kind tables and the turns'
# tables last. Limits WARM_S, HS, QS, LS (s); runs HR; rounds QR, LR; VARIANTS (pair_halves.py's LABEL=SPEC, spaces
# between; "" for the decomposition alone, three sessions: see the section on the bias of many sessions).
#     OUT=/tmp/out bash benchmarks/phase16_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=${BUDGET:-150} source "$(dirname "$0")/_round.sh" "$OUT"
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
ALL="kernels.rnpair.PAD_SPLIT=1;kernels.cpair.SUB_SPLIT=1;kernels.rnpair.WINO2_SHARED=1"
read -r -a VARS <<< "${VARIANTS-pad=kernels.rnpair.PAD_SPLIT=1 sub=kernels.cpair.SUB_SPLIT=1 w2=kernels.rnpair.WINO2_SHARED=1 all=$ALL px=kernels.cpair.AXIS=pixels}"
T0=$(date +%s)
warm_cache "2,3 4,5 6,7 8,9 10,11 12,13 14,15" "${WARM_S:-32}" resnet50:numba1 resnet50:numba2 resnet18:numba1 \
  resnet18:numba2 "resnet50:numba2:$(echo "$ALL" | tr ";" ",")" "resnet18:numba2:$(echo "$ALL" | tr ";" ",")"
echo "warm $(( $(date +%s) - T0 ))s" | tee -a "$OUT/env.txt"
timeout "${HS:-42}" taskset -c 0,1 python3 benchmarks/pair_halves.py resnet50 "${HR:-10}" "${VARS[@]}" \
  > "$OUT/halves.md" 2> "$OUT/halves.err"
echo "halves $(( $(date +%s) - T0 ))s" | tee -a "$OUT/env.txt"
timeout "${QS:-66}" taskset -c 0,1 python3 benchmarks/turns.py resnet50,resnet18 --rounds "${QR:-6}" \
  --runtimes numba,ort2,numba1 --variant "all=$ALL" --json "$OUT/quiet.jsonl" > "$OUT/quiet.txt" 2>&1 &
timeout "${LS:-60}" taskset -c 2,3 python3 benchmarks/turns.py resnet50,resnet18 --mode loaded --rounds "${LR:-3}" \
  --runtimes numba,numba1 --variant "all=$ALL" --json "$OUT/loaded.jsonl" > "$OUT/loaded.txt" 2>&1 &
wait
echo "turns $(( $(date +%s) - T0 ))s" | tee -a "$OUT/env.txt"
for f in quiet loaded; do python3 benchmarks/turns.py --from-json "$OUT/$f.jsonl" \
  --blocks pair_stalls,pair_stall_backoffs,pair_backoffs > "$OUT/$f.table" 2>&1; done
cat "$OUT/halves.md"; tail -3 "$OUT/halves.err"
for f in quiet loaded; do echo "== $f"; grep -v "^$" "$OUT/$f.table" | grep -v "^|---" | head -40; done
