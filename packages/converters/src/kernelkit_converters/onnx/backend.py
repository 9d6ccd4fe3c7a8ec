"""kernelkit as an ``onnx.backend.base.Backend``: runs ONNX's backend test data (``BackendTest``).

    from kernelkit_converters.onnx.backend import KernelkitBackend
    rep = KernelkitBackend.prepare(model_proto)          # reference vendor, fallback off
    outputs = rep.run([x])
    NumbaBackend = KernelkitBackend.for_vendor("numba")
"""
from __future__ import annotations

from typing import Any

import numpy as np
from kernelkit.errors import InputError, UnsupportedOpError
from kernelkit.session import Session
from onnx import ModelProto
from onnx.backend.base import Backend, BackendRep

from .importer import convert

VENDOR_DEVICES = {"reference": "cpu", "numba": "cpu", "opencl": "gpu"}


class KernelkitRep(BackendRep):
    """A prepared model: a kernelkit Session."""

    def __init__(self, session: Session):
        self.session = session

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        names = [i.name for i in self.session.get_inputs()]
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            inputs = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            if len(inputs) != len(names):
                raise InputError(f"the model takes {len(names)} inputs {names}, got {len(inputs)}")
            feeds = dict(zip(names, inputs))
        return tuple(self.session.run(None, feeds))


class KernelkitBackend(Backend):
    """Runs models on one kernelkit vendor with fallback off (so a test proves that vendor)."""

    vendor = "reference"
    device = "cpu"

    @classmethod
    def for_vendor(cls, vendor: str, device: str | None = None) -> type["KernelkitBackend"]:
        device = device or VENDOR_DEVICES.get(vendor, "cpu")
        return type(f"KernelkitBackend_{vendor}", (cls,), {"vendor": vendor, "device": device})

    @classmethod
    def session(cls, model: ModelProto, **kwargs) -> Session:
        return Session(convert(model, check=False), device=cls.device, vendors=[cls.vendor], fallback=False,
                       **kwargs)

    @classmethod
    def is_compatible(cls, model: ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        """The reference accepts everything (each failure counts); another vendor is compatible
        when it has a kernel for every node, so a missing kernel is not mistaken for a wrong one."""
        if cls.vendor == "reference":
            return True
        try:
            cls.session(model)
        except UnsupportedOpError as exc:
            return "no kernel" not in str(exc)
        except Exception:  # noqa: BLE001 - everything else fails in prepare, where it is reported
            return True
        return True

    @classmethod
    def prepare(cls, model: ModelProto, device: str = "CPU", **kwargs: Any) -> KernelkitRep:
        super().prepare(model, device, **kwargs)  # runs onnx.checker
        return KernelkitRep(cls.session(model))

    @classmethod
    def run_model(cls, model: ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return device == "CPU"  # ONNX's device names; the vendor decides where kernelkit runs


prepare = KernelkitBackend.prepare
run_model = KernelkitBackend.run_model
supports_device = KernelkitBackend.supports_device
