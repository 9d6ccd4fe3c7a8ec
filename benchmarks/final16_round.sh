#!/usr/bin/env bash
# The final calls of sessions 16 and 17 (docs/benchmarks.md, "Round 16", "Round 17"): warm the Numba cache, then the
# jobs named in JOBS (default "quiet loaded"), each alone on CPUs 0,1, then the tables.
# - quiet: the models M with --probe, QR rounds (each ratio also over the rounds at one host speed), runtimes RQ
#   (default: turns.py's five);
# - loaded: the models M with turns.py's busy loop on one of the two CPUs, LR rounds, runtimes RL (numba1,numba,ort2);
# - b8: batch 8 (ResNet-18, MobileNetV2, the transformer), BR rounds of numba1,ort1,numba,ort2;
# - first: the start-up figures, bench_first_run.py resnet18 (tiered, an empty then a warm cache), on CPUs 0,1 while
#   the cache warms on the others (so a pessimistic first run).
# VQ, if set, is more two-thread runtimes (space-separated LABEL=SPEC items, each a turns.py --variant; their caches
# warmed too) in the quiet job and, with LV=1 (the default), the loaded one; V1 the same for one-thread runtimes in the
# quiet job (turns.py --variant1). The variants run on the models MV (default M); the quiet job runs the models of M
# not in MV in a second turns.py without them (OUT/quiet_rest.jsonl), so that a variant costs no time where it
# changes nothing. Caps: WARM_S, QS (each quiet turns.py), LS, BS seconds.
#     OUT=/tmp/out bash benchmarks/final16_round.sh
#     VQ="off=kernels.conv_serial.RESIDUAL_IN_PLACE=0" QR=7 OUT=/tmp/out bash benchmarks/final16_round.sh
#     JOBS="first quiet" MV=resnet18,resnet50 VQ="ks=..." V1="r1=..." QR=7 OUT=/tmp/o bash benchmarks/final16_round.sh
#     JOBS="loaded b8" LR=5 OUT=/tmp/o bash benchmarks/final16_round.sh      (session 17's two final calls)
set -u
OUT=${OUT:-/tmp/out}
source "$(dirname "$0")/_round.sh" "$OUT"  # warm_cache, elapsed; OUT/env.txt
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
JOBS=" ${JOBS:-quiet loaded} "
M=${M:-resnet18,resnet50,mobilenetv2,transformer,mlp}
MV=${MV:-$M}
REST=$(python3 -c "import sys; v = sys.argv[2].split(','); print(','.join(m for m in sys.argv[1].split(',') if m not in v))" \
  "$M" "$MV")
B8M=resnet18_b8,mobilenetv2_b8,transformer_b8
declare -a VARIANT=() VARIANT1=() WARM=() WARM_V=()
for v in ${VQ:-}; do
  VARIANT+=(--variant "$v")
  spec=${v#*=}
  for m in ${MV//,/ }; do WARM_V+=("$m:numba2:${spec//;/,}"); done
done
for v in ${V1:-}; do
  VARIANT1+=(--variant1 "$v")
  spec=${v#*=}
  for m in ${MV//,/ }; do WARM_V+=("$m:numba1:${spec//;/,}"); done
done
declare -a LOADED_V=()
[ "${LV:-1}" = 1 ] && LOADED_V=("${VARIANT[@]}")
all=""
[[ $JOBS == *" quiet "* || $JOBS == *" loaded "* ]] && all=$M
[[ $JOBS == *" b8 "* ]] && all=${all:+$all,}$B8M
for m in ${all//,/ }; do WARM+=("$m:numba1" "$m:numba2"); done
if [[ $JOBS == *" first "* ]]; then
  (timeout 90 taskset -c 0,1 python3 benchmarks/bench_first_run.py resnet18 /tmp/kk_first_run tiered \
     > "$OUT/first_run.txt" 2>&1) &
fi
warm_cache "2,3 4,5 6,7 8,9 10,11 12,13 14,15" "${WARM_S:-100}" "${WARM[@]}" "${WARM_V[@]}"
wait
elapsed warm >> "$OUT/env.txt"
tables=()
if [[ $JOBS == *" quiet "* ]]; then
  timeout "${QS:-260}" taskset -c 0,1 python3 benchmarks/turns.py "$MV" --rounds "${QR:-8}" --probe \
    ${RQ:+--runtimes "$RQ"} "${VARIANT[@]}" "${VARIANT1[@]}" --json "$OUT/quiet.jsonl" > "$OUT/quiet.txt" 2>&1
  elapsed "quiet rc $?" >> "$OUT/env.txt"
  tables+=(quiet)
  if [ -n "$REST" ]; then
    timeout "${QS:-260}" taskset -c 0,1 python3 benchmarks/turns.py "$REST" --rounds "${QR:-8}" --probe \
      ${RQ:+--runtimes "$RQ"} --json "$OUT/quiet_rest.jsonl" > "$OUT/quiet_rest.txt" 2>&1
    elapsed "quiet_rest rc $?" >> "$OUT/env.txt"
    tables+=(quiet_rest)
  fi
fi
if [[ $JOBS == *" loaded "* ]]; then
  timeout "${LS:-120}" taskset -c 0,1 python3 benchmarks/turns.py "$M" --mode loaded --rounds "${LR:-3}" \
    --runtimes "${RL:-numba1,numba,ort2}" "${LOADED_V[@]}" --json "$OUT/loaded.jsonl" > "$OUT/loaded.txt" 2>&1
  elapsed "loaded rc $?" >> "$OUT/env.txt"
  tables+=(loaded)
fi
if [[ $JOBS == *" b8 "* ]]; then
  timeout "${BS:-80}" taskset -c 0,1 python3 benchmarks/turns.py "$B8M" --rounds "${BR:-3}" \
    --runtimes numba1,ort1,numba,ort2 --json "$OUT/b8.jsonl" > "$OUT/b8.txt" 2>&1
  elapsed "b8 rc $?" >> "$OUT/env.txt"
  tables+=(b8)
fi
rm -f "$OUT/warm.err"
for f in "${tables[@]}"; do
  python3 benchmarks/turns.py --from-json "$OUT/$f.jsonl" 2>/dev/null | grep "^|" | grep -v "^|---" | cut -c1-330
done
for f in "${tables[@]}"; do grep -h "one host speed\|pool" "$OUT/$f.txt" | cut -c1-300; done
[[ $JOBS == *" first "* ]] && tail -4 "$OUT/first_run.txt" | cut -c1-300
tail -6 "$OUT/env.txt"
