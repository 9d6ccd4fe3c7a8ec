#!/usr/bin/env bash
# A cut that follows the cores in the 1x1 halves (issue 11, session 14; docs/numba.md, "A cut that follows the cores
# in the 1x1 halves"): the Xeon call for the next session. Warms the Numba cache (uneven14_round.sh's way), then
# ResNet-50 and ResNet-18 in turns, traced (KERNELKIT_TURNS_TRACE=1), quiet alone on CPUs 0,1 with three variants of
# the default: cf (cpair.FOLLOW: the 1x1 pairs' cut follows the cores), cfd (cf plus rnpair.FOLLOW_DIRECT: fdirect's
# shards too) and all (cfd plus rnpair.BALANCE + rnpair.FOLLOW: the F(4x4) layers too); then the same A/B loaded on 0,1.
# Prints turns_trace.py --short last (the ends apart of the fast and the slow blocks, per runtime).
#     OUT=/tmp/out bash benchmarks/cfollow14_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source "$(dirname "$0")/_round.sh" "$OUT"  # warm_cache; OUT/env.txt (lscpu, versions)
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
CF="cf=kernels.cpair.FOLLOW=1"
CFD="cfd=kernels.cpair.FOLLOW=1;kernels.rnpair.FOLLOW_DIRECT=1"
ALL="all=kernels.cpair.FOLLOW=1;kernels.rnpair.FOLLOW_DIRECT=1;kernels.rnpair.BALANCE=1;kernels.rnpair.FOLLOW=1"
{ lscpu | grep -E "Model name|Hypervisor"; git log --oneline -1; date -u; } >> "$OUT/env.txt" 2>&1
T0=$(date +%s)
# the cache: each model at one and two threads, side by side (WARM_CPUS), each under WARM_S (_round.sh's warm_cache)
warm_cache "${WARM_CPUS:-4,5 6,7 8,9 10,11}" "${WARM_S:-120}" resnet50:numba1 resnet50:numba2 resnet18:numba1 resnet18:numba2
echo "warm $(( $(date +%s) - T0 ))s" >> "$OUT/env.txt"
KERNELKIT_TURNS_TRACE=1 timeout "${QS:-150}" taskset -c 0,1 python3 benchmarks/turns.py resnet50,resnet18 \
  --rounds "${QR:-7}" --runtimes numba,numba1,ort2 --variant "$CF" --variant "$CFD" --variant "$ALL" \
  --json "$OUT/quiet.jsonl" > "$OUT/quiet.txt" 2>&1
echo "quiet rc $? $(( $(date +%s) - T0 ))s" >> "$OUT/env.txt"
timeout "${LS:-100}" taskset -c 0,1 python3 benchmarks/turns.py resnet50,resnet18 --mode loaded --rounds "${LR:-4}" \
  --runtimes numba,numba1 --variant "$CF" --variant "$CFD" --variant "$ALL" --json "$OUT/loaded.jsonl" \
  > "$OUT/loaded.txt" 2>&1
echo "loaded rc $? $(( $(date +%s) - T0 ))s" >> "$OUT/env.txt"
python3 benchmarks/turns_trace.py "$OUT/quiet.jsonl" > "$OUT/trace.md" 2>&1
python3 benchmarks/turns_trace.py --short "$OUT/quiet.jsonl"
cat "$OUT/env.txt"; tail -6 "$OUT/quiet.txt"; tail -6 "$OUT/loaded.txt"
