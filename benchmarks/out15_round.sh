#!/usr/bin/env bash
# The writes after the K loop (issue 11, session 15, out15; docs/numba.md, "The writes after the K loop"): the Xeon
# call for its two switches, never run there yet: V, ftile.ROWS_NT_ONE_THREAD (the one-thread rows tiles' outputs
# stored non-temporal) and V2, conv_serial.RESIDUAL_IN_PLACE (the fused-residual 1x1 layers on the one-chunk rows
# tiles write their output over their residual: the memory plan's). Expected run time ~330 s of device time (the
# machine's start not counted): warm-up <= 60 s, phase 1 ~80 s, phase 2 ~110 s, phase 3 ~75 s; BUDGET (default
# 450) caps it, each job under its own limit.
#   1. warm_cache: ResNet-50 and ResNet-18 at one and two threads, ResNet-50 1t with each variant, side by side.
#   2. side by side on disjoint CPUs: bench_rows_epilogue.py (the rows layers hot / in the model's cache state / cold,
#      with and without the residual; plain, nt, pf (ROWS_PREFETCH), inplace (the output over the residual)) on CPU
#      14, bench_tile_rate.py rows on CPU 15, and nodes_ab.py resnet50 10 --rotate with both variants and a control
#      in two processes (the order reversed) on CPUs 0,1 and 2,3: per kind, the +Z writers and their readers.
#   3. alone on CPUs 0,1: turns.py resnet50,resnet18 --runtimes numba1,reference1,ort1 --variant1 V --variant1 V2
#      --rounds 8.
#   4. alone on CPUs 0,1: the two-thread turns A/B (numba, ort2, --variant V, --variant V2: both switches are
#      one-thread only, so this is the control that they leave two threads alone), 5 rounds.
#     OUT=/tmp/out bash benchmarks/out15_round.sh
# The variants: V, V2 (LABEL=SPEC), the control CTL; CPUs: the defaults are the Xeon's 16.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=${BUDGET:-450} source "$(dirname "$0")/_round.sh" "$OUT"  # warm_cache, pinned, tables; OUT/env.txt
export PYTHONWARNINGS=ignore OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
V=${V:-"nt=kernels.ftile.ROWS_NT_ONE_THREAD=1"}
V2=${V2:-"ip=kernels.conv_serial.RESIDUAL_IN_PLACE=1"}
CTL=${CTL:-"ctl=kernels.ftile.ROWS_NT_ONE_THREAD=0"}
B=benchmarks
{ git log --oneline -1; date -u; } >> "$OUT/env.txt" 2>&1
warm_cache "4,5 6,7 8,9 10,11 12,13 14,15" "${WARM_S:-60}" resnet50:numba1 resnet50:numba2 resnet18:numba1 \
  resnet18:numba2 "resnet50:numba1:$(echo "${V#*=}" | tr ";" ",")" "resnet50:numba1:$(echo "${V2#*=}" | tr ";" ",")"
elapsed warm >> "$OUT/env.txt"
pinned 14 python3 $B/bench_rows_epilogue.py 15 > "$OUT/epi.txt" 2>&1 &
pinned 15 python3 $B/bench_tile_rate.py 20 rows > "$OUT/tiles.txt" 2>&1 &
pinned 0,1 python3 $B/nodes_ab.py resnet50 10 "$V" "$V2" "$CTL" --rotate > "$OUT/abA.txt" 2>&1 &
pinned 2,3 python3 $B/nodes_ab.py resnet50 10 "$CTL" "$V2" "$V" --rotate > "$OUT/abB.txt" 2>&1 &
wait
elapsed "phase 1" >> "$OUT/env.txt"
pinned 0,1 timeout "${T1_S:-140}" python3 $B/turns.py resnet50,resnet18 --rounds 8 --runtimes numba1,reference1,ort1 \
  --variant1 "$V" --variant1 "$V2" --json "$OUT/t1.jsonl" > "$OUT/t1.txt" 2>&1
elapsed "turns 1t" >> "$OUT/env.txt"
pinned 0,1 timeout "${T2_S:-95}" python3 $B/turns.py resnet50,resnet18 --rounds 5 --runtimes numba,ort2 \
  --variant "$V" --variant "$V2" --json "$OUT/t2.jsonl" > "$OUT/t2.txt" 2>&1
elapsed "turns 2t" >> "$OUT/env.txt"
for f in t1 t2; do python3 $B/turns.py --from-json "$OUT/$f.jsonl" > "$OUT/$f.table" 2>&1; done
echo "== epilogue (ms)"; grep "^| " "$OUT/epi.txt" | grep -v "^|---" | cut -c1-200
echo "== tiles alone"; grep "^| " "$OUT/tiles.txt" | grep -v "^|---"
for f in abA abB; do
  echo "== $f"; grep "^| kind\|/1 .*@28\|/1 .*@56\|\*\*sum" "$OUT/$f.txt" | cut -c1-190
done
for f in t1 t2; do echo "== $f"; grep "^| " "$OUT/$f.table" | grep -v "^|---" | tail -12 | cut -c1-260; done
tail -5 "$OUT/env.txt"
