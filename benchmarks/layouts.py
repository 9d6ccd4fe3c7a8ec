"""Numba Conv in each layout: the default NCHW kernel against the NHWC and NCHW8c/NCHW16c variants,
per layer and per model, 1 thread (docs/architecture.md, "Layouts").

    python benchmarks/layouts.py                  # layers of ResNet-18 and MobileNetV2, 224x224
    python benchmarks/layouts.py --models 224     # also whole models (batch 1) at that image size
    python benchmarks/layouts.py --quick          # fewer repeats, smaller layers (a smoke run)

Layers: each kernel is bound once (``kernelkit.invoke.bind``, as the session does) and called on
an input already in its layout, so the time is the kernel's alone; the best of ``--repeats``
calls is reported (the machine is shared: the minimum is the least disturbed). Models: a Session
per layout (``options={"layout": ...}``), reorders included, runs interleaved across the layouts,
best of the repeats.

Measured 2026-11-23 on the shared 2-core development box (``NUMBA_NUM_THREADS=1``,
``--models 112 --repeats 30 --no-layers``, runs interleaved); four such runs at different moments
put the same model anywhere between 0.5x and 2x of these, so differences under ~15% are noise:

    model (1x3x112x112)   NCHW ms   NHWC ms   NCHW8c ms   NCHW16c ms   (reorders: 0, 2, 2, 2/6)
    resnet18                 26.0      24.4        24.4         23.6
    mobilenet_v2             14.9      15.6        17.6         17.6

Per layer (``--repeats 10``): dense 3x3 and 1x1 convs are one GEMM in every layout and run at
par; depthwise runs at par on small maps and up to 2x slower on 56x56 and 112x112 maps in NHWC and
NCHWc (the NCHW kernel's stride-phase planes suit wide maps best). Nothing is reliably faster, and
MobileNetV2 is slower, so the variants stay below the NCHW kernel (priority -10): opt-in.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import kernelkit as kk
import numpy as np
from kernelkit.devices import create_device
from kernelkit.invoke import bind
from kernelkit.ir import Node, TensorSpec
from kernelkit.layout import to_layout
from kernelkit.registry import KernelKey, get_schema, kernel_entry, normalize_attrs

LAYOUTS = ("", "NHWC", "NCHW8c", "NCHW16c")

# (name, input shape, weight shape, attrs): ResNet-18's 3x3 convs, MobileNetV2's depthwise and 1x1 convs
LAYERS = [
    ("resnet18 3x3 64", (1, 64, 56, 56), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("resnet18 3x3 128", (1, 128, 28, 28), (128, 128, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("resnet18 3x3 256", (1, 256, 14, 14), (256, 256, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("resnet18 3x3 512", (1, 512, 7, 7), (512, 512, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("mbv2 dw 96 s2", (1, 96, 112, 112), (96, 1, 3, 3), {"group": 96, "pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ("mbv2 dw 144", (1, 144, 56, 56), (144, 1, 3, 3), {"group": 144, "pads": [1, 1, 1, 1]}),
    ("mbv2 dw 192", (1, 192, 28, 28), (192, 1, 3, 3), {"group": 192, "pads": [1, 1, 1, 1]}),
    ("mbv2 dw 384", (1, 384, 14, 14), (384, 1, 3, 3), {"group": 384, "pads": [1, 1, 1, 1]}),
    ("mbv2 dw 960", (1, 960, 7, 7), (960, 1, 3, 3), {"group": 960, "pads": [1, 1, 1, 1]}),
    ("mbv2 1x1 144->24", (1, 144, 56, 56), (24, 144, 1, 1), {}),
    ("mbv2 1x1 384->64", (1, 384, 14, 14), (64, 384, 1, 1), {}),
]


def layer_ms(layout: str, x: np.ndarray, w: np.ndarray, attrs: dict, repeats: int) -> float | None:
    """Best time of one call of the numba Conv in ``layout`` ('' the default), None if it declines."""
    entry = kernel_entry(KernelKey("Conv", "cpu", "numba", "float32", layout))
    schema = get_schema("Conv")
    full = normalize_attrs(schema, attrs, "bench")
    specs = [TensorSpec.of(x), TensorSpec.of(w), TensorSpec.of(w[:, 0, 0, 0])]
    if entry.supports is not None and not entry.supports(specs, full):
        return None
    ins, _ = entry.layouts(schema, specs, full)
    args = [to_layout(a, lay) for a, lay in zip((x, w, w[:, 0, 0, 0].copy()), ins)]
    laid = [TensorSpec(s.shape, s.dtype, lay) for s, lay in zip(specs, ins)]
    node = Node("Conv", ["x", "w", "b"], ["y"], dict(attrs), "bench")
    kernel = bind(entry, node, full, create_device("cpu"), laid, {}, 1)
    kernel.execute(*args)  # compile
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        kernel.execute(*args)
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def models_ms(proto, shape, repeats: int) -> list[tuple[float, int]]:
    """(best ms, reorders) per layout of LAYOUTS; the sessions' runs are interleaved, so that a
    busy moment of the machine hits every layout alike."""
    from kernelkit_converters.onnx import convert

    model = convert(proto)
    sessions = [kk.Session(model, vendors=["numba", "reference"], threads=1, options={"layout": lay} if lay else {})
                for lay in LAYOUTS]
    feeds = {sessions[0].get_inputs()[0].name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    best = [float("inf")] * len(sessions)
    for sess in sessions:
        sess.run(None, feeds)
    kk.backends.settle()  # numba kernels compiling in the background (tiered start) are ready
    for _ in range(repeats):
        for k, sess in enumerate(sessions):
            t0 = time.perf_counter()
            sess.run(None, feeds)
            best[k] = min(best[k], time.perf_counter() - t0)
    return [(b * 1e3, sum(1 for n in s.graph.nodes if n.op_id == "LayoutReorder")) for b, s in zip(best, sessions)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--models", type=int, metavar="IMAGE", help="also time ResNet-18 and MobileNetV2 at this size")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-layers", action="store_true", help="only the models")
    args = ap.parse_args()
    kk.kernels()  # loads the installed backends
    rng = np.random.default_rng(0)
    head = f"{'layer':<20}" + "".join(f"{(lay or 'NCHW') + ' ms':>13}" for lay in LAYOUTS)
    print(head)
    for name, xs, ws, attrs in [] if args.no_layers else LAYERS[::3] if args.quick else LAYERS:
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        times = [layer_ms(lay, x, w, attrs, args.repeats) for lay in LAYOUTS]
        print(f"{name:<20}" + "".join(f"{t:13.3f}" if t is not None else f"{'-':>13}" for t in times))
    if args.models:
        sys.path.insert(0, str(Path(__file__).parent / "models"))
        from zoo import mobilenet_v2, resnet

        for name, proto in (("resnet18", resnet(18, image=args.models, batch=1)),
                            ("mobilenet_v2", mobilenet_v2(image=args.models, batch=1))):
            cells = [f"{ms:9.2f} ({reorders})"
                     for ms, reorders in models_ms(proto, (1, 3, args.models, args.models), args.repeats)]
            print(f"{name:<20}" + "".join(f"{c:>13}" for c in cells) + "   ms (reorders)")


if __name__ == "__main__":
    main()
