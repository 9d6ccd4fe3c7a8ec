#!/usr/bin/env bash
# The output over the residual beyond one thread (issue 11, session 16, resid16; docs/numba.md, "The output over the
# residual at two threads, on the cols tiles and on Winograd"): the Xeon call that decides conv_serial's three switches,
# every timed job alone on CPUs 0,1 (session 16's one call ran them side by side: too noisy to decide). Expected run
# time ~300 s of device time (the machine's start not counted); BUDGET (default 420) caps it.
#   1. warm_cache: ResNet-50 and ResNet-18 at one and two threads, ResNet-50 2t with V.
#   2. resid16_count.py (CPUs 4,5, beside the first A/B): the plans' in-place steps, no copies.
#   3. alone on CPUs 0,1: nodes_ab2t.py resnet50 10 V CTL, then CTL V (both orders), nodes_ab.py resnet18 10 W CTL1
#      --rotate (RESIDUAL_WINO at one thread: its 64@56 +Z kind read 0.84 in session 16).
#   4. alone on CPUs 0,1: turns.py resnet50,resnet18 --runtimes numba,ort2,numba1 --variant V --variant W2
#      --variant1 V1 --rounds 7.
#     OUT=/tmp/out bash benchmarks/resid16_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=${BUDGET:-420} source "$(dirname "$0")/_round.sh" "$OUT"
export PYTHONWARNINGS=ignore OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
P=kernels.conv_serial
V=${V:-"par=$P.RESIDUAL_PARALLEL=1;$P.RESIDUAL_COLS=1"}
V1=${V1:-"cols=$P.RESIDUAL_COLS=1"}
W=${W:-"wino=$P.RESIDUAL_WINO=1"}
W2=${W2:-"wino2=$P.RESIDUAL_PARALLEL=1;$P.RESIDUAL_WINO=1"}
CTL=${CTL:-"ctl=$P.RESIDUAL_PARALLEL=0"}
B=benchmarks
{ git log --oneline -1; date -u; } >> "$OUT/env.txt" 2>&1
warm_cache "4,5 6,7 8,9 10,11 12,13" "${WARM_S:-60}" resnet50:numba1 resnet50:numba2 resnet18:numba1 resnet18:numba2 \
  "resnet50:numba2:$(echo "${V#*=}" | tr ";" ",")"
elapsed warm >> "$OUT/env.txt"
pinned 4,5 python3 $B/resid16_count.py resnet50,resnet18 1,2 "$(echo "$CTL" | tr ";" ",")" \
  "all=$P.RESIDUAL_PARALLEL=1,$P.RESIDUAL_COLS=1,$P.RESIDUAL_WINO=1" > "$OUT/count.txt" 2>&1 &
pinned 0,1 python3 $B/nodes_ab2t.py resnet50 10 "$V" "$CTL" > "$OUT/abA.txt" 2>&1
pinned 0,1 python3 $B/nodes_ab2t.py resnet50 10 "$CTL" "$V" > "$OUT/abB.txt" 2>&1
pinned 0,1 python3 $B/nodes_ab.py resnet18 10 "$W" "$CTL" --rotate > "$OUT/ab18.txt" 2>&1
wait
elapsed "phase 1" >> "$OUT/env.txt"
pinned 0,1 timeout "${T_S:-150}" python3 $B/turns.py resnet50,resnet18 --rounds 7 --runtimes numba,ort2,numba1 \
  --variant "$V" --variant "$W2" --variant1 "$V1" --json "$OUT/t.jsonl" > "$OUT/t.txt" 2>&1
elapsed turns >> "$OUT/env.txt"
python3 $B/turns.py --from-json "$OUT/t.jsonl" > "$OUT/t.table" 2>&1
echo "== count"; grep "^| \|differs" "$OUT/count.txt"
for f in abA abB ab18; do echo "== $f"; grep "^| kind\|+Z\|\*\*sum" "$OUT/$f.txt" | cut -c1-200; done
echo "== turns"; grep "^| " "$OUT/t.table" | grep -v "^|---" | cut -c1-300
tail -5 "$OUT/env.txt"
