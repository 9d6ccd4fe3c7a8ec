"""Modules found rather than listed: a package's op or kernel modules are the files in its folder.

``import_submodules("kernelkit.ops")`` imports every module of the package in sorted name order
(so registration order, and any error, is the same on every machine), skipping private helpers
whose name starts with ``_``. A new op or kernel family is a new file; no list to keep.
"""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def submodules(package: str) -> list[str]:
    """Full names of the public modules (and subpackages) of ``package``, sorted."""
    pkg = importlib.import_module(package)
    names = sorted(info.name for info in pkgutil.iter_modules(pkg.__path__) if not info.name.startswith("_"))
    return [f"{package}.{name}" for name in names]


def import_submodules(package: str) -> list[ModuleType]:
    """Import the public modules of ``package`` (their imports register ops and kernels)."""
    return [importlib.import_module(name) for name in submodules(package)]
