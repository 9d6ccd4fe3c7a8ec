"""The numba integer products are exact: float32 BLAS on K-blocks whose partial sums stay below 2**24."""
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


@pytest.mark.parametrize("adt", ["uint8", "int8"])
def test_extreme_operands_are_exact(adt):
    """Every product at its largest magnitude and the same sign: the worst case for float32."""
    info = np.iinfo(adt)
    a = np.full((3, 4096), info.max if adt == "uint8" else info.min, adt)
    b = np.full((4096, 5), -128, np.int8)
    zp = np.array(0 if adt == "uint8" else 0, adt)
    (got,) = run_single_op("MatMulInteger", [a, b, zp, np.int8(0)], vendors=["numba"], fallback=False, passes=False,
                           constants=(1,))
    want = a.astype(np.int64) @ b.astype(np.int64)
    np.testing.assert_array_equal(got, want.astype(np.int32))
