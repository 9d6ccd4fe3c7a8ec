"""numba's MatMul with core's optional bias input (fuse_matmul_bias): fgemm's tiles, the BLAS path at
one thread (the serial call) and in shards, batched B, with and without a fused activation (GELU's tanh
form as unary's pass after the product), against the reference kernel."""
from __future__ import annotations

import kernelkit as kk
import numpy as np
import pytest
from kernelkit.testing import assert_close
from kernelkit_numba import config


def _r(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float32)


@pytest.mark.parametrize("a_shape, b_shape", [
    ((2, 5, 8), (8, 6)),  # BLAS
    ((2, 16, 64), (64, 48)),  # fgemm's tiles
    ((2, 3, 5, 8), (3, 8, 7)),  # batched B
])
@pytest.mark.parametrize("attrs", [{}, {"activation": "Gelu"}, {"activation": "Relu"},
                                   {"activation": "Gelu", "activation_params": (1.0,)}])  # tanh: a pass after
@pytest.mark.parametrize("threads", [1, 3])
def test_matmul_bias_matches_reference(rng, monkeypatch, a_shape, b_shape, attrs, threads):
    if threads > 1:  # every product cut into shards
        monkeypatch.setattr(config, "SERIAL_WORK", 0)
        monkeypatch.setattr(config, "MIN_SHARD_WORK", 0)
    inputs = [_r(rng, *a_shape), _r(rng, *b_shape), _r(rng, b_shape[-1])]
    want = kk.testing.run_single_op("MatMul", inputs, attrs, vendors=["reference"], fallback=False)[0]
    got = kk.testing.run_single_op("MatMul", inputs, attrs, vendors=["numba"], fallback=False, threads=threads)[0]
    assert_close(got, want)


@pytest.mark.parametrize("a_shape, b_shape", [((2, 5, 8), (8, 6)), ((2, 16, 64), (64, 48))])
def test_matmul_tanh_gelu_without_a_bias(rng, a_shape, b_shape):
    """A fused tanh Gelu without a bias (a MatMul -> Gelu pair) takes the same pass after the product."""
    inputs = [_r(rng, *a_shape), _r(rng, *b_shape)]
    attrs = {"activation": "Gelu", "activation_params": (1.0,)}
    want = kk.testing.run_single_op("MatMul", inputs, attrs, vendors=["reference"], fallback=False)[0]
    got = kk.testing.run_single_op("MatMul", inputs, attrs, vendors=["numba"], fallback=False, threads=1)[0]
    assert_close(got, want)
