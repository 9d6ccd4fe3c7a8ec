#!/usr/bin/env bash
# MobileNetV2's serial pairs at two threads (issue 11, session 16; docs/numba.md, "MobileNetV2's small layers at two
# threads"): cpair.K_SPLIT (the 14x14 projections' K cut between the sides, each core its own input rows) and
# cpair.SERIAL_COLS_MAX (the 14x14 1x1 layers' pairs on the cols tiles, as one thread runs them), per kind
# (nodes_ab2t.py, CPUs 2,3) beside the whole model (turns.py, quiet alone on CPUs 0,1 with --probe and the pair trace;
# loaded on 4,5, K_SPLIT's variant). Prints turns_trace.py --short and the tables last. The variants: V1, V2
# (LABEL=SPEC); limits WARM_S, BUDGET (s); rounds QR, LR; runs NR.
#     OUT=/tmp/out bash benchmarks/mnv16_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=${BUDGET:-150} source "$(dirname "$0")/_round.sh" "$OUT"  # warm_cache; OUT/env.txt (lscpu, versions)
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
V1=${V1:-"ks=kernels.cpair.K_SPLIT=196"}
V2=${V2:-"cols=kernels.cpair.SERIAL_COLS_MAX=196"}
{ git log --oneline -1; date -u; } >> "$OUT/env.txt" 2>&1
T0=$(date +%s)
warm_cache "4,5 6,7 8,9 10,11" "${WARM_S:-35}" mobilenetv2:numba1 mobilenetv2:numba2 \
  "mobilenetv2:numba2:$(echo "${V1#*=}" | tr ";" ",")" "mobilenetv2:numba2:$(echo "${V2#*=}" | tr ";" ",")"
"$PY" - <<'PY' > /dev/null 2>> "$OUT/warm.err"  # (nodes_ab2t.py's model: the zoo's mobilenet_v2)
import sys; sys.path.insert(0, "benchmarks"); sys.path.insert(0, "benchmarks/models")
from nodes_ab import load, kernelkit
_, m, f = load("mobilenet_v2")
for t in (1, 2):
    s = kernelkit.Session(m, vendors=["numba", "reference"], threads=t); s.run(None, f); s.run(None, f)
PY
elapsed warm >> "$OUT/env.txt"
KERNELKIT_TURNS_TRACE=1 pinned 0,1 "$PY" benchmarks/turns.py mobilenetv2 --rounds "${QR:-8}" --probe \
  --runtimes numba,ort2,numba1 --variant "$V1" --variant "$V2" --json "$OUT/quiet.jsonl" > "$OUT/quiet.txt" 2>&1 &
pinned 2,3 "$PY" benchmarks/nodes_ab2t.py mobilenet_v2 "${NR:-30}" "$V1" "$V2" > "$OUT/nodes.txt" 2>&1 &
pinned 4,5 "$PY" benchmarks/turns.py mobilenetv2 --mode loaded --rounds "${LR:-4}" --runtimes numba,numba1 \
  --variant "$V1" --json "$OUT/loaded.jsonl" > "$OUT/loaded.txt" 2>&1 &
wait
elapsed jobs >> "$OUT/env.txt"
for f in quiet loaded; do "$PY" benchmarks/turns.py --from-json "$OUT/$f.jsonl" \
  --blocks pair_stalls,pair_backoffs > "$OUT/$f.table" 2>&1; done
"$PY" benchmarks/turns_trace.py --short "$OUT/quiet.jsonl" 2>&1 | tail -6
tail -3 "$OUT/env.txt"
tables "$OUT/nodes.txt" | grep -i "sum\|14 \|14+\|@14\|^##\|kind"
for f in quiet loaded; do echo "== $f"; grep -v "^$" "$OUT/$f.table" | tail -8; done
