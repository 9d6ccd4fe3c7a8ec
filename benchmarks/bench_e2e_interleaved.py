"""numba, the NumPy reference and onnxruntime on one benchmark model, calls interleaved in one
process and the best of ``reps`` kept per runtime: on a shared, noisy machine the ratios of one
run are meaningful where block medians in separate processes are not (docs/numba.md). At one
thread the CPU time of the process is used (time spent waiting for a core does not count).

    python benchmarks/bench_e2e_interleaved.py resnet18 [reps=15] [threads=1] [batch=1] [f32ab=0] [dwab=0]

``f32ab=1`` adds "numba_blas": the same numba Session with KERNELKIT_F32_GEMM=off around each of its
calls (the convolutions on OpenBLAS instead of the float32 micro-kernels of kernels/ftile.py).
``dwab=1`` adds "numba_loops": the same with KERNELKIT_F32_DEPTHWISE=off (depthwise convolutions and
MaxPool on Numba loops instead of the window tiles of kernels/dwtile.py).
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# steady state: numba kernels compile in the warm-up calls (not in the background while timed)
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import kernelkit  # noqa: E402
from test_bench_numba import model_case, ort_session  # noqa: E402


def batched(name: str, batch: int):
    """(onnx proto, kernelkit model, feed) of a benchmark model at another batch size."""
    proto, model, feed, _ = model_case(name)
    if batch == 1:
        return proto, model, feed
    import onnx
    from kernelkit_converters.onnx import convert

    proto = onnx.ModelProto.FromString(proto.SerializeToString())
    for vi in list(proto.graph.input) + list(proto.graph.output):
        vi.type.tensor_type.shape.dim[0].dim_value = batch
    return proto, convert(proto), {k: np.repeat(v, batch, axis=0) for k, v in feed.items()}


def _with_env(run, name, value):
    """``run`` with the environment variable ``name`` set to ``value`` around each call."""

    def wrapped(out, feeds):
        os.environ[name] = value
        try:
            return run(out, feeds)
        finally:
            os.environ.pop(name)

    return wrapped


def main(argv):
    name = argv[0]
    reps = int(argv[1]) if len(argv) > 1 else 15
    threads = int(argv[2]) if len(argv) > 2 else 1
    batch = int(argv[3]) if len(argv) > 3 else 1
    f32ab = len(argv) > 4 and argv[4] == "1"
    proto, model, feed = batched(name, batch)
    from threadpoolctl import threadpool_limits

    runs = {"numba": kernelkit.Session(model, vendors=["numba", "reference"], threads=threads).run,
            "ort": ort_session(proto, threads).run}
    if f32ab:
        runs["numba_blas"] = _with_env(runs["numba"], "KERNELKIT_F32_GEMM", "off")
    if len(argv) > 5 and argv[5] == "1":
        runs["numba_loops"] = _with_env(runs["numba"], "KERNELKIT_F32_DEPTHWISE", "off")
    if threads == 1:
        ref = kernelkit.Session(model, vendors=["reference"])

        def reference(out, feeds):
            with threadpool_limits(1, user_api="blas"):
                return ref.run(out, feeds)

        runs["reference"] = reference
    from kernelkit.testing import MODEL_COSINE, cosine

    agree = cosine(runs["numba"](None, feed)[0], runs["ort"](None, feed)[0])
    assert agree >= MODEL_COSINE, f"numba disagrees with onnxruntime: cosine {agree}"
    clock = time.process_time if threads == 1 else time.perf_counter
    best = {k: np.inf for k in runs}
    for run in runs.values():
        run(None, feed)
    for i in range(reps):
        for k, run in runs.items():
            if k == "reference" and i % 3:
                continue
            t0 = clock()
            run(None, feed)
            best[k] = min(best[k], clock() - t0)
    line = " ".join(f"{k} {v * 1e3:.2f}" for k, v in best.items())
    extra = f" | numba/ort {best['numba'] / best['ort']:.2f}"
    for k in ("numba_blas", "numba_loops"):
        if k in best:
            extra += f" {k}/numba {best[k] / best['numba']:.2f}"
    if "reference" in best:
        extra += f" reference/numba {best['reference'] / best['numba']:.2f}"
    print(f"{name} b{batch} {threads}t ({'cpu' if threads == 1 else 'wall'} ms, best of {reps}): {line}{extra}")


if __name__ == "__main__":
    main(sys.argv[1:])
