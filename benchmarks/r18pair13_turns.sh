#!/usr/bin/env bash
# r18pair13's third device call (issue 11, session 13; docs/numba.md, "ResNet-18's 3x3 layers at two threads"):
# turns.py resnet18 (numba, numba1, ort2) on CPUs 0,1 with the machine idle, then again beside three ResNet-50
# numba two-thread sessions running back to back on 2,3 / 4,5 / 6,7 (the neighbours of a device round's side jobs).
#     OUT=/tmp/out bash benchmarks/r18pair13_turns.sh
# Run once, 16:58-17:03 UTC (docs/numba.md has the figures).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; O=$(mktemp -d)
export PYTHONUNBUFFERED=1 KERNELKIT_NUMBA_START=eager PYTHONWARNINGS=ignore
t0=$(date +%s)
taskset -c 0,1 timeout "${TS:-60}" python3 benchmarks/turns.py resnet18 --rounds "${R:-6}" --runtimes numba,numba1,ort2 \
  --json "$O/idle.jsonl" > "$O/idle.md" 2>&1
echo "idle: $(( $(date +%s) - t0 )) s" >> "$O/log.txt"
pids=()
for c in 2,3 4,5 6,7; do
  taskset -c "$c" timeout $(( ${TS:-60} + 25 )) python3 -c "
import sys; sys.path.insert(0, 'benchmarks')
from test_bench_numba import model_case, kernelkit_session
_, model, feed, _ = model_case('resnet50')
s = kernelkit_session(model, 'numba2')
while True: s.run(None, feed)
" > /dev/null 2>&1 &
  pids+=($!)
done
sleep 15
taskset -c 0,1 timeout "${TS:-60}" python3 benchmarks/turns.py resnet18 --rounds "${R:-6}" --runtimes numba,numba1,ort2 \
  --json "$O/busy.jsonl" > "$O/busy.md" 2>&1
for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done
wait
echo "all: $(( $(date +%s) - t0 )) s" >> "$O/log.txt"
tar -czf "$OUT/all.tgz" -C "$O" .
cat "$O/log.txt"
for job in idle busy; do  # the turns' tables (turns.py --from-json since session 14)
  echo "== $job"; python3 benchmarks/turns.py --from-json "$O/$job.jsonl"
done
