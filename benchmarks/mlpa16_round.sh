#!/usr/bin/env bash
# Issue 11, session 16 (mlpa16; docs/numba.md, "The MLP's 1024-deep product: A's rows off one L1 set"): the Xeon
# call for the next session (not run in session 16: no device time was left). The Numba cache warmed side by side,
# then every timed job alone on CPUs 0,1, one after another: mlp_parts.py (each product alone, B cold, GFLOP/s,
# fgemm.PAD_A_ONE_THREAD 16 and 32 against off in one process, random order) on CPU 0; the MLP's turns at one
# thread (--probe) with the same settings; the transformer's products per kind of node (nodes_ab.py, 1 thread: its
# products are MatMul's, which the switch does not touch; a control) and its turns at one thread. ~155 s (limits: 25 + 40 + 55 + 20 + 15).
#     OUT=/tmp/out bash benchmarks/mlpa16_round.sh
# Settings (kernels.fgemm): pad16 = PAD_A_ONE_THREAD 16 (Gemm's one-thread bound call copies A into rows K + 16
# floats apart where K * 4 is a multiple of 4096 and N >= 256: the MLP's 64 x 1024 x 1024 only), pad32 = 32 floats.
set -u
OUT=${OUT:-/tmp/out}
source "$(dirname "$0")/_round.sh" "$OUT"  # warm_cache, elapsed; OUT/env.txt
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
F=kernels.fgemm
V16="pad16=$F.PAD_A_ONE_THREAD=16"
V32="pad32=$F.PAD_A_ONE_THREAD=32"
warm_cache "2 3 4 5 6 7" ${WARM_S:-25} mlp:numba1 "mlp:numba1:$F.PAD_A_ONE_THREAD=16" \
  "mlp:numba1:$F.PAD_A_ONE_THREAD=32" transformer:numba1 "transformer:numba1:$F.PAD_A_ONE_THREAD=16"
elapsed warm >> "$OUT/env.txt"
cd "$(dirname "$0")" || exit 1
timeout ${PARTS_S:-40} taskset -c 0 python3 mlp_parts.py ${PARTS_R:-60} "$V16" "$V32" > "$OUT/parts.txt" 2>&1
elapsed "parts rc $?" >> "$OUT/env.txt"
timeout ${MLP_S:-55} taskset -c 0,1 python3 turns.py mlp --rounds ${MR:-12} --runtimes numba1,reference1,ort1 \
  --variant1 "$V16" --variant1 "$V32" ${MLP_MORE:-} --probe --json "$OUT/mlp.jsonl" > "$OUT/mlp.txt" 2>&1
elapsed "mlp rc $?" >> "$OUT/env.txt"
timeout ${NODES_S:-20} taskset -c 0,1 python3 nodes_ab.py transformer ${NR:-15} "$V16" --rotate > "$OUT/tr_nodes.txt" 2>&1
elapsed "nodes rc $?" >> "$OUT/env.txt"
timeout ${TR_S:-15} taskset -c 0,1 python3 turns.py transformer --rounds ${TR:-5} --runtimes numba1 --variant1 "$V16" \
  --probe --json "$OUT/tr.jsonl" > "$OUT/tr.txt" 2>&1
elapsed "tr rc $?" >> "$OUT/env.txt"
grep "Model name" "$OUT/env.txt"; tail -5 "$OUT/env.txt"
echo "== parts"; grep "^| " "$OUT/parts.txt" | grep -v "^| node\|profiled\|sum\|blas hot\|fgemm hot" | cut -c1-90
echo "== transformer nodes"; grep -i "matmul\|gemm\|total\|^|" "$OUT/tr_nodes.txt" | head -20 | cut -c1-160
for j in mlp tr; do echo "== $j"; python3 turns.py --from-json "$OUT/$j.jsonl" 2>&1 | grep -v "^|---" | cut -c1-1000; done
