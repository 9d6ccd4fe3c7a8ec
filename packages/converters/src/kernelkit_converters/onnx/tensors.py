"""ONNX tensors (initializers, tensor attributes) to read-only NumPy arrays.

Every storage form goes through ``onnx.numpy_helper.to_array`` except external data, which is read
here so that the path rules hold: a file inside the model's folder, named by a relative path with no
``..``, not a symlink and not hard-linked, with offset/length inside the file and a byte count that
matches the tensor's shape. Each violation is a ModelFormatError naming the tensor.
"""
from __future__ import annotations

import hashlib
import logging
import os
import stat
from pathlib import Path, PurePosixPath, PureWindowsPath

import numpy as np
from kernelkit.dtypes import DTYPES
from kernelkit.errors import ModelFormatError, brief
from kernelkit.limits import MAX_ELEMENTS, checked_count
from onnx import TensorProto, helper, numpy_helper

log = logging.getLogger("kernelkit.converters.onnx")

_EXTERNAL_KEYS = {"location", "offset", "length", "checksum", "basepath"}


def numpy_dtype(elem_type: int, where: str) -> np.dtype:
    """The NumPy dtype of an ONNX element type, if kernelkit supports it."""
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError):
        dtype = None
    if dtype is None or dtype.name not in DTYPES:
        name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else elem_type
        raise ModelFormatError(f"{where}: element type {name} is not supported by kernelkit "
                               f"(supported: {', '.join(DTYPES)})")
    return dtype


def _readonly(array: np.ndarray) -> np.ndarray:
    if not array.flags.c_contiguous or not array.flags.owndata and array.base is not None and array.flags.writeable:
        array = array.copy()  # (np.ascontiguousarray would turn a 0-d array into 1-d)
    array.flags.writeable = False
    return array


def to_array(tensor: TensorProto, where: str, base_dir: Path | None = None) -> np.ndarray:
    """A read-only array holding ``tensor``; ``where`` names it in errors (e.g. "initializer 'w'")."""
    dtype = numpy_dtype(tensor.data_type, where)
    if tensor.data_location == TensorProto.EXTERNAL:
        return _readonly(read_external(tensor, dtype, where, base_dir))
    if tensor.HasField("segment"):
        raise ModelFormatError(f"{where}: segmented tensors are not supported")
    try:
        array = numpy_helper.to_array(tensor)
    except Exception as exc:  # onnx raises ValueError/TypeError on inconsistent fields
        raise ModelFormatError(f"{where}: cannot read tensor data ({type(exc).__name__}: {exc})") from exc
    shape = tuple(int(d) for d in tensor.dims)
    if array.shape != shape:
        raise ModelFormatError(f"{where}: data holds {array.size} values, dims {brief(list(shape))} need "
                               f"{checked_count(shape, 1 << 64) or 'more'}")
    return _readonly(array.astype(dtype, copy=False))


def _external_info(tensor: TensorProto, where: str) -> dict[str, str]:
    info = {}
    for entry in tensor.external_data:
        if entry.key not in _EXTERNAL_KEYS:
            raise ModelFormatError(f"{where}: unknown external_data key {entry.key!r}")
        info[entry.key] = entry.value
    if "location" not in info or not info["location"]:
        raise ModelFormatError(f"{where}: external data without a 'location'")
    return info


def _int_field(info: dict, key: str, where: str) -> int | None:
    if key not in info:
        return None
    try:
        value = int(info[key])
    except ValueError:
        raise ModelFormatError(f"{where}: external data {key} {info[key]!r} is not an integer") from None
    if value < 0:
        raise ModelFormatError(f"{where}: external data {key} {value} is negative")
    return value


def safe_external_path(location: str, base_dir: Path | None, where: str) -> Path:
    """Resolve ``location`` inside ``base_dir`` or raise ModelFormatError naming the tensor."""
    if base_dir is None:
        raise ModelFormatError(f"{where}: external data {location!r} needs the model's folder; "
                               f"convert the model from its file path (or pass base_dir=)")
    if "\x00" in location:
        raise ModelFormatError(f"{where}: external data location contains a NUL byte")
    posix, windows = PurePosixPath(location), PureWindowsPath(location)
    if posix.is_absolute() or windows.is_absolute() or windows.drive or location.startswith(("/", "\\")):
        raise ModelFormatError(f"{where}: external data location {location!r} is an absolute path")
    if ".." in posix.parts or ".." in windows.parts:
        raise ModelFormatError(f"{where}: external data location {location!r} leaves the model's folder ('..')")
    root = Path(os.path.realpath(base_dir))
    path = root.joinpath(*windows.parts)
    # a symlink anywhere below the model's folder (file or directory) is refused
    probe = path
    while probe != root:
        if probe.is_symlink():
            raise ModelFormatError(f"{where}: external data location {location!r} is a symlink ({probe.name})")
        probe = probe.parent
    if os.path.realpath(path) != str(path) or root not in path.parents:
        raise ModelFormatError(f"{where}: external data location {location!r} resolves outside the model's folder")
    if not path.exists():
        raise ModelFormatError(f"{where}: external data file {location!r} does not exist in {root}")
    return path


def _check_opened(fd: int, location: str, where: str) -> int:
    """Checks on the opened file itself (not its name, which could be swapped): a regular file with
    one link. Returns its size."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise ModelFormatError(f"{where}: external data location {location!r} is not a regular file")
    if st.st_nlink > 1:
        raise ModelFormatError(f"{where}: external data file {location!r} is hard-linked "
                               f"({st.st_nlink} links); copy it instead")
    return st.st_size


def read_external(tensor: TensorProto, dtype: np.dtype, where: str, base_dir: Path | None) -> np.ndarray:
    """Read an external-data tensor after checking its path, range and byte count."""
    info = _external_info(tensor, where)
    path = safe_external_path(info["location"], base_dir, where)
    offset = _int_field(info, "offset", where) or 0
    length = _int_field(info, "length", where)
    shape = tuple(int(d) for d in tensor.dims)
    if any(d < 0 for d in shape):
        raise ModelFormatError(f"{where}: negative dimension in dims {brief(list(shape))}")
    count = checked_count(shape)  # Python ints: an int64 product of [2**32, 2**32] wraps to 0
    if count is None:
        raise ModelFormatError(f"{where}: dims {brief(list(shape))} hold more than {MAX_ELEMENTS} elements")
    need = count * dtype.itemsize
    try:  # O_NONBLOCK: opening a FIFO would otherwise wait for a writer forever (fstat refuses it next)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ModelFormatError(f"{where}: cannot open external data {info['location']!r}: {exc}") from exc
    try:
        size = _check_opened(fd, info["location"], where)
    except ModelFormatError:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        if offset > size:
            raise ModelFormatError(f"{where}: external data offset {offset} is past the end of "
                                   f"{info['location']!r} ({size} bytes)")
        if length is None:
            length = size - offset
        if offset + length > size:
            raise ModelFormatError(f"{where}: external data range [{offset}, {offset + length}) is outside "
                                   f"{info['location']!r} ({size} bytes)")
        if length != need:
            raise ModelFormatError(f"{where}: external data holds {length} bytes, dims {list(shape)} of "
                                   f"{dtype.name} need {need}")
        f.seek(offset)
        data = f.read(length)
    if "checksum" in info and hashlib.sha1(data).hexdigest() != info["checksum"].lower():
        raise ModelFormatError(f"{where}: external data checksum mismatch in {info['location']!r}")
    return np.frombuffer(data, dtype=dtype.newbyteorder("<")).astype(dtype, copy=False).reshape(shape)
