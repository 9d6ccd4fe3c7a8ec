#!/usr/bin/env bash
# The MLP's products at one thread with B cold (issue 11, session 10): one device call, steps one after
# another (none side by side: the cold-B runs would share the L3), each under its own time limit.
#   bash benchmarks/mlp_one_thread_cold.sh OUT
out=${1:-out}
mkdir -p "$out"
lscpu | grep -E "Model name|L1d|L2|L3" | tee "$out/env.txt"
export KERNELKIT_NUMBA_START=eager
cd "$(dirname "$0")" || exit 1
cpu=${CPU:-2}
run() {  # limit, file, args...
  local limit=$1 file=$2
  shift 2
  echo "== $*" >> "$out/$file"
  timeout "$limit" taskset -c "$cpu" python3 bench_fgemm_cold.py "$@" >> "$out/$file" 2>&1
}
run 40 mlp_ab.txt mlp 400 "pf0,pf16,pf4,kc256 pf16"
run 35 cold.txt 10 1,6,24
run 25 mlp_ab.txt mlp 400 "pf16,pf0,pf4,kc256 pf16"
cat "$out"/*.txt
