#!/usr/bin/env bash
# The huge-page A/B of session 19 (issue 11; docs/numba.md, "Uneven cores on the H200 host"): on a host whose
# transparent huge pages are `madvise` only, ResNet-50's default in seven processes in turns alone on CPUs 0,1, 6
# rounds after the cache warms: two with the default's settings (the second under another label), two started with
# glibc's malloc madvising its heap (GLIBC_TUNABLES=glibc.malloc.hugetlb=1, passed by turns.py at each process's
# start), two with config.HUGE_SLAB (kernelkit_numba's small arrays on slabs of huge pages, 32 MiB), and numba 1t with
# each. Whether the processes' spread (one side of the pairs slower for a whole process) goes with the pages. First:
# each glibc setting's AnonHugePages for a 200 MB array (NumPy advises only arrays of 4 MiB and up).
#     OUT=/tmp/out bash benchmarks/thp19_round.sh      (after the device prelude; ~170 s)
set -u
OUT=${OUT:-/tmp/out}
BUDGET=${BUDGET:-220} source "$(dirname "$0")/_round.sh" "$OUT"
export KERNELKIT_NUMBA_START=eager PYTHONWARNINGS=ignore
T="GLIBC_TUNABLES=glibc.malloc.hugetlb=1"
S="kernels.cpair.TAIL_SHARE=0.25"  # (the default's own value: a second default process)
H="config.HUGE_SLAB=33554432"
cat /sys/kernel/mm/transparent_hugepage/enabled | tee -a "$OUT/env.txt"
for t in "" "glibc.malloc.hugetlb=1"; do
  GLIBC_TUNABLES=$t python3 -c "import numpy as np; a = np.ones(50_000_000, np.float32); \
print('GLIBC_TUNABLES=[$t]', [l.strip() for l in open('/proc/self/smaps_rollup') if l.startswith('AnonHuge')])"
done | tee -a "$OUT/env.txt"
warm_cache "2,3 4,5" 55 resnet50:numba1 resnet50:numba2
elapsed warm | tee -a "$OUT/env.txt"
pinned 0,1 python3 benchmarks/turns.py resnet50 --runtimes numba,numba1 --variant "s1=$S" \
  --variant "t1=$T" --variant "t2=$T" --variant "h1=$H" --variant "h2=$H" --variant1 "t1x=$T" --variant1 "h1x=$H" \
  --rounds 6 --json "$OUT/thp.jsonl" \
  > "$OUT/thp.txt" 2>&1
elapsed turns | tee -a "$OUT/env.txt"
grep "^resnet50\|host speed" "$OUT/thp.txt" | cut -c1-300
python3 benchmarks/turns_bests.py "$OUT/thp.jsonl" 2>&1 | tail -30 | cut -c1-160
