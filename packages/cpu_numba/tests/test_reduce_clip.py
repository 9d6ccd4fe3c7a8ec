"""Property tests: ReduceSum/Mean/Max/Min over any axes (constant axes input), ArgMax/ArgMin (ties,
NaNs, select_last_index), CumSum (exclusive, reverse) and Clip."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# every example builds a Session; a few dozen cover the space without slowing CI (kept per test,
# not as a global hypothesis profile, so other packages' tests keep their settings)
FEW = settings(max_examples=25, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

@FEW
@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.data(),
       st.sampled_from(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"]), st.sampled_from([0, 1]),
       st.sampled_from([0, 1]))
def test_reductions_match_reference(check, shape, data, op, keepdims, noop):
    rank = len(shape)
    axes = data.draw(st.lists(st.integers(-rank, rank - 1), max_size=rank, unique_by=lambda a: a % rank))
    x = np.random.default_rng(rank * 7 + len(axes)).uniform(-3, 3, shape).astype(np.float32)
    attrs = {"keepdims": keepdims, "noop_with_empty_axes": noop}
    check(op, [x, np.array(axes, np.int64)], attrs, constants=(1,))


@FEW
@given(st.lists(st.integers(1, 5), max_size=3), st.sampled_from([None, -1.0, 0.5]), st.sampled_from([None, 1.0, 0.0]),
       st.integers(0, 2**16))
def test_clip_matches_reference(check, shape, lo, hi, seed):
    x = np.random.default_rng(seed).uniform(-3, 3, shape).astype(np.float32)
    inputs = [x, None if lo is None else np.array(lo, np.float32), None if hi is None else np.array(hi, np.float32)]
    check("Clip", inputs, constants=(1, 2))


@FEW
@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.data(), st.sampled_from(["ArgMax", "ArgMin"]),
       st.sampled_from([0, 1]), st.sampled_from([0, 1]), st.booleans())
def test_arg_extremes_match_reference(check, shape, data, op, keepdims, last, with_nan):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    r = np.random.default_rng(len(shape) * 11 + axis)
    x = r.integers(-2, 3, shape).astype(np.float32)  # few distinct values: ties are common
    if with_nan:
        x.reshape(-1)[r.integers(0, x.size)] = np.nan
    check(op, [x], {"axis": axis, "keepdims": keepdims, "select_last_index": last})


@FEW
@given(st.lists(st.integers(1, 6), min_size=1, max_size=3), st.data(), st.sampled_from([0, 1]),
       st.sampled_from([0, 1]))
def test_cumsum_matches_reference(check, shape, data, exclusive, reverse):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = np.random.default_rng(sum(shape)).uniform(-3, 3, shape).astype(np.float32)
    check("CumSum", [x, np.array(axis, np.int64)], {"exclusive": exclusive, "reverse": reverse}, constants=(1,))
