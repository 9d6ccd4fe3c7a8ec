"""3x3 stride-1 convolution by Winograd's minimal filtering F(2x2, 3x3) (Lavin & Gray, 2015).

Each 2x2 block of outputs ("tile") is computed from a 4x4 input patch with 16 multiplies per
(input channel, output channel) instead of 36: with V = B^T d B (input patch d), U = G g G^T
(kernel g, transformed once per weight tensor) and Y = A^T M A,

    M[xi, nu] = sum over c of U[xi, nu][m, c] * V[xi, nu][c, tile]

is 16 GEMMs of (M_out x C) by (C x tiles), which go to BLAS. So the multiply count is 2.25x
smaller than im2col + GEMM; the transforms are adds and subtracts over memory. Three sharded
phases per image: input transform (over channels), the 16 GEMMs (over position and output-channel
blocks), output transform with bias and activation fused (over output channels).

    B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]
    G   = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]
    A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]
"""
from __future__ import annotations

import numpy as np

from .. import config
from ..config import jit_inline, jit_parallel
from .epilogue import CLIP

U64 = np.uint64  # unsigned index: no wraparound check in inner loops

_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]])


def transform_weights(w) -> np.ndarray:
    """U (16, M, C) = G g G^T for every (m, c) of the (M, C, 3, 3) weights, computed in float64."""
    u = np.einsum("ik,mckl,jl->ijmc", _G, w.astype(np.float64), _G)
    return np.ascontiguousarray(u.reshape(16, w.shape[0], w.shape[1]), dtype=w.dtype)


@jit_parallel
def _input_transform(x, v, ph, pw, th_n, tw_n, c0, c1):
    """v[k, c * tiles + t] = (B^T d B)[k] for the 4x4 patch d of tile t = th * tw_n + tw, channels
    [c0, c1). Each plane is first copied into a zero-padded scratch, so the tile loops need no
    bounds checks."""
    h_n, w_n = x.shape[1], x.shape[2]
    hp, wp = 2 * th_n + 2, 2 * tw_n + 2
    pad = np.zeros((hp, wp), x.dtype)
    for c in range(c0, c1):
        for r in range(hp):
            ih = r - ph
            row = pad[r]
            if ih < 0 or ih >= h_n:
                for q in range(wp):
                    row[U64(q)] = 0
                continue
            src = x[c, ih]
            for q in range(wp):
                iw = q - pw
                row[U64(q)] = src[iw] if 0 <= iw < w_n else 0
        for th in range(th_n):
            r0, r1, r2, r3 = pad[2 * th], pad[2 * th + 1], pad[2 * th + 2], pad[2 * th + 3]
            base = c * th_n * tw_n + th * tw_n
            for tw in range(tw_n):
                q = U64(2 * tw)
                # rows of B^T d, one 4-vector each
                a0, a1, a2, a3 = (r0[q] - r2[q], r0[q + 1] - r2[q + 1], r0[q + 2] - r2[q + 2], r0[q + 3] - r2[q + 3])
                b0, b1, b2, b3 = (r1[q] + r2[q], r1[q + 1] + r2[q + 1], r1[q + 2] + r2[q + 2], r1[q + 3] + r2[q + 3])
                e0, e1, e2, e3 = (r2[q] - r1[q], r2[q + 1] - r1[q + 1], r2[q + 2] - r1[q + 2], r2[q + 3] - r1[q + 3])
                f0, f1, f2, f3 = (r1[q] - r3[q], r1[q + 1] - r3[q + 1], r1[q + 2] - r3[q + 2], r1[q + 3] - r3[q + 3])
                t = U64(base + tw)
                v[0, t], v[1, t], v[2, t], v[3, t] = a0 - a2, a1 + a2, a2 - a1, a1 - a3
                v[4, t], v[5, t], v[6, t], v[7, t] = b0 - b2, b1 + b2, b2 - b1, b1 - b3
                v[8, t], v[9, t], v[10, t], v[11, t] = e0 - e2, e1 + e2, e2 - e1, e1 - e3
                v[12, t], v[13, t], v[14, t], v[15, t] = f0 - f2, f1 + f2, f2 - f1, f1 - f3


@jit_inline
def _activate(v, code, p0, p1):
    """Clip (Relu, Relu6) or none: the caller applies other activations in a second pass."""
    if code == CLIP:
        return min(max(v, p0), p1)
    return v


@jit_parallel
def _output_transform(mo, y, bias, th_n, tw_n, code, p0, p1, m0, m1):
    """y[m] (OH, OW) = act(A^T M A + bias[m]) per tile, output channels [m0, m1); mo[k, m * tiles + t]."""
    oh_n, ow_n = y.shape[1], y.shape[2]
    for m in range(m0, m1):
        beta = bias[m]
        plane = y[m]
        for th in range(th_n):
            oh = 2 * th
            two_rows = oh + 1 < oh_n
            for tw in range(tw_n):
                t = U64((m * th_n + th) * tw_n + tw)
                s0 = mo[0, t] + mo[4, t] + mo[8, t]
                s1 = mo[1, t] + mo[5, t] + mo[9, t]
                s2 = mo[2, t] + mo[6, t] + mo[10, t]
                s3 = mo[3, t] + mo[7, t] + mo[11, t]
                d0 = mo[4, t] - mo[8, t] - mo[12, t]
                d1 = mo[5, t] - mo[9, t] - mo[13, t]
                d2 = mo[6, t] - mo[10, t] - mo[14, t]
                d3 = mo[7, t] - mo[11, t] - mo[15, t]
                ow = 2 * tw
                plane[oh, ow] = _activate(s0 + s1 + s2 + beta, code, p0, p1)
                if ow + 1 < ow_n:
                    plane[oh, ow + 1] = _activate(s1 - s2 - s3 + beta, code, p0, p1)
                if two_rows:
                    plane[oh + 1, ow] = _activate(d0 + d1 + d2 + beta, code, p0, p1)
                    if ow + 1 < ow_n:
                        plane[oh + 1, ow + 1] = _activate(d1 - d2 - d3 + beta, code, p0, p1)


def _spaced(n: int) -> int:
    """A row length of at least ``n`` floats whose byte size is an odd multiple of 64: the 16 rows
    a transform writes at once then fall in different cache sets (rows 4 KiB apart made the input
    transform of a 64x56x56 map 10x slower)."""
    lines = -(-n // 16)
    return 16 * (lines + 1 - lines % 2)


def usable(kh, kw, sh, sw, dh, dw, group, oh_n, ow_n) -> bool:
    """Winograd pays off for 3x3, stride 1, undilated, ungrouped convolutions on maps of at least
    14x14 (smaller ones leave too few tiles for the 16 GEMMs to run near BLAS speed)."""
    return kh == kw == 3 and sh == sw == dh == dw == 1 and group == 1 and oh_n * ow_n >= 196


def conv3x3(x, u, bias, y, ph, pw, code, p0, p1, scratch) -> None:
    """y (N, M, OH, OW) = conv(x (N, C, H, W)) with transformed weights u (16, M, C). ``scratch``
    holds (v, mo) buffers reused between calls (dict, filled here)."""
    n_n, c_n = x.shape[:2]
    m_n, oh_n, ow_n = y.shape[1:]
    th_n, tw_n = (oh_n + 1) // 2, (ow_n + 1) // 2
    t_n = th_n * tw_n
    key = (c_n, m_n, t_n, x.dtype)
    if scratch.get("key") != key:  # (16, rows * tiles) buffers, rows apart by an odd number of cache lines
        scratch.update(key=key, v=np.empty((16, _spaced(c_n * t_n)), x.dtype),
                       mo=np.empty((16, _spaced(m_n * t_n)), x.dtype))
    v, mo = scratch["v"], scratch["mo"]
    gemm_work = 2.0 * 16 * m_n * c_n * t_n
    blocks = max(1, min(m_n // 16, -(-config.shard_count(16 * m_n, gemm_work, unit=config.MIN_TILE_WORK) // 16)))
    for n in range(n_n):
        config.parallel_for(_input_transform, c_n, (x[n], v, ph, pw, th_n, tw_n), 40.0 * c_n * t_n)

        def gemm(i):
            k, b = divmod(i, blocks)
            r0, r1 = b * m_n // blocks, (b + 1) * m_n // blocks
            vk = v[k, :c_n * t_n].reshape(c_n, t_n)
            np.matmul(u[k, r0:r1], vk, out=mo[k, r0 * t_n:r1 * t_n].reshape(r1 - r0, t_n))

        config.run_shards(gemm, 16 * blocks)
        config.parallel_for(_output_transform, m_n, (mo, y[n], bias, th_n, tw_n, code, p0, p1), 40.0 * m_n * t_n)
