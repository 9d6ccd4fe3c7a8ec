# exp18's follow-up Xeon call (issue 11, session 18; docs/numba.md, "ResNet-50's expansions and strided 1x1 layers at
# two threads"): the cuts built after exp18's one call, per kind in ResNet-50 at two threads, two processes on disjoint
# CPU pairs (the same variants, each process its own rotation), then the whole model in turns alone on CPUs 0,1.
# After the prelude: OUT=$OUT bash benchmarks/exp18_round.sh (BUDGET 240 s; ~60 s of it the cache)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=${BUDGET:-240} source benchmarks/_round.sh "$OUT"
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
SUB="kernels.cpair.SUB_SPLIT=1"
OWN="$SUB;kernels.cpair.SUB_OWN=1"
PX="kernels.cpair.EXPAND_PIXELS=3136"
ALL="$OWN;$PX;kernels.cpair.WARM=1"
V=("sub=$SUB" "own=$OWN" "px=$PX" "all=$ALL")
lscpu | grep "Model name" | tee -a "$OUT/env.txt"
warm_cache "2,3 4,5 6,7 8,9 10,11 12,13" 50 resnet50:numba1 resnet50:numba2 "resnet50:numba2:${ALL//;/,}" \
  "resnet50:numba2:${SUB//;/,}"
elapsed warm | tee -a "$OUT/env.txt"
pinned 0,1 python3 benchmarks/nodes_ab2t.py resnet50 12 "${V[@]}" > "$OUT/abA.md" 2> "$OUT/abA.err" &
A=$!
pinned 2,3 python3 benchmarks/nodes_ab2t.py resnet50 12 "${V[@]}" > "$OUT/abB.md" 2> "$OUT/abB.err" &
wait $A "$!"
elapsed ab | tee -a "$OUT/env.txt"
left=$(( DEADLINE - $(date +%s) - 5 ))
pinned 0,1 python3 benchmarks/turns.py resnet50 --runtimes numba,ort2,numba1 --variant "all=$ALL" --rounds 7 \
  > "$OUT/turns.md" 2> "$OUT/turns.err"
elapsed turns | tee -a "$OUT/env.txt"
for f in abA abB; do echo "== $f"; grep "1x1\|kind\|sum" "$OUT/$f.md" | grep -v "^|---" | cut -c1-200; done
echo "== turns"; tables "$OUT/turns.md" | tail -12
