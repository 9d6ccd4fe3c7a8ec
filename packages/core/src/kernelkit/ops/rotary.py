"""RotaryEmbedding (opset 23): rotate the first ``rotary_embedding_dim`` features of each head
(halves, or even/odd pairs when ``interleaved``) by the angles whose cos/sin the caches hold, picked
by ``position_ids`` (else the caches are per batch and position). X is (batch, heads, seq, head)
or (batch, seq, heads * head) with ``num_heads``."""
from __future__ import annotations

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random


@register_kernel("RotaryEmbedding", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def rotary_embedding(x, cos_cache, sin_cache, position_ids=None, *, interleaved=0, num_heads=0,
                     rotary_embedding_dim=0):
    shape = x.shape
    h = np.transpose(x, (0, 2, 1, 3)) if x.ndim == 4 else x.reshape(shape[0], shape[1], num_heads, -1)
    dim = rotary_embedding_dim or h.shape[3]
    if position_ids is not None:
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    if cos_cache.shape[-1] != dim // 2 or sin_cache.shape[-1] != dim // 2:
        raise ValueError(f"the caches' last dim must be rotary_embedding_dim / 2 = {dim // 2}")
    cos, sin = cos_cache[:, :, None, :], sin_cache[:, :, None, :]
    rot = h[..., :dim]
    x1, x2 = (rot[..., 0::2], rot[..., 1::2]) if interleaved else (rot[..., :dim // 2], rot[..., dim // 2:])
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    rotated = np.stack([real, imag], -1).reshape(rot.shape) if interleaved else np.concatenate([real, imag], -1)
    out = np.concatenate([rotated, h[..., dim:]], axis=-1).astype(x.dtype)
    return np.ascontiguousarray(np.transpose(out, (0, 2, 1, 3)) if x.ndim == 4 else out.reshape(shape))


def _rule(ctx: InferContext):
    x = ctx.inputs[0]
    if x.rank not in (3, 4):
        raise ctx.error(f"X must be 3-D or 4-D, got {x}")
    if x.rank == 3 and not ctx.attrs["num_heads"]:
        raise ctx.error("3-D input needs num_heads")
    return x


def _samples(rng, dtype):
    x = random(rng, (2, 3, 5, 8), dtype)
    cache = (random(rng, (10, 4), dtype), random(rng, (10, 4), dtype))
    yield [x, *cache, rng.integers(0, 10, (2, 5)).astype(np.int64)], {}
    yield [random(rng, (2, 5, 24), dtype), random(rng, (2, 5, 2), dtype), random(rng, (2, 5, 2), dtype)], \
        {"num_heads": 3, "rotary_embedding_dim": 4, "interleaved": 1}


register_op("RotaryEmbedding", inputs=["X", "cos_cache", "sin_cache", "position_ids?"], outputs=["Y"],
            attrs={"interleaved": ("int", 0), "num_heads": ("int", 0), "rotary_embedding_dim": ("int", 0)},
            infer=_rule, samples=_samples)
