"""`grandrounds doctor` (run last by set-up): the local model asked once in a child process, and a
crash there said in plain words with what to do."""

from __future__ import annotations

import importlib.util

import pytest
from typer.testing import CliRunner

from grandrounds.cli import doctor
from grandrounds.cli.main import app


def test_a_crash_in_the_child_is_named_with_the_portable_rebuild(monkeypatch) -> None:
    monkeypatch.setattr(doctor, "_CHILD", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    ok, line = doctor.check_local_model()
    assert not ok
    assert "crashed (SIGSEGV)" in line and "GGML_NATIVE=OFF" in line and "constraints.txt" in line
    r = CliRunner().invoke(app, ["doctor"])
    assert r.exit_code == 1 and "error: the local model smollm2 crashed (SIGSEGV)" in r.output


def test_an_error_in_the_child_gives_its_last_line(monkeypatch) -> None:
    monkeypatch.setattr(doctor, "_CHILD", "raise SystemExit('no GGUF file at /nowhere.gguf')")
    ok, line = doctor.check_local_model()
    assert not ok and line.endswith("no GGUF file at /nowhere.gguf")


@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed"
)
def test_the_default_local_model_answers() -> None:
    ok, line = doctor.check_local_model("smollm2", timeout=300)
    assert ok, line
    assert line.startswith("the local model smollm2 answered in ")
