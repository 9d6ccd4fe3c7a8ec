#!/usr/bin/env bash
# MobileNetV2 and the transformer at one and two threads, a base tree against this one (docs/numba.md,
# "MobileNetV2 and the transformer at two threads (issue 11, session 9)"): threads_alone.py (one
# session alone per process, per node) for every configuration, the configurations taking turns
# (alternating processes) in each of REPEATS rounds, pinned to CPUS, after a warm-up that fills each
# tree's Numba cache on other CPUs. No process starts after BUDGET seconds. Usage (repository root,
# after `source .whl/prelude.sh` on the device):
#   BASE=/path/to/base/tree REPEATS=3 bash benchmarks/small_threads_round.sh OUT
# onnxruntime at 2 threads in each round too (test_bench_numba.py's child: 3 blocks, the best block median).
# Results: OUT/<config>_<repeat>.json; `python benchmarks/threads_alone.py --compare A B`.
set -u
OUT=${1:-/tmp/small_threads}
mkdir -p "$OUT"
PY=${PY:-python3}
CPUS=${CPUS:-0,1}
REPEATS=${REPEATS:-3}
BUDGET=${BUDGET:-200}
BASE=${BASE:?BASE: the base tree}
NEW=$(pwd)
START=$(date +%s)
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
{ lscpu | grep -E "Model name|^CPU\(s\)|Thread|L2|L3"; nproc; } > "$OUT/env.txt" 2>&1
SPLIT=kernels.conv.POINTWISE_FLOPS=12000000  # MobileNetV2's 1x1 layers of 12-40 MFLOP on the pool
# configurations: name tree threads model runs set
CONFIGS="mnv2_base1t:$BASE:1:mobilenetv2:30:
mnv2_base2t:$BASE:2:mobilenetv2:30:
mnv2_new1t:$NEW:1:mobilenetv2:30:
mnv2_new2t:$NEW:2:mobilenetv2:30:
mnv2_split:$NEW:2:mobilenetv2:30:$SPLIT
mnv2_splitoff:$NEW:2:mobilenetv2:30:$SPLIT,kernels.halves.ON=0
mnv2_splitch:$NEW:2:mobilenetv2:30:$SPLIT,kernels.halves.CONV_AXIS=channels
tr_base1t:$BASE:1:transformer:25:
tr_base2t:$BASE:2:transformer:25:
tr_new1t:$NEW:1:transformer:25:
tr_new2t:$NEW:2:transformer:25:
tr_lead0:$NEW:2:transformer:25:kernels.halves.LEAD_FLOPS=0.0
mnv2_ort2:ort:2:mobilenetv2:15:
tr_ort2:ort:2:transformer:15:"
tree_env() {  # tree: that tree's sources first, its own Numba cache
  local src="$1/packages/core/src:$1/packages/cpu_numba/src:$1/packages/converters/src"
  echo "PYTHONPATH=$src${PYTHONPATH:+:$PYTHONPATH} NUMBA_CACHE_DIR=/tmp/kk_nc_$(basename "$1")"
}
one() {  # out tree threads model runs set cpus (tree "ort": onnxruntime, test_bench_numba.py's child)
  local out=$1 tree=$2 threads=$3 model=$4 runs=$5 set=$6 cpus=$7
  if [ "$tree" = ort ]; then
    env $(tree_env "$NEW") taskset -c "$cpus" $PY -c "import sys; sys.path.insert(0, sys.argv[4]); import test_bench_numba as t; exec(t._CHILD)" \
      "$model" "ort$threads" "$runs" "$NEW/benchmarks" > "$out" 2> "$out.err"
    return
  fi
  env $(tree_env "$tree") $PY "$tree/benchmarks/threads_alone.py" "$model" --threads "$threads" --runs "$runs" \
    --cpus "$cpus" ${set:+--set "$set"} > "$out" 2> "$out.err"
}
# warm-up: each tree's kernels for both models at 1 and 2 threads (and the split variant), not timed,
# on the CPU pairs of WARM_CPUS at once
read -r -a pairs <<< "${WARM_CPUS:-2,3 4,5 6,7 8,9}"
i=0
for tree in "$BASE" "$NEW"; do
  for m in mobilenetv2 transformer; do
    p=${pairs[$((i % ${#pairs[@]}))]}
    w=/tmp/kk_warm_$i.json
    ( one "$w" "$tree" 1 $m 1 "" "$p"; one "$w" "$tree" 2 $m 1 "$SPLIT" "$p" ) &
    i=$((i + 1))
  done
done
wait
echo "$(date -u +%T) warm $(( $(date +%s) - START )) s" >> "$OUT/log.txt"
for r in $(seq 1 "$REPEATS"); do
  while IFS=: read -r name tree threads model runs set; do
    if [ $(( $(date +%s) - START )) -gt "$BUDGET" ]; then
      echo "$(date -u +%T) budget: stop before $name $r" >> "$OUT/log.txt"
      break 2
    fi
    one "$OUT/${name}_$r.json" "$tree" "$threads" "$model" "$runs" "$set" "$CPUS"
    echo "$(date -u +%T) ${name}_$r rc=$? $(head -c 160 "$OUT/${name}_$r.json")" >> "$OUT/log.txt"
  done <<< "$CONFIGS"
done
