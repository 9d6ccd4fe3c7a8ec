#!/usr/bin/env bash
# Session 15's final call (L2a in docs/benchmarks.md, "Round 15"): warm the cache,
# quiet alone on CPUs 0,1 (8 rounds, variant a0 = both prefetches off), loaded alone on 0,1 (4 rounds, variant
# hone = conv_serial.HELD_ONE_THREAD). Prints the two tables last.
#     OUT=/tmp/out bash benchmarks/final15_round.sh
set -u
OUT=${OUT:-/tmp/out}
source "$(dirname "$0")/_round.sh" "$OUT"  # warm_cache, elapsed; OUT/env.txt
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
M=resnet18,resnet50,mobilenetv2,transformer,mlp
A0="kernels.cpair.COLS_AHEAD=0;kernels.rnpair.DIRECT_AHEAD=0"
HONE="kernels.conv_serial.HELD_ONE_THREAD=1"
warm_cache "2,3 4,5 6,7 8,9 10,11 12,13 14,15" 100 resnet18:numba1 resnet18:numba2 resnet50:numba1 resnet50:numba2 \
  mobilenetv2:numba1 mobilenetv2:numba2 transformer:numba1 transformer:numba2 mlp:numba1 mlp:numba2 \
  "resnet50:numba2:${A0//;/,}" "resnet18:numba2:${A0//;/,}" "resnet50:numba2:$HONE"
elapsed warm >> $OUT/env.txt
timeout ${QS:-300} taskset -c 0,1 python3 benchmarks/turns.py $M --rounds ${QR:-8} --variant "a0=$A0" \
  --json $OUT/quiet.jsonl > $OUT/quiet.txt 2>&1
elapsed "quiet rc $?" >> $OUT/env.txt
timeout ${LS:-150} taskset -c 0,1 python3 benchmarks/turns.py $M --mode loaded --rounds ${LR:-4} \
  --runtimes numba1,numba,ort2 --variant "hone=$HONE" --json $OUT/loaded.jsonl > $OUT/loaded.txt 2>&1
elapsed "loaded rc $?" >> $OUT/env.txt
rm -f $OUT/warm.err
python3 benchmarks/turns.py --from-json $OUT/quiet.jsonl 2>/dev/null | grep "^|" | tail -7
python3 benchmarks/turns.py --from-json $OUT/loaded.jsonl 2>/dev/null | grep "^|" | tail -7
grep -h "pool" $OUT/quiet.txt $OUT/loaded.txt | cut -c1-300; tail -4 $OUT/env.txt
