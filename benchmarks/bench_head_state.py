"""One-row Gemm heads at one thread by where their weights are (issue 11, session 13): np.matmul + bias
(the reference's call, OpenBLAS's matrix-vector product over the (N, K) weight as exported) against
fgemm.row (the weights packed once into 32-column panels) and its variants, with the weights

- ``hot``: read by the call before (L2 / L3);
- ``l3``: the call before, then a 32 MiB buffer written (bench_heads.py's cold: on the Xeon's 300 MiB L3
  the weights stay in L3, the TLB is cold);
- ``dram``: the weights' lines flushed (``clflush``) and the 32 MiB written (memory, the TLB cold).

Interleaved in one process, a random order each round; median microseconds per call and the ratio of
np.matmul's median in the same state to each (above 1: faster than np.matmul).

    python benchmarks/bench_head_state.py [rounds=200] [KxN,...] [variants=a0,pf32,...]

``np.matmul KxN`` is the same product by the weight stored (K, N) (a MatMul's, as the zoo models' heads:
OpenBLAS's other matrix-vector kernel). A variant is ``a<D>`` (fgemm.row with ROW_AHEAD D: L1 prefetch D
K steps ahead), ``pf<F>`` (the next column panel prefetched into L2 during the current one, F floats a K
step: fgemm.ROW_PREFETCH) or ``s<S>`` (S column panels read at once: fgemm.ROW_STREAMS), joined by ``+``,
``q<D>`` (the streams' tiles prefetch each panel D K steps ahead into L1, ``q<D>l2`` into L2:
fgemm.ROW_STREAMS_AHEAD, ROW_STREAMS_HINT), and ``al`` (the weights packed at a page of their own mapping:
fgemm.PACK_ALIGN 4096) or ``hp`` (on
transparent huge pages: PACK_ALIGN fgemm.HUGE_PAGE), e.g. ``s4+al``. (Session 13's Xeon call ran ``hp`` as
a 2 MiB-aligned shared mapping, which gets no huge pages: today's ``al``.)
"""
from __future__ import annotations

import os
import sys
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
from bench_heads import head_case  # noqa: E402
from kernelkit_numba.kernels import fgemm, ftile  # noqa: E402
from llvmlite import ir  # noqa: E402
from numba import njit, types  # noqa: E402
from numba.core import cgutils  # noqa: E402
from numba.extending import intrinsic  # noqa: E402

HEADS = [(512, 1000), (1280, 1000), (2048, 1000)]  # ResNet-18, MobileNetV2 / EfficientNet-B0, ResNet-50
EVICT = np.zeros(8 << 20, np.float32)  # 32 MiB


@intrinsic
def _clflush(typingctx, arr, i):
    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        i8p = ir.IntType(8).as_pointer()
        ptr = builder.gep(builder.bitcast(ary.data, i8p), [args[1]])
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p]),
                                            "llvm.x86.sse2.clflush")
        builder.call(fn, [ptr])
        return context.get_dummy_value()

    return types.void(arr, types.int64), codegen


@njit
def flush(flat_bytes):
    for i in range(0, flat_bytes.size, 64):
        _clflush(flat_bytes, i)


def evict() -> None:
    EVICT[::16] += 1.0  # a write to every cache line


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    heads = [tuple(int(v) for v in s.split("x")) for s in sys.argv[2].split(",")] if len(sys.argv) > 2 else HEADS
    variants = sys.argv[3].split(",") if len(sys.argv) > 3 else ["a0", "pf32"]
    kind, _forced = ftile.choice()
    kind = 2 if kind == fgemm.NARROW else kind
    rng = np.random.default_rng(0)
    fns = {}
    for k_n, n_n in heads:
        w, x, bias, out, want, packed, blas = head_case(rng, k_n, n_n, kind)
        name = f"1x{k_n}x{n_n}"
        wkn = np.ascontiguousarray(w.T)  # (K, N): a MatMul's weight (the zoo's heads: MatMul + Add)
        wkn.flags.writeable = False

        def blas_kn(x=x, w=wkn, out=out, bias=bias):
            np.matmul(x, w, out=out)
            out += bias

        entries = {"np.matmul": (blas, w), "np.matmul KxN": (blas_kn, wkn)}
        for v in variants:
            opts = {"ahead": 0, "prefetch": 0, "streams": 1}
            mine = packed
            stream_ahead = (0, 3)
            for part in v.split("+"):
                if part.startswith("q"):  # q16: ROW_STREAMS_AHEAD 16 into L1; q16l2: into L2
                    stream_ahead = (int(part[1:].split("l")[0]), 2 if part.endswith("l2") else 3)
                elif part in ("al", "hp"):  # its own copy packed at a page (hp: on huge pages)
                    was, fgemm.PACK_ALIGN = fgemm.PACK_ALIGN, 4096 if part == "al" else fgemm.HUGE_PAGE
                    mine = fgemm.Packed(w, w.T, kind)
                    fgemm.PACK_ALIGN = was
                elif part.startswith("pf"):
                    opts["prefetch"] = int(part[2:])
                elif part.startswith("a"):
                    opts["ahead"] = int(part[1:])
                else:
                    opts["streams"] = int(part[1:])
            saved = fgemm.ROW_STREAMS_AHEAD, fgemm.ROW_STREAMS_HINT
            fgemm.ROW_STREAMS_AHEAD, fgemm.ROW_STREAMS_HINT = stream_ahead
            run = fgemm.row(kind, mine, 1.0, bias, **opts)
            fgemm.ROW_STREAMS_AHEAD, fgemm.ROW_STREAMS_HINT = saved
            run(x, out)
            np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
            entries[f"row {v}"] = (lambda run=run, x=x, out=out: run(x, out), mine.bp)
        for label, (f, weights) in entries.items():
            for state in ("hot", "l3", "dram"):
                fns[f"{name} {label} {state}"] = (f, state, weights.reshape(-1).view(np.uint8))
    names = list(fns)
    times = {n: [] for n in names}
    order = np.random.default_rng(1)
    for f, _state, wb in fns.values():
        f()
        flush(wb)
    for _ in range(rounds):
        for i in order.permutation(len(names)):
            f, state, wb = fns[names[i]]
            f()  # the weights read (hot)
            if state == "dram":
                flush(wb)
            if state != "hot":
                evict()
            t0 = time.perf_counter()
            f()
            times[names[i]].append(time.perf_counter() - t0)
    print(f"one-row heads at one thread by the weights' place, kind {kind}, {rounds} interleaved rounds; us per call")
    print("| head | contender | state | best | median | np.matmul / it (medians) | GB/s (weights / median) |")
    print("|---|---|---|---:|---:|---:|---:|")
    for n in names:
        head, rest = n.split(" ", 1)
        label, state = rest.rsplit(" ", 1)
        base = float(np.median(times[f"{head} np.matmul {state}"]))
        med = float(np.median(times[n]))
        nbytes = fns[n][2].size
        print(f"| {head} | {label} | {state} | {min(times[n]) * 1e6:.1f} | {med * 1e6:.1f} | {base / med:.3f} | "
              f"{nbytes / med / 1e9:.1f} |")


if __name__ == "__main__":
    main()
