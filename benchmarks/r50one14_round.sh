#!/usr/bin/env bash
# Issue 11, session 14 (r50one14; docs/numba.md, "ResNet-50's 1x1 and 3x3 layers at one thread"): the Xeon calls
# of the round, every job one thread and pinned to its own CPUs, side by side. Call 1 ("profile"): ResNet-50 per
# kind against onnxruntime and the reference, and per kind with the one-thread switches there were; call 2
# ("tiles"): the cols tile shapes and K chunks alone and in the model, whole models in turns; call 3 ("chunks"):
# the K chunk of 128 in turns and per kind. nodes_ab's "ctl" variant is the default itself in a session of its
# own: its ratios are the noise of a kind between sessions.
#   bash benchmarks/r50one14_round.sh profile|tiles|chunks OUT
O=${2:-/tmp/out}; mkdir -p "$O"; cd "$(dirname "$0")" || exit 1
export KERNELKIT_NUMBA_START=eager
C="kernels.conv"
KALL="kall=$C.FTILE_COLS_KC_ONE_THREAD=128;$C.FTILE_COLS_KC_SMALL_ONE_THREAD=128"
OLD="old=$C.FTILE_COLS_KC_ONE_THREAD=0;$C.FTILE_COLS_KC_SMALL_ONE_THREAD=0"  # (after the round: the defaults are kall)
case "$1" in
profile)
  timeout 60 taskset -c 0,1 python3 nodes_ab.py resnet50 1 > "$O/warm.txt" 2>&1
  timeout 110 taskset -c 0,1 python3 vs_ort_nodes.py resnet50 --threads 1 --runs 10 --reference > "$O/vs.txt" 2>&1 &
  timeout 110 taskset -c 2,3 python3 nodes_ab.py resnet50 9 c196k128=$C.FTILE_COLS_KC_ONE_THREAD=128 \
    kc512=kernels.ftile.KC12=512 blk1m=kernels.ftile.BLOCK_BYTES12=1048576 kc144=kernels.fdirect.KC=144 \
    small0=$C.DIRECT_SMALL=0 > "$O/ab1.txt" 2>&1 &
  timeout 110 taskset -c 4,5 python3 nodes_ab.py resnet50 9 r8=kernels.ftile.ROWS12_ONE_THREAD=0 \
    cols64=$C.FTILE_COLS_MAX_ONE_THREAD=64 tmaj=kernels.ftile.ROWS_TILE_MAJOR=1 \
    wtb1m=kernels.winograd.TILE_BYTES=1048576 kc384=kernels.fdirect.KC=384 > "$O/ab2.txt" 2>&1 &
  timeout 110 taskset -c 6,7 python3 turns.py resnet50 --rounds 5 --runtimes numba1,ort1,reference1 > "$O/turns.txt" 2>&1 &
  wait ;;
tiles)
  V="ctl=$C.DIRECT=1 k14=$C.FTILE_COLS_KC_ONE_THREAD=128 k7=$C.FTILE_COLS_KC_SMALL_ONE_THREAD=128
     t46=$C.COLS_TILE_ONE_THREAD=4x6 t46s=$C.COLS_TILE_SMALL_ONE_THREAD=4x6 t38=$C.COLS_TILE_ONE_THREAD=3x8
     fdk144=kernels.fdirect.KC=144 kc12=kernels.ftile.KC12=256"
  R=$(echo $V | tr ' ' '\n' | tac | tr '\n' ' ')
  # shellcheck disable=SC2086
  timeout 70 taskset -c 0,1 python3 nodes_ab.py resnet50 1 $V > "$O/warm.txt" 2>&1
  # shellcheck disable=SC2086
  timeout 120 taskset -c 0,1 python3 nodes_ab.py resnet50 12 $V > "$O/abA.txt" 2>&1 &
  # shellcheck disable=SC2086
  timeout 120 taskset -c 2,3 python3 nodes_ab.py resnet50 12 $R > "$O/abB.txt" 2>&1 &
  timeout 120 taskset -c 4 python3 bench_cols_tiles.py 15 both > "$O/cols.txt" 2>&1 &
  timeout 120 taskset -c 6,7 python3 turns.py resnet50 --rounds 8 --runtimes numba1,ort1,reference1 \
    --variant1 "$KALL" --variant1 fdk144=kernels.fdirect.KC=144 > "$O/t50.txt" 2>&1 &
  timeout 120 taskset -c 8,9 python3 turns.py resnet18 --rounds 8 --runtimes numba1,ort1,reference1 \
    --variant1 "$KALL" --variant1 fdk144=kernels.fdirect.KC=144 > "$O/t18.txt" 2>&1 &
  wait ;;
chunks)
  V="ctl=$C.DIRECT=1 k14=$C.FTILE_COLS_KC_ONE_THREAD=128 k7=$C.FTILE_COLS_KC_SMALL_ONE_THREAD=128
     k14s64=$C.FTILE_COLS_KC_ONE_THREAD=64 k7s64=$C.FTILE_COLS_KC_SMALL_ONE_THREAD=64
     c784=$C.FTILE_COLS_MAX_ONE_THREAD=784;$C.FTILE_COLS_KC_ONE_THREAD=128
     c3136=$C.FTILE_COLS_MAX_ONE_THREAD=3136;$C.FTILE_COLS_KC_ONE_THREAD=128"
  R=$(echo $V | tr ' ' '\n' | tac | tr '\n' ' ')
  timeout 60 taskset -c 0,1 python3 nodes_ab.py resnet50 1 "c784=$C.FTILE_COLS_MAX_ONE_THREAD=784" > "$O/warm.txt" 2>&1
  timeout 85 taskset -c 0,1 python3 turns.py resnet50 --rounds 10 --runtimes numba1,ort1,reference1 --variant1 "$KALL" \
    > "$O/t50a.txt" 2>&1 &
  timeout 85 taskset -c 2,3 python3 turns.py resnet50 --rounds 10 --runtimes numba1,ort1 --variant1 "$KALL" \
    --variant1 "k64=$C.FTILE_COLS_KC_ONE_THREAD=64;$C.FTILE_COLS_KC_SMALL_ONE_THREAD=64" \
    --variant1 "c784=$C.FTILE_COLS_MAX_ONE_THREAD=784;$C.FTILE_COLS_KC_ONE_THREAD=128" > "$O/t50b.txt" 2>&1 &
  timeout 85 taskset -c 4,5 python3 turns.py resnet18 --rounds 10 --runtimes numba1,ort1,reference1 --variant1 "$KALL" \
    > "$O/t18.txt" 2>&1 &
  # shellcheck disable=SC2086
  timeout 85 taskset -c 6,7 python3 nodes_ab.py resnet50 12 $V > "$O/abA.txt" 2>&1 &
  # shellcheck disable=SC2086
  timeout 85 taskset -c 8,9 python3 nodes_ab.py resnet50 12 $R > "$O/abB.txt" 2>&1 &
  wait ;;
*) echo "usage: $0 profile|tiles|chunks OUT"; exit 2 ;;
esac
for f in "$O"/*.txt; do echo "== $f"; grep -h "^| \|quiet:" "$f" | tail -40 | cut -c1-400; done
echo "(the variants' defaults after the round: $OLD is the setting before it)"
