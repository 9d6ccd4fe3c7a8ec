"""float16 storage against fp32 on the GPU, and the half vector loads on and off (issue 12, session 4).

    source .whl/prelude.sh
    python3 benchmarks/gpu/half_ab.py [--models resnet50:32,mobilenetv2:32,transformer:32] [--iters 20]

Per model, in one process and with the installed tuned table: an fp32 session, an
``options={"float16": True}`` session with ``vloada_half4`` tile loads (HALF_VEC on, the default
on GPUs) and one with scalar ``vload_half`` (``KERNELKIT_OPENCL_HALF_VEC=0``, its programs built
apart); each timed with the input on the device (run_gpu.py's ``_device_resident``), in rounds
that alternate the three (the best round kept), and the cosine of each float16 output against fp32.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="mobilenetv2:32,transformer:32,resnet50:32")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-scalar", action="store_true", help="skip the HALF_VEC=0 session")
    args = ap.parse_args()
    os.environ.setdefault("KERNELKIT_OPENCL_DEVICE", "NVIDIA")
    import kernelkit as kk
    import run_gpu
    from kernelkit.testing import cosine
    from models import MODELS

    for case in args.models.split(","):
        name, batch = case.split(":")[0], int(case.split(":")[1])
        model, x = MODELS[name](batch, run_gpu.RES), run_gpu._feed(name, batch)
        variants = {"fp32": ({}, "1"), "fp16": ({"float16": True}, "1")}
        if not args.no_scalar:
            variants["fp16_scalar"] = ({"float16": True}, "0")
        sessions, outs, best = {}, {}, {}
        for key, (opts, vec) in variants.items():
            os.environ["KERNELKIT_OPENCL_HALF_VEC"] = vec
            sessions[key] = kk.Session(model, device="gpu", fallback=False, options=opts)
            for _ in range(2):
                outs[key] = sessions[key].run(None, {"x": x})[0]
        for _ in range(args.rounds):  # interleaved: each round times every variant once
            for key, (_, vec) in variants.items():
                os.environ["KERNELKIT_OPENCL_HALF_VEC"] = vec
                t = run_gpu._device_resident(sessions[key], x, args.iters) * 1e3
                best[key] = min(best.get(key, t), t)
        row = {k: round(v, 3) for k, v in best.items()}
        row.update({f"{k}_speedup": round(best["fp32"] / v, 3) for k, v in best.items() if k != "fp32"})
        row.update({f"cos_{k}": round(cosine(outs[k], outs["fp32"]), 7) for k in outs if k != "fp32"})
        print(f"half_ab {name} b{batch}: {row}", flush=True)
        del sessions
    return 0


if __name__ == "__main__":
    sys.exit(main())
