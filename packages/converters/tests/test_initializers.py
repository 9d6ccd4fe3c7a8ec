"""Initializers in every storage form, and external data with its path rules (attack cases)."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from kernelkit.errors import ModelFormatError
from kernelkit_converters.onnx import convert
from onnx import TensorProto, helper, numpy_helper

W = np.arange(12, dtype=np.float32).reshape(3, 4) / 7


def _model(tensor: TensorProto) -> onnx.ModelProto:
    """y = Identity(w) with w the given initializer."""
    out = helper.make_tensor_value_info("y", tensor.data_type, list(tensor.dims))
    graph = helper.make_graph([helper.make_node("Identity", [tensor.name], ["y"])], "g", [], [out], [tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _weight(model) -> np.ndarray:
    return convert(model).graph.values["w"].data


@pytest.mark.parametrize("array", [
    W, W.astype(np.float16), W.astype(np.float64), np.arange(-3, 3, dtype=np.int64), np.arange(5, dtype=np.int32),
    np.arange(4, dtype=np.uint8), np.array([True, False, True]), np.int8(-4) * np.ones((2, 2), np.int8),
])
@pytest.mark.parametrize("raw", [True, False])
def test_storage_forms(array, raw):
    """raw_data and the typed fields (float16 lives in int32_data) read back exactly, read-only."""
    tensor = helper.make_tensor("w", helper.np_dtype_to_tensor_dtype(array.dtype), array.shape,
                                array.tobytes() if raw else array.ravel().tolist(), raw=raw)
    got = _weight(_model(tensor))
    np.testing.assert_array_equal(got, array)
    assert got.dtype == array.dtype and got.shape == array.shape and not got.flags.writeable


def test_scalar_initializer_keeps_rank_zero():
    got = _weight(_model(numpy_helper.from_array(np.array(2.5, np.float32), "w")))
    assert got.shape == () and got == np.float32(2.5)


def test_unsupported_dtype_names_the_tensor():
    tensor = helper.make_tensor("w", TensorProto.BFLOAT16, [2], [1.0, 2.0])
    with pytest.raises(ModelFormatError, match="'w'.*BFLOAT16"):
        convert(_model(tensor))


def test_value_count_mismatch_names_the_tensor():
    tensor = helper.make_tensor("w", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    tensor.float_data.append(4.0)
    with pytest.raises(ModelFormatError, match="'w'"):
        convert(_model(tensor), check=False)


# -- external data ------------------------------------------------------------------------------
def _external(folder: Path, location: str, array=W, offset=0, length=None, write=True, **extra) -> Path:
    """Write model.onnx in ``folder`` whose initializer w lives in ``location``."""
    folder.mkdir(parents=True, exist_ok=True)
    if write:
        target = folder / location
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"\0" * offset + array.tobytes())
    tensor = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=list(array.shape))
    tensor.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": str(offset), **extra}
    if length is not None:
        entries["length"] = str(length)
    for key, value in entries.items():
        tensor.external_data.add(key=key, value=value)
    path = folder / "model.onnx"
    path.write_bytes(_model(tensor).SerializeToString())
    return path


def test_external_data_from_the_model_folder(tmp_path):
    path = _external(tmp_path, "weights/w.bin", offset=16, length=W.nbytes,
                     checksum=hashlib.sha1(W.tobytes()).hexdigest())
    got = convert(path).graph.values["w"].data
    np.testing.assert_array_equal(got, W)
    assert not got.flags.writeable


def test_external_data_runs_in_a_session(tmp_path):
    import kernelkit

    path = _external(tmp_path, "w.bin")
    (y,) = kernelkit.Session(str(path)).run(None, {})
    np.testing.assert_array_equal(y, W)


ATTACKS = {
    "dotdot": ("../w.bin", "leaves the model's folder"),
    "dotdot_inside": ("sub/../../w.bin", "leaves the model's folder"),
    "absolute": ("/etc/passwd", "absolute path"),
    "windows_absolute": ("C:\\weights\\w.bin", "absolute path"),
    "missing": ("nothere.bin", "does not exist"),
}


@pytest.mark.parametrize("case", sorted(ATTACKS))
def test_external_location_attacks(tmp_path, case):
    location, message = ATTACKS[case]
    folder = tmp_path / "model"
    path = _external(folder, location, write=False)
    (tmp_path / "w.bin").write_bytes(W.tobytes())  # a real file just outside the folder
    with pytest.raises(ModelFormatError, match=f"'w'.*{message}"):
        convert(path)


def test_external_symlink_file_is_refused(tmp_path):
    (tmp_path / "secret.bin").write_bytes(W.tobytes())
    folder = tmp_path / "model"
    path = _external(folder, "w.bin", write=False)
    os.symlink(tmp_path / "secret.bin", folder / "w.bin")
    with pytest.raises(ModelFormatError, match="'w'.*symlink"):
        convert(path)


def test_external_symlinked_directory_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "w.bin").write_bytes(W.tobytes())
    folder = tmp_path / "model"
    path = _external(folder, "data/w.bin", write=False)
    os.symlink(tmp_path / "elsewhere", folder / "data")
    with pytest.raises(ModelFormatError, match="'w'.*symlink"):
        convert(path)


def test_external_hard_link_is_refused(tmp_path):
    (tmp_path / "secret.bin").write_bytes(W.tobytes())
    folder = tmp_path / "model"
    path = _external(folder, "w.bin", write=False)
    os.link(tmp_path / "secret.bin", folder / "w.bin")
    with pytest.raises(ModelFormatError, match="'w'.*hard-linked"):
        convert(path)


@pytest.mark.parametrize("offset,length,message", [
    (0, W.nbytes + 4, "outside"),            # range past the end of the file
    (0, W.nbytes - 4, "need"),               # byte count does not match the shape
    (0, None, None),                          # length absent: the rest of the file, which fits
])
def test_external_ranges(tmp_path, offset, length, message):
    path = _external(tmp_path, "w.bin", offset=offset, length=length)
    if message is None:
        np.testing.assert_array_equal(convert(path).graph.values["w"].data, W)
    else:
        with pytest.raises(ModelFormatError, match=f"'w'.*{message}"):
            convert(path)


def test_external_offset_past_end(tmp_path):
    path = _external(tmp_path, "w.bin")
    tensor = onnx.load(str(path), load_external_data=False)
    tensor.graph.initializer[0].external_data[1].value = str(10 * W.nbytes)
    path.write_bytes(tensor.SerializeToString())
    with pytest.raises(ModelFormatError, match="'w'.*past the end"):
        convert(path)


def test_external_file_too_short_for_the_shape(tmp_path):
    path = _external(tmp_path, "w.bin")
    (tmp_path / "w.bin").write_bytes(W.tobytes()[:-8])
    with pytest.raises(ModelFormatError, match="'w'.*need"):
        convert(path)


@pytest.mark.parametrize("key,value,message", [("offset", "-8", "negative"), ("offset", "ten", "not an integer"),
                                               ("checksum", "0" * 40, "checksum"), ("color", "red", "unknown")])
def test_external_bad_fields(tmp_path, key, value, message):
    path = _external(tmp_path, "w.bin", **({} if key == "offset" else {key: value}))
    if key == "offset":
        model = onnx.load(str(path), load_external_data=False)
        model.graph.initializer[0].external_data[1].value = value
        path.write_bytes(model.SerializeToString())
    with pytest.raises(ModelFormatError, match=f"'w'.*{message}"):
        convert(path)


def test_external_data_needs_a_folder_for_bytes(tmp_path):
    path = _external(tmp_path, "w.bin")
    with pytest.raises(ModelFormatError, match="'w'.*folder"):
        convert(path.read_bytes())
    np.testing.assert_array_equal(convert(path.read_bytes(), base_dir=tmp_path).graph.values["w"].data, W)


def test_convert_does_not_change_the_callers_proto(tmp_path):
    path = _external(tmp_path, "w.bin")
    proto = onnx.load(str(path), load_external_data=False)
    before = proto.SerializeToString()
    convert(proto, base_dir=tmp_path)
    assert proto.SerializeToString() == before


def test_external_location_that_is_a_directory(tmp_path):
    path = _external(tmp_path, "weights", write=False)
    (tmp_path / "weights").mkdir()
    with pytest.raises(ModelFormatError, match="'w'.*not a regular file"):
        convert(path)
