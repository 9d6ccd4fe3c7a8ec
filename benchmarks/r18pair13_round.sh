#!/usr/bin/env bash
# ResNet-18's 3x3 layers at two threads against ResNet-50's (issue 11, session 13; r18pair13; docs/numba.md,
# "ResNet-18's 3x3 layers at two threads"): what two pinned cores cost each other (pair_cores.py), both ResNets per
# kind of layer at two threads on the same CPU pairs in opposite orders (nodes_ab2t.py, rnpair.BY_M_TILES's A/B),
# and turns.py's A/B of BY_M_TILES=49 quiet (4,5) and loaded (6,7). Prints a short summary last; everything else
# goes into $OUT/all.tgz (one file: the device returns few).
#     OUT=/tmp/out T=170 bash benchmarks/r18pair13_round.sh
# Run once, 16:58-17:03 UTC (docs/numba.md has the figures).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; O=$(mktemp -d)
T=${T:-170}
M49="m49=kernels.rnpair.BY_M_TILES=49"; M196="m196=kernels.rnpair.BY_M_TILES=196"
export PYTHONUNBUFFERED=1 KERNELKIT_NUMBA_START=eager PYTHONWARNINGS=ignore
t0=$(date +%s)
{ lscpu | grep -E "Model name|^CPU\(s\)|Thread|L2|L3"; date -u; } > "$O/env.txt" 2>&1
timeout 30 python3 benchmarks/pair_cores.py --cpus 0,1 --many 0-15 --seconds ${PC_S:-1.5} > "$O/cores.txt" 2>&1
echo "cores: $(( $(date +%s) - t0 )) s" >> "$O/env.txt"
left=$(( T - ($(date +%s) - t0) ))
( timeout $(( left * 6 / 10 )) taskset -c 0,1 python3 benchmarks/nodes_ab2t.py resnet18 8 --no-backoff "$M49" "$M196" \
    > "$O/a18.txt" 2>&1
  timeout $(( T - ($(date +%s) - t0) - 3 )) taskset -c 0,1 python3 benchmarks/nodes_ab2t.py resnet50 6 --no-backoff \
    > "$O/a50.txt" 2>&1 ) &
( timeout $(( left * 6 / 10 )) taskset -c 2,3 python3 benchmarks/nodes_ab2t.py resnet50 8 --no-backoff "$M49" \
    > "$O/b50.txt" 2>&1
  timeout $(( T - ($(date +%s) - t0) - 3 )) taskset -c 2,3 python3 benchmarks/nodes_ab2t.py resnet18 6 --no-backoff \
    > "$O/b18.txt" 2>&1 ) &
timeout $(( left - 3 )) taskset -c 4,5 python3 benchmarks/turns.py resnet18,resnet50 --rounds 6 \
    --runtimes numba,numba1,ort2 --variant "$M49" --json "$O/quiet.jsonl" > "$O/quiet.md" 2>&1 &
timeout $(( left - 3 )) taskset -c 6,7 python3 benchmarks/turns.py resnet18,resnet50 --mode loaded --rounds 4 \
    --runtimes numba1,numba --variant "$M49" --json "$O/loaded.jsonl" > "$O/loaded.md" 2>&1 &
wait
echo "all: $(( $(date +%s) - t0 )) s" >> "$O/env.txt"
tar -czf "$OUT/all.tgz" -C "$O" .
cat "$O/env.txt" "$O/cores.txt"
for f in a18 b18 a50 b50; do
  echo "== $f"; grep -h -E "^## |Conv 3x3|MaxPool|\*\*sum|Error|Traceback" "$O/$f.txt" | cut -c1-150 | tail -16
done
for job in quiet loaded; do  # the turns' tables (turns.py --from-json since session 14)
  echo "== $job"; python3 benchmarks/turns.py --from-json "$O/$job.jsonl"
done
