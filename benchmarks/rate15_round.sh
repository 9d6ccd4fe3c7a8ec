#!/usr/bin/env bash
# Issue 11, session 15 (rate15; docs/numba.md, "The 1x1 tiles' own rate at one thread"): the Xeon call, every job
# pinned to its own CPUs, side by side from a cold Numba cache (one call of ~85 s). The tiles alone
# (bench_tile_rate.py: the weights and scratch 64-byte aligned or not, the cols tiles' whole tiles or not, the rows
# tiles' pixel prefetch), ResNet-50 per kind with each switch off (two processes, the order reversed), ResNet-18,
# RegNetY and MobileNetV2 per kind with both off, and ResNet-50 in turns against all three off.
#   bash benchmarks/rate15_round.sh OUT [T=72]
O=${1:-/tmp/out}; mkdir -p "$O"; cd "$(dirname "$0")" || exit 1
export KERNELKIT_NUMBA_START=eager
T=${2:-72}
F="kernels.ftile"
W="noW=$F.COLS_WHOLE_ONE_THREAD=0"
A="noA=$F.PACK_ALIGN=0"
X="x8=$F.ROWS_X_AHEAD_ONE_THREAD=8"
OFF="off=$F.COLS_WHOLE_ONE_THREAD=0;$F.PACK_ALIGN=0"
timeout "$T" taskset -c 14 python3 bench_tile_rate.py 20 both > "$O/tiles.txt" 2>&1 &
timeout "$T" taskset -c 0,1 python3 nodes_ab.py resnet50 5 "$W" "$A" "$X" --rotate > "$O/abA.txt" 2>&1 &
timeout "$T" taskset -c 2,3 python3 nodes_ab.py resnet50 5 "$X" "$A" "$W" --rotate > "$O/abB.txt" 2>&1 &
timeout "$T" taskset -c 4,5 python3 nodes_ab.py resnet18 5 "$OFF" --rotate > "$O/ab18.txt" 2>&1 &
timeout "$T" taskset -c 6,7 python3 nodes_ab.py regnet_y_400mf 5 "$OFF" --rotate > "$O/abrg.txt" 2>&1 &
timeout "$T" taskset -c 8,9 python3 nodes_ab.py mobilenet_v2 5 "$OFF" --rotate > "$O/abmb.txt" 2>&1 &
timeout "$T" taskset -c 10,11 python3 turns.py resnet50 --rounds 9 --turn-s 0.4 --runtimes numba1,ort1,reference1 \
  --variant1 "$OFF;config.BUFFER_ALIGN=0" --json "$O/t50.jsonl" > "$O/t50.txt" 2>&1 &
wait
echo "== tiles"; grep -h "^| \|tiles" "$O/tiles.txt" | cut -c1-160
for f in "$O"/ab*.txt; do echo "== $f"; grep -h "^| kind\|^| .*1x1\|^| \*\*sum\|^| all" "$f" | cut -c1-150 | head -24; tail -1 "$f" | cut -c1-200; done
echo "== t50"; python3 turns.py --from-json "$O/t50.jsonl" 2>&1 | grep "^| " | tail -6 | cut -c1-220
