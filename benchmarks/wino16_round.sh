#!/usr/bin/env bash
# wino16 (issue 11, session 16; docs/numba.md, "The weights' prefetch in the Winograd products"): the Xeon call.
# The Numba cache warmed (ResNet-50 and ResNet-18 at one and two threads, with and without the switches), then eight
# jobs side by side, each pinned to its own two CPUs: per kind at one thread (nodes_ab.py, a1 =
# winograd.AHEAD_ONE_THREAD) and two (nodes_ab2t.py, w = rnpair.WINO_AHEAD, x = cpair.ROWS_X_AHEAD, ResNet-50 in two
# orders), both ResNets in turns quiet (beside the others: not alone) and loaded; the tables print last.
#   OUT=/tmp/out bash benchmarks/wino16_round.sh    (from the repository root; BUDGET, WS: the seconds in all, of the warm-up)
set -u
O=${OUT:?}
BUDGET=${BUDGET:-150} source benchmarks/_round.sh "$O"
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
A1="kernels.winograd.AHEAD_ONE_THREAD=16"
W="kernels.rnpair.WINO_AHEAD=16"
X="kernels.cpair.ROWS_X_AHEAD=8"
WX="$W;$X"
warm_cache "0,1 2,3 4,5 6,7 8,9 10,11 12,13 14,15" ${WS:-45} resnet50:numba1 "resnet50:numba1:$A1" resnet50:numba2 \
  "resnet50:numba2:${WX//;/,}" resnet18:numba1 "resnet18:numba1:$A1" resnet18:numba2 "resnet18:numba2:$W"
elapsed warm >> "$O/env.txt"
T=$(( DEADLINE - $(date +%s) - 4 ))
cd benchmarks
timeout "$T" taskset -c 0,1 python3 turns.py resnet50 --rounds 9 --runtimes numba,numba1,ort2,ort1 --variant "wx=$WX" \
  --variant1 "a1=$A1" --json "$O/t50.json" > "$O/t50.txt" 2>&1 &
timeout "$T" taskset -c 2,3 python3 turns.py resnet18 --rounds 9 --runtimes numba,numba1,ort2,ort1 --variant "wx=$WX" \
  --variant1 "a1=$A1" --json "$O/t18.json" > "$O/t18.txt" 2>&1 &
timeout "$T" taskset -c 4,5 python3 nodes_ab.py resnet50 12 "a1=$A1" "ctl=kernels.winograd.AHEAD_ONE_THREAD=0" --rotate \
  > "$O/n50.txt" 2>&1 &
timeout "$T" taskset -c 6,7 python3 nodes_ab2t.py resnet50 10 "w=$W" "x=$X" "wx=$WX" "ctl=kernels.rnpair.WINO_AHEAD=0" \
  > "$O/ab50A.txt" 2>&1 &
timeout "$T" taskset -c 8,9 python3 nodes_ab2t.py resnet18 10 "w=$W" "ctl=kernels.rnpair.WINO_AHEAD=0" \
  > "$O/ab18.txt" 2>&1 &
timeout "$T" taskset -c 10,11 python3 nodes_ab.py resnet18 12 "a1=$A1" "ctl=kernels.winograd.AHEAD_ONE_THREAD=0" --rotate \
  > "$O/n18.txt" 2>&1 &
timeout "$T" taskset -c 12,13 python3 turns.py resnet50,resnet18 --mode loaded --rounds 5 --runtimes numba,numba1 \
  --variant "wx=$WX" --json "$O/l.json" > "$O/l.txt" 2>&1 &
timeout "$T" taskset -c 14,15 python3 nodes_ab2t.py resnet50 10 "wx=$WX" "x=$X" "w=$W" > "$O/ab50B.txt" 2>&1 &
wait
elapsed measured >> "$O/env.txt"
for f in "$O"/n*.txt "$O"/ab*.txt; do echo "== $(basename $f)"; grep -h "^| \|^##" "$f" | grep -v "^|---\|^| Gemm\|^| MaxPool\|^| Glob\|^| Resh\|^| Flat\|^| Add\|^| Relu" | cut -c1-200; tail -2 "$f" | grep -i "error\|Trace" ; done
for f in "$O"/*.json; do echo "== $(basename $f)"; python3 turns.py --from-json "$f" 2>&1 | grep "^| \|^##\|rounds" | grep -v "^|---" | cut -c1-200; done
tail -3 "$O/warm.err" 2>/dev/null; grep -h "warm\|measured" "$O/env.txt"
