#!/usr/bin/env bash
# Issue 11, session 10 (docs/numba.md, "The strided layers at one thread"): one call to the GPU
# machine's Xeon, parts side by side on their own cores (they share the L3: ratios within a part count):
#   CPUs 10,11 first: every kernel of ResNet-18 and ResNet-50 compiled into the A/B's Numba caches (the
#              base tree on 10; this tree on 11, with conv.DIRECT off and DIRECT_SMALL on too), so that
#              no timed process starts cold
#   CPU 0      ResNet-18 at one thread, every node against onnxruntime's profile: the base tree (BASE:
#              `git archive` of the branch point) and this one in alternating processes, with turns of
#              this tree with conv.DIRECT off (the paths before fdirect.py) and DIRECT_SMALL on (the
#              512@7 3x3 layers direct instead of F(2x2, 3x3) Winograd) (vs_ort_nodes.py --base)
#   CPU 2      ResNet-50 the same way (base, new, DIRECT off)
#   CPU 4      the strided layers alone: direct against the paths before and onnxruntime
#              (bench_strided.py)
#   CPUs 8,9   the tests of what this round changed (test_fdirect.py, test_ftile.py's strided cases)
# Usage (repository root, after `source .whl/prelude.sh` on the device):
#   BASE=DIR bash benchmarks/strided_round.sh OUTDIR
# (CPU_WARM_BASE, CPU_WARM_NEW, CPU_R18, CPU_R50, CPU_ALONE, CPU_TESTS move the parts; BUDGET, ROUNDS,
# RUNS as named.)
set -u
ROUND_BUDGET=150
. "$(dirname "$0")/_round.sh"
BASE=${BASE:?the base tree}
BASE=$(cd "$BASE" && pwd)
NEW=$(pwd)
RUNS=${RUNS:-8}
mkdir -p "$OUT/r18" "$OUT/r50"
ln -sfn "$OUT/r18/numba_cache_base" "$OUT/r50/numba_cache_base"  # one cache per tree for both models
ln -sfn "$OUT/r18/numba_cache_new" "$OUT/r50/numba_cache_new"
cat > "$OUT/warm.py" <<'PYEOF'
import ast, importlib, sys
sys.path.insert(0, "benchmarks")
import kernelkit
from bench_e2e_interleaved import batched
for spec in [""] + sys.argv[1:]:
    if spec:
        target, value = spec.split("=", 1)
        mod, attr = target.rsplit(".", 1)
        setattr(importlib.import_module(f"kernelkit_numba.{mod}"), attr, ast.literal_eval(value))
    for name in ("resnet18", "resnet50"):
        proto, model, feed = batched(name, 1)
        kernelkit.Session(model, vendors=["numba", "reference"], threads=1).run(None, feed)
    print("warm", spec or "default", flush=True)
PYEOF
warm() {  # CPU TREE NAME [module.ATTR=value ...]: ResNet-18 and ResNet-50 built and run once per setting
  local cpu=$1 tree=$2 name=$3
  shift 3
  pinned "$cpu" env PYTHONPATH="$tree/packages/core/src:$tree/packages/cpu_numba/src:$tree/packages/converters/src:${PYTHONPATH:-}" \
    NUMBA_CACHE_DIR="$OUT/r18/numba_cache_$name" $PY "$OUT/warm.py" "$@"
}
(
  warm "${CPU_WARM_BASE:-10}" "$BASE" base > "$OUT/warm_base.txt" 2>&1 &
  warm "${CPU_WARM_NEW:-11}" "$NEW" new kernels.conv.DIRECT=False kernels.conv.DIRECT_SMALL=True \
    > "$OUT/warm_new.txt" 2>&1 &
  wait
  left=$(( DEADLINE - $(date +%s) - 15 ))
  pinned "${CPU_R18:-0}" $PY benchmarks/vs_ort_nodes.py resnet18 --base "$BASE" --rounds "${ROUNDS:-3}" --runs "$RUNS" \
    --budget "$left" --out "$OUT/r18" --variant "nodirect:resnet18:kernels.conv.DIRECT=False" \
    --variant "small:resnet18:kernels.conv.DIRECT_SMALL=True" > "$OUT/r18.txt" 2>&1 &
  pinned "${CPU_R50:-2}" $PY benchmarks/vs_ort_nodes.py resnet50 --base "$BASE" --rounds "${ROUNDS:-3}" --runs "$RUNS" \
    --budget $(( left - 10 )) --out "$OUT/r50" --variant "nodirect:resnet50:kernels.conv.DIRECT=False" \
    > "$OUT/r50.txt" 2>&1 &
  wait
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc4
  pinned "${CPU_ALONE:-4}" $PY benchmarks/bench_strided.py 15 > "$OUT/strided.txt" 2>&1
) &
(
  export NUMBA_CACHE_DIR=/tmp/kk_nc8
  pinned "${CPU_TESTS:-8,9}" $PY -m pytest packages/cpu_numba/tests/test_fdirect.py -q -x -p no:cacheprovider \
    > "$OUT/tests.txt" 2>&1
  pinned "${CPU_TESTS:-8,9}" $PY -m pytest packages/cpu_numba/tests/test_ftile.py -q -x -p no:cacheprovider \
    -k "strided or session" >> "$OUT/tests.txt" 2>&1
) &
wait
