"""Attention (ONNX opset 23) with at most an additive float mask, no key/value cache:
softmax(Q K^T * scale + mask) V per (batch, head), the form core's ``fuse_attention`` pass gives a
transformer's MatMul -> Mul -> [Add(mask) ->] Softmax -> MatMul block (BERT's padding bias; 3-D
inputs: heads read in place from the (batch, seq, heads * head) projections, no transposes).

Each (batch item, group of heads, block of query rows) is one shard of the pool (at one thread a
batch item's heads are one shard; with more, the heads are spread over two shards per thread): the
scores block is one batched BLAS GEMM into a per-shard scratch (Q rows times K^T, K passed as
transposed strides), the scale, max shift, exp and row sums one Numba pass (``softmax.exp_rows``:
a float32 exp that vectorises), the product with V a second GEMM written straight into the output
(a strided view for 3-D outputs), and the division by the row sums is applied to that (rows x
head) output rather than to the (rows x keys) probabilities. A float mask is added to the scaled
scores block in one more pass over it (``_scale_mask``; the exp pass then scales by 1). Nodes with
a boolean mask, a cache, a causal/window rule, softcap or the optional outputs run the reference
function."""
from __future__ import annotations

import math

import numpy as np
from kernelkit.ops.attention import attention as reference_attention
from kernelkit.registry import register_kernel

from .. import config
from .._base import NumbaKernel
from ..config import jit
from . import halves, tpair
from .gemm import gemm_work
from .softmax import exp_rows

U = np.uint64  # unsigned index: no wraparound check in inner loops
ROW_MASK = True  # a mask constant over heads and query rows is added as one contiguous row (switch)
SCRATCH_BYTES = 1 << 20  # one shard's scores block (query rows x keys, float32) at most this big (L2)

# attributes whose non-default value this kernel leaves to the reference
_PLAIN = {"is_causal": 0, "qk_matmul_output_mode": 0, "softcap": 0.0, "left_window_size": -1,
          "right_window_size": -1}


def supports(input_specs, attrs) -> bool:
    """Q, K, V, 3-D or 4-D, and at most an additive float32 mask (no boolean mask, cache or
    sequence lengths), none of the masking rules, a positive scale (the reference takes its square
    root)."""
    if len(input_specs) > 4 and any(s is not None for s in input_specs[4:]):
        return False
    mask = input_specs[3] if len(input_specs) > 3 else None
    if mask is not None and (mask.dtype != "float32" or not 1 <= mask.rank <= 4):
        return False
    if any(attrs.get(k, v) not in (None, v) for k, v in _PLAIN.items()):
        return False
    scale = attrs.get("scale")
    return (scale is None or scale > 0) and all(s is not None and s.rank in (3, 4) for s in input_specs[:3])


@jit
def _divide_rows(y, sums):
    """y[g, i, :] /= sums[g * R + i] for y (G, R, D) (a zero sum divides by 1, as the reference)."""
    r_n = y.shape[1]
    for g in range(y.shape[0]):
        for i in range(r_n):
            total = sums[g * r_n + i]
            inv = np.float32(1.0 / (total if total != 0.0 else 1.0))
            out = y[g, i]
            for j in range(out.shape[0]):
                out[U(j)] *= inv


@jit
def _scale_mask(s, scale, mask):
    """s[g, i, :] = s[g, i, :] * scale + mask[g, i, :] for s (G, R, N) and a (G, R, N) view of the
    additive mask (zero strides where it broadcasts): ONNX's ``attn_mask`` after the scale."""
    for g in range(s.shape[0]):
        for i in range(s.shape[1]):
            row, add = s[g, i], mask[g, i]
            for j in range(row.shape[0]):
                row[U(j)] = row[U(j)] * scale + add[U(j)]


@jit
def _scale_row_mask(s, scale, mask):
    """_scale_mask for a mask constant over heads and query rows (BERT's (batch, 1, 1, keys) padding
    bias): one contiguous row of N values, so the loop vectorises (the general view's strides keep
    it scalar: 57 us per 12 x 128 x 128 block on the dev box)."""
    for g in range(s.shape[0]):
        for i in range(s.shape[1]):
            row = s[g, i]
            for j in range(row.shape[0]):
                row[U(j)] = row[U(j)] * scale + mask[U(j)]


@register_kernel("Attention", device="cpu", vendor="numba", dtype="float32", supports=supports)
class Attention(NumbaKernel):
    """softmax(Q K^T * scale) V, shards of (batch item, heads, query rows)."""

    uses_blas = True

    def setup(self, input_specs):
        node = getattr(self.context, "node", None)
        self.extra_outputs = node is not None and len([o for o in node.outputs if o]) > 1
        self._pairs = {}  # tpair's descriptors by the operands' shapes and strides (False: no pair)

    def work(self, q, k, v, *rest):
        """The two products' flops, counted as GEMM flops (mostly BLAS)."""
        return gemm_work(2.0 * q.size * k.shape[-2 if k.ndim == 4 else 1] * (1 + v.shape[-1] / max(1, k.shape[-1])))

    def compute(self, q, k, v, *rest, out=None):
        at = self.attrs
        if self.extra_outputs:  # present_key / present_value / qk output asked for: the reference's
            kwargs = {key: at[key] for key in (*_PLAIN, "scale", "q_num_heads", "kv_num_heads",
                                                 "softmax_precision") if key in at}
            return reference_attention(q, k, v, *rest, **kwargs)
        mask = rest[0] if rest else None
        if mask is not None and (mask.shape[-1] != k.shape[-2] or mask.dtype != q.dtype):
            # a shorter mask is padded with -inf by the op: the reference's rules
            return reference_attention(q, k, v, *rest, **{key: at[key] for key in (
                *_PLAIN, "scale", "q_num_heads", "kv_num_heads", "softmax_precision") if key in at})[0]
        if tpair.ON and tpair.ATTENTION and config.current_threads() == 2:  # two halves of heads (tpair.py)
            y = self._paired(q, k, v, mask, out)
            if y is not None:
                return y
        if q.ndim == 3:
            hq, hkv = at.get("q_num_heads"), at.get("kv_num_heads")
            if not hq or not hkv:
                raise self.attr_error("3-D inputs need the q_num_heads and kv_num_heads attributes")
            b, m = q.shape[:2]
            q4 = q.reshape(b, m, hq, -1).transpose(0, 2, 1, 3)
            k4 = k.reshape(b, k.shape[1], hkv, -1).transpose(0, 2, 1, 3)
            v4 = v.reshape(b, v.shape[1], hkv, -1).transpose(0, 2, 1, 3)
            y = np.empty((b, m, hq * v4.shape[3]), q.dtype) if out is None else out
            y4 = y.reshape(b, m, hq, -1).transpose(0, 2, 1, 3)
        else:
            q4, k4, v4 = q, k, v
            b, hq, m = q.shape[:3]
            hkv = k.shape[1]
            y = y4 = np.empty((b, hq, m, v.shape[3]), q.dtype) if out is None else out
        n, dk = k4.shape[2], k4.shape[3]
        if q4.shape[3] != dk or v4.shape[2] != n or hq % hkv or k4.shape[0] != b or v4.shape[:2] != k4.shape[:2]:
            raise ValueError(f"Attention operands do not align: Q {q.shape}, K {k.shape}, V {v.shape}")
        if y.size == 0:
            return y
        scale = q.dtype.type(at["scale"] if at.get("scale") is not None else 1 / math.sqrt(dk))
        m4 = None
        if mask is not None:  # (b, hq, m, n) view, zero strides where the mask broadcasts
            m4 = np.broadcast_to(mask.reshape((1,) * (4 - mask.ndim) + mask.shape), (b, hq, m, n))
        one_row = m4 is not None and ROW_MASK and m4.strides[1] == 0 and m4.strides[2] == 0 and \
            m4.strides[3] == m4.itemsize
        group = hq // hkv
        one = q.dtype.type(1)
        # heads per shard: all of a batch item's at one thread (one batched GEMM call per product, so
        # the per-call Python is paid once per item); spread over 2 shards per thread otherwise
        threads = config.current_threads()
        per = hq if threads <= 1 else max(1, min(hq, (b * hq) // (2 * threads)))
        if b == 1 and halves.ATTENTION and halves.usable(threads):
            per = -(-hq // 2)  # two shards: the caller's heads and the worker's (halves.py)
        if group > 1:
            per = 1  # grouped-query heads: one K/V head per shard
        groups = -(-hq // per)
        rows = max(1, min(m, SCRATCH_BYTES // (4 * max(n, 1) * per)))
        blocks = -(-m // rows)

        def shard(t):
            bi, rest = divmod(t, groups * blocks)
            hg, blk = divmod(rest, blocks)
            h0, h1 = hg * per, min(hq, (hg + 1) * per)
            r0, r1 = blk * rows, min(m, (blk + 1) * rows)
            kv0, kv1 = (h0, h1) if group == 1 else (h0 // group, h0 // group + 1)
            count = (h1 - h0) * (r1 - r0)  # scores and row sums in this thread's kept buffers
            s = config.thread_buffer("attention_scores", count * n, np.float32).reshape(h1 - h0, r1 - r0, n)
            sums = config.thread_buffer("attention_sums", count, np.float64)
            np.matmul(q4[bi, h0:h1, r0:r1], k4[bi, kv0:kv1].transpose(0, 2, 1), out=s)
            if m4 is None:
                exp_rows(s.reshape(-1, n), scale, sums, config.thread_buffer("attention_powers", n, np.int32))
            else:
                if one_row:
                    _scale_row_mask(s, scale, m4[bi, 0, 0])
                else:
                    _scale_mask(s, scale, m4[bi, h0:h1, r0:r1])
                exp_rows(s.reshape(-1, n), one, sums, config.thread_buffer("attention_powers", n, np.int32))
            dst = y4[bi, h0:h1, r0:r1]
            np.matmul(s, v4[bi, kv0:kv1], out=dst)
            _divide_rows(dst, sums)

        config.run_shards(shard, b * groups * blocks)
        return y

    def _paired(self, q, k, v, mask, out):
        """The node as two halves of (batch item, head) pairs on fpair's helper (tpair.py), its descriptor made
        at the first call of these shapes and strides; None where it does not pair (the general path)."""
        key = (q.shape, q.strides, k.shape, k.strides, v.shape, v.strides, None if out is None else out.strides,
               None if mask is None else (mask.shape, mask.strides))
        made = self._pairs.get(key)
        if made is None:
            at = self.attrs
            if q.ndim == 4:
                hq, hkv = q.shape[1], k.shape[1]
            else:
                hq, hkv = at.get("q_num_heads"), at.get("kv_num_heads")
            made = False
            if hq and hkv and q.ndim in (3, 4) and tpair.enabled():
                dk = k.shape[3] if q.ndim == 4 else k.shape[2] // hkv
                scale = at["scale"] if at.get("scale") is not None else 1 / math.sqrt(max(dk, 1))
                made = tpair.attention_descriptor(q, k, v, mask, out, hq, hkv, scale) or False
            self._pairs[key] = made
        return tpair.attention(made, q, k, v, mask, out) if made else None
