# r50c17's Xeon call (issue 11, session 17; docs/numba.md, "ResNet-50's 14x14 1x1 halves on the one-thread tiles"):
# pair_rate14.py alone on CPUs 0,1 with six variants, then nodes_ab2t.py resnet50 with the two K cuts. After the
# prelude: OUT=$OUT bash benchmarks/pair14_round.sh (105 s; ~70 s from a cold cache on the H100 host)
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=105 source benchmarks/_round.sh "$OUT"
export KERNELKIT_NUMBA_START=eager PYTHONUNBUFFERED=1 PYTHONWARNINGS=ignore
CW="kernels.conv_serial.PAIR_COLS_MAX=196;kernels.cpair.COLS_WHOLE=1;kernels.cpair.COLS_KC_ONE_THREAD=1"
C="kernels.conv_serial.PAIR_COLS_MAX=196;kernels.cpair.COLS_KC_ONE_THREAD=1"
CWP="$CW;kernels.cpair.COLS_SPLIT=0"
KS="kernels.cpair.K_SPLIT_PARALLEL=196"
CWKS="$CW;kernels.conv_serial.PAIR_COLS_PROJECTIONS=0;kernels.cpair.K_SPLIT_PARALLEL=196"
CWK="$CW;kernels.cpair.K_SPLIT_PARALLEL=196;kernels.cpair.COLS_K_SPLIT=1"
V=("cw=$CW" "c=$C" "cwp=$CWP" "ks=$KS" "cwks=$CWKS" "cwk=$CWK")
lscpu | grep "Model name" | tee -a "$OUT/env.txt"
taskset -c 2,3 timeout 44 python3 benchmarks/pair_rate14.py 1 2 "${V[@]}" --no-seq > "$OUT/warm14.txt" 2>&1 &
W=$!
warm_cache "4,5 6,7 8,9 10,11 12,13 14,15" 44 resnet50:numba1 resnet50:numba2 "resnet50:numba2:${CWK//;/,}" \
  "resnet50:numba2:${CWKS//;/,}"
wait $W
elapsed warm | tee -a "$OUT/env.txt"
timeout 26 taskset -c 0,1 python3 benchmarks/pair_rate14.py 20 5 "${V[@]}" --no-backoff > "$OUT/rate14.md" 2> "$OUT/rate14.err"
elapsed rate14 | tee -a "$OUT/env.txt"
left=$(( DEADLINE - $(date +%s) - 3 ))
timeout "$left" taskset -c 0,1 python3 benchmarks/nodes_ab2t.py resnet50 10 "cwk=$CWK" "cwks=$CWKS" > "$OUT/ab2t.md" 2> "$OUT/ab2t.err"
elapsed ab2t | tee -a "$OUT/env.txt"
tail -3 "$OUT/warm14.txt" "$OUT/warm.err" 2>/dev/null | cut -c1-200
grep -v "^|---\|reference" "$OUT/rate14.md"; tail -3 "$OUT/rate14.err"
echo "== ab2t"; grep "@14\|@28\|kind\|sum\|Sum\|##" "$OUT/ab2t.md" | grep -v "^|---" | head -30; tail -3 "$OUT/ab2t.err"
