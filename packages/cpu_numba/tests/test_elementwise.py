"""Property tests: broadcasting binary/variadic ops; the unary table over each op's own samples."""
import kernelkit
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernelkit.registry import get_schema

# every example builds a Session; a few dozen cover the space without slowing CI (kept per test,
# not as a global hypothesis profile, so other packages' tests keep their settings)
FEW = settings(max_examples=25, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

@st.composite
def broadcast_pair(draw):
    out = draw(st.lists(st.integers(1, 5), max_size=5))
    a = [d if draw(st.booleans()) else 1 for d in out]
    b = [d if draw(st.booleans()) else 1 for d in out]
    # drop leading axes of either side at random (rank broadcasting)
    return tuple(a[draw(st.integers(0, len(a))):]), tuple(b[draw(st.integers(0, len(b))):])


@FEW
@given(broadcast_pair(), st.sampled_from(["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean"]),
       st.booleans(), st.integers(0, 2**16))
def test_binary_broadcasting_matches_reference(check, shapes, op, transposed, seed):
    r = np.random.default_rng(seed)
    a = r.uniform(0.5, 2, shapes[0]).astype(np.float32)
    b = r.uniform(0.5, 2, shapes[1]).astype(np.float32)
    if transposed:  # a non-contiguous operand (a constant stored transposed)
        a = np.ascontiguousarray(a.T).T
    check(op, [a, b], constants=(0,) if transposed else ())


def test_variadic_three_inputs(check, rng):
    xs = [rng.standard_normal(s).astype(np.float32) for s in [(2, 3), (3,), (1, 1)]]
    for op in ("Max", "Min", "Sum", "Mean"):
        check(op, xs)


UNARY = sorted({k.op for k in kernelkit.kernels(vendor="numba")}
               & {"Relu", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu",
                  "Softplus", "Gelu", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Floor", "Ceil"})


@pytest.mark.parametrize("op", UNARY)
def test_unary_matches_reference_on_op_samples(check, op):
    schema = get_schema(op)
    cases = list(schema.samples(np.random.default_rng(0), "float32"))
    for inputs, attrs in cases:
        check(op, inputs, attrs)
    extra = {"LeakyRelu": {"alpha": 0.3}, "Gelu": {"approximate": "tanh"}, "Elu": {"alpha": 0.5},
             "HardSigmoid": {"alpha": 0.3, "beta": 0.4}}
    if op in extra:
        check(op, cases[1][0], extra[op])


@pytest.mark.parametrize("op", ["Relu", "Abs", "Neg", "Floor", "Ceil", "Exp", "Sigmoid", "Tanh", "Softplus", "Elu",
                                "Erf", "Gelu", "Clip"])
def test_unary_edge_values(check, op):
    x = np.array([np.inf, -np.inf, np.nan, 3e9, -3e9, 100.0, -100.0, 0.0, -0.0, 2.5, -2.5], np.float32)
    with np.errstate(all="ignore"):  # the reference's NumPy warns on inf/NaN; the values are the test
        check(op, [x])
