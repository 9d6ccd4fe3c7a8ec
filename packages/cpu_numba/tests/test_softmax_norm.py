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


def test_exp_rows_gives_no_subnormal_exps():
    """softmax.exp_rows itself (the fused Attention's P @ V reads its exps before any division):
    exps far below the row's max come out as exact zeros, never as tiny or subnormal values; the
    others are exp of the shifted scores within float32 tolerance, and the sums add what is kept."""
    from kernelkit.testing import assert_close
    from kernelkit_numba.kernels import softmax as sm

    s = np.array([[0.0, -1.0, -79.0, -83.0, -86.9, -90.0, -1e4, np.float32(-3.4e38)]] * 3, np.float32)
    s[1] += 5.0
    got, sums = s.copy(), np.empty(3, np.float64)
    sm.exp_rows(got, np.float32(1), sums, np.empty(s.shape[1], np.int32))
    want = np.exp((s - s.max(axis=1, keepdims=True)).astype(np.float64))
    assert np.all(got[:, 3:] == 0)
    assert not np.any((got > 0) & (got < sm._TINY))
    assert_close(got[:, :3], want[:, :3].astype(np.float32))
    assert_close(sums.astype(np.float32), got.astype(np.float64).sum(axis=1).astype(np.float32))


def _exp_rows_scalar_max(s, scale):
    """exp_rows' results with the row max found as a float32 scalar chain (its former first pass,
    ``top = t if t > top else top`` and a NaN flag) and the same exp steps: the oracle of the
    integer-key max."""
    from kernelkit_numba.kernels import softmax as sm

    out, sums = s.copy(), np.empty(s.shape[0])
    for i, row in enumerate(out):
        row *= scale
        top, nan = np.float32(-np.inf), False
        for t in row:
            top = t if t > top else top
            nan |= bool(t != t)
        if nan or np.isinf(top):
            shift = np.float64(np.nan if nan else (0.0 if top == -np.inf else top))
            with np.errstate(invalid="ignore"):
                e = np.exp(row.astype(np.float64) - shift)
            row[:] = e
            sums[i] = sum(float(v) for v in e)  # the kernel's sequential float64 sum of the float64 exps
            continue
        probe = row[None].copy()  # the finite case: exp_rows itself with the max known (no special row)
        one = np.empty(1)
        sm.exp_rows(probe, np.float32(1), one, np.empty(row.shape[0], np.int32))
        row[:], sums[i] = probe[0], one[0]
        assert np.float32(row.max()) == 1.0 or not row.size  # the max shifted to exp(0) = 1
    return out, sums


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_exp_rows_integer_key_max():
    """softmax.exp_rows' max as sortable int32 keys: finite rows shifted by their float max (the max's
    exp is exactly 1), -0.0 with +0.0, denormals, and the special rows (a NaN of either sign, +inf, -inf
    with finite values, all -inf, an empty row) take the exact path as with a float max."""
    from kernelkit_numba.kernels import softmax as sm

    rng = np.random.default_rng(7)
    n = 37
    rows = [rng.standard_normal(n) * 9, -np.abs(rng.standard_normal(n)) - 100, np.zeros(n),
            np.where(np.arange(n) % 2, -0.0, 0.0), np.full(n, -0.0), np.full(n, 1e-42),
            np.where(np.arange(n) == 5, np.nan, 1.0), np.where(np.arange(n) == 9, -np.nan, 1.0),
            np.where(np.arange(n) == 3, np.inf, 1.0), np.where(np.arange(n) == 3, -np.inf, 2.0),
            np.full(n, -np.inf), np.where(np.arange(n) < 30, -np.inf, rng.standard_normal(n))]
    s = np.array(rows, np.float32)
    s[7, 9] = -np.abs(s[7, 9])  # a NaN with the sign bit set: the lowest keys
    assert np.signbit(s[7, 9])
    for scale in (np.float32(1), np.float32(0.125)):
        got, sums = s.copy(), np.empty(s.shape[0])
        sm.exp_rows(got, scale, sums, np.empty(n, np.int32))
        want, want_sums = _exp_rows_scalar_max(s, scale)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(sums, want_sums)
        assert np.isnan(got[6]).all() and np.isnan(got[7]).all() and np.isnan(got[8, 3]) and (got[8, :3] == 0).all()
        assert (got[10] == 0).all() and got[3].max() == 1 and got[0].max() == 1
    empty = np.empty((2, 0), np.float32)
    sums = np.full(2, 5.0)
    sm.exp_rows(empty, np.float32(1), sums, np.empty(0, np.int32))
    assert (sums == 0).all()


@pytest.mark.parametrize("shape", [(1, 10), (3, 7), (2, 3, 5)])
def test_small_softmax_serial_call(shape):
    """softmax.serial (a small static Softmax over the last axis, the plan's call at one thread) = the
    kernel's general path bit for bit, into the plan's out, a fresh array, a non-contiguous out and
    from a non-contiguous input; None where it does not apply."""
    from kernelkit.ir import TensorSpec
    from kernelkit_numba.kernels import softmax as sm

    x = (np.random.default_rng(shape[-1]).standard_normal(shape) * 5).astype(np.float32)
    want = sm.softmax(x)
    call = sm.softmax.serial([TensorSpec(shape, "float32")], axis=-1)
    out = np.empty_like(x)
    assert call(x, out=out) is out
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(call(x), want)
    strided = np.empty(shape[:-1] + (2 * shape[-1],), np.float32)[..., ::2]
    np.testing.assert_array_equal(call(x, out=strided), want)
    xt = np.ascontiguousarray(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)  # same values, not C-contiguous
    np.testing.assert_array_equal(call(xt), want)
    assert sm.softmax.serial([TensorSpec(shape, "float32")], axis=0) is None or len(shape) == 1
    assert sm.softmax.serial([TensorSpec((1, 5000), "float32")], axis=-1) is None
    assert sm.softmax.serial([TensorSpec(("N", 10), "float32")], axis=-1) is None
