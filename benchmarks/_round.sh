# The common start of the device round scripts (ftile_round.sh, fgemm_round.sh, dw_round.sh,
# conv_threads_round.sh, the session-13 ones), sourced with the script's arguments in place: OUT (the first
# argument), PY, a DEADLINE of BUDGET seconds from now (default ROUND_BUDGET, set by the script), the environment
# of the steady-state measurements, ``pinned CPUS COMMAND...`` (taskset + the time left; a command that
# would start with under 10 s left is skipped, so that the files written so far come back from a
# device call with a time limit), ``warm_cache`` (below), ``elapsed``, ``tables`` and ``ops_summary`` (the lines
# the scripts print last) and OUT/env.txt (the CPU and the library versions).
# The tables of turns.py's JSON lines (a job cut by its time limit: its rounds so far): turns.py --from-json.
OUT=${1:?output folder}
PY=${PYTHON:-python3}
ROUND_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROUND_T0=$(date +%s)
DEADLINE=$(( ROUND_T0 + ${BUDGET:-${ROUND_BUDGET:-300}} ))
mkdir -p "$OUT"
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1
pinned() {
  local cpus=$1 left=$(( DEADLINE - $(date +%s) )); shift
  if (( left < 10 )); then echo "skipped (time budget): $*"; return 0; fi
  taskset -c "$cpus" timeout "$left" "$@"
}
# warm_cache "CPUS CPUS ..." SECONDS MODEL:RUNTIME[:SPEC] ...: the Numba cache warmed before the timed jobs, one
# untimed process per item side by side (test_bench_numba's session of MODEL for RUNTIME, numba1 or numba2, built
# under apply_bench_set(SPEC) and run twice), on the CPU sets in turn, each under SECONDS; their errors in
# OUT/warm.err; returns when all have ended.
warm_cache() {
  local -a cpus pids=()
  local secs=$2 i=0 item model runtime spec
  read -r -a cpus <<< "$1"
  shift 2
  for item in "$@"; do
    IFS=: read -r model runtime spec <<< "$item"
    taskset -c "${cpus[$(( i % ${#cpus[@]} ))]}" timeout "$secs" "$PY" -c "
import sys
sys.path.insert(0, sys.argv[1])
from test_bench_numba import apply_bench_set, kernelkit_session, model_case
apply_bench_set(sys.argv[4])
_, model, feed, _ = model_case(sys.argv[2])
s = kernelkit_session(model, sys.argv[3]); s.run(None, feed); s.run(None, feed)
" "$ROUND_DIR" "$model" "$runtime" "$spec" > /dev/null 2>> "$OUT/warm.err" &
    pids+=($!)
    i=$(( i + 1 ))
  done
  wait "${pids[@]}"
}
# elapsed LABEL: prints "LABEL N s", N the seconds since this file was sourced.
elapsed() { echo "$1 $(( $(date +%s) - ROUND_T0 )) s"; }
# tables FILE...: the markdown tables' rows and the headings of each file, without the separator rows (turns.py's,
# head_in_model.py's, nodes_ab.py's tables).
tables() {
  local f
  for f in "$@"; do grep "^|\|^##" "$f" | grep -v "^|---"; done
}
# ops_summary FILE: of ops_vs_reference.py's output, the headings, the nodes slower than the reference and the
# Conv, Gemm and sum rows of its per-op tables (40 lines at most).
ops_summary() { grep -i "slower\|^##\|^| Conv\|^| Gemm\|^| \*\*sum" "$1" | head -40; }
{ lscpu; $PY -c "import numba, llvmlite, numpy, onnxruntime; print(numba.__version__, llvmlite.__version__, numpy.__version__, onnxruntime.__version__)"; } > "$OUT/env.txt" 2>&1
