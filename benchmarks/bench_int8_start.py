"""Start-up of the int8 models: the first run of a numba Session in a fresh process with an empty
Numba cache (eager: every kernel the model uses compiles on the calling thread) and then with that
cache filled (a second process loads them), for this checkout and (``--old DIR``) another source
tree, processes alternated (docs/numba.md, "Warm start, again (issue 11, session 7)")::

    python benchmarks/bench_int8_start.py [--models resnet18,mlp,...] [--old DIR] [--rounds N] [--small]

The models are benchmarks/quantized.py's (ResNet-18 and MobileNetV2 static QDQ, the MLP and the
transformer dynamic, quantized once into a temporary folder by onnxruntime's quantizer). Each
process prints one JSON line: session build + first run, the steady run, the compilations and the
seconds of the outermost ones by function (``"qpack.int32_blocks.kind2"`` for a variant's copy). The
summary gives medians over the rounds.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_PROBE = r"""
import json, sys, time
import numpy as np
t0 = time.perf_counter()
import kernelkit
from kernelkit_converters.onnx import convert
from numba.core import event
model = convert(sys.argv[1])
x = np.random.default_rng(0).standard_normal(tuple(json.loads(sys.argv[2]))).astype(np.float32)
feed = {model.graph.inputs[0]: x}
compiled, stack, counts = {}, [], [0]
class Count(event.Listener):
    def on_start(self, ev):
        stack.append(time.perf_counter())
    def on_end(self, ev):
        took = time.perf_counter() - stack.pop()
        counts[0] += 1
        if not stack:
            fn = getattr(ev.data.get("dispatcher"), "py_func", None)
            name = getattr(fn, "_kernelkit_cache_key", None) or \
                f"{getattr(fn, '__module__', '?').rsplit('.', 1)[-1]}.{getattr(fn, '__qualname__', '?')}"
            compiled[name] = round(compiled.get(name, 0) + took, 3)
event.register("numba:compile", Count())
t1 = time.perf_counter()
sess = kernelkit.Session(model, vendors=["numba", "reference"])
sess.run(None, feed)
t2 = time.perf_counter()
kernelkit.backends.settle()
steady = []
for _ in range(5):
    t = time.perf_counter(); sess.run(None, feed); steady.append(time.perf_counter() - t)
print(json.dumps({"first_s": round(t2 - t1, 3), "steady_ms": round(sorted(steady)[2] * 1e3, 2),
                  "compilations": counts[0], "compile_s": round(sum(compiled.values()), 3),
                  "top": dict(sorted(compiled.items(), key=lambda kv: -kv[1])[:6])}))
"""


def _zoo():
    spec = importlib.util.spec_from_file_location("kernelkit_zoo", Path(__file__).parent / "models" / "zoo.py")
    zoo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zoo)
    return zoo


MODES = {"resnet18": "static", "mobilenet_v2": "static", "mlp": "dynamic", "transformer": "dynamic"}


def _models(names, small: bool, folder: Path) -> dict:
    """name -> (int8 .onnx path, input shape at batch 1), quantized once."""
    import numpy as np
    import onnx
    from kernelkit_converters.quantize import quantize

    zoo = _zoo()
    out = {}
    for name in names:
        proto = (zoo.SMALL if small else zoo.MODELS)[name]()
        shape = zoo.input_shape(proto, 1)
        path = folder / f"{name}.int8.onnx"
        if not path.exists():
            onnx.save(proto, folder / f"{name}.onnx")
            calibration = None
            if MODES[name] == "static":
                calibration = [{"x": np.random.default_rng(1000 + i).standard_normal(shape).astype(np.float32)}
                               for i in range(16)]
            quantize(folder / f"{name}.onnx", path, mode=MODES[name], calibration=calibration)
        out[name] = (path, shape)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="resnet18,mlp,transformer")
    ap.add_argument("--old", default="", help="a source tree (git archive main packages benchmarks), alternated")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--small", action="store_true", help="the test-size models")
    ap.add_argument("--folder", default="", help="where the quantized models are kept (default: a new temporary one)")
    ap.add_argument("--mode", default="eager", help="KERNELKIT_NUMBA_START of the processes")
    args = ap.parse_args()
    folder = Path(args.folder or tempfile.mkdtemp(prefix="kk_int8_models_"))
    folder.mkdir(parents=True, exist_ok=True)
    models = _models(args.models.split(","), args.small, folder)
    variants = {"new": os.environ.get("PYTHONPATH", "")}
    if args.old:
        pkgs = os.path.join(args.old, "packages")
        variants["old"] = os.pathsep.join(s for s in (os.path.join(pkgs, p, "src") for p in sorted(os.listdir(pkgs)))
                                          if os.path.isdir(s))
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cache = tempfile.mkdtemp(prefix="kk_int8_cache_")
    rows: dict = {}
    for r in range(args.rounds):
        for name, (path, shape) in models.items():
            for variant, pypath in variants.items():
                shutil.rmtree(cache, ignore_errors=True)
                os.makedirs(cache)
                env = {**base, "NUMBA_CACHE_DIR": cache, "KERNELKIT_NUMBA_START": args.mode, "PYTHONPATH": pypath}
                for label in ("cold", "warm"):
                    out = subprocess.run([sys.executable, "-c", _PROBE, str(path), json.dumps(list(shape))], env=env,
                                         stdout=subprocess.PIPE, text=True, check=True, timeout=900)
                    row = json.loads(out.stdout.strip().splitlines()[-1])
                    rows.setdefault((name, label, variant), []).append(row)
                    print(json.dumps({"model": name, "cache": label, "variant": variant, "round": r, **row}),
                          flush=True)
    shutil.rmtree(cache, ignore_errors=True)
    print()
    for (name, label, variant), got in rows.items():
        med = {k: statistics.median(x[k] for x in got) for k in ("first_s", "steady_ms", "compilations", "compile_s")}
        print(f"{name:12} {label} {variant:3}: session + first run {med['first_s']:.2f} s, steady "
              f"{med['steady_ms']:.2f} ms, {med['compilations']:.0f} compilations ({med['compile_s']:.2f} s)"
              + (f" (medians of {len(got)})" if len(got) > 1 else ""))


if __name__ == "__main__":
    main()
