"""The memory plan on real models (issue 10's targets): arena size against the live peak, and what a
steady-state run newly allocates for intermediates.

    python benchmarks/memory_plan.py                       # full-size zoo models, reference and numba kernels
    python benchmarks/memory_plan.py --small --vendors numba
    python benchmarks/memory_plan.py --models resnet18 --why   # also: which ops their kernels allocate

For each model (benchmarks/models/zoo.py, batch 1): ``Session.memory()`` after a first run, then
one more run under tracemalloc (NumPy reports its buffers to it): "new" is the traced peak of that
run above the traced memory before it, minus the bytes of the outputs the run returns; "unplanned"
counts the intermediates left to their kernels (``--why`` names their ops).
"""
from __future__ import annotations

import argparse
import importlib.util
import tracemalloc
import warnings
from collections import Counter
from pathlib import Path

import kernelkit as kk
import numpy as np

_spec = importlib.util.spec_from_file_location("kernelkit_zoo", Path(__file__).parent / "models" / "zoo.py")
zoo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(zoo)


def measure(name: str, small: bool, vendor: str, why: bool) -> dict:
    from kernelkit_converters.onnx import convert

    proto = (zoo.SMALL if small else zoo.MODELS)[name]()
    model = convert(proto)
    x = np.random.default_rng(0).standard_normal(zoo.input_shape(proto, 1)).astype(np.float32)
    with warnings.catch_warnings():  # numba: a few Reshapes run on the reference (a view either way)
        warnings.simplefilter("ignore", kk.FallbackWarning)
        sess = kk.Session(model, vendors=[vendor], threads=1)
    feeds = {sess.get_inputs()[0].name: x}
    sess.run(None, feeds)
    sess.run(None, feeds)
    mem = sess.memory()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    outs = sess.run(None, feeds)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    new = max(0, peak - before - sum(o.nbytes for o in outs))
    if why:
        planned = set(sess._executor.pool_for(mem["input_shapes"] and tuple(
            tuple(v) for v in mem["input_shapes"].values())).mem.placed)
        missing = Counter(s.op for s in sess.plan.steps if s.kind != "copy"
                          and any(o is not None and o not in planned for o in s.output_slots))
        print(f"  {name}: values left to their kernels, by op: {dict(missing)}")
    return {"model": name, **{k: mem[k] for k in ("arena_bytes", "live_peak_bytes", "weights_bytes",
                                                  "scratch_bytes", "kernel_allocated_values")}, "new_bytes": new}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="*", default=["resnet18", "resnet50", "mobilenet_v2", "transformer"])
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--vendors", nargs="*", default=["reference", "numba"])
    ap.add_argument("--why", action="store_true")
    args = ap.parse_args()
    print(f"{'model':<14}{'vendor':<11}{'arena MB':>10}{'live peak MB':>14}{'arena/peak':>11}"
          f"{'new MB':>9}{'new/peak':>10}{'weights MB':>12}{'scratch MB':>12}{'unplanned':>11}")
    for vendor in args.vendors:
        for name in args.models:
            r = measure(name, args.small, vendor, args.why)
            peak = max(r["live_peak_bytes"], 1)
            print(f"{name:<14}{vendor:<11}{r['arena_bytes'] / 1e6:>10.2f}{r['live_peak_bytes'] / 1e6:>14.2f}"
                  f"{r['arena_bytes'] / peak:>11.3f}{r['new_bytes'] / 1e6:>9.2f}{r['new_bytes'] / peak:>10.3f}"
                  f"{r['weights_bytes'] / 1e6:>12.2f}{r['scratch_bytes'] / 1e6:>12.2f}"
                  f"{r['kernel_allocated_values']:>11d}")


if __name__ == "__main__":
    main()
