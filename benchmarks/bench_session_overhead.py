"""Where a model's run goes besides its convolution kernels: one numba Session at one thread, its
ftile (rows, cols) and dwtile (depthwise) driver calls recorded during one run, then the whole run
against those recorded calls replayed alone in the same order (same arrays, so the same cache
traffic), CPU ms, best of ``reps`` interleaved rounds; then each recorded call's best time in that
sequence next to onnxruntime's own per-node profile of the same convolution (matched in execution
order by input and weight shape), the stem and other nodes aside. The difference between the run
and the replay is the Python between and around the kernels, plus the nodes not recorded (stem,
pool, head).

    python benchmarks/bench_session_overhead.py [model=mobilenetv2] [reps=20]
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import kernelkit  # noqa: E402
from kernelkit_numba.kernels import dwtile, ftile  # noqa: E402
from profile_ops import ort_profile  # noqa: E402
from test_bench_numba import model_case  # noqa: E402


def main(argv) -> None:
    name = argv[0] if argv else "mobilenetv2"
    reps = int(argv[1]) if len(argv) > 1 else 20
    rec, on = [], [False]

    def recording(driver):
        def call(*args):
            if on[0]:
                rec.append((driver, args, 0))
            return driver(*args)

        return call

    rows, cols, depthwise = ftile.rows_driver, ftile.cols_driver, dwtile.depthwise
    ftile.rows_driver = lambda kind: recording(rows(kind))  # before the session binds its calls
    ftile.cols_driver = lambda kind: recording(cols(kind))

    def dw(*a, **kw):
        fn, args = depthwise(*a, **kw)
        return recording(fn), args

    dwtile.depthwise = dw
    proto, model, feed, _ = model_case(name)
    sess = kernelkit.Session(model, vendors=["numba", "reference"], threads=1)
    for _ in range(3):
        sess.run(None, feed)
    on[0] = True
    sess.run(None, feed)
    on[0] = False
    ftile.rows_driver, ftile.cols_driver, dwtile.depthwise = rows, cols, depthwise

    def replay():
        for fn, args, _ in rec:
            fn(*args)

    best_s = best_r = float("inf")
    per = [float("inf")] * len(rec)
    for _ in range(reps):
        t = time.process_time()
        sess.run(None, feed)
        best_s = min(best_s, time.process_time() - t)
        t = time.process_time()
        replay()
        best_r = min(best_r, time.process_time() - t)
        for i, (fn, args, _) in enumerate(rec):
            t0 = time.perf_counter()
            fn(*args)
            per[i] = min(per[i], time.perf_counter() - t0)
    print(f"{name}, 1 thread, best of {reps}: session run {best_s * 1e3:.2f} ms, its {len(rec)} recorded conv "
          f"driver calls replayed alone {best_r * 1e3:.2f} ms")
    ox = [o for o in ort_profile(proto, feed, 1, 10) if o[0][0] == "Conv"]
    ox = ox[len(ox) - len(rec):]  # the recorded calls are the last convolutions (not the stem)
    tot_k = tot_o = 0.0
    print(f"{'#':>3s} {'input, weight (onnxruntime)':44s} {'ours':>7s} {'ort':>7s} {'ratio':>6s}")
    for i, ms in enumerate(per):
        key, o = (ox[i][0][1], ox[i][2]) if i < len(ox) else ("", float("nan"))
        tot_k += ms * 1e3
        tot_o += o
        print(f"{i:3d} {str(key)[:44]:44s} {ms * 1e3:7.3f} {o:7.3f} {ms * 1e3 / o:6.2f}")
    print(f"sum {'':44s} {tot_k:7.2f} {tot_o:7.2f} {tot_k / tot_o:6.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
