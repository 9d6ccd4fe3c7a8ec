#!/usr/bin/env bash
# Old against new tree, one contender a process (quantized.py --only), pinned to CPUs 0,1, one job
# at a time (docs/quantization.md, "MobileNetV2 int8 at two threads (issue 16, session 8)"):
#   bash benchmarks/int8_threads_ab.sh OUT OLD_TREE [rounds]
# OLD_TREE: an exported checkout (git archive) whose packages go first on PYTHONPATH; the new tree is
# the installed one. Each round: MobileNetV2 kk int8 at 1 and 2 threads, old and new (order alternating
# by round), ResNet-18 kk int8 at 2 threads old and new in the first three rounds, onnxruntime int8
# at 2 threads in the first two; then a per-node trace of the new tree (trace_quantized.py).
set -u
OUT=${1:-/tmp/out}; OLD=$(cd "${2:?old tree}" && pwd); ROUNDS=${3:-4}; mkdir -p "$OUT"
export KERNELKIT_NUMBA_START=eager PYTHONWARNINGS=ignore PYTHONUNBUFFERED=1
KEEP=${KEEP:-/tmp/kk_int8_models}
OLDPP="$OLD/packages/core/src:$OLD/packages/cpu_numba/src:$OLD/packages/converters/src:${PYTHONPATH:-}"
{ lscpu | grep -E "Model name|^CPU\(s\)"; python3 -c "import numba, onnxruntime; print('numba', numba.__version__, 'ort', onnxruntime.__version__)"
  PYTHONPATH=$OLDPP python3 -c "import kernelkit_numba; print('old tree:', kernelkit_numba.__file__)"
  date -u; uptime; } 2>&1 | tee "$OUT/host.txt"
T=$(date +%s)
one() { # label model threads key rounds [env...]
  local label=$1 model=$2 t=$3 key=$4 n=$5; shift 5
  local ms
  ms=$(env "$@" timeout 120 taskset -c 0,1 python3 benchmarks/quantized.py --models "$model" --threads "$t" \
       --rounds "$n" --reduce-range off --keep "$KEEP" --only "$key" 2>>"$OUT/stderr.txt" | tail -1 \
       | sed 's/.*median_ms": //; s/}//')
  echo "$label $model t$t $ms $(( $(date +%s) - T ))s" | tee -a "$OUT/ab.txt"
}
KK="kk numba int8"
one warm-new mobilenet_v2 2 "$KK" 3 X=1
one warm-old mobilenet_v2 2 "$KK" 3 PYTHONPATH="$OLDPP"
one warm-new resnet18 2 "$KK" 3 X=1
one warm-old resnet18 2 "$KK" 3 PYTHONPATH="$OLDPP"
for r in $(seq 1 "$ROUNDS"); do
  for t in 1 2; do
    if [ $((r % 2)) = 1 ]; then
      one old mobilenet_v2 "$t" "$KK" 40 PYTHONPATH="$OLDPP"; one new mobilenet_v2 "$t" "$KK" 40 X=1
    else
      one new mobilenet_v2 "$t" "$KK" 40 X=1; one old mobilenet_v2 "$t" "$KK" 40 PYTHONPATH="$OLDPP"
    fi
  done
  [ "$r" -le 2 ] && one ort mobilenet_v2 2 "ort int8" 40 X=1
  if [ "$r" -le 3 ]; then
    one old resnet18 2 "$KK" 20 PYTHONPATH="$OLDPP"; one new resnet18 2 "$KK" 20 X=1
  fi
done
one ort resnet18 2 "ort int8" 20 X=1
echo "== trace new ($(date -u +%T))" | tee -a "$OUT/trace.txt"
taskset -c 0,1 timeout 100 python3 benchmarks/trace_quantized.py resnet18 --runs 10 --warmup 12 --top 40 \
  --variants 1t,2t --json "$OUT/trace_r18.json" >>"$OUT/trace.txt" 2>&1
taskset -c 0,1 timeout 60 python3 benchmarks/trace_quantized.py mobilenet_v2 --runs 30 --warmup 10 --top 10 \
  --variants 1t,2t --json "$OUT/trace_mnv2.json" >>"$OUT/trace.txt" 2>&1
echo "done $(date -u +%T), $(( $(date +%s) - T )) s" | tee -a "$OUT/ab.txt"
