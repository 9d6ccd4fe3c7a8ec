"""What ``limits.check_tensor_bytes`` (issue 13, session 4: the byte bound on tensors sized from
values) costs: the call alone, and a one-node Pad session (reference, numba) with the guard as
shipped against the guard replaced by a no-op, interleaved (the order alternates per round), median
of ``rounds`` rounds of ``calls`` runs; microseconds a run.

    python benchmarks/limits_guard_overhead.py [rounds=10] [calls=2000]
"""
from __future__ import annotations

import importlib
import os
import sys
import time
import timeit

import numpy as np

os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
from kernelkit import Session  # noqa: E402
from kernelkit.limits import check_tensor_bytes  # noqa: E402
from kernelkit.testing import single_op_model  # noqa: E402


def main(rounds: int = 10, calls: int = 2000) -> None:
    f32 = np.dtype(np.float32)
    for shape in ((1, 64, 16, 16), (1, 64, 112, 112)):  # under / over the 1 MiB floor
        n = 200_000
        us = min(timeit.repeat(lambda s=shape: check_tensor_bytes(s, f32), number=n, repeat=5)) / n * 1e6
        print(f"check_tensor_bytes{shape}: {us:.2f} us")
    modules = [importlib.import_module("kernelkit.ops.pad"), importlib.import_module("kernelkit_numba.kernels.pad")]
    real = [m.check_tensor_bytes for m in modules]
    x = np.ones((1, 3, 32, 32), np.float32)
    pads = np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)
    model = single_op_model("Pad", [x, pads], {})
    feeds = {"in0": x, "in1": pads}
    for vendors in (["reference"], ["numba", "reference"]):
        sess = Session(model, passes=False, vendors=vendors)
        for _ in range(200):
            sess.run(None, feeds)
        times = {"guard": [], "no-op": []}
        for r in range(rounds):
            for mode in (("guard", "no-op") if r % 2 else ("no-op", "guard")):
                for m, f in zip(modules, real):
                    m.check_tensor_bytes = f if mode == "guard" else (lambda *a, **k: 0)
                t = time.perf_counter()
                for _ in range(calls):
                    sess.run(None, feeds)
                times[mode].append((time.perf_counter() - t) / calls * 1e6)
        for m, f in zip(modules, real):
            m.check_tensor_bytes = f
        g, z = np.median(times["guard"]), np.median(times["no-op"])
        print(f"Pad 1x3x32x32 on {vendors[0]}: guard {g:.1f} us, no-op {z:.1f} us, ratio {g / z:.3f}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
