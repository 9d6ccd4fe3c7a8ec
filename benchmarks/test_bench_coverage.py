"""pytest-benchmark: issue 14's accelerated kernels against the reference, one op per session
(not in the default test paths).

    python -m pytest benchmarks/test_bench_coverage.py --benchmark-only --benchmark-group-by=param:case

Cases: a bidirectional LSTM and GRU layer (seq 64; batch 8, input 128, hidden 256, and a
classifier's batch 4, input 16, hidden 32; numba compiles the recurrence, one BLAS GEMM per step),
attention scores as Einsum (batched GEMM), and GatherND on int64 rows. Each session's output is
checked against the reference first.
"""
import kernelkit
import numpy as np
import pytest
from kernelkit.testing import assert_close, single_op_model

RNG = np.random.default_rng(0)


def _rnn(op, gates, batch=8, hidden=256, inp=128):
    return (op, [RNG.standard_normal((64, batch, inp)).astype(np.float32),
                 RNG.uniform(-0.1, 0.1, (2, gates * hidden, inp)).astype(np.float32),
                 RNG.uniform(-0.1, 0.1, (2, gates * hidden, hidden)).astype(np.float32),
                 RNG.uniform(-0.1, 0.1, (2, 2 * gates * hidden)).astype(np.float32)],
            {"hidden_size": hidden, "direction": "bidirectional"}, 2)


CASES = {
    "lstm_bidir": _rnn("LSTM", 4),
    "gru_bidir": _rnn("GRU", 3),
    "lstm_bidir_small": _rnn("LSTM", 4, batch=4, hidden=32, inp=16),  # a text classifier's size
    "gru_bidir_small": _rnn("GRU", 3, batch=4, hidden=32, inp=16),
    "einsum_scores": ("Einsum", [RNG.standard_normal((4, 128, 8, 64)).astype(np.float32),
                                 RNG.standard_normal((4, 128, 8, 64)).astype(np.float32)],
                      {"equation": "bqhd,bkhd->bhqk"}, 1),
    "gathernd_int64": ("GatherND", [RNG.integers(0, 100, (64, 512, 16)).astype(np.int64),
                                    RNG.integers(0, 64, (4096, 2)).astype(np.int64)], {}, 1),
}


@pytest.mark.parametrize("vendor", ["numba", "reference"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_coverage_kernel(benchmark, case, vendor):
    op, inputs, attrs, n_out = CASES[case]
    model = single_op_model(op, inputs, attrs, n_out, constants=tuple(range(1, len(inputs))))
    session = kernelkit.Session(model, vendors=[vendor], fallback=False, threads=1)
    feeds = {"in0": inputs[0]}
    want = kernelkit.Session(model, vendors=["reference"], fallback=False).run(None, feeds)
    for got, ref in zip(session.run(None, feeds), want):
        assert_close(got, ref)
    benchmark(session.run, None, feeds)
