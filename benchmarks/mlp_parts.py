"""Where the MLP b64's one-thread run goes (issue 11, session 12): the whole run of numba 1t, the
reference and onnxruntime 1t; numba's nodes in the model (a profiling session: host time around each
kernel call) and their sum against the run; each product's bound call alone (fgemm.serial, as Gemm
binds it) with B hot (the same call again) and cold (a 32 MiB buffer written between calls: B from L3
or memory), GFLOP/s; np.matmul + bias + Relu (the reference's kernels) likewise. Everything interleaved
in one process, in a random order each round; best and median per entry (ms).

    python benchmarks/mlp_parts.py [rounds=200] [variant ...]

``variant``: ``LABEL=SPEC`` (turns.py's ``--variant1`` syntax, ``module.ATTR=VALUE`` kernelkit_numba
constants separated by ``;``): one more numba 1t session built and warmed under SPEC (then the
constants are put back), run beside the default in the same rounds.
"""
from __future__ import annotations

import contextlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import kernelkit  # noqa: E402
import numpy as np  # noqa: E402
import onnx.numpy_helper as nh  # noqa: E402
from bench_fgemm import ort_matmul  # noqa: E402
from kernelkit_numba.kernels import epilogue, fgemm, ftile  # noqa: E402
from test_bench_numba import apply_bench_set, model_case, ort_session  # noqa: E402

EVICT = np.zeros(8 << 20, np.float32)  # 32 MiB


def evict() -> None:
    EVICT[::16] += 1.0  # a write to every cache line


@contextlib.contextmanager
def settings(spec: str):
    """SPEC's kernelkit_numba constants set for the block (put back afterwards)."""
    import importlib

    saved = []
    for item in filter(None, spec.split(";")):
        key, _value = item.split("=")
        parts = key.split(".")
        if len(parts) > 3 and parts[-2].isupper():  # an item of a dict constant (kernels.fgemm.MR.2=12)
            table = getattr(importlib.import_module("kernelkit_numba." + ".".join(parts[:-2])), parts[-2])
            item_key = int(parts[-1]) if parts[-1].isdigit() else parts[-1]
            saved.append((table, item_key, table[item_key]))
            continue
        mod = importlib.import_module("kernelkit_numba." + ".".join(parts[:-1]))
        saved.append((mod, parts[-1], getattr(mod, parts[-1])))
    apply_bench_set(",".join(filter(None, spec.split(";"))))
    try:
        yield
    finally:
        for obj, name, was in reversed(saved):
            if isinstance(obj, dict):
                obj[name] = was
            else:
                setattr(obj, name, was)


def bound_products(mats, rng):
    """Each product's bound one-thread call as Gemm binds it now (fgemm.serial with the one-thread
    constants), on its own A and output: [(name, flops, run, x, out, w)]."""
    made = []
    for i, w in enumerate(mats):
        n_n, k_n = w.shape
        last = i == len(mats) - 1
        pk = fgemm.one_thread_kind(fgemm.kind_for(64, k_n, n_n, narrow=True))
        packed = fgemm.Packed(w, np.ascontiguousarray(w).T, pk, fgemm.PACK_ALIGN_ONE_THREAD or None)
        run = fgemm.serial(pk, packed, 64, 1.0, np.zeros(n_n, np.float32), epilogue.NONE if last else epilogue.CLIP,
                           0.0, np.inf, fgemm.PREFETCH_ONE_THREAD, fgemm.B_AHEAD_ONE_THREAD, fgemm.PACK_A_ONE_THREAD,
                           fgemm.WHOLE_ONE_THREAD, fgemm.MR_ONE_THREAD, fgemm.PAD_A_ONE_THREAD)
        x = rng.standard_normal((64, k_n)).astype(np.float32)
        made.append((f"{k_n}x{n_n}", 2.0 * 64 * k_n * n_n, run, x, np.empty((64, n_n), np.float32), w))
    return made


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    variants = [a.split("=", 1) for a in sys.argv[2:]]
    proto, model, feed, _ = model_case("mlp")
    numba1 = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False, threads=1)
    prof = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False, threads=1, profile=True)
    ref = kernelkit.Session(model, vendors=["reference"], fallback=False)
    ort1 = ort_session(proto, 1)
    fns = {"numba 1t run": lambda: numba1.run(None, feed), "numba 1t profiled": lambda: prof.run(None, feed),
           "reference run": lambda: ref.run(None, feed), "ORT 1t run": lambda: ort1.run(None, feed)}
    # the products alone: the model's weights, bound as Gemm binds them at one thread
    kind, _forced = ftile.choice()
    mats = [w for w in (nh.to_array(i) for i in proto.graph.initializer) if w.ndim == 2]
    rng = np.random.default_rng(0)
    flops = {}
    chain = []
    for label, spec in variants:
        with settings(spec):
            sess = kernelkit.Session(model, vendors=["numba", "reference"], fallback=False, threads=1)
            for _ in range(3):
                sess.run(None, feed)  # binds under SPEC
            made = bound_products(mats, rng)
        fns[f"{label} run"] = lambda sess=sess: sess.run(None, feed)
        for name, _f, run, x, out, _w in made:
            fns[f"{name} {label} cold"] = (lambda run=run, x=x, out=out: run(x, out), True)
    for name, fl, run, x, out, w in bound_products(mats, rng):
        chain.append((run, np.empty_like(out)))
        wt = w.T  # the reference's np.matmul operand (transB as a view)
        last = len(chain) == len(mats)

        def blas(x=x, wt=wt, out=out, last=last):
            np.matmul(x, wt, out=out)
            out += 0.0
            if not last:
                np.maximum(out, 0, out=out)

        mm = ort_matmul(np.ascontiguousarray(wt), 1)
        flops[name] = fl
        fns[f"{name} fgemm hot"] = lambda run=run, x=x, out=out: run(x, out)
        fns[f"{name} fgemm cold"] = (lambda run=run, x=x, out=out: run(x, out), True)
        fns[f"{name} blas hot"] = blas
        fns[f"{name} blas cold"] = (blas, True)
        fns[f"{name} ORT MatMul cold"] = (lambda mm=mm, x=x: mm.run(None, {"a": x}), True)
    x0 = next(iter(feed.values()))

    def chained():  # the three bound calls on the feed, as the run calls them, without the executor
        y = x0
        for run, out in chain:
            run(y, out)
            y = out
        return y

    fns["products chained"] = chained
    np.testing.assert_allclose(chained(), numba1.run(None, feed)[0], rtol=1e-4, atol=1e-4)
    names = list(fns)
    times = {n: [] for n in names}
    for n in names:
        f = fns[n]
        (f[0] if isinstance(f, tuple) else f)()
    prof.reset_profile()
    order = np.random.default_rng(1)
    for _ in range(rounds):
        for i in order.permutation(len(names)):  # each entry after a random one (a rotation keeps its neighbour)
            n = names[i]
            f = fns[n]
            cold = isinstance(f, tuple)
            if cold:
                f = f[0]
                evict()
            t0 = time.perf_counter()
            f()
            times[n].append(time.perf_counter() - t0)
    print(f"MLP b64 at one thread, {rounds} interleaved rounds, kind {kind}; ms (GFLOP/s of the median)")
    print("| entry | best | median | GFLOP/s |")
    print("|---|---:|---:|---:|")
    for n in names:
        best, med = min(times[n]) * 1e3, float(np.median(times[n])) * 1e3
        key = n.split(" ")[0]
        gf = f"{flops[key] / med / 1e6:.0f}" if key in flops else ""
        print(f"| {n} | {best:.3f} | {med:.3f} | {gf} |")
    # the nodes of the profiled session: per node the median over the rounds
    per = {}
    for node, _t0, dt, _tid in prof.profile_events():
        per.setdefault(node, []).append(dt)
    total = 0.0
    print("\n| node (profiled session) | best | median |")
    print("|---|---:|---:|")
    for node, ts in per.items():
        med = float(np.median(ts)) * 1e3
        total += med
        print(f"| {node} | {min(ts) * 1e3:.3f} | {med:.3f} |")
    run_med = float(np.median(times["numba 1t profiled"])) * 1e3
    print(f"| sum of node medians | | {total:.3f} |")
    print(f"| profiled run median - sum | | {run_med - total:.3f} |")
    print(f"| numba 1t run median - sum | | {float(np.median(times['numba 1t run'])) * 1e3 - total:.3f} |")


if __name__ == "__main__":
    main()
