"""int8 models: kernelkit's numba kernels against onnxruntime running the same quantized model, and
against kernelkit's own fp32, with the agreement checks of docs/quantization.md.

    python benchmarks/quantized.py                          # the four published-size models
    python benchmarks/quantized.py --small --rounds 5       # the test-size versions, quickly
    OPENBLAS_NUM_THREADS=2 taskset -c 0,1 python benchmarks/quantized.py --threads 2   # as docs/benchmarks.md

ResNet-18 and MobileNetV2 are quantized static (QDQ, per-channel, calibrated on 16 random inputs),
the MLP and the transformer encoder dynamic, by onnxruntime's quantizer through
``kernelkit_converters.quantize``; the models come from benchmarks/models/zoo.py. Latency is the
median of ``--rounds`` runs at batch 1 after warm-up, the four contenders timed in turns (a change
in load reaches them alike); agreement compares kernelkit's int8 output with
onnxruntime's on ``--agreement`` inputs (cosine, top-1). The table is printed last, in markdown.

``--separate`` times each contender in its own child process instead (the protocol of
docs/benchmarks.md): at two threads, contenders timed in turns in one process meet each other's
pool threads still spinning from their last run (onnxruntime's spin after each run, kernelkit's
workers' 200 us spin), which a user's process, running one runtime, does not.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kernelkit
import numpy as np
import onnx
import onnxruntime as ort
from kernelkit.testing import cosine
from kernelkit_converters.onnx import convert
from kernelkit_converters.quantize import quantize

_spec = importlib.util.spec_from_file_location("kernelkit_zoo", Path(__file__).parent / "models" / "zoo.py")
zoo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(zoo)

MODES = {"resnet18": "static", "mobilenet_v2": "static", "mlp": "dynamic", "transformer": "dynamic"}


def _has_vnni() -> bool:
    """Whether the CPU has int8 dot-product instructions (AVX-512 VNNI or AVX-VNNI), from /proc/cpuinfo."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


def _inputs(proto, batch: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(zoo.input_shape(proto, batch)).astype(np.float32)


def _median_ms(runs: dict, x, rounds: int) -> dict:
    """Median ms of each contender, timed in turns (one run of each per round), so that a change in
    the machine's load reaches all of them alike and the ratios within a row stay meaningful."""
    for run in runs.values():
        run(x)
        run(x)
    times = {key: [] for key in runs}
    for _ in range(rounds):
        for key, run in runs.items():
            start = time.perf_counter()
            run(x)
            times[key].append(time.perf_counter() - start)
    return {key: float(np.median(t) * 1e3) for key, t in times.items()}


def _ort(path_or_proto, threads: int):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    src = str(path_or_proto) if isinstance(path_or_proto, Path) else path_or_proto.SerializeToString()
    sess = ort.InferenceSession(src, options, providers=["CPUExecutionProvider"])
    return lambda x: sess.run(None, {"x": x})[0]


def _kernelkit(model, threads: int):
    sess = kernelkit.Session(model, threads=threads, options={"numba_start": "eager"})  # compiles in the warm-up
    return lambda x: sess.run(None, {"x": x})[0]


RUNTIMES = ("ort int8", "kk numba int8", "kk numba fp32", "ort fp32")


def _runtime(key: str, proto, path: Path, threads: int):
    if key == "ort int8":
        return _ort(path, threads)
    if key == "kk numba int8":
        return _kernelkit(convert(path), threads)
    if key == "kk numba fp32":
        return _kernelkit(convert(proto), threads)
    return _ort(proto, threads)


def quantized_model(name: str, small: bool, folder: Path, reduce_range: bool):
    """(the float model, the path of its int8 model made in ``folder`` by onnxruntime's quantizer:
    dynamic or static QDQ as MODES says, static ones calibrated on 16 random inputs)."""
    proto = (zoo.SMALL if small else zoo.MODELS)[name]()
    onnx.save(proto, folder / f"{name}.onnx")
    calibration = None
    if MODES[name] == "static":
        calibration = [{"x": _inputs(proto, 1, 1000 + i)} for i in range(16)]
    path = quantize(folder / f"{name}.onnx", folder / f"{name}.int8.onnx", mode=MODES[name], calibration=calibration,
                    reduce_range=reduce_range)
    return proto, path


def _child(name: str, key: str, args) -> float:
    """The median ms of one contender, timed in a child process of its own (``--only``)."""
    cmd = [sys.executable, __file__, "--models", name, "--threads", str(args.threads), "--rounds", str(args.rounds),
           "--reduce-range", "on" if args.reduce_range else "off", "--only", key] + (["--small"] if args.small else [])
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return float(json.loads(done.stdout.strip().splitlines()[-1])["median_ms"])


def bench(name: str, small: bool, folder: Path, args) -> dict:
    proto, path = quantized_model(name, small, folder, args.reduce_range)
    x = _inputs(proto, 1, 0)
    if args.separate:
        row = {key: _child(name, key, args) for key in RUNTIMES}
        runs = {key: _runtime(key, proto, path, args.threads) for key in ("ort int8", "kk numba int8")}
    else:
        runs = {key: _runtime(key, proto, path, args.threads) for key in RUNTIMES}
        row = _median_ms(runs, x, args.rounds)
    cosines, same = [], 0
    for start in range(0, args.agreement, 10):
        xs = _inputs(proto, min(10, args.agreement - start), start + 1)
        got, want = runs["kk numba int8"](xs), runs["ort int8"](xs)
        cosines.append(cosine(got, want))
        same += int(np.sum(got.reshape(-1, got.shape[-1]).argmax(-1) == want.reshape(-1, want.shape[-1]).argmax(-1)))
        total = got.size // got.shape[-1]
    row["cosine"] = min(cosines)
    row["top-1"] = same / (total * len(cosines)) if cosines else float("nan")
    return row


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default=",".join(MODES), help="comma separated: " + ", ".join(MODES))
    p.add_argument("--small", action="store_true", help="the test-size models")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--agreement", type=int, default=100, help="inputs compared with onnxruntime int8")
    p.add_argument("--reduce-range", choices=("auto", "on", "off"), default="auto", nargs="?", const="on",
                   help="7-bit weights, which onnxruntime computes exactly on CPUs without VNNI (auto: when this "
                        "CPU lacks it, as onnxruntime recommends)")
    p.add_argument("--separate", action="store_true", help="time each contender in its own process")
    p.add_argument("--only", choices=RUNTIMES, help=argparse.SUPPRESS)  # a --separate child: one contender, JSON out
    p.add_argument("--keep", metavar="DIR", help="with --only: the int8 model is made once into DIR and read from "
                   "there by later processes (one contender a process, many processes)")
    args = p.parse_args(argv)
    args.reduce_range = args.reduce_range == "on" or (args.reduce_range == "auto" and not _has_vnni())
    if args.only:
        with tempfile.TemporaryDirectory() as tmp:
            name = args.models.split(",")[0]
            folder = Path(tmp)
            if args.keep:
                folder = Path(args.keep) / f"{name}{'-small' if args.small else ''}{'-rr' if args.reduce_range else ''}"
                folder.mkdir(parents=True, exist_ok=True)
            if args.keep and (folder / f"{name}.int8.onnx").exists():
                proto, path = (zoo.SMALL if args.small else zoo.MODELS)[name](), folder / f"{name}.int8.onnx"
            else:
                proto, path = quantized_model(name, args.small, folder, args.reduce_range)
            median = _median_ms({args.only: _runtime(args.only, proto, path, args.threads)}, _inputs(proto, 1, 0),
                                args.rounds)[args.only]
        print(json.dumps({"model": name, "runtime": args.only, "median_ms": median}))
        return 0
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            rows[name] = bench(name, args.small, Path(tmp), args)
            print(name, rows[name], file=sys.stderr, flush=True)
    print(f"\n{'small' if args.small else 'published-size'} models, batch 1, {args.threads} thread(s), median of "
          f"{args.rounds} runs (ms){', each contender in its own process' if args.separate else ''}; "
          f"agreement of kernelkit int8 with onnxruntime int8 on {args.agreement} inputs; "
          f"{'7' if args.reduce_range else '8'}-bit weights{'' if _has_vnni() else ' (no VNNI on this CPU)'}\n")
    print("| model | mode | onnxruntime int8 | kernelkit numba int8 | kernelkit / ort int8 | kernelkit numba fp32 "
          "| onnxruntime fp32 | kk int8 speed-up over kk fp32 | min cosine | same top-1 |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows.items():
        print(f"| {name} | {MODES[name]} | {r['ort int8']:.2f} | {r['kk numba int8']:.2f} | "
              f"{r['kk numba int8'] / r['ort int8']:.2f}x | {r['kk numba fp32']:.2f} | {r['ort fp32']:.2f} | "
              f"{r['kk numba fp32'] / r['kk numba int8']:.2f}x | {r['cosine']:.5f} | {100 * r['top-1']:.0f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
