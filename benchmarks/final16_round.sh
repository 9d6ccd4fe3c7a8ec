#!/usr/bin/env bash
# Session 16's final call (docs/benchmarks.md, "Round 16"): warm the Numba cache, then the five models quiet alone on
# CPUs 0,1 with --probe (QR rounds; each ratio also over the rounds at one host speed), then loaded alone on CPUs 0,1
# (LR rounds, turns.py's busy loop on one of them). VQ, if set, is more two-thread runtimes in both jobs
# (space-separated LABEL=SPEC items, each a turns.py --variant; their caches warmed too); V1 the same for one-thread
# runtimes in the quiet job (turns.py --variant1). RQ: the quiet job's runtimes (default: turns.py's five), RL the
# loaded job's. FIRST=1 (session 17): also the start-up figures, bench_first_run.py resnet18 (tiered, an empty then a
# warm cache) on CPUs 0,1 while the cache warms on the others (so a pessimistic first run); B8=1: a last job, batch 8
# (ResNet-18, MobileNetV2, the transformer) alone on CPUs 0,1, BR rounds of numba1,ort1,numba,ort2. Prints the tables
# last.
#     OUT=/tmp/out bash benchmarks/final16_round.sh
#     FIRST=1 QR=8 LR=5 OUT=/tmp/out bash benchmarks/final16_round.sh   (session 17's final call)
#     VQ="off=kernels.conv_serial.RESIDUAL_IN_PLACE=0" QR=7 OUT=/tmp/out bash benchmarks/final16_round.sh
set -u
OUT=${OUT:-/tmp/out}
source "$(dirname "$0")/_round.sh" "$OUT"  # warm_cache, elapsed; OUT/env.txt
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
M=${M:-resnet18,resnet50,mobilenetv2,transformer,mlp}
VQ=${VQ:-}
declare -a VARIANT=() WARM_V=()
for v in $VQ; do
  VARIANT+=(--variant "$v")
  spec=${v#*=}
  for m in ${M//,/ }; do WARM_V+=("$m:numba2:${spec//;/,}"); done
done
declare -a VARIANT1=()
for v in ${V1:-}; do
  VARIANT1+=(--variant1 "$v")
  spec=${v#*=}
  for m in ${M//,/ }; do WARM_V+=("$m:numba1:${spec//;/,}"); done
done
declare -a WARM=()
for m in ${M//,/ }; do WARM+=("$m:numba1" "$m:numba2"); done
if [ "${FIRST:-0}" = 1 ]; then
  (timeout 90 taskset -c 0,1 python3 benchmarks/bench_first_run.py resnet18 /tmp/kk_first_run tiered \
     > "$OUT/first_run.txt" 2>&1) &
fi
[ "${B8:-0}" = 1 ] && for m in resnet18_b8 mobilenetv2_b8 transformer_b8; do WARM+=("$m:numba1" "$m:numba2"); done
warm_cache "2,3 4,5 6,7 8,9 10,11 12,13 14,15" "${WARM_S:-100}" "${WARM[@]}" "${WARM_V[@]}"
wait
elapsed warm >> "$OUT/env.txt"
timeout "${QS:-260}" taskset -c 0,1 python3 benchmarks/turns.py "$M" --rounds "${QR:-8}" --probe \
  ${RQ:+--runtimes "$RQ"} "${VARIANT[@]}" "${VARIANT1[@]}" \
  --json "$OUT/quiet.jsonl" > "$OUT/quiet.txt" 2>&1
elapsed "quiet rc $?" >> "$OUT/env.txt"
timeout "${LS:-120}" taskset -c 0,1 python3 benchmarks/turns.py "$M" --mode loaded --rounds "${LR:-3}" \
  --runtimes "${RL:-numba1,numba,ort2}" "${VARIANT[@]}" --json "$OUT/loaded.jsonl" > "$OUT/loaded.txt" 2>&1
elapsed "loaded rc $?" >> "$OUT/env.txt"
jobs="quiet loaded"
if [ "${B8:-0}" = 1 ]; then
  timeout "${BS:-80}" taskset -c 0,1 python3 benchmarks/turns.py resnet18_b8,mobilenetv2_b8,transformer_b8 \
    --rounds "${BR:-3}" --runtimes numba1,ort1,numba,ort2 --json "$OUT/b8.jsonl" > "$OUT/b8.txt" 2>&1
  elapsed "b8 rc $?" >> "$OUT/env.txt"
  jobs="$jobs b8"
fi
rm -f "$OUT/warm.err"
for f in $jobs; do
  python3 benchmarks/turns.py --from-json "$OUT/$f.jsonl" 2>/dev/null | grep "^|" | grep -v "^|---" | cut -c1-330
done
grep -h "one host speed\|pool" "$OUT/quiet.txt" "$OUT/loaded.txt" | cut -c1-300
[ "${FIRST:-0}" = 1 ] && tail -4 "$OUT/first_run.txt" | cut -c1-300
tail -4 "$OUT/env.txt"
