"""Attention (ONNX opset 23-25): softmax(Q K^T * scale + bias) V over 4-D (batch, heads, seq, head)
or 3-D (batch, seq, heads * head) inputs, with a past key/value cache (concatenated on the sequence
axis; outputs present_key/value), grouped-query heads (K/V heads repeated), a bool or additive
mask (a shorter mask is padded as masked), ``is_causal`` (aligned to the end of the cache),
sliding windows (opset 25), ``nonpad_kv_seqlen``, ``softcap`` and the ``qk_matmul_output`` modes
(0/1: the scaled, soft-capped QK; 2: plus the bias; 3: after the softmax). Fully masked rows give
0. Computed in float32 or wider."""
from __future__ import annotations

import math

import numpy as np

from ..dtypes import FLOAT_TYPES
from ..ir import TensorSpec
from ..registry import register_kernel, register_op
from ..shape import InferContext
from ._util import random


def _heads(x, n):
    """(batch, seq, n * head) -> (batch, n, seq, head)."""
    b, s, hidden = x.shape
    return x.reshape(b, s, n, hidden // n).transpose(0, 2, 1, 3)


def _allowed(q_len, kv_len, offset, left, right, causal):
    """Bool (q, kv) or (batch, 1, q, kv) of the pairs a causal mask / window lets through."""
    pos = np.arange(q_len)[:, None] + (np.reshape(offset, (-1, 1, 1, 1)) if np.ndim(offset) else offset)
    diff = pos - np.arange(kv_len)[None, :]
    ok = np.ones(np.shape(diff), bool)
    if causal:
        ok &= diff >= 0
    if left >= 0:
        ok &= diff <= left
    if right >= 0:
        ok &= -diff <= right
    return ok


@register_kernel("Attention", device="cpu", vendor="reference", dtype=FLOAT_TYPES, priority=-100)
def attention(q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *,
              is_causal=0, kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0, scale=None,
              softcap=0.0, softmax_precision=None, left_window_size=-1, right_window_size=-1):
    dtype, three_d = q.dtype, q.ndim == 3
    if three_d:
        if q_num_heads is None or kv_num_heads is None:
            raise ValueError("3-D inputs need q_num_heads and kv_num_heads")
        q, k, v = _heads(q, q_num_heads), _heads(k, kv_num_heads), _heads(v, kv_num_heads)
    if past_key is not None:
        k, v = np.concatenate([past_key, k], axis=2), np.concatenate([past_value, v], axis=2)
    present_k, present_v = k, v
    ct = np.promote_types(dtype, np.float32)
    qc, kc, vc = q.astype(ct), k.astype(ct), v.astype(ct)
    q_len, kv_len = q.shape[2], k.shape[2]
    if q.shape[1] != k.shape[1]:
        if q.shape[1] % k.shape[1]:
            raise ValueError(f"{q.shape[1]} query heads are not a multiple of {k.shape[1]} key/value heads")
        reps = q.shape[1] // k.shape[1]
        kc, vc = np.repeat(kc, reps, axis=1), np.repeat(vc, reps, axis=1)
    scale = 1 / math.sqrt(q.shape[3]) if scale is None else scale
    qk = np.matmul(qc * ct.type(math.sqrt(scale)), np.swapaxes(kc, -1, -2) * ct.type(math.sqrt(scale)))
    if softcap and softcap > 0:
        qk = softcap * np.tanh(qk / softcap)
    bias = np.zeros((q_len, kv_len), ct)
    if attn_mask is not None:
        mask = attn_mask
        if mask.shape[-1] < kv_len:
            pad = [(0, 0)] * (mask.ndim - 1) + [(0, kv_len - mask.shape[-1])]
            mask = np.pad(mask, pad, constant_values=False if mask.dtype == bool else -np.inf)
        bias = bias + (np.where(mask, 0, -np.inf).astype(ct) if mask.dtype == bool else mask.astype(ct))
    if nonpad_kv_seqlen is not None and past_key is None:
        offset = np.asarray(nonpad_kv_seqlen).reshape(-1) - q_len
    else:
        offset = past_key.shape[2] if past_key is not None else 0
    if is_causal or left_window_size >= 0 or right_window_size >= 0:
        ok = _allowed(q_len, kv_len, offset, left_window_size, right_window_size, is_causal)
        bias = bias + np.where(ok, 0, -np.inf).astype(ct)
    if nonpad_kv_seqlen is not None:
        live = np.arange(kv_len) < np.asarray(nonpad_kv_seqlen).reshape(-1, 1)
        bias = bias + np.where(live, 0, -np.inf).astype(ct).reshape(-1, 1, 1, kv_len)
    scores = qk + bias
    top = np.max(scores, axis=-1, keepdims=True)
    dead = np.isneginf(np.max(bias, axis=-1, keepdims=True))
    e = np.exp(scores - np.where(np.isneginf(top), 0, top))
    total = e.sum(axis=-1, keepdims=True)
    probs = np.where(dead, 0, e / np.where(total == 0, 1, total))
    y = np.matmul(probs.astype(dtype).astype(ct), vc)
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], q_len, -1)
    qk_out = {2: scores, 3: probs}.get(qk_matmul_output_mode, qk)
    return y.astype(dtype), present_k, present_v, np.ascontiguousarray(qk_out.astype(dtype))


def _rule(ctx: InferContext) -> list[TensorSpec]:
    q, k, v = ctx.inputs[:3]
    if not q.rank == k.rank == v.rank or q.rank not in (3, 4):
        raise ctx.error(f"Q, K, V must all be 3-D or 4-D, got {q}, {k}, {v}")
    past = ctx.inputs[4] if ctx.has(4) else None
    if q.rank == 4:
        batch, heads, q_len, kv_heads, kv_len = q.shape[0], q.shape[1], q.shape[2], k.shape[1], k.shape[2]
        y = TensorSpec(q.shape[:3] + (v.shape[3],), q.dtype)
        k_head, v_head = k.shape[3], v.shape[3]
    else:
        heads, kv_heads = ctx.attrs["q_num_heads"], ctx.attrs["kv_num_heads"]
        if heads is None or kv_heads is None:
            raise ctx.error("3-D inputs need the q_num_heads and kv_num_heads attributes")
        batch, q_len, kv_len = q.shape[0], q.shape[1], k.shape[1]
        k_head = k.shape[2] // kv_heads if isinstance(k.shape[2], int) else ctx.symbol()
        v_head = v.shape[2] // kv_heads if isinstance(v.shape[2], int) else ctx.symbol()
        y = TensorSpec((batch, q_len, v_head * heads if isinstance(v_head, int) else ctx.symbol()), q.dtype)
    total = kv_len
    if past is not None:
        total = past.shape[2] + kv_len if isinstance(past.shape[2], int) and isinstance(kv_len, int) else ctx.symbol()
    return [y, TensorSpec((batch, kv_heads, total, k_head), q.dtype),
            TensorSpec((batch, kv_heads, total, v_head), q.dtype), TensorSpec((batch, heads, q_len, total), q.dtype)]


def _samples(rng, dtype):
    def r(*shape):
        return random(rng, shape, dtype, -1, 1)

    yield [r(2, 3, 4, 8), r(2, 3, 6, 8), r(2, 3, 6, 8)], {}
    yield [r(2, 4, 4, 8), r(2, 2, 6, 8), r(2, 2, 6, 5), rng.random((4, 6)) < 0.7], {"is_causal": 0}
    yield [r(2, 4, 24), r(2, 6, 24), r(2, 6, 12)], {"q_num_heads": 3, "kv_num_heads": 3, "is_causal": 1}
    yield [r(2, 4, 24), r(2, 6, 12), r(2, 6, 6)], {"q_num_heads": 6, "kv_num_heads": 3, "scale": 0.5}
    yield [r(1, 2, 3, 4), r(1, 2, 3, 4), r(1, 2, 3, 4), None, r(1, 2, 2, 4), r(1, 2, 2, 4)], {"is_causal": 1}
    yield [r(1, 2, 37, 15), r(1, 2, 150, 15), r(1, 2, 150, 15)], {"scale": 0.3}  # keys > a GPU work-group, odd head
    yield [r(1, 5, 272), r(1, 7, 272), r(1, 7, 272)], {"q_num_heads": 2, "kv_num_heads": 2, "is_causal": 1}  # head 136


register_op("Attention", inputs=["Q", "K", "V", "attn_mask?", "past_key?", "past_value?", "nonpad_kv_seqlen?"],
            outputs=["Y", "present_key?", "present_value?", "qk_matmul_output?"],
            attrs={"is_causal": ("int", 0), "kv_num_heads": ("int", None), "q_num_heads": ("int", None),
                   "qk_matmul_output_mode": ("int", 0), "scale": ("float", None), "softcap": ("float", 0.0),
                   "softmax_precision": ("int", None), "left_window_size": ("int", -1),
                   "right_window_size": ("int", -1)}, infer=_rule, samples=_samples)


@register_kernel("FlexAttention", domain="ai.onnx.preview", device="cpu", vendor="reference", dtype=FLOAT_TYPES,
                 priority=-100)
def flex_attention(q, k, v, *, scale=None, softmax_precision=None):
    """ai.onnx.preview's FlexAttention without score_mod/prob_mod (subgraphs are not converted):
    scaled dot-product attention over 4-D inputs, K/V heads shared by groups of query heads."""
    if not q.ndim == k.ndim == v.ndim == 4:
        raise ValueError(f"FlexAttention takes 4-D Q, K, V, got {q.shape}, {k.shape}, {v.shape}")
    return attention(q, k, v, scale=scale)[0]


def _flex_rule(ctx: InferContext) -> TensorSpec:
    q, k, v = ctx.inputs
    if not q.rank == k.rank == v.rank == 4:
        raise ctx.error(f"Q, K, V must be 4-D, got {q}, {k}, {v}")
    return TensorSpec(q.shape[:3] + (v.shape[3],), q.dtype)


def _flex_samples(rng, dtype):
    yield [random(rng, (2, 4, 3, 8), dtype, -1, 1), random(rng, (2, 2, 5, 8), dtype, -1, 1),
           random(rng, (2, 2, 5, 6), dtype, -1, 1)], {}


register_op("FlexAttention", domain="ai.onnx.preview", inputs=["Q", "K", "V"], outputs=["Y"],
            attrs={"scale": ("float", None), "softmax_precision": ("int", None)}, infer=_flex_rule,
            samples=_flex_samples)
