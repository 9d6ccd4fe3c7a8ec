#!/usr/bin/env bash
# r18pair13's second device call (issue 11, session 13; docs/numba.md, "ResNet-18's 3x3 layers at two threads"):
# ResNet-18 per kind of layer at two threads on CPUs 0,1 with the rest of the machine idle, then again while 12
# other CPUs (2-13) run one-thread products (what neighbours do to a pair's 2t / 1t); pair_cores.py in both states.
#     OUT=/tmp/out bash benchmarks/r18pair13_load.sh
# Run once, 16:58-17:03 UTC (docs/numba.md has the figures).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; O=$(mktemp -d)
export PYTHONUNBUFFERED=1 KERNELKIT_NUMBA_START=eager PYTHONWARNINGS=ignore
t0=$(date +%s)
timeout 20 python3 benchmarks/pair_cores.py --cpus 0,1 --seconds 1 > "$O/cores_idle.txt" 2>&1
timeout "${AB_S:-50}" taskset -c 0,1 python3 benchmarks/nodes_ab2t.py resnet18 8 --no-backoff > "$O/idle.txt" 2>&1
echo "idle: $(( $(date +%s) - t0 )) s" >> "$O/log.txt"
pids=()
for c in $(seq 2 13); do
  taskset -c "$c" python3 -c "import sys; sys.path.insert(0, 'benchmarks'); import pair_cores as p; p._compute(${BUSY_S:-80})" \
    > /dev/null 2>&1 &
  pids+=($!)
done
sleep 1
timeout 20 python3 benchmarks/pair_cores.py --cpus 0,1 --seconds 1 > "$O/cores_busy.txt" 2>&1
timeout "${AB_S:-50}" taskset -c 0,1 python3 benchmarks/nodes_ab2t.py resnet18 8 --no-backoff > "$O/busy.txt" 2>&1
for p in "${pids[@]}"; do kill "$p" 2> /dev/null; done
wait
echo "all: $(( $(date +%s) - t0 )) s" >> "$O/log.txt"
tar -czf "$OUT/all.tgz" -C "$O" .
cat "$O/log.txt"
for f in cores_idle cores_busy; do echo "== $f"; grep "^| \|siblings" "$O/$f.txt"; done
for f in idle busy; do
  echo "== $f"; grep -h -E "^## |Conv|MaxPool|Gemm|\*\*sum|Error|Traceback" "$O/$f.txt" | cut -c1-110 | tail -20
done
