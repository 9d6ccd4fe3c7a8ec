#!/usr/bin/env bash
# Session 20's device jobs (issue 11; docs/benchmarks.md, "Round 20"; docs/numba.md, "Pairs beside a spinning pool, the
# heads on one stream, and the huge-page A/B"), each alone on CPUs 0,1 after the Numba cache warms on the other CPUs,
# run in the order JOBS names them (default: "r50 det loaded b8"):
# - r50: ResNet-50 quiet, R50R rounds (10), numba1, numba, reference1 with --probe and the two-thread variants V50
#   (default: a second default process s1 and cpair.TAIL_SHARE 0.4 and 0.5; "" for none);
# - det: the detection head quiet, DETR rounds (9), numba1, numba and old (rnpair.BESIDE_POOL=0: the general path
#   beside a spinning pool worker) and the variants VDET (default: sh05, rnpair.POOL_STALL_SHARE=0.5);
# - loaded: the five models with turns.py's busy loop on one of the two CPUs, LR rounds (4), numba1,numba,ort2;
# - b8: batch 8, BR rounds (3), numba1,ort1,numba,ort2;
# - heads: head_in_model.py on the five CNN heads (12 rounds) with one stream (fgemm.ROW_STREAMS=1), four and
#   np.matmul (gemm.HEAD_ROW=0), then ResNet-50's per-node check alone with --nodes=Add_630;
# - pernode: pernode18_round.sh (the ten models, one thread, eight jobs side by side).
#     OUT=/tmp/o bash benchmarks/round20.sh                       (~280 s)
#     JOBS="det r50" V50="s1=kernels.cpair.TAIL_SHARE=0.25 s2=kernels.cpair.TAIL_SHARE=0.25" OUT=/tmp/o bash benchmarks/round20.sh
set -u
OUT=${OUT:-/tmp/out}
BUDGET=${BUDGET:-585} source "$(dirname "$0")/_round.sh" "$OUT"
export PYTHONWARNINGS=ignore
JOBS=" ${JOBS:-r50 det loaded b8} "
V50=${V50-"s1=kernels.cpair.TAIL_SHARE=0.25 ts40=kernels.cpair.TAIL_SHARE=0.4 ts50=kernels.cpair.TAIL_SHARE=0.5"}
VDET=${VDET-"sh05=kernels.rnpair.POOL_STALL_SHARE=0.5"}
B0=kernels.rnpair.BESIDE_POOL=0
declare -a WARM=() A50=() ADET=()
for v in $V50; do A50+=(--variant "$v"); WARM+=("resnet50:numba2:${v#*=}"); done
for v in $VDET; do ADET+=(--variant "$v"); WARM+=("detection_head:numba2:${v#*=}"); done
[[ $JOBS == *" r50 "* || $JOBS == *" heads "* ]] && WARM+=(resnet50:numba1 resnet50:numba2)
[[ $JOBS == *" det "* ]] && WARM+=(detection_head:numba1 detection_head:numba2 "detection_head:numba2:$B0")
[[ $JOBS == *" loaded "* ]] && for m in resnet18 mobilenetv2 transformer mlp; do WARM+=("$m:numba1" "$m:numba2"); done
[[ $JOBS == *" b8 "* ]] && for m in resnet18_b8 mobilenetv2_b8 transformer_b8; do WARM+=("$m:numba1" "$m:numba2"); done
warm_cache "2,3 4,5 6,7 8,9 10,11 12,13 14,15" "${WARM_S:-90}" "${WARM[@]}"
elapsed warm >> "$OUT/env.txt"
tables=()
for job in $JOBS; do
  case $job in
    r50) pinned 0,1 timeout 150 python3 benchmarks/turns.py resnet50 --rounds "${R50R:-10}" --probe \
           --runtimes numba1,numba,reference1 "${A50[@]}" --json "$OUT/r50.jsonl" > "$OUT/r50.txt" 2>&1 ;;
    det) pinned 0,1 timeout 110 python3 benchmarks/turns.py detection_head --rounds "${DETR:-9}" --runtimes numba1,numba \
           --variant "old=$B0" "${ADET[@]}" --json "$OUT/det.jsonl" > "$OUT/det.txt" 2>&1 ;;
    loaded) pinned 0,1 timeout 190 python3 benchmarks/turns.py resnet18,resnet50,mobilenetv2,transformer,mlp --mode loaded \
              --rounds "${LR:-4}" --runtimes numba1,numba,ort2 --json "$OUT/loaded.jsonl" > "$OUT/loaded.txt" 2>&1 ;;
    b8) pinned 0,1 timeout 85 python3 benchmarks/turns.py resnet18_b8,mobilenetv2_b8,transformer_b8 --rounds "${BR:-3}" \
          --runtimes numba1,ort1,numba,ort2 --json "$OUT/b8.jsonl" > "$OUT/b8.txt" 2>&1 ;;
    heads) for m in resnet50 resnet18 mobilenet_v2 efficientnet_b0 regnet_y_400mf; do
             pinned 0,1 timeout 60 python3 benchmarks/head_in_model.py $m 12 s1=kernels.fgemm.ROW_STREAMS=1 \
               s4=kernels.fgemm.ROW_STREAMS=4 row0=kernels.gemm.HEAD_ROW=0
           done > "$OUT/heads.txt" 2>&1
           pinned 0,1 timeout 60 python3 benchmarks/ops_vs_reference.py resnet50 7 1 --rotate --nodes=Add_630 \
             > "$OUT/ops_r50.txt" 2>&1 ;;
    pernode) BUDGET=150 RUNS=5 bash benchmarks/pernode18_round.sh "$OUT/pn" > "$OUT/pernode.txt" 2>&1
             rm -rf "$OUT/pn" ;;
  esac
  elapsed "$job" >> "$OUT/env.txt"
  [ -f "$OUT/$job.jsonl" ] && tables+=("$job")
done
rm -f "$OUT/warm.err"
for f in "${tables[@]}"; do
  python3 benchmarks/turns.py --from-json "$OUT/$f.jsonl" 2>/dev/null | grep "^|" | grep -v "^|---" | cut -c1-400
done
for f in "${tables[@]}"; do grep -h "one host speed\|pool" "$OUT/$f.txt" | cut -c1-300; done
[[ $JOBS == *" heads "* ]] && { grep "^|\|^##" "$OUT/heads.txt" | grep -v "^|---\|^| session"; grep -E "Gemm|node Add" "$OUT/ops_r50.txt"; }
[[ $JOBS == *" pernode "* ]] && grep -E "^## |sum\*|nodes where|of them|slower on" "$OUT/pernode.txt" | cut -c1-200
tail -6 "$OUT/env.txt"
