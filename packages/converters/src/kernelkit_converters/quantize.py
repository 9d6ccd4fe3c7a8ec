"""Quantize a float ONNX model to int8 with onnxruntime's quantizer (``onnxruntime.quantization``).

kernelkit does not calibrate or choose scales itself: onnxruntime's tool does, and kernelkit runs
what it writes (docs/quantization.md).

    from kernelkit_converters.quantize import quantize
    quantize("mlp.onnx", "mlp.int8.onnx", mode="dynamic")
    quantize("resnet18.onnx", "resnet18.int8.onnx", mode="static", calibration="calib/")

- ``dynamic``: ``quantize_dynamic`` (weights int8 ahead of time; activations quantized per run by
  DynamicQuantizeLinear; MatMul -> MatMulInteger, Conv -> ConvInteger).
- ``static``: ``quant_pre_process`` (shape inference, BatchNorm folding) then ``quantize_static`` in
  QDQ format with per-channel weights, calibrated on ``calibration``: a folder of ``.npy`` files
  (one sample each, for a one-input model) or ``.npz`` files (one sample each, arrays named by the
  model's inputs), read with ``allow_pickle=False``; or an iterable of feed dicts.
"""
from __future__ import annotations

import logging
import tempfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from kernelkit.errors import ConfigError, KernelkitError, ModelFormatError

log = logging.getLogger("kernelkit.converters.quantize")

MODES = ("dynamic", "static")


class MissingQuantizerError(KernelkitError):
    """onnxruntime (whose quantizer does the work) is not installed."""

    code = "KK_MISSING_EXTRA"


def _quantization():
    try:
        from onnxruntime import quantization
    except ImportError as exc:
        raise MissingQuantizerError(
            f"quantizing needs onnxruntime's quantizer: pip install onnxruntime ({exc})") from exc
    return quantization


def calibration_feeds(folder, input_names: list[str]) -> list[dict[str, np.ndarray]]:
    """The samples in ``folder``: ``*.npy`` (one-input models) or ``*.npz`` files, sorted by name."""
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(f"calibration folder {str(root)!r} does not exist or is not a folder")
    files = sorted(p for p in root.iterdir() if p.suffix in (".npy", ".npz"))
    if not files:
        raise ConfigError(f"calibration folder {str(root)!r} holds no .npy or .npz files")
    feeds = []
    for path in files:
        if path.is_symlink() or not path.is_file():
            raise ConfigError(f"calibration file {str(path)!r} is a link or not a regular file")
        try:
            data = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise ConfigError(f"calibration file {str(path)!r} cannot be read: {exc}") from exc
        if path.suffix == ".npy":
            if len(input_names) != 1:
                raise ConfigError(f"{str(path)!r}: a .npy sample needs a one-input model; this one has inputs "
                                  f"{input_names} (use .npz files with arrays named by input)")
            feeds.append({input_names[0]: data})
        else:
            with data:
                missing = sorted(set(input_names) - set(data.files))
                if missing:
                    raise ConfigError(f"calibration file {str(path)!r} lacks inputs {missing}")
                feeds.append({name: data[name] for name in input_names})
    return feeds


def quantize(model, output, *, mode: str = "static", calibration=None, per_channel: bool = True,
             reduce_range: bool = False, preprocess: bool = True) -> Path:
    """Write an int8 version of the float ONNX model at ``model`` to ``output`` (a path) and return it.

    ``calibration`` (static mode): a folder of samples (see the module docs) or an iterable of
    feed dicts. ``reduce_range`` quantizes weights to 7 bits: onnxruntime's AVX2 kernels without
    VNNI saturate int16 pair sums of uint8 x int8 products otherwise (docs/quantization.md).
    Raises MissingQuantizerError without onnxruntime, ConfigError on bad arguments or samples."""
    import onnx

    q = _quantization()
    if mode not in MODES:
        raise ConfigError(f"quantize mode {mode!r} is not one of {MODES}")
    src, out = Path(model), Path(output)
    if not src.is_file():
        raise ModelFormatError(f"model file {str(src)!r} does not exist")
    if mode == "dynamic":
        q.quantize_dynamic(src, out, per_channel=per_channel, reduce_range=reduce_range,
                           weight_type=q.QuantType.QInt8)
        return out
    if calibration is None:
        raise ConfigError("static quantization needs calibration data (a folder of .npy/.npz samples)")
    proto = onnx.load(src, load_external_data=False)
    initializers = {t.name for t in proto.graph.initializer}
    names = [i.name for i in proto.graph.input if i.name not in initializers]
    feeds = calibration_feeds(calibration, names) if isinstance(calibration, (str, Path)) else list(calibration)
    if not feeds:
        raise ConfigError("the calibration data holds no samples")
    with tempfile.TemporaryDirectory() as tmp:
        source = src
        if preprocess:
            pre = Path(tmp) / "preprocessed.onnx"
            from onnxruntime.quantization.shape_inference import quant_pre_process

            try:
                quant_pre_process(str(src), str(pre))
            except ImportError as exc:  # its symbolic shape inference needs sympy
                raise MissingQuantizerError(f"onnxruntime's quantization preprocessing needs a package it "
                                            f"lacks: {exc}") from exc
            source = pre
        q.quantize_static(source, out, _reader(q, feeds), quant_format=q.QuantFormat.QDQ, per_channel=per_channel,
                          reduce_range=reduce_range, activation_type=q.QuantType.QInt8,
                          weight_type=q.QuantType.QInt8)
    return out


def _reader(q, feeds: Iterable[dict]):
    """onnxruntime's CalibrationDataReader over a list of feed dicts."""

    class Reader(q.CalibrationDataReader):
        def __init__(self):
            self.feeds = list(feeds)
            self.it = iter(self.feeds)

        def get_next(self):
            return next(self.it, None)

        def rewind(self):
            self.it = iter(self.feeds)

    return Reader()
