"""Property tests: MaxPool (with Indices), AveragePool (both pad counting modes), global pools."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# every example builds a Session; a few dozen cover the space without slowing CI (kept per test,
# not as a global hypothesis profile, so other packages' tests keep their settings)
FEW = settings(max_examples=25, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

@st.composite
def pool_cases(draw):
    rank = draw(st.sampled_from([1, 2]))
    kernel = [draw(st.integers(1, 3)) for _ in range(rank)]
    strides = [draw(st.integers(1, 3)) for _ in range(rank)]
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    attrs = {"kernel_shape": kernel, "strides": strides, "auto_pad": auto_pad}
    if auto_pad == "NOTSET":
        # pads smaller than the kernel, so no window lies wholly in the padding
        attrs["pads"] = [draw(st.integers(0, k - 1)) for k in kernel] * 2
        attrs["ceil_mode"] = draw(st.sampled_from([0, 1]))
        attrs["dilations"] = [draw(st.integers(1, 2)) for _ in range(rank)]
    dil = attrs.get("dilations", [1] * rank)
    spatial = [draw(st.integers((k - 1) * d + 1, 9)) for k, d in zip(kernel, dil)]
    shape = (draw(st.integers(1, 2)), draw(st.integers(1, 3)), *spatial)
    return shape, attrs, draw(st.integers(0, 2**16))


@FEW
@given(pool_cases(), st.sampled_from([0, 1]))
def test_average_pool_matches_reference(check, case, count_include_pad):
    shape, attrs, seed = case
    x = np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)
    check("AveragePool", [x], {**attrs, "count_include_pad": count_include_pad})


@FEW
@given(pool_cases(), st.sampled_from([1, 2]))
def test_max_pool_matches_reference(check, case, n_outputs):
    shape, attrs, seed = case
    x = np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)
    if n_outputs == 2 and len(shape) == 4:
        attrs = {**attrs, "storage_order": seed % 2}
    check("MaxPool", [x], attrs, n_outputs=n_outputs)


@FEW
@given(st.lists(st.integers(1, 6), min_size=1, max_size=3), st.integers(0, 2**16))
def test_global_pools_match_reference(check, spatial, seed):
    x = np.random.default_rng(seed).uniform(-2, 2, (2, 3, *spatial)).astype(np.float32)
    check("GlobalAveragePool", [x])
    check("GlobalMaxPool", [x])


def test_max_pool_separable_edges(check):
    """The separable float MaxPool: ResNet's 3x3/2 pads 1 on odd and even maps, a dilated window
    with a wide padding, a window wider than tall, ceil_mode, and NaN inputs (NumPy's maximum
    propagates them)."""
    rng = np.random.default_rng(7)
    cases = [((1, 3, 113, 111), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
             ((2, 2, 12, 12), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
             ((1, 2, 9, 10), {"kernel_shape": [2, 3], "strides": [1, 2], "pads": [1, 2, 0, 2],
                              "dilations": [2, 2]}),
             ((1, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
             ((1, 1, 5, 17), {"kernel_shape": [1, 5], "strides": [1, 1], "pads": [0, 2, 0, 2]})]
    for shape, attrs in cases:
        x = rng.uniform(-2, 2, shape).astype(np.float32)
        check("MaxPool", [x], attrs)
        x.reshape(-1)[:: 7] = np.nan
        got = check("MaxPool", [x], attrs)[0]
        assert np.isnan(got).any()
