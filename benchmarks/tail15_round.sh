#!/usr/bin/env bash
# The uneven halves' claimed middle (issue 11, session 15; docs/numba.md, "A middle that the faster core claims"):
# cpair.TAIL (the bound parallel call's 1x1 layers) and rnpair.TAIL_DIRECT (fdirect's shards) A/B'd on the ResNets,
# traced (KERNELKIT_TURNS_TRACE=1), quiet on CPUs 0,1, beside the loaded A/B on CPUs 2,3. Prints turns_trace.py
# --short (the two sides' ends apart in the fast and slow thirds) and the tables last. The variants: V1, V2
# (LABEL=SPEC); limits WARM_S, QS, LS (s); rounds QR, LR.
#     OUT=/tmp/out bash benchmarks/tail15_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=400 source "$(dirname "$0")/_round.sh" "$OUT"  # warm_cache; OUT/env.txt (lscpu, versions)
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
V1=${V1:-"tail=kernels.cpair.TAIL=1;kernels.rnpair.TAIL_DIRECT=1"}
V2=${V2:-"tc=kernels.cpair.TAIL=1"}
{ git log --oneline -1; date -u; } >> "$OUT/env.txt" 2>&1
T0=$(date +%s)
warm_cache "4,5 6,7 8,9 10,11 12,13 14,15" "${WARM_S:-35}" resnet50:numba1 resnet50:numba2 resnet18:numba1 \
  resnet18:numba2 "resnet50:numba2:$(echo "${V1#*=}" | tr ";" ",")" "resnet18:numba2:$(echo "${V1#*=}" | tr ";" ",")"
echo "warm $(( $(date +%s) - T0 ))s" >> "$OUT/env.txt"
KERNELKIT_TURNS_TRACE=1 timeout "${QS:-85}" taskset -c 0,1 python3 benchmarks/turns.py resnet50,resnet18 \
  --rounds "${QR:-7}" --runtimes numba,numba1,ort2 --variant "$V1" --variant "$V2" \
  --json "$OUT/quiet.jsonl" > "$OUT/quiet.txt" 2>&1 &
timeout "${LS:-80}" taskset -c 2,3 python3 benchmarks/turns.py resnet50,resnet18 --mode loaded --rounds "${LR:-4}" \
  --runtimes numba,numba1 --variant "$V1" --json "$OUT/loaded.jsonl" > "$OUT/loaded.txt" 2>&1 &
wait
echo "quiet+loaded $(( $(date +%s) - T0 ))s" >> "$OUT/env.txt"
python3 benchmarks/turns_trace.py "$OUT/quiet.jsonl" > "$OUT/trace.md" 2>&1
for f in quiet loaded; do python3 benchmarks/turns.py --from-json "$OUT/$f.jsonl" \
  --blocks pair_stalls,pair_stall_backoffs,pair_backoffs > "$OUT/$f.table" 2>&1; done
python3 benchmarks/turns_trace.py --short "$OUT/quiet.jsonl" | tail -22
tail -4 "$OUT/env.txt"
for f in quiet loaded; do echo "== $f"; grep -v "^$" "$OUT/$f.table" | tail -16; done
