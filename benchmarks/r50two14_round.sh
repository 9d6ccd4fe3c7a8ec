#!/usr/bin/env bash
# Issue 11, session 14 (r50two14; docs/numba.md, "ResNet-50's rows-tile 1x1 and 3x3/2 layers at one thread"):
# the Xeon call of the round, every job pinned to its own CPUs, side by side after a warm-up that fills the
# Numba cache. The layers alone (bench_r50_layers.py, hot and cold, against onnxruntime and np.dot), per kind
# of node in ResNet-50 (nodes_ab.py, the variants in two orders; "ctl" is the default itself in a session of
# its own: the noise of a kind), ResNet-50 and ResNet-18 at one thread in turns, and r50one14's leftover: the
# cols tiles' K chunk of 128 at two threads (ftile.COLS_KC) against the default and onnxruntime 2t.
#   bash benchmarks/r50two14_round.sh OUT
O=${1:-/tmp/out}; mkdir -p "$O"; cd "$(dirname "$0")" || exit 1
export KERNELKIT_NUMBA_START=eager
PF="pf=kernels.ftile.ROWS_PREFETCH=1"
A8="a8=kernels.fdirect.AHEAD=8"
V="ctl=kernels.conv.DIRECT=1 $PF $A8 a16=kernels.fdirect.AHEAD=16 pfa8=kernels.ftile.ROWS_PREFETCH=1;kernels.fdirect.AHEAD=8"
R=$(echo "$V" | tr ' ' '\n' | tac | tr '\n' ' ')
# shellcheck disable=SC2086
timeout 50 taskset -c 0,1 python3 nodes_ab.py resnet50 1 $V > "$O/warm50.txt" 2>&1 &
timeout 50 taskset -c 2,3 python3 nodes_ab.py resnet18 1 "$PF" "$A8" > "$O/warm18.txt" 2>&1 &
wait
timeout 85 taskset -c 0,1 python3 turns.py resnet50 --rounds 9 --runtimes numba,ort2 \
  --variant "kc128=kernels.ftile.COLS_KC=128" > "$O/t50_2t.txt" 2>&1 &
# shellcheck disable=SC2086
timeout 85 taskset -c 2,3 python3 nodes_ab.py resnet50 12 $V > "$O/abA.txt" 2>&1 &
# shellcheck disable=SC2086
timeout 85 taskset -c 4,5 python3 nodes_ab.py resnet50 12 $R > "$O/abB.txt" 2>&1 &
timeout 85 taskset -c 6,7 python3 turns.py resnet50 --rounds 9 --runtimes numba1,ort1,reference1 \
  --variant1 "$PF" --variant1 "$A8" > "$O/t50.txt" 2>&1 &
timeout 85 taskset -c 8,9 python3 turns.py resnet18 --rounds 9 --runtimes numba1,ort1 \
  --variant1 "$PF" --variant1 "$A8" > "$O/t18.txt" 2>&1 &
timeout 85 taskset -c 10 python3 bench_r50_layers.py 15 both "$PF" "$A8" > "$O/layers.txt" 2>&1 &
wait
for f in "$O"/*.txt; do echo "== $f"; grep -h "^| \|^hot\|^cold\|quiet:" "$f" | tail -40 | cut -c1-300; done
