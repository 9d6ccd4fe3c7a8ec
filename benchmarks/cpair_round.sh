#!/usr/bin/env bash
# The conv pairs' device round (kernels/cpair.py, issue 11, session 10): MobileNetV2 at two threads with
# the pairs on (numba default) and off (numbanp: KERNELKIT_F32_PAIR=off) in turns.py's table beside
# numba 1t and onnxruntime 2t, then the in-process A/B (cpair_ab.py) and the per-node view of both
# (threads_alone.py --compare). Every file lands in $OUT as it is written; the table comes last.
#     OUT=/tmp/out ROUNDS=9 bash benchmarks/cpair_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-9}
CPUS=${CPUS:-0,1}
export PYTHONUNBUFFERED=1 KERNELKIT_NUMBA_START=eager PYTHONWARNINGS=ignore
{ lscpu | grep "Model name"; lscpu -e | head -4; nproc; } > "$OUT/log.txt" 2>&1
t0=$(date +%s)
taskset -c "$CPUS" timeout "${TURNS_S:-95}" python3 benchmarks/turns.py mobilenetv2 --runtimes numba1,numba,numbanp,ort2 \
    --rounds "$ROUNDS" --turn-s 0.25 --json "$OUT/turns.jsonl" > "$OUT/turns.md" 2> "$OUT/turns.err"
echo "turns rc $? $(( $(date +%s) - t0 )) s" >> "$OUT/log.txt"
taskset -c "$CPUS" timeout "${AB_S:-40}" python3 benchmarks/cpair_ab.py mobilenetv2 --rounds 12 --calls 8 --variant pix=AXIS=pixels --variant ch=AXIS=channels --variant nodw=PAIR_DEPTHWISE=0 --variant no1=PAIR_POINTWISE=0 > "$OUT/ab.txt" 2>&1
echo "ab rc $? $(( $(date +%s) - t0 )) s" >> "$OUT/log.txt"
for p in off auto; do
  KERNELKIT_F32_PAIR=$p timeout "${NODES_S:-12}" python3 benchmarks/threads_alone.py mobilenetv2 --threads 2 --runs 30 \
      --cpus "$CPUS" > "$OUT/nodes_$p.json" 2>> "$OUT/log.txt"
done
python3 benchmarks/threads_alone.py --compare "$OUT/nodes_off.json" "$OUT/nodes_auto.json" --top 45 > "$OUT/nodes.txt" 2>&1
echo "nodes $(( $(date +%s) - t0 )) s" >> "$OUT/log.txt"
cat "$OUT/log.txt"; tail -3 "$OUT/turns.err"; tail -4 "$OUT/ab.txt"; head -60 "$OUT/nodes.txt"
cat "$OUT/turns.md"
