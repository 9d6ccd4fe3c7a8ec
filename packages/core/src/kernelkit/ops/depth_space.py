"""DepthToSpace (modes DCR and CRD) and SpaceToDepth (ONNX opset 13+): 4-D reshape/transpose ops."""
from __future__ import annotations

from ..ir import TensorSpec
from ..registry import REQUIRED, register_kernel, register_op
from ._util import random


def _infer_d2s(ctx) -> TensorSpec:
    x, b = ctx.inputs[0], ctx.attrs["blocksize"]
    if x.rank != 4 or b < 1 or ctx.attrs["mode"] not in ("DCR", "CRD"):
        raise ctx.error(f"needs a 4-D input (got {x}), blocksize >= 1 (got {b}) and mode DCR or CRD "
                        f"(got {ctx.attrs['mode']!r})")
    n, c, h, w = x.shape
    if isinstance(c, int) and c % (b * b):
        raise ctx.error(f"channels {c} are not a multiple of blocksize^2 = {b * b}")
    h, w = (d * b if isinstance(d, int) else ctx.symbol("s") for d in (h, w))
    return TensorSpec((n, c // (b * b) if isinstance(c, int) else ctx.symbol("c"), h, w), x.dtype)


def _infer_s2d(ctx) -> TensorSpec:
    x, b = ctx.inputs[0], ctx.attrs["blocksize"]
    if x.rank != 4 or b < 1:
        raise ctx.error(f"needs a 4-D input (got {x}) and blocksize >= 1 (got {b})")
    n, c, h, w = x.shape
    for d in (h, w):
        if isinstance(d, int) and d % b:
            raise ctx.error(f"spatial dims {(h, w)} are not multiples of blocksize {b}")
    return TensorSpec((n, c * b * b if isinstance(c, int) else ctx.symbol("c"),
                       *(d // b if isinstance(d, int) else ctx.symbol("s") for d in (h, w))), x.dtype)


@register_kernel("DepthToSpace", device="cpu", vendor="reference", dtype="*", priority=-100)
def depth_to_space(x, *, blocksize=1, mode="DCR"):
    n, c, h, w = x.shape
    b = blocksize
    if mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@register_kernel("SpaceToDepth", device="cpu", vendor="reference", dtype="*", priority=-100)
def space_to_depth(x, *, blocksize=1):
    n, c, h, w = x.shape
    b = blocksize
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


def _d2s_samples(rng, dtype):
    yield [random(rng, (1, 8, 2, 3), dtype)], {"blocksize": 2}
    yield [random(rng, (2, 8, 3, 2), dtype)], {"blocksize": 2, "mode": "CRD"}
    yield [random(rng, (1, 18, 2, 2), dtype)], {"blocksize": 3, "mode": "DCR"}


def _s2d_samples(rng, dtype):
    yield [random(rng, (1, 2, 4, 6), dtype)], {"blocksize": 2}
    yield [random(rng, (2, 3, 6, 3), dtype)], {"blocksize": 3}


register_op("DepthToSpace", inputs=["input"], outputs=["output"],
            attrs={"blocksize": ("int", REQUIRED), "mode": ("string", "DCR")}, infer=_infer_d2s,
            samples=_d2s_samples)
register_op("SpaceToDepth", inputs=["input"], outputs=["output"], attrs={"blocksize": ("int", REQUIRED)},
            infer=_infer_s2d, samples=_s2d_samples)
