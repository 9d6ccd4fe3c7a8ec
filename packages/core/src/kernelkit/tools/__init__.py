"""The toolbox behind the ``kernelkit`` command, as a Python API.

    from kernelkit import tools
    tools.bench("model.onnx", batch=1, runs=50, profile=True)    # latency, profile, trace, onnxruntime
    tools.validate("model.onnx")                                  # against onnxruntime, per output
    tools.bisect("model.kkm", device="gpu")                       # the first node whose kernel is wrong
    tools.graph("model.kkm", "graph.svg")                         # the compiled graph as DOT/SVG/PNG

See docs/cli.md.
"""
from __future__ import annotations

from ._common import Comparison
from .bench import BenchResult, bench, latency_stats
from .bisect import BisectResult, NodeCheck, bisect
from .graph import graph, to_dot
from .validate import ValidateResult, validate

__all__ = ["BenchResult", "BisectResult", "Comparison", "NodeCheck", "ValidateResult", "bench", "bisect",
           "graph", "latency_stats", "to_dot", "validate"]
