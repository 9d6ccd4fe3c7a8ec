"""float16 storage against fp32 on the GPU, and the half vector loads on and off (issue 12, session 4).

    source .whl/prelude.sh
    python3 benchmarks/gpu/half_ab.py [--models resnet50:32,mobilenetv2:32,transformer:32] [--iters 20]

Per model, in one process and with the installed tuned table: an fp32 session, an
``options={"float16": True}`` session per HALF_VEC level of gemm.cl (``--levels``: 1
``vloada_half4`` tile loads, 2 integer widening of the half bits, 0 scalar ``vload_half``; set
through ``KERNELKIT_OPENCL_HALF_VEC``, each level's programs built apart); each timed with the
input on the device (run_gpu.py's ``_device_resident``) in rounds that alternate the sessions (the
best round kept); the cosine of each float16 output against fp32; ``--profile``: device time per
kernel family. ``*_speedup`` is the fp32 time over the float16 time.
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
    ap.add_argument("--levels", default="1,0",
                    help="HALF_VEC levels of the float16 sessions (1 vloada_half4, 2 integer widening, 0 scalar)")
    ap.add_argument("--profile", action="store_true",
                    help="also the device time per kernel family (OpenCL events) of fp32 and each float16 level")
    args = ap.parse_args()
    os.environ.setdefault("KERNELKIT_OPENCL_DEVICE", "NVIDIA")
    import kernelkit as kk
    import run_gpu

    try:  # the ONNX importer's passes (MatMul + Add -> Gemm), as run_gpu.py and retune_table.py apply them
        import kernelkit_converters.onnx  # noqa: F401
    except ImportError:
        pass
    from kernelkit.testing import cosine
    from models import MODELS

    for case in args.models.split(","):
        name, batch = case.split(":")[0], int(case.split(":")[1])
        model, x = MODELS[name](batch, run_gpu.RES), run_gpu._feed(name, batch)
        variants = {"fp32": ({}, "1")}
        variants.update({f"fp16_v{lv}": ({"float16": True}, lv) for lv in args.levels.split(",")})
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
        if args.profile:
            for key, (opts, vec) in variants.items():
                os.environ["KERNELKIT_OPENCL_HALF_VEC"] = vec
                prof = kk.Session(model, device="gpu", fallback=False, options={**opts, "opencl_profile": True})
                prof.run(None, {"x": x})
                dev = prof._devices["gpu"]
                dev.kernel_profile(reset=True)
                prof.run(None, {"x": x})
                fam: dict[str, float] = {}
                for r in dev.kernel_profile(reset=True):
                    words = r["kernel"].split()
                    label = words[0] + (" split" if any(w.startswith("split") for w in words[1:]) else "")
                    fam[label] = fam.get(label, 0.0) + r["total_ms"]
                top = sorted(fam.items(), key=lambda kv: -kv[1])[:10]
                print(f"  profile {name} {key}: total {sum(fam.values()):.3f} ms "
                      + ", ".join(f"{k} {v:.3f}" for k, v in top), flush=True)
                del prof
        del sessions
    return 0


if __name__ == "__main__":
    sys.exit(main())
