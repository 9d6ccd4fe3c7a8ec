#!/usr/bin/env bash
# nest15_round.sh OUT [CALL] (issue 11, session 15): the detection head's Concat_153 alone on CPUs 0,1, as the
# Xeon's two calls ran it. CALL 1: memory.NEST_CONCAT and concat.ARENA_NT per node (nodes_ab.py, 15 rounds
# rotated; the two-thread session's kernels cached on CPUs 2-5 meanwhile), then NEST_CONCAT in the whole model in
# turns. CALL 2: memory.HOT_FAR the same way. Each cut at ROUND_BUDGET seconds (turns.py's JSON lines keep the
# rounds done: turns.py --from-json OUT/turns.jsonl).
ROUND_BUDGET=${ROUND_BUDGET:-150}
call=${2:-1}
cd "$(dirname "$0")" || exit 1
source ./_round.sh "${1:?output folder}"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
NODES=Concat_153,Concat_135,Concat_202,Resize_151,Resize_133,Conv_156,Conv_138
if [ "$call" = 1 ]; then
  label=nest SPEC=kernelkit.memory.NEST_CONCAT=1 rounds=15 more=(ant=kernels.concat.ARENA_NT=1048576)
  runtimes=numba1,numba,reference1 NODES=$NODES,Mul_78,Mul_104
else
  label=far SPEC=kernelkit.memory.HOT_FAR=1.0 rounds=11 more=() runtimes=numba1,numba
fi
pinned 0,1 "$PY" nodes_ab.py detection_head "$rounds" --rotate "$label=$SPEC" "${more[@]}" --nodes="$NODES" \
  > "$OUT/ab.txt" 2>&1 &
ab=$!
warm_cache "2,3 4,5" 40 detection_head:numba2
wait $ab
elapsed "per node"
pinned 0,1 "$PY" turns.py detection_head --runtimes "$runtimes" --variant "$label=$SPEC" --variant1 "${label}1=$SPEC" \
  --rounds 11 --json "$OUT/turns.jsonl" > "$OUT/turns.txt" 2>&1
elapsed total
grep "^| Concat\|^| Resize\|^| \*\*sum\|^| node\|^| Conv_\|^| Mul_" "$OUT/ab.txt"
"$PY" turns.py --from-json "$OUT/turns.jsonl" > "$OUT/turns_table.txt" 2>&1
tables "$OUT/turns_table.txt"
