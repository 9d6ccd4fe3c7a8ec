"""Model loaders, found by file suffix: ``kernelkit.load_model(path)``.

Core reads its own IR file (``.kkm``). Any other format comes from a package that declares a loader
in the ``kernelkit.loaders`` entry-point group, named by the suffix it reads::

    [project.entry-points."kernelkit.loaders"]
    ".onnx" = "kernelkit_converters.onnx:convert"

A loader is a callable ``load(path) -> Model``. Core never imports such a package by name: the
entry point is resolved when a file with that suffix is loaded. A suffix nobody reads is a
``LoaderNotFoundError`` that names the package to install, when kernelkit knows of one.
"""
from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path

from .errors import LoaderNotFoundError, ModelFormatError, RegistryError
from .ir import Model

log = logging.getLogger("kernelkit.loaders")

GROUP = "kernelkit.loaders"
# suffix -> the package that reads it, for the error when none is installed
KNOWN_PACKAGES = {".onnx": "kernelkit-converters (pip install '.[converters]' from the checkout)"}

_lock = threading.RLock()
_LOADERS: dict[str, Callable] = {}  # registered in-process (core's own .kkm, tests, scripts)


def _suffix(text: str) -> str:
    suffix = text.lower() if text.startswith(".") else "." + text.lower()
    if len(suffix) < 2 or any(c in suffix[1:] for c in "./\\"):
        raise RegistryError(f"a loader suffix looks like '.onnx', got {text!r}")
    return suffix


def register_loader(suffix: str, fn: Callable | None = None, *, override: bool = False):
    """Register ``fn(path) -> Model`` for files ending in ``suffix`` in this process (usable as a
    decorator). Installed packages use the ``kernelkit.loaders`` entry-point group instead."""
    key = _suffix(suffix)

    def decorate(f):
        if not callable(f):
            raise RegistryError(f"loader for {key!r} must be callable, got {f!r:.60}")
        with _lock:
            if key in _LOADERS and not override:
                raise RegistryError(f"a loader for {key!r} is already registered; pass override=True to replace it")
            _LOADERS[key] = f
        return f

    return decorate(fn) if fn is not None else decorate


def _entry_point(suffix: str):
    found = [ep for ep in entry_points(group=GROUP) if ep.name.lower() == suffix]
    if len(found) > 1:
        log.warning("several %s entry points read %r: %s; using the first", GROUP, suffix,
                    ", ".join(ep.value for ep in found))
    return found[0] if found else None


def loader_for(suffix: str) -> Callable:
    """The loader for ``suffix``: registered in-process first, then the entry-point group."""
    key = _suffix(suffix)
    with _lock:
        fn = _LOADERS.get(key)
    if fn is not None:
        return fn
    ep = _entry_point(key)
    hint = KNOWN_PACKAGES.get(key)
    if ep is None:
        raise LoaderNotFoundError(
            f"no model loader reads {key!r} files; "
            + (f"install {hint}" if hint else f"a package adds one through the {GROUP!r} entry-point group")
            + f" (loaders installed: {', '.join(suffixes())})")
    try:
        return ep.load()
    except ImportError as exc:
        raise LoaderNotFoundError(f"the loader for {key!r} files ({ep.value}) cannot be imported: {exc}"
                                  + (f"; install {hint}" if hint else "")) from exc


def suffixes() -> list[str]:
    """The suffixes some loader reads."""
    with _lock:
        known = set(_LOADERS)
    return sorted(known | {ep.name.lower() for ep in entry_points(group=GROUP)})


def load_model(path) -> Model:
    """Read the model file at ``path`` with the loader for its suffix (``.kkm``: kernelkit's IR
    file; ``.onnx`` with the converters package; more through plugins)."""
    if isinstance(path, Model):
        return path
    if not isinstance(path, (str, os.PathLike)):
        raise ModelFormatError(f"expected a Model or a path, got {type(path).__name__}")
    file = Path(path)
    if not file.suffix:
        raise ModelFormatError(f"{file}: not a model file: {'a folder' if file.is_dir() else 'no suffix'} "
                               f"(loaders read: {', '.join(suffixes())})")
    model = loader_for(file.suffix)(file)
    if not isinstance(model, Model):
        raise ModelFormatError(f"{file}: the loader for {file.suffix.lower()!r} returned "
                               f"{type(model).__name__}, not a kernelkit Model")
    return model


def _load_kkm(path) -> Model:
    from .io import load

    return load(path)


register_loader(".kkm", _load_kkm)
