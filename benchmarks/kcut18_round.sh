#!/usr/bin/env bash
# The K cuts' A/Bs at two threads (issue 11, session 18; docs/numba.md, "ResNet-50's projections cut by their input
# channels at 28x28 and 56x56, and the sum on both sides"): kcut18's Xeon call ran these four jobs side by side (CPUs
# 0,1 / 4,5 / 6,7 / 8,9: BUDGET=140 SIDE=1), which left the per-kind ratios within the session's bias; by default they
# run one after the other, alone on CPUs 0,1 (each under the time left). nodes_ab2t.py resnet50 twice (the variants
# in reversed order): K_SPLIT_PARALLEL 784 and 3136, K_SUM_UNITS 16 alone and with each; nodes_ab2t.py mobilenet_v2
# with K_SPLIT_COLS 49; turns.py resnet50 (or TURNS=mobilenetv2 with kc49) in turns. Runs NR (resnet50), MR
# (mobilenet_v2), rounds TR; limits WARM_S, BUDGET (s). Prints the tables last.
#     OUT=/tmp/out bash benchmarks/kcut18_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=${BUDGET:-300} source benchmarks/_round.sh "$OUT"
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
K7="kernels.cpair.K_SPLIT_PARALLEL=784"; K31="kernels.cpair.K_SPLIT_PARALLEL=3136"; SU="kernels.cpair.K_SUM_UNITS=16"
KC="kernels.cpair.K_SPLIT_COLS=49"
{ git log --oneline -1; git status --short | head -5; date -u; } >> "$OUT/env.txt" 2>&1
lscpu | grep "Model name" | tee -a "$OUT/env.txt"
warm_cache "2,3 4,5 6,7 8,9 10,11 12,13" "${WARM_S:-46}" resnet50:numba1 resnet50:numba2 "resnet50:numba2:$K31,$SU" \
  mobilenetv2:numba1 mobilenetv2:numba2 "mobilenetv2:numba2:$KC,$SU"
elapsed warm | tee -a "$OUT/env.txt"
cpus() { if [ "${SIDE:-0}" = 1 ]; then echo "$1"; else echo 0,1; fi; }
bg() { if [ "${SIDE:-0}" = 1 ]; then "$@" & else "$@"; fi; }
bg pinned "$(cpus 0,1)" "$PY" benchmarks/nodes_ab2t.py resnet50 "${NR:-10}" "ks784=$K7" "ks3136=$K31" "su=$SU" \
  "ks784su=$K7;$SU" "ks3136su=$K31;$SU" > "$OUT/r50A.txt" 2>&1
bg pinned "$(cpus 4,5)" "$PY" benchmarks/nodes_ab2t.py resnet50 "${NR:-10}" "ks3136su=$K31;$SU" "ks784su=$K7;$SU" \
  "su=$SU" "ks3136=$K31" "ks784=$K7" > "$OUT/r50B.txt" 2>&1
bg pinned "$(cpus 6,7)" "$PY" benchmarks/nodes_ab2t.py mobilenet_v2 "${MR:-20}" "kc49=$KC" "su=$SU" "kc49su=$KC;$SU" \
  > "$OUT/mnv.txt" 2>&1
if [ "${TURNS:-resnet50}" = mobilenetv2 ]; then
  bg pinned "$(cpus 8,9)" "$PY" benchmarks/turns.py mobilenetv2 --rounds "${TR:-8}" --runtimes numba,ort2,numba1 \
    --variant "kc49=$KC" --json "$OUT/turns.jsonl" > "$OUT/turns.txt" 2>&1
else
  bg pinned "$(cpus 8,9)" "$PY" benchmarks/turns.py resnet50 --rounds "${TR:-8}" --runtimes numba,numba1 \
    --variant "ks784su=$K7;$SU" --variant "ks3136su=$K31;$SU" --json "$OUT/turns.jsonl" > "$OUT/turns.txt" 2>&1
fi
wait
elapsed jobs | tee -a "$OUT/env.txt"
"$PY" benchmarks/turns.py --from-json "$OUT/turns.jsonl" --blocks pair_stalls,pair_backoffs > "$OUT/turns.table" 2>&1
grep -c . "$OUT/warm.err" 2>/dev/null
for f in r50A r50B mnv; do echo "== $f"; grep "^|" "$OUT/$f.txt" | grep -v "^|---" | grep -i "sum\|kind\|1x1\|@56\|@28\|@7" \
  | cut -c1-220 | head -40; done
echo "== turns"; grep "^|\|per block" "$OUT/turns.table" | grep -v "^|---" | cut -c1-240 | tail -14
