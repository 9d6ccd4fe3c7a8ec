#!/usr/bin/env bash
# Issue 11, session 9 (docs/numba.md, "ResNet-50 and the MLP at one thread"): one call to the GPU
# machine's Xeon, parts side by side on their own cores (they share the L3: ratios within a part count):
#   CPU 0      ResNet-50 and the MLP b64 at one thread, every node against onnxruntime's profile, the
#              base tree (BASE: `git archive` of the branch point) and this one in alternating
#              processes, with this tree's variants (ResNet-50 on 8-row panels only; the MLP on
#              fgemm's 12-row tiles and on K chunks of 256) as more turns (vs_ort_nodes.py --base)
#   CPU 2      ftile's rows tiles alone on ResNet-50's shapes: 8 vs 12 rows, packed or in place, K
#              chunks, the loop order (bench_rows_tiles.py)
#   CPU 4      fgemm on the MLP's shapes against np.dot and ORT's MatMul, with its variations
#              (bench_fgemm.py)
#   CPUs 8,9   the tests of what this round changed (test_ftile.py rows/session, test_fgemm.py)
# Usage (repository root, after `source .whl/prelude.sh` on the device):
#   BASE=DIR bash benchmarks/one_thread_round.sh OUTDIR
# (CPU_AB, CPU_ROWS, CPU_FGEMM, CPU_TESTS move the parts; BUDGET, ROUNDS, RUNS as named.)
set -u
ROUND_BUDGET=160
. "$(dirname "$0")/_round.sh"
BASE=${BASE:?the base tree}
RUNS=${RUNS:-6}
(
  left=$(( DEADLINE - $(date +%s) - 35 ))  # no process starts later: a cold one takes ~25 s
  pinned "${CPU_AB:-0}" $PY benchmarks/vs_ort_nodes.py resnet50,mlp --base "$BASE" --rounds "${ROUNDS:-2}" --runs "$RUNS" \
    --budget "$left" --out "$OUT/ab" --reference mlp \
    --variant "rows8:resnet50:kernels.ftile.ROWS12_ON=False" \
    --variant "mr12:mlp:kernels.fgemm.MR={0: 4, 1: 6, 2: 12}" \
    --variant "kc256:mlp:kernels.fgemm.KC=256" > "$OUT/ab.txt" 2>&1
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc2
  pinned "${CPU_ROWS:-2}" $PY benchmarks/bench_rows_tiles.py 10 > "$OUT/rows_tiles.txt" 2>&1
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc4
  pinned "${CPU_FGEMM:-4}" $PY benchmarks/bench_fgemm.py 20 1 64x784x1024,64x1024x1024,64x1024x10,128x256x256,128x256x1024,128x1024x256 > "$OUT/fgemm.txt" 2>&1
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc8
  pinned "${CPU_TESTS:-8,9}" $PY -m pytest packages/cpu_numba/tests/test_fgemm.py -q -x -p no:cacheprovider -k "mixed or against" \
    > "$OUT/tests.txt" 2>&1
  pinned "${CPU_TESTS:-8,9}" $PY -m pytest packages/cpu_numba/tests/test_ftile.py -q -x -p no:cacheprovider -k "rows or session" \
    >> "$OUT/tests.txt" 2>&1
) &
wait
