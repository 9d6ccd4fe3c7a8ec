#!/usr/bin/env bash
# The stall bursts, traced stall by stall (issue 11, session 15; docs/numba.md): the stall rule's switches
# (rnpair.STALL_NET, rnpair.STALL_SKIP) A/B'd on the ResNets, traced (KERNELKIT_TURNS_TRACE=1), quiet alone on CPUs
# 0,1; then the loaded A/B on CPUs 2,3 beside the other three models quiet on 0,1 (the switches no slower there).
# Prints turns_trace.py --short and --stalls (one line a stall: the halves, the helper's ratio before it, fired,
# paid for, the gap after) and the tables last. The variants: V1, V2, V3 (LABEL=SPEC); limits QS, LS (s), rounds
# QR, LR, OR. Session 15's call ran it with the defaults in 163 s from the warm-up's start (warm-up 34 s).
#     OUT=/tmp/out bash benchmarks/stall15_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=400 source "$(dirname "$0")/_round.sh" "$OUT"  # warm_cache; OUT/env.txt (lscpu, versions)
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
V1=${V1:-"net=kernels.rnpair.STALL_NET=1"}
V2=${V2:-"sk=kernels.rnpair.STALL_SKIP=16"}
V3=${V3:-"netsk=kernels.rnpair.STALL_NET=1;kernels.rnpair.STALL_SKIP=16"}
{ git log --oneline -1; date -u; } >> "$OUT/env.txt" 2>&1
T0=$(date +%s)
warm_cache "4,5 6,7 8,9 10,11 12,13 14,15 2,3" "${WARM_S:-50}" resnet50:numba1 resnet50:numba2 resnet18:numba1 \
  resnet18:numba2 mobilenetv2:numba2 transformer:numba2 mlp:numba2
echo "warm $(( $(date +%s) - T0 ))s" >> "$OUT/env.txt"
KERNELKIT_TURNS_TRACE=1 timeout "${QS:-85}" taskset -c 0,1 python3 benchmarks/turns.py resnet50,resnet18 \
  --rounds "${QR:-6}" --runtimes numba,numba1,ort2 --variant "$V1" --variant "$V2" --variant "$V3" \
  --json "$OUT/quiet.jsonl" > "$OUT/quiet.txt" 2>&1
echo "quiet rc $? $(( $(date +%s) - T0 ))s" >> "$OUT/env.txt"
timeout "${LS:-50}" taskset -c 2,3 python3 benchmarks/turns.py resnet50,resnet18 --mode loaded --rounds "${LR:-4}" \
  --runtimes numba,numba1 --variant "$V1" --variant "$V3" --json "$OUT/loaded.jsonl" > "$OUT/loaded.txt" 2>&1 &
timeout "${LS:-50}" taskset -c 0,1 python3 benchmarks/turns.py mobilenetv2,transformer,mlp --rounds "${OR:-5}" \
  --runtimes numba --variant "$V3" --json "$OUT/others.jsonl" > "$OUT/others.txt" 2>&1 &
wait
echo "loaded+others $(( $(date +%s) - T0 ))s" >> "$OUT/env.txt"
python3 benchmarks/turns_trace.py "$OUT/quiet.jsonl" > "$OUT/trace.md" 2>&1
python3 benchmarks/turns_trace.py --stalls "$OUT/quiet.jsonl" > "$OUT/stalls.txt" 2>&1
for f in quiet loaded others; do python3 benchmarks/turns.py --from-json "$OUT/$f.jsonl" \
  --blocks pair_stalls,pair_paid,pair_skips,pair_stall_backoffs,pair_backoffs > "$OUT/$f.table" 2>&1; done
python3 benchmarks/turns_trace.py --short "$OUT/quiet.jsonl" | tail -16
head -40 "$OUT/stalls.txt"
tail -5 "$OUT/env.txt"
for f in quiet loaded others; do echo "== $f"; grep -v "^$" "$OUT/$f.table" | tail -14; done
