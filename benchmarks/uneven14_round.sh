#!/usr/bin/env bash
# The two-thread blocks that run slow in turns (issue 11, session 14; docs/numba.md, "The two-thread blocks that run
# slow in turns"): the Xeon call this session's helper could not complete. Warms the Numba cache first (uneven14's
# only call spent its 56 s quiet job compiling on a fresh machine and wrote no block), then a traced turns.py run
# quiet alone on CPUs 0,1 (KERNELKIT_TURNS_TRACE=1: per block the pair halves per caller CPU, the CPUs' steal, the
# threads' run-queue waits) with rnpair.FOLLOW's A/B, then the A/B loaded alone on 0,1. 150-250 s on a started machine
# (the warm-up ends when the cache is full, at most WARM_S = 120 s; on the 2-core dev box, WARM_CPUS="0,1 0,1 0,1 0,1",
# the whole script ran in 5 min).
#     OUT=/tmp/out bash benchmarks/uneven14_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source "$(dirname "$0")/_round.sh" "$OUT"  # warm_cache; OUT/env.txt (lscpu, versions)
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
FOL="fol=kernels.rnpair.BALANCE=1;kernels.rnpair.FOLLOW=1"
{ lscpu | grep -E "Model name|Hypervisor"; lscpu -e | head -3; grep -E "^cpu[01] " /proc/stat; git log --oneline -1
  date -u; } >> "$OUT/env.txt" 2>&1
T0=$(date +%s)
# the cache: each model at one and two threads, side by side (WARM_CPUS), each under WARM_S (_round.sh's warm_cache)
warm_cache "${WARM_CPUS:-4,5 6,7 8,9 10,11}" "${WARM_S:-120}" resnet50:numba1 resnet50:numba2 resnet18:numba1 resnet18:numba2
echo "warm $(( $(date +%s) - T0 ))s" >> "$OUT/env.txt"
KERNELKIT_TURNS_TRACE=1 timeout "${QS:-70}" taskset -c 0,1 python3 benchmarks/turns.py resnet50,resnet18 \
  --rounds "${QR:-7}" --runtimes numba,numba1,ort2 --variant "$FOL" --json "$OUT/quiet.jsonl" > "$OUT/quiet.txt" 2>&1
echo "quiet rc $? $(( $(date +%s) - T0 ))s" >> "$OUT/env.txt"
timeout "${LS:-35}" taskset -c 0,1 python3 benchmarks/turns.py resnet50,resnet18 --mode loaded --rounds "${LR:-4}" \
  --runtimes numba,numba1 --variant "$FOL" --json "$OUT/loaded.jsonl" > "$OUT/loaded.txt" 2>&1
echo "loaded rc $? $(( $(date +%s) - T0 ))s" >> "$OUT/env.txt"
grep -E "^cpu[01] " /proc/stat >> "$OUT/env.txt"
python3 benchmarks/turns_trace.py "$OUT/quiet.jsonl" > "$OUT/trace.md" 2>&1
python3 benchmarks/turns_trace.py --short "$OUT/quiet.jsonl"
cat "$OUT/env.txt"; tail -4 "$OUT/quiet.txt"; tail -4 "$OUT/loaded.txt"
