#!/usr/bin/env bash
# Start-up A/B on the device machine (docs/numba.md, "Warm start, again (issue 11, session 7)"): this
# tree against BASE (another checkout, e.g. main), each installed into a folder of its own (pip
# --target, entry points included, as .whl/prelude.sh installs this one), their processes alternated:
#   cores 0,1  bench_first_run.py resnet18, tiered (empty and warm cache), ROUNDS rounds
#   cores 2,3  bench_warm_start.py resnet18, tiered and eager, 5 alternated processes a side; then the
#              transformer and MobileNetV2, tiered, 3 a side
#   cores 4,5  bench_int8_start.py (the test-size int8 models), eager, empty and warm cache
# The three run at the same time on their own cores (the host has other jobs too: ratios only).
#   BASE=../.kk_warm_base BUDGET=270 bash benchmarks/warm_round.sh OUT
set -u
ROUND_BUDGET=270
source "$(dirname "$0")/_round.sh"
unset KERNELKIT_NUMBA_START  # the benches set it per process
BASE=${BASE:?BASE: the baseline tree}
ROUNDS=${ROUNDS:-2}
AB=/tmp/kk_ab
rm -rf "$AB"
for side in new old; do
  src=$PWD; [ "$side" = old ] && src=$(cd "$BASE" && pwd)
  mkdir -p "$AB/$side/packages/site"
  pkgs=$(ls -d "$src"/packages/*/ | while read -r p; do [ -f "$p/pyproject.toml" ] && echo "$p"; done)
  $PY -m pip install -q --no-index --no-deps --no-build-isolation --upgrade --target "$AB/$side/packages/site/src" \
    $pkgs 2>&1 | grep -v -i -E "warning|already exists"
  ln -sfn "$src/benchmarks" "$AB/$side/benchmarks"
done
echo "installed: $(date -u +%T)" >> "$OUT/env.txt"
NEW=$AB/new/packages/site/src
# "new" takes PYTHONPATH from the environment, "old" the --old tree's packages/*/src
run_ab() { PYTHONPATH=$NEW pinned "$@"; }
(run_ab 0,1 $PY "$AB/new/benchmarks/bench_first_run.py" resnet18 /tmp/kk_fr tiered --old "$AB/old" \
   --rounds "$ROUNDS" > "$OUT/first_run.txt" 2>&1) &
(run_ab 2,3 $PY "$AB/new/benchmarks/bench_warm_start.py" resnet18 --old "$AB/old" --rounds 5 \
   --modes tiered,eager --cpus 2,3 > "$OUT/warm_start.txt" 2>&1
 for m in transformer mobilenetv2; do
   run_ab 2,3 $PY "$AB/new/benchmarks/bench_warm_start.py" $m --old "$AB/old" --rounds 3 --modes tiered \
     --cpus 2,3 >> "$OUT/warm_start.txt" 2>&1
 done) &
(run_ab 4,5 $PY "$AB/new/benchmarks/bench_int8_start.py" --small --models resnet18,mlp,transformer \
   --old "$AB/old" > "$OUT/int8_start.txt" 2>&1) &
wait
echo "done: $(date -u +%T)" >> "$OUT/env.txt"
