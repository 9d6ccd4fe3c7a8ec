#!/usr/bin/env bash
# The ResNets at two threads: the pairs' stall rule, session 13's device round (issue 11; docs/numba.md, "The
# ResNet pairs' stall bursts (issue 11, session 13)"). The cache warmed by one untimed run of ResNet-18 and -50 at one
# and two threads in parallel processes, then side by side:
#   CPUS (quiet):   turns.py numba 1t, default, ORT 2t and the variants h3 (rnpair.HICCUPS=3), fix
#                   (rnpair.HICCUP_BACKOFF_S=0.05) and h3fix (both);
#   LCPUS (loaded): the same numba runtimes with the busy loop (turns.py --mode loaded);
#   QCPUS (quiet):  default, ORT 2t, dyn (rnpair.DYNAMIC=1: dyn12's 4 chunks) and h3fix again.
# The tables come last, from the turns' JSON lines (turns.py --from-json: a job cut by its timeout still gives its
# rounds), with the pair helper's counters per block (stalls, the back-offs they fired, all back-offs, paired, alone).
# (The cache warm-up and the tables: _round.sh's warm_cache and turns.py --from-json since session 14.)
# (Run once, 16:18 UTC, WARM_S=45 TURNS_S=175 ROUNDS=8 LROUNDS=5: quiet2's JSON lines did not come back, past the
# device's 8 files; its tables are in the printed summary.)
#     OUT=/tmp/out bash benchmarks/stall13_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. "$(dirname "$0")/_round.sh" "$OUT"
CPUS=${CPUS:-0,1}; LCPUS=${LCPUS:-2,3}; QCPUS=${QCPUS:-4,5}
H3="h3=kernels.rnpair.HICCUPS=3"
FIX="fix=kernels.rnpair.HICCUP_BACKOFF_S=0.05"
H3FIX="h3fix=kernels.rnpair.HICCUPS=3;kernels.rnpair.HICCUP_BACKOFF_S=0.05"
DYN="dyn=kernels.rnpair.DYNAMIC=1"
export PYTHONUNBUFFERED=1 KERNELKIT_NUMBA_START=eager PYTHONWARNINGS=ignore
{ lscpu | grep -E "Model name|^CPU\(s\)|L2|L3|Thread"; lscpu -e=CPU,CORE,SOCKET | head -8; date -u; } > "$OUT/env.txt" 2>&1
T0=$(date +%s)
log() { echo "$(date -u +%T) +$(( $(date +%s) - T0 ))s $*" >> "$OUT/log.txt"; }
warm_cache "${WARM_CPUS:-6,7 8,9 10,11 12,13}" "${WARM_S:-50}" resnet50:numba1 resnet50:numba2 resnet18:numba1 resnet18:numba2
log "warm"
taskset -c "$CPUS" timeout "${TURNS_S:-170}" python3 benchmarks/turns.py resnet18,resnet50 --rounds "${ROUNDS:-6}" \
    --runtimes numba1,numba,ort2 --variant "$H3" --variant "$FIX" --variant "$H3FIX" --json "$OUT/quiet.jsonl" \
    > "$OUT/quiet.md" 2> "$OUT/quiet.err" &
taskset -c "$LCPUS" timeout "${TURNS_S:-170}" python3 benchmarks/turns.py resnet18,resnet50 --mode loaded \
    --rounds "${LROUNDS:-4}" --runtimes numba1,numba --variant "$H3" --variant "$FIX" --variant "$H3FIX" \
    --json "$OUT/loaded.jsonl" > "$OUT/loaded.md" 2> "$OUT/loaded.err" &
taskset -c "$QCPUS" timeout "${TURNS_S:-170}" python3 benchmarks/turns.py resnet18,resnet50 --rounds "${ROUNDS:-6}" \
    --runtimes numba,ort2 --variant "$DYN" --variant "$H3FIX" --json "$OUT/quiet2.jsonl" \
    > "$OUT/quiet2.md" 2> "$OUT/quiet2.err" &
wait
log "done"
cat "$OUT/env.txt" "$OUT/log.txt"
tail -n 2 "$OUT/warm.err" "$OUT/quiet.err" "$OUT/loaded.err" "$OUT/quiet2.err" 2>/dev/null | cut -c1-300
for job in quiet quiet2 loaded; do
  echo "== $job"
  python3 benchmarks/turns.py --from-json "$OUT/$job.jsonl" \
    --blocks pair_stalls,pair_stall_backoffs,pair_backoffs,pair_paired,pair_alone,backoffs,held
done
cat "$OUT/quiet.md" "$OUT/quiet2.md" "$OUT/loaded.md"
