"""Where the in-model time of ResNet-50's 28x28 and 56x56 1x1 layers goes against the tile alone: ftile's one-thread
rows driver (conv_serial's: the plan's 12- or 8-row tiles, pack, the pixel prefetch where in place) on each product
as the model runs it (bias, Relu, the residual where ``+Z``), the caches in three states before each call: ``hot``
(nothing flushed: the tile alone, as bench_tile_rate.py), ``model`` (64 MiB written, then the input and the weights
read back: the previous layer's output and the weights in the caches, the output's and the residual's lines not),
``cold`` (64 MiB written, nothing read back); ``noZ`` the +Z layers without their residual (``model`` state); each
with the plain stores, with ``nt`` (ftile.ROWS_NT_ONE_THREAD: the full tiles' outputs stored non-temporal) and with
``pf`` (ftile.ROWS_PREFETCH: each tile prefetches the next tile's output and residual rows into L2 first) and with
``inplace`` (the +Z layers' output written over their residual: the same array passed as ``out`` and ``z``, the
residual put back before each call). The outputs checked bit for bit between the four first, and the plain one
against a float64 product. ms, best and median of ``reps`` rounds, the calls of a round in rotated order (issue 11,
session 15, docs/numba.md "The writes after the K loop").

    taskset -c 4 python benchmarks/bench_rows_epilogue.py [reps=15]
"""
from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import numpy as np  # noqa: E402
from kernelkit_numba import config  # noqa: E402
from kernelkit_numba.kernels import ftile  # noqa: E402

# (M, K, pixels, residual): ResNet-50's 1x1 layers on the rows tiles at one thread
SHAPES = [(64, 256, 3136, False), (64, 64, 3136, False), (256, 64, 3136, True), (128, 512, 784, False),
          (512, 128, 784, True)]
_FLUSH = np.ones(16 << 20, np.float32)  # 64 MiB
STORES = ("plain", "nt", "pf", "inplace")  # pf: the next tile's output and residual rows prefetched
# (ftile.ROWS_PREFETCH); inplace: the output written over the residual (the same array as out and z)


def layer(m, k, n, has_z, rng):
    """{(state, store): (prep, call)} on one product, and the flops."""
    w = (rng.standard_normal((m, k)) / np.sqrt(k)).astype(np.float32)
    x = config.aligned_empty(k * n, np.float32, 64)
    x[...] = np.maximum(rng.standard_normal(k * n), 0).astype(np.float32)
    z = config.aligned_empty(m * n, np.float32, 64)
    z[...] = rng.standard_normal(m * n).astype(np.float32)
    b = (rng.standard_normal(m) * 0.1).astype(np.float32)
    zeros = np.zeros(m, np.float32)
    kind = ftile.rows_kind(ftile.KIND["avx512"], m, one_thread=True)
    block, blocks, groups, kc = ftile.plan(kind, m, k, n, 1)
    pack = ftile.pack_rows(m, k, n)
    xahead = 0 if pack else ftile.ROWS_X_AHEAD_ONE_THREAD
    wp = ftile.pack_weights(w, ftile.MR[kind])
    xp = config.aligned_empty(ftile.scratch_size(kind, False, n, block, kc, pack), np.float32, 64)
    calls = {}
    for store in STORES:
        drv = ftile.rows_driver_order(kind, False, store == "pf", xahead, store == "nt")
        out = config.aligned_empty(m * n, np.float32, 64)
        for with_z in ((False, True) if has_z else (False,)):
            zz = out if store == "inplace" and with_z else z  # the residual's own memory written over

            def call(drv=drv, out=out, with_z=with_z, zz=zz):
                drv(wp, k, m, x, 0, n, n, b, zeros, zz, with_z, np.float32(0), np.float32(np.inf), out, 0, n, block,
                    groups, kc, pack, xp, 0, blocks * groups)
                return out
            calls[store, with_z] = call
            if zz is out:
                zi = out

    def flush(touch, store):
        if store == "inplace" and has_z:
            np.copyto(zi, z)  # the residual back in its memory (then flushed as the plain call's)
        if touch is None:
            return
        np.add(_FLUSH, 1.0, out=_FLUSH)
        for t in touch:
            t.sum()

    fns = {}
    for store in STORES:
        fns["hot", store] = (lambda store=store: flush(None, store), calls[store, has_z])
        fns["model", store] = (lambda store=store: flush((x, wp), store), calls[store, has_z])
        fns["cold", store] = (lambda store=store: flush((), store), calls[store, has_z])
        if has_z:
            fns["noZ", store] = (lambda: flush((x, wp), "plain"), calls[store, False])
    a = calls["plain", has_z]().copy()
    for store in STORES[1:]:
        flush(None, store)
        assert np.array_equal(a, calls[store, has_z]()), f"{store} changed the output"
    want = np.maximum(w.astype(np.float64) @ x.reshape(k, n).astype(np.float64) + b[:, None]
                      + (z.reshape(m, n) if has_z else 0), 0)
    assert np.abs(a.reshape(m, n) - want).max() / np.abs(want).max() < 1e-5
    return fns, 2.0 * m * k * n


def run(fns: dict, reps: int) -> dict:
    names = list(fns)
    times = {name: [] for name in names}
    for _prep, call in fns.values():
        call()
    for i in range(reps):
        for name in names[i % len(names):] + names[:i % len(names)]:
            prep, call = fns[name]
            prep()
            t0 = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t0)
    return {name: (min(v) * 1e3, float(np.median(v)) * 1e3) for name, v in times.items()}


def main(argv):
    reps = int(argv[0]) if argv else 15
    if not ftile.available("avx512"):
        print("no avx512 on this CPU")
        return
    rng = np.random.default_rng(0)
    print(f"rows tiles at one thread, ms best (median) of {reps}; GFLOP/s of the best; nt: non-temporal stores")
    print("| M x K x pixels | state | plain | " + " | ".join(STORES[1:]) + " | "
          + " | ".join(f"plain / {v} (best, median)" for v in STORES[1:]) + " | GFLOP/s plain |")
    print("|---|---|" + "---:|" * len(STORES) + "---|" * (len(STORES) - 1) + "---:|")
    for m, k, n, has_z in SHAPES:
        fns, flops = layer(m, k, n, has_z, rng)
        r = run(fns, reps)
        for state in ("hot", "model", "cold", "noZ"):
            if (state, "plain") not in r:
                continue
            p = r[state, "plain"]
            cells = " | ".join(f"{r[state, v][0]:.3f} ({r[state, v][1]:.3f})" for v in STORES[1:])
            ratios = " | ".join(f"{p[0] / r[state, v][0]:.2f}, {p[1] / r[state, v][1]:.2f}" for v in STORES[1:])
            print(f"| {k}->{m} @{int(round(n ** 0.5))}{' +Z' if has_z else ''} | {state} | {p[0]:.3f} ({p[1]:.3f}) | "
                  f"{cells} | {ratios} | {flops / p[0] / 1e6:.0f} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
