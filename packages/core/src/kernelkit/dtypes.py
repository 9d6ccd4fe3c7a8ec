"""Dtype names kernelkit uses, and their NumPy equivalents."""
from __future__ import annotations

import numpy as np

from .errors import ShapeError

DTYPES = {
    "float16": np.float16,
    "float32": np.float32,
    "float64": np.float64,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "bool": np.bool_,
}

FLOAT_TYPES = ("float16", "float32", "float64")
INT_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
SIGNED_TYPES = FLOAT_TYPES + ("int8", "int16", "int32", "int64")
NUMERIC_TYPES = FLOAT_TYPES + INT_TYPES
ALL_TYPES = NUMERIC_TYPES + ("bool",)


def dtype_name(dtype) -> str:
    """Return kernelkit's name for a dtype given as a name, NumPy dtype or NumPy scalar type."""
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    try:
        name = np.dtype(dtype).name
    except TypeError as exc:
        raise ShapeError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}") from exc
    if name not in DTYPES:
        raise ShapeError(f"unsupported dtype {name!r}; known: {', '.join(DTYPES)}")
    return name


def to_numpy(dtype) -> np.dtype:
    """Return the NumPy dtype for a kernelkit dtype name."""
    return np.dtype(DTYPES[dtype_name(dtype)])
