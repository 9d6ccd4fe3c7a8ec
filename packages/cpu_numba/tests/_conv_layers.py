"""The layer set-up the pair tests share (test_rnpair.py, test_tail.py): a Conv kernel prepared for a layer's
shapes at a thread budget, the layer's read-only inputs, the reference's output (the residual added, Relu where
the attributes ask), and a call at a given budget into a NaN-filled output."""
from __future__ import annotations

import numpy as np
from kernelkit.invoke import KernelContext
from kernelkit.ir import Node, TensorSpec
from kernelkit.testing import run_single_op
from kernelkit_numba import config
from kernelkit_numba.kernels.conv import Conv


def _ro(a):
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


def _out_shape(xs, ws, attrs):
    s = attrs.get("strides", [1, 1])[0]
    return (xs[0], ws[0], (xs[2] - 1) // s + 1, (xs[3] - 1) // s + 1)


def _kernel(xs, ws, attrs, threads, res):
    names = ["x", "w", "b"] + (["z"] if res else [])
    k = Conv()
    k.context = KernelContext(Node("Conv", names, ["y"], {}, "n"), None, {}, threads)
    specs = [TensorSpec(xs, "float32"), TensorSpec(ws, "float32"), TensorSpec((ws[0],), "float32")]
    if res:
        specs.append(TensorSpec(_out_shape(xs, ws, attrs), "float32"))
    k.prepare(specs, attrs)
    return k


def _layer(case, seed=0):
    xs, ws, attrs, res, _op = case
    rng = np.random.default_rng(seed)
    x = _ro(rng.standard_normal(xs).astype(np.float32))
    w = _ro(rng.standard_normal(ws).astype(np.float32) * np.float32(0.1))
    b = _ro(rng.standard_normal(ws[0]).astype(np.float32))
    z = _ro(rng.standard_normal(_out_shape(xs, ws, attrs)).astype(np.float32)) if res else None
    return [x, w, b] + ([z] if res else [])


def _reference(inputs, attrs):
    conv_attrs = {k: v for k, v in attrs.items() if not k.startswith("activation")}
    (y,) = run_single_op("Conv", inputs[:3], conv_attrs, vendors=["reference"])
    if len(inputs) > 3:
        y = y + inputs[3]
    return (np.maximum(y, 0) if attrs.get("activation") == "Relu" else y).astype(np.float32)


def _at(threads, fn, inputs, shape):
    with config.num_threads(threads):
        return fn(*inputs, out=np.full(shape, np.nan, np.float32))
