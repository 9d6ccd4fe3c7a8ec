"""F(4x4, 3x3) layers at two threads: the tile split (winograd.TILES, issue 11, session 10) against
session 9's job of three phases, interleaved call by call in one process (the host's drift between
processes does not enter), with the 1-thread time of the same layer for scale.

    python benchmarks/bench_wino_tiles.py [rounds=40] [--bytes 0,2097152] [--serial]

Prints per layer the median ms of: 1 thread (the three passes over the whole map: TILES off), 2
threads phased (TILES off), 2 threads by tiles at each TILE_BYTES asked for (0: a thread's run in one
block), and 1t / each; ``--serial``: one thread only, the whole map against the tile blocks."""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import kernelkit as kk  # noqa: E402
from kernelkit_numba import shards  # noqa: E402
from kernelkit_numba.kernels import winograd  # noqa: E402

SHAPES = [((1, 64, 56, 56), (64, 64, 3, 3)), ((1, 128, 28, 28), (128, 128, 3, 3))]


def model(xs, ws, rng):
    g = kk.GraphBuilder("conv")
    x = g.input("x", xs, "float32")
    w = g.constant((rng.standard_normal(ws) * 0.05).astype(np.float32))
    b = g.constant(rng.standard_normal(ws[0]).astype(np.float32))
    g.output(g.op("Relu", g.op("Conv", x, w, b, pads=(1,) * 4), name="y"))
    return g.build()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rounds", nargs="?", type=int, default=40)
    ap.add_argument("--bytes", default=str(winograd.TILE_BYTES))
    ap.add_argument("--serial", action="store_true")
    args = ap.parse_args()
    blocks = [int(b) for b in args.bytes.split(",")]
    rng = np.random.default_rng(0)
    keep = winograd.TILE_BYTES
    shards.POOL.backoff = False
    for xs, ws in SHAPES:
        m = model(xs, ws, rng)
        feed = {"x": rng.standard_normal(xs).astype(np.float32)}
        s1 = kk.Session(m, vendors=["numba"], threads=1)
        s2 = kk.Session(m, vendors=["numba"], threads=2)
        many = s1 if args.serial else s2
        label = "1t" if args.serial else "2t"
        configs = [("1t", s1, False, 0)] + ([] if args.serial else [("2t phased", s2, False, 0)]) + [
            (f"{label} tiles/{b}", many, True, b) for b in blocks]
        ref = s1.run(None, feed)[0]
        times: dict = {c[0]: [] for c in configs}
        for r in range(args.rounds + 3):
            for label, sess, tiles, block in (configs if r % 2 == 0 else configs[::-1]):
                winograd.TILES, winograd.TILE_BYTES = tiles, block
                t0 = time.perf_counter()
                got = sess.run(None, feed)[0]
                if r >= 3:
                    times[label].append(time.perf_counter() - t0)
                elif not np.allclose(got, ref, rtol=1e-4, atol=1e-4):
                    raise SystemExit(f"{label} disagrees with 1t on {xs} {ws}")
        winograd.TILES, winograd.TILE_BYTES = True, keep
        one = statistics.median(times["1t"])
        print(f"{xs} {ws}: " + "; ".join(f"{k} {statistics.median(v) * 1e3:.3f} ms ({one / statistics.median(v):.2f}x)"
                                         for k, v in times.items()), flush=True)
    print("pool", {k: v for k, v in shards.POOL.stats.items() if v})


if __name__ == "__main__":
    main()
