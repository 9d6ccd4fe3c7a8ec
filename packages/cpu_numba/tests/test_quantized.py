"""The numba integer products are exact: float32 BLAS on K-blocks whose partial sums stay below 2**24,
and the integer dot products of products with few rows (gemv_int8)."""
from __future__ import annotations

import numpy as np
import pytest
from kernelkit.testing import run_single_op
from kernelkit_numba.kernels.qgemm import EXACT, exact_blocks


def test_exact_blocks_bound_every_partial_sum():
    rng = np.random.default_rng(0)
    rows = rng.integers(-128, 128, (16, 5000)).astype(np.float32)
    blocks = exact_blocks(rows, 255)
    assert blocks[0][0] == 0 and blocks[-1][1] == 5000 and len(blocks) > 1
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    for k0, k1 in blocks:
        assert np.abs(rows[:, k0:k1]).sum(axis=1).max() * 255 <= EXACT
    assert exact_blocks(np.zeros((3, 7), np.float32), 255) == [(0, 7)]


@pytest.mark.parametrize("rows", [3, 12], ids=["dot-products", "blas"])
@pytest.mark.parametrize("adt", ["uint8", "int8"])
def test_extreme_operands_are_exact(adt, rows):
    """Every product at its largest magnitude and the same sign: the worst case for float32."""
    info = np.iinfo(adt)
    a = np.full((rows, 4096), info.max if adt == "uint8" else info.min, adt)
    b = np.full((4096, 5), -128, np.int8)
    zp = np.array(0 if adt == "uint8" else 0, adt)
    (got,) = run_single_op("MatMulInteger", [a, b, zp, np.int8(0)], vendors=["numba"], fallback=False, passes=False,
                           constants=(1,))
    want = a.astype(np.int64) @ b.astype(np.int64)
    np.testing.assert_array_equal(got, want.astype(np.int32))


@pytest.mark.parametrize("rows", [1, 5, 40])
def test_zero_points_come_out_exactly(rows):
    """MatMulIntegerToFloat with both zero points and per-column ones: the dot-product path takes them
    out afterwards (column and row sums), the BLAS path before; both equal the int64 product."""
    rng = np.random.default_rng(rows)
    a = rng.integers(0, 256, (rows, 1031)).astype(np.uint8)
    a[0, :] = 255
    b = rng.integers(-128, 128, (1031, 7)).astype(np.int8)
    b[:, 0] = -128
    azp, bzp = np.uint8(3), rng.integers(-128, 128, 7).astype(np.int8)
    one = np.float32(1)
    (got,) = run_single_op("MatMulIntegerToFloat", [a, b, one, one, azp, bzp], domain="com.microsoft",
                           vendors=["numba"], fallback=False, passes=False, constants=(1,))
    want = (a.astype(np.int64) - 3) @ (b.astype(np.int64) - bzp.astype(np.int64))
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_dot_product_shards_cover_their_columns():
    """gemv_int8 over column shards [lo, hi) that are not multiples of its four-column step: each
    shard writes exactly its columns, together the exact product with both zero points out."""
    from kernelkit_numba.kernels.qgemm import GemvWeights, gemv_int8

    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, (2, 300)).astype(np.int8)
    b = rng.integers(0, 256, (300, 11)).astype(np.uint8)
    bzp = rng.integers(0, 256, 11).astype(np.uint8)
    w = GemvWeights(b)
    out = np.full((2, 11), 7, np.int32)
    for lo, hi in ((0, 5), (5, 6), (6, 11)):
        gemv_int8(a, w.bt, np.int64(-9), w.col_sums, bzp, out, lo, hi)
    want = (a.astype(np.int64) + 9) @ (b.astype(np.int64) - bzp.astype(np.int64))
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("k", [1, 3])
def test_qlinearconv_tiles_on_two_threads_equal_the_reference(k):
    """A QLinearConv large enough to be cut into GEMM tiles on two threads (each tile one BLAS call,
    then requantized) gives the reference's int8 output exactly."""
    rng = np.random.default_rng(k)
    x = rng.integers(-128, 128, (1, 64, 28, 28)).astype(np.int8)
    w = rng.integers(-64, 64, (96, 64, k, k)).astype(np.int8)
    inputs = [x, np.float32(0.05), np.int8(3), w, rng.uniform(0.001, 0.004, 96).astype(np.float32),
              np.zeros(96, np.int8), np.float32(0.4), np.int8(-2), rng.integers(-9000, 9000, 96).astype(np.int32)]
    attrs = {"pads": [k // 2] * 4, "activation": "Relu"}
    (got,) = run_single_op("QLinearConv", inputs, attrs, vendors=["numba"], fallback=False, passes=False,
                           constants=(3, 4, 5, 8), threads=2)
    (want,) = run_single_op("QLinearConv", inputs, attrs, vendors=["reference"], fallback=False, passes=False)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("x_shape, w_shape, stride, budget", [
    ((1, 320, 7, 7), (1280, 320, 1, 1), 1, 1),  # MobileNetV2's 320 -> 1280 layer: 40 M operations
    ((1, 3, 224, 224), (32, 3, 3, 3), 2, 1),  # MobileNetV2's stem: 22 M (its input pixels said 87 M)
    ((1, 64, 56, 56), (64, 64, 3, 3), 1, 2),  # ResNet-18's 3x3 layer at 56x56: 231 M
], ids=["mnv2-1x1", "mnv2-stem", "resnet18-3x3"])
def test_qlinearconv_thread_budget_counts_output_operations(monkeypatch, x_shape, w_shape, stride, budget):
    """At threads=2 a QLinearConv takes the session's threads from 2**26 operations (2 x output
    pixels x output channels x K; qconv.INT8_CONV_WORK): MobileNetV2's layers stay on the calling
    thread, ResNet-18's 3x3 layers do not (docs/quantization.md, issue 16, session 8)."""
    from kernelkit_numba import config
    from kernelkit_numba.kernels import qconv

    seen = []
    original = qconv.QLinearConv.compute

    def spy(self, *xs, **kw):
        seen.append(config._local.threads)  # the call's budget (current_threads() also says 1 when backed off)
        return original(self, *xs, **kw)

    monkeypatch.setattr(qconv.QLinearConv, "compute", spy)
    rng = np.random.default_rng(0)
    m = w_shape[0]
    inputs = [rng.integers(-128, 128, x_shape).astype(np.int8), np.float32(0.05), np.int8(3),
              rng.integers(-64, 64, w_shape).astype(np.int8), np.full(m, 0.002, np.float32), np.zeros(m, np.int8),
              np.float32(0.4), np.int8(-2)]
    k = w_shape[-1]
    attrs = {"pads": [k // 2] * 4, "strides": [stride] * 2}
    run_single_op("QLinearConv", inputs, attrs, vendors=["numba"], fallback=False, passes=False,
                  constants=(1, 2, 3, 4, 5, 6, 7), threads=2)
    assert seen and set(seen) == {budget}


def test_blas_row_blocks_on_two_threads_are_exact():
    """MatMulIntegerToFloat with enough rows and work to be cut into row blocks on two threads
    (the transformer's projections): the exact product."""
    rng = np.random.default_rng(2)
    a = rng.integers(0, 256, (1, 256, 512)).astype(np.uint8)
    b = rng.integers(-128, 128, (512, 300)).astype(np.int8)
    one = np.float32(1)
    (got,) = run_single_op("MatMulIntegerToFloat", [a, b, one, one, np.uint8(7), np.int8(-3)], domain="com.microsoft",
                           vendors=["numba"], fallback=False, passes=False, constants=(1,), threads=2)
    want = (a.astype(np.int64) - 7) @ (b.astype(np.int64) + 3)
    np.testing.assert_array_equal(got, want.astype(np.float32))
