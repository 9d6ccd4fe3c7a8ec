"""Build time, median wall time and per-kernel device time (OpenCL events) of run_gpu's models, one
JSON line: for comparing tuning configurations or code versions, each in a fresh process.

    KERNELKIT_CACHE_DIR=$(mktemp -d) CUDA_CACHE_PATH=$(mktemp -d) \\
        python3 benchmarks/gpu/kernel_times.py LABEL [resnet18:1,mobilenetv2:32,...] [RES]

(`KERNELKIT_OPENCL_TUNED_TABLES=0` ignores the shipped tables, `KERNELKIT_OPENCL_TUNE=0` the
search; another checkout's `packages/*/src` first on `PYTHONPATH` times that code;
`SKIP_PASSES=fuse_attention,...` leaves those default passes out, e.g. to time the unfused block.)
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    import kernelkit as kk
    import kernelkit_opencl
    from models import MODELS

    try:  # the ONNX importer's passes (MatMul + Add -> Gemm), as run_gpu.py applies them
        import kernelkit_converters.onnx  # noqa: F401
    except ImportError:
        pass

    from kernelkit.passes import passes

    skip = {p for p in os.environ.get("SKIP_PASSES", "").split(",") if p}
    chosen = [p.name for p in passes() if p.default and p.name not in skip] if skip else None
    label = sys.argv[1] if len(sys.argv) > 1 else "run"
    cases = [(c.split(":")[0], int(c.split(":")[1]))
             for c in (sys.argv[2] if len(sys.argv) > 2 else "resnet18:1,mobilenetv2:32").split(",")]
    res = int(sys.argv[3]) if len(sys.argv) > 3 else 224
    out = {"label": label, "code": kernelkit_opencl.__file__, "skipped_passes": sorted(skip)}
    for name, batch in cases:
        shape = (batch, 128, 256) if name == "transformer" else (batch, 3, res, res)
        feeds = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
        t0 = time.perf_counter()
        sess = kk.Session(MODELS[name](batch, res), device="gpu", fallback=False, passes=chosen)
        sess.run(None, feeds)
        build = time.perf_counter() - t0
        for _ in range(5):
            sess.run(None, feeds)
        times = []
        for _ in range(30):
            t = time.perf_counter()
            sess.run(None, feeds)
            times.append(time.perf_counter() - t)
        profiled = kk.Session(MODELS[name](batch, res), device="gpu", fallback=False, passes=chosen,
                              options={"opencl_profile": True})
        profiled.run(None, feeds)
        dev = profiled._devices["gpu"]
        dev.kernel_profile(reset=True)
        profiled.run(None, feeds)
        rows = sorted(dev.kernel_profile(reset=True), key=lambda r: -r["total_ms"])
        out[f"{name}_b{batch}"] = {"build_s": round(build, 2), "wall_ms": round(float(np.median(times)) * 1e3, 3),
                                   "kernel_ms": round(sum(r["total_ms"] for r in rows), 3),
                                   "top": [(r["kernel"], r["calls"], round(r["total_ms"], 3)) for r in rows[:12]]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
