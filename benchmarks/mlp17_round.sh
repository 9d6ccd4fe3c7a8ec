#!/usr/bin/env bash
# Issue 11, session 17 (mlp17; docs/numba.md, "The MLP's products on 8 x 48 tiles, and the ratio in blocks"): the Xeon
# call (run once, 03:51 UTC; 83 s). The Numba cache warmed side by side on CPUs 2-7, then every timed job alone on CPUs
# 0,1, one after another: mlp_parts.py (each product's bound one-thread call alone, B cold, every setting in one
# process, random order) on CPU 0, mlp_blocks.py on CPU 0, then the MLP's turns at one thread (--probe) with the WIDE
# tiles against the default. ~110 s (limits 25 + 30 + 20 + 60).
#     OUT=/tmp/out bash benchmarks/mlp17_round.sh
# Settings (kernels.fgemm; the default: 12 x 32 / 8 x 32 whole row tiles, PAD_A_ONE_THREAD 16): wide = WIDE_ONE_THREAD 1
# (8 x 48 tiles); wpf16 = wide with PREFETCH_ONE_THREAD 16 (the next panel's L2 prefetch a line a K step over the
# first 3 row tiles, not half a line over 6); wnp = wide without A's padded copy; packa = the default with A packed
# into row tiles (PACK_A_ONE_THREAD; session 12's loss on 8-row tiles). Between them, mlp_blocks.py on CPU 0 (the
# runtimes' blocks of back-to-back calls in one process: turns.py's blocks without its processes).
set -u
OUT=${OUT:-/tmp/out}
source "$(dirname "$0")/_round.sh" "$OUT"  # warm_cache, elapsed; OUT/env.txt
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
F=kernels.fgemm
V_WIDE="wide=$F.WIDE_ONE_THREAD=1"
V_WPF="wpf16=$F.WIDE_ONE_THREAD=1;$F.PREFETCH_ONE_THREAD=16"
V_WNP="wnp=$F.WIDE_ONE_THREAD=1;$F.PAD_A_ONE_THREAD=0"
V_PACKA="packa=$F.PACK_A_ONE_THREAD=1"
warm_cache "${WARM_CPUS:-2 3 4 5 6 7}" ${WARM_S:-25} mlp:numba1 "mlp:numba1:$F.WIDE_ONE_THREAD=1" \
  "mlp:numba1:$F.WIDE_ONE_THREAD=1,$F.PREFETCH_ONE_THREAD=16" "mlp:numba1:$F.WIDE_ONE_THREAD=1,$F.PAD_A_ONE_THREAD=0" \
  "mlp:numba1:$F.PACK_A_ONE_THREAD=1"
elapsed warm >> "$OUT/env.txt"
cd "$(dirname "$0")" || exit 1
timeout ${PARTS_S:-30} taskset -c 0 python3 mlp_parts.py ${PARTS_R:-80} "$V_WIDE" "$V_WPF" "$V_WNP" "$V_PACKA" \
  > "$OUT/parts.txt" 2>&1
elapsed "parts rc $?" >> "$OUT/env.txt"
timeout ${BLOCKS_S:-20} taskset -c 0 python3 mlp_blocks.py ${BLOCKS_R:-12} "$V_WIDE" > "$OUT/blocks.txt" 2>&1
elapsed "blocks rc $?" >> "$OUT/env.txt"
timeout ${MLP_S:-60} taskset -c 0,1 python3 turns.py mlp --rounds ${MR:-20} --runtimes numba1,reference1,ort1 \
  --variant1 "$V_WIDE" ${MLP_MORE:-} --probe --json "$OUT/mlp.jsonl" > "$OUT/mlp.txt" 2>&1
elapsed "mlp rc $?" >> "$OUT/env.txt"
grep "Model name" "$OUT/env.txt"; tail -3 "$OUT/env.txt"
echo "== parts"; grep "^| " "$OUT/parts.txt" | grep -v "^| node\|profiled\|sum\|blas hot\|fgemm hot" | cut -c1-90
echo "== blocks"; grep "^| " "$OUT/blocks.txt" | grep -v "^| session\|^| ratio"
echo "== mlp"; python3 turns.py --from-json "$OUT/mlp.jsonl" 2>&1 | grep -v "^|---" | cut -c1-1200
