#!/usr/bin/env bash
# Issue 12 (session 5): the float16 device call on the H100. Usage, from the repository root after
# `source .whl/prelude.sh`:  bash benchmarks/gpu/half_round.sh OUTDIR [STEPS]
# STEPS (comma-separated): ab (half_ab.py: fp32 vs float16 per model with per-kernel device times,
# the 64-bit half accesses and 8-output depthwise as variants, ptxas registers and PTX access
# widths), tests (packages/gpu_opencl/tests on the NVIDIA device), conf (tests/test_conformance.py
# -k "opencl and float16" there). Each step has its own time limit and writes OUTDIR/<step>.txt.
set -u
OUT=${1:?output folder}
STEPS=${2:-ab,tests,conf}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KERNELKIT_OPENCL_DEVICE=NVIDIA
has() { case ",$STEPS," in *",$1,"*) return 0;; esac; return 1; }
if has ab; then
  timeout -k 5 "${AB_S:-170}" $PY benchmarks/gpu/half_ab.py --levels 3,1 --profile --labels 10 --dw8 --ptxas \
    --iters 20 --rounds 3 > "$OUT/ab.txt" 2>&1
  echo "ab rc=$?" >> "$OUT/ab.txt"
  grep -E "^half_ab|profile|^  ptx " "$OUT/ab.txt" | cut -c1-900
fi
if has tests; then
  timeout -k 5 "${TESTS_S:-120}" $PY -m pytest packages/gpu_opencl/tests -q --maxfail=5 -p no:cacheprovider \
    > "$OUT/tests.txt" 2>&1
  echo "tests rc=$?" >> "$OUT/tests.txt"
  tail -n 4 "$OUT/tests.txt"
fi
if has conf; then
  timeout -k 5 "${CONF_S:-70}" $PY -m pytest tests/test_conformance.py -k "opencl and float16" -q -x -p no:cacheprovider \
    > "$OUT/conf.txt" 2>&1
  echo "conf rc=$?" >> "$OUT/conf.txt"
  tail -n 4 "$OUT/conf.txt"
fi
