"""ftile's rows tiles alone on ResNet-50's convolution GEMM shapes (M weight rows x K x pixels), one
thread, GFLOP/s (wall time, best of ``reps`` rounds, calls interleaved in rotated order): 8-row
(avx512) against 12-row panels (ftile.ROWS12), the pixel rows read in place or copied into tile
order first (``pack``), K whole (chunks of at most ftile.KC) or in chunks of 512 / 256 / 128, the
panel-major loop order or the tile-major one (``tm``: ftile.rows_driver_order), and np.dot
(OpenBLAS) on the same matrices; the outputs checked against a float64 product first. "default" is
what conv.py runs for the shape (ftile.rows_kind, ftile.pack_rows, ftile.plan's chunks). Issue 11,
session 9 (docs/numba.md, "ResNet-50 and the MLP at one thread").

    python benchmarks/bench_rows_tiles.py [reps=15] [shapes: "256x64x3136,..."] [--blocks]

``--blocks`` (issue 11, session 11): pixel-block and K-chunk choices on 12-row panels instead (BLOCKS;
the "default / 8" column is then default / "12 pack"). ``--cold``: before each call 64 MiB are written
and the pixels read back, so that the weights come from memory as in a model of 100 MB of weights.
"""
from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import numpy as np  # noqa: E402
from kernelkit_numba import config  # noqa: E402
from kernelkit_numba.kernels import ftile  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

SHAPES = [(256, 64, 3136), (64, 256, 3136), (128, 256, 3136), (512, 128, 784), (128, 512, 784), (1024, 256, 196),
          (256, 1024, 196), (512, 1024, 196), (2048, 512, 49), (128, 1152, 784), (256, 2304, 196), (512, 256, 784)]
# (label, 12 rows, pack, K chunk: 0 = ftile.plan's, tile-major loop order)
VARIANTS = [("8", False, False, 0, False), ("8 pack", False, True, 0, False), ("12", True, False, 0, False),
            ("12 pack", True, True, 0, False), ("8 pack kc256", False, True, 256, False),
            ("12 pack kc512", True, True, 512, False), ("12 pack kc256", True, True, 256, False),
            ("8 pack tm256", False, True, 256, True), ("12 pack tm256", True, True, 256, True),
            ("12 tm256", True, False, 256, True), ("12 pack tm128", True, True, 128, True)]
# issue 11, session 11 (r50t11b): pixel blocks per shape, label -> (12 rows, pack, K chunk, block in tiles:
# 0 = ftile.plan's, -1 = the whole map); run with --blocks instead of VARIANTS
BLOCKS = [("12 pack", True, True, 0, 0), ("12 pack all", True, True, 0, -1), ("12 pack kc512 all", True, True, 512, -1),
          ("12 pack kc256", True, True, 256, 0), ("12 pack kc128 all", True, True, 128, -1),
          ("12 pack t4", True, True, 0, 4), ("8 pack kc256", False, True, 256, 0)]


EVICT_FLOATS = 1 << 24  # --cold: 64 MiB written between calls, more than the L3


def measure(m_n: int, k_n: int, n_pix: int, reps: int, blocks_mode: bool = False, cold: bool = False) -> dict:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((m_n, k_n)) / np.sqrt(k_n)).astype(np.float32)
    x = config.readonly(rng.standard_normal(k_n * n_pix).astype(np.float32))
    x2 = x.reshape(k_n, n_pix)
    bias = config.readonly(np.zeros(m_n, np.float32))
    want = w.astype(np.float64) @ x2.astype(np.float64)
    base = ftile.KIND["avx512"]
    fns = {}

    def make(kind, pack, kc_want, tile_major=False, bt=0):
        wp = config.readonly(ftile.pack_weights(w, ftile.MR[kind]))
        block, blocks, groups, kc = ftile.plan(kind, m_n, k_n, n_pix, 1)
        if kc_want:
            kc = -(-k_n // -(-k_n // kc_want))
            if not bt:  # the plan's block for this chunk
                saved = ftile.KC
                ftile.KC = kc
                try:
                    block, blocks, groups, kc = ftile.plan(kind, m_n, k_n, n_pix, 1)
                finally:
                    ftile.KC = saved
        if bt:
            tiles = -(-n_pix // ftile.NR[kind])
            bt = tiles if bt < 0 else min(bt, tiles)
            block, blocks = bt * ftile.NR[kind], -(-tiles // bt)
        xp = np.empty(ftile.scratch_size(kind, False, n_pix, block, kc, True), np.float32)
        out = np.empty(m_n * n_pix, np.float32)
        inf = np.float32(np.inf)
        driver = ftile.rows_driver_order(kind, tile_major) if tile_major is not None else ftile.rows_driver(kind)

        def f():
            driver(wp, k_n, m_n, x, 0, n_pix, n_pix, bias, bias, bias, False, -inf, inf, out, 0, n_pix, block, groups,
                   kc, pack, xp, 0, blocks * groups)
            return out

        return f

    if blocks_mode:
        for label, twelve, pack, kc, bt in BLOCKS:
            fns[label] = make(ftile.ROWS12 if twelve else base, pack, kc, False, bt)
    else:
        for label, twelve, pack, kc, tile_major in VARIANTS:
            fns[label] = make(ftile.ROWS12 if twelve else base, pack, kc, tile_major)
    fns["default"] = make(ftile.rows_kind(base, m_n), ftile.pack_rows(m_n, k_n, n_pix), 0, None)
    out = np.empty((m_n, n_pix), np.float32)
    fns["np.dot"] = lambda: np.dot(w, x2, out=out)
    for name, f in fns.items():
        got = f().reshape(m_n, n_pix)
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < 1e-5, (name, err)
    best = dict.fromkeys(fns, np.inf)
    names = list(fns)
    evict = np.zeros(EVICT_FLOATS if cold else 0, np.float32)
    for i in range(reps):
        for name in names[i % len(names):] + names[:i % len(names)]:
            if cold:  # the weights from memory, the pixels warm (as in a model: the layer before wrote them)
                evict += 1.0
                x2.sum()
            t0 = time.perf_counter()
            fns[name]()
            best[name] = min(best[name], time.perf_counter() - t0)
    return {k: 2.0 * m_n * k_n * n_pix / v / 1e9 for k, v in best.items()}


def main(argv):
    blocks_mode, cold = "--blocks" in argv, "--cold" in argv
    argv = [a for a in argv if a not in ("--blocks", "--cold")]
    reps = int(argv[0]) if argv else 15
    shapes = SHAPES if len(argv) < 2 else [tuple(int(v) for v in s.split("x")) for s in argv[1].split(",")]
    if not ftile.available("avx512"):
        print("no avx512 on this CPU: nothing to compare")
        return
    threadpool_limits(1, user_api="blas")
    cols = [v[0] for v in (BLOCKS if blocks_mode else VARIANTS)] + ["default", "np.dot"]
    print(f"ftile rows tiles, 1 thread, GFLOP/s (best of {reps} rounds, interleaved, rotated"
          + (", weights cold: 64 MiB written before each call, the pixels read back)" if cold else ")"))
    print("| M x K x pixels | " + " | ".join(cols) + " | default / 8 | default / np.dot |")
    print("|---|" + "---:|" * (len(cols) + 2))
    with config.num_threads(1):
        for m_n, k_n, n_pix in shapes:
            r = measure(m_n, k_n, n_pix, reps, blocks_mode, cold)
            ref = r["12 pack" if blocks_mode else "8"]
            print(f"| {m_n} x {k_n} x {n_pix} | " + " | ".join(f"{r[c]:.0f}" for c in cols)
                  + f" | {r['default'] / ref:.2f} | {r['default'] / r['np.dot']:.2f} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
