"""kernelkit.progress: shown on a terminal's stderr only, silenced by --quiet / set_quiet /
$KERNELKIT_QUIET, nested tasks share one display."""
from __future__ import annotations

import io
import sys

import pytest
from kernelkit import cli, progress


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


@pytest.fixture
def tty(monkeypatch):
    """A terminal as stderr: ``tty()`` installs it (in the test body: pytest's capture resets
    sys.stderr between a fixture's setup and the test) and returns it."""
    stream = FakeTTY()
    monkeypatch.delenv("KERNELKIT_QUIET", raising=False)
    monkeypatch.setattr(progress, "_quiet", False)

    def install():
        monkeypatch.setattr(sys, "stderr", stream)
        return stream

    return install


def test_shown_on_a_terminal_and_nested(tty):
    tty = tty()
    assert progress.enabled()
    with progress.task("outer work", total=3) as advance:
        with progress.task("inner build"):
            assert progress._open == 2
        for _ in range(3):
            advance()
    assert list(progress.iterate([1, 2], "iterating")) == [1, 2]
    assert progress._display is None and progress._open == 0  # closed after the last task
    text = tty.getvalue()
    assert "outer work" in text and "inner build" in text and "iterating" in text


def test_silent_off_a_terminal_and_when_quiet(tty, monkeypatch):
    tty = tty()
    progress.set_quiet(True)
    try:
        with progress.task("hidden") as advance:
            advance()
    finally:
        progress.set_quiet(False)
    monkeypatch.setenv("KERNELKIT_QUIET", "1")
    assert not progress.enabled()
    monkeypatch.delenv("KERNELKIT_QUIET")
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # not a terminal
    assert not progress.enabled()
    with progress.task("also hidden"):
        pass
    assert tty.getvalue() == ""


def test_cli_quiet_flag(tty, tmp_path):
    tty = tty()
    import kernelkit as kk

    g = kk.GraphBuilder("q")
    g.output(g.op("Relu", g.input("x", (2, 3)), name="y"))
    kk.save(g.build(), tmp_path / "q.kkm")
    assert cli.main(["bench", str(tmp_path / "q.kkm"), "--runs", "2", "--vendors", "reference"]) == 0
    assert "benchmark" in tty.getvalue()
    tty.seek(0)
    tty.truncate()
    try:
        assert cli.main(["-q", "bench", str(tmp_path / "q.kkm"), "--runs", "2", "--vendors", "reference"]) == 0
        assert tty.getvalue() == ""
        progress.set_quiet(False)
        assert cli.main(["bench", str(tmp_path / "q.kkm"), "--runs", "2", "--vendors", "reference", "--quiet"]) == 0
        assert tty.getvalue() == ""
    finally:
        progress.set_quiet(False)
