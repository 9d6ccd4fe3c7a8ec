"""The bundled digits example: shipped as package data, accurate, and runnable from the CLI."""
from __future__ import annotations

import re
from importlib import resources

import kernelkit as kk
import numpy as np
import pytest
from kernelkit import cli
from kernelkit.deploy import load_deployment
from kernelkit.testing import assert_close

FILES = ("digits.kkm", "test.npz", "digits.yml")


@pytest.fixture(scope="module")
def folder():
    return resources.files("kernelkit").joinpath("examples_data", "digits")


@pytest.fixture(scope="module")
def data(folder):
    with resources.as_file(folder / "test.npz") as path, np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def test_files_are_package_data_and_small(folder):
    sizes = {name: len((folder / name).read_bytes()) for name in FILES}
    assert sum(sizes.values()) < 200_000, sizes


def test_held_out_accuracy_through_session(folder, data):
    with resources.as_file(folder / "digits.kkm") as path:
        sess = kk.Session(path, vendors=["reference"])
    assert [i.shape for i in sess.get_inputs()] == [("N", 1, 8, 8)]
    x, labels = data["x"], data["label"]
    assert x.shape == (len(labels), 1, 8, 8) and len(labels) >= 300
    [probs] = sess.run(None, {"x": x})
    assert probs.shape == (len(labels), 10)
    assert_close(probs.sum(axis=1), np.ones(len(labels), np.float32))
    accuracy = float(np.mean(probs.argmax(axis=1) == labels))
    assert accuracy >= 0.95, accuracy


def test_reference_agrees_with_torch_outputs(folder, data):
    """test.npz holds torch's probabilities for the held-out images: an external oracle."""
    with resources.as_file(folder / "digits.kkm") as path:
        [probs] = kk.Session(path, vendors=["reference"]).run(None, {"x": data["x"]})
    assert_close(probs, data["probs"])


def test_deployment_file_validates(folder):
    with resources.as_file(folder) as path:
        dep = load_deployment(path / "digits.yml")
        checks = dep.validate(dep.session(vendors=["reference"]))
    assert [c.name for c in checks] == ["probs"] and all(c.passed for c in checks), checks


def test_model_is_the_documented_cnn(folder):
    with resources.as_file(folder / "digits.kkm") as path:
        model = kk.load(path)
    assert [n.op for n in model.graph.nodes] == ["Conv", "Relu", "Conv", "Relu", "MaxPool", "Flatten", "Gemm",
                                                 "Softmax"]
    assert model.metadata["dataset"] == "sklearn.datasets.load_digits"


def test_cli_runs_the_bundled_example(capsys):
    assert cli.main(["run", "--benchmark", "5", "--vendors", "reference"]) == 0
    out = capsys.readouterr().out
    accuracy = float(re.search(r"accuracy\s*│\s*([\d.]+)%", out).group(1))
    assert accuracy >= 95.0, out
    assert re.search(r"kernelkit\s*│\s*5\s*│\s*[\d.]+\s*│", out) and "p99" in out


def test_cli_info_on_the_example(capsys, folder):
    with resources.as_file(folder / "digits.kkm") as path:
        assert cli.main(["info", str(path), "--vendors", "reference"]) == 0
    out = capsys.readouterr().out
    # conv1 8*(1*9)*64*2 + conv2 16*(8*9)*64*2 + fc 10*256*2, multiply-adds counted as 2 FLOPs
    macs = 8 * 9 * 64 + 16 * 72 * 64 + 10 * 256
    flops = int(re.search(r"FLOPs: ([\d,]+)", out).group(1).replace(",", ""))
    assert flops in (2 * macs, 2 * macs + 8 * 64 + 16 * 64 + 10), out  # with or without bias adds
    params = 8 * 9 + 8 + 16 * 72 + 16 + 10 * 256 + 10
    assert f"parameters: {params:,}" in out


def test_installed_wheel_ships_the_example(tmp_path):
    """Build core's wheel, install it into a fresh venv and run `kernelkit run` outside the checkout:
    the example must come from the installed package's data, not from the source tree."""
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    core = Path(__file__).resolve().parents[1]  # packages/core of this checkout (hatchling: test extra)
    assert (core / "pyproject.toml").is_file(), core
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(core), "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist")], check=True, capture_output=True)
    [wheel] = (tmp_path / "dist").glob("kernelkit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert all(f"kernelkit/examples_data/digits/{f}" in names for f in FILES), names
    from kernelkit.testing import child_venv

    venv = tmp_path / "venv"
    python = child_venv(venv)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--ignore-installed",
                    "-q", str(wheel)],
                   check=True, capture_output=True)
    where = subprocess.run([str(python), "-c", "import kernelkit; print(kernelkit.__file__)"], cwd=tmp_path,
                           check=True, capture_output=True, text=True).stdout
    assert str(venv) in where, where
    run = subprocess.run([str(venv / "bin" / "kernelkit"), "run", "--benchmark", "2", "--vendors", "reference"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert float(re.search(r"accuracy\s*│\s*([\d.]+)%", run.stdout).group(1)) >= 95.0, run.stdout
