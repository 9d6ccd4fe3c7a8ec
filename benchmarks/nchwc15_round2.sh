#!/usr/bin/env bash
# Issue 11, session 15 (nchwc15; docs/numba.md, "ResNet-50's bottleneck blocks at one thread"): the second Xeon
# call, conv.COLS_AHEAD_ONE_THREAD on (16): ResNet-50, ResNet-18 and RegNetY at one thread in turns against it off
# (and at 32), ResNet-50 per kind (nodes_ab.py, order rotated), and our cols tile on a channel-blocked (NCHW16c)
# input against the NCHW one (bench_blocked_input.py), every job pinned to its own two CPUs after a warm-up.
#   bash benchmarks/nchwc15_round2.sh OUT
O=${1:-/tmp/out}; mkdir -p "$O"; cd "$(dirname "$0")" || exit 1
export KERNELKIT_NUMBA_START=eager
A="kernels.conv.COLS_AHEAD_ONE_THREAD"
timeout 35 taskset -c 0,1 python3 nodes_ab.py resnet50 1 "off=$A=0" "a32=$A=32" > "$O/warm50.txt" 2>&1 &
timeout 35 taskset -c 2,3 python3 nodes_ab.py resnet18 1 "off=$A=0" > "$O/warm18.txt" 2>&1 &
timeout 35 taskset -c 4,5 python3 nodes_ab.py regnet_y_400mf 1 "off=$A=0" > "$O/warmrg.txt" 2>&1 &
timeout 35 taskset -c 6 python3 bench_blocked_input.py 2 > "$O/warmbi.txt" 2>&1 &
wait
T=${T:-50}
timeout "$T" taskset -c 0,1 python3 turns.py resnet50 --rounds 9 --runtimes numba1,reference1,ort1 \
  --variant1 "off=$A=0" > "$O/t50.txt" 2>&1 &
timeout "$T" taskset -c 2,3 python3 turns.py resnet18 --rounds 9 --runtimes numba1,ort1 \
  --variant1 "off=$A=0" > "$O/t18.txt" 2>&1 &
timeout "$T" taskset -c 4,5 python3 turns.py regnet_y_400mf --rounds 9 --runtimes numba1,ort1 \
  --variant1 "off=$A=0" > "$O/trg.txt" 2>&1 &
timeout "$T" taskset -c 6,7 python3 nodes_ab.py resnet50 8 "off=$A=0" "a32=$A=32" --rotate > "$O/abA.txt" 2>&1 &
timeout "$T" taskset -c 8,9 python3 turns.py resnet50 --rounds 9 --runtimes numba1,reference1,ort1 \
  --variant1 "a32=$A=32" > "$O/t50b.txt" 2>&1 &
(timeout 24 taskset -c 10 python3 bench_blocked_input.py 25 128 0 > "$O/bi0.txt" 2>&1;
 timeout 24 taskset -c 10 python3 bench_blocked_input.py 25 128 16 > "$O/bi16.txt" 2>&1) &
wait
for f in "$O"/bi*.txt; do echo "== $f"; grep -h "^| \|^GFLOP" "$f" | cut -c1-200; done
for f in "$O"/ab*.txt; do echo "== $f"; grep -h "^| .*1x1\|^| \*\*sum" "$f" | cut -c1-160; done
for f in "$O"/t*.txt; do echo "== $f"; grep -h "^| " "$f" | tail -2 | cut -c1-400; done
