#!/usr/bin/env bash
# Issue 11, session 15 (nchwc15; docs/numba.md, "ResNet-50's bottleneck blocks at one thread"): the Xeon call,
# every job pinned to its own two CPUs, side by side after a warm-up that fills the Numba cache. ResNet-50's
# bottleneck blocks as their own models against each layer alone (bench_r50_blocks.py: numba and onnxruntime's
# profiler; once with the defaults, once with the cols tiles' weight prefetch), per kind of node in ResNet-50
# with conv.COLS_AHEAD_ONE_THREAD at 16, 32 and 64 and ftile.PACK_MIN_M past every layer (the rows tiles reading
# their input in place: what the copy into tile order gains) in two orders ("ctl": the default in a session of
# its own), and ResNet-50, ResNet-18 and RegNetY at one thread in turns with the prefetch at 32.
#   bash benchmarks/nchwc15_round.sh OUT
O=${1:-/tmp/out}; mkdir -p "$O"; cd "$(dirname "$0")" || exit 1
export KERNELKIT_NUMBA_START=eager
A="kernels.conv.COLS_AHEAD_ONE_THREAD"
V="ctl=$A=0 a16=$A=16 a32=$A=32 a64=$A=64 pk=kernels.ftile.PACK_MIN_M=100000"
R=$(echo "$V" | tr ' ' '\n' | tac | tr '\n' ' ')
# shellcheck disable=SC2086
timeout 40 taskset -c 0,1 python3 nodes_ab.py resnet50 1 $V > "$O/warm50.txt" 2>&1 &
timeout 40 taskset -c 2,3 python3 bench_r50_blocks.py --runs 2 --blocks 2 > "$O/warmblocks.txt" 2>&1 &
timeout 40 taskset -c 4,5 python3 nodes_ab.py resnet18 1 "a32=$A=32" > "$O/warm18.txt" 2>&1 &
timeout 40 taskset -c 6,7 python3 nodes_ab.py regnet_y_400mf 1 "a32=$A=32" > "$O/warmrg.txt" 2>&1 &
wait
T=${T:-75}
timeout "$T" taskset -c 0,1 python3 bench_r50_blocks.py --runs 15 > "$O/blocks.txt" 2>&1 &
# shellcheck disable=SC2086
timeout "$T" taskset -c 2,3 python3 nodes_ab.py resnet50 10 $V --rotate > "$O/abA.txt" 2>&1 &
# shellcheck disable=SC2086
timeout "$T" taskset -c 4,5 python3 nodes_ab.py resnet50 10 $R --rotate > "$O/abB.txt" 2>&1 &
timeout "$T" taskset -c 6,7 python3 turns.py resnet50 --rounds 9 --runtimes numba1,reference1,ort1 \
  --variant1 "a32=$A=32" > "$O/t50.txt" 2>&1 &
timeout "$T" taskset -c 8,9 python3 turns.py resnet18 --rounds 9 --runtimes numba1,ort1 \
  --variant1 "a32=$A=32" > "$O/t18.txt" 2>&1 &
timeout "$T" taskset -c 10,11 python3 turns.py regnet_y_400mf --rounds 9 --runtimes numba1,ort1 \
  --variant1 "a32=$A=32" > "$O/trg.txt" 2>&1 &
timeout "$T" taskset -c 12,13 python3 bench_r50_blocks.py --runs 15 --set "$A=32" > "$O/blocks_a32.txt" 2>&1 &
timeout "$T" taskset -c 14,15 python3 nodes_ab.py regnet_y_400mf 10 "a32=$A=32" --rotate > "$O/abrg.txt" 2>&1 &
wait
for f in "$O"/blocks*.txt; do echo "== $f"; grep -h "^| " "$f" | cut -c1-220; done
for f in "$O"/ab*.txt; do echo "== $f"; grep -h "^| .*1x1\|^| \*\*sum" "$f" | cut -c1-200; done
for f in "$O"/t*.txt; do echo "== $f"; grep -h "^| " "$f" | tail -8 | cut -c1-220; done
