"""One error hierarchy for everything kernelkit raises on bad input.

Every error carries a stable ``code`` (for programs) and a message that names the node, file or key
it is about (for people).
"""
from __future__ import annotations


class KernelkitError(Exception):
    """Base class of every error kernelkit raises on purpose."""

    code = "KK_ERROR"


class ModelFormatError(KernelkitError):
    """A model file or IR structure is malformed, corrupt or unsafe."""

    code = "KK_MODEL_FORMAT"


class LoaderNotFoundError(ModelFormatError):
    """No installed loader reads a model file's format (its suffix)."""

    code = "KK_NO_LOADER"


class ShapeError(KernelkitError):
    """Shapes or dtypes do not fit an op's rule."""

    code = "KK_SHAPE"


class TensorTooLargeError(ShapeError):
    """A kernel would allocate a tensor, sized from run-time values, over ``limits.max_tensor_bytes()``."""

    code = "KK_TENSOR_TOO_LARGE"


class OpAttributeError(KernelkitError):
    """An attribute is unknown, missing or of the wrong type."""

    code = "KK_ATTRIBUTE"


class UnsupportedOpError(KernelkitError):
    """No schema, or no kernel, exists for an op."""

    code = "KK_UNSUPPORTED_OP"


class InputError(KernelkitError):
    """A feed passed to ``Session.run`` does not match the model's inputs."""

    code = "KK_INPUT"


class KernelBuildError(KernelkitError):
    """A kernel could not be prepared or compiled (e.g. an OpenCL build log)."""

    code = "KK_KERNEL_BUILD"


class KernelExecutionError(KernelkitError):
    """A kernel failed while running a node."""

    code = "KK_KERNEL_EXECUTION"


class DeviceError(KernelkitError):
    """A device is missing, unusable or was asked for in an unsupported way."""

    code = "KK_DEVICE"


class BackendUnavailableError(DeviceError):
    """The backend that provides a requested device is not installed or found no hardware."""

    code = "KK_BACKEND_UNAVAILABLE"


class RegistryError(KernelkitError):
    """A registration conflicts with an existing one or is malformed."""

    code = "KK_REGISTRY"


class ConfigError(KernelkitError):
    """A configuration file (deployment YAML, custom-kernel config) is malformed."""

    code = "KK_CONFIG"


def _make_repr():
    import reprlib

    r = reprlib.Repr()
    r.maxlevel, r.maxlist, r.maxtuple, r.maxdict, r.maxset = 3, 8, 8, 6, 6
    r.maxstring, r.maxother, r.maxlong = 60, 60, 40
    return r


_REPR = _make_repr()


def brief(value, limit: int = 120) -> str:
    """``repr(value)`` for an error message, bounded in time and length whatever ``value`` is.

    ``f"{value!r:.80}"`` builds the whole repr before cutting it, which for a YAML alias bomb or a
    huge list takes minutes and gigabytes; ``reprlib`` stops at a few items and levels instead."""
    try:
        text = _REPR.repr(value)
    except Exception:  # noqa: BLE001 - a hostile __repr__ must not replace the real error
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


class KernelkitWarning(UserWarning):
    """Base class of every warning kernelkit gives (filter it, or turn it into an error)."""


class FallbackWarning(KernelkitWarning):
    """A Session placed nodes on another device or vendor than the one asked for
    (``Session.fallbacks()`` lists them)."""
