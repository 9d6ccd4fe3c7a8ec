#!/usr/bin/env bash
# Issue 11, session 14 (r50two14): the second Xeon call, on the warm machine of the first
# (r50two14_round.sh): fdirect.AHEAD 16 and 8 in turns on ResNet-50 and ResNet-18, and per kind 16 against 32.
#   bash benchmarks/r50two14_round2.sh OUT
O=${1:-/tmp/out}; mkdir -p "$O"; cd "$(dirname "$0")" || exit 1
export KERNELKIT_NUMBA_START=eager
A8="a8=kernels.fdirect.AHEAD=8"
A16="a16=kernels.fdirect.AHEAD=16"
A32="a32=kernels.fdirect.AHEAD=32"
timeout 70 taskset -c 0,1 python3 turns.py resnet50 --rounds 9 --runtimes numba1,ort1,reference1 \
  --variant1 "$A16" --variant1 "$A8" > "$O/t50b.txt" 2>&1 &
timeout 70 taskset -c 2,3 python3 turns.py resnet18 --rounds 9 --runtimes numba1,ort1 --variant1 "$A16" \
  > "$O/t18b.txt" 2>&1 &
timeout 70 taskset -c 4,5 python3 nodes_ab.py resnet50 10 ctl=kernels.conv.DIRECT=1 "$A16" "$A32" > "$O/abC.txt" 2>&1 &
timeout 70 taskset -c 6,7 python3 nodes_ab.py resnet50 10 "$A32" "$A16" ctl=kernels.conv.DIRECT=1 > "$O/abD.txt" 2>&1 &
wait
for f in "$O"/*.txt; do echo "== $f"; grep -h "^| \|quiet:" "$f" | grep -v "^| Conv 1x1\|^| Gemm\|^| MaxPool\|^| Glob\|^| Resh" \
  | tail -20 | cut -c1-300; done
