"""Property tests: ReduceSum/Mean/Max/Min over any axes (constant axes input), and Clip."""
import numpy as np
from hypothesis import given
from hypothesis import strategies as st


@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.data(),
       st.sampled_from(["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"]), st.sampled_from([0, 1]),
       st.sampled_from([0, 1]))
def test_reductions_match_reference(check, shape, data, op, keepdims, noop):
    rank = len(shape)
    axes = data.draw(st.lists(st.integers(-rank, rank - 1), max_size=rank, unique_by=lambda a: a % rank))
    x = np.random.default_rng(rank * 7 + len(axes)).uniform(-3, 3, shape).astype(np.float32)
    attrs = {"keepdims": keepdims, "noop_with_empty_axes": noop}
    check(op, [x, np.array(axes, np.int64)], attrs, constants=(1,))


@given(st.lists(st.integers(1, 5), max_size=3), st.sampled_from([None, -1.0, 0.5]), st.sampled_from([None, 1.0, 0.0]),
       st.integers(0, 2**16))
def test_clip_matches_reference(check, shape, lo, hi, seed):
    x = np.random.default_rng(seed).uniform(-3, 3, shape).astype(np.float32)
    inputs = [x, None if lo is None else np.array(lo, np.float32), None if hi is None else np.array(hi, np.float32)]
    check("Clip", inputs, constants=(1, 2))
