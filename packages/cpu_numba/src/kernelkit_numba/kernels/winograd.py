"""3x3 stride-1 convolution by Winograd's minimal filtering (Lavin & Gray, 2015): F(2x2, 3x3)
here, F(4x4, 3x3) further down (``conv3x3_f4``; conv.py picks one).

Each 2x2 block of outputs ("tile") is computed from a 4x4 input patch with 16 multiplies per
(input channel, output channel) instead of 36: with V = B^T d B (input patch d), U = G g G^T
(kernel g, transformed once per weight tensor) and Y = A^T M A,

    M[xi, nu] = sum over c of U[xi, nu][m, c] * V[xi, nu][c, tile]

is 16 GEMMs of (M_out x C) by (C x tiles), which go to ftile's micro-kernels (BLAS with
KERNELKIT_F32_GEMM=off or on CPUs without AVX2/AVX-512; see ``gemms``). So the multiply count is 2.25x
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
from ..config import jit_inline, jit_ordered, jit_parallel
from . import ftile, halves
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
def _output_transform(mo, y, bias, z, has_z, th_n, tw_n, code, p0, p1, m0, m1):
    """y[m] (OH, OW) = act(A^T M A + bias[m] (+ z[m])) per tile, output channels [m0, m1);
    mo[k, m * tiles + t]; z: the fused residual shaped like y (read only when ``has_z``)."""
    oh_n, ow_n = y.shape[1], y.shape[2]
    for m in range(m0, m1):
        beta = bias[m]
        plane = y[m]
        zp = z[m] if has_z else z[0]
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
                v00, v01, v10, v11 = s0 + s1 + s2 + beta, s1 - s2 - s3 + beta, d0 + d1 + d2 + beta, d1 - d2 - d3 + beta
                if has_z:
                    v00 += zp[oh, ow]
                    if ow + 1 < ow_n:
                        v01 += zp[oh, ow + 1]
                    if two_rows:
                        v10 += zp[oh + 1, ow]
                        if ow + 1 < ow_n:
                            v11 += zp[oh + 1, ow + 1]
                plane[oh, ow] = _activate(v00, code, p0, p1)
                if ow + 1 < ow_n:
                    plane[oh, ow + 1] = _activate(v01, code, p0, p1)
                if two_rows:
                    plane[oh + 1, ow] = _activate(v10, code, p0, p1)
                    if ow + 1 < ow_n:
                        plane[oh + 1, ow + 1] = _activate(v11, code, p0, p1)


def _spaced(n: int) -> int:
    """A row length of at least ``n`` floats whose byte size is an odd multiple of 64: the 16 rows
    a transform writes at once then fall in different cache sets (rows 4 KiB apart made the input
    transform of a 64x56x56 map 10x slower)."""
    lines = -(-n // 16)
    return 16 * (lines + 1 - lines % 2)


# Work units (config.MIN_SHARD_WORK: a shard has at least 2**21) per (channel, tile) of the transforms,
# scaled so that a unit is ~25 ps, the time of ~2.5 flops of the GEMM tiles: measured on the AMD box at
# one thread, F(2x2, 3x3) input 5.2-6.6 ns, output 4.0-4.8 ns a (channel, tile); F(4x4, 3x3) input
# ~21 ns, output ~15 ns. The old 40 / 60 units left every transform of ResNet-18 (0.05-0.26 ms each,
# ~3 ms a run) on one thread at two (issue 11, session 6).
_TRANSFORM_WORK = 200.0  # F(2x2, 3x3), input transform
_OUT_WORK = 170.0  # F(2x2, 3x3), output transform
_TRANSFORM4_WORK = 830.0  # F(4x4, 3x3), input
_OUT4_WORK = 600.0  # F(4x4, 3x3), output


def usable(kh, kw, sh, sw, dh, dw, group, oh_n, ow_n, small: bool = False) -> bool:
    """Winograd pays off for 3x3, stride 1, undilated, ungrouped convolutions on maps of at least
    14x14 (smaller ones leave too few tiles for the 16 GEMMs to run near BLAS speed); ``small``
    (the GEMMs on ftile's cols tiles, conv.py): from 7x7."""
    return kh == kw == 3 and sh == sw == dh == dw == 1 and group == 1 and oh_n * ow_n >= (49 if small else 196)


def gemms(v, mo, u, m_n, c_n, nt, packed, ahead: int = 0) -> None:
    """The P position products mo[i, :m_n * nt] = u[i] @ v[i, :c_n * nt] (P = 16 or 36), sharded
    over positions and output-channel blocks: on ftile's micro-kernels when ``packed`` is
    (kind, cols, panels of u: ftile.pack_batched), else one BLAS call a shard; ``ahead``: the cols
    tiles' weight prefetch (ftile.batched_gemms', AHEAD_ONE_THREAD)."""
    fn, count = _gemm_part(v, mo, u, m_n, c_n, nt, packed, ahead=ahead)
    if count <= 1:
        fn(0)
        return
    config.run_shards(fn, count)


def _gemm_part(v, mo, u, m_n, c_n, nt, packed, guided: bool = False, ahead: int = 0):
    """``gemms``' shards as ``(fn, count)`` (``fn(i)`` runs shard i; a phase of ``config.run_phases``);
    ``guided``: large shards first and small last (config.guided) where the units allow it; ``ahead``:
    gemms'."""
    positions = u.shape[0]
    threads = config.current_threads() if guided else 1
    gemm_work = 2.0 * positions * m_n * c_n * nt
    if packed is not None:
        kind, cols, wp, zeros = packed
        width = ftile.COLS_WIDTH[kind] if cols else ftile.MR[kind]
        panels = -(-m_n // width)
        want = config.shard_count(positions * panels, gemm_work, unit=config.MIN_TILE_WORK)
        groups = max(1, min(panels, -(-want // positions)))
        total = positions * groups
        count = config.shard_count(total, gemm_work, unit=ftile.SHARD_UNIT)
        size = ftile.scratch_size(kind, cols, nt)
        bounds = config.guided(total, count, threads)

        def batched(i):
            ftile.batched_gemms(kind, cols, wp, m_n, c_n, v, nt, mo, zeros, groups,
                                config.thread_buffer("ftile", size, np.float32), bounds[i], bounds[i + 1], ahead)

        return batched, len(bounds) - 1
    # BLAS: a shard is a run of positions (and, with fewer positions than shards, a block of output
    # rows), multiplied in one batched np.matmul: one Python call and one GIL release a shard. One
    # BLAS call per position and shard (36 shards of ~20 us for ResNet's 64@56 layers) made the two
    # threads hand the GIL back and forth around every product, and those layers ran no faster at
    # two threads than at one on the Xeon (issue 11, session 7).
    want = config.shard_count(positions * m_n, gemm_work, unit=config.MIN_TILE_WORK)
    blocks = max(1, min(m_n // 16, -(-want // positions)))
    runs = max(1, min(positions, want // blocks))
    vv = v[:, :c_n * nt].reshape(positions, c_n, nt)
    out = mo[:, :m_n * nt].reshape(positions, m_n, nt)
    if blocks == 1 and threads > 1:  # runs of positions, large first (config.guided)
        bounds = config.guided(positions, runs, threads)

        def positions_run(i):
            k0, k1 = bounds[i], bounds[i + 1]
            np.matmul(u[k0:k1], vv[k0:k1], out=out[k0:k1])

        return positions_run, len(bounds) - 1

    def gemm(i):
        k, b = divmod(i, blocks)
        k0, k1 = k * positions // runs, (k + 1) * positions // runs
        r0, r1 = b * m_n // blocks, (b + 1) * m_n // blocks
        np.matmul(u[k0:k1, r0:r1], vv[k0:k1], out=out[k0:k1, r0:r1])

    return gemm, runs * blocks


# F(2x2, 3x3) on ftile's tiles at 2+ threads (issue 11, session 8): a shard runs one group of weight
# panels at every position and then the output transform of those channels, so the transform runs
# on both threads and reads the products its own thread has just written. Before, its work estimate
# (under two minimum shards) kept it on the calling thread after a job whose products half came
# from the other core: ResNet-18's 256@14 and 512@7 layers spent 0.3-0.6 ms a node outside any
# shard at two threads on the Xeon. Where fewer than FUSED_MIN_SHARDS panel groups a thread, the
# position-major shards and a separate transform.
FUSED_OUT = True
FUSED_MIN_SHARDS = 2
# At 2+ threads a Winograd convolution is one job of phases (config.run_phases, issue 11, session 9):
# the input transform, the products, the output transform (or the products and output transform of
# the fused shards), each phase's shards starting once the phase before has finished. Before, each
# was a call of its own, and those under two minimum shards (the input transforms of the 256@14 and
# 512@7 layers, F(4x4)'s output transform on 128@28: 0.07-0.16 ms each on the AMD box) ran on the
# calling thread alone. False: the calls in a row, as session 8 had them.
PHASED = True


def _fused_part(v, mo, u, m_n, c_n, nt, packed, out_args, threads):
    """The fused shards (``_gemms_out``) as ``(fn, count)``, or None where there are too few panel
    groups for the threads."""
    if not FUSED_OUT or threads <= 1 or packed is None:
        return None
    kind, cols, wp, zeros = packed
    width = ftile.COLS_WIDTH[kind] if cols else ftile.MR[kind]
    panels = -(-m_n // width)
    positions = u.shape[0]
    shards = config.shard_count(panels, 2.0 * positions * m_n * c_n * nt, threads, unit=config.MIN_TILE_WORK)
    if shards < FUSED_MIN_SHARDS * threads:
        return None
    size = ftile.scratch_size(kind, cols, nt)
    # panels [bounds[g], bounds[g + 1]) a shard, large first (config.guided; issue 11, session 9): one
    # panel a group in the driver (group-major shard numbers, a shard a run of whole panels)
    bounds = config.guided(panels, shards, threads)

    def shard(g):
        p0, p1 = bounds[g], bounds[g + 1]
        ftile.batched_gemms(kind, cols, wp, m_n, c_n, v, nt, mo, zeros, -panels,
                            config.thread_buffer("ftile", size, np.float32), p0 * positions, p1 * positions)
        _output_transform(mo, *out_args, p0 * width, min(m_n, p1 * width))

    return shard, len(bounds) - 1


def _gemms_out(v, mo, u, m_n, c_n, nt, packed, out_args) -> bool:
    """``gemms`` then the output transform (``_output_transform``'s ``out_args`` before its channel
    range) as shards of weight-panel groups, each group's products at every position and then its
    channels' transform; False (nothing done) where there are too few panel groups for the threads."""
    part = _fused_part(v, mo, u, m_n, c_n, nt, packed, out_args, config.current_threads())
    if part is None:
        return False
    config.run_shards(*part)
    return True


def conv3x3(x, u, bias, y, ph, pw, code, p0, p1, scratch, z=None, packed=None, ahead: int = 0) -> None:
    """y (N, M, OH, OW) = act(conv(x (N, C, H, W)) + bias (+ z)) with transformed weights u (16, M, C);
    z: the fused residual shaped like y, or None. ``scratch`` holds (v, mo) buffers reused between
    calls (dict, filled here); ``packed``: see ``gemms``; ``ahead``: the products' weight prefetch at one
    thread (AHEAD_ONE_THREAD's value, which the caller keeps)."""
    n_n, c_n = x.shape[:2]
    m_n, oh_n, ow_n = y.shape[1:]
    th_n, tw_n = (oh_n + 1) // 2, (ow_n + 1) // 2
    t_n = th_n * tw_n
    key = (c_n, m_n, t_n, x.dtype)
    if scratch.get("key") != key:  # (16, rows * tiles) buffers, rows apart by an odd number of cache lines
        scratch.update(key=key, v=np.empty((16, _spaced(c_n * t_n)), x.dtype),
                       mo=np.empty((16, _spaced(m_n * t_n)), x.dtype))
    v, mo = scratch["v"], scratch["mo"]
    threads = config.current_threads()
    for n in range(n_n):
        zn = config.readonly(z[n] if z is not None else y[n, :1])
        out_args = (y[n], bias, zn, z is not None, th_n, tw_n, code, p0, p1)
        in_args = (x[n], v, ph, pw, th_n, tw_n)
        if PHASED and threads > 1:
            parts = [config.phase_for(_input_transform, c_n, in_args,
                                      config.phase_count(c_n, _TRANSFORM_WORK * c_n * t_n, threads))]
            fused = _fused_part(v, mo, u, m_n, c_n, t_n, packed, out_args, threads)
            if fused is not None:
                parts.append(fused)
            else:
                parts.append(_gemm_part(v, mo, u, m_n, c_n, t_n, packed, True))
                parts.append(config.phase_for(_output_transform, m_n, (mo, *out_args),
                                              config.phase_count(m_n, _OUT_WORK * m_n * t_n, threads)))
            config.run_phases(parts)
            continue
        config.parallel_for(_input_transform, c_n, in_args, _TRANSFORM_WORK * c_n * t_n)
        if packed is not None and _gemms_out(v, mo, u, m_n, c_n, t_n, packed, out_args):
            continue
        gemms(v, mo, u, m_n, c_n, t_n, packed, ahead if threads == 1 else 0)
        config.parallel_for(_output_transform, m_n, (mo, *out_args), _OUT_WORK * m_n * t_n)


# -- F(4x4, 3x3) ---------------------------------------------------------------------------------
# 36 multiplies per 4x4 output tile and channel pair instead of 144 (F(2x2, 3x3): 64 for the same
# 16 outputs), with the interpolation points 0, +-1, +-2 and infinity (Lavin & Gray, 2015):
#     B^T = [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
#            [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]
#     G   = [[1/4, 0, 0], [-1/6, -1/6, -1/6], [-1/6, 1/6, -1/6], [1/24, 1/12, 1/6], [1/24, -1/12, 1/6], [0, 0, 1]]
#     A^T = [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]
# The images of a batch share each GEMM (their tiles are columns side by side), so small maps at
# batch 8 still give BLAS long rows.
_G4 = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])


def transform_weights4(w) -> np.ndarray:
    """U (36, M, C) = G g G^T for every (m, c) of the (M, C, 3, 3) weights, computed in float64."""
    u = np.einsum("ik,mckl,jl->ijmc", _G4, w.astype(np.float64), _G4)
    return np.ascontiguousarray(u.reshape(36, w.shape[0], w.shape[1]), dtype=w.dtype)


@jit_inline
def _pad_rows4(src, pad, r0, h_n, w_n, ph, pw):
    """pad[r] = row r0 + r - ph of the plane src (H, W), shifted right by pw, zero outside it."""
    hp, wp = pad.shape
    lo, hi = min(wp, max(0, pw)), min(wp, w_n + pw)
    for r in range(hp):
        ih = r + r0 - ph
        row = pad[r]
        if ih < 0 or ih >= h_n:
            for p in range(wp):
                row[U64(p)] = 0
            continue
        srow = src[ih]
        for p in range(lo):
            row[U64(p)] = 0
        for p in range(lo, hi):
            row[U64(p)] = srow[U64(p - pw)]
        for p in range(max(lo, hi), wp):
            row[U64(p)] = 0


@jit_inline
def _tile_row4(pad, rows, r, lo, hi, v, base):
    """The tiles [lo, hi) of the tile row whose 6x6 patches start at pad row r: the vertical pass B^T
    over their columns of rows r..r+5 (contiguous, into ``rows``), then the horizontal one per tile,
    v[k, base + tw] = (B^T d B)[k]."""
    f2, f4, f5 = np.float32(2), np.float32(4), np.float32(5)
    d0, d1, d2, d3, d4, d5 = pad[r], pad[r + 1], pad[r + 2], pad[r + 3], pad[r + 4], pad[r + 5]
    t0, t1, t2, t3, t4, t5 = rows[0], rows[1], rows[2], rows[3], rows[4], rows[5]
    for p in range(4 * lo, 4 * hi + 2):
        i = U64(p)
        t0[i] = f4 * d0[i] - f5 * d2[i] + d4[i]
        t1[i] = d3[i] + d4[i] - f4 * (d1[i] + d2[i])
        t2[i] = d4[i] - d3[i] + f4 * (d1[i] - d2[i])
        t3[i] = d4[i] - d2[i] + f2 * (d3[i] - d1[i])
        t4[i] = d4[i] - d2[i] + f2 * (d1[i] - d3[i])
        t5[i] = f4 * d1[i] - f5 * d3[i] + d5[i]
    for a in range(6):
        ra = rows[a]
        k = 6 * a
        for tw in range(lo, hi):
            p = U64(4 * tw)
            e0, e1, e2, e3, e4, e5 = ra[p], ra[p + 1], ra[p + 2], ra[p + 3], ra[p + 4], ra[p + 5]
            t = U64(base + tw)
            v[k, t] = f4 * e0 - f5 * e2 + e4
            v[k + 1, t] = e3 + e4 - f4 * (e1 + e2)
            v[k + 2, t] = e4 - e3 + f4 * (e1 - e2)
            v[k + 3, t] = e4 - e2 + f2 * (e3 - e1)
            v[k + 4, t] = e4 - e2 + f2 * (e1 - e3)
            v[k + 5, t] = f4 * e1 - f5 * e3 + e5


@jit_parallel
def _input_transform4(x, v, ph, pw, th_n, tw_n, q0, q1):
    """v[k, c * (N*T) + n * T + t] = (B^T d B)[k] for the 6x6 patch d of tile t (T = th_n * tw_n
    tiles a plane) of planes [q0, q1) of the flattened (N, C). Each plane is copied into a
    zero-padded scratch; per tile row the vertical pass B^T runs over whole rows (contiguous), the
    horizontal one per tile over six values of each of its six rows."""
    n_n, c_n, h_n, w_n = x.shape
    t_n = th_n * tw_n
    nt = n_n * t_n
    pad = np.empty((4 * th_n + 2, 4 * tw_n + 2), x.dtype)
    rows = np.empty((6, 4 * tw_n + 2), x.dtype)
    for q in range(q0, q1):
        n = q // c_n
        c = q - n * c_n
        _pad_rows4(x[n, c], pad, 0, h_n, w_n, ph, pw)
        for th in range(th_n):
            _tile_row4(pad, rows, 4 * th, 0, tw_n, v, c * nt + n * t_n + th * tw_n)


@jit_inline
def _out_tile4(mo, t, s, ob, p, beta):
    """ob[0:4, p:p+4] = A^T M A + beta for tile t's 36 products mo[:, t] (vertical pass into s, then
    horizontal)."""
    f2, f4, f8 = np.float32(2), np.float32(4), np.float32(8)
    for b in range(6):  # vertical: A^T over the six rows of M, column b
        m0, m1, m2 = mo[b, t], mo[6 + b, t], mo[12 + b, t]
        m3, m4, m5 = mo[18 + b, t], mo[24 + b, t], mo[30 + b, t]
        s[0, b] = m0 + m1 + m2 + m3 + m4
        s[1, b] = m1 - m2 + f2 * (m3 - m4)
        s[2, b] = m1 + m2 + f4 * (m3 + m4)
        s[3, b] = m1 - m2 + f8 * (m3 - m4) + m5
    for a in range(4):  # horizontal: A^T over the six columns
        g0, g1, g2, g3, g4, g5 = s[a, 0], s[a, 1], s[a, 2], s[a, 3], s[a, 4], s[a, 5]
        oa = ob[a]
        oa[p] = g0 + g1 + g2 + g3 + g4 + beta
        oa[p + 1] = g1 - g2 + f2 * (g3 - g4) + beta
        oa[p + 2] = g1 + g2 + f4 * (g3 + g4) + beta
        oa[p + 3] = g1 - g2 + f8 * (g3 - g4) + g5 + beta


@jit_parallel
def _output_transform4(mo, y, bias, z, has_z, th_n, tw_n, code, p0, p1, q0, q1):
    """y[n, m] = act(A^T M A + bias[m] (+ z[n, m])) for planes [q0, q1) of the flattened (N, M);
    mo[k, m * (N*T) + n * T + t]. The 4x4 tiles of a tile row go to a 4-row scratch first (the
    last tile may overhang the map), then rows are copied out with the epilogue."""
    n_n, m_n, oh_n, ow_n = y.shape
    t_n = th_n * tw_n
    nt = n_n * t_n
    wo = 4 * tw_n
    ob = np.empty((4, wo), y.dtype)
    s = np.empty((4, 6), y.dtype)
    for q in range(q0, q1):
        n = q // m_n
        m = q - n * m_n
        beta = bias[m]
        for th in range(th_n):
            base = m * nt + n * t_n + th * tw_n
            for tw in range(tw_n):
                _out_tile4(mo, U64(base + tw), s, ob, U64(4 * tw), beta)
            for a in range(min(4, oh_n - 4 * th)):
                oh = 4 * th + a
                dst = y[n, m, oh]
                src = ob[a]
                if has_z:
                    zr = z[n, m, oh]
                    for p in range(ow_n):
                        dst[U64(p)] = _activate(src[U64(p)] + zr[U64(p)], code, p0, p1)
                else:
                    for p in range(ow_n):
                        dst[U64(p)] = _activate(src[U64(p)], code, p0, p1)


F4_MIN_OUTPUTS = 392  # output pixels of the batch from which F(4x4, 3x3) runs (usable4): two 14x14 maps. 196:
# ResNet-18's one-image 256@14 layers on F(4x4) too (16 tiles of 4x4, 256 outputs computed for 196) rather than
# F(2x2) (49 tiles); issue 11, session 14 (r18one14), an A/B switch: kernels.winograd.F4_MIN_OUTPUTS=196


def usable4(kh, kw, sh, sw, dh, dw, group, oh_n, ow_n, batch) -> bool:
    """F(4x4, 3x3) where the batch's tiles fill enough GEMM columns: at least two 14x14 maps' worth
    of outputs (measured, one thread: a 64x56x56 layer 1.6 vs 2.1 ms on F(2x2, 3x3); one 14x14 map
    ran faster on F(2x2, 3x3), two at par; 512x7x7 at batch 8 15 ms against 34 for im2col + GEMM)."""
    if not (kh == kw == 3 and sh == sw == dh == dw == 1 and group == 1):
        return False
    return batch * oh_n * ow_n >= F4_MIN_OUTPUTS


def conv3x3_f4(x, u, bias, y, z, ph, pw, code, p0, p1, scratch, packed=None, ahead: int = 0) -> None:
    """y (N, M, OH, OW) = act(conv(x (N, C, H, W)) + bias (+ z)) with weights u (36, M, C) from
    ``transform_weights4``; z: the fused residual, shaped like y, or None. ``scratch`` holds the
    (v, mo) buffers reused between calls; ``packed``: see ``gemms``; ``ahead``: conv3x3's."""
    n_n, c_n = x.shape[:2]
    m_n, oh_n, ow_n = y.shape[1:]
    th_n, tw_n = (oh_n + 3) // 4, (ow_n + 3) // 4
    nt = n_n * th_n * tw_n
    key = (4, c_n, m_n, nt, x.dtype)
    if scratch.get("key") != key:  # rows apart by an odd number of cache lines (see _spaced)
        scratch.update(key=key, v=np.empty((36, _spaced(c_n * nt)), x.dtype),
                       mo=np.empty((36, _spaced(m_n * nt)), x.dtype))
    v, mo = scratch["v"], scratch["mo"]
    has_z = z is not None
    zz = z if has_z else y[:1, :1, :1, :1]
    in_args = (x, v, ph, pw, th_n, tw_n)
    out_args = (mo, y, bias, config.readonly(zz), has_z, th_n, tw_n, code, p0, p1)
    threads = config.current_threads()
    ahead = ahead if threads == 1 else 0
    if tiles_usable(n_n, threads, nt):  # one job, a run of tiles a thread (TILES)
        _by_tiles(x[0], u, y[0], (bias, config.readonly(zz[0]), has_z, th_n, tw_n, code, p0, p1), ph, pw,
                  th_n, tw_n, packed, threads, ahead)
        return
    if PHASED and threads > 1:  # one job of three phases (PHASED)
        config.run_phases([
            config.phase_for(_input_transform4, n_n * c_n, in_args,
                             config.phase_count(n_n * c_n, _TRANSFORM4_WORK * c_n * nt, threads)),
            _gemm_part(v, mo, u, m_n, c_n, nt, packed, True),
            config.phase_for(_output_transform4, n_n * m_n, out_args,
                             config.phase_count(n_n * m_n, _OUT4_WORK * m_n * nt, threads))])
        return
    config.parallel_for(_input_transform4, n_n * c_n, in_args, _TRANSFORM4_WORK * c_n * nt)
    gemms(v, mo, u, m_n, c_n, nt, packed, ahead)
    config.parallel_for(_output_transform4, n_n * m_n, out_args, _OUT4_WORK * m_n * nt)


# -- F(4x4, 3x3) at 2+ threads by tiles (issue 11, session 10) ------------------------------------
# Session 9's job of three phases split each phase on another axis: the input transform by input
# channels, the products by positions (runs of the 36), the output transform by output channels, so
# each phase read about half of what the one before had written on the other core (ResNet's 64@56
# layer: v and the products 1.8 MB each), and the threads met at two barriers a layer. Here a one-image
# layer is cut by tiles instead: each thread transforms its own run of tiles (every channel), runs the
# 36 products on those tile columns (every weight: 0.6 MB for 64x64, 2.4 MB for 128x128, read-only and
# shared) and writes their outputs, all in one shard, into buffers of its own (config.thread_buffer:
# the same memory layer after layer). One job of two shards, the caller's first (halves.run: it
# starts at once, the worker ~20 us later, so the caller's run is a little longer), no barrier, and
# no line written on one core is read on the other. False: the phases of session 9.
TILES = True
# A thread's run of tiles goes in blocks whose v and products take at most TILE_BYTES (0: the whole run
# in one block), so that a block's transform, products and output transform find them in the core's L2.
# At one thread too (SERIAL_TILES): on the AMD box (1 MiB L2) one thread ran ResNet's 64@56 layer in
# 1.25 ms in two blocks of 98 tiles against 1.59 ms for the whole map's three passes (blocks of 49 tiles:
# 1.31, of 25: 1.54: narrower products), the 128@28 layer 0.97 against 1.03 (bench_wino_tiles.py --serial).
TILE_BYTES = 2 << 20
SERIAL_TILES = True
# The products' weight prefetch at one thread (issue 11, session 16; docs/numba.md, "The weights' prefetch in the
# Winograd products"): > 0, a one-thread call's batched products on ftile's cols tiles (ResNet's 128@28 F(4x4) and
# 256@14 F(2x2) layers: 36 or 16 positions' panels, 2.4 and 4.2 MB, from L3 or memory at each panel's first tile)
# prefetch their weights' row k + AHEAD_ONE_THREAD into L1 at step k (ftile.batched_gemms' ``ahead``, as
# conv.COLS_AHEAD_ONE_THREAD for the 1x1 layers). The rows tiles and BLAS keep theirs. Read by a Conv at its first
# Winograd call (kept: nodes_ab.py can switch it). The prefetch changes no arithmetic: the same values either way.
# Off: on the Xeon (benchmarks/wino16_round.sh, nodes_ab.py, eight jobs side by side) ResNet-18's 128@28 and 256@14
# layers 1.13-1.22x per kind (ctl 1.00-1.06), ResNet-50's same shapes 1.00-1.03 (its variant session 0.92-0.98 on
# the untouched 1x1 layers); in turns 1t / a16 1.10 (ResNet-18) and 0.89 (ResNet-50), within the rounds' spread.
# A/B: kernels.winograd.AHEAD_ONE_THREAD=16
AHEAD_ONE_THREAD = 0


@jit_ordered
def _input_tiles4(x, v, ph, pw, th_n, tw_n, t0, t1, c0, c1):
    """``_input_transform4`` for tiles [t0, t1) of one image x (C, H, W), channels [c0, c1):
    v[k, c * (t1 - t0) + t - t0] = (B^T d B)[k] of tile t (row-major over th_n x tw_n). Only the
    input rows under those tiles are copied into the padded scratch. No ``reassoc`` (jit_ordered): a
    tile's values do not depend on the run of tiles it comes in (rnpair's blocks and chunks)."""
    c_n, h_n, w_n = x.shape
    nl = t1 - t0
    th_lo, th_hi = t0 // tw_n, (t1 - 1) // tw_n + 1
    pad = np.empty((4 * (th_hi - th_lo) + 2, 4 * tw_n + 2), x.dtype)
    rows = np.empty((6, 4 * tw_n + 2), x.dtype)
    for c in range(c0, c1):
        _pad_rows4(x[c], pad, 4 * th_lo, h_n, w_n, ph, pw)
        for th in range(th_lo, th_hi):
            lo, hi = max(0, t0 - th * tw_n), min(tw_n, t1 - th * tw_n)
            _tile_row4(pad, rows, 4 * (th - th_lo), lo, hi, v, c * nl + th * tw_n - t0)


@jit_parallel
def _output_tiles4(mo, y, bias, z, has_z, th_n, tw_n, code, p0, p1, t0, t1, m0, m1):
    """``_output_transform4`` for tiles [t0, t1) of one image y (M, OH, OW), output channels [m0, m1):
    mo[k, m * (t1 - t0) + t - t0]; z shaped like y (read only when ``has_z``)."""
    m_n, oh_n, ow_n = y.shape
    nl = t1 - t0
    th_lo, th_hi = t0 // tw_n, (t1 - 1) // tw_n + 1
    ob = np.empty((4, 4 * tw_n), y.dtype)
    s = np.empty((4, 6), y.dtype)
    for m in range(m0, m1):
        beta = bias[m]
        for th in range(th_lo, th_hi):
            lo, hi = max(0, t0 - th * tw_n), min(tw_n, t1 - th * tw_n)
            base = m * nl + th * tw_n - t0
            for tw in range(lo, hi):
                _out_tile4(mo, U64(base + tw), s, ob, U64(4 * tw), beta)
            for a in range(min(4, oh_n - 4 * th)):
                oh = 4 * th + a
                dst = y[m, oh]
                src = ob[a]
                if has_z:
                    zr = z[m, oh]
                    for p in range(4 * lo, min(ow_n, 4 * hi)):
                        dst[U64(p)] = _activate(src[U64(p)] + zr[U64(p)], code, p0, p1)
                else:
                    for p in range(4 * lo, min(ow_n, 4 * hi)):
                        dst[U64(p)] = _activate(src[U64(p)], code, p0, p1)


def tile_blocks(tiles: int, c_n: int, m_n: int, itemsize: int = 4, budget: int | None = None) -> int:
    """The blocks a run of ``tiles`` F(4x4) tiles goes in: v and the products (36 x (C + M) values a
    tile) under TILE_BYTES (or ``budget``) a block (0: one block), never more blocks than tiles (none empty)."""
    budget = TILE_BYTES if budget is None else budget
    if budget <= 0:
        return 1
    return max(1, min(tiles, -(-tiles * 36 * (c_n + m_n) * itemsize // budget)))


def _tiles_run(x0, u, y0, out_tail, ph, pw, th_n, tw_n, packed, ahead, t0, t1) -> None:
    """Tiles [t0, t1) of a one-image F(4x4, 3x3) layer on the calling thread: per block (TILE_BYTES),
    the input transform, the 36 products and the output transform, in the thread's
    own buffers (``out_tail``: ``_output_tiles4``'s arguments after y up to its tile range); ``ahead``:
    the cols tiles' weight prefetch (gemms')."""
    c_n, m_n = x0.shape[0], y0.shape[0]
    blocks = tile_blocks(t1 - t0, c_n, m_n, x0.itemsize)
    for i in range(blocks):
        b0, b1 = t0 + i * (t1 - t0) // blocks, t0 + (i + 1) * (t1 - t0) // blocks
        nl = b1 - b0
        lv, lm = _spaced(c_n * nl), _spaced(m_n * nl)
        v = config.thread_buffer("wino_v", 36 * lv, x0.dtype)[:36 * lv].reshape(36, lv)
        mo = config.thread_buffer("wino_mo", 36 * lm, x0.dtype)[:36 * lm].reshape(36, lm)
        _input_tiles4(x0, v, ph, pw, th_n, tw_n, b0, b1, 0, c_n)
        if packed is None:
            np.matmul(u, v[:, :c_n * nl].reshape(36, c_n, nl), out=mo[:, :m_n * nl].reshape(36, m_n, nl))
        else:
            kind, cols, wp, zeros = packed
            cols = ftile.cols_mode(kind, nl) if cols else 0  # the same panels (COLS_WIDTH) either way
            ftile.batched_gemms(kind, cols, wp, m_n, c_n, v, nl, mo, zeros, 1,
                                config.thread_buffer("ftile", ftile.scratch_size(kind, cols, nl), np.float32), 0, 36,
                                ahead)
        _output_tiles4(config.readonly(mo), y0, *out_tail, b0, b1, 0, m_n)


def _by_tiles(x0, u, y0, out_tail, ph, pw, th_n, tw_n, packed, threads, ahead: int = 0) -> None:
    """A one-image F(4x4, 3x3) layer as one job of a run of tiles a thread (TILES): at two threads
    the caller's run first, the worker's second (the caller's share a little larger:
    halves.caller_parts), and where the map has enough tiles a last run (TAIL_SHARE) for whichever
    finishes first; with the worker asleep and a small layer, all on the caller (halves.alone)."""
    nt = th_n * tw_n
    c_n, m_n = x0.shape[0], y0.shape[0]

    def part(t0, t1):
        return lambda: _tiles_run(x0, u, y0, out_tail, ph, pw, th_n, tw_n, packed, ahead, t0, t1)

    if threads <= 1:
        part(0, nt)()
        return
    if threads == 2 and halves.usable(2):
        flops = 72.0 * m_n * c_n * nt
        tail = int(nt * TAIL_SHARE) if nt * TAIL_SHARE >= TAIL_MIN_TILES else 0
        head = nt - tail
        cut = halves.caller_parts(head, flops * head / nt)
        if not tail:
            halves.run(part(0, cut), part(cut, nt), flops)
            return
        if halves.alone(flops):
            part(0, nt)()
            return
        runs = (part(0, cut), part(cut, head), part(head, nt))
        config.run_shards(lambda i: runs[i](), 3)
        return
    parts = max(1, min(threads, nt))
    config.run_shards(lambda i: part(i * nt // parts, (i + 1) * nt // parts)(), parts)


# At two threads a last run of TAIL_SHARE of the tiles, claimed by whichever thread finishes its own run
# first, where that is at least TAIL_MIN_TILES tiles (ResNet's 64@56 layers: 19 of 196; the 128@28 ones,
# 49 tiles, keep two runs). Two fixed runs left the caller waiting 120-275 us at the end of each 64@56
# layer on the Xeon (threads_alone.py --interleave, device call of session 10): the worker came 40-73 us
# after publication and ran its tiles ~20 % slower than the caller.
TAIL_SHARE = 0.1
TAIL_MIN_TILES = 16


def tiles_usable(n_n: int, threads: int, nt: int) -> bool:
    """Whether an F(4x4, 3x3) call takes the tile split (``TILES``): one image and a tile a thread, at
    2+ threads (at one: ``SERIAL_TILES``)."""
    return TILES and n_n == 1 and nt >= threads and (threads > 1 or SERIAL_TILES)
