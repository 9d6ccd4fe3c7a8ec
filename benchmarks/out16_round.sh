#!/usr/bin/env bash
# ResNet-50's time outside the kernels at one and two threads (issue 11, session 16, out16; docs/numba.md, "ResNet-50's
# time outside the kernels at one and two threads"): the Numba cache warmed (CPUs 2-15), then outside_time.py alone on
# CPUs 0,1 (per kind of layer, one and two threads in one process, each node's time outside its compiled calls, and
# the same for the VARIANT's two-thread session), then the whole models in turns alone on CPUs 0,1 with the VARIANT
# (default: ps, eff16's PAD_SPLIT and SUB_SPLIT: the pad and the subsample copy that both sessions pay on the caller,
# shared by the pair's halves). ~200 s. Limits WARM_S, OS, QS (s); runs OR; rounds QR.
#     OUT=/tmp/out bash benchmarks/out16_round.sh
#     VARIANT="ps=kernels.rnpair.PAD_SPLIT=1;kernels.cpair.SUB_SPLIT=1" OUT=/tmp/out bash benchmarks/out16_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=${BUDGET:-230} source "$(dirname "$0")/_round.sh" "$OUT"
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
V=${VARIANT:-ps=kernels.rnpair.PAD_SPLIT=1;kernels.cpair.SUB_SPLIT=1}
SPEC=${V#*=}
warm_cache "2,3 4,5 6,7 8,9 10,11 12,13 14,15" "${WARM_S:-40}" resnet50:numba1 resnet50:numba2 resnet18:numba1 \
  resnet18:numba2 "resnet50:numba2:${SPEC//;/,}" "resnet18:numba2:${SPEC//;/,}"
elapsed warm | tee -a "$OUT/env.txt"
timeout "${OS:-50}" taskset -c 0,1 python3 benchmarks/outside_time.py resnet50 "${OR:-10}" "$V" \
  > "$OUT/outside.md" 2> "$OUT/outside.err"
elapsed outside | tee -a "$OUT/env.txt"
timeout "${QS:-120}" taskset -c 0,1 python3 benchmarks/turns.py resnet50,resnet18 --rounds "${QR:-8}" \
  --runtimes numba,numba1,ort2 --variant "$V" --json "$OUT/quiet.jsonl" > "$OUT/quiet.txt" 2>&1
elapsed turns | tee -a "$OUT/env.txt"
python3 benchmarks/turns.py --from-json "$OUT/quiet.jsonl" --blocks pair_stalls,pair_stall_backoffs,pair_backoffs \
  > "$OUT/quiet.table" 2>&1
grep -v "^|---" "$OUT/outside.md" | head -45; tail -3 "$OUT/outside.err"
echo "== quiet"; grep -v "^$" "$OUT/quiet.table" | grep -v "^|---" | head -40
