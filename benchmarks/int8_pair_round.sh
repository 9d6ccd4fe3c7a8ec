#!/usr/bin/env bash
# Old against new tree on the int8 MLP and transformer at one and two threads, one contender a process
# (quantized.py --only), pinned to CPUs 0,1, one job at a time, processes alternating (docs/quantization.md,
# "Two threads for the last int8 ratios (issue 16, session 9)"):
#   bash benchmarks/int8_pair_round.sh OUT OLD_TREE [repeats] [budget seconds]
# OLD_TREE: an exported checkout (git archive) whose packages go first on PYTHONPATH; the new tree is the
# installed one. Warm-up (Numba compiles) of both trees side by side on CPUs 2-5, then repeats of:
# MLP kk int8 at 2 and 1 threads old/new (order alternating by repeat), the new tree's MLP at 2 threads with
# KERNELKIT_INT8_PAIR=off, onnxruntime int8 at 2 and 1 threads, the transformer kk int8 at 2 threads
# old/new and onnxruntime's; steps stop starting once the budget is spent. Then the in-process pair
# A/B (quantized_pair.py) and the table (median ms, kk / ort of the same repeat's row).
set -u
OUT=${1:-/tmp/out}; OLD=$(cd "${2:?old tree}" && pwd); REPEATS=${3:-3}; BUDGET=${4:-200}; mkdir -p "$OUT"
export KERNELKIT_NUMBA_START=eager PYTHONWARNINGS=ignore PYTHONUNBUFFERED=1 OPENBLAS_NUM_THREADS=1
KEEP=${KEEP:-/tmp/kk_int8_models}
OLDPP="$OLD/packages/core/src:$OLD/packages/cpu_numba/src:$OLD/packages/converters/src:${PYTHONPATH:-}"
T=$(date +%s)
{ lscpu | grep -E "Model name|^CPU\(s\)|L2"; python3 -c "import numba, onnxruntime; print('numba', numba.__version__, 'ort', onnxruntime.__version__)"
  PYTHONPATH=$OLDPP python3 -c "import kernelkit_numba; print('old tree:', kernelkit_numba.__file__)"
  python3 -c "import kernelkit_numba.kernels.qpair as q; print('new tree:', q.__file__)"
  date -u; uptime; } 2>&1 | tee "$OUT/host.txt"
one() { # label model threads key rounds cpus [env...]
  local label=$1 model=$2 t=$3 key=$4 n=$5 cpus=$6; shift 6
  local left=$(( BUDGET - ($(date +%s) - T) ))
  if [ "$left" -lt 8 ]; then echo "skip $label $model t$t (budget)" >> "$OUT/ab.txt"; return; fi
  local ms
  ms=$(env "$@" timeout $(( left < 60 ? left : 60 )) taskset -c "$cpus" python3 benchmarks/quantized.py --models "$model" \
       --threads "$t" --rounds "$n" --reduce-range off --keep "$KEEP" --only "$key" 2>>"$OUT/stderr.txt" | tail -1 \
       | sed 's/.*median_ms": //; s/}//')
  echo "$label $model t$t ${ms:-none} $(( $(date +%s) - T ))s r${R:-0}" | tee -a "$OUT/ab.txt"
}
KK="kk numba int8"
OR="ort int8"
# the int8 models once, then both trees' Numba compiles side by side (CPUs 2,3 and 4,5)
one make-models mlp 1 "$OR" 3 0,1 X=1
one make-models transformer 1 "$OR" 3 0,1 X=1
( one warm-new mlp 2 "$KK" 3 "${WARM_A:-2,3}" X=1; one warm-new transformer 2 "$KK" 3 "${WARM_A:-2,3}" X=1 ) &
( one warm-old mlp 2 "$KK" 3 "${WARM_B:-4,5}" PYTHONPATH="$OLDPP"; one warm-old transformer 2 "$KK" 3 "${WARM_B:-4,5}" PYTHONPATH="$OLDPP" ) &
wait
for r in $(seq 1 "$REPEATS"); do
  R=$r
  if [ $((r % 2)) = 1 ]; then
    one old mlp 2 "$KK" 200 0,1 PYTHONPATH="$OLDPP"; one new mlp 2 "$KK" 200 0,1 X=1
  else
    one new mlp 2 "$KK" 200 0,1 X=1; one old mlp 2 "$KK" 200 0,1 PYTHONPATH="$OLDPP"
  fi
  one ort mlp 2 "$OR" 200 0,1 X=1
  one new-pairoff mlp 2 "$KK" 200 0,1 KERNELKIT_INT8_PAIR=off
  one new mlp 1 "$KK" 200 0,1 X=1
  one ort mlp 1 "$OR" 200 0,1 X=1
  [ "$r" -le 2 ] && one old mlp 1 "$KK" 200 0,1 PYTHONPATH="$OLDPP"
  if [ $((r % 2)) = 1 ]; then
    one old transformer 2 "$KK" 40 0,1 PYTHONPATH="$OLDPP"; one new transformer 2 "$KK" 40 0,1 X=1
  else
    one new transformer 2 "$KK" 40 0,1 X=1; one old transformer 2 "$KK" 40 0,1 PYTHONPATH="$OLDPP"
  fi
  one ort transformer 2 "$OR" 40 0,1 X=1
  [ "$r" = 1 ] && { one new transformer 1 "$KK" 40 0,1 X=1; one ort transformer 1 "$OR" 40 0,1 X=1; }
done
left=$(( BUDGET + 25 - ($(date +%s) - T) ))
[ "$left" -gt 6 ] && timeout "$left" taskset -c 0,1 python3 benchmarks/quantized_pair.py mlp --runs 2000 \
  2>>"$OUT/stderr.txt" | tail -1 | tee "$OUT/pair.txt"
echo "done $(date -u +%T), $(( $(date +%s) - T )) s" | tee -a "$OUT/ab.txt"
# the table: each kk figure over the onnxruntime figure of the same repeat (model, threads)
python3 - "$OUT/ab.txt" <<'EOF' | tee "$OUT/table.txt"
import statistics
import sys

rows, ort = [], {}
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) < 6 or p[0].startswith(("skip", "warm", "make", "done")) or p[3] == "none":
        continue
    label, model, t, ms, r = p[0], p[1], p[2], float(p[3]), p[5]
    if label == "ort":
        ort[(model, t, r)] = ms
    else:
        rows.append((label, model, t, ms, r))
print("| label | model | threads | repeat | kk ms | ort ms (same repeat) | kk / ort |")
print("|---|---|---|---|---:|---:|---:|")
for label, model, t, ms, r in rows:
    same = [v for (m, tt, _), v in ort.items() if (m, tt) == (model, t)]
    ref = ort.get((model, t, r), statistics.median(same) if same else float("nan"))
    print(f"| {label} | {model} | {t} | {r} | {ms:.4f} | {ref:.4f} | {ms / ref:.2f}x |")
EOF
cd "$OUT" && tar czf /tmp/q8last_round.tgz ./*.txt && mv /tmp/q8last_round.tgz "$OUT/"
