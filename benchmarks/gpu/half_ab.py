"""float16 storage against fp32 on the GPU, and the half vector loads on and off (issue 12, sessions 4, 5).

    source .whl/prelude.sh
    python3 benchmarks/gpu/half_ab.py [--models resnet50:32,mobilenetv2:32,transformer:32] [--iters 20]
        [--levels 3,1] [--profile] [--labels 12] [--scalar-stores] [--wide] [--dw8] [--fp32-tiles] [--ptxas]

Per model, in one process and with the installed tuned table: an fp32 session, an
``options={"float16": True}`` session per HALF_VEC level of gemm.cl (``--levels``: 3 one 64-bit
load converted from a private copy, with HALF_WIDE in the other kernels (the default since session 5); 1
``vloada_half4`` tile loads, 2 integer widening of the half bits, 0 scalar ``vload_half``; set
through ``KERNELKIT_OPENCL_HALF_VEC``, each level's programs built apart); each timed with the
input on the device (run_gpu.py's ``_device_resident``) in rounds that alternate the sessions (the
best round kept); the cosine of each float16 output against fp32; ``--profile``: device time per
kernel family (``--labels K``: also the K kernels whose device time differs most between fp32 and
the first float16 level). ``*_speedup`` is the fp32 time over the float16 time; ``device_MB`` the
bytes of the device's buffer pool after the runs (weights, activations, workspaces).
``--scalar-stores``: also fp32 and float16 sessions with the GEMM/conv epilogue's vector stores
off (``gemm.VECTOR_STORES``; session 5). ``--ptxas`` (NVIDIA): registers and spills of the
commonest conv and GEMM tiles built for float and for half storage (``-cl-nv-verbose``).
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
    ap.add_argument("--levels", default="3,1",
                    help="HALF_VEC levels of the float16 sessions (3 one 64-bit load, the default, with the other "
                         "kernels' 64-bit half accesses; 1 vloada_half4, 2 integer widening, 0 scalar)")
    ap.add_argument("--profile", action="store_true",
                    help="also the device time per kernel family (OpenCL events) of fp32 and each float16 level")
    ap.add_argument("--labels", type=int, default=0, help="with --profile: the K kernels that differ most")
    ap.add_argument("--scalar-stores", action="store_true", help="also sessions with scalar epilogue stores")
    ap.add_argument("--ptxas", action="store_true", help="ptxas registers of the main tiles, float vs half")
    ap.add_argument("--wide", action="store_true",
                    help="also a float16 session with 64-bit half accesses (HALF_VEC 3, KERNELKIT_OPENCL_HALF_WIDE=1)")
    ap.add_argument("--dw8", action="store_true",
                    help="also fp32 and float16 sessions with 8 depthwise outputs per work-item (models with one)")
    ap.add_argument("--fp32-tiles", action="store_true",
                    help="also a float16 session on fp32's shipped tiles (KERNELKIT_OPENCL_HALF_TABLE=fp32)")
    args = ap.parse_args()
    os.environ.setdefault("KERNELKIT_OPENCL_DEVICE", "NVIDIA")
    import kernelkit as kk
    import run_gpu

    try:  # the ONNX importer's passes (MatMul + Add -> Gemm), as run_gpu.py and retune_table.py apply them
        import kernelkit_converters.onnx  # noqa: F401
    except ImportError:
        pass
    from kernelkit.testing import cosine
    from kernelkit_opencl.kernels import gemm
    from models import MODELS

    if args.ptxas:
        _ptxas_report()
    default_stores = dict(gemm.VECTOR_STORES)

    def stores(on: bool) -> dict:  # the shipped policy, or every epilogue store scalar
        return dict(default_stores) if on else dict.fromkeys(default_stores, False)

    for case in args.models.split(","):
        name, batch = case.split(":")[0], int(case.split(":")[1])
        model, x = MODELS[name](batch, run_gpu.RES), run_gpu._feed(name, batch)
        variants = {"fp32": ({}, "1", True)}
        variants.update({f"fp16_v{lv}": ({"float16": True}, lv, True) for lv in args.levels.split(",")})
        if args.scalar_stores:
            lv = args.levels.split(",")[0]
            variants.update({"fp32_scalarst": ({}, "1", False), f"fp16_v{lv}_scalarst": ({"float16": True}, lv, False)})
        if args.fp32_tiles:
            variants["fp16_fp32tiles"] = ({"float16": True}, args.levels.split(",")[0], True)
        if args.wide:
            variants["fp16_wide"] = ({"float16": True}, "3", True)
        if args.dw8 and any(n.op == "Conv" and n.attrs.get("group", 1) > 1 for n in model.graph.nodes):
            lv = args.levels.split(",")[0]
            variants.update({"fp32_dw8": ({}, "1", True), f"fp16_v{lv}_dw8": ({"float16": True}, lv, True)})

        def setenv(key):  # the per-variant switches read when a session builds its kernels
            os.environ["KERNELKIT_OPENCL_HALF_TABLE"] = "fp32" if key == "fp16_fp32tiles" else ""
            os.environ["KERNELKIT_OPENCL_DW_VEC"] = "8" if key.endswith("_dw8") else ""
            # 64-bit half accesses in the other kernels with level 3 (the default pair), not with 0-2
            os.environ["KERNELKIT_OPENCL_HALF_WIDE"] = "1" if key == "fp16_wide" or key.startswith("fp16_v3") else "0"
        sessions, outs, best, mbytes = {}, {}, {}, {}
        for key, (opts, vec, vst) in variants.items():
            os.environ["KERNELKIT_OPENCL_HALF_VEC"] = vec
            gemm.VECTOR_STORES = stores(vst)
            setenv(key)
            sessions[key] = kk.Session(model, device="gpu", fallback=False, options=opts)
            for _ in range(2):
                outs[key] = sessions[key].run(None, {"x": x})[0]
        for _ in range(args.rounds):  # interleaved: each round times every variant once
            for key, (_, vec, vst) in variants.items():
                os.environ["KERNELKIT_OPENCL_HALF_VEC"] = vec
                gemm.VECTOR_STORES = stores(vst)
                t = run_gpu._device_resident(sessions[key], x, args.iters) * 1e3
                best[key] = min(best.get(key, t), t)
                mbytes[key] = sessions[key]._devices["gpu"].pool.allocated_bytes / 1e6
        gemm.VECTOR_STORES = default_stores
        row = {k: round(v, 3) for k, v in best.items()}
        row.update({f"{k}_speedup": round(best["fp32"] / v, 3) for k, v in best.items() if k != "fp32"})
        row.update({f"cos_{k}": round(cosine(outs[k], outs["fp32"]), 7) for k in outs if k != "fp32"})
        row.update({f"device_MB_{k}": round(v, 1) for k, v in mbytes.items()})
        print(f"half_ab {name} b{batch}: {row}", flush=True)
        if args.profile:
            per_label = {}
            for key, (opts, vec, vst) in variants.items():
                os.environ["KERNELKIT_OPENCL_HALF_VEC"] = vec
                gemm.VECTOR_STORES = stores(vst)
                setenv(key)
                prof = kk.Session(model, device="gpu", fallback=False, options={**opts, "opencl_profile": True})
                prof.run(None, {"x": x})
                dev = prof._devices["gpu"]
                dev.kernel_profile(reset=True)
                prof.run(None, {"x": x})
                fam: dict[str, float] = {}
                rows = dev.kernel_profile(reset=True)
                per_label[key] = {r["kernel"]: (r["total_ms"], r["calls"]) for r in rows}
                for r in rows:
                    words = r["kernel"].split()
                    label = words[0] + (" split" if any(w.startswith("split") for w in words[1:]) else "")
                    fam[label] = fam.get(label, 0.0) + r["total_ms"]
                top = sorted(fam.items(), key=lambda kv: -kv[1])[:10]
                print(f"  profile {name} {key}: total {sum(fam.values()):.3f} ms "
                      + ", ".join(f"{k} {v:.3f}" for k, v in top), flush=True)
                del prof
            gemm.VECTOR_STORES = default_stores
            half_key = next((k for k in variants if k.startswith("fp16")), None)
            if args.labels and half_key:
                a, b = per_label["fp32"], per_label[half_key]
                diff = sorted(set(a) | set(b), key=lambda k: -abs(b.get(k, (0, 0))[0] - a.get(k, (0, 0))[0]))
                for k in diff[:args.labels]:
                    (ta, ca), (tb, cb) = a.get(k, (0.0, 0)), b.get(k, (0.0, 0))
                    print(f"    label {name} {k!r}: fp32 {ta:.3f} ms ({ca}) {half_key} {tb:.3f} ms ({cb})", flush=True)
        del sessions
    return 0


def _ptxas_report() -> None:
    """ptxas' registers/spills of the commonest tiles (shipped table) as conv and as GEMM, built
    for float and for half storage at the device's HALF_VEC level (NVIDIA's -cl-nv-verbose)."""
    import pyopencl as cl
    from kernelkit_opencl.kernels import gemm
    from kernelkit_opencl.kernels._common import source
    from kernelkit_opencl.programs import format_define
    from kernelkit_opencl.runtime import OpenCLDevice

    dev = OpenCLDevice({})
    tiles = {"8x8 bk16 vec": gemm.GPU_LARGE[0], "8x4 bk16 vec": gemm.GPU_LARGE[2],
             "4x8 bk16 vec": gemm.GPU_LARGE[3], "4x4 bk16": gemm.GPU_TILES[6], "8x8 bk8 vec": gemm.GPU_LARGE[1]}
    for name, params in tiles.items():
        for conv in (True, False):
            for half in (False, True):
                defines = dict(gemm.program_defines(params), TRANS_A=0, TRANS_B=0)
                if conv:
                    defines["CONV"] = 1
                if half:
                    defines.update(STORAGE_HALF=1, HALF_VEC=gemm.half_vector_loads(dev))
                opts = [f"-D{k}={format_define(v)}" for k, v in sorted(defines.items())] + ["-cl-nv-verbose"]
                try:
                    prog = cl.Program(dev.context, "#define ACT(v) (v)\n" + source("gemm.cl")).build(
                        options=opts, devices=[dev.cl_device])
                    log = prog.get_build_info(dev.cl_device, cl.program_build_info.LOG)
                    info = " | ".join(ln.strip() for ln in log.splitlines()
                                      if "registers" in ln or "spill" in ln)[-300:]
                except cl.Error as exc:
                    info = f"build failed: {str(exc)[:200]}"
                print(f"  ptxas {name} {'conv' if conv else 'mm'} {'half' if half else 'float'}: {info}", flush=True)
    # how the half accesses compile: global load/store widths and conversions in the PTX
    from kernelkit_opencl.kernels.elementwise import program_source

    progs = {"elementwise float": (program_source(), []), "elementwise half": (program_source(), ["-DSTORAGE_HALF=1"]),
             "elementwise half wide": (program_source(), ["-DSTORAGE_HALF=1", "-DHALF_WIDE=1"])}
    for lv in (1, 3):
        d = dict(gemm.program_defines(gemm.GPU_LARGE[2]), TRANS_A=0, TRANS_B=0, STORAGE_HALF=1, HALF_VEC=lv)
        progs[f"gemm 8x4 vec half level {lv}"] = ("#define ACT(v) (v)\n" + source("gemm.cl"),
                                                  [f"-D{k}={format_define(v)}" for k, v in sorted(d.items())])
    ops = ("ld.global.u16", "ld.global.b16", "ld.global.v2.u16", "ld.global.v4.u16", "ld.global.v2.u32",
           "ld.global.u64", "ld.global.v2.f32", "ld.global.v4.f32", "ld.global.nc", "st.global.u16", "st.global.b16",
           "st.global.v4.u16", "st.global.v2.u32", "st.global.u64", "st.global.v4.f32", "cvt.f32.f16", "cvt.rn.f16.f32")
    for name, (src, opts) in progs.items():
        try:
            ptx = cl.Program(dev.context, src).build(options=opts, devices=[dev.cl_device]).binaries[0].decode(
                errors="replace")
            counts = {op: ptx.count(op) for op in ops if ptx.count(op)}
        except cl.Error as exc:
            counts = {"build failed": str(exc)[:100]}
        print(f"  ptx {name}: {counts}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
