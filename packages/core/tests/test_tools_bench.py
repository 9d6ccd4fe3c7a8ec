"""kernelkit bench (CLI and kernelkit.tools.bench): figures, JSON schema, profile, trace, plot,
the onnxruntime comparison, and the session's profile hooks (reset, events)."""
from __future__ import annotations

import json
from pathlib import Path

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import cli, tools
from kernelkit.tools.bench import latency_stats

REF = ["--vendors", "reference"]


def _run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _check_schema(doc):
    """``doc`` against the published JSON Schema (kernelkit/tools/bench.schema.json)."""
    jsonschema = pytest.importorskip("jsonschema")
    from kernelkit.tools.bench import json_schema

    jsonschema.validate(doc, json_schema())
    broken = {**doc, "latency": {k: v for k, v in doc["latency"].items() if k != "p99.9_ms"}}
    with pytest.raises(jsonschema.ValidationError, match="p99.9_ms"):
        jsonschema.validate(broken, json_schema())


def test_latency_stats_against_numpy():
    times = [3.0, 1.0, 2.0, 10.0, 4.0]
    s = latency_stats(times, batch=2)
    assert s["runs"] == 5 and s["min_ms"] == 1.0 and s["max_ms"] == 10.0
    assert s["mean_ms"] == pytest.approx(4.0) and s["std_ms"] == pytest.approx(np.std(times))
    assert s["p50_ms"] == 3.0 and s["p90_ms"] == pytest.approx(np.percentile(times, 90))
    assert s["p99.9_ms"] == pytest.approx(np.percentile(times, 99.9))
    assert s["throughput_per_s"] == pytest.approx(2 * 1000 / 4.0)


def test_bench_cli_json_schema(capsys, tmp_path, conv_kkm):
    out_json = tmp_path / "b.json"
    code, out, err = _run(capsys, "bench", conv_kkm, "--batch", 2, "--runs", 7, "--warmup", 2, "--threads", 1,
                          "--json", out_json, *REF)
    assert code == 0, err
    assert "p99.9" in out and "session creation" in out and "first run" in out
    doc = json.loads(out_json.read_text())
    _check_schema(doc)
    assert doc["schema"] == 1 and doc["batch"] == 2 and doc["threads"] == 1 and doc["warmup_runs"] == 2
    assert doc["inputs"] == {"x": {"shape": [2, 3, 8, 8], "dtype": "float32"}}
    lat = doc["latency"]
    assert lat["runs"] == 7 == len(doc["times_ms"])
    order = [lat[k] for k in ("min_ms", "p50_ms", "p90_ms", "p95_ms", "p99_ms", "p99.9_ms", "max_ms")]
    assert order == sorted(order) and lat["min_ms"] > 0
    assert lat["mean_ms"] == pytest.approx(np.mean(doc["times_ms"]))
    assert lat["throughput_per_s"] == pytest.approx(2e3 / lat["mean_ms"])
    assert doc["session_ms"] > 0 and doc["first_run_ms"] > 0
    assert lat["flops"] == 2 * (2 * 4 * 8 * 8) * (3 * 3 * 3)  # batch 2, multiply-adds count 2
    env = doc["environment"]
    assert env["versions"]["kernelkit"] == kk.__version__ and env["versions"]["numpy"] == np.__version__
    assert env["cpu"]["name"] and env["threads"] == 1 and "cache" in env
    status = kk.load_backends()  # each loaded backend reports its own cache through cache_info()
    for backend in ("numba", "opencl"):
        if status.get(backend) == "ok":
            assert Path(env["cache"][backend]["dir"]).is_absolute(), env["cache"]
    assert [k["node"] for k in env["kernels"]] == ["conv", "y"]  # Relu fused into the Conv
    assert all(k["vendor"] == "reference" and k["device"] == "cpu" for k in env["kernels"])
    assert {"op", "dtype"} <= set(env["kernels"][0])
    assert env["memory"]["weights_bytes"] == 4 * 3 * 3 * 3 * 4 + 4 * 4  # Session.memory(): conv weight, bias
    assert env["memory"]["arena_bytes"] >= 0


def test_bench_shape_and_duration(conv_kkm):
    r = tools.bench(conv_kkm, shapes={"x": (3, 3, 8, 8)}, duration=0.05, vendors=["reference"], warmup=0)
    assert r.inputs["x"]["shape"] == [3, 3, 8, 8] and r.batch == 3
    assert r.stats["runs"] == len(r.times_ms) >= 1
    assert sum(r.times_ms[:-1]) < 50.0  # every run but the last started inside the 0.05 s


def test_bench_profile_excludes_warmup_and_sums(conv_kkm):
    r = tools.bench(conv_kkm, batch=1, runs=5, warmup=4, vendors=["reference"], profile=True)
    rows = r.profile
    assert [x["busy_ms"] for x in rows] == sorted((x["busy_ms"] for x in rows), reverse=True)
    assert all(x["busy_ms"] == x["total_ms"] for x in rows)  # no device time on the CPU
    assert all(x["calls"] == 5 for x in rows)  # the first run and the 4 warm-up runs are not counted
    assert sum(x["percent"] for x in rows) == pytest.approx(100.0)
    conv = next(x for x in rows if x["op"] == "Conv")
    assert conv["vendor"] == "reference" and conv["flops"] == 2 * 4 * 64 * 27
    assert conv["gflops"] == pytest.approx(conv["flops"] * 5 / conv["total_ms"] / 1e6)
    assert conv["device_ms"] is None  # the CPU has no device events


def test_bench_cli_profile_trace_plot(capsys, tmp_path, conv_kkm):
    pytest.importorskip("matplotlib")
    trace, png, doc = tmp_path / "t.json", tmp_path / "p.png", tmp_path / "b.json"
    code, out, err = _run(capsys, "bench", conv_kkm, "--runs", 3, "--profile", "--trace", trace, "--plot", png,
                          "--json", doc, *REF)
    assert code == 0, err
    assert "per-node time" in out and "GFLOP/s" in out
    events = json.loads(trace.read_text())["traceEvents"]
    runs = [e for e in events if e.get("cat") == "run"]
    kernels = [e for e in events if e["ph"] == "X" and e.get("cat") != "run"]
    assert len(runs) == 3 and len(kernels) == 3 * 2  # two nodes per run: Conv (Relu fused into it), Add
    for run in runs:  # each run's kernel slices lie inside the run's slice
        inside = [k for k in kernels if run["ts"] <= k["ts"] and k["ts"] + k["dur"] <= run["ts"] + run["dur"] + 1]
        assert len(inside) == 2
    assert {k["args"]["vendor"] for k in kernels} == {"reference"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    _check_schema(json.loads(doc.read_text()))  # with the profile rows


def test_bench_compare_onnxruntime(capsys, tmp_path, conv_onnx):
    pytest.importorskip("onnxruntime")
    out_json = tmp_path / "c.json"
    code, out, err = _run(capsys, "bench", conv_onnx, "--runs", 4, "--threads", 1, "--compare", "onnxruntime",
                          "--json", out_json, *REF)
    assert code == 0, err
    assert "onnxruntime" in out and "ratio" in out
    _check_schema(json.loads(out_json.read_text()))
    c = json.loads(out_json.read_text())["compare"]
    assert c["runtime"] == "onnxruntime" and c["threads"] == 1 and c["latency"]["runs"] == 4
    assert c["session_ms"] > 0 and c["first_run_ms"] > 0 and c["latency"]["p99_ms"] >= c["latency"]["p50_ms"]
    doc = json.loads(out_json.read_text())
    assert c["ratio_p50"] == pytest.approx(doc["latency"]["p50_ms"] / c["latency"]["p50_ms"])
    assert c["outputs"]["y"]["passed"] and c["outputs"]["y"]["cosine"] > 0.99999


def test_bench_compare_needs_onnx(capsys, conv_kkm):
    code, _, err = _run(capsys, "bench", conv_kkm, "--runs", 1, "--compare", "onnxruntime", *REF)
    assert code == 2 and "needs an .onnx MODEL" in err


@pytest.mark.parametrize("argv, fragment", [
    (["--runs", "0"], "runs must be >= 1"),
    (["--shape", "x=1,3"], "does not fit"),
    (["--shape", "q=1"], "has inputs ['x']"),
    (["--shape", "x=a,b"], "expected NAME=D,D"),
    (["--batch", "0"], "--batch must be >= 1"),
])
def test_bench_bad_arguments(capsys, conv_kkm, argv, fragment):
    code, _, err = _run(capsys, "bench", conv_kkm, *argv, *REF)
    assert code == 2 and fragment in err, err


def test_profile_reset_and_events(conv_model):
    sess = kk.Session(conv_model(), vendors=["reference"], profile=True)
    x = np.ones((1, 3, 8, 8), np.float32)
    sess.run(None, {"x": x})
    assert all(r["calls"] == 1 for r in sess.profile()) and len(sess.profile_events()) == 2
    sess.reset_profile()
    assert all(r["calls"] == 0 for r in sess.profile()) and sess.profile_events() == []
    sess.run(None, {"x": x})
    sess.run(None, {"x": x})
    events = sess.profile_events()
    assert [e[0] for e in events] == [r["node"] for r in sess.profile()] * 2
    assert all(dt > 0 for _, _, dt, _ in events)
