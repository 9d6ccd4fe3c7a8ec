"""MatMul (ONNX opset 21, NumPy semantics: batched, broadcast batch dims, 1-D operands) with a
fused activation, and an optional per-column ``bias`` (N values, added before the activation:
what ``fuse_matmul_bias`` folds from an Add after the product, a kernelkit extension as the
activation attributes are), and an optional residual ``Z`` (added after the bias, before the
activation, with the Add's broadcasting: ``fuse_matmul_residual``'s fold of a residual Add after the
product; the output has the broadcast shape of the product and Z)."""
from __future__ import annotations

import math

import numpy as np

from ..activation import ACTIVATION_ATTRS, apply_activation
from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import broadcast_shapes
from ._util import into, random
from ._window import compute_dtype

DTYPES = FLOAT_TYPES + ("int32", "int64", "uint32", "uint64")


def _shapes(ctx):
    """(batch, m, k, n, output shape) of a MatMul node."""
    a, b = ctx.inputs[0], ctx.inputs[1]
    if a.dtype != b.dtype:
        raise ctx.error(f"A and B must share a dtype; got {a.dtype} and {b.dtype}")
    return matmul_shapes(ctx, a, b)


def matmul_shapes(ctx, a, b):
    """(batch, m, k, n, output shape) of A @ B with NumPy semantics (shared with the integer and
    quantized matrix products, which check their own dtypes)."""
    if a.rank == 0 or b.rank == 0:
        raise ctx.error(f"A {a} and B {b} must have rank >= 1")
    sa = a.shape if a.rank > 1 else (1, a.shape[0])
    sb = b.shape if b.rank > 1 else (b.shape[0], 1)
    (m, k), (k2, n) = sa[-2:], sb[-2:]
    if isinstance(k, int) and isinstance(k2, int) and k != k2:
        raise ctx.error(f"inner dimensions differ: A {a.shape}, B {b.shape}")
    batch = broadcast_shapes(sa[:-2], sb[:-2], where=ctx.where)
    out = batch + ((m,) if a.rank > 1 else ()) + ((n,) if b.rank > 1 else ())
    return batch, m, k, n, out


def _infer(ctx) -> TensorSpec:
    shapes = _shapes(ctx)
    if ctx.has(2):
        bias, n = ctx.inputs[2], shapes[3]
        known = bias.rank == 1 and isinstance(n, int) and isinstance(bias.shape[0], int)
        if bias.dtype != ctx.inputs[0].dtype or bias.rank != 1 or ctx.inputs[1].rank < 2 or \
                (known and bias.shape[0] != n):
            raise ctx.error(f"bias {bias} must be 1-D, of A's dtype, one value per column of the product "
                            f"({n}; B of rank >= 2)")
    if ctx.has(3):
        z = ctx.inputs[3]
        if z.dtype != ctx.inputs[0].dtype:
            raise ctx.error(f"residual Z {z} must have A's dtype")
        return TensorSpec(broadcast_shapes(shapes[-1], z.shape, where=ctx.where), ctx.inputs[0].dtype)
    return TensorSpec(shapes[-1], ctx.inputs[0].dtype)


def _flops(ctx) -> int | None:
    batch, m, k, n, _ = _shapes(ctx)
    dims = (*batch, m, k, n)
    return 2 * math.prod(dims) if all(isinstance(d, int) for d in dims) else None


@register_kernel("MatMul", device="cpu", vendor="reference", dtype=DTYPES, priority=-100)
def matmul(a, b, bias=None, z=None, *, activation="", activation_params=(), out=None):
    ct = compute_dtype(a.dtype)
    if out is not None and (ct != a.dtype or out.ndim == 0 or z is not None):  # z: out may be z, or broadcast
        return into(out, matmul(a, b, bias, z, activation=activation, activation_params=activation_params))
    y = np.asarray(np.matmul(a.astype(ct, copy=False), b.astype(ct, copy=False), out=out), dtype=ct)
    if bias is not None:
        np.add(y, bias.astype(ct, copy=False), out=y)
    if z is not None:  # the residual after the bias: the unfused Add's rounding (and its broadcast)
        zc = z.astype(ct, copy=False)
        y = np.add(y, zc, out=y) if np.broadcast_shapes(y.shape, zc.shape) == y.shape else np.add(y, zc)
    y = apply_activation(y, activation, activation_params).astype(a.dtype, copy=False)
    return y if y is out else into(out, y)


matmul.bias_input = True  # takes the optional bias (fuse_matmul_bias asks the kernel it would pick)


def _samples(rng, dtype):
    def r(*shape):
        return random(rng, shape, dtype, -1, 1) if dtype in FLOAT_TYPES else random(rng, shape, dtype, 0, 5)

    yield [r(3, 4), r(4, 5)], {}
    yield [r(2, 3, 4), r(2, 4, 5)], {}
    yield [r(2, 1, 3, 4), r(3, 4, 2)], {}  # broadcast batch
    yield [r(4), r(2, 4, 3)], {}  # 1-D A
    yield [r(2, 3, 4), r(4)], {}  # 1-D B
    yield [r(5), r(5)], {}  # both 1-D: a scalar
    yield [r(1, 6, 8), r(8, 7)], {}
    if dtype in FLOAT_TYPES:
        yield [r(2, 3, 8), r(8, 4)], {"activation": "Gelu"}
        yield [r(3, 8), r(8, 4)], {"activation": "Tanh"}


register_op("MatMul", inputs=["A", "B", "bias?", "Z?"], outputs=["Y"], attrs=ACTIVATION_ATTRS, infer=_infer,
            samples=_samples, flops=_flops)
