"""``kernelkit validate``: run a model through kernelkit and through an oracle (onnxruntime itself,
or kernelkit's NumPy reference kernels) on the same inputs, and judge each output by its dtype's
tolerance (``kernelkit.testing.TOLERANCES``).

    from kernelkit.tools import validate
    result = validate("model.onnx", device="gpu")     # against onnxruntime
    result.passed, [(c.name, c.cosine, c.max_abs) for c in result.outputs]
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import progress
from ..errors import InputError
from ._common import Comparison, bind_inputs, compare, make_feeds, open_model, session_settings

ORACLES = ("onnxruntime", "reference")


@dataclass
class ValidateResult:
    model: str
    against: str
    device: str
    vendors: list | None
    inputs: dict
    outputs: list[Comparison] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.outputs)

    def to_json(self) -> dict:
        return {"model": self.model, "against": self.against, "device": self.device, "vendors": self.vendors,
                "inputs": self.inputs, "passed": self.passed, "outputs": [c.to_json() for c in self.outputs]}

    def write_json(self, path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")


def run_onnxruntime(onnx_path, feeds: dict, threads: int | None = None) -> dict[str, np.ndarray]:
    """All outputs of the ONNX file through onnxruntime's CPU provider, by name."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        from ..cli import MissingExtraError

        raise MissingExtraError(f"validating against onnxruntime needs it: pip install onnxruntime ({exc})") from exc
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    osess = ort.InferenceSession(str(onnx_path), opts, providers=["CPUExecutionProvider"])
    names = [i.name for i in osess.get_inputs()]
    outs = osess.run(None, {n: feeds[n] for n in names})
    return {o.name: np.asarray(a) for o, a in zip(osess.get_outputs(), outs)}


def run_reference(model, feeds: dict) -> dict[str, np.ndarray]:
    """All outputs through kernelkit's NumPy reference kernels, with no graph passes."""
    from ..session import Session

    sess = Session(model, device="cpu", vendors=("reference",), fallback=False, passes=False)
    return dict(zip(sess.graph.outputs, sess.run(None, feeds)))


def validate(model, *, against: str | None = None, device: str | None = None, vendors=None,
             threads: int | None = None, shapes=None, batch: int | None = None, inputs: dict | None = None,
             seed: int = 0, options: dict | None = None) -> ValidateResult:
    """Compare ``model`` (a Model or a .kkm/.onnx/deployment path) run by kernelkit (``device``,
    ``vendors``) with ``against``: ``"onnxruntime"`` (the default for ONNX files) or
    ``"reference"`` (the default otherwise). ``inputs`` gives arrays, the rest are random."""
    from ..session import Session

    src = open_model(model)
    if against is None:
        against = "onnxruntime" if src.onnx_path is not None else "reference"
    if against not in ORACLES:
        raise InputError(f"against must be one of {list(ORACLES)}, got {against!r}")
    if against == "onnxruntime" and src.onnx_path is None:
        raise InputError("validating against onnxruntime needs an .onnx MODEL; use --against reference")
    bind_inputs(src.model, shapes, batch, inputs)
    feeds = make_feeds(src.model, inputs, seed)
    settings = session_settings(src, options, device=device, vendors=vendors, threads=threads)
    with progress.task("kernelkit: building and running (first-run compilation)"):
        sess = Session(src.model, **settings)
        got = dict(zip(sess.graph.outputs, sess.run(None, feeds)))
    with progress.task(f"{against}: running"):
        want = run_onnxruntime(src.onnx_path, feeds, threads) if against == "onnxruntime" \
            else run_reference(src.model, feeds)
    missing = [n for n in got if n not in want]
    if missing:
        raise InputError(f"{against} has no output(s) {missing}; it has {sorted(want)}")
    result = ValidateResult(str(src.path) if src.path else sess.graph.name, against, sess.device_name,
                            list(sess.vendors) if sess.vendors else None,
                            {n: {"shape": list(a.shape), "dtype": a.dtype.name} for n, a in feeds.items()})
    tolerances = getattr(src.deployment, "tolerance", None)
    result.outputs = [compare(name, got[name], want[name], tolerances) for name in got]
    return result


def deployment_oracle_inputs(dep) -> tuple[bool, dict | None]:
    """Whether a deployment's ``--validate`` needs an oracle (its validation data names no expected
    outputs, or it has none), and the inputs its validation data gives (None: random)."""
    from ._common import load_inputs

    if dep.validation_data is None:
        return True, None
    arrays = load_inputs(dep.validation_data)
    outputs = set(dep.model().graph.outputs)
    if outputs & set(arrays):
        return False, None
    return True, arrays


def render(result: ValidateResult, console) -> None:
    from rich.table import Table
    from rich.text import Text

    vendors = ",".join(result.vendors) if result.vendors else "any"
    table = Table(title=f"{result.model}: kernelkit ({result.device}/{vendors}) vs {result.against}")
    for col in ("output", "dtype", "shape", "cosine", "max abs error", "max rel error", "rtol", "atol", "result"):
        table.add_column(col)
    for c in result.outputs:
        table.add_row(c.name, c.dtype, str(list(c.shape)), f"{c.cosine:.8f}", f"{c.max_abs:.3g}", f"{c.max_rel:.3g}",
                      f"{c.rtol:g}", f"{c.atol:g}",
                      Text("pass", style="green") if c.passed else Text("FAIL", style="bold red"))
    console.print(table)
    shapes = ", ".join(f"{n} {v['dtype']}{v['shape']}" for n, v in result.inputs.items())
    console.print(f"inputs: {shapes}; {'all outputs within tolerance' if result.passed else 'FAILED'}")
