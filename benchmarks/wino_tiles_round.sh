#!/usr/bin/env bash
# F(4x4, 3x3) by tiles (winograd.TILES, issue 11, session 10) on a device call, one tree, the old path
# as the variant TILES=0 (with SERIAL_TILES=0 at one thread: exactly the branch point's Winograd):
#   1. side by side on other CPU pairs (within-process comparisons only): bench_wino_tiles.py (2 threads:
#      phased vs tiles at TILE_BYTES 0 / 1 / 2 MiB; 1 thread: the whole map vs blocks) and
#      threads_alone.py --interleave (1t and 2t runs of one session in turns: per node the 1-thread time
#      against the 2-thread shards' sum), ResNet-18 (defaults and TILES=0) and ResNet-50 (defaults);
#      with them, one run of each (model, setting, thread count) warms the Numba cache for step 2;
#   2. on CPUS: loaded_ab.py --mode quiet, new 1t / new default / old default / old 1t / ORT 2t in alternating
#      processes, up to REPEATS repeats, none that would end after END_S seconds of this script; its
#      lines come last.
# Usage (repository root, after `source .whl/prelude.sh`):  [END_S=145] bash benchmarks/wino_tiles_round.sh OUT
set -u
OUT=${1:-/tmp/wino_tiles}
mkdir -p "$OUT"
PY=${PY:-python3}
CPUS=${CPUS:-0,1}
REPEATS=${REPEATS:-3}
END_S=${END_S:-145}
OFF=kernels.winograd.TILES=0,kernels.winograd.SERIAL_TILES=0
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
{ lscpu | grep -E "Model name|^CPU\(s\)|L2|L3|Thread"; nproc; date -u; } > "$OUT/env.txt" 2>&1
log() { echo "$(date -u +%T) +${SECONDS}s $*" >> "$OUT/log.txt"; }
( taskset -c 2,3 $PY benchmarks/bench_wino_tiles.py 40 --bytes 0,1048576,2097152 > "$OUT/wino2t.txt" 2>&1
  taskset -c 2,3 $PY benchmarks/bench_wino_tiles.py 40 --serial --bytes 0,1048576,2097152,4194304 > "$OUT/wino1t.txt" 2>&1
  log "bench_wino_tiles done" ) &
( timeout 70 $PY benchmarks/threads_alone.py resnet18 --interleave --runs 8 --cpus 4,5 > "$OUT/il18.json" 2>> "$OUT/log.txt"
  log "interleave resnet18 rc=$?"
  env KERNELKIT_BENCH_SET=$OFF timeout 40 $PY benchmarks/threads_alone.py resnet18 --interleave --runs 8 --cpus 4,5 \
    > "$OUT/il18off.json" 2>> "$OUT/log.txt"; log "interleave resnet18 off rc=$?" ) &
( timeout 70 $PY benchmarks/threads_alone.py resnet50 --interleave --runs 4 --cpus 6,7 > "$OUT/il50.json" 2>> "$OUT/log.txt"
  log "interleave resnet50 rc=$?" ) &
diag=$(jobs -p)
# the A/B's cache: both settings, both models, 1 and 2 threads (threads_alone compiles in its warm-up runs)
for m in resnet18 resnet50; do
  for set in "" "$OFF"; do
    ( env KERNELKIT_BENCH_SET=$set timeout 70 $PY benchmarks/threads_alone.py $m --threads 1 --runs 1 --cpus 10,11 \
        > /dev/null 2>&1
      env KERNELKIT_BENCH_SET=$set timeout 50 $PY benchmarks/threads_alone.py $m --threads 2 --runs 1 --cpus 12,13 \
        > /dev/null 2>&1 ) &
  done
done
warm=$(comm -13 <(echo "$diag" | sort) <(jobs -p | sort))
wait $warm
log "warm (the diagnostics may still run beside the A/B, on other CPUs)"
budget=$((END_S - SECONDS))
taskset -c "$CPUS" $PY benchmarks/loaded_ab.py resnet18,resnet50 --mode quiet --repeats "$REPEATS" --rounds 5 \
  --variant "off=$OFF" --variant1 "off1t=$OFF" --ort --budget "$budget" > "$OUT/ab.txt" 2>&1
log "ab done"
wait
for f in il18 il18off il50; do
  [ -s "$OUT/$f.json" ] && $PY benchmarks/threads_alone.py --serial-vs "$OUT/$f.json" --top 0 | sed "s/^/$f: /"
done
cat "$OUT/wino2t.txt" "$OUT/wino1t.txt"
tail -3 "$OUT/ab.txt"
$PY - "$OUT/ab.txt" <<'PYEOF'
import collections, json, statistics, sys
got = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    if line.startswith("{"):
        d = json.loads(line)
        got[(d["model"], d["repeat"])][d["config"]] = d.get("median_ms", float("nan"))
print("| model | repeat | new 1t | new default | old default | old 1t | ORT 2t | new/old default | new/old 1t | "
      "new default/1t | old default/1t | new default/ORT 2t | old default/ORT 2t |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for (m, r), c in sorted(got.items()):
    g = lambda k: c.get(k, float("nan"))
    print(f"| {m} | {r} | {g('1t'):.2f} | {g('new'):.2f} | {g('off'):.2f} | {g('off1t'):.2f} | {g('ort2t'):.2f} | "
          f"{g('new') / g('off'):.3f} | {g('1t') / g('off1t'):.3f} | {g('new') / g('1t'):.3f} | {g('off') / g('off1t'):.3f} | "
          f"{g('new') / g('ort2t'):.2f} | {g('off') / g('ort2t'):.2f} |")
PYEOF
