#!/usr/bin/env bash
# pernode13_round.sh (issue 11, session 13): the per-node checks with the session-13 switches on and off
# (fuse_matmul_residual, NEST_CONCAT), their per-node A/Bs and whole models in turns, eight jobs side by
# side on disjoint CPU pairs, each cut at T seconds.   OUT=DIR T=135 bash benchmarks/pernode13_round.sh
out=${OUT:-out}; mkdir -p "$out"
export KERNELKIT_NUMBA_START=eager
cd benchmarks || exit 1
RES=kernelkit.passes.matmul_bias.RESIDUAL_ENABLED=1
NEST=kernelkit.memory.NEST_CONCAT=1
T=${T:-150}
t0=$(date +%s)
lscpu | grep -E "Model name|L2|L3" > "$out/env.txt"
KERNELKIT_BENCH_SET="$RES,$NEST" timeout $T taskset -c 0,1 python3 ops_vs_reference.py transformer,detection_head,bert 5 > "$out/ops_on.txt" 2>&1 &
KERNELKIT_BENCH_SET="$RES,$NEST" timeout $T taskset -c 2,3 python3 ops_vs_reference.py transformer,detection_head,bert_l4 5 --rotate > "$out/ops_on_rot.txt" 2>&1 &
timeout $T taskset -c 4,5 python3 ops_vs_reference.py transformer,detection_head,bert 5 > "$out/ops_off.txt" 2>&1 &
timeout $T taskset -c 6,7 python3 nodes_ab.py bert_l4 7 on=$RES > "$out/nodes_bert.txt" 2>&1 &
timeout $T taskset -c 8,9 python3 nodes_ab.py detection_head 7 nest=$NEST > "$out/nodes_det.txt" 2>&1 &
timeout $T taskset -c 10,11 python3 turns.py transformer --runtimes numba1,numba,reference1 --variant1 on1=$RES \
  --variant on=$RES --rounds 5 > "$out/turns_tr.txt" 2>&1 &
timeout $T taskset -c 12,13 python3 turns.py bert_l4 --runtimes numba1,reference1 --variant1 on1=$RES \
  --variant1 "on1np=$RES;kernels.fgemm.RESID_PREFETCH=0" --rounds 5 > "$out/turns_bert.txt" 2>&1 &
timeout $T taskset -c 14,15 python3 turns.py detection_head --runtimes numba1,reference1 --variant1 nest1=$NEST \
  --rounds 5 > "$out/turns_det.txt" 2>&1 &
wait
echo "all: $(( $(date +%s) - t0 )) s" >> "$out/env.txt"
cat "$out/env.txt"
for f in ops_on ops_on_rot ops_off; do echo "== $f"; grep -h -E "^## |slower|fused in numba only|MatMul\+Add|^\| Concat|^\| Add |nodes where" "$out/$f.txt"; done
for f in nodes_bert nodes_det; do echo "== $f"; grep -h -E "^## |^\| (MatMul|Add|Concat|Resize|Mul|Swish|\*\*sum|all nodes)" "$out/$f.txt"; done
for f in turns_tr turns_bert turns_det; do echo "== $f"; grep -h -E "^\| [a-z]|Traceback|Error" "$out/$f.txt" | tail -4; done
