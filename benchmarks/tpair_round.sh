#!/usr/bin/env bash
# The transformer pairs' device round (kernels/tpair.py, issue 11, session 12): the transformer and transformer_b8
# at two threads with attention, LayerNorm and Softmax as halves on fpair's helper (numba default) and without
# (the variant old: tpair.ON=0, the pool as before), beside numba 1t and onnxruntime 1t / 2t, each model its own
# turns.py job on its own CPU pair (quiet); the transformer loaded (a busy loop on the first CPU of LCPUS);
# GPT-2 and BERT (4 layers of the published shapes, a 2048-word vocabulary) default against old. First one
# untimed run of each (model, setting, threads) in parallel processes warms the Numba cache. Every file lands
# in OUT; the tables come last.
#     OUT=/tmp/out bash benchmarks/tpair_round.sh
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ROUNDS=${ROUNDS:-7}
OFF=kernels.tpair.ON=0
# more A/B runtimes for both quiet tables, e.g. VARIANTS="hic=kernels.fpair.HICCUP_S=0.1", and for the batch-1 one
# alone (VARIANTS1)
VARIANTS=${VARIANTS:-}
VARIANTS1=${VARIANTS1:-}
more=(); for v in $VARIANTS; do more+=(--variant "$v"); done
more1=("${more[@]}"); for v in $VARIANTS1; do more1+=(--variant "$v"); done
export PYTHONUNBUFFERED=1 KERNELKIT_NUMBA_START=eager PYTHONWARNINGS=ignore
{ lscpu | grep -E "Model name|^CPU\(s\)|L2|Thread"; nproc; date -u; } > "$OUT/env.txt" 2>&1
log() { echo "$(date -u +%T) +${SECONDS}s $*" >> "$OUT/log.txt"; }
# CPU pairs: the quiet batch-1 job, batch 8, the loaded job, GPT-2 / BERT; the warm-up's processes (WARM_CPUS: one pair
# each, in turn); on a machine of two CPUs all 0,1 (a dry run)
QCPUS=${QCPUS:-0,1}; BCPUS=${BCPUS:-4,5}; LCPUS=${LCPUS:-2,3}; OCPUS=${OCPUS:-6,7}
read -r -a warm_cpus <<< "${WARM_CPUS:-4,5 6,7 8,9 10,11 12,13 14,15}"
i=0
for m in transformer transformer_b8 gpt2_l4,bert_l4; do
  for set in "" "$OFF"; do
    ( timeout "${WARM_S:-40}" taskset -c "${warm_cpus[$((i % ${#warm_cpus[@]}))]}" python3 benchmarks/warm_cache.py $m \
        --threads 1,2 --set "$set" >> "$OUT/warm.txt" 2>> "$OUT/warm.err" ) &
    i=$((i + 1))
  done
done
wait
log "warm"
turns() {  # CPUS NAME MODELS ARGS...
  local cpus=$1 name=$2 models=$3; shift 3
  ( taskset -c "$cpus" timeout "${TURNS_S:-95}" python3 benchmarks/turns.py "$models" --variant "old=$OFF" "$@" \
      --json "$OUT/$name.jsonl" > "$OUT/$name.md" 2> "$OUT/$name.err"; log "$name rc=$?" ) &
}
turns "$QCPUS" quiet transformer --rounds "$ROUNDS" --runtimes numba1,numba,ort1,ort2 "${more1[@]}"
turns "$BCPUS" quiet_b8 transformer_b8 --rounds "$ROUNDS" --runtimes numba1,numba,ort1,ort2 "${more[@]}"
turns "$LCPUS" loaded transformer --mode loaded --rounds "${LROUNDS:-4}" --runtimes numba1,numba,ort2
turns "$OCPUS" others gpt2_l4,bert_l4 --rounds "${OROUNDS:-5}" --runtimes numba,ort2
wait
log "done"
cat "$OUT/env.txt" "$OUT/log.txt" "$OUT/warm.txt"
tail -3 "$OUT"/*.err 2>/dev/null
for f in others loaded quiet_b8 quiet; do echo; echo "## $f"; cat "$OUT/$f.md"; done
grep "Model name" "$OUT/env.txt"
