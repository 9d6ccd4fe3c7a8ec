#!/usr/bin/env bash
# ResNet-50 at two threads, session 12's device round (issue 11; docs/numba.md, "ResNet-50 at two threads,
# again"): the cache warmed by one untimed run of ResNet-50 and -18 at one and two threads in parallel
# processes, then side by side turns.py quiet on CPUS (numba 1t, default, ORT 2t and the variant old: the
# session's three switches off), loaded on LCPUS, and nodes_ab2t.py (per kind of layer: 2t / 1t, default / old,
# default / tb1m: the 64@56 Winograd pairs in blocks of 49 tiles) on NCPUS. The tables come last, computed from
# the turns' JSON lines (so that a turns job cut by its timeout still gives its rounds).
# (Run once, 13:53 UTC, with PAIR_COLS_MAX 196 and WINO2_SPLIT on; both were off since, WINO2_SPLIT removed, so "old" now differs from
# the default in cpair.COLS_SPLIT only.)
#     OUT=/tmp/out bash benchmarks/r50t12_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
CPUS=${CPUS:-0,1}; LCPUS=${LCPUS:-2,3}; NCPUS=${NCPUS:-4,5}
OLD="old=kernels.cpair.COLS_SPLIT=0;kernels.conv_serial.PAIR_COLS_MAX=0"
TB="tb1m=kernels.rnpair.PAIR_TILE_BYTES=1048576"
export PYTHONUNBUFFERED=1 KERNELKIT_NUMBA_START=eager PYTHONWARNINGS=ignore
{ lscpu | grep -E "Model name|^CPU\(s\)|L2|L3"; date -u; } > "$OUT/env.txt" 2>&1
T0=$(date +%s)
log() { echo "$(date -u +%T) +$(( $(date +%s) - T0 ))s $*" >> "$OUT/log.txt"; }
read -r -a wcpus <<< "${WARM_CPUS:-4,5 6,7 8,9 10,11}"
i=0
for m in resnet50 resnet18; do
  for t in numba1 numba2; do
    ( taskset -c "${wcpus[$((i % ${#wcpus[@]}))]}" timeout "${WARM_S:-55}" python3 -c "
import sys; sys.path.insert(0, 'benchmarks')
from test_bench_numba import model_case, kernelkit_session
_, model, feed, _ = model_case('$m')
s = kernelkit_session(model, '$t'); s.run(None, feed); s.run(None, feed)
" > /dev/null 2>> "$OUT/warm.err" ) &
    i=$((i + 1))
  done
done
wait
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
python3 - "$OUT" <<'PYEOF'
import collections, json, os, sys
import numpy as np
out = sys.argv[1]
for mode in ("quiet", "loaded"):
    path = os.path.join(out, f"{mode}.jsonl")
    if not os.path.exists(path):
        continue
    rows = [json.loads(line) for line in open(path) if line.strip()]
    by = collections.defaultdict(dict)
    for r in rows:
        by[(r["model"], r["round"])][r["runtime"]] = r["median_ms"]
    for model in dict.fromkeys(r["model"] for r in rows):
        rounds = [v for (m, _), v in by.items() if m == model]
        runtimes = sorted({k for v in rounds for k in v})
        med = {rt: np.median([v[rt] for v in rounds if rt in v]) for rt in runtimes}
        print(f"{mode} {model}: rounds {len(rounds)}; median ms " + ", ".join(f"{rt} {med[rt]:.2f}" for rt in runtimes))
        for num, den in (("numba", "ort2"), ("numba", "numba1"), ("numba", "old"), ("numba", "cols64"),
                         ("old", "ort2"), ("old", "numba1")):
            per = [v[num] / v[den] for v in rounds if num in v and den in v]
            if per:
                print(f"  {num} / {den}: {np.median(per):.2f} ({min(per):.2f}-{max(per):.2f}) n={len(per)}")
    stats = collections.defaultdict(lambda: collections.Counter())
    for r in rows:
        for k, v in (r.get("pool") or {}).items():
            if isinstance(v, (int, float)):
                stats[(r["model"], r["runtime"])][k] += v
    for key, cnt in stats.items():
        if key[1] in ("numba", "old"):
            print(f"  {mode} {key}: " + ", ".join(f"{k} {v}" for k, v in cnt.items() if v))
PYEOF
cat "$OUT/nodes50.md"
cat "$OUT/quiet.md" "$OUT/loaded.md"
