#!/usr/bin/env bash
# MobileNetV2 int8 at one and two threads on the device's CPU (docs/quantization.md, "MobileNetV2 int8
# at two threads (issue 16, session 8)"): the per-node trace of benchmarks/trace_quantized.py, then one
# contender a process (quantized.py --only), settings in turns. One job at a time, pinned to CPUs 0,1.
#   bash benchmarks/int8_threads_round.sh OUT [process rounds]
# Settings of a process come from a sitecustomize folder under $SC (cw0: qconv.INT8_CONV_WORK = 0,
# every QLinearConv on the calling thread; hb0: config.HEARTBEAT off) or the environment (spin0).
set -u
OUT=${1:-/tmp/out}; ROUNDS=${2:-3}; mkdir -p "$OUT"
export KERNELKIT_NUMBA_START=eager PYTHONWARNINGS=ignore PYTHONUNBUFFERED=1
SC=${SC:-$PWD/.sc}
mkdir -p "$SC/cw0" "$SC/hb0"
printf 'try:\n    import kernelkit_numba.kernels.qconv as _q\n    _q.INT8_CONV_WORK = 0.0\nexcept Exception:\n    pass\n' >"$SC/cw0/sitecustomize.py"
printf 'try:\n    import kernelkit_numba.config as _c\n    _c.HEARTBEAT = False\nexcept Exception:\n    pass\n' >"$SC/hb0/sitecustomize.py"
{ lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core|Socket|NUMA node0|L2|L3"; lscpu -e | head -4
  for c in 0 1; do echo "cpu$c siblings $(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list 2>/dev/null) core $(cat /sys/devices/system/cpu/cpu$c/topology/core_id 2>/dev/null)"; done
  python3 -c "import numba, numpy, onnxruntime; print('numba', numba.__version__, 'numpy', numpy.__version__, 'ort', onnxruntime.__version__)"
  date -u; uptime; } 2>&1 | tee "$OUT/host.txt"
T=$(date +%s)
echo "== trace mobilenet_v2 ($(date -u +%T))" | tee -a "$OUT/trace.txt"
taskset -c 0,1 python3 benchmarks/trace_quantized.py mobilenet_v2 --runs ${RUNS:-40} --warmup ${WARM:-30} --top 40 \
  --variants 1t,2t,2t-hb0,2t-cw0,2t-cw0-hb0 --json "$OUT/trace_mnv2.json" 2>&1 | tee -a "$OUT/trace.txt"
echo "trace took $(( $(date +%s) - T )) s" | tee -a "$OUT/trace.txt"
one() { # label cpus threads [env...]
  local label=$1 cpus=$2 t=$3; shift 3
  local ms
  ms=$(env "$@" timeout 60 taskset -c "$cpus" python3 benchmarks/quantized.py --models mobilenet_v2 --threads "$t" \
       --rounds 40 --reduce-range off --only "${KEY:-kk numba int8}" 2>/dev/null | tail -1 | sed 's/.*median_ms": //; s/}//')
  echo "$label t$t cpus=$cpus $ms" | tee -a "$OUT/procs.txt"
}
for r in $(seq 1 "$ROUNDS"); do
  one 1t 0,1 1 X=1
  one 2t 0,1 2 X=1
  one 2t-cw0 0,1 2 PYTHONPATH="$SC/cw0:${PYTHONPATH:-}"
  one 2t-hb0 0,1 2 PYTHONPATH="$SC/hb0:${PYTHONPATH:-}"
  one 2t-spin0 0,1 2 KERNELKIT_NUMBA_SPIN_US=0
  one 1t-cpu1 1 1 X=1
  if [ "$r" = 2 ]; then KEY="ort int8" one ort1t 0,1 1 X=1; KEY="ort int8" one ort2t 0,1 2 X=1; fi
done
echo "== trace resnet18 ($(date -u +%T))" | tee -a "$OUT/trace.txt"
taskset -c 0,1 python3 benchmarks/trace_quantized.py resnet18 --runs ${RUNS:-10} --warmup ${WARM:-12} --top 25 \
  --variants 1t,2t,2t-cw0,2t-hb0 --json "$OUT/trace_r18.json" 2>&1 | tee -a "$OUT/trace.txt"
echo "done $(date -u +%T), $(( $(date +%s) - T )) s" | tee -a "$OUT/trace.txt"
