"""The output over the fused residual, counted in a model (issue 11, session 16, resid16; docs/numba.md, "The output
over the residual at two threads and on the cols tiles"): per session of MODEL at each of THREADS under each
``LABEL=SPEC`` variant (apply_bench_set's SPEC, ``,``-separated), the memory plan's in-place steps, the fused-residual
residuals a call copied first (conv_serial._copies: a plan the bound call did not take) over its second and third
runs, and the output against the first session's at that thread count::

    python benchmarks/resid16_count.py resnet50,resnet18 1,2 off=kernels.conv_serial.RESIDUAL_PARALLEL=0 \\
        on=kernels.conv_serial.RESIDUAL_PARALLEL=1,kernels.conv_serial.RESIDUAL_COLS=1
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERNELKIT_NUMBA_START", "eager")


def main(argv: list[str]) -> int:
    names = (argv[0] if argv else "resnet50").split(",")
    threads = [int(t) for t in (argv[1] if len(argv) > 1 else "1,2").split(",")]
    variants = [a.split("=", 1) for a in argv[2:]] or [["default", ""]]
    for name in names:
        _count(name, threads, variants)
    return 0


def _count(name: str, threads: list, variants: list) -> None:
    import numpy as np
    from kernelkit_numba.kernels import conv_serial
    from test_bench_numba import apply_bench_set, kernelkit_session, model_case

    _, model, feed, _ = model_case(name)
    shapes = {k: v.shape for k, v in feed.items()}
    first = {}
    print(f"| {name} | threads | in-place steps | copies in 2 runs | output against the first |")
    print("|---|---:|---:|---:|---|")
    for t in threads:
        for label, spec in variants:
            saved = {}
            for item in filter(None, spec.split(",")):
                key = item.split("=")[0]
                mod, attr = key.rsplit(".", 1)
                obj = sys.modules.get("kernelkit_numba." + mod) or __import__("kernelkit_numba." + mod, fromlist=["x"])
                saved[(obj, attr)] = getattr(obj, attr)
            apply_bench_set(spec)
            try:
                sess = kernelkit_session(model, f"numba{t}")
                copies = conv_serial._copies[0]
                out = [sess.run(None, feed)[0] for _ in range(3)][1:]
                copies = conv_serial._copies[0] - copies
                mem = sess.memory(shapes)
                ref = first.setdefault(t, out[0])
                same = "bit for bit" if np.array_equal(out[0], ref) else \
                    f"max diff {float(np.max(np.abs(out[0] - ref)) / np.max(np.abs(ref))):.1e} of the largest"
                print(f"| {label} | {t} | {mem['inplace_steps']} | {copies} | {same} |")
                if not np.array_equal(out[1], out[0]):
                    print(f"  ({label} {t}: the second run differs from the first)")
            finally:
                for (obj, attr), value in saved.items():
                    setattr(obj, attr, value)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
