# The common start of the device round scripts (ftile_round.sh, fgemm_round.sh, dw_round.sh,
# conv_threads_round.sh), sourced with the script's arguments in place: OUT (the first argument), PY,
# a DEADLINE of BUDGET seconds from now (default ROUND_BUDGET, set by the script), the environment of
# the steady-state measurements, ``pinned CPUS COMMAND...`` (taskset + the time left; a command that
# would start with under 10 s left is skipped, so that the files written so far come back from a
# device call with a time limit) and OUT/env.txt (the CPU and the library versions).
OUT=${1:?output folder}
PY=${PYTHON:-python3}
DEADLINE=$(( $(date +%s) + ${BUDGET:-${ROUND_BUDGET:-300}} ))
mkdir -p "$OUT"
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1
pinned() {
  local cpus=$1 left=$(( DEADLINE - $(date +%s) )); shift
  if (( left < 10 )); then echo "skipped (time budget): $*"; return 0; fi
  taskset -c "$cpus" timeout "$left" "$@"
}
{ lscpu; $PY -c "import numba, llvmlite, numpy, onnxruntime; print(numba.__version__, llvmlite.__version__, numpy.__version__, onnxruntime.__version__)"; } > "$OUT/env.txt" 2>&1
