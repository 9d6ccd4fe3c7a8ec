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
                  "Softplus", "Gelu", "Erf", "Exp", "Log", "Sqrt", "Reciprocal", "Neg", "Abs", "Floor", "Ceil",
                  "Swish"})


@pytest.mark.parametrize("op", UNARY)
def test_unary_matches_reference_on_op_samples(check, op):
    schema = get_schema(op)
    cases = list(schema.samples(np.random.default_rng(0), "float32"))
    for inputs, attrs in cases:
        check(op, inputs, attrs)
    extra = {"LeakyRelu": {"alpha": 0.3}, "Gelu": {"approximate": "tanh"}, "Elu": {"alpha": 0.5},
             "HardSigmoid": {"alpha": 0.3, "beta": 0.4}, "Swish": {"alpha": -0.7}}
    if op in extra:
        check(op, cases[1][0], extra[op])


@pytest.mark.parametrize("op", ["Relu", "Abs", "Neg", "Floor", "Ceil", "Exp", "Sigmoid", "Tanh", "Softplus", "Elu",
                                "Erf", "Gelu", "Clip", "Swish"])
def test_unary_edge_values(check, op):
    x = np.array([np.inf, -np.inf, np.nan, 3e9, -3e9, 100.0, -100.0, 0.0, -0.0, 2.5, -2.5], np.float32)
    with np.errstate(all="ignore"):  # the reference's NumPy warns on inf/NaN; the values are the test
        check(op, [x])


@pytest.mark.parametrize("size", [1, 7, 511, 512, 513, 3 * 512 + 17, 20_000])
def test_sigmoid_pass_against_float64(size):
    """unary._sigmoid (one Numba pass: exp(-|x|) by its polynomial, then 1 / (1 + e) or e / (1 + e))
    against float64 over chunk boundaries, with the edges (inf, NaN, |x| around 87-89 where exp
    overflows); in place equal to out of place; shards [lo, hi) touch nothing outside."""
    from kernelkit.testing import assert_close
    from kernelkit_numba.kernels import unary

    rng = np.random.default_rng(size)
    x = (rng.standard_normal(size) * 12).astype(np.float32)
    edges = np.array([np.inf, -np.inf, np.nan, 86.9, -86.9, 87.5, -87.5, 88.8, -88.8, -100, 0.0, -0.0, 1e-8],
                     np.float32)
    x[:min(size, edges.size)] = edges[:size]
    with np.errstate(over="ignore"):
        want = (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32)
    y = np.full(size + 2, -7.0, np.float32)
    unary._sigmoid(x, y[1:-1], 0, size)
    assert_close(y[1:-1], want)
    assert np.array_equal(np.isnan(y[1:-1]), np.isnan(x))
    assert y[0] == y[-1] == -7.0
    assert np.all(y[1:-1][np.abs(x) > 87] == (x[np.abs(x) > 87] > 0))  # exactly 1 or 0 beyond 87
    inplace = x.copy()
    unary._sigmoid(inplace, inplace, 0, size)
    np.testing.assert_array_equal(inplace, y[1:-1])
    if size > 2:
        part = np.full(size, -7.0, np.float32)
        unary._sigmoid(x, part, 1, size - 1)
        np.testing.assert_array_equal(part[1:-1], y[2:-2])
        assert part[0] == part[-1] == -7.0


@pytest.mark.parametrize("alpha", [1.0, 1.702, -0.5])
@pytest.mark.parametrize("size", [1, 513, 20_000])
def test_swish_pass_against_float64(size, alpha):
    """unary.swish (the Sigmoid pass times x, fuse_silu's SiLU at alpha 1) against float64, with the
    edges; in place equal to out of place."""
    from kernelkit.testing import assert_close
    from kernelkit_numba.kernels import unary

    rng = np.random.default_rng(size)
    x = (rng.standard_normal(size) * 12).astype(np.float32)
    edges = np.array([np.inf, -np.inf, np.nan, 86.9, -86.9, 87.5, -87.5, 88.8, -88.8, -100, 0.0, -0.0, 1e-8],
                     np.float32)
    x[:min(size, edges.size)] = edges[:size]
    with np.errstate(all="ignore"):
        x64 = x.astype(np.float64)
        want = (x64 / (1 + np.exp(-alpha * x64))).astype(np.float32)
    got = unary.swish(x, alpha=alpha)
    assert_close(got, want)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    inplace = x.copy()
    unary.swish(inplace, alpha=alpha, out=inplace)
    np.testing.assert_array_equal(inplace, got)


@pytest.mark.parametrize("size", [1, 513, 20_000])
def test_gelu_tanh_pass_against_float64(size):
    """unary.gelu(approximate="tanh") on float32 (x * sigmoid(2u) in the Sigmoid pass) and the
    epilogue's scalar form (x / (1 + exp(-2u)), a Gemm's fused Gelu) against float64's tanh formula,
    with the edges; in place equal to out of place."""
    from kernelkit.testing import assert_close
    from kernelkit_numba.kernels import unary

    rng = np.random.default_rng(size)
    x = (rng.standard_normal(size) * 4).astype(np.float32)
    edges = np.array([np.inf, -np.inf, np.nan, 30.0, -30.0, -5.0, -3.0, 0.0, -0.0, 1e-8, 200.0, -200.0], np.float32)
    x[:min(size, edges.size)] = edges[:size]
    with np.errstate(all="ignore"):
        x64 = x.astype(np.float64)
        want = (0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3)))).astype(np.float32)
    got = unary.gelu(x, approximate="tanh")
    assert_close(got, want)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    inplace = x.copy()
    unary.gelu(inplace, approximate="tanh", out=inplace)
    np.testing.assert_array_equal(inplace, got)
    if size > 1:
        from kernelkit.testing import run_single_op
        a = x[:, None] if size < 100 else x.reshape(-1, 1)
        w = np.ones((1, 1), np.float32)
        fused = run_single_op("Gemm", [a, w], {"activation": "Gelu", "activation_params": [1.0]},
                              vendors=["numba"])[0]
        with np.errstate(all="ignore"):
            assert_close(fused.reshape(-1), want)


@pytest.mark.parametrize("op, a, b, want", [("Div", 1.0, 0.0, np.inf), ("Mul", 1e30, 1e30, np.inf),
                                            ("Sub", np.inf, np.inf, np.nan), ("Add", -np.inf, np.inf, np.nan)])
def test_serial_ufunc_call_is_quiet_and_leaves_the_error_state(op, a, b, want):
    """The one-thread Add/Sub/Mul/Div call (binary._quiet) raises no floating-point warning, also
    under np.errstate(all="raise") around it, and leaves the caller's error state as it was."""
    import warnings

    from kernelkit.ir import TensorSpec
    from kernelkit_numba.kernels import binary

    specs = [TensorSpec((2, 3), "float32"), TensorSpec((1, 3), "float32")]
    call = binary._ufunc_serial({"Add": binary.ADD, "Sub": binary.SUB, "Mul": binary.MUL,
                                 "Div": binary.DIV}[op])(specs)
    x, y = np.full((2, 3), a, np.float32), np.full((1, 3), b, np.float32)
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        before = np.geterr()
        got = call(x, y, out=np.empty((2, 3), np.float32))
        assert np.geterr() == before
    np.testing.assert_array_equal(got, np.full((2, 3), want, np.float32))


@pytest.mark.parametrize("y_shape", [(), (1,), (1, 1, 1)])
def test_pow_of_two_is_the_square(check, y_shape):
    """Pow with a one-value exponent of 2 runs as x * x (binary.pow_): the reference's values, edges
    included (NaN, inf, -0, huge); other exponents keep the Numba loop."""
    x = np.array([[np.nan, np.inf, -np.inf, -0.0, 0.0, 3e20, -1.5, 2.5, 1e-30, 7.0]] * 2, np.float32)
    with np.errstate(all="ignore"):  # the reference's NumPy warns on overflow; the values are the test
        for e in (2.0, 3.0):
            check("Pow", [x[None] if len(y_shape) == 3 else x, np.full(y_shape, e, np.float32)], constants=(1,))
