#!/usr/bin/env bash
# ResNet-50 and the MLP at one thread (issue 11, session 11): one device call, jobs side by side on
# separate CPU pairs, each under its own time limit; the Numba cache warmed first.
#   bash benchmarks/r50t11_round.sh OUT
out=${1:-out}
mkdir -p "$out"
export KERNELKIT_NUMBA_START=eager
cd "$(dirname "$0")" || exit 1
source ./_round.sh "$out"  # warm_cache (and the tables: turns.py --from-json; both since session 14)
t0=$(date +%s)
# warm the cache: the one-thread kernels of both models and the variants' extra drivers, side by side
warm_cache "0 2 4 6 8" 70 resnet50:numba1 mlp:numba1 \
  resnet50:numba1:kernels.ftile.ROWS12_ON=1,kernels.conv.DIRECT_SMALL=0 \
  mlp:numba1:kernels.gemm.HEAD_NARROW=0,kernels.fgemm.MR.2=12,kernels.fgemm.PREFETCH=8 \
  resnet50:numba1:kernels.ftile.ROWS12_ON=1,kernels.ftile.MR.3=14,kernels.ftile._NAME.3=avx512x14
echo "warm: $(( $(date +%s) - t0 )) s" >> "$out/warm.txt"
# each --variant1: numba 1t with one setting changed (ratios 1t / variant: above 1 = the variant faster)
# (r14: the 12-row rows tiles' kind run with 14 rows, 28 accumulators, under a cache name of its own)
R50=(--variant1 r12=kernels.ftile.ROWS12_ON=1
     --variant1 "r14=kernels.ftile.ROWS12_ON=1;kernels.ftile.MR.3=14;kernels.ftile._NAME.3=avx512x14"
     --variant1 kc144=kernels.fdirect.KC=144 --variant1 blk1m=kernels.ftile.BLOCK_BYTES=1048576
     --variant1 small0=kernels.conv.DIRECT_SMALL=0)
MLP=(--variant1 blas=kernels.gemm.HEAD_NARROW=0 --variant1 mr12=kernels.fgemm.MR.2=12
     --variant1 pf8=kernels.fgemm.PREFETCH=8)
left=$(( ${LIMIT:-160} - ( $(date +%s) - t0 ) ))
timeout $left taskset -c 0,1 python3 turns.py resnet50 --rounds "${ROUNDS:-7}" --runtimes numba1,reference1,ort1 \
  "${R50[@]}" --json "$out/turns_r50.jsonl" > "$out/turns_r50.txt" 2>&1 &
timeout $left taskset -c 4,5 python3 turns.py mlp --rounds "${ROUNDS:-7}" --runtimes numba1,reference1,ort1 \
  "${MLP[@]}" --json "$out/turns_mlp.jsonl" > "$out/turns_mlp.txt" 2>&1 &
( timeout $left taskset -c 2,3 python3 ops_vs_reference.py resnet50 7 > "$out/ops_r50.txt" 2>&1
  timeout $left taskset -c 2,3 python3 ops_vs_reference.py mlp 7 64 > "$out/ops_mlp.txt" 2>&1 ) &
wait
echo "total: $(( $(date +%s) - t0 )) s" >> "$out/warm.txt"
lscpu | grep -E "Model name|L2|L3" > "$out/env.txt"
# the turns' tables last, from the blocks written so far (1t / LABEL above 1: the variant faster than numba 1t)
for f in "$out"/turns_*.jsonl; do python3 turns.py --from-json "$f"; done
