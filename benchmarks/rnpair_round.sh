#!/usr/bin/env bash
# The ResNet pairs' device round (kernels/rnpair.py, issue 11, session 11): ResNet-18 and ResNet-50 at two
# threads, batch 1, with the pairs (numba default) and without (the variant old: rnpair.ON=0, the shard
# pool as before) in turns.py's table beside numba 1t and onnxruntime 2t; quiet on CPUS, loaded (the
# busy loop on the first CPU) on LCPUS side by side, and the per-node view of the default at two threads
# (threads_alone.py) on two more CPUs. First one untimed run of each (model, setting, threads) in parallel
# processes warms the Numba cache. Every file lands in OUT; the tables come last.
#     OUT=/tmp/out bash benchmarks/rnpair_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-6}
CPUS=${CPUS:-0,1}
LCPUS=${LCPUS:-2,3}
OFF=kernels.rnpair.ON=0
# more A/B runtimes for both tables, e.g. VARIANTS="stall=kernels.rnpair.HICCUP_S=0.0 nopool=kernels.rnpair.POOL_BACKOFF=0"
VARIANTS=${VARIANTS:-}
more=(); for v in $VARIANTS; do more+=(--variant "$v"); done
export PYTHONUNBUFFERED=1 KERNELKIT_NUMBA_START=eager PYTHONWARNINGS=ignore
{ lscpu | grep -E "Model name|^CPU\(s\)|L2"; nproc; date -u; } > "$OUT/env.txt" 2>&1
log() { echo "$(date -u +%T) +${SECONDS}s $*" >> "$OUT/log.txt"; }
c=4
for m in resnet18 resnet50; do
  for set in "" "$OFF"; do
    for t in 1 2; do
      ( env KERNELKIT_BENCH_SET=$set timeout "${WARM_S:-60}" python3 benchmarks/threads_alone.py $m --threads $t --runs 1 \
          --cpus $c,$((c + 1)) > /dev/null 2>> "$OUT/warm.err" ) &
      c=$((c + 2)); [ $c -ge 16 ] && c=4
    done
  done
done
wait
log "warm"
taskset -c "$CPUS" timeout "${TURNS_S:-90}" python3 benchmarks/turns.py resnet18,resnet50 --runtimes numba1,numba,ort2 \
    --variant "old=$OFF" "${more[@]}" --rounds "$ROUNDS" --json "$OUT/quiet.jsonl" > "$OUT/quiet.md" 2> "$OUT/quiet.err" &
taskset -c "$LCPUS" timeout "${TURNS_S:-90}" python3 benchmarks/turns.py resnet18,resnet50 --runtimes numba1,numba,ort2 \
    --variant "old=$OFF" "${more[@]}" --mode loaded --rounds "${LROUNDS:-3}" --json "$OUT/loaded.jsonl" > "$OUT/loaded.md" \
    2> "$OUT/loaded.err" &
( timeout "${NODES_S:-80}" python3 benchmarks/threads_alone.py resnet18 --threads 2 --runs 20 --cpus 4,5 \
    > "$OUT/nodes18.json" 2>> "$OUT/log.txt"; log "nodes18 rc=$?" ) &
( timeout "${NODES_S:-80}" python3 benchmarks/threads_alone.py resnet50 --threads 2 --runs 10 --cpus 6,7 \
    > "$OUT/nodes50.json" 2>> "$OUT/log.txt"; log "nodes50 rc=$?" ) &
wait
log "done"
cat "$OUT/env.txt" "$OUT/log.txt"
tail -2 "$OUT/warm.err" "$OUT/quiet.err" "$OUT/loaded.err" 2>/dev/null
python3 - "$OUT" <<'PYEOF'
import json, os, sys
out = sys.argv[1]
for m in ("18", "50"):
    p = os.path.join(out, f"nodes{m}.json")
    if not os.path.getsize(p) if os.path.exists(p) else True:
        continue
    d = json.load(open(p))
    print(f"resnet{m} 2t per node: wall median {d.get('wall_median_ms')} ms, pool {d.get('pool')}")
    for n in sorted(d["nodes"], key=lambda n: -n["median_ms"])[:12]:
        print(f"  {n['node']:<12} {n['median_ms']:.3f} ms")
PYEOF
cat "$OUT/loaded.md" "$OUT/quiet.md"
