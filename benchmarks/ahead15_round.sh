#!/usr/bin/env bash
# ahead15 (issue 11, session 15): the weights' prefetch in the two-thread halves. One Xeon call: the Numba cache
# warmed, then side by side on CPU pairs: per kind at two threads (nodes_ab2t.py, two orders), ResNet-50 and
# ResNet-18 in turns quiet and loaded (docs/numba.md, "The weights' prefetch in the two-thread halves").
#   bash benchmarks/ahead15_round.sh OUT
O=${1:-${OUT:-/tmp/out}}; mkdir -p "$O"; cd "$(dirname "$0")" || exit 1
BUDGET=${BUDGET:-76} source ./_round.sh "$O"
S="kernels.cpair.COLS_AHEAD=16;kernels.rnpair.DIRECT_AHEAD=16"
K="kernels.cpair.COLS_KC_ONE_THREAD=1"
B="$S;$K"
P="$B;kernels.conv_serial.PAIR_COLS_MAX=196"
W=$(echo "$B" | tr ';' ',')
warm_cache "0,1 2,3 4,5 6,7 8,9 10,11 12,13 14,15" 26 resnet50:numba2 "resnet50:numba2:$W" resnet18:numba2 \
  "resnet18:numba2:$W" resnet50:numba1 resnet18:numba1 "resnet50:numba2:$W,kernels.conv_serial.PAIR_COLS_MAX=196"
elapsed warm
T=$(( DEADLINE - $(date +%s) - 2 ))
timeout "$T" taskset -c 0,1 python3 nodes_ab2t.py resnet50 6 "ctl=kernels.cpair.COLS_AHEAD=0" "both=$B" "a16=$S" \
  "kc=$K" > "$O/abA.txt" 2>&1 &
timeout "$T" taskset -c 2,3 python3 nodes_ab2t.py resnet50 6 "pc=$P" "kc=$K" "a16=$S" "both=$B" > "$O/abB.txt" 2>&1 &
timeout "$T" taskset -c 4,5 python3 turns.py resnet50 --rounds 7 --runtimes numba,numba1,ort2 --variant "both=$B" \
  --json "$O/t50.json" > "$O/t50.txt" 2>&1 &
timeout "$T" taskset -c 6,7 python3 turns.py resnet18 --rounds 7 --runtimes numba,numba1,ort2 --variant "both=$B" \
  --json "$O/t18.json" > "$O/t18.txt" 2>&1 &
timeout "$T" taskset -c 8,9 python3 turns.py resnet50 --mode loaded --rounds 5 --runtimes numba,numba1 \
  --variant "both=$B" --json "$O/l50.json" > "$O/l50.txt" 2>&1 &
timeout "$T" taskset -c 10,11 python3 turns.py resnet18 --mode loaded --rounds 5 --runtimes numba,numba1 \
  --variant "both=$B" --json "$O/l18.json" > "$O/l18.txt" 2>&1 &
timeout "$T" taskset -c 12,13 python3 nodes_ab2t.py resnet18 6 "both=$B" "a16=$S" > "$O/ab18.txt" 2>&1 &
timeout "$T" taskset -c 14,15 python3 turns.py resnet50 --rounds 7 --runtimes numba,ort2 --variant "pc=$P" \
  --variant "a16=$S" --json "$O/t50p.json" > "$O/t50p.txt" 2>&1 &
wait
elapsed measured
for f in "$O"/ab*.txt; do echo "== $f"; grep -h "^| \|^##" "$f" | grep -v "^|---\|^| Gemm\|^| MaxPool\|^| Glob\|^| Resh\|^| Flat\|^| Add\|^| Relu" | cut -c1-230; tail -2 "$f" | grep -i "error\|Trace" ; done
for f in "$O"/*.json; do echo "== $f"; python3 turns.py --from-json "$f" 2>&1 | grep "^| \|^##\|rounds" | grep -v "^|---" | cut -c1-230; done
tail -3 "$O/warm.err" 2>/dev/null
