#!/usr/bin/env bash
# Issue 11, session 15 (rate15; docs/numba.md, "The 1x1 tiles' own rate at one thread"): the second Xeon call, every
# job pinned to its own CPUs, side by side from a cold Numba cache. The in-place rows tiles' pixel prefetch
# (ftile.ROWS_X_AHEAD_ONE_THREAD at 8 and 16, "ctl" the default 0 in a session of its own) per kind in ResNet-50
# (two processes, the order reversed), RegNetY and MobileNetV2, and in turns; the alignment and the whole cols
# tiles together off ("off") in turns at one thread and, alignment alone, at two threads.
#   bash benchmarks/rate15_round2.sh OUT [T=70]
O=${1:-/tmp/out}; mkdir -p "$O"; cd "$(dirname "$0")" || exit 1
export KERNELKIT_NUMBA_START=eager
T=${2:-70}
F="kernels.ftile"
C="ctl=$F.ROWS_X_AHEAD_ONE_THREAD=0"
X8="x8=$F.ROWS_X_AHEAD_ONE_THREAD=8"
X16="x16=$F.ROWS_X_AHEAD_ONE_THREAD=16"
OFF="off=$F.COLS_WHOLE_ONE_THREAD=0;$F.PACK_ALIGN=0;config.BUFFER_ALIGN=0"
timeout "$T" taskset -c 14 python3 bench_tile_rate.py 20 rows > "$O/tiles.txt" 2>&1 &
timeout "$T" taskset -c 0,1 python3 nodes_ab.py resnet50 6 "$C" "$X8" "$X16" --rotate > "$O/abA.txt" 2>&1 &
timeout "$T" taskset -c 2,3 python3 nodes_ab.py resnet50 6 "$X16" "$X8" "$C" --rotate > "$O/abB.txt" 2>&1 &
timeout "$T" taskset -c 4,5 python3 nodes_ab.py regnet_y_400mf 6 "$X8" "$C" --rotate > "$O/abrg.txt" 2>&1 &
timeout "$T" taskset -c 6,7 python3 nodes_ab.py mobilenet_v2 6 "$X8" "$C" --rotate > "$O/abmb.txt" 2>&1 &
timeout "$T" taskset -c 8,9 python3 turns.py resnet50 --rounds 9 --turn-s 0.4 --runtimes numba1,reference1 \
  --variant1 "$X8" --variant1 "$OFF" --json "$O/t50.jsonl" > "$O/t50.txt" 2>&1 &
timeout "$T" taskset -c 10,11 python3 turns.py resnet50 --rounds 9 --turn-s 0.4 --runtimes numba \
  --variant "off2=$F.PACK_ALIGN=0;config.BUFFER_ALIGN=0" --json "$O/t50two.jsonl" > "$O/t50two.txt" 2>&1 &
timeout "$T" taskset -c 12,13 python3 turns.py regnet_y_400mf,mobilenet_v2 --rounds 9 --turn-s 0.3 --runtimes numba1 \
  --variant1 "$X8" --json "$O/trm.jsonl" > "$O/trm.txt" 2>&1 &
wait
echo "== tiles"; grep -h "^| " "$O/tiles.txt" | cut -c1-120
for f in "$O"/ab*.txt; do echo "== $f"; grep -h "^| kind\|56 \|@28 \|@112\|^| all" "$f" | cut -c1-150 | head -14; done
for j in t50 t50two trm; do echo "== $j"; python3 turns.py --from-json "$O/$j.jsonl" 2>&1 | grep "^| " | cut -c1-300; done
