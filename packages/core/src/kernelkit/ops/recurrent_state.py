"""Stateful ops of recent linear-attention models (opset 27): LinearAttention (a recurrent state
S of (d_k, d_v) per KV head, updated per token by the ``linear``, ``gated``, ``delta`` or
``gated_delta`` rule; o_t = scale * q_t^T S_t; query heads share KV heads in groups) and
CausalConvWithState (a depthwise causal 1-D convolution over the past state followed by the input,
optionally SiLU; the last k - 1 positions are the new state). Computed in float32 or wider."""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random

RULES = ("linear", "gated", "delta", "gated_delta")


def _heads(x, n):
    b, t, hidden = x.shape
    return x.reshape(b, t, n, hidden // n).transpose(0, 2, 1, 3)


@register_kernel("LinearAttention", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def linear_attention(query, key, value, past_state=None, decay=None, beta=None, *, chunk_size=64, kv_num_heads,
                     q_num_heads, scale=0.0, update_rule="gated_delta"):
    if update_rule not in RULES:
        raise ValueError(f"update_rule must be one of {RULES}, got {update_rule!r}")
    if q_num_heads % kv_num_heads:
        raise ValueError(f"q_num_heads {q_num_heads} is not a multiple of kv_num_heads {kv_num_heads}")
    ct = np.promote_types(query.dtype, np.float32)
    q, k, v = (_heads(a.astype(ct), n) for a, n in ((query, q_num_heads), (key, kv_num_heads), (value, kv_num_heads)))
    batch, _, steps, dk = k.shape
    scale = scale or 1 / math.sqrt(q.shape[-1])
    s = np.zeros((batch, kv_num_heads, dk, v.shape[-1]), ct) if past_state is None else past_state.astype(ct)
    gated, delta = update_rule in ("gated", "gated_delta"), update_rule in ("delta", "gated_delta")
    if gated:
        if decay is None:
            raise ValueError(f"update_rule {update_rule!r} needs decay")
        g = np.exp(decay.astype(ct)).reshape(batch, steps, kv_num_heads, -1).transpose(0, 2, 1, 3)  # (B,H,T,dk|1)
    if delta:
        if beta is None:
            raise ValueError(f"update_rule {update_rule!r} needs beta")
        bt = np.broadcast_to(beta.astype(ct).reshape(batch, steps, -1).transpose(0, 2, 1), (batch, kv_num_heads, steps))
    group = q_num_heads // kv_num_heads
    out = np.empty((batch, q_num_heads, steps, v.shape[-1]), ct)
    for t in range(steps):
        kt, vt = k[:, :, t], v[:, :, t]
        if gated:
            s = g[:, :, t][..., None] * s
        if delta:
            err = vt - np.einsum("bhkv,bhk->bhv", s, kt)
            s = s + bt[:, :, t, None, None] * kt[..., None] * err[:, :, None, :]
        else:
            s = s + kt[..., None] * vt[:, :, None, :]
        out[:, :, t] = scale * np.einsum("bhgk,bhkv->bhgv", q[:, :, t].reshape(batch, kv_num_heads, group, dk),
                                         s).reshape(batch, q_num_heads, -1)
    y = out.transpose(0, 2, 1, 3).reshape(batch, steps, -1)
    return y.astype(query.dtype), s.astype(query.dtype)


@register_kernel("CausalConvWithState", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def causal_conv_with_state(x, weight, bias=None, past_state=None, *, activation="none"):
    if activation not in ("none", "silu", "swish"):
        raise ValueError(f"activation must be none, silu or swish, got {activation!r}")
    ct = np.promote_types(x.dtype, np.float32)
    batch, channels, length = x.shape
    k = weight.shape[-1]
    past = np.zeros((batch, channels, k - 1), ct) if past_state is None else past_state.astype(ct)
    padded = np.concatenate([past, x.astype(ct)], axis=-1)
    w = weight.astype(ct).reshape(channels, k)
    y = sum(w[None, :, j, None] * padded[:, :, j:j + length] for j in range(k))
    if bias is not None:
        y = y + bias.astype(ct)[None, :, None]
    if activation != "none":
        y = y / (1 + np.exp(-y))
    return y.astype(x.dtype), np.ascontiguousarray(padded[:, :, padded.shape[-1] - (k - 1):]).astype(x.dtype)


def _la_rule(ctx: InferContext) -> list[TensorSpec]:
    q, k, v = ctx.inputs[:3]
    a = ctx.attrs
    hq, hkv = a["q_num_heads"], a["kv_num_heads"]
    if not hq or not hkv or q.rank != 3:
        raise ctx.error("3-D query/key/value need q_num_heads and kv_num_heads")
    dk = k.shape[2] // hkv if isinstance(k.shape[2], int) else ctx.symbol()
    dv = v.shape[2] // hkv if isinstance(v.shape[2], int) else ctx.symbol()
    out_dim = dv * hq if isinstance(dv, int) else ctx.symbol()
    return [TensorSpec((q.shape[0], q.shape[1], out_dim), q.dtype), TensorSpec((q.shape[0], hkv, dk, dv), q.dtype)]


def _cc_rule(ctx: InferContext) -> list[TensorSpec]:
    x, w = ctx.inputs[:2]
    if x.rank != 3 or w.rank != 3:
        raise ctx.error(f"input and weight must be 3-D, got {x} and {w}")
    k = w.shape[2]
    state = k - 1 if isinstance(k, int) else ctx.symbol()
    return [x, TensorSpec((x.shape[0], x.shape[1], state), x.dtype)]


def _la_samples(rng, dtype):
    def r(*shape, lo=-1, hi=1):
        return random(rng, shape, dtype, lo, hi)

    attrs = {"q_num_heads": 4, "kv_num_heads": 2}
    yield [r(2, 3, 16), r(2, 3, 8), r(2, 3, 6)], {**attrs, "update_rule": "linear"}
    yield [r(2, 3, 16), r(2, 3, 8), r(2, 3, 6), r(2, 2, 4, 3), r(2, 3, 2, lo=-1, hi=0), r(2, 3, 2, lo=0, hi=1)], attrs


def _cc_samples(rng, dtype):
    yield [random(rng, (2, 3, 5), dtype), random(rng, (3, 1, 4), dtype), random(rng, (3,), dtype),
           random(rng, (2, 3, 3), dtype)], {"activation": "silu"}


register_op("LinearAttention", inputs=["query", "key", "value", "past_state?", "decay?", "beta?"],
            outputs=["output", "present_state?"],
            attrs={"chunk_size": ("int", 64), "kv_num_heads": ("int", 0), "q_num_heads": ("int", 0),
                   "scale": ("float", 0.0), "update_rule": ("string", "gated_delta")}, infer=_la_rule,
            samples=_la_samples)
register_op("CausalConvWithState", inputs=["input", "weight", "bias?", "past_state?"],
            outputs=["output", "present_state?"],
            attrs={"activation": ("string", "none")}, infer=_cc_rule, samples=_cc_samples)
