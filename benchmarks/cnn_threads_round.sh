#!/usr/bin/env bash
# Two threads on the CNNs, one job on the host at a time (docs/numba.md, "Two threads on the CNNs
# (issue 11, session 8)"): per-node profiles of one session alone per process (threads_alone.py) at
# 1 and 2 threads, quiet and loaded (a busy loop on the first CPU of the pair), variants through
# --set. Every timed process runs pinned to CPUS (default 0,1) after a warm-up that fills the Numba
# cache on other CPUs. Usage (repository root, after `source .whl/prelude.sh` on the device):
#   STEPS="r18 mnv2 hw r50 var" bash benchmarks/cnn_threads_round.sh OUT
# Results: OUT/*.json, one per process; `python benchmarks/threads_alone.py --compare A B` reads two.
set -u
OUT=${1:-/tmp/cnn_threads}
mkdir -p "$OUT"
PY=${PY:-python3}
CPUS=${CPUS:-0,1}
STEPS=${STEPS:-r18 mnv2 hw r50 var}
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
export NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-/tmp/kk_cnn_nc}
{ lscpu | grep -E "Model name|^CPU\(s\)|Thread|L2|L3"; nproc; } > "$OUT/env.txt" 2>&1
one() {  # name args...: one process, pinned by threads_alone itself
  local name=$1
  shift
  $PY benchmarks/threads_alone.py "$@" > "$OUT/$name.json" 2> "$OUT/$name.err"
  echo "$(date -u +%T) $name rc=$? $(head -c 300 "$OUT/$name.json")" >> "$OUT/log.txt"
}
# warm-up: every model at 1 and 2 threads compiles its kernels into the shared cache (not timed)
for m in resnet18:2,3 resnet50:4,5 mobilenetv2:6,7; do
  ( $PY benchmarks/threads_alone.py "${m%%:*}" --threads 1 --runs 1 --cpus "${m#*:}" > /dev/null 2>&1
    $PY benchmarks/threads_alone.py "${m%%:*}" --threads 2 --runs 1 --cpus "${m#*:}" > /dev/null 2>&1 ) &
done
wait
echo "$(date -u +%T) warm" >> "$OUT/log.txt"
OFF=shards.ShardPool.WINDOW_S=0.0,shards.ShardPool.LATE_S=0.0  # this round's back-off rules off
for step in $STEPS; do
  case $step in
  r18)
    one r18_1t resnet18 --threads 1 --runs 30 --cpus "$CPUS"
    one r18_2t resnet18 --threads 2 --runs 30 --cpus "$CPUS" ;;
  mnv2)
    one mnv2_1t mobilenetv2 --threads 1 --runs 60 --cpus "$CPUS"
    one mnv2_2t mobilenetv2 --threads 2 --runs 60 --cpus "$CPUS"
    one mnv2_L1t mobilenetv2 --threads 1 --runs 150 --cpus "$CPUS" --loaded
    one mnv2_L2t mobilenetv2 --threads 2 --runs 150 --cpus "$CPUS" --loaded
    one mnv2_L2t_off mobilenetv2 --threads 2 --runs 150 --cpus "$CPUS" --loaded --set "$OFF"
    one mnv2_L2t_hb0 mobilenetv2 --threads 2 --runs 150 --cpus "$CPUS" --loaded --set "$OFF,config.HEARTBEAT=0"
    one mnv2_L2t_pw0 mobilenetv2 --threads 2 --runs 150 --cpus "$CPUS" --loaded --set "$OFF,kernels.conv.PRODUCT_WORK=0" ;;
  hw)  # two cores' throughput: one 1-thread process alone, then two at once on the pair's two CPUs
    one hw_alone resnet18 --threads 1 --runs 30 --cpus "${CPUS%%,*}"
    $PY benchmarks/threads_alone.py resnet18 --threads 1 --runs 30 --cpus "${CPUS%%,*}" > "$OUT/hw_pair_a.json" 2>&1 &
    $PY benchmarks/threads_alone.py resnet18 --threads 1 --runs 30 --cpus "${CPUS##*,}" > "$OUT/hw_pair_b.json" 2>&1 &
    wait
    echo "$(date -u +%T) hw pair" >> "$OUT/log.txt" ;;
  r50)
    one r50_1t resnet50 --threads 1 --runs 15 --cpus "$CPUS"
    one r50_2t resnet50 --threads 2 --runs 15 --cpus "$CPUS" ;;
  var)
    one r18_2t_off resnet18 --threads 2 --runs 30 --cpus "$CPUS" --set "$OFF"
    one r18_2t_nb resnet18 --threads 2 --runs 30 --cpus "$CPUS" --no-backoff
    one r18_2t_spt2 resnet18 --threads 2 --runs 30 --cpus "$CPUS" --set config.SHARDS_PER_THREAD=2
    one r18_2t_tile1 resnet18 --threads 2 --runs 30 --cpus "$CPUS" --set config.TILE_SHARDS_PER_THREAD=1
    one r18_2t_b resnet18 --threads 2 --runs 30 --cpus "$CPUS" ;;
  esac
done
