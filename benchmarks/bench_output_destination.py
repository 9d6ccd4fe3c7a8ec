"""The detection head's output Concat (``Concat_285``, a graph output: ``np.concatenate`` into a fresh
array in both sessions) with its destination swapped (issue 11, session 12): inside each session's
run, the call is timed as it is (``out=None``, a fresh array from malloc) and, in alternate runs, into
an array written just before (hot); reference and numba sessions at one thread, in turn. Equal times
into the hot array say the inputs are equally warm, so the fresh array's cache state is the difference::

    taskset -c 0,1 python benchmarks/bench_output_destination.py [rounds=15]

AMD box, two runs: numba fresh best 142.4-173.8 us (medians 178.5-193.4), hot 56.4-59.9; reference fresh
101.3-103.3 (medians 128.7-151.4), hot 59.7-60.0.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "models"))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import kernelkit  # noqa: E402
import numpy as np  # noqa: E402
import zoo  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402

SHAPES = ((1, 4800, 85), (1, 6300, 85))  # the first input's shape, the output's


def main(argv: list[str]) -> None:
    rounds = int(argv[0]) if argv else 15
    proto = zoo.EXTRA["detection_head"]()
    model, feed = convert(proto.SerializeToString()), zoo.feed(proto, 1)
    sessions = {v: kernelkit.Session(model, vendors=[v, "reference"], threads=1) for v in ("reference", "numba")}
    for sess in sessions.values():
        for _ in range(3):
            sess.run(None, feed)
    concatenate, hot, times, now = np.concatenate, np.empty(SHAPES[1], np.float32), {}, {}

    def timed(arrays, axis=0, out=None, **kw):
        if len(arrays) != 3 or arrays[0].shape != SHAPES[0]:
            return concatenate(arrays, axis=axis, out=out, **kw)
        if now["dest"] == "hot":
            hot[...] = 0.0
            out = hot
        t0 = time.perf_counter()
        result = concatenate(arrays, axis=axis, out=out, **kw)
        times.setdefault((now["vendor"], now["dest"]), []).append((time.perf_counter() - t0) * 1e6)
        return result

    np.concatenate = timed  # both sessions' Concat calls NumPy's (numba's serial call, the reference)
    try:
        for _ in range(rounds):
            for vendor, sess in sessions.items():
                for dest in ("fresh", "hot"):
                    now.update(vendor=vendor, dest=dest)
                    sess.run(None, feed)
    finally:
        np.concatenate = concatenate
    for (vendor, dest), us in sorted(times.items()):
        print(f"{vendor:9s} {dest:5s} best {min(us):7.1f} us, median {np.median(us):7.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
