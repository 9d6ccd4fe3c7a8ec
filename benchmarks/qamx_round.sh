#!/usr/bin/env bash
# The AMX int8 round (issue 16, session 7) in one device call on the GPU machine's Xeon:
# the AMX state of this process (features, arch_prctl), then three jobs side by side (shared L3: ratios
# within a job are what counts):
#   CPUs 0,1   quantized.py --separate --threads 1 on MODELS: AMX on (auto), KERNELKIT_INT8_AMX=off, twice
#   CPUs 2,3   test_qamx.py (the AMX products bit-exact) + the int8 product tests of test_qtile.py
#   CPU 6      qamx_gops.py's operand alignment table, then its transformer, ResNet-18 and MLP shapes
# Usage (repository root, after `source .whl/prelude.sh`): bash benchmarks/qamx_round.sh OUT [SECONDS] [MODELS]
set -u
OUT=${1:?output folder}
LIMIT=${2:-200}
MODELS=${3:-transformer}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export KERNELKIT_NUMBA_START=eager OPENBLAS_NUM_THREADS=1 NUMBA_CACHE_DIR=/tmp/kk_amx_nc0
{ lscpu | grep "Model name"; grep -o -w 'amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo; } > "$OUT/cpu.txt"
taskset -c 0 $PY -c "
from kernelkit_numba.kernels import qamx, qtile
print('features:', sorted(f for f in qtile.host_features() if 'amx' in f or 'vnni' in f))
print('permission:', qamx.permission(), 'reason:', repr(qamx.unavailable_reason()), 'compiled:', qamx.compiled())
" >> "$OUT/cpu.txt" 2>&1
(
  export NUMBA_CACHE_DIR=/tmp/kk_amx_nc1
  for amx in auto off auto off; do  # alternately while at least 45 s are left
    left=$((LIMIT - SECONDS))
    [ $left -lt 45 ] && break
    KERNELKIT_INT8_AMX=$amx timeout $left taskset -c 0,1 $PY benchmarks/quantized.py --separate --threads 1 \
      --models "$MODELS" --rounds 10 --agreement 20 >> "$OUT/quantized_$amx.txt" 2>&1
  done
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_amx_nc2
  timeout $((LIMIT / 2)) taskset -c 2,3 $PY -m pytest packages/cpu_numba/tests/test_qamx.py -q -rs -p no:cacheprovider \
    > "$OUT/test_qamx.txt" 2>&1
  timeout $((LIMIT - SECONDS)) taskset -c 2,3 $PY -m pytest packages/cpu_numba/tests/test_qtile.py -q \
    -p no:cacheprovider -k "dynamic_quantize or variant_bit_exact or extremes or env" > "$OUT/test_qtile.txt" 2>&1
) &
(
  timeout $((LIMIT / 3)) taskset -c 6 $PY benchmarks/qamx_gops.py --repeat 20 --alignment > "$OUT/gops_align.txt" 2>&1
  timeout $((LIMIT - SECONDS)) taskset -c 6 $PY benchmarks/qamx_gops.py --repeat 15 --shapes transformer,resnet18,mlp \
    > "$OUT/gops.txt" 2>&1
) &
wait
tail -n 3 "$OUT"/test_*.txt
cat "$OUT/cpu.txt" "$OUT/gops_align.txt" "$OUT/gops.txt"
grep -h "^| transformer\|^| mlp\|^| resnet\|^| mobilenet" "$OUT"/quantized_*.txt
