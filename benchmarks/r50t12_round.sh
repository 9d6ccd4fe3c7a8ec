#!/usr/bin/env bash
# ResNet-50 at two threads, session 12's device round (issue 11; docs/numba.md, "ResNet-50 at two threads,
# again"): the cache warmed by one untimed run of ResNet-50 and -18 at one and two threads in parallel
# processes, then side by side turns.py quiet on CPUS (numba 1t, default, ORT 2t and the variant old: the
# session's three switches off), loaded on LCPUS, and nodes_ab2t.py (per kind of layer: 2t / 1t, default / old,
# default / tb1m: the 64@56 Winograd pairs in blocks of 49 tiles) on NCPUS. The tables come last, from the turns'
# JSON lines (turns.py --from-json: a turns job cut by its timeout still gives its rounds; with _round.sh's
# warm_cache, since session 14).
# (Run once, 13:53 UTC, with PAIR_COLS_MAX 196 and WINO2_SPLIT on; both were off since, WINO2_SPLIT removed, so "old" now differs from
# the default in cpair.COLS_SPLIT only.)
#     OUT=/tmp/out bash benchmarks/r50t12_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
. "$(dirname "$0")/_round.sh" "$OUT"
CPUS=${CPUS:-0,1}; LCPUS=${LCPUS:-2,3}; NCPUS=${NCPUS:-4,5}
OLD="old=kernels.cpair.COLS_SPLIT=0;kernels.conv_serial.PAIR_COLS_MAX=0"
TB="tb1m=kernels.rnpair.PAIR_TILE_BYTES=1048576"
export PYTHONUNBUFFERED=1 KERNELKIT_NUMBA_START=eager PYTHONWARNINGS=ignore
{ lscpu | grep -E "Model name|^CPU\(s\)|L2|L3"; date -u; } > "$OUT/env.txt" 2>&1
T0=$(date +%s)
log() { echo "$(date -u +%T) +$(( $(date +%s) - T0 ))s $*" >> "$OUT/log.txt"; }
warm_cache "${WARM_CPUS:-4,5 6,7 8,9 10,11}" "${WARM_S:-55}" resnet50:numba1 resnet50:numba2 resnet18:numba1 resnet18:numba2
log "warm"
taskset -c "$CPUS" timeout "${TURNS_S:-80}" python3 benchmarks/turns.py resnet50,resnet18 --rounds "${ROUNDS:-7}" \
    --runtimes numba1,numba,ort2 --variant "$OLD" --json "$OUT/quiet.jsonl" > "$OUT/quiet.md" \
    2> "$OUT/quiet.err" &
taskset -c "$LCPUS" timeout "${TURNS_S:-80}" python3 benchmarks/turns.py resnet50,resnet18 --mode loaded \
    --rounds "${LROUNDS:-4}" --runtimes numba1,numba,ort2 --variant "$OLD" --json "$OUT/loaded.jsonl" \
    > "$OUT/loaded.md" 2> "$OUT/loaded.err" &
( taskset -c "$NCPUS" timeout "${NODES_S:-60}" python3 benchmarks/nodes_ab2t.py resnet50 12 --no-backoff "$OLD" "$TB" \
    > "$OUT/nodes50.md" 2> "$OUT/nodes50.err"; log "nodes rc=$?" ) &
wait
log "done"
cat "$OUT/env.txt" "$OUT/log.txt"
tail -n 3 "$OUT/warm.err" "$OUT/quiet.err" "$OUT/loaded.err" "$OUT/nodes50.err" 2>/dev/null | cut -c1-300
for mode in quiet loaded; do
  echo "== $mode"; python3 benchmarks/turns.py --from-json "$OUT/$mode.jsonl"
done
cat "$OUT/nodes50.md"
cat "$OUT/quiet.md" "$OUT/loaded.md"
