#!/usr/bin/env bash
# Issue 12 (session 4): one device call on the H100. Usage, from the repository root after
# `source .whl/prelude.sh`:  bash benchmarks/gpu/issue12_round.sh OUTDIR [STEPS]
# STEPS (comma-separated, in this order): retune (regenerate and install the shipped table, merged
# with the old one), ab (kernel_times.py with opencl_pointwise_gemm on and off), tiles (SGEMM tile sweep with ptxas info), bench (run_gpu.py, the cold/warm
# start with the installed table; EXTRAS=1 adds the float16 and io_binding rows), tests
# (packages/gpu_opencl/tests on the NVIDIA device), conf (tests/test_conformance.py -k opencl there).
# Each step has its own time limit and writes OUTDIR/<step>.txt (at most 8 files come back).
set -u
OUT=${1:?output folder}
STEPS=${2:-retune,tiles,bench,tests}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KERNELKIT_OPENCL_DEVICE=NVIDIA
has() { case ",$STEPS," in *",$1,"*) return 0;; esac; return 1; }
if has retune; then
  timeout -k 20 "${RETUNE_S:-170}" $PY benchmarks/gpu/retune_table.py "$OUT" --install --merge --half "" \
    --budget "${BUDGET:-10}" --share "${SHARE:-0.03}" > "$OUT/retune.txt" 2>&1
  echo "retune rc=$?" >> "$OUT/retune.txt"
  tail -n 3 "$OUT/retune.txt"
fi
if has ab; then  # kernel times: 1x1 convolutions as batched GEMMs (opencl_pointwise_gemm) vs implicit GEMM
  for pw in 1 0; do
    KERNELKIT_OPENCL_POINTWISE_GEMM=$pw timeout -k 10 "${AB_S:-40}" $PY benchmarks/gpu/kernel_times.py \
      "pointwise=$pw" resnet50:32,mobilenetv2:32 >> "$OUT/ab.txt" 2>&1
    echo "ab pointwise=$pw rc=$?" >> "$OUT/ab.txt"
  done
  grep -v "^ " "$OUT/ab.txt" | cut -c1-600
fi
if has tiles; then
  timeout -k 10 "${TILES_S:-80}" $PY benchmarks/gpu/sgemm_tiles.py "$OUT" --no-json --sizes 1024,2048,4096 --ptx > "$OUT/tiles.txt" 2>&1
  echo "tiles rc=$?" >> "$OUT/tiles.txt"
  grep -E "^best|registers" "$OUT/tiles.txt" | head -n 40
fi
if has bench; then
  SKIPX=--skip-extras; [ -n "${EXTRAS:-}" ] && SKIPX=
  mkdir -p /tmp/kk_bench  # run_gpu's other files stay behind (8 files come back at most)
  OUT=/tmp/kk_bench timeout -k 10 "${BENCH_S:-190}" $PY benchmarks/gpu/run_gpu.py --skip-conformance --skip-untuned-cold \
    $SKIPX --repeats "${REPEATS:-3}" > "$OUT/bench.txt" 2>&1
  echo "bench rc=$?" >> "$OUT/bench.txt"
  cp /tmp/kk_bench/results.json "$OUT/" 2>/dev/null
  sed -n '/| benchmark |/,$p' "$OUT/bench.txt" | head -n 80
fi
if has tests; then
  timeout -k 10 "${TESTS_S:-120}" $PY -m pytest packages/gpu_opencl/tests -q --maxfail=5 -p no:cacheprovider > "$OUT/tests.txt" 2>&1
  echo "tests rc=$?" >> "$OUT/tests.txt"
  tail -n 5 "$OUT/tests.txt"
fi
if has conf; then
  timeout -k 10 "${CONF_S:-120}" $PY -m pytest tests/test_conformance.py -k opencl -q -x -p no:cacheprovider \
    > "$OUT/conf.txt" 2>&1
  echo "conf rc=$?" >> "$OUT/conf.txt"
  tail -n 5 "$OUT/conf.txt"
fi
