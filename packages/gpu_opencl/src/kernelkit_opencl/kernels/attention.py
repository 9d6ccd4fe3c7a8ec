"""Attention (ONNX opset 23) on the OpenCL device (``attention.cl``), the node core's
``fuse_attention`` pass makes of a transformer's MatMul -> Mul -> Softmax -> MatMul block: 4-D
(batch, heads, seq, head) Q/K/V, or 3-D (batch, seq, heads * head) projections read in place with
``q_num_heads``/``kv_num_heads`` (grouped-query heads share a key/value head), any positive
``scale``, ``is_causal`` without a cache; float32, and float16 storage with float math. One kernel:
one work-group per (block of query rows, batch * head), a row of scores per query in local memory
(at most ``MAX_KEYS`` keys). Masks, a past key/value cache, ``nonpad_kv_seqlen``, ``softcap``,
sliding windows and the qk output modes other than 0 are declined (the reference runs them)."""
from __future__ import annotations

import math

import numpy as np
from kernelkit import register_kernel

from ._common import round_up, source, storage_defines
from .layout import transpose

WG = 128  # work-items per group
MAX_KEYS = 1024  # key positions per row of scores held in local memory
MAX_HEAD = 256  # head size (q/k and v) at most
LOCAL_BYTES = 32 << 10  # local memory a group may take (NVIDIA: 48 KiB)
BUSY_GROUPS = 512  # fewer query rows per group until the launch has this many groups (small batches)

_PLAIN = {"qk_matmul_output_mode": 0, "softcap": 0.0, "left_window_size": -1, "right_window_size": -1}


def _heads(spec, attrs) -> tuple | None:
    """(query heads, key/value heads, q/k head size, v head size, key count) of a node, or None."""
    q, k, v = spec
    if q.rank == 4:
        hq, hkv, dk, dv, sk = q.shape[1], k.shape[1], k.shape[3], v.shape[3], k.shape[2]
        if q.shape[3] != dk:
            return None
    else:
        hq, hkv = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
        if not isinstance(hq, int) or not isinstance(hkv, int) or hq <= 0 or hkv <= 0:
            return None
        if not all(isinstance(s.shape[2], int) for s in spec):
            return None
        if q.shape[2] % hq or k.shape[2] % hkv or v.shape[2] % hkv:
            return None
        dk, dv, sk = k.shape[2] // hkv, v.shape[2] // hkv, k.shape[1]
        if q.shape[2] // hq != dk:
            return None
    return hq, hkv, dk, dv, sk


def supports(input_specs, attrs) -> bool:
    """Q, K, V only (no mask, cache or sequence lengths), all 3-D or all 4-D, query heads a multiple
    of the key/value heads, head sizes up to MAX_HEAD, a known key count up to MAX_KEYS, a positive
    scale (the reference takes its square root), none of softcap, windows, qk output modes."""
    if len(input_specs) < 3 or any(s is not None for s in input_specs[3:]):
        return False
    if any(attrs.get(key, default) not in (None, default) for key, default in _PLAIN.items()):
        return False
    scale = attrs.get("scale")
    if scale is not None and not scale > 0:
        return False
    spec = input_specs[:3]
    if any(s is None or s.shape is None for s in spec) or {s.rank for s in spec} not in ({3}, {4}):
        return False
    found = _heads(spec, attrs)
    if found is None:
        return False
    hq, hkv, dk, dv, sk = found
    if not all(isinstance(x, int) for x in (hq, hkv, dk, dv, sk)) or hkv <= 0 or hq % hkv:
        return False
    return 0 < dk <= MAX_HEAD and 0 < dv <= MAX_HEAD and 0 < sk <= MAX_KEYS


def _rows_per_group(groups_per_row: int, sq: int, kmax: int, bufw: int) -> int:
    """Query rows per work-group: 16 where the local memory holds them and the launch stays busy."""
    rows = 16
    while rows > 1 and (rows * (kmax + bufw) * 4 > LOCAL_BYTES or groups_per_row * -(-sq // rows) < BUSY_GROUPS
                        or rows >= 2 * sq):
        rows //= 2
    return rows


def _layout(x, heads: int) -> tuple[int, int, int]:
    """(batch, head, row) element strides of a 4-D (b, h, s, d) or 3-D (b, s, h * d) tensor."""
    if x.ndim == 4:
        _, h, s, d = x.shape
        return h * s * d, s * d, d
    _, s, hidden = x.shape
    return s * hidden, hidden // heads, hidden


def attention(q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *,
              is_causal: int = 0, kv_num_heads=None, q_num_heads=None, scale=None, output_count: int = 1):
    dev, three_d = q.device, q.ndim == 3
    if three_d:
        hq, hkv = q_num_heads, kv_num_heads
        b, sq, sk = q.shape[0], q.shape[1], k.shape[1]
        dk, dv = k.shape[2] // hkv, v.shape[2] // hkv
        y = dev.empty((b, sq, hq * dv), q.dtype)
    else:
        b, hq, sq, dk = q.shape
        hkv, sk, dv = k.shape[1], k.shape[2], v.shape[3]
        y = dev.empty((b, hq, sq, dv), q.dtype)
    qk = dev.empty((b, hq, sq, sk), q.dtype) if output_count > 3 else None
    if y.size:
        kmax, bufw = round_up(sk, 32), max(dk, WG)
        rows = _rows_per_group(b * hq, sq, kmax, bufw)
        defines = {"WG": WG, "ROWS": rows, "DK": dk, "DV": dv, "KMAX": kmax, "BUFW": bufw,
                   "NJ": WG // dv if dv <= WG else 1, "CAUSAL": int(bool(is_causal)), "QK_OUT": int(qk is not None),
                   **storage_defines(q.dtype)}
        scale = 1.0 / math.sqrt(dk) if scale is None else scale
        args = (q.buffer, k.buffer, v.buffer, y.buffer, None if qk is None else qk.buffer, np.int32(q.offset),
                np.int32(k.offset), np.int32(v.offset), np.int32(hq), np.int32(hq // hkv), np.int32(sq),
                np.int32(sk), *(np.int32(s) for t, n in ((q, hq), (k, hkv), (v, hkv), (y, hq)) for s in _layout(t, n)),
                np.float32(scale))
        dev.launch(dev.kernel(source("attention.cl"), "attention", defines), (-(-sq // rows) * WG, b * hq), (WG, 1),
                   args, [q, k, v], [t for t in (y, qk) if t is not None], "attention")
    if output_count == 1:
        return y
    # present_key / present_value: without a cache, K and V in the 4-D layout
    present = [transpose(t.view((b, t.shape[1], hkv, t.shape[2] // hkv)), perm=(0, 2, 1, 3)) if three_d
               else transpose(t, perm=(0, 1, 2, 3)) for t in (k, v)]
    return (y, *present, qk)[:output_count]


def register() -> None:
    for dtype in ("float32", "float16"):  # float16: half storage, float math
        register_kernel("Attention", device="gpu", vendor="opencl", dtype=dtype, supports=supports)(attention)
