"""GEMM: MatMul and Gemm, and the launcher conv.py uses for implicit-GEMM convolution.

One kernel (``gemm.cl``), specialized by tile defines. Tile parameters come from
``tuning.choose``: searched once per device and shape class when tuning is on (default on GPUs),
persisted in the tuned-parameter file, else the device type's default.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from kernelkit import ShapeError, register_kernel

from .. import tuning
from ._common import activation, launch_1d, source

# candidates, the first being the default; L = local-memory tiles (GPUs), D = direct (CPUs)
GPU_TILES = [
    dict(TM=8, TN=8, WM=16, WN=16, BK=16, USE_LOCAL=1, VEC_LDS=1),
    dict(TM=8, TN=8, WM=16, WN=16, BK=8, USE_LOCAL=1, VEC_LDS=1),
    dict(TM=8, TN=8, WM=16, WN=16, BK=32, USE_LOCAL=1, VEC_LDS=1),
    dict(TM=8, TN=4, WM=16, WN=16, BK=16, USE_LOCAL=1, VEC_LDS=1),
    dict(TM=4, TN=8, WM=16, WN=16, BK=16, USE_LOCAL=1, VEC_LDS=1),
    dict(TM=8, TN=8, WM=16, WN=16, BK=16, USE_LOCAL=1, VEC_LDS=0),
    dict(TM=4, TN=4, WM=16, WN=16, BK=16, USE_LOCAL=1, VEC_LDS=1),
]
GPU_TILES += [dict(p, PREFETCH=1) for p in (GPU_TILES[0], GPU_TILES[1], GPU_TILES[3], GPU_TILES[4])]
# double-buffered local tiles (one barrier per k-step) on top of the prefetch
GPU_TILES += [dict(p, DBUF=1) for p in GPU_TILES[7:11]]
# 128-bit global loads on top of the prefetch (and double-buffered) tiles: large shapes (issue 12)
GPU_LARGE = [dict(p, VEC_GLD=1) for p in GPU_TILES[7:15]]
# NVIDIA only: the same tiles built with ptxas capped at 128 registers per work-item (two 256-wide
# work-groups per SM), a build option rather than a define (``REGS``)
GPU_NVIDIA = [dict(GPU_LARGE[i], REGS=128) for i in (0, 4, 5)]
GPU_SMALL = [dict(TM=4, TN=4, WM=16, WN=16, BK=16, USE_LOCAL=1, VEC_LDS=1),
             dict(TM=2, TN=2, WM=16, WN=16, BK=16, USE_LOCAL=1, VEC_LDS=0)]
SPLITS = (2, 4, 8, 16)
CPU_TILES = [
    dict(TM=8, TN=8, WM=4, WN=4, BK=1, USE_LOCAL=0, VEC_LDS=0),
    dict(TM=4, TN=8, WM=4, WN=4, BK=1, USE_LOCAL=0, VEC_LDS=0),
    dict(TM=8, TN=8, WM=2, WN=4, BK=1, USE_LOCAL=0, VEC_LDS=0),
]


@dataclass(frozen=True)
class GemmCall:
    """One launch of gemm.cl: C[z] = ACT(alpha * op(A[z]) @ op(B[z]) + beta * bias[z]).

    Leading dimensions and z-strides are in elements; ``conv`` (the geometry buffer of conv.py)
    turns B into the implicit im2col matrix of an NCHW image."""

    M: int
    N: int
    K: int
    lda: int
    ldb: int
    ldc: int
    trans_a: bool = False
    trans_b: bool = False
    batch: int = 1
    za: int = 0
    zb: int = 0
    zc: int = 0
    bias_sm: int = 0
    bias_sn: int = 0
    zbias: int = 0
    alpha: float = 1.0
    beta: float = 1.0
    activation: str = ""
    activation_params: tuple = ()
    conv: object = None


def _bucket(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def _candidates(dev, call: GemmCall) -> list[dict]:
    if not dev.platform.is_gpu:
        return CPU_TILES
    small = call.M * call.N * call.batch < 256 * 256 or min(call.M, call.N) < 64
    base = GPU_SMALL + GPU_TILES if small else GPU_TILES + GPU_LARGE + (GPU_NVIDIA if _nvidia(dev) else [])
    # too few 128x128 tiles to fill the device: also try splitting k over the grid (split-K); with
    # less than one wave of tiles (ResNet-18 batch 1, the late 7x7 layers) the splits come first,
    # so that a bounded search meets them before its budget runs out
    tiles = -(-call.M // 128) * -(-call.N // 128) * call.batch
    units = dev.cl_device.max_compute_units
    splits = [s for s in SPLITS if tiles * s <= 4 * units and call.K // s >= 128]
    split_tiles = (GPU_TILES[0], GPU_TILES[7], GPU_TILES[11], GPU_SMALL[0], GPU_LARGE[0])
    split = [dict(p, SPLIT_K=s) for s in splits for p in split_tiles]
    return split + base if tiles < units else base + split


def _nvidia(dev) -> bool:
    return "nvidia" in dev.cl_device.vendor.lower()


# The half loads of gemm.cl per device (the compile-time switch HALF_VEC): 0 scalar vload_half;
# 1 VEC_GLD tiles read 4 halves at a time with vloada_half4 (float4; PoCL 3.0 builds it,
# though it aborts on half *vector types*, MEASURED.md: tested in test_programs.py); 2 the same
# loads as ushort / uint2 bits widened with integer operations (no conversion instruction), every
# half load of the program; 3 (default, session 5) the VEC_GLD loads as one 64-bit integer load converted
# by vload_half4 from a private copy (storage.cl's vld4_wide). A device whose name contains a key
# here gets that level; KERNELKIT_OPENCL_HALF_VEC=0/1/2/3 forces one.
HALF_VEC_BY_DEVICE: dict[str, int] = {}
# Level 3 by default (session 5): NVIDIA's compiler turns vloada_half4 into four 16-bit loads (PTX
# of the H100 run: ld.global.u16 only), level 3 into one 64-bit load; float16 ResNet-50 b32
# 15.14 vs 15.61 ms, MobileNetV2 3.10 vs 3.12, transformer 1.71 vs 1.75 (docs/opencl.md).
HALF_VEC_DEFAULT = 3

# The epilogue's vector stores per storage dtype (flags bit 5: 4 columns of C per float4 /
# vstorea_half4 store in the VEC_LDS tiles, issue 12 session 5); False keeps every store scalar
# (tests compare the two). Measured on the H100 (docs/opencl.md, session 5): fp32 ResNet-50 b32
# 12.98 vs 13.57 ms with them, MobileNetV2 and the transformer within 2.5 %; float16 slower with
# them on all three (3.19 vs 3.13, 1.86 vs 1.74, 16.17 vs 15.73 ms), hence off for half.
VECTOR_STORES = {"float32": True, "float16": False}
# Only GPU programs get them (the VEC_ST define): PoCL's compile of the large tiles with the vector
# epilogue took minutes; tests set this to try them on a CPU device with small tiles.
VECTOR_STORES_ON_CPU = False


def vector_stores(dev, half: bool) -> bool:
    """Whether gemm.cl programs for ``dev`` and this storage dtype compile the vector epilogue."""
    on_device = dev.platform.is_gpu or VECTOR_STORES_ON_CPU
    return bool(on_device and VECTOR_STORES.get("float16" if half else "float32", False))


def half_vector_loads(dev) -> int:
    """The HALF_VEC level of gemm.cl's half-storage programs on ``dev`` (0, 1, 2 or 3)."""
    forced = os.environ.get("KERNELKIT_OPENCL_HALF_VEC", "")
    if forced in ("0", "1", "2", "3"):
        return int(forced)
    name = dev.cl_device.name.lower()
    return next((v for k, v in HALF_VEC_BY_DEVICE.items() if k.lower() in name), HALF_VEC_DEFAULT)


def program_defines(params: dict) -> dict:
    """The tile defines of ``params`` (split-K is a run-time argument: no define, no extra program;
    ``REGS`` is a build option)."""
    return {k: v for k, v in params.items() if k not in ("SPLIT_K", "REGS")}


def build_options(params: dict) -> tuple:
    """Extra build options of ``params``: ``REGS`` caps ptxas' registers (NVIDIA's compiler)."""
    return (f"-cl-nv-maxrregcount={int(params['REGS'])}",) if params.get("REGS") else ()


def _define_act(call: GemmCall) -> tuple[str, tuple]:
    """The activation a program is built with: Relu is a run-time flag (bit 2), so a tile's plain
    and Relu launches share one program (fewer builds at a cold start)."""
    return ("", ()) if call.activation == "Relu" else (call.activation, tuple(call.activation_params))


def _kernel(dev, call: GemmCall, params: dict, name: str = "gemm", half: bool = False):
    """One program per (tile, activation other than Relu, layout): bias, residual, Relu and split-K
    are arguments."""
    tile = program_defines(params)
    options = build_options(params)
    act, act_params = _define_act(call)
    half_vec = half_vector_loads(dev) if half else 0
    if half_vec in (1, 3) and not tile.get("VEC_GLD"):  # scalar loads either way: one program
        half_vec = 0
    vec_st = int(name == "gemm" and bool(tile.get("USE_LOCAL")) and bool(tile.get("VEC_LDS"))
                 and vector_stores(dev, half))
    key = (name, act, act_params, tuple(sorted(tile.items())), options, call.trans_a, call.trans_b,
           call.conv is not None, half, half_vec, vec_st)

    def make():
        act_src, defines = activation(act, act_params)
        defines = dict(defines, **tile, TRANS_A=int(call.trans_a), TRANS_B=int(call.trans_b))
        if call.conv is not None:
            defines["CONV"] = 1
        if half:
            defines["STORAGE_HALF"] = 1
        if half_vec:
            defines["HALF_VEC"] = half_vec
        if vec_st:
            defines["VEC_ST"] = 1
        return dev.kernel(act_src + source("gemm.cl"), name, defines, options)

    return dev.memo(key, make)


def run_gemm(dev, call: GemmCall, a, b, bias, out, z=None):
    """Enqueue ``call`` on device tensors (``bias`` and the residual ``z``, laid out as ``out``,
    may be None); returns the event."""
    shape_class = (call.conv is not None, call.trans_a, call.trans_b, _bucket(call.M), _bucket(call.N),
                   _bucket(call.K), _bucket(call.batch), out.dtype == np.float16)
    params = dev.memo(("gemm-tiles",) + shape_class, lambda: _tiles(dev, call, shape_class, a, b, bias, out))
    return _launch(dev, call, params, a, b, bias, out, z)


def _tiles(dev, call: GemmCall, shape_class, a, b, bias, out) -> dict:
    conv, ta, tb, m, n, k, z, half = shape_class
    kind = f"gemm{'-half' if half else ''}|{'conv' if conv else 'mm'}"
    key = f"{dev.platform.identity}|{kind}|{int(ta)}{int(tb)}|{m}x{n}x{k}x{z}"
    cands = _candidates(dev, call)
    if conv:  # local-memory conv tiles need NT % BN == 0
        cands = [p for p in cands if not p["USE_LOCAL"] or (p["WM"] * p["WN"]) % (p["TN"] * p["WN"]) == 0]
    # the search times every candidate with a plain epilogue: its programs serve every search of
    # this layout (activations cost nothing next to the k loop), so a session compiles each
    # candidate tile once, not once per activation
    plain = _replace(call, activation="", activation_params=())

    def build(p):  # on tuning's thread pool; waits, so that the search times built programs only
        _kernel(dev, plain, p, half=half).wait_built()
        if p.get("SPLIT_K", 1) > 1:
            _kernel(dev, plain, p, "splitk_reduce", half=half).wait_built()

    # one timing = enough launches for ~10 GFLOP (short kernels: launch overhead and timer noise
    # would otherwise decide), waited for once
    reps = max(1, min(16, int(1e10 // max(2 * call.M * call.N * call.K * call.batch, 1))))

    def run(p):  # the kernels' device time (profiling events), not the host's enqueue + wait
        def launches():
            for _ in range(reps):
                _launch(dev, plain, p, a, b, bias, out)

        return dev.time_launches(launches)

    # a stored split-K choice made for another shape of this class is still a known tile
    allowed = cands + [dict(p, SPLIT_K=s) for s in SPLITS for p in cands if p["USE_LOCAL"] and "SPLIT_K" not in p]
    allowed += [p for p in GPU_LARGE + (GPU_NVIDIA if _nvidia(dev) else []) if p not in allowed]
    entry = key.split("|", 1)[1]
    if half and os.environ.get("KERNELKIT_OPENCL_HALF_TABLE") == "fp32":  # A/B: fp32's shipped tile
        entry = entry.replace("gemm-half|", "gemm|", 1)
    return tuning.choose(key, cands, run, dev.tune, build=build, table=(dev.platform.cl_device.name, entry),
                         allowed=allowed)


def _launch(dev, call: GemmCall, params: dict, a, b, bias, out, z=None):
    bm, bn = params["TM"] * params["WM"], params["TN"] * params["WN"]
    splits = params.get("SPLIT_K", 1)
    gws = (-(-call.N // bn) * params["WN"], -(-call.M // bm) * params["WM"], call.batch * splits)
    lws = (params["WN"], params["WM"], 1)
    has_bias = bias is not None
    ws = out if splits == 1 else dev.empty((call.batch * splits, call.M, call.N), np.float32)
    has_z = z is not None and splits == 1
    relu = int(call.activation == "Relu") << 2
    # bits 3, 4: A / B may be read as 4-element vectors (VEC_GLD tiles; 16 bytes of float, 8 of
    # half): leading dimension, batch stride and offset multiples of 4 elements
    vec = (int(call.lda % 4 == 0 and call.za % 4 == 0 and a.offset % 4 == 0) << 3
           | int(call.conv is None and call.ldb % 4 == 0 and call.zb % 4 == 0 and b.offset % 4 == 0) << 4)
    # bit 5: C (and Z, laid out as C) may be written 4 columns at a time (VEC_LDS tiles): row
    # length and batch stride multiples of 4 (convolutions: OH*OW, so that 4 pixels stay in one
    # image), offsets too
    if call.conv is not None:
        hw = out.shape[2] * out.shape[3] if out.ndim == 4 else 0
        cvec = hw % 4 == 0 and hw > 0
    else:
        cvec = call.ldc % 4 == 0 and call.zc % 4 == 0
    cvec = (vector_stores(dev, out.dtype == np.float16) and cvec and out.offset % 4 == 0
            and (not has_z or z.offset % 4 == 0))
    flags = int(has_bias) | int(has_z) << 1 | relu | vec | int(cvec) << 5
    args = [a.buffer, b.buffer, (bias if has_bias else out).buffer, out.buffer,
            *(np.int32(v) for v in (call.M, call.N, call.K, call.lda, call.ldb, call.ldc, call.bias_sm, call.bias_sn)),
            np.float32(call.alpha), np.float32(call.beta),
            *(np.int32(v) for v in (call.za, call.zb, call.zc, call.zbias, flags, splits)),
            ws.buffer, (z if has_z else out).buffer]
    if call.conv is not None:
        args.append(call.conv)
    label = f"{'conv' if call.conv is not None else 'gemm'} {call.M}x{call.N}x{call.K}" + (
        f" z{call.batch}" if call.batch > 1 else "") + (f" split{splits}" if splits > 1 else "") + (
        " +z" if z is not None else "")
    half = out.dtype == np.float16
    kernel = _kernel(dev, call, params, half=half)
    ev = dev.launch(kernel, gws, lws, args, [a, b, bias, z], [ws], label)
    if splits == 1:
        return ev
    total = call.batch * call.M * call.N
    flags = int(has_bias) | int(z is not None) << 1 | relu
    args = [ws.buffer, (bias if has_bias else out).buffer, out.buffer,
            *(np.int32(v) for v in (call.M, call.N, call.ldc, call.bias_sm, call.bias_sn)),
            np.float32(call.alpha), np.float32(call.beta),
            *(np.int32(v) for v in (call.zc, call.zbias, total, flags, splits)),
            (z if z is not None else out).buffer]
    if call.conv is not None:
        args.append(call.conv)
    reduce = _kernel(dev, call, params, "splitk_reduce", half=half)
    return launch_1d(dev, reduce, total, args, [ws, bias, z], [out], "splitk_reduce")


# -- ops -------------------------------------------------------------------------------------------
def _batch_offsets(shape_a, shape_b, batch):
    """Per-batch element offsets of A and B (contiguous, broadcast over ``batch`` dims)."""
    def offsets(shape):
        mat = int(np.prod(shape[-2:]))
        lead = (1,) * (len(batch) - len(shape[:-2])) + tuple(shape[:-2])
        idx = np.arange(int(np.prod(lead, dtype=np.int64)), dtype=np.int64).reshape(lead) * mat
        return np.broadcast_to(idx, batch).ravel()

    return offsets(shape_a), offsets(shape_b)


def matmul(x, y, *, activation: str = "", activation_params=()):
    """MatMul (NumPy semantics: 1-D promotion, broadcast batch dims) with a fused activation."""
    dev = x.device
    xs, ys = list(x.shape), list(y.shape)
    if x.ndim == 0 or y.ndim == 0:
        raise ShapeError("MatMul: inputs must have rank >= 1")
    xs2 = [1] + xs if x.ndim == 1 else xs
    ys2 = ys + [1] if y.ndim == 1 else ys
    M, K, K2, N = xs2[-2], xs2[-1], ys2[-2], ys2[-1]
    if K != K2:
        raise ShapeError(f"MatMul: inner dimensions differ: {tuple(xs)} @ {tuple(ys)}")
    batch = tuple(np.broadcast_shapes(tuple(xs2[:-2]), tuple(ys2[:-2])))
    out_shape = list(batch) + ([M] if x.ndim > 1 else []) + ([N] if y.ndim > 1 else [])
    out = dev.empty(out_shape, x.dtype)
    nb = int(np.prod(batch, dtype=np.int64))
    if out.size == 0:
        return out
    if K == 0:
        raise ShapeError("MatMul with K == 0 is not supported on the OpenCL device")
    offa, offb = _batch_offsets(xs2, ys2, batch)
    za = int(offa[1] - offa[0]) if nb > 1 else 0
    zb = int(offb[1] - offb[0]) if nb > 1 else 0
    uniform = nb <= 1 or (np.all(np.diff(offa) == za) and np.all(np.diff(offb) == zb))
    base = GemmCall(M, N, K, K, N, N, activation=activation, activation_params=tuple(activation_params))
    if uniform:
        run_gemm(dev, _replace(base, batch=max(nb, 1), za=za, zb=zb, zc=M * N), x, y, None, out)
        return out
    # irregular broadcast (e.g. [2,1,M,K] @ [1,3,K,N]): materialize both operands over the batch
    from .layout import expand

    xe = expand(x.view(xs2), tuple(batch) + (M, K))
    ye = expand(y.view(ys2), tuple(batch) + (K, N))
    run_gemm(dev, _replace(base, batch=nb, za=M * K, zb=K * N, zc=M * N), xe, ye, None, out)
    return out


def _replace(call: GemmCall, **kw) -> GemmCall:
    from dataclasses import replace

    return replace(call, **kw)


def gemm(a, b, c=None, *, alpha: float = 1.0, beta: float = 1.0, transA: int = 0, transB: int = 0,
         activation: str = "", activation_params=()):
    """Gemm: ACT(alpha * A' @ B' + beta * C) with C broadcast to (M, N)."""
    dev = a.device
    if a.ndim != 2 or b.ndim != 2:
        raise ShapeError(f"Gemm: A and B must be 2-D, got {a.shape} and {b.shape}")
    M, K = (a.shape[1], a.shape[0]) if transA else a.shape
    K2, N = (b.shape[1], b.shape[0]) if transB else b.shape
    if K != K2:
        raise ShapeError(f"Gemm: inner dimensions differ: A{a.shape} (transA={transA}) B{b.shape} (transB={transB})")
    out = dev.empty((M, N), a.dtype)
    if out.size == 0:
        return out
    sm = sn = 0
    if c is not None:
        cs = (1,) * (2 - c.ndim) + tuple(c.shape)
        if any(d not in (1, w) for d, w in zip(cs, (M, N))):
            raise ShapeError(f"Gemm: C of shape {c.shape} does not broadcast to ({M}, {N})")
        sm = cs[1] if cs[0] != 1 else 0
        sn = 1 if cs[1] != 1 else 0
    call = GemmCall(M, N, K, a.shape[1], b.shape[1], N, bool(transA), bool(transB), bias_sm=sm, bias_sn=sn,
                    alpha=alpha, beta=beta, activation=activation, activation_params=tuple(activation_params))
    run_gemm(dev, call, a, b, c, out)
    return out


def register() -> None:
    for dtype in ("float32", "float16"):  # float16: half storage, float arithmetic (vload_half)
        register_kernel("MatMul", device="gpu", vendor="opencl", dtype=dtype)(matmul)
        register_kernel("Gemm", device="gpu", vendor="opencl", dtype=dtype)(gemm)
