"""kernelkit's OpenCL backend on the NVIDIA GPU machine: one script, one table (issue 5).

    source .whl/prelude.sh; python3 benchmarks/gpu/run_gpu.py [--quick] [--skip-conformance]

Prints: SGEMM 1024/2048/4096 TFLOP/s against torch's cuBLAS (TF32 off); ResNet-18 batch 1,
ResNet-50 and MobileNetV2 batch 32 latency (one synchronous run) and images/s (two runs in flight
through run_async; also the synchronous rate) against torch eager fp32 (TF32 off; its queue is
asynchronous by nature) running the same folded graphs; cold vs warm session build (empty vs
filled program cache and tuned-parameter file, each in a fresh process); the per-kernel profile of
ResNet-50 from OpenCL event timestamps; then runs tests/test_conformance.py on the GPU. Writes
results.json to $OUT when set. Takes about 1-2 minutes on an H100.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

MODEL_CASES = [("resnet18", 1), ("resnet50", 32), ("mobilenetv2", 32), ("transformer", 32), ("transformer", 1)]
REPEATS = 1  # --repeats: each model timing taken this many times, the best kept
RES = 224  # --res: input resolution (smaller only for smoke tests on PoCL)
TORCH_REF_MS = {"resnet18": 1.8, "resnet50": 11.7, "mobilenetv2": 4.2, "transformer": float("nan")}


def _feed(name: str, batch: int) -> np.ndarray:
    shape = (batch, 128, 256) if name == "transformer" else (batch, 3, RES, RES)
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def _host_cost(sess, x) -> dict:
    """Host time per node: the replay's enqueue call alone (device idle before it), and the
    node-by-node dispatch of the same session with replay off, both per node."""
    from kernelkit_opencl.capture import Replay

    replays = [r for r in sess._replayer.state.values() if isinstance(r, Replay)]
    if not replays:
        return {}
    rep, dev = replays[0], sess._replayer.device
    best = float("inf")
    for _ in range(5):  # the recorded launches alone (no feed/output transfers), device idle first
        dev.synchronize()
        t0 = time.perf_counter()
        for call in rep.calls:
            call()
        best = min(best, time.perf_counter() - t0)
        dev.synchronize()
    return {"replay_enqueue_us_per_node": best * 1e6 / len(sess.plan.kernel_steps()), "launches": rep.launches}


def _device_resident(sess, x, iters: int) -> float:
    """Seconds per run with the input already on the device and the output left there
    (io_binding), as torch's timing has it; the device is drained at the end."""
    out = sess.graph.outputs[0]
    dev = sess._devices["gpu"]
    xdev = dev.upload(x)
    binding = sess.io_binding()
    binding.bind_input("x", xdev)
    binding.bind_output(out)
    for _ in range(3):
        sess.run_with_iobinding(binding)
    dev.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        sess.run_with_iobinding(binding)
    dev.synchronize()
    return (time.perf_counter() - t0) / iters


def half_rows(iters: int) -> list[dict]:
    """options={"float16": True} (half storage, float math) against fp32: cosine of the outputs
    and the time with the input on the device."""
    import kernelkit as kk
    from kernelkit.testing import cosine
    from models import MODELS

    rows = []
    for name, batch in [("resnet50", 32), ("mobilenetv2", 32), ("transformer", 32)]:
        model, x = MODELS[name](batch, RES), _feed(name, batch)
        full = kk.Session(model, device="gpu", fallback=False)
        half = kk.Session(model, device="gpu", fallback=False, options={"float16": True})
        for _ in range(2):
            want, got = full.run(None, {"x": x})[0], half.run(None, {"x": x})[0]
        row = {"model": name, "batch": batch, "cosine": cosine(got, want),
               "fp32_ms": _device_resident(full, x, iters) * 1e3, "fp16_ms": _device_resident(half, x, iters) * 1e3}
        log(f"  float16 {name}: {row}")
        rows.append(row)
    return rows


def pipeline(iters: int, batch: int = 32) -> dict:
    """Two transformer encoders b32 in a row: outputs through the host (run + run) vs kept on
    the device between them (io_binding)."""
    import kernelkit as kk
    from models import MODELS

    a = kk.Session(MODELS["transformer"](batch), device="gpu", fallback=False)
    b = kk.Session(MODELS["transformer"](batch), device="gpu", fallback=False)
    x = _feed("transformer", batch)
    ref = None
    for _ in range(3):
        ref = b.run(None, {"x": a.run(None, {"x": x})[0]})[0]
    t0 = time.perf_counter()
    for _ in range(iters):
        b.run(None, {"x": a.run(None, {"x": x})[0]})
    host_ms = (time.perf_counter() - t0) / iters * 1e3
    ba, bb = a.io_binding(), b.io_binding()
    ba.bind_input("x", a._replayer.device.upload(x))
    ba.bind_output(a.graph.outputs[0])
    bb.bind_output(b.graph.outputs[0])

    def step():
        a.run_with_iobinding(ba)
        bb.bind_input("x", ba.get_outputs()[0])
        b.run_with_iobinding(bb)

    for _ in range(3):
        step()
    got = bb.copy_outputs_to_cpu()[0]
    t0 = time.perf_counter()
    for _ in range(iters):
        step()
    bb.get_outputs()[0].device.download(bb.get_outputs()[0])
    dev_ms = (time.perf_counter() - t0) / iters * 1e3
    row = {"host_ms": host_ms, "device_ms": dev_ms, "max_abs_diff": float(np.abs(got - ref).max())}
    log(f"  pipeline: {row}")
    return row


def log(*args):
    print(*args, flush=True)


def _torch():
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch


def _time_torch(torch, fn, iters: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / iters)
    return best


# -- SGEMM -----------------------------------------------------------------------------------------
def sgemm(sizes, torch) -> list[dict]:
    from kernelkit_opencl.kernels.gemm import GemmCall, run_gemm
    from kernelkit_opencl.runtime import OpenCLDevice

    dev = OpenCLDevice({"opencl_tune": True})
    rows = []
    for n in sizes:
        rng = np.random.default_rng(n)
        a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
        A, B, C = dev.upload(a), dev.upload(b), dev.empty((n, n), np.float32)
        call = GemmCall(n, n, n, n, n, n)
        t0 = time.perf_counter()
        run_gemm(dev, call, A, B, None, C).wait()  # tunes (first time) and builds
        tune_s = time.perf_counter() - t0
        got = dev.download(C)
        iters = max(3, int(2e11 // (2 * n**3)))
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(iters):
                ev = run_gemm(dev, call, A, B, None, C)
            ev.wait()
            best = min(best, (time.perf_counter() - t0) / iters)
        row = {"n": n, "kk_tflops": 2 * n**3 / best / 1e12, "kk_ms": best * 1e3, "tune_s": tune_s}
        if torch is not None:
            ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
            tt = _time_torch(torch, lambda ta=ta, tb=tb: ta @ tb, iters)
            ref = (ta @ tb).cpu().numpy()
            row.update(torch_tflops=2 * n**3 / tt / 1e12, torch_ms=tt * 1e3,
                       max_rel_err=float(np.abs(got - ref).max() / np.abs(ref).max()))
        rows.append(row)
        log(f"  SGEMM {n}: {row}")
    return rows


# -- models ----------------------------------------------------------------------------------------
def build_once(name: str, batch: int, profile_out: str | None = None) -> dict:
    """Session build + first run in this (fresh) process: the cold/warm build measurement.
    ``profile_out``: also write cProfile's top functions (cumulative) of it to that file."""
    import kernelkit as kk
    from models import MODELS

    model = MODELS[name](batch, RES)
    x = _feed(name, batch)
    t_imp = time.perf_counter()  # the backend's imports (pyopencl, kernelkit_opencl), reported apart
    import pyopencl  # noqa: F401
    from kernelkit.backends import load_backends

    load_backends(names=["opencl"])  # what a session naming its vendor loads (numba stays unimported)
    imports_s = time.perf_counter() - t_imp
    prof = None
    if profile_out:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    sess = kk.Session(model, device="gpu", vendors=["opencl"], fallback=False)
    t1 = time.perf_counter()
    sess.run(None, {"x": x})
    t2 = time.perf_counter()
    if prof is not None:
        import io
        import pstats

        prof.disable()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(45)
        Path(profile_out).write_text(text.getvalue())
    from kernelkit_opencl import tuning

    progs = sess._devices["gpu"].programs
    return {"session_s": t1 - t0, "first_run_s": t2 - t1, "total_s": t2 - t0, "imports_s": imports_s,
            "programs_built": progs.built,
            "programs_loaded": progs.hits, "tuning_searches": tuning.searches,
            "tuning_s": tuning.search_seconds}


def cold_warm(name: str, batch: int, cache: str, tables: bool = True, profile: str | None = None) -> dict:
    """Cold (empty caches: kernelkit's and the NVIDIA driver's JIT cache) then warm, each in a
    fresh process; ``tables``: the shipped per-device tuning tables on or off (an unknown device)."""
    out = {}
    env = dict(os.environ, KERNELKIT_CACHE_DIR=cache, CUDA_CACHE_PATH=os.path.join(cache, "nv"),
               KERNELKIT_OPENCL_TUNED_TABLES="1" if tables else "0")
    for label in ("cold", "warm"):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--build-once", name, str(batch), "--res", str(RES)]
        if label == "warm" and profile:
            cmd += ["--profile-out", profile]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
        line = [ln for ln in res.stdout.splitlines() if ln.startswith("BUILD ")]
        if res.returncode or not line:
            out[label] = {"error": (res.stderr or res.stdout)[-2000:]}
        else:
            out[label] = json.loads(line[-1][6:])
        log(f"  {name} b{batch} {label} build: {out[label]}")
    return out


def models(torch, quick: bool) -> tuple[list[dict], list[dict]]:
    import kernelkit as kk
    from kernelkit.testing import cosine
    from models import MODELS, torch_runner

    rows, profile = [], {}
    for name, batch in MODEL_CASES:
        model = MODELS[name](batch, RES)
        x = _feed(name, batch)
        sess = kk.Session(model, device="gpu", fallback=False)
        for _ in range(2):
            out = sess.run(None, {"x": x})[0]
        iters = 5 if quick else 20
        wall = float("inf")
        for _ in range(REPEATS):  # --repeats: the best of several timings (a shared host's noise)
            t0 = time.perf_counter()
            for _ in range(iters):
                sess.run(None, {"x": x})
            wall = min(wall, (time.perf_counter() - t0) / iters)
        host = _host_cost(sess, x)
        host["kk_dev_ms"] = min(_device_resident(sess, x, iters) for _ in range(REPEATS)) * 1e3
        nosess = kk.Session(model, device="gpu", fallback=False, options={"replay": False})
        for _ in range(2):
            nosess.run(None, {"x": x})
        t0 = time.perf_counter()
        for _ in range(iters):
            nosess.run(None, {"x": x})
        host["dispatch_ms"] = (time.perf_counter() - t0) / iters * 1e3
        del nosess
        # throughput: two runs in flight through run_async (host work overlaps the device's)
        pending = [sess.run_async(None, {"x": x}) for _ in range(2)]
        t0 = time.perf_counter()
        for _ in range(iters):
            pending.append(sess.run_async(None, {"x": x}))
            pending.pop(0).result()
        for fut in pending:
            fut.result()
        per_image_run = (time.perf_counter() - t0) / (iters + 2)
        # kernels only: events per kernel, summed (no host transfers, no Python overhead)
        psess = kk.Session(model, device="gpu", fallback=False, options={"opencl_profile": True})
        psess.run(None, {"x": x})
        dev = psess._devices["gpu"]
        dev.kernel_profile(reset=True)
        prof, kernel_ms = None, float("inf")
        for _ in range(REPEATS):
            psess.run(None, {"x": x})
            rows_now = dev.kernel_profile(reset=True)
            if sum(r["total_ms"] for r in rows_now) < kernel_ms:
                prof, kernel_ms = rows_now, sum(r["total_ms"] for r in rows_now)
        row = {"model": name, "batch": batch, "kk_ms": wall * 1e3, "kk_img_s": batch / per_image_run,
               "kk_sync_img_s": batch / wall, "kk_kernel_ms": kernel_ms, "nodes": len(sess.plan.kernel_steps()),
               "host_us_per_node": (wall * 1e3 - kernel_ms) * 1e3 / len(sess.plan.kernel_steps()), **host}
        if torch is not None:
            run = torch_runner(model)
            tx = torch.from_numpy(x).cuda()
            with torch.no_grad():
                tt = min(_time_torch(torch, lambda run=run, tx=tx: run(tx), iters) for _ in range(REPEATS))
                ref = run(tx).cpu().numpy()
            row.update(torch_ms=tt * 1e3, torch_img_s=batch / tt, cosine=cosine(out, ref),
                       torchvision_ref_ms=TORCH_REF_MS[name])
        rows.append(row)
        log(f"  {name}: {row}")
        if name in ("resnet18", "resnet50", "transformer", "mobilenetv2") and f"{name}" not in profile:
            profile[name] = prof
    return rows, profile


def conformance() -> dict:
    env = dict(os.environ)
    env.setdefault("KERNELKIT_OPENCL_DEVICE", "NVIDIA")
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "tests" / "test_conformance.py"), "-q", "-k", "opencl",
           "-p", "no:cacheprovider", "--no-header", "-rfE"]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    tail = (res.stdout + res.stderr)[-3000:]
    log(tail)
    return {"rc": res.returncode, "seconds": time.perf_counter() - t0, "tail": tail[-1200:]}


def table(gemm_rows, model_rows, builds, profile) -> str:
    lines = ["", "| benchmark | kernelkit opencl | torch (cuBLAS/cuDNN, TF32 off) | ratio |", "|---|---|---|---|"]
    for r in gemm_rows:
        t = r.get("torch_tflops")
        lines.append(f"| SGEMM {r['n']} | {r['kk_tflops']:.1f} TFLOP/s | {t:.1f} TFLOP/s | {r['kk_tflops'] / t:.2f}x |"
                     if t else f"| SGEMM {r['n']} | {r['kk_tflops']:.1f} TFLOP/s | - | - |")
    for r in model_rows:
        t = r.get("torch_ms")
        kk = (f"{r['kk_ms']:.2f} ms, {r['kk_img_s']:.0f} img/s pipelined ({r['kk_sync_img_s']:.0f} sync); "
              f"kernels {r['kk_kernel_ms']:.2f} ms")
        tor = f"{t:.2f} ms ({r['torch_img_s']:.0f} img/s)" if t else "-"
        kk += f"; input on device {r['kk_dev_ms']:.2f} ms"
        ratio = (f"{t / r['kk_dev_ms']:.2f}x (input on device); host feeds {r['kk_img_s'] / r['torch_img_s']:.2f}x "
                 f"pipelined, {t / r['kk_ms']:.2f}x sync; cos {r['cosine']:.7f}") if t else "-"
        lines.append(f"| {r['model']} b{r['batch']} | {kk} | {tor} | {ratio} |")
    lines += ["", "| model | nodes | launches | host us/node (wall - kernels) | replay enqueue us/node | "
              "node-by-node dispatch ms |", "|---|---|---|---|---|---|"]
    for r in model_rows:
        lines.append(f"| {r['model']} b{r['batch']} | {r['nodes']} | {r.get('launches', '-')} | "
                     f"{r['host_us_per_node']:.1f} | {r.get('replay_enqueue_us_per_node', float('nan')):.1f} | "
                     f"{r.get('dispatch_ms', float('nan')):.2f} |")
    for name, b in builds.items():
        cold, warm = b.get("cold", {}), b.get("warm", {})
        nan = float("nan")
        lines.append(f"| {name} session build + first run | cold {cold.get('total_s', nan):.2f} s "
                     f"(session {cold.get('session_s', nan):.2f} + first run {cold.get('first_run_s', nan):.2f}; "
                     f"{cold.get('programs_built')} programs built, {cold.get('tuning_searches')} tile searches "
                     f"{cold.get('tuning_s', nan):.1f} s) | warm {warm.get('total_s', nan):.2f} s "
                     f"(session {warm.get('session_s', nan):.2f} + first run {warm.get('first_run_s', nan):.2f}; "
                     f"imports before it {warm.get('imports_s', nan):.2f} s; "
                     f"{warm.get('programs_loaded')} programs loaded) | |")
    for name, prof in (profile or {}).items():
        lines += ["", f"{name} (first batch listed) per-kernel device time (OpenCL events), top 12:"]
        total = sum(r["total_ms"] for r in prof)
        for r in prof[:12]:
            lines.append(f"  {r['kernel']:<40} {r['calls']:4d} calls {r['total_ms']:8.2f} ms "
                         f"({100 * r['total_ms'] / total:.0f}%)")
    return "\n".join(lines)


def install_table(out_dir: str | None) -> None:
    """This run's tuned parameters (the cache file) as the device's shipped table: into the
    installed package (so later processes skip tuning) and into ``out_dir`` (to commit)."""
    import re

    from kernelkit_opencl import tuning
    from kernelkit_opencl.runtime import OpenCLDevice

    dev = OpenCLDevice({})
    name = dev.cl_device.name
    fname = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") + ".json"
    n = tuning.export_table(name, dev.platform.identity, tuning.TABLE_DIR / fname)
    if out_dir:
        Path(out_dir, fname).write_bytes((tuning.TABLE_DIR / fname).read_bytes())
    tuning._tables = None
    log(f"== shipped table {fname}: {n} entries for {name!r}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    ap.add_argument("--skip-conformance", action="store_true")
    ap.add_argument("--skip-models", action="store_true")
    ap.add_argument("--skip-extras", action="store_true", help="no float16 and io_binding pipeline rows")
    ap.add_argument("--skip-untuned-cold", action="store_true", help="no cold start without the shipped tables")
    ap.add_argument("--skip-builds", action="store_true", help="no cold/warm build measurement")
    ap.add_argument("--build-once", nargs=2, metavar=("MODEL", "BATCH"))
    ap.add_argument("--profile-out", help="with --build-once: cProfile top functions to this file")
    ap.add_argument("--retune", action="store_true", help="ignore the shipped tables in this process: tune anew")
    ap.add_argument("--install-table", action="store_true",
                    help="after the run, export the tuned parameters as this device's shipped table (into the "
                         "installed package and $OUT), then measure the cold start with it")
    ap.add_argument("--res", type=int, default=224, help="input resolution (224; smaller for smoke tests)")
    ap.add_argument("--sizes", type=int, nargs="*", default=[1024, 2048, 4096], help="SGEMM sizes")
    ap.add_argument("--batch-scale", type=float, default=1.0, help="multiply the model batches (smoke tests)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="time each model (kernelkit wall, input on device, kernels; torch) this many "
                         "times, keep the best")
    ap.add_argument("--models", help="model:batch,... instead of the default cases")
    args = ap.parse_args()
    global RES, MODEL_CASES, REPEATS
    RES = args.res
    REPEATS = max(1, args.repeats)
    if args.models:
        MODEL_CASES = [(c.split(":")[0], int(c.split(":")[1])) for c in args.models.split(",")]
    MODEL_CASES = [(m, max(1, int(b * args.batch_scale))) for m, b in MODEL_CASES]
    if args.build_once:
        print("BUILD " + json.dumps(build_once(args.build_once[0], int(args.build_once[1]), args.profile_out)),
              flush=True)
        return 0
    import pyopencl as cl

    try:  # the ONNX importer's passes (MatMul + Add -> Gemm): what an imported model gets
        import kernelkit_converters.onnx  # noqa: F401
    except ImportError:
        pass

    log("OpenCL devices:", [(p.name, d.name, d.version) for p in cl.get_platforms() for d in p.get_devices()])
    torch = _torch()
    log("torch:", None if torch is None else (torch.__version__, torch.cuda.get_device_name()))
    cache = tempfile.mkdtemp(prefix="kk-cache-")
    os.environ["KERNELKIT_CACHE_DIR"] = cache  # cold start: nothing tuned or built yet
    out_dir = os.environ.get("OUT")
    if args.retune:
        os.environ["KERNELKIT_OPENCL_TUNED_TABLES"] = "0"
    results: dict = {}
    t0 = time.perf_counter()
    log("== cold vs warm session build (fresh processes), no shipped table: bounded tuning")
    results["builds"] = {} if args.skip_builds or args.skip_untuned_cold else {
        "resnet50 (tuning, no table)": cold_warm("resnet50", dict(MODEL_CASES).get("resnet50", 32), cache,
                                                 tables=False)}
    if not args.install_table and not args.skip_builds:
        log("== cold vs warm session build with the shipped tables")
        results["builds"]["resnet50"] = cold_warm(
            "resnet50", dict(MODEL_CASES).get("resnet50", 32), tempfile.mkdtemp(prefix="kk-cache-"),
            profile=os.path.join(out_dir or tempfile.gettempdir(), "warm_profile.txt"))
    log("== SGEMM")
    results["sgemm"] = sgemm(args.sizes, torch)
    if not args.skip_models:
        log("== models")
        results["models"], results["resnet50_profile"] = models(torch, args.quick)
    if not args.skip_models and not args.skip_extras:
        log("== float16 storage")
        results["half"] = half_rows(5 if args.quick else 20)
        log("== pipeline of two models (io_binding)")
        results["pipeline"] = pipeline(10 if args.quick else 30)
    if out_dir:
        Path(out_dir, "results.json").write_text(json.dumps(results, indent=1, default=str))
    if args.install_table:
        install_table(out_dir)
        if not args.skip_builds:
            log("== cold vs warm session build with the shipped table just written")
            results["builds"]["resnet50"] = cold_warm(
                "resnet50", dict(MODEL_CASES).get("resnet50", 32), tempfile.mkdtemp(prefix="kk-cache-"),
                profile=os.path.join(out_dir or tempfile.gettempdir(), "warm_profile.txt"))
    log(table(results["sgemm"], results.get("models", []), results["builds"], results.get("resnet50_profile")))
    for r in results.get("half", []):
        log(f"float16 storage {r['model']} b{r['batch']}: {r['fp16_ms']:.2f} ms vs fp32 {r['fp32_ms']:.2f} ms "
            f"({r['fp32_ms'] / r['fp16_ms']:.2f}x), cosine vs fp32 {r['cosine']:.6f}")
    if "pipeline" in results:
        p = results["pipeline"]
        log(f"\npipeline transformer b32 -> transformer b32: through the host {p['host_ms']:.2f} ms, "
            f"device-resident (io_binding) {p['device_ms']:.2f} ms, max |diff| {p['max_abs_diff']:.2e}")
    if not args.skip_conformance:
        log("== conformance suite on the GPU")
        results["conformance"] = conformance()
    try:  # which tiles won (the SGEMM sizes' classes)
        from kernelkit_opencl import tuning

        for key, params in sorted(json.loads(tuning.path().read_text()).items()):
            if "|gemm|mm|00|" in key:
                log(f"tuned {key.split('|', 1)[1]}: {params}")
    except (OSError, ValueError):
        pass
    results["seconds"] = time.perf_counter() - t0
    out = os.environ.get("OUT")
    if out:
        Path(out, "results.json").write_text(json.dumps(results, indent=1, default=str))
    log(f"total {results['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
