#!/usr/bin/env bash
# Issue 11, session 14 (r18one14; docs/numba.md, "ResNet-18 at one thread against onnxruntime"): the two Xeon
# calls, every job pinned to its own two CPUs, side by side. Call 1 ("profile"): ResNet-18 and ResNet-50 per node
# against onnxruntime's profiler, ResNet-18 per kind with the one-thread switches of its kinds (two processes, the
# variants' order reversed in the second), ResNet-18 in turns. Call 2 ("turns"): ResNet-18 numba 1t / ORT 1t in
# turns with and without the two-thread runtimes in the same turns (J3/J4's set against call 1's), and
# winograd.F4_MIN_OUTPUTS per kind on both models. nodes_ab's "ctl" is the default itself in a session of its own.
#   bash benchmarks/r18one14_round.sh profile|turns OUT [T]
O=${2:-/tmp/out}; T=${3:-85}; mkdir -p "$O"; cd "$(dirname "$0")" || exit 1
export KERNELKIT_NUMBA_START=eager
CTL=ctl=kernels.conv.DIRECT=1
F4=f4=kernels.winograd.F4_MIN_OUTPUTS=196
case "$1" in
profile)
  V="$CTL stemd=kernels.conv.DIRECT_MIN_K=0 small0=kernels.conv.DIRECT_SMALL=0 $F4
     wtb1m=kernels.winograd.TILE_BYTES=1048576 wtb4m=kernels.winograd.TILE_BYTES=4194304"
  R=$(echo $V | tr ' ' '\n' | tac | tr '\n' ' ')
  timeout "$T" taskset -c 0,1 python3 vs_ort_nodes.py resnet18 --threads 1 --runs 10 --reference > "$O/vs18.txt" 2>&1 &
  timeout "$T" taskset -c 2,3 python3 vs_ort_nodes.py resnet50 --threads 1 --runs 10 --reference > "$O/vs50.txt" 2>&1 &
  # shellcheck disable=SC2086
  timeout "$T" taskset -c 4,5 python3 nodes_ab.py resnet18 15 --rotate $V > "$O/abA.txt" 2>&1 &
  # shellcheck disable=SC2086
  timeout "$T" taskset -c 6,7 python3 nodes_ab.py resnet18 15 --rotate $R > "$O/abB.txt" 2>&1 &
  timeout "$T" taskset -c 8,9 python3 turns.py resnet18 --rounds 6 --runtimes numba1,ort1,reference1 \
    --variant1 "$F4" > "$O/t18.txt" 2>&1 &
  wait ;;
turns)
  timeout "$T" taskset -c 0,1 python3 turns.py resnet18 --rounds 8 --runtimes numba1,ort1,reference1 > "$O/tA_1t.txt" 2>&1 &
  timeout "$T" taskset -c 2,3 python3 turns.py resnet18 --rounds 8 --runtimes numba1,numba,reference1,ort1,ort2 \
    > "$O/tB_j3set.txt" 2>&1 &
  timeout "$T" taskset -c 4,5 python3 turns.py resnet18 --rounds 8 --runtimes numba1,numba,reference1,ort1,ort2 \
    --gap-s 0.3 > "$O/tC_j3set_gap03.txt" 2>&1 &  # (did not finish in 80 s on the Xeon)
  timeout "$T" taskset -c 6,7 python3 turns.py resnet18 --rounds 8 --runtimes numba1,ort1,ort2 > "$O/tD_ort2.txt" 2>&1 &
  timeout "$T" taskset -c 12,13 python3 turns.py resnet18 --rounds 8 --runtimes numba1,numba,ort1 > "$O/tG_numba2.txt" 2>&1 &
  timeout "$T" taskset -c 8,9 python3 nodes_ab.py resnet18 20 --rotate $CTL $F4 > "$O/ab18.txt" 2>&1 &
  timeout "$T" taskset -c 10,11 python3 nodes_ab.py resnet50 10 --rotate $CTL $F4 > "$O/ab50.txt" 2>&1 &
  wait ;;
*) echo "usage: $0 profile|turns OUT [T]"; exit 2 ;;
esac
for f in "$O"/*.txt; do echo "== $f"; grep -h "^| \|quiet:\|Error\|error" "$f" | tail -45 | cut -c1-300; done
