"""Vector loads and stores of the memory-bound kernels and the GEMM/conv epilogue (issue 12,
session 5): 4 elements per access (float4, or 4 halves through vloada_half4/vstorea_half4), the
same results as one element at a time, against NumPy and the reference kernels."""
from __future__ import annotations

import kernelkit as kk
import numpy as np
import pytest
from kernelkit.testing import assert_close, run_single_op, single_op_model

DTYPES = [np.float32, np.float16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tile", [0, 1])
def test_vector_epilogue_stores_match_scalar_stores(device, rng, monkeypatch, dtype, tile):
    """A GEMM through a VEC_LDS tile (plain and VEC_GLD) with bias per column, alpha/beta and Relu:
    the epilogue's 4-column vector stores (compiled in for GPUs; here asked for on the CPU device)
    give the same bits as scalar stores, and match NumPy."""
    from kernelkit_opencl.kernels import gemm
    from kernelkit_opencl.kernels.gemm import GemmCall, _launch

    monkeypatch.setattr(gemm, "VECTOR_STORES_ON_CPU", True)  # GPU programs only, unless asked
    p = [gemm.GPU_TILES[6], gemm.GPU_LARGE[3]][tile]  # the small tiles: PoCL compiles them fast
    M, N, K = 36, 44, 28  # ldc and the batch stride multiples of 4: the vector stores apply
    a = rng.standard_normal((2, M, K)).astype(dtype)
    b = rng.standard_normal((K, N)).astype(dtype)
    bias = rng.standard_normal(N).astype(dtype)
    A, B, C = device.upload(a), device.upload(b), device.upload(bias)
    call = GemmCall(M, N, K, K, N, N, batch=2, za=M * K, zc=M * N, bias_sn=1, alpha=0.5, beta=2.0,
                    activation="Relu")
    got = {}
    for vec in (True, False):
        monkeypatch.setattr(gemm, "VECTOR_STORES", {"float32": vec, "float16": vec})
        out = device.empty((2, M, N), dtype)
        _launch(device, call, p, A, B, C, out)
        got[vec] = device.download(out)
    np.testing.assert_array_equal(got[True], got[False])
    want = 0.5 * (a.astype(np.float32) @ b.astype(np.float32)) + 2.0 * bias.astype(np.float32)
    assert_close(got[True], np.maximum(want, 0).astype(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("out_hw", [(6, 6), (5, 5)])
def test_conv_epilogue_vector_stores_with_residual(device, rng, monkeypatch, dtype, out_hw):
    """Implicit-GEMM Conv with bias, the fused residual Z and Relu through a local-memory tile: an
    output image of 36 pixels takes the vector stores (4 pixels never cross an image), one of 25
    the scalar ones; both equal the scalar-store result bit for bit and match the reference."""
    from kernelkit_opencl.kernels import conv, gemm

    monkeypatch.setattr(gemm, "VECTOR_STORES_ON_CPU", True)
    monkeypatch.setattr(gemm, "_candidates", lambda dev, call: [gemm.GPU_LARGE[3]])
    x = rng.standard_normal((3, 8, *out_hw)).astype(dtype)
    w = (rng.standard_normal((12, 8, 3, 3)) * 0.3).astype(dtype)
    b = rng.standard_normal(12).astype(dtype)
    z = rng.standard_normal((3, 12, *out_hw)).astype(dtype)
    got = {}
    for vec in (True, False):
        monkeypatch.setattr(gemm, "VECTOR_STORES", {"float32": vec, "float16": vec})
        y = conv.conv(device.upload(x), device.upload(w), device.upload(b), device.upload(z),
                      pads=(1, 1, 1, 1), activation="Relu")
        got[vec] = device.download(y)
    np.testing.assert_array_equal(got[True], got[False])
    conv_out = run_single_op("Conv", [x, w, b], {"pads": [1, 1, 1, 1]})[0]
    want = np.maximum(conv_out.astype(np.float32) + z.astype(np.float32), 0).astype(dtype)
    assert_close(got[True], want)


DEPTHWISE = [
    ((2, 6, 11, 13), (6, 1, 3, 3), {"pads": [1, 1, 1, 1]}),  # OW 13: scalar stores, ragged groups
    ((2, 4, 8, 16), (4, 1, 3, 3), {"pads": [1, 1, 1, 1], "strides": [1, 2]}),  # OW 8: vector stores
    ((1, 4, 9, 8), (8, 1, 3, 3), {"pads": [1, 0, 2, 1], "strides": [2, 2]}),  # channel multiplier 2
    ((1, 3, 10, 12), (3, 1, 5, 3), {"pads": [2, 1, 2, 1], "dilations": [1, 2], "activation": "Clip",
                                    "activation_params": [0.0, 6.0]}),
    ((1, 2, 4, 40), (2, 1, 1, 9), {"pads": [0, 4, 0, 4], "dilations": [1, 4]}),  # 36-wide window: GEMM
]


@pytest.mark.parametrize("dw_vec", ["4", "8"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(DEPTHWISE)))
def test_depthwise_rows_match_reference(monkeypatch, dtype, case, dw_vec):
    """The depthwise kernel (4 or 8 outputs of a row per work-item, the row's inputs in registers,
    padding taps skipped) against the reference: strides, pads, dilation, channel multiplier,
    ragged rows, a fused activation; a window wider than 32 runs as an implicit GEMM."""
    monkeypatch.setenv("KERNELKIT_OPENCL_DW_VEC", dw_vec)
    rng = np.random.default_rng(case)
    xs, ws, attrs = DEPTHWISE[case]
    attrs = dict(attrs, group=xs[1])
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal(ws).astype(dtype)
    b = rng.standard_normal(ws[0]).astype(dtype)
    sess = kk.Session(single_op_model("Conv", [x, w, b], attrs), device="gpu", fallback=False,
                      options={"opencl_tune": False})
    got = sess.run(None, {"in0": x, "in1": w, "in2": b})[0]
    assert_close(got, run_single_op("Conv", [x, w, b], attrs)[0])


def test_depthwise_with_residual_and_special_values(device):
    """The fused residual of a depthwise Conv, NaN and inf in the input: NaN reaches exactly the
    outputs whose window holds it, as one output per work-item did (padding taps are skipped)."""
    from kernelkit_opencl.kernels import conv

    rng = np.random.default_rng(5)
    for dtype in DTYPES:
        x = rng.standard_normal((1, 3, 7, 12)).astype(dtype)
        x[0, 0, 3, 5] = np.nan
        x[0, 1, 0, 0] = np.inf
        w = rng.standard_normal((3, 1, 3, 3)).astype(dtype)
        z = rng.standard_normal((1, 3, 7, 12)).astype(dtype)
        y = device.download(conv.conv(device.upload(x), device.upload(w), None, device.upload(z), group=3,
                                      pads=(1, 1, 1, 1)))
        want = run_single_op("Conv", [x, w], {"group": 3, "pads": [1, 1, 1, 1]})[0].astype(np.float32)
        want = (want + z.astype(np.float32)).astype(dtype)
        np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
        assert_close(np.where(np.isnan(want), 0, y), np.where(np.isnan(want), 0, want))


@pytest.mark.parametrize("dtype", DTYPES)
def test_elementwise_vector_bodies_and_tails(dtype):
    """Unary, binary (same shapes, either side a scalar, broadcast), Clip and the float16 Casts at
    sizes around multiples of 4 (vector body, scalar tail), NaN and inf included, against the
    reference kernels."""
    rng = np.random.default_rng(3)
    for n in (3, 4, 13):  # all tail, one vector, vectors and a tail
        x = rng.standard_normal(n).astype(dtype)
        y = rng.standard_normal(n).astype(dtype)
        x[0] = np.nan
        if n > 2:
            x[2] = -np.inf
        cases = [("Relu", [x], {}), ("Max", [x, y], {}), ("Mul", [x, y[:1]], {}), ("Sub", [x[:1], y], {}),
                 ("Clip", [x, np.array(-0.5, dtype), np.array(0.7, dtype)], {})]
        if dtype == np.float16:
            cases.append(("Cast", [x], {"to": 1}))
        else:
            cases.append(("Cast", [x], {"to": 10}))
        for op, inputs, attrs in cases:
            got = run_single_op(op, inputs, attrs, device="gpu", fallback=False)[0]
            want = run_single_op(op, inputs, attrs)[0]
            assert_close(got, want, err_msg=f"{op} n={n} {np.dtype(dtype).name}")
    a = rng.standard_normal((3, 5, 4)).astype(dtype)  # general broadcast: mode 3, 4 per work-item
    c = rng.standard_normal((5, 1)).astype(dtype)
    got = run_single_op("Add", [a, c], {}, device="gpu", fallback=False)[0]
    assert_close(got, run_single_op("Add", [a, c], {})[0])


@pytest.mark.parametrize("index", range(2))
def test_wide_half_loads_match_scalar_loads(device, rng, monkeypatch, index):
    """HALF_VEC 3 (one 64-bit load converted by vload_half4 from a private copy) gives the bits of
    scalar vload_half (level 0) in every transpose layout, with split-K, and all 65536 half values
    pass through it unchanged."""
    from kernelkit_opencl.kernels import gemm
    from kernelkit_opencl.kernels.gemm import GemmCall, _launch

    p = [gemm.GPU_LARGE[0], dict(gemm.GPU_LARGE[2], SPLIT_K=3)][index]
    for (ta, tb), (M, N, K) in zip([(0, 0), (0, 1), (1, 0), (1, 1)], [(36, 44, 28)] * 3 + [(37, 44, 29)]):
        a = rng.standard_normal((2, K, M) if ta else (2, M, K)).astype(np.float16)
        b = rng.standard_normal((N, K) if tb else (K, N)).astype(np.float16)
        A, B = device.upload(a), device.upload(b)
        call = GemmCall(M, N, K, M if ta else K, K if tb else N, N, bool(ta), bool(tb), batch=2, za=M * K, zc=M * N)
        got = {}
        for vec in ("3", "0"):
            monkeypatch.setenv("KERNELKIT_OPENCL_HALF_VEC", vec)
            out = device.empty((2, M, N), np.float16)
            _launch(device, call, p, A, B, None, out)
            got[vec] = device.download(out)
        np.testing.assert_array_equal(got["3"], got["0"], err_msg=f"{p} ta={ta} tb={tb}")
    monkeypatch.setenv("KERNELKIT_OPENCL_HALF_VEC", "3")
    a = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(1, -1)
    out = device.empty((a.shape[1], 1), np.float16)
    _launch(device, GemmCall(a.shape[1], 1, 1, a.shape[1], 1, 1, trans_a=True), gemm.GPU_LARGE[0],
            device.upload(a), device.upload(np.ones((1, 1), np.float16)), None, out)
    np.testing.assert_array_equal(device.download(out)[:, 0], a[0])  # NaN where NaN


@pytest.mark.parametrize("wide", ["1", "0"])
def test_wide_half_elementwise(monkeypatch, wide):
    """HALF_WIDE elementwise programs (4 halves as one 64-bit access, the default) and the
    vloada_half4 ones: every half value through Identity unchanged, and Add/Clip/the Casts against
    the reference."""
    monkeypatch.setenv("KERNELKIT_OPENCL_HALF_WIDE", wide)
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got = run_single_op("Identity", [x], {}, device="gpu", fallback=False)[0]
    np.testing.assert_array_equal(got, x)  # NaN where NaN
    f = run_single_op("Cast", [x], {"to": 1}, device="gpu", fallback=False)[0]
    np.testing.assert_array_equal(f, x.astype(np.float32))
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal(1027).astype(np.float16), rng.standard_normal(1027).astype(np.float16)
    for op, inputs in [("Add", [a, b]), ("Clip", [a, np.array(-0.5, np.float16), np.array(0.7, np.float16)])]:
        got = run_single_op(op, inputs, {}, device="gpu", fallback=False)[0]
        assert_close(got, run_single_op(op, inputs, {})[0], err_msg=op)
