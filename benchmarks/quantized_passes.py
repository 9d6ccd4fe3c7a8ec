"""One quantized model (as benchmarks/quantized.py makes it) in one process: kernelkit int8's
Session.run against onnxruntime int8, best and median of interleaved runs at batch 1, and the same
model with some passes left out (``--without``), whose outputs are compared with the full
pipeline's (identical or the largest difference).

    OPENBLAS_NUM_THREADS=1 python benchmarks/quantized_passes.py mlp --without fuse_dynamic_relu
    OPENBLAS_NUM_THREADS=1 python benchmarks/quantized_passes.py transformer --without merge_dynamic_matmul
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")
import kernelkit  # noqa: E402
import kernelkit.passes as kpasses  # noqa: E402
import numpy as np  # noqa: E402
import onnx  # noqa: E402
from kernelkit_converters.onnx import convert  # noqa: E402
from kernelkit_converters.quantize import quantize  # noqa: E402

_spec = importlib.util.spec_from_file_location("kernelkit_quantized", Path(__file__).parent / "quantized.py")
qbench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(qbench)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model", choices=sorted(m for m, mode in qbench.MODES.items() if mode == "dynamic"))
    p.add_argument("--without", default="", help="comma separated pass names left out of the second session")
    p.add_argument("--runs", type=int, default=300)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    folder = Path(tempfile.mkdtemp())
    proto = qbench.zoo.MODELS[args.model]()
    onnx.save(proto, folder / "m.onnx")
    path = quantize(folder / "m.onnx", folder / "m.int8.onnx", mode="dynamic", reduce_range=not qbench._has_vnni())
    model = convert(path)
    drop = [n for n in args.without.split(",") if n]
    names = [q.name for q in kpasses.passes() if q.default and q.name not in drop]
    runs = {"kk int8": qbench._kernelkit(model, args.threads), "ort int8": qbench._ort(path, args.threads)}
    if drop:
        sess = kernelkit.Session(model, threads=args.threads, passes=names, options={"numba_start": "eager"})
        runs[f"kk int8 without {','.join(drop)}"] = lambda x: sess.run(None, {"x": x})[0]
    x = qbench._inputs(proto, 1, 0)
    if drop:
        full, part = runs["kk int8"](x), list(runs.values())[-1](x)
        diff = float(np.max(np.abs(full - part)))
        print("outputs identical" if np.array_equal(full, part) else f"outputs differ by at most {diff:.3g}")
    times = {k: [] for k in runs}
    for fn in runs.values():
        fn(x)
    for _ in range(args.runs):
        for k, fn in runs.items():
            t0 = time.perf_counter()
            fn(x)
            times[k].append(time.perf_counter() - t0)
    print(f"{args.model}: batch 1, {args.threads} thread(s), {args.runs} interleaved runs (us)")
    for k, ts in times.items():
        print(f"  {k:40s} best {min(ts) * 1e6:9.1f}  median {np.median(ts) * 1e6:9.1f}")
    best = {k: min(ts) for k, ts in times.items()}
    print(f"  kk int8 / ort int8 (best): {best['kk int8'] / best['ort int8']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
