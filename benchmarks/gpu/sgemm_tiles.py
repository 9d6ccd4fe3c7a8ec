"""SGEMM tile sweep on the OpenCL device against torch's cuBLAS: every GPU tile candidate of
``gemm.py`` (the 128-bit global load ``GPU_LARGE`` tiles too) at each size, timed by device events.

    source .whl/prelude.sh
    python3 benchmarks/gpu/sgemm_tiles.py [OUTDIR] [--sizes 1024,2048,4096] [--ptx]

Prints one line per (size, tile): TFLOP/s from the kernels' device time (fastest of three
timings of several launches) and the ratio to torch (TF32 off, CUDA events); then the best tile
per size. With ``--ptx`` (NVIDIA), each tile is also built once with ``-cl-nv-verbose`` and the
ptxas line (registers, spills, shared memory) printed, and the best tile's PTX is written to
OUTDIR. Writes ``OUTDIR/sgemm_tiles.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np


def _torch_tflops(n: int, iters: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(iters):
            a @ b
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / iters)
    return 2 * n**3 / best / 1e12


def _ptxas(dev, params: dict) -> tuple[str, bytes | None]:
    """The ptxas summary of a tile built with -cl-nv-verbose, and its PTX (NVIDIA only)."""
    import pyopencl as cl
    from kernelkit_opencl.kernels._common import source
    from kernelkit_opencl.kernels.gemm import build_options, program_defines
    from kernelkit_opencl.programs import format_define

    defines = dict(program_defines(params), TRANS_A=0, TRANS_B=0)
    opts = [f"-D{k}={format_define(v)}" for k, v in sorted(defines.items())]
    opts += [*build_options(params), "-cl-nv-verbose"]
    try:
        prog = cl.Program(dev.context, source("gemm.cl")).build(options=opts, devices=[dev.cl_device])
    except cl.Error as exc:
        return f"build failed: {str(exc)[:200]}", None
    log = prog.get_build_info(dev.cl_device, cl.program_build_info.LOG)
    lines = [ln.strip() for ln in log.splitlines() if "registers" in ln or "spill" in ln or "smem" in ln]
    return " | ".join(lines[-3:]), prog.binaries[0]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default=os.environ.get("OUT"))
    ap.add_argument("--sizes", default="1024,2048,4096")
    ap.add_argument("--ptx", action="store_true")
    ap.add_argument("--tiles", help="indices into GPU_TILES + GPU_LARGE (+ GPU_NVIDIA there); default: all")
    ap.add_argument("--no-json", action="store_true", help="no sgemm_tiles.json (the printed lines carry it)")
    args = ap.parse_args()
    os.environ.setdefault("KERNELKIT_OPENCL_DEVICE", "NVIDIA")
    from kernelkit_opencl.kernels import gemm
    from kernelkit_opencl.kernels.gemm import GemmCall, _launch
    from kernelkit_opencl.runtime import OpenCLDevice

    dev = OpenCLDevice({"opencl_tune": False, "opencl_async_build": False})
    tiles = gemm.GPU_TILES + gemm.GPU_LARGE + (gemm.GPU_NVIDIA if gemm._nvidia(dev) else [])
    pick = [int(v) for v in args.tiles.split(",")] if args.tiles else range(len(tiles))
    ptx = {}
    if args.ptx:
        for i in pick:
            p = tiles[i]
            info, binary = _ptxas(dev, p)
            ptx[i] = binary
            print(f"tile {i} {p}: {info}", flush=True)
    rows = []
    for n in [int(v) for v in args.sizes.split(",")]:
        rng = np.random.default_rng(n)
        a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
        A, B, C = dev.upload(a), dev.upload(b), dev.empty((n, n), np.float32)
        call = GemmCall(n, n, n, n, n, n)
        reps = max(2, int(4e11 // (2 * n**3)))
        ref = None
        torch_tf = _torch_tflops(n, reps)
        for i in pick:
            p = tiles[i]
            try:
                _launch(dev, call, p, A, B, None, C).wait()
                got = dev.download(C)
                if ref is None:
                    ref = a.astype(np.float64) @ b
                err = float(np.abs(got - ref).max() / np.abs(ref).max())
                def launches(p=p, call=call, A=A, B=B, C=C, reps=reps):
                    for _ in range(reps):
                        _launch(dev, call, p, A, B, None, C)

                t = min(dev.time_launches(launches) for _ in range(3)) / reps
            except Exception as exc:  # noqa: BLE001 - a tile the device rejects is reported, not fatal
                print(f"SGEMM {n} tile {i}: failed: {exc}", flush=True)
                continue
            tf = 2 * n**3 / t / 1e12
            row = {"n": n, "tile": i, "params": p, "tflops": tf, "ms": t * 1e3, "rel_err": err,
                   "torch_tflops": torch_tf, "ratio": tf / torch_tf if torch_tf else None}
            rows.append(row)
            vs = f" ({tf / torch_tf:.3f}x of {torch_tf:.1f})" if torch_tf else ""
            print(f"SGEMM {n} tile {i:2d} {tf:6.2f} TFLOP/s{vs} err {err:.1e} {p}", flush=True)
    best = {}
    for r in rows:
        if r["n"] not in best or r["tflops"] > best[r["n"]]["tflops"]:
            best[r["n"]] = r
    for n, r in best.items():
        print(f"best SGEMM {n}: tile {r['tile']} {r['tflops']:.2f} TFLOP/s"
              + (f", {r['ratio']:.3f}x torch" if r["ratio"] else "") + f" {r['params']}", flush=True)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        if not args.no_json:
            Path(args.out, "sgemm_tiles.json").write_text(json.dumps(rows, indent=1))
        winners = sorted({r["tile"] for r in best.values() if ptx.get(r["tile"])})
        if winners:  # one file (the device call brings back few files)
            Path(args.out, "sgemm_best.ptx").write_bytes(
                b"".join(f"// ---- tile {i} {tiles[i]}\n".encode() + ptx[i] for i in winners))
    return 0


if __name__ == "__main__":
    sys.exit(main())
