"""Environment switches that kernels read on every call (so that a test or a user may change them
between calls) and check once per raw value."""
from __future__ import annotations

import os

from kernelkit.errors import ConfigError


def reader(name: str):
    """A callable returning the environment variable ``name``'s raw value (bytes or str; None when
    unset) on every call: ``os.environ``'s own dict where it has one (~0.05 us; ``os.environ.get``
    of an unset name raises and catches a KeyError inside, 1-3 us), else ``os.environ.get``."""
    data, encode = getattr(os.environ, "_data", None), getattr(os.environ, "encodekey", None)
    if isinstance(data, dict) and encode is not None:
        key = encode(name)
        return lambda: data.get(key)
    return lambda: os.environ.get(name)


def choice(raw, name: str, choices) -> str:
    """``raw`` (from ``reader``) as one of ``choices``, lower-cased; unset or blank is ``auto``. Any
    other value is a ConfigError naming the variable and the choices."""
    if isinstance(raw, bytes):
        raw = os.fsdecode(raw)
    value = (raw or "auto").strip().lower() or "auto"
    if value not in choices:
        raise ConfigError(f"${name}={value!r}: expected one of {', '.join(choices)}")
    return value
