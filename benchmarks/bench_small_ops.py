"""Single ops that ran slower on numba than on the NumPy reference (issue 11), at the sizes of
EfficientNet-B0 / transformer layers: each as a one-node Session on vendor numba and on the
reference, 1 thread (BLAS too), interleaved call by call, median ms::

    python benchmarks/bench_small_ops.py [calls]
"""
from __future__ import annotations

import sys
import time

import kernelkit
import numpy as np
from threadpoolctl import threadpool_limits

threadpool_limits(1, user_api="blas")
rng = np.random.default_rng(0)
X = rng.standard_normal((1, 96, 112, 112)).astype(np.float32)  # EfficientNet-B0 stage-2 activation
SE = rng.standard_normal((1, 96, 1, 1)).astype(np.float32)
HEADS = rng.standard_normal((1, 128, 4, 64)).astype(np.float32)

CASES = {  # name: (op, inputs, attrs, constant input positions)
    "Sigmoid 1x96x112x112": ("Sigmoid", [X], {}, ()),
    "Tanh 1x96x112x112": ("Tanh", [X], {}, ()),
    "Mul x * SE scale (1,96,1,1)": ("Mul", [X, SE], {}, (1,)),
    "Mul same shape": ("Mul", [X, X], {}, ()),
    "Slice [:, :, 1:-1, ::2]": ("Slice", [X, np.array([1, 0]), np.array([-1, 112]), np.array([2, 3]),
                                          np.array([1, 2])], {}, (1, 2, 3, 4)),
    "Transpose NCHW->NHWC": ("Transpose", [X], {"perm": [0, 2, 3, 1]}, ()),
    "Transpose heads 1x128x4x64": ("Transpose", [HEADS], {"perm": [0, 2, 1, 3]}, ()),
}


def session(op, inputs, attrs, constants, vendor):
    g = kernelkit.GraphBuilder(op)
    names = []
    for i, x in enumerate(inputs):
        names.append(x if i in constants else g.input(f"x{i}", x.shape, str(x.dtype)))
    g.output(g.op(op, *names, **attrs))
    feed = {f"x{i}": x for i, x in enumerate(inputs) if i not in constants}
    sess = kernelkit.Session(g.build(), vendors=[vendor], fallback=False, threads=1)
    return lambda: sess.run(None, feed)


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    print("| op | numba 1t ms | reference ms | numba / reference |")
    print("|---|---:|---:|---:|")
    for name, (op, inputs, attrs, constants) in CASES.items():
        runs = {v: session(op, inputs, attrs, constants, v) for v in ("numba", "reference")}
        got, want = runs["numba"]()[0], runs["reference"]()[0]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        times = {v: [] for v in runs}
        for _ in range(calls):
            for v, run in runs.items():
                t0 = time.perf_counter()
                run()
                times[v].append((time.perf_counter() - t0) * 1e3)
        n, r = (float(np.median(times[v])) for v in ("numba", "reference"))
        print(f"| {name} | {n:.3f} | {r:.3f} | {n / r:.2f} |", flush=True)


if __name__ == "__main__":
    main()
