"""The per-node tools' spread over rounds (benchmarks/_timing.node_ms_rounds_interleaved, ops_vs_reference.py's
per-round ratio of each slower node, nodes_ab.py's ``--nodes``): every round kept, its best the tools' best, and
the printed median and range those of the within-round ratios, on a tiny model (issue 11, session 15)."""
from __future__ import annotations

import contextlib
import io
import os
import re
import sys

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("kernelkit_converters")
BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "..", "benchmarks")


@pytest.fixture
def tools(monkeypatch):
    """benchmarks/'s modules importable; the environment their import sets put back after the test."""
    for var in ("KERNELKIT_NUMBA_START", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(var, os.environ.get(var, "eager" if var == "KERNELKIT_NUMBA_START" else "1"))
    monkeypatch.syspath_prepend(os.path.join(BENCH, "models"))
    monkeypatch.syspath_prepend(BENCH)
    import _timing
    import nodes_ab
    import ops_vs_reference
    import zoo

    return _timing, ops_vs_reference, nodes_ab, zoo


def _sessions(zoo):
    import kernelkit
    from kernelkit_converters.onnx import convert

    proto = zoo.mlp((16, 32, 8))
    model = convert(proto.SerializeToString())
    return [kernelkit.Session(model, vendors=[v, "reference"], threads=1, profile=True)
            for v in ("reference", "numba")], zoo.feed(proto, 1)


@pytest.mark.parametrize("rotate", [False, True])
def test_every_round_is_kept(tools, rotate):
    timing, _, _, zoo = tools
    sessions, feed = _sessions(zoo)
    rounds = timing.node_ms_rounds_interleaved(sessions, feed, 4, rotate=rotate)
    for sess, per in zip(sessions, rounds):
        assert set(per) == {s.name for s in sess.plan.kernel_steps()}
        for ms in per.values():
            assert len(ms) == 4 and all(np.isfinite(m) and m > 0 for m in ms)
    best = timing.best_node_ms_interleaved(sessions, feed, 3, rotate=rotate)
    assert [set(b) for b in best] == [set(r) for r in rounds]


def test_spread_of_the_within_round_ratio(tools):
    _, ops, nodes_ab, _ = tools
    ref, nb = [1.0, 2.0, 1.0, 1.0], [0.9, 2.4, 1.1, 1.0]  # ratios 0.9, 1.2, 1.1, 1.0
    med, lo, hi, over = ops.spread(ref, nb)
    assert (round(med, 6), lo, hi, over) == (1.05, 0.9, 1.2, 2)
    assert nodes_ab.round_ratio(nb, ref) == "1.050 (0.90-1.20)"
    assert ops.spread([0.0, np.inf], [1.0, 1.0])[3] == 0  # rounds without a time are left out


def test_ops_vs_reference_prints_the_spread_of_each_slower_node(tools, monkeypatch):
    _, ops, _, zoo = tools
    monkeypatch.setattr(ops, "_builders", lambda: {"tiny": lambda: zoo.mlp((16, 32, 8))})
    monkeypatch.setattr(ops, "SLOWER", 0.0)  # every node numba runs counts as slower: each line is printed
    monkeypatch.setattr(ops, "MIN_MS", -1.0)
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        slow = ops.compare("tiny", 3, 1, rotate=True)
    lines = [line for line in text.getvalue().splitlines() if line.startswith("  slower on numba:")]
    assert slow and len(lines) == len(slow)
    pattern = (r"  slower on numba: (\S+) \((\w+)\) reference ([\d.]+) ms, numba ([\d.]+) ms; per round numba / "
               r"reference ([\d.]+) \(([\d.]+)-([\d.]+)\), slower in (\d) of 3$")
    for line, (node, op, ref_ms, nb_ms, (med, lo, hi, over)) in zip(lines, sorted(slow, key=lambda t: t[2] - t[3])):
        m = re.match(pattern, line)
        assert m, line
        assert m.group(1) == node and m.group(2) == op and float(m.group(5)) == pytest.approx(med, abs=0.006)
        assert (float(m.group(3)), float(m.group(4))) == pytest.approx((ref_ms, nb_ms), abs=6e-4)
        assert lo <= med <= hi and 0 <= over <= 3 and int(m.group(8)) == over


def test_nodes_ab_prints_the_named_nodes(tools, capsys):
    _, _, nodes_ab, _ = tools
    rounds = [{"a": [1.0, 2.0, 1.0]}, {"a": [1.1, 2.0, 1.3]}, {"a": [1.1, 1.0, 1.3]}]
    nodes_ab.print_nodes(["a", "b"], rounds, ["reference", "numba", "v"])
    out = capsys.readouterr().out.splitlines()
    assert out[2] == "| a | 1.000 | 1.100 | 1.000 | 0.909 (0.77-1.00) | 1.000 (1.00-2.00) |"
    assert out[3] == "| b | not in every session's plan |"
    assert sys.modules["nodes_ab"] is nodes_ab


def test_ops_vs_reference_prints_named_nodes_slower_or_not(tools, monkeypatch):
    _, ops, _, zoo = tools
    monkeypatch.setattr(ops, "_builders", lambda: {"tiny": lambda: zoo.mlp((16, 32, 8))})
    monkeypatch.setattr(ops, "SLOWER", 1e9)  # nothing is slower: only the named node is printed
    softmax = [s.name for s in _sessions(zoo)[0][1].plan.kernel_steps() if s.op == "Softmax"]
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        assert ops.compare("tiny", 3, 1, rotate=True, nodes=(*softmax, "no_such_node")) == []
    lines = [line for line in text.getvalue().splitlines() if line.startswith(("  node", "  slower"))]
    assert "  BLAS threads after the rounds: " in text.getvalue()  # (the reference's BLAS at one thread: session 18)
    pattern = (rf"  node: {softmax[0]} \(Softmax\) reference [\d.]+ ms, numba [\d.]+ ms; per round numba / reference "
               r"[\d.]+ \([\d.]+-[\d.]+\), slower in \d of 3$")
    assert len(lines) == 1 and re.match(pattern, lines[0])


def test_turns_variant_environment_from_the_start(monkeypatch):
    """turns.py's Child (session 19): a variant's environment variables (NAME=VALUE items, the name without a dot) are
    in its process's environment from the start, where a variable that the C library reads before Python runs
    (GLIBC_TUNABLES) takes effect; its constants (module.ATTR=VALUE) are not; the rest of the environment is kept."""
    monkeypatch.syspath_prepend(BENCH)
    import turns

    seen = {}

    class Proc:
        def __init__(self, args, **kwargs):
            seen.update(kwargs["env"])
            self.stdout = io.StringIO('{"ready": 1}\n')

    monkeypatch.setattr(turns.subprocess, "Popen", Proc)
    monkeypatch.setenv("KK_KEPT", "1")
    child = turns.Child("m", "numba", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1;kernels.cpair.TAIL=0;KK_OTHER=a=b")
    assert child.ready == {"ready": 1}
    assert seen["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=1" and seen["KK_OTHER"] == "a=b" and seen["KK_KEPT"] == "1"
    assert not any(k.startswith("kernels.") for k in seen)


def test_turns_probe_keeps_the_rounds_at_one_host_speed(monkeypatch):
    """turns.py --probe (session 15): summarise takes each ratio over the rounds whose two blocks' host probes agree
    within PROBE_MATCH, and the lines under the table give each runtime's probe and those ratios."""
    monkeypatch.syspath_prepend(BENCH)
    import turns

    def row(rnd, runtime, ms, probe):
        return {"model": "m", "runtime": runtime, "round": rnd, "load": "quiet", "median_ms": ms, "pool": {},
                "probe_ms": probe}

    # round 0 and 2: both blocks at one speed; round 1: numba1's block found the host 40 % slower
    rows = [row(0, "numba1", 10.0, 0.25), row(0, "ort1", 8.0, 0.26),
            row(1, "numba1", 14.0, 0.35), row(1, "ort1", 8.0, 0.25),
            row(2, "numba1", 9.0, 0.25), row(2, "ort1", 10.0, 0.25)]
    res = turns.summarise(rows, ("numba1", "ort1"))
    assert res["ratios"]["1t / ORT 1t"] == (1.25, 0.9, 1.75)  # every round: the median of 1.25, 1.75, 0.9
    assert res["matched"]["1t / ORT 1t"] == (pytest.approx(1.075), 2)  # rounds 0 and 2 only
    assert res["probes"] == {"numba1": [0.25, 0.35, 0.25], "ort1": [0.26, 0.25, 0.25]}
    lines = turns.probe_lines({"m": res}, "quiet", ("numba1", "ort1"))
    assert lines == ["quiet m: host probe ms numba1 0.250 (0.250-0.350), ort1 0.250 (0.250-0.260)",
                     "quiet m: rounds at one host speed (probes within 10%): 1t / ORT 1t 1.07 (2 of 3)"]
    # blocks written without --probe: no probe lines, the ratios as before
    plain = turns.summarise([{k: v for k, v in r.items() if k != "probe_ms"} for r in rows], ("numba1", "ort1"))
    assert "probes" not in plain and turns.probe_lines({"m": plain}, "quiet", ("numba1", "ort1")) == []
