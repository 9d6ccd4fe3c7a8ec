#!/usr/bin/env bash
# MobileNetV2 at batch 8 on two cores (kernels/cpair.py's batch pairs, issue 11, session 11): one device
# call. The disk cache is warmed first (warm_cache.py, in parallel on other CPUs), then side by side:
# the quiet turns of mobilenetv2_b8 with the batch pairs off as the variant "old" and channel halves as "ch"
# on CPUs 0,1 (mobilenetv2 at batch 1 on 6,7); the loaded turns on 2,3; ResNet-18 and the transformer at
# batch 8 against "old" on 4,5; MobileNetV2 b8 per node, 1t and 2t in turns (threads_alone.py --interleave) on
# 8,9. The tables come last.
#     OUT=/tmp/out ROUNDS=6 bash benchmarks/mnv2b8_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-6}
OLD="kernels.cpair.BATCH=0;kernels.fgemm.PAIR_ALONE=0"
export PYTHONUNBUFFERED=1 KERNELKIT_NUMBA_START=eager PYTHONWARNINGS=ignore
t0=$(date +%s)
{ lscpu | grep "Model name"; nproc; } > "$OUT/log.txt" 2>&1
W="timeout ${WARM_S:-70} python3 benchmarks/warm_cache.py"
taskset -c 0,1 $W mobilenetv2_b8 >> "$OUT/log.txt" 2>&1 &
taskset -c 2,3 $W mobilenetv2 >> "$OUT/log.txt" 2>&1 &
taskset -c 4,5 $W mobilenetv2_b8 --threads 2 --set kernels.cpair.BATCH=0,kernels.fgemm.PAIR_ALONE=0 >> "$OUT/log.txt" 2>&1 &
taskset -c 6,7 $W resnet18_b8 --threads 2 >> "$OUT/log.txt" 2>&1 &
taskset -c 8,9 $W transformer_b8 --threads 2 >> "$OUT/log.txt" 2>&1 &
wait
echo "warm $(( $(date +%s) - t0 )) s" >> "$OUT/log.txt"
T="timeout ${TURNS_S:-80} python3 benchmarks/turns.py"
taskset -c 0,1 $T mobilenetv2_b8 --rounds "$ROUNDS" --runtimes numba1,numba,ort2 --variant "old=$OLD" \
    --variant "ch=kernels.cpair.BATCH_AXIS=channels" --turn-s 0.4 --json "$OUT/quiet.jsonl" > "$OUT/quiet.md" 2>&1 &
taskset -c 6,7 $T mobilenetv2 --rounds "$ROUNDS" --runtimes numba1,numba,ort2 --variant "old=$OLD" --turn-s 0.4 \
    --json "$OUT/quiet1.jsonl" > "$OUT/quiet1.md" 2>&1 &
taskset -c 2,3 $T mobilenetv2_b8,mobilenetv2 --mode loaded --rounds 3 --runtimes numba1,numba,ort2 --turn-s 0.4 \
    --json "$OUT/loaded.jsonl" > "$OUT/loaded.md" 2>&1 &
taskset -c 4,5 $T resnet18_b8,transformer_b8 --rounds 3 --runtimes numba,ort2 --variant "old=$OLD" --turn-s 0.4 \
    --json "$OUT/others.jsonl" > "$OUT/others.md" 2>&1 &
(timeout "${NODES_S:-60}" python3 benchmarks/threads_alone.py mobilenetv2_b8 --interleave --runs 12 --cpus 8,9 \
    > "$OUT/nodes.json" 2> "$OUT/nodes.err"; python3 benchmarks/threads_alone.py --serial-vs "$OUT/nodes.json" --top 40 \
    > "$OUT/nodes.txt" 2>&1) &
wait
echo "turns $(( $(date +%s) - t0 )) s" >> "$OUT/log.txt"
cat "$OUT/log.txt"; grep -h "pool" "$OUT"/*.md | cut -c1-300
head -45 "$OUT/nodes.txt"
grep -h "|" "$OUT/others.md" "$OUT/loaded.md" "$OUT/quiet1.md" "$OUT/quiet.md"
