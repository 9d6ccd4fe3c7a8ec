#!/usr/bin/env bash
# The ResNets at two threads, where a run's time goes: session 13's device round (issue 11; gap13). gap_trace (one
# process, 1t and 2t in turns, per node and per pair call) on both ResNets, default and rnpair.BALANCE, and turns.py's
# A/B of rnpair.BALANCE quiet (0,1) and loaded (2,3) (docs/numba.md, "The gap between the layers and the run (issue
# 11, session 13)"). Run once, 16:40 UTC: the trace files did not come back (past the device's 8 files), their tables
# are in the printed summary (its first part cut by the reply's 12,000 characters). The next call should write fewer
# files (the traces into one) and print the traces' summary lines first.
#     OUT=/tmp/out bash benchmarks/gap13_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. "$(dirname "$0")/_round.sh" "$OUT"  # warm_cache (the turns' tables: turns.py --from-json; both since session 14)
BAL="bal=kernels.rnpair.BALANCE=1"
export PYTHONUNBUFFERED=1 KERNELKIT_NUMBA_START=eager PYTHONWARNINGS=ignore
{ lscpu | grep -E "Model name|^CPU\(s\)|L2|L3"; date -u; git log --oneline -1; } > "$OUT/env.txt" 2>&1
T0=$(date +%s)
log() { echo "$(date -u +%T) +$(( $(date +%s) - T0 ))s $*" >> "$OUT/log.txt"; }
warm_cache "6,7 8,9 10,11 12,13" "${WARM_S:-45}" resnet50:numba1 resnet50:numba2 resnet18:numba1 resnet18:numba2
log warm
taskset -c 0,1 timeout "${TURNS_S:-115}" python3 benchmarks/turns.py resnet18,resnet50 --rounds "${ROUNDS:-6}" \
    --runtimes numba,numba1,ort2 --variant "$BAL" --json "$OUT/quiet.jsonl" > "$OUT/quiet.md" 2> "$OUT/quiet.err" &
taskset -c 2,3 timeout "${TURNS_S:-115}" python3 benchmarks/turns.py resnet18,resnet50 --mode loaded \
    --rounds "${LROUNDS:-4}" --runtimes numba1,numba --variant "$BAL" --json "$OUT/loaded.jsonl" \
    > "$OUT/loaded.md" 2> "$OUT/loaded.err" &
( for s in "" "kernels.rnpair.BALANCE=1"; do
    taskset -c 4,5 timeout 55 python3 benchmarks/gap_trace.py resnet18 --rounds 10 --runs 4 --set "$s" --top 10
  done > "$OUT/trace18.md" 2> "$OUT/trace18.err" ) &
( for s in "" "kernels.rnpair.BALANCE=1"; do
    taskset -c 6,7 timeout 55 python3 benchmarks/gap_trace.py resnet50 --rounds 6 --runs 4 --set "$s" --top 12
  done > "$OUT/trace50.md" 2> "$OUT/trace50.err" ) &
wait
log done
cat "$OUT/env.txt" "$OUT/log.txt"
tail -n 3 "$OUT/warm.err" "$OUT/quiet.err" "$OUT/loaded.err" "$OUT/trace18.err" "$OUT/trace50.err" 2>/dev/null | cut -c1-300
cat "$OUT/trace18.md" "$OUT/trace50.md"
for job in quiet loaded; do
  echo "== $job"
  python3 benchmarks/turns.py --from-json "$OUT/$job.jsonl" --blocks pair_stalls,pair_stall_backoffs,pair_backoffs,pair_paired,pair_alone
done
