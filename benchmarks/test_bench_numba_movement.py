"""pytest-benchmark: the numba data-movement kernels against their NumPy equivalents on one
(1, 64, 112, 112) float32 activation (not in the default test paths).

    python -m pytest packages/cpu_numba/benchmarks --benchmark-only --benchmark-group-by=param:case
"""
import kernelkit_numba
import numpy as np
import pytest
from kernelkit_numba import config

kernelkit_numba.initialize()
from kernelkit_numba.kernels import concat, movement, pad, resize, where  # noqa: E402

X = np.random.default_rng(0).standard_normal((1, 64, 112, 112)).astype(np.float32)
PADS = np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)
CASES = {
    "transpose_nhwc": (lambda: movement.transpose(X, perm=[0, 2, 3, 1]),
                       lambda: np.ascontiguousarray(X.transpose(0, 2, 3, 1))),
    "slice_step2": (lambda: movement.slice_(X, [1, 0], [-1, 2**62], [2, 3], [1, 2]), lambda: X[:, :, 1:-1, ::2].copy()),
    "pad_constant": (lambda: pad.pad(X, PADS), lambda: np.pad(X, [(0, 0), (0, 0), (1, 1), (1, 1)])),
    "pad_reflect": (lambda: pad.pad(X, PADS, mode="reflect"),
                    lambda: np.pad(X, [(0, 0), (0, 0), (1, 1), (1, 1)], mode="reflect")),
    "concat_c": (lambda: concat.concat(X, X, axis=1), lambda: np.concatenate([X, X], 1)),
    "where_bcast": (lambda: where.where(X > 0, X, X[:, :1]), lambda: np.where(X > 0, X, X[:, :1])),
    "resize_nearest_x2": (lambda: resize.resize(X, None, np.array([1, 1, 2, 2], np.float32)),
                          lambda: X.repeat(2, 2).repeat(2, 3)),
}


@pytest.mark.parametrize("impl", ["numba", "numpy"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_movement(benchmark, case, impl):
    fn = CASES[case][0 if impl == "numba" else 1]
    np.testing.assert_array_equal(CASES[case][0](), CASES[case][1]()) if case != "resize_nearest_x2" else None
    with config.num_threads(1):
        benchmark(fn)
