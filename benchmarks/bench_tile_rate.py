"""ftile's 1x1 tiles alone at one thread on ResNet-50's 1x1 products (M x K x pixels): what session 15's
two changes give each tile (issue 11, session 15, docs/numba.md "The 1x1 tiles' own rate at one thread").
``cols`` (14x14 and 7x7 maps: conv_serial's one-thread driver, prefetch conv.COLS_AHEAD_ONE_THREAD, K chunk
conv.one_thread_cols_kc's): the weights packed on 64 bytes or 16 past a line (ftile.PACK_ALIGN), the full
tiles at constant pixel offsets or not (ftile.COLS_WHOLE_ONE_THREAD). ``rows`` (28x28, 56x56: the plan's 12- or 8-row
tiles, the plan's pack): the packed-pixel scratch on 64 bytes or 16 past (config.BUFFER_ALIGN's), the
weights likewise; ``x8``, ``x16``: the pixel rows prefetched 8 or 16 steps ahead (ftile.ROWS_X_AHEAD_ONE_THREAD).
np.dot on the same product beside them. GFLOP/s, best of ``reps`` rounds, the calls of a
round in rotated order; every output checked against a float64 product first. "a16": 16 bytes past a line.

    taskset -c 4 python benchmarks/bench_tile_rate.py [reps=20] [cols|rows|both]
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
import numpy as np  # noqa: E402
from bench_cols_tiles import best_rates  # noqa: E402
from kernelkit_numba import config  # noqa: E402
from kernelkit_numba.kernels import conv, ftile  # noqa: E402

COLS = [(1024, 256, 196), (256, 1024, 196), (512, 1024, 196), (2048, 512, 49), (512, 2048, 49)]
ROWS = [(256, 64, 3136), (64, 256, 3136), (512, 128, 784), (128, 512, 784)]


def _at(a: np.ndarray, off: int) -> np.ndarray:
    """A copy of flat ``a`` starting ``off`` bytes past a 64-byte line."""
    out = config.aligned_empty(a.size + 16, a.dtype, 64)[off // a.itemsize:off // a.itemsize + a.size]
    out[...] = a
    return out


def cols_fns(m, k, n, rng):
    w = (rng.standard_normal((m, k)) / np.sqrt(k)).astype(np.float32)
    x = rng.standard_normal(k * n).astype(np.float32)
    out = np.empty(m * n, np.float32)
    b, zz = np.zeros(m, np.float32), np.zeros(1, np.float32)
    inf = np.float32(np.inf)
    kc = conv.one_thread_cols_kc(n) if hasattr(conv, "one_thread_cols_kc") else 128
    ahead = int(conv.COLS_AHEAD_ONE_THREAD)
    wp0 = ftile.pack_weights(w, 48)
    acc = config.aligned_empty(ftile.scratch_size(2, True, n), np.float32, 64)
    panels = -(-m // 48)
    fns = {}
    for whole in (False, True):
        drv = ftile.cols_driver_ahead(2, ahead, whole)
        for off in (16, 0):
            wp = _at(wp0, off)

            def f(drv=drv, wp=wp):
                drv(wp, k, m, x, n, n, b, zz, False, np.float32(0), inf, out, n, kc, acc, 0, panels)
                return out
            fns[f"{'whole' if whole else 'sel'} a{off}"] = f
    fns["np.dot"] = lambda: np.maximum(np.dot(w, x.reshape(k, n)), 0)
    return w, x, fns


def rows_fns(m, k, n, rng):
    w = (rng.standard_normal((m, k)) / np.sqrt(k)).astype(np.float32)
    x = config.aligned_empty(k * n, np.float32, 64)
    x[...] = rng.standard_normal(k * n).astype(np.float32)
    out = np.empty(m * n, np.float32)
    b = np.zeros(m, np.float32)
    inf = np.float32(np.inf)
    kind = ftile.rows_kind(ftile.KIND["avx512"], m, one_thread=True)
    block, blocks, groups, kc = ftile.plan(kind, m, k, n, 1)
    pack = ftile.pack_rows(m, k, n)
    wp0 = ftile.pack_weights(w, ftile.MR[kind])
    size = ftile.scratch_size(kind, False, n, block, kc, pack)
    drv = ftile.rows_driver(kind)
    fns = {}
    for off in (16, 0):
        wp, xp = _at(wp0, off), _at(np.zeros(size, np.float32), off)

        def f(wp=wp, xp=xp):
            drv(wp, k, m, x, 0, n, n, b, b, b, False, np.float32(0), inf, out, 0, n, block, groups, kc, pack, xp, 0,
                blocks * groups)
            return out
        fns[f"a{off}"] = f
    for ahead in (8, 16):  # the pixel rows' prefetch (ftile.ROWS_X_AHEAD_ONE_THREAD), aligned buffers
        drv_a = ftile.rows_driver_ahead(kind, ahead)
        wp, xp = _at(wp0, 0), _at(np.zeros(size, np.float32), 0)

        def g(drv_a=drv_a, wp=wp, xp=xp):
            drv_a(wp, k, m, x, 0, n, n, b, b, b, False, np.float32(0), inf, out, 0, n, block, groups, kc, pack, xp, 0,
                  blocks * groups)
            return out
        fns[f"x{ahead} a0"] = g
    fns["np.dot"] = lambda: np.maximum(np.dot(w, x.reshape(k, n)), 0)
    return w, x, fns


def measure(make, m, k, n, reps):
    w, x, fns = make(m, k, n, np.random.default_rng(0))
    want = np.maximum(w.astype(np.float64) @ x.reshape(k, n).astype(np.float64), 0)
    for name, f in fns.items():
        got = f().reshape(m, n)
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < 1e-5, (name, err)
    return best_rates(fns, 2.0 * m * k * n, reps, False)


def main(argv):
    reps = int(argv[0]) if argv else 20
    which = argv[1] if len(argv) > 1 else "both"
    if not ftile.available("avx512"):
        print("no avx512 on this CPU")
        return
    from threadpoolctl import threadpool_limits
    threadpool_limits(1, user_api="blas")
    for label, make, shapes in (("cols", cols_fns, COLS), ("rows", rows_fns, ROWS)):
        if which not in (label, "both"):
            continue
        cols = None
        for m, k, n in shapes:
            r = measure(make, m, k, n, reps)
            if cols is None:
                cols = list(r)
                print(f"\n{label} tiles, 1 thread, GFLOP/s (best of {reps}, hot)")
                print("| M x K x pixels | " + " | ".join(cols) + " |")
                print("|---|" + "---:|" * len(cols))
            extra = f" ({'pack' if ftile.pack_rows(m, k, n) else 'in place'})" if label == "rows" else ""
            print(f"| {m} x {k} x {n}{extra} | " + " | ".join(f"{r[c]:.0f}" for c in cols) + " |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
