#!/usr/bin/env bash
# A stall back-off as long as its evidence (issue 11, session 18; docs/numba.md): pairs.LONE_SKIP (a lone stall's fire
# a short skip of pair calls, a burst's the long back-off) and fpair.HICCUP_S=0.1 against the default on the MLP and
# ResNet-18, quiet on CPUs 0,1 and loaded (turns.py's busy loop) on 2,3 side by side, traced stall by stall
# (KERNELKIT_TURNS_TRACE=1; turns_trace.py --stalls: each stall's rule, whether it was a lone skip, the calls refused
# until the next paired one and the ms to it). The whole call in BUDGET s (146) from T_START (the device command's
# start, before its prelude); rounds QRM, QRR (quiet MLP, ResNet-18), LRM, LRR (loaded). Session 18's call: 141 s.
#     T_START=$(date +%s) OUT=/tmp/out bash benchmarks/stall18_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=$(( ${BUDGET:-146} - $(date +%s) + ${T_START:-$(date +%s)} )) source benchmarks/_round.sh "$OUT"
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
{ git log --oneline -1; date -u; nproc; } >> "$OUT/env.txt" 2>&1
warm_cache "4,5 6,7 8,9 10,11" "${WARM_S:-45}" mlp:numba1 mlp:numba2 resnet18:numba1 resnet18:numba2
elapsed warm
VL="lone=kernels.pairs.LONE_SKIP=8"
VH="hic=kernels.fpair.HICCUP_S=0.1"
left=$(( DEADLINE - $(date +%s) - 6 ))
MQ=$(( left * 45 / 100 ))
(
  KERNELKIT_TURNS_TRACE=1 timeout "$MQ" taskset -c 0,1 python3 benchmarks/turns.py mlp --rounds "${QRM:-12}" \
    --runtimes numba1,numba,ort2 --variant "$VL" --variant "$VH" --json "$OUT/quiet.jsonl" > "$OUT/quiet_mlp.txt" 2>&1
  KERNELKIT_TURNS_TRACE=1 timeout $(( DEADLINE - $(date +%s) - 6 )) taskset -c 0,1 python3 benchmarks/turns.py \
    resnet18 --rounds "${QRR:-10}" --runtimes numba1,numba,ort2 --variant "$VL" --variant "$VH" \
    --json "$OUT/quiet.jsonl" > "$OUT/quiet_r18.txt" 2>&1
) &
(
  KERNELKIT_TURNS_TRACE=1 timeout "$MQ" taskset -c 2,3 python3 benchmarks/turns.py mlp --mode loaded \
    --rounds "${LRM:-8}" --runtimes numba1,numba --variant "$VL" --variant "$VH" --json "$OUT/loaded.jsonl" \
    > "$OUT/loaded_mlp.txt" 2>&1
  KERNELKIT_TURNS_TRACE=1 timeout $(( DEADLINE - $(date +%s) - 6 )) taskset -c 2,3 python3 benchmarks/turns.py \
    resnet18 --mode loaded --rounds "${LRR:-6}" --runtimes numba1,numba --variant "$VL" --variant "$VH" \
    --json "$OUT/loaded.jsonl" > "$OUT/loaded_r18.txt" 2>&1
) &
wait
elapsed jobs
B=pair_stalls,pair_lone,pair_stall_backoffs,pair_backoffs,pair_refused,pair_paired,pair_wakes
for f in quiet loaded; do
  python3 benchmarks/turns.py --from-json "$OUT/$f.jsonl" --blocks "$B" > "$OUT/$f.table" 2>&1
  python3 benchmarks/turns_trace.py --stalls "$OUT/$f.jsonl" > "$OUT/${f}_stalls.txt" 2>&1
  python3 benchmarks/turns_bests.py "$OUT/$f.jsonl" > "$OUT/${f}_bests.txt" 2>&1
done
cat "$OUT/env.txt" | tail -3
for f in quiet loaded; do echo "== $f stalls"; head -45 "$OUT/${f}_stalls.txt"; done
for f in quiet loaded; do echo "== $f"; grep -v "^$" "$OUT/$f.table" | tail -16; done
