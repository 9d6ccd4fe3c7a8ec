"""A review of fgemm.PAD_A_ONE_THREAD (16 since session 17's call L1; docs/numba.md, "The MLP's 1024-deep product: A's
rows off one L1 set"): the one-thread bound call copies A into rows K + 16 apart. Its A may be a view that starts
inside a larger buffer (an arena's slot) and its output too; M need not be a multiple of the tiles' rows. The copy
must read A from the view's own start and the output stay within its view: against the float64 product, and bit for
bit the call without the copy."""
from __future__ import annotations

import numpy as np
import pytest
from kernelkit.testing import assert_close
from kernelkit_numba.kernels import epilogue, fgemm, ftile


@pytest.mark.parametrize("m", [64, 37, 1, 13])
def test_padded_a_from_an_offset_view(m):
    if not ftile.available("avx512"):
        pytest.skip("the avx512 tiles cannot run here")
    assert fgemm.PAD_A_ONE_THREAD == 16
    kind, k, n = ftile.KIND["avx512"], 1024, 256
    rng = np.random.default_rng(m)
    big = rng.standard_normal((m + 5) * k + 3).astype(np.float32)
    a = big[3 + 2 * k:3 + (m + 2) * k].reshape(m, k)  # (C-contiguous, off the buffer's start and off 16 floats)
    assert a.flags.c_contiguous and a.base is not None
    b = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    packed = fgemm.Packed(b, b, kind)
    want = (a.astype(np.float64) @ b.astype(np.float64) + bias).astype(np.float32)
    want = np.maximum(want, 0)
    outs = []
    for pad in (0, fgemm.PAD_A_ONE_THREAD):
        run = fgemm.serial(kind, packed, m, 1.0, bias, epilogue.CLIP, 0.0, np.inf, None, 0, False, 0, None, pad)
        slab = np.full((m + 4) * n + 5, np.nan, np.float32)
        out = slab[5 + n:5 + (m + 1) * n].reshape(m, n)
        for _ in range(2):
            run(a, out)
        assert np.isnan(slab[:5 + n]).all() and np.isnan(slab[5 + (m + 1) * n:]).all()  # (nothing outside the view)
        assert_close(out, want, np.float32, err_msg=f"pad {pad}")
        outs.append(out.copy())
    np.testing.assert_array_equal(outs[1], outs[0])
