"""Regenerate the shipped tuned-parameter table of this OpenCL device from the benchmark's shapes.

    source .whl/prelude.sh
    python3 benchmarks/gpu/retune_table.py OUTDIR [--install] [--merge] \\
        [--cases resnet18:1,resnet50:32,mobilenetv2:32,transformer:32,transformer:1] \\
        [--sgemm 1024,2048,4096] [--half resnet50:32,...] [--budget 20]

Runs the tile search (ranked by device time, ``OpenCLDevice.time_launches``) for every GEMM /
convolution shape class that the listed models (the graphs of ``models.py`` after the ONNX
importer's passes, as ``run_gpu.py`` runs them), the SGEMM sizes and the float16 cases meet, in a
fresh cache with the shipped tables off (so every class is searched, with a larger time budget
than a cold start's), then writes ``OUTDIR/<device>.json`` in the format of
``kernelkit_opencl/tuned/``. ``--merge`` keeps the entries of the shipped table that this run did
not tune (default: the table is this run's entries only); ``--install`` also writes it over the
installed package's table, so later processes (run_gpu.py) start with it. Models run in the order
given: a shape class (M, N, K rounded up to powers of two) takes the choice of its first shape,
so put the cases that matter most first (ResNet-18 b1's small convolutions before ResNet-50's).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _cases(text: str) -> list[tuple[str, int]]:
    return [(c.split(":")[0], int(c.split(":")[1])) for c in text.split(",") if c]


def _feed(name: str, batch: int, res: int) -> np.ndarray:
    shape = (batch, 128, 256) if name == "transformer" else (batch, 3, res, res)
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", help="folder for the table")
    ap.add_argument("--cases", default="resnet18:1,mobilenetv2:32,resnet50:32,transformer:32,transformer:1")
    ap.add_argument("--sgemm", default="1024,2048,4096")
    ap.add_argument("--half", default="resnet50:32,mobilenetv2:32,transformer:32",
                    help="cases also tuned with options={'float16': True}")
    ap.add_argument("--budget", type=float, default=20.0, help="seconds of timing per search")
    ap.add_argument("--share", type=float, default=0.03,
                    help="a tile the layout already uses wins within this fraction of the best (fewer programs, "
                         "faster cold start)")
    ap.add_argument("--no-pointwise", action="store_true",
                    help="skip the CNN cases' second pass with opencl_pointwise_gemm (its batched-GEMM classes)")
    ap.add_argument("--res", type=int, default=224)
    ap.add_argument("--merge", action="store_true", help="keep the shipped table's entries this run did not tune")
    ap.add_argument("--install", action="store_true", help="also write the table into the installed package")
    args = ap.parse_args()

    # before kernelkit_opencl reads them: a fresh cache, every class searched, a larger budget
    os.environ["KERNELKIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="kk-retune-")
    os.environ["KERNELKIT_OPENCL_TUNED_TABLES"] = "0"
    os.environ["KERNELKIT_OPENCL_TUNE_BUDGET"] = str(args.budget)
    os.environ["KERNELKIT_OPENCL_TUNE_SHARE"] = str(args.share)
    os.environ.setdefault("KERNELKIT_OPENCL_DEVICE", "NVIDIA")

    from kernelkit_opencl import tuning
    from kernelkit_opencl.runtime import OpenCLDevice

    try:  # the ONNX importer's passes (MatMul + Add -> Gemm): the shapes an imported model has
        import kernelkit_converters.onnx  # noqa: F401
    except ImportError:
        pass

    t_all = time.perf_counter()
    dev = OpenCLDevice({"opencl_tune": True})
    name = dev.cl_device.name
    print(f"device {name!r}, budget {args.budget} s per search, share {args.share}", flush=True)
    todo = [(m, b, False) for m, b in _cases(args.cases)] + [(m, b, True) for m, b in _cases(args.half)]
    try:
        _tune(args, dev, todo)
    except _Stopped:  # out of time (a device call's limit): the table gets what was tuned so far
        print("stopped by SIGTERM: writing the entries tuned so far", flush=True)
    _write(args, dev, tuning, t_all)
    return 0


class _Stopped(BaseException):  # not an Exception: the search skips failing candidates
    pass


def _on_term(signum, frame):
    raise _Stopped


def _tune(args, dev, todo) -> None:
    import kernelkit as kk
    from kernelkit_opencl import tuning
    from kernelkit_opencl.kernels.gemm import GemmCall, run_gemm
    from models import MODELS

    signal.signal(signal.SIGTERM, _on_term)
    for model, batch, half in todo:
        # the default path, then (CNNs) the 1x1 convolutions as batched GEMMs (opencl_pointwise_gemm)
        for pointwise in (False, True) if model != "transformer" and not args.no_pointwise else (False,):
            t0, s0 = time.perf_counter(), tuning.searches
            opts = {"opencl_tune": True, "opencl_async_build": False, "opencl_pointwise_gemm": pointwise,
                    **({"float16": True} if half else {})}
            sess = kk.Session(MODELS[model](batch, args.res), device="gpu", fallback=False, options=opts)
            sess.run(None, {"x": _feed(model, batch, args.res)})
            print(f"  {model} b{batch}{' float16' if half else ''}{' pointwise' if pointwise else ''}: "
                  f"{tuning.searches - s0} searches, {time.perf_counter() - t0:.1f} s", flush=True)
            del sess
    for n in [int(v) for v in args.sgemm.split(",") if v]:
        t0 = time.perf_counter()
        a = dev.upload(np.ones((n, n), np.float32))
        c = dev.empty((n, n), np.float32)
        run_gemm(dev, GemmCall(n, n, n, n, n, n), a, a, None, c).wait()
        print(f"  SGEMM {n}: {time.perf_counter() - t0:.1f} s", flush=True)


def _write(args, dev, tuning, t_all) -> None:
    name = dev.cl_device.name
    fname = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") + ".json"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    shipped = tuning.TABLE_DIR / fname
    dst = out / fname
    if args.merge and shipped.exists():
        dst.write_bytes(shipped.read_bytes())
    elif dst.exists():
        dst.unlink()
    n = tuning.export_table(name, dev.platform.identity, dst)
    if args.install:
        shipped.write_bytes(dst.read_bytes())
        tuning._tables = None
    entries = json.loads(dst.read_text())["entries"]
    splits = sum(1 for v in entries.values() if v.get("SPLIT_K", 1) > 1)
    vec = sum(1 for v in entries.values() if v.get("VEC_GLD"))
    print(f"table {dst}: {n} entries ({splits} split-K, {vec} with 128-bit global loads), "
          f"{tuning.searches} searches, {tuning.search_seconds:.0f} s searching, "
          f"{time.perf_counter() - t_all:.0f} s in all{'; installed' if args.install else ''}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
