"""Tolerances, in one place, per dtype, and the comparison every test uses."""
from __future__ import annotations

import numpy as np

# dtype -> (rtol, atol). Never loosen these to make a test pass: find the bug.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-2, 1e-3),
    "float32": (1e-4, 1e-5),
    "float64": (1e-10, 1e-12),
}
# whole-model agreement with an external runtime (onnxruntime)
MODEL_COSINE = 0.99999


def tolerance(dtype) -> tuple[float, float]:
    """(rtol, atol) for a dtype; exact for integer and bool dtypes."""
    return TOLERANCES.get(np.dtype(dtype).name, (0.0, 0.0))


def assert_close(actual, expected, dtype=None, err_msg: str = "") -> None:
    """Assert ``actual`` matches ``expected`` within the dtype's tolerance; shapes and dtypes too.

    Relative error is measured against the magnitude of ``expected`` as a whole (``atol`` is
    scaled by max|expected| when that exceeds 1) so that large accumulations are judged fairly."""
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"{err_msg} shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{err_msg} dtype {actual.dtype} != {expected.dtype}"
    rtol, atol = tolerance(dtype or expected.dtype)
    if rtol == 0 and atol == 0:
        np.testing.assert_array_equal(actual, expected, err_msg=err_msg)
        return
    scale = float(np.max(np.abs(expected[np.isfinite(expected)]), initial=0.0)) if expected.size else 0.0
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol * max(1.0, scale), err_msg=err_msg)


def cosine(a, b) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / denom) if denom else float(np.array_equal(a, b))


# -- single-op harness shared by the op tests, the conformance suite and backends' tests ----------
ONNX_OPSET = 21  # core ops take their inputs and attributes as ONNX opset 21 defines them


def single_op_model(op: str, inputs, attrs: dict | None = None, n_outputs: int | None = None,
                    constants=(), domain: str = ""):
    """A Model with one node. ``inputs`` are arrays or None (absent optional input); inputs whose
    index is in ``constants`` become graph constants, the others graph inputs named in0, in1..."""
    from .builder import GraphBuilder

    g = GraphBuilder(f"single_{op}")
    args = []
    for i, x in enumerate(inputs):
        if x is None:
            args.append(None)
        elif i in constants:
            args.append(g.constant(np.asarray(x), name=f"in{i}"))
        else:
            x = np.asarray(x)
            args.append(g.input(f"in{i}", x.shape, x.dtype.name))
    out = g.op(op, *args, domain=domain, outputs=n_outputs, **(attrs or {}))
    g.output(*(out if isinstance(out, tuple) else (out,)))
    return g.build()


def run_single_op(op: str, inputs, attrs: dict | None = None, n_outputs: int | None = None,
                  constants=(), domain: str = "", **session_kwargs) -> list[np.ndarray]:
    """Run one op through a full Session (shape inference, selection, transfers) and return outputs."""
    from .session import Session

    model = single_op_model(op, inputs, attrs, n_outputs, constants, domain)
    sess = Session(model, **session_kwargs)
    feeds = {f"in{i}": np.asarray(x) for i, x in enumerate(inputs) if x is not None and i not in constants}
    return sess.run(None, feeds)


def onnx_reference_run(op: str, inputs, attrs: dict | None = None, n_outputs: int = 1,
                       opset: int = ONNX_OPSET, domain: str = "") -> list[np.ndarray]:
    """Run one ONNX node with ``onnx.reference.ReferenceEvaluator`` (the external oracle)."""
    import onnx
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    names = [f"in{i}" if x is not None else "" for i, x in enumerate(inputs)]
    while names and names[-1] == "":
        names.pop()
    outs = [f"out{i}" for i in range(n_outputs)]
    attrs = {k: numpy_helper.from_array(v) if isinstance(v, np.ndarray) else v for k, v in (attrs or {}).items()}
    node = helper.make_node(op, names, outs, domain=domain, **attrs)
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype),
                                                  np.asarray(x).shape)
                    for n, x in zip(names, inputs) if n]
    graph_outputs = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outs]
    graph = helper.make_graph([node], "oracle", graph_inputs, graph_outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: np.asarray(x) for n, x in zip(names, inputs) if n}
    return list(ReferenceEvaluator(model).run(None, feeds))


def sample_cases(op: str, dtype: str, seed: int = 0, domain: str = "") -> list[tuple[list, dict, dict]]:
    """The op's ``samples(rng, dtype)`` as ``(inputs, attrs, options)`` triples. A sample may
    yield a third element, a dict of ``run_single_op`` options (``n_outputs`` for ops with variadic
    outputs such as Split, ``constants``); it defaults to ``{}``. Ops without samples give []."""
    from .registry import get_schema

    schema = get_schema(op, domain)
    if schema.samples is None:
        return []
    rng = np.random.default_rng(seed)
    return [(list(case[0]), dict(case[1]), dict(case[2]) if len(case) > 2 else {})
            for case in schema.samples(rng, dtype)]


def check_against_onnx(op: str, inputs, attrs: dict | None = None, n_outputs: int | None = None,
                       constants=(), opset: int = ONNX_OPSET, domain: str = "", **session_kwargs) -> list[np.ndarray]:
    """Run one op through a Session and through onnx's ReferenceEvaluator and assert that they
    agree (``assert_close``), and that each inferred output spec fits the actual output (same
    dtype and rank, equal static dims; symbolic dims match anything). Returns the outputs."""
    from .registry import get_schema
    from .session import Session

    schema = get_schema(op, domain)
    n = n_outputs or sum(1 for p in schema.outputs if not p.optional) or 1
    sess = Session(single_op_model(op, inputs, attrs, n, constants, domain), **session_kwargs)
    got = sess.run(None, {f"in{i}": np.asarray(x) for i, x in enumerate(inputs)
                          if x is not None and i not in constants})
    want = onnx_reference_run(op, inputs, attrs, n, opset, domain)
    for i, (actual, expected, spec) in enumerate(zip(got, want, sess.get_outputs())):
        where = f"{op} {attrs or {}} output {i}:"
        assert_close(actual, expected, err_msg=where)
        fits = spec.dtype == actual.dtype.name and len(spec.shape) == actual.ndim and all(
            isinstance(d, str) or d == a for d, a in zip(spec.shape, actual.shape))
        assert fits, f"{where} inferred {spec.type}{list(spec.shape)} but got {actual.dtype}{list(actual.shape)}"
    return got


def isolate_registries(monkeypatch) -> None:
    """Make every op, kernel, device and pass a test registers disappear after the test.

    Installed backends are loaded first: otherwise the first Session inside the test would load
    them into the throwaway copies and they would be missing for every later test."""
    from . import devices, loaders, passes, registry
    from .backends import load_backends

    load_backends()
    monkeypatch.setattr(registry, "_OPS", dict(registry._OPS))
    monkeypatch.setattr(registry, "_KERNELS", dict(registry._KERNELS))
    monkeypatch.setattr(devices, "_FACTORIES", dict(devices._FACTORIES))
    monkeypatch.setattr(passes, "_PASSES", list(passes._PASSES))
    monkeypatch.setattr(loaders, "_LOADERS", dict(loaders._LOADERS))


def child_venv(path):
    """Create a virtual environment at ``path`` that sees every package the *running* interpreter
    sees, and return its ``python``.

    ``python -m venv --system-site-packages`` alone exposes the *base* interpreter's site-packages:
    run from inside a venv (or tox), the packages installed there (kernelkit, hatchling, rich, ...)
    would be missing. A ``.pth`` file in the child adds the running interpreter's site directories
    with ``site.addsitedir`` (so their own ``.pth`` files, editable installs included, apply too),
    after the child's own site-packages: what is installed into the child wins. No network is used.
    """
    import site
    import subprocess
    import sys
    import sysconfig
    from pathlib import Path

    path = Path(path)
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)],
                   check=True, capture_output=True)
    python = path / ("Scripts" if sys.platform == "win32" else "bin") / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    dirs = [*site.getsitepackages(), sysconfig.get_path("purelib"), sysconfig.get_path("platlib")]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    seen = []
    for d in dirs:
        if d and d not in seen and Path(d).is_dir() and Path(d).resolve() != Path(purelib).resolve():
            seen.append(d)
    lines = "".join(f"import site; site.addsitedir({d!r})\n" for d in seen)
    (Path(purelib) / "_kernelkit_parent_site.pth").write_text(lines)
    return python
