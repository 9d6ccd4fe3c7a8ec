#!/usr/bin/env bash
# ResNet-18 / ResNet-50 at two threads, a base tree against this one (docs/numba.md, "Two threads on the
# ResNets (issue 11, session 9)"), one job on the host at a time, within one device call:
#   1. warm-up: each (tree, model) at 1 and 2 threads once, at the same time on other CPU pairs (fills
#      each tree's Numba cache: not timed);
#   2. per-node profiles of one session alone per process (threads_alone.py, pinned to CPUS): this
#      tree at 1 and 2 threads, the base at 2 threads (the caller alone, its gaps, the waits);
#   3. alternate_trees.py: base 1t, base default, this tree's default and onnxruntime 2t in turn,
#      quiet, REPEATS repeats, no process started after the time left; its table comes last.
# Usage (repository root of this tree, after `source .whl/prelude.sh` on the device):
#   BASE=DIR [TOTAL_S=225] [REPEATS=3] bash benchmarks/resnet_threads_round.sh OUT
set -u
OUT=${1:-/tmp/resnet_threads}
mkdir -p "$OUT"
PY=${PY:-python3}
CPUS=${CPUS:-0,1}
TOTAL_S=${TOTAL_S:-225}
REPEATS=${REPEATS:-3}
MODELS=${MODELS:-resnet18 resnet50}
NEW=$(pwd)
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
{ lscpu | grep -E "Model name|^CPU\(s\)|L2|L3"; nproc; date -u; git -C "$BASE" log -1 --oneline 2>/dev/null; } > "$OUT/env.txt" 2>&1
log() { echo "$(date -u +%T) +${SECONDS}s $*" >> "$OUT/log.txt"; }
tree_env() {  # tree: the PYTHONPATH and Numba cache alternate_trees.py gives its children
  local t=$1 name=$2
  echo "PYTHONPATH=$t/packages/core/src:$t/packages/cpu_numba/src:$t/packages/converters/src${PYTHONPATH:+:$PYTHONPATH}" \
       "NUMBA_CACHE_DIR=/tmp/kk_alt_nc_$name"
}
PROF=${PROF:-/tmp/resnet_threads_prof}  # the profiles, then OUT/profiles.tgz (few files in OUT)
mkdir -p "$PROF"
alone() {  # tree name model threads runs: one profile process (this tree's threads_alone.py)
  env $(tree_env "$1" "$2") $PY benchmarks/threads_alone.py "$3" --threads "$4" --runs "$5" --cpus "$CPUS" \
    > "$PROF/prof.$2.$3.$4t.json" 2>> "$OUT/log.txt"
  log "profile $2 $3 $4t rc=$?"
}
pair=2
for spec in "$BASE base" "$NEW new"; do
  set -- $spec
  for m in $MODELS; do
    cpus="$pair,$((pair + 1))"
    [ $((pair + 1)) -lt "$(nproc)" ] || cpus=$CPUS  # a small box: on the timed CPUs
    ( for t in 1 2; do
        env $(tree_env "$1" "$2") timeout 100 $PY benchmarks/threads_alone.py "$m" --threads $t --runs 1 \
          --cpus "$cpus" > /dev/null 2>&1
      done ) &
    pair=$((pair + 2))
  done
done
wait
log "warm"
for m in $MODELS; do
  runs=$([ "$m" = resnet18 ] && echo 15 || echo 8)
  alone "$NEW" new "$m" 1 "$runs"
  alone "$NEW" new "$m" 2 "$runs"
  alone "$BASE" base "$m" 2 "$runs"
done
tar czf "$OUT/profiles.tgz" -C "$PROF" .
left=$((TOTAL_S - SECONDS - 12))
log "alternate, budget ${left}s"
$PY benchmarks/alternate_trees.py --base "$BASE" --models "$(echo $MODELS | tr ' ' ,)" --repeats "$REPEATS" --modes quiet \
  --rounds 5 --configs base:numba1,base:numba,new:numba,base:ort2 --cpus "$CPUS" --budget "$left" \
  --out "$OUT/alt.jsonl" > "$OUT/alt.txt" 2>&1
log "done"
for m in $MODELS; do
  for t in new base; do
    [ -s "$PROF/prof.new.$m.1t.json" ] && [ -s "$PROF/prof.$t.$m.2t.json" ] && \
      $PY benchmarks/threads_alone.py --compare "$PROF/prof.new.$m.1t.json" "$PROF/prof.$t.$m.2t.json" --top 0 | \
      sed "s/^/$t $m: /"
  done
done
grep -A12 "^| model" "$OUT/alt.txt"
