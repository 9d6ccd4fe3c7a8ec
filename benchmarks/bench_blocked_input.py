"""Does a channel-blocked input (NCHW16c) speed our own 1x1 tile? (issue 11, session 15, docs/numba.md
"ResNet-50's bottleneck blocks at one thread"). ResNet-50's 1x1 products (K x M x pixels, one image)
on fdirect's cols-tile driver (the channels in the lanes, 7 pixels broadcast, 21 accumulators; the
same compiled loops for both layouts), once with the NCHW input read in place (pixel p of input
channel k at ``k * P + p``: a broadcast from a new line every k) and once with the input blocked in
16 channels (NCHW16c: ``(k // 16) * 16 P + 16 p + k % 16``, as onnxruntime's NCHWc kernels read it:
the 16 channels of a pixel in one line), the output NCHW in both; beside them the production path
(ftile.conv_cols at the one-thread K chunk, NCHW) and np.dot. Hot (the same call again), GFLOP/s,
best of ``reps``, the calls of a round in turns; every output checked against np.dot first.

    taskset -c 4 python benchmarks/bench_blocked_input.py [reps=30] [kc=128] [ahead=0]
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
from kernelkit_numba.kernels import fdirect, ftile  # noqa: E402

SHAPES = [(256, 64, 3136), (64, 256, 3136), (512, 128, 784), (128, 512, 784), (1024, 256, 196), (256, 1024, 196),
          (2048, 512, 49), (512, 2048, 49)]  # (K, M, pixels): the bottlenecks' 1x1 layers at 56, 28, 14, 7


def blocked(x: np.ndarray) -> np.ndarray:
    """(K, P) NCHW as NCHW16c, flat: [K // 16][P][16]."""
    k_n, p_n = x.shape
    return np.ascontiguousarray(x.reshape(k_n // 16, 16, p_n).transpose(0, 2, 1)).reshape(-1)


def fns_of(k_n: int, m_n: int, p_n: int, kc: int, ahead: int):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((k_n, p_n)).astype(np.float32)
    w = (rng.standard_normal((m_n, k_n)) / np.sqrt(k_n)).astype(np.float32)
    b = np.zeros(-(-m_n // 48) * 48, np.float32)
    b[:m_n] = rng.standard_normal(m_n) * 0.1
    want = np.maximum(w @ x + b[:m_n, None], 0)
    wp = ftile.pack_weights(w, 48)
    z = np.zeros(1, np.float32)
    lo, hi = np.float32(0), np.float32(np.inf)
    kc = min(kc, k_n)
    chunks = -(-k_n // kc)
    kc = -(-k_n // chunks)
    acc = np.zeros(fdirect.scratch_size(k_n, kc, 1, p_n, 1), np.float32)
    total = -(-m_n // 48)
    k = np.arange(k_n, dtype=np.int64)
    layouts = {"NCHW": (x.reshape(-1), 1, k * p_n), "NCHW16c": (blocked(x), 16, (k // 16) * 16 * p_n + k % 16)}
    fns = {}
    for name, (xl, step, koff) in layouts.items():
        out = np.empty(m_n * p_n, np.float32)

        def run(xl=xl, step=step, koff=koff, out=out):
            fdirect.conv(step, 3, 7, ahead, wp, k_n, m_n, xl, koff, 0, p_n, 1, 1, b, z, False, lo, hi, out, kc, acc,
                         0, total)
            return out
        np.testing.assert_allclose(run().reshape(m_n, p_n), want, rtol=2e-3, atol=2e-3)
        fns[f"direct {name}"] = run
    out = np.empty(m_n * p_n, np.float32)
    acc2 = np.zeros(ftile.scratch_size(2, True, p_n), np.float32)
    x_flat = x.reshape(-1)

    def cols():
        ftile.conv_cols(2, wp, k_n, m_n, x_flat, p_n, p_n, b, z, False, lo, hi, out, p_n, kc, acc2, 0, total)
        return out
    np.testing.assert_allclose(cols().reshape(m_n, p_n), want, rtol=2e-3, atol=2e-3)
    fns["conv_cols NCHW"] = cols
    res = np.empty((m_n, p_n), np.float32)
    fns["np.dot"] = lambda: np.dot(w, x, out=res)
    return fns


def main(argv: list[str]) -> int:
    reps = int(argv[0]) if argv else 30
    kc = int(argv[1]) if len(argv) > 1 else 128
    ahead = int(argv[2]) if len(argv) > 2 else 0
    if ftile.variant_name() != "avx512":
        print("needs avx512")
        return 1
    print(f"GFLOP/s at one thread, hot, best of {reps}; K chunk {kc}, weights prefetched {ahead} steps on")
    names = None
    for k_n, m_n, p_n in SHAPES:
        fns = fns_of(k_n, m_n, p_n, kc, ahead)
        if names is None:
            names = list(fns)
            print("| K x M x pixels | " + " | ".join(names) + " | NCHW16c / NCHW |")
            print("|---|" + "---:|" * (len(names) + 1))
        rate = best_rates(fns, 2.0 * k_n * m_n * p_n, reps, False)
        print(f"| {k_n} x {m_n} x {p_n} | " + " | ".join(f"{rate[n]:.0f}" for n in names)
              + f" | {rate['direct NCHW16c'] / rate['direct NCHW']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
