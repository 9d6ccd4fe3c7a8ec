"""Property tests: Softmax/LogSoftmax over any axis; LayerNormalization (all three outputs),
BatchNormalization and InstanceNormalization."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# every example builds a Session; a few dozen cover the space without slowing CI (kept per test,
# not as a global hypothesis profile, so other packages' tests keep their settings)
FEW = settings(max_examples=25, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

shapes = st.lists(st.integers(1, 6), min_size=1, max_size=4)


@FEW
@given(shapes, st.data(), st.sampled_from(["Softmax", "LogSoftmax"]), st.sampled_from([1.0, 30.0]))
def test_softmax_matches_reference(check, shape, data, op, spread):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = np.random.default_rng(len(shape) + axis).uniform(-spread, spread, shape).astype(np.float32)
    check(op, [x], {"axis": axis})


@FEW
@given(shapes, st.data(), st.booleans(), st.sampled_from([1e-5, 1e-2]))
def test_layer_norm_matches_reference(check, shape, data, with_bias, eps):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    r = np.random.default_rng(sum(shape))
    inner = tuple(shape[axis:])
    x = r.uniform(-3, 3, shape).astype(np.float32)
    scale = r.uniform(0.5, 1.5, inner).astype(np.float32)
    b = r.uniform(-1, 1, inner).astype(np.float32) if with_bias else None
    check("LayerNormalization", [x, scale, b], {"axis": axis, "epsilon": eps}, constants=(1, 2), n_outputs=3)


@FEW
@given(st.integers(1, 2), st.integers(1, 5), st.lists(st.integers(1, 5), max_size=3), st.integers(0, 2**16))
def test_batch_and_instance_norm_match_reference(check, n, c, spatial, seed):
    r = np.random.default_rng(seed)
    x = r.uniform(-2, 2, (n, c, *spatial)).astype(np.float32)
    scale, b = r.uniform(0.5, 1.5, c).astype(np.float32), r.uniform(-1, 1, c).astype(np.float32)
    mean, var = r.uniform(-1, 1, c).astype(np.float32), r.uniform(0.1, 2, c).astype(np.float32)
    check("BatchNormalization", [x, scale, b, mean, var], {"epsilon": 1e-3}, constants=(1, 2, 3, 4))
    if spatial:
        check("InstanceNormalization", [x, scale, b], {"epsilon": 1e-4}, constants=(1, 2))


@pytest.mark.parametrize("shape", [(1, 10), (3, 7), (16, 256)])
def test_small_softmax_is_the_sharded_one(shape):
    """A small Softmax in one Numba call (softmax._rows_small) = the sharded rows path bit for bit."""
    from kernelkit_numba.kernels import softmax as sm

    x = (np.random.default_rng(shape[1]).standard_normal(shape) * 5).astype(np.float32)
    want, got = np.empty_like(x), np.empty_like(x)
    sm._rows_shard(x, want, False, 0, shape[0])
    sm._rows_small(x, got)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got.sum(axis=1), 1, rtol=1e-5)


@pytest.mark.parametrize("fill", [-np.inf, np.float32(-3.4e38), -1e4])
@pytest.mark.parametrize("shape", [(1, 2, 16, 16), (1, 12, 64, 64)])
def test_softmax_masked_entries_are_exact_zeros(shape, fill):
    """A causal mask's filled scores (-inf, float32's minimum, BERT's -1e4) give exact zeros, as the
    reference's exp does, and no subnormal value anywhere (softmax._scale_rows: subnormals are
    microcode assists on Intel cores, in the Softmax and in the P @ V product after it); the rest
    matches the reference."""
    from kernelkit.ops.softmax import _softmax as reference
    from kernelkit.testing import assert_close
    from kernelkit_numba.kernels.softmax import softmax

    n = shape[-1]
    x = np.random.default_rng(n).standard_normal(shape).astype(np.float32) * 4
    keep = np.tril(np.ones((n, n), bool))
    x = np.where(keep, x, np.float32(fill)).astype(np.float32)
    got = softmax(x)
    assert np.all(got[..., ~keep] == 0)
    assert not np.any((got > 0) & (got < np.finfo(np.float32).tiny))
    assert_close(got, reference(x))
