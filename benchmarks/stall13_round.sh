#!/usr/bin/env bash
# The ResNets at two threads: the pairs' stall rule, session 13's device round (issue 11; docs/numba.md, "The
# ResNet pairs' stall bursts (issue 11, session 13)"). The cache warmed by one untimed run of ResNet-18 and -50 at one
# and two threads in parallel processes, then side by side:
#   CPUS (quiet):   turns.py numba 1t, default, ORT 2t and the variants h3 (rnpair.HICCUPS=3), fix
#                   (rnpair.HICCUP_BACKOFF_S=0.05) and h3fix (both);
#   LCPUS (loaded): the same numba runtimes with the busy loop (turns.py --mode loaded);
#   QCPUS (quiet):  default, ORT 2t, dyn (rnpair.DYNAMIC=1: dyn12's 4 chunks) and h3fix again.
# The tables come last, computed from the turns' JSON lines (a job cut by its timeout still gives its rounds),
# with the pair helper's counters per block (stalls, the back-offs they fired, all back-offs, paired, alone).
# (Run once, 16:18 UTC, WARM_S=45 TURNS_S=175 ROUNDS=8 LROUNDS=5: quiet2's JSON lines did not come back, past the
# device's 8 files; its tables are in the printed summary.)
#     OUT=/tmp/out bash benchmarks/stall13_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
CPUS=${CPUS:-0,1}; LCPUS=${LCPUS:-2,3}; QCPUS=${QCPUS:-4,5}
H3="h3=kernels.rnpair.HICCUPS=3"
FIX="fix=kernels.rnpair.HICCUP_BACKOFF_S=0.05"
H3FIX="h3fix=kernels.rnpair.HICCUPS=3;kernels.rnpair.HICCUP_BACKOFF_S=0.05"
DYN="dyn=kernels.rnpair.DYNAMIC=1"
export PYTHONUNBUFFERED=1 KERNELKIT_NUMBA_START=eager PYTHONWARNINGS=ignore
{ lscpu | grep -E "Model name|^CPU\(s\)|L2|L3|Thread"; lscpu -e=CPU,CORE,SOCKET | head -8; date -u; } > "$OUT/env.txt" 2>&1
T0=$(date +%s)
log() { echo "$(date -u +%T) +$(( $(date +%s) - T0 ))s $*" >> "$OUT/log.txt"; }
read -r -a wcpus <<< "${WARM_CPUS:-6,7 8,9 10,11 12,13}"
i=0
for m in resnet50 resnet18; do
  for t in numba1 numba2; do
    ( taskset -c "${wcpus[$((i % ${#wcpus[@]}))]}" timeout "${WARM_S:-50}" python3 -c "
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
python3 - "$OUT" <<'PYEOF'
import collections, json, os, sys
import numpy as np
out = sys.argv[1]
KEYS = ("pair_stalls", "pair_stall_backoffs", "pair_backoffs", "pair_paired", "pair_alone", "backoffs", "held")
for job in ("quiet", "quiet2", "loaded"):
    path = os.path.join(out, f"{job}.jsonl")
    if not os.path.exists(path):
        continue
    rows = [json.loads(line) for line in open(path) if line.strip()]
    by = collections.defaultdict(dict)
    for r in rows:
        by[(r["model"], r["round"])][r["runtime"]] = r["median_ms"]
    for model in dict.fromkeys(r["model"] for r in rows):
        rounds = [v for (m, _), v in sorted(by.items()) if m == model]
        runtimes = list(dict.fromkeys(k for v in rounds for k in v))
        med = {rt: np.median([v[rt] for v in rounds if rt in v]) for rt in runtimes}
        print(f"{job} {model}: rounds {len(rounds)}; median ms " + ", ".join(f"{rt} {med[rt]:.2f}" for rt in runtimes))
        pairs = [(n, d) for n in runtimes if n.startswith("numba") or n in ("h3", "fix", "h3fix", "dyn")
                 for d in ("ort2", "numba1") if d in runtimes and n != d]
        pairs += [("numba", v) for v in ("h3", "fix", "h3fix", "dyn") if v in runtimes]
        for num, den in pairs:
            per = [v[num] / v[den] for v in rounds if num in v and den in v]
            if per:
                print(f"  {num} / {den}: {np.median(per):.2f} ({min(per):.2f}-{max(per):.2f}) n={len(per)}")
        for rt in runtimes:
            if rt in ("ort2", "numba1"):
                continue
            blocks = [r for r in rows if r["model"] == model and r["runtime"] == rt]
            cells = ["/".join(str((b.get("pool") or {}).get(k, 0)) for k in KEYS) for b in blocks]
            print(f"  {rt} per block ({'/'.join(KEYS)}): " + "  ".join(cells))
PYEOF
cat "$OUT/quiet.md" "$OUT/quiet2.md" "$OUT/loaded.md"
