"""Deployment files: one YAML file saying how to run one model (in the spirit of MACE's).

    # digits.yml
    name: digits
    model: digits.kkm            # relative to this file's folder, must stay inside it
    model_sha256: 3b1f...        # optional: checked before loading
    device: cpu
    vendors: [numba, reference]  # optional preference order
    fallback: true
    threads: 2
    passes: true                 # true (defaults), false (none) or a list of pass names
    options: {}                  # passed to devices and class kernels
    inputs:
      - name: x
        shape: [N, 1, 8, 8]      # ints fix a dimension; strings keep it symbolic
        dtype: float32
    validation:
      data: test.npz             # model inputs and expected outputs, keyed by value name
      tolerance:
        float32: {rtol: 1.0e-4, atol: 1.0e-5}

Only ``yaml.safe_load`` is used (through ``untrusted.load_yaml``, which refuses alias bombs).
Unknown keys and wrong types raise ConfigError naming the file and the key;
``load_deployment(path).session()`` builds the Session.
"""
from __future__ import annotations

import hashlib
import logging
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .dtypes import DTYPES
from .errors import ConfigError, brief
from .ir import Model, TensorSpec
from .limits import MAX_DIM, MAX_THREADS
from .testing import TOLERANCES, cosine
from .untrusted import YamlBombError, load_yaml, open_regular, read_npz

log = logging.getLogger("kernelkit.deploy")

SCHEMA_VERSION = 1


@dataclass
class InputDecl:
    name: str
    shape: tuple | None = None
    dtype: str | None = None


@dataclass
class OutputCheck:
    """One output compared against the validation data."""

    name: str
    dtype: str
    max_abs_error: float
    cosine: float
    rtol: float
    atol: float
    passed: bool


@dataclass
class Deployment:
    path: Path
    model_path: Path
    name: str = ""
    model_sha256: str | None = None
    device: str = "cpu"
    vendors: tuple[str, ...] | None = None
    fallback: bool = True
    threads: int | None = None
    passes: Any = None
    options: dict = field(default_factory=dict)
    inputs: list[InputDecl] = field(default_factory=list)
    validation_data: Path | None = None
    tolerance: dict[str, tuple[float, float]] = field(default_factory=dict)

    def model(self) -> Model:
        """Load the model file, check its checksum if given, and apply the declared inputs."""
        from .loaders import load_model

        if self.model_sha256 is not None:
            digest = _sha256(self.model_path, self.path)
            if digest != self.model_sha256.lower():
                raise ConfigError(f"{self.path}: model_sha256 does not match {self.model_path.name} "
                                  f"(file has {digest})")
        model = load_model(self.model_path)
        self._apply_inputs(model)
        return model

    def _apply_inputs(self, model: Model) -> None:
        graph = model.graph
        for i, decl in enumerate(self.inputs):
            where = f"{self.path}: inputs[{i}]"
            if decl.name not in graph.inputs:
                raise ConfigError(f"{where}.name: model has no input {decl.name!r}; its inputs are {graph.inputs}")
            spec = graph.values[decl.name].spec
            if decl.dtype is not None and decl.dtype != spec.dtype:
                raise ConfigError(f"{where}.dtype: {decl.dtype} does not match the model's {spec.dtype}")
            if decl.shape is None:
                continue
            if len(decl.shape) != spec.rank:
                raise ConfigError(f"{where}.shape: {list(decl.shape)} has rank {len(decl.shape)}, "
                                  f"model input is {spec}")
            for want, have in zip(decl.shape, spec.shape):
                if isinstance(have, int) and want != have:
                    raise ConfigError(f"{where}.shape: {list(decl.shape)} does not fit the model's {spec}")
            graph.values[decl.name].spec = TensorSpec(decl.shape, spec.dtype, spec.layout)

    def session(self, **overrides):
        """A Session configured by this file; keyword arguments override its settings."""
        from .passes import passes as registered_passes
        from .session import Session

        if isinstance(self.passes, list):
            known = {p.name for p in registered_passes()}
            unknown = [p for p in self.passes if p not in known]
            if unknown:
                raise ConfigError(f"{self.path}: passes: unknown pass(es) {unknown}; registered: {sorted(known)}")
        kwargs = dict(device=self.device, vendors=self.vendors, fallback=self.fallback, threads=self.threads,
                      passes=self.passes, options=dict(self.options))
        kwargs.update(overrides)
        return Session(self.model(), **kwargs)

    def validate(self, session=None) -> list[OutputCheck]:
        """Run the validation data through ``session`` (default: ``self.session()``) and compare each
        output present in the data with the tolerance for its dtype."""
        if self.validation_data is None:
            raise ConfigError(f"{self.path}: no validation data configured (key 'validation')")
        session = session or self.session()
        try:  # headers checked against the data before allocating, no pickles
            arrays = read_npz(self.validation_data, f"validation.data {self.validation_data.name}")
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{self.path}: validation.data {self.validation_data.name}: cannot read: {exc}") from exc
        feeds = {i.name: arrays[i.name] for i in session.get_inputs() if i.name in arrays}
        missing = [i.name for i in session.get_inputs() if i.name not in arrays]
        outputs = [o.name for o in session.get_outputs() if o.name in arrays]
        if missing or not outputs:
            raise ConfigError(f"{self.path}: validation.data {self.validation_data.name} must hold every input "
                              f"{[i.name for i in session.get_inputs()]} and at least one output "
                              f"{[o.name for o in session.get_outputs()]}; it has {sorted(arrays)}")
        results = session.run(outputs, feeds)
        checks = []
        for name, got in zip(outputs, results):
            want = arrays[name]
            rtol, atol = self.tolerance.get(got.dtype.name, TOLERANCES.get(got.dtype.name, (0.0, 0.0)))
            same_shape = got.shape == want.shape
            err = float(np.max(np.abs(got.astype(np.float64) - want), initial=0.0)) if same_shape else float("inf")
            ok = same_shape and bool(np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True))
            checks.append(OutputCheck(name, got.dtype.name, err, cosine(got, want) if same_shape else 0.0,
                                      rtol, atol, ok))
        return checks


def _sha256(path: Path, config: Path) -> str:
    digest = hashlib.sha256()
    try:
        with open_regular(path) as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        raise ConfigError(f"{config}: model: cannot read {path}: {exc}") from exc
    return digest.hexdigest()


# -- parsing -----------------------------------------------------------------------------------
class _Fields:
    """Pops typed keys from one mapping of the YAML; leftovers are unknown keys."""

    def __init__(self, path: Path, data, where: str):
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: {where or 'top level'}: expected a mapping, got {type(data).__name__}")
        self.path, self.data, self.where = path, dict(data), where

    def key(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def error(self, name: str, message: str) -> ConfigError:
        return ConfigError(f"{self.path}: {self.key(name)}: {message}")

    def take(self, name: str, kind, default: Any = ..., what: str | None = None):
        if name not in self.data:
            if default is ...:
                raise self.error(name, "required key is missing")
            return default
        value = self.data.pop(name)
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            raise self.error(name, f"expected {what or kinds[0].__name__}, got {type(value).__name__} {brief(value)}")
        return value

    def done(self) -> None:
        if self.data:
            raise ConfigError(f"{self.path}: unknown key(s) {[self.key(k) for k in sorted(map(str, self.data))]}")


def _inside(folder: Path, rel, f: _Fields, name: str) -> Path:
    """Resolve ``rel`` against ``folder``; it must not be absolute or escape the folder."""
    try:
        if Path(rel).is_absolute():
            raise f.error(name, f"{brief(rel)} must be a path relative to the deployment file's folder")
        target = (folder / rel).resolve()
        if not target.is_relative_to(folder.resolve()):
            raise f.error(name, f"{brief(rel)} escapes the deployment file's folder {folder}")
        if not target.is_file():
            raise f.error(name, f"{brief(rel)} does not exist ({target})")
    except (OSError, ValueError) as exc:  # a NUL byte, a name too long for the file system...
        raise f.error(name, f"{brief(rel)} is not a usable path: {exc}") from None
    return target


def _string_list(f: _Fields, name: str):
    items = f.take(name, list, None, "a list of strings")
    if items is not None and not all(isinstance(s, str) for s in items):
        raise f.error(name, "expected a list of strings")
    return items


def _inputs(path: Path, items) -> list[InputDecl]:
    decls = []
    for i, item in enumerate(items):
        f = _Fields(path, item, f"inputs[{i}]")
        name = f.take("name", str)
        shape = f.take("shape", list, None, "a list of ints and symbol names")
        if shape is not None and not all((isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_DIM)
                                         or (isinstance(d, str) and d) for d in shape):
            raise f.error("shape", f"{brief(shape)} must hold non-negative ints or symbol names")
        dtype = f.take("dtype", str, None)
        if dtype is not None and dtype not in DTYPES:
            raise f.error("dtype", f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
        f.done()
        decls.append(InputDecl(name, tuple(shape) if shape is not None else None, dtype))
    return decls


def _tolerance(f: _Fields) -> dict[str, tuple[float, float]]:
    table = _Fields(f.path, f.take("tolerance", dict, {}), f.key("tolerance"))
    out = {}
    for dtype in list(table.data):
        if dtype not in DTYPES:
            raise table.error(str(dtype), f"unknown dtype; known: {', '.join(DTYPES)}")
        entry = _Fields(f.path, table.take(dtype, dict), table.key(dtype))
        rtol = entry.take("rtol", (float, int), 0.0, "a number")
        atol = entry.take("atol", (float, int), 0.0, "a number")
        if not (0 <= rtol < math.inf and 0 <= atol < math.inf):  # NaN or inf would pass anything
            raise entry.error("rtol", "tolerances must be finite and non-negative")
        entry.done()
        out[dtype] = (float(rtol), float(atol))
    return out


def load_deployment(path) -> Deployment:
    """Parse and check a deployment YAML; see the module docstring for the keys."""
    import yaml

    path = Path(path)
    try:
        with open_regular(path) as fh:
            text = fh.read().decode("utf-8")
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path, or not UTF-8
        raise ConfigError(f"{path}: cannot read deployment file: {exc}") from exc
    try:
        data = load_yaml(text)  # yaml.SafeLoader, aliases bounded
    except (yaml.YAMLError, RecursionError, YamlBombError) as exc:  # RecursionError: absurdly deep nesting
        raise ConfigError(f"{path}: invalid YAML: {type(exc).__name__}: {exc}") from exc
    f = _Fields(path, data, "")
    folder = path.parent
    version = f.take("version", int, SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise f.error("version", f"unknown deployment file version {version} (this kernelkit reads {SCHEMA_VERSION})")
    name = f.take("name", str, path.stem)
    model_path = _inside(folder, f.take("model", str), f, "model")
    sha = f.take("model_sha256", str, None, "a quoted sha256 hex string")
    if sha is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", sha):
        raise f.error("model_sha256", f"{brief(sha)} is not 64 hex digits")
    device = f.take("device", str, "cpu")
    vendors = _string_list(f, "vendors")
    fallback = f.take("fallback", bool, True)
    threads = f.take("threads", (int, type(None)), None, "a positive int")
    if threads is not None and not 1 <= threads <= MAX_THREADS:
        raise f.error("threads", f"must be >= 1 and <= {MAX_THREADS}, got {brief(threads)}")
    passes = f.take("passes", (bool, list, type(None)), None, "true, false or a list of pass names")
    if isinstance(passes, list) and not all(isinstance(p, str) for p in passes):
        raise f.error("passes", "expected a list of pass names")
    options = f.take("options", dict, {})
    inputs = _inputs(path, f.take("inputs", list, []))
    validation_data, tolerance = None, {}
    if "validation" in f.data:
        v = _Fields(path, f.take("validation", dict), "validation")
        validation_data = _inside(folder, v.take("data", str), v, "data")
        tolerance = _tolerance(v)
        v.done()
    f.done()
    return Deployment(path, model_path, name, sha, device, tuple(vendors) if vendors is not None else None,
                      fallback, threads, passes, options, inputs, validation_data, tolerance)


def is_deployment(path) -> bool:
    return Path(path).suffix.lower() in (".yml", ".yaml")


__all__ = ["Deployment", "InputDecl", "OutputCheck", "is_deployment", "load_deployment"]
