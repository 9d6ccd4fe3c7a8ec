"""ONNX -> kernelkit: ``convert(path | bytes | onnx.ModelProto) -> kernelkit.Model``.

Importing this package registers the converter-side graph passes (``passes.py``); per-op mapping
lives in the handler table (``handlers/``), extendable with ``register_handler``.
"""
from __future__ import annotations

from . import passes  # noqa: F401  (registers the converter passes)
from .handlers import ConvertContext, OnnxNode, register_handler
from .importer import convert

__all__ = ["ConvertContext", "OnnxNode", "convert", "register_handler"]
