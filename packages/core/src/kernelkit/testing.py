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
    node = helper.make_node(op, names, outs, domain=domain, **(attrs or {}))
    graph_inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype),
                                                  np.asarray(x).shape)
                    for n, x in zip(names, inputs) if n]
    graph_outputs = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outs]
    graph = helper.make_graph([node], "oracle", graph_inputs, graph_outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: np.asarray(x) for n, x in zip(names, inputs) if n}
    del numpy_helper
    return list(ReferenceEvaluator(model).run(None, feeds))
