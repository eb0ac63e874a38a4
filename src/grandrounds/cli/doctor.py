"""``grandrounds doctor``: does the local model answer on this machine?

The check asks the default local model (or a GGUF named with ``--model``) for a few tokens in a
child process, so that a crash inside llama.cpp (a build that does not suit this processor, a
damaged model file) becomes a sentence saying what failed and what to do, not a bare
"Segmentation fault" in the middle of a run. Set-up runs it last.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from grandrounds.core.display import safe_text

#: What the child does: load the model, read a short prompt, and generate a few tokens.
_CHILD = """
import sys
from grandrounds.providers.llamacpp import model_path
import llama_cpp
llm = llama_cpp.Llama(model_path=str(model_path(sys.argv[1])), n_ctx=256, n_threads=1, verbose=False, seed=0)
out = llm.create_completion("Question: Is the heart a muscle?\\nAnswer:", max_tokens=4, temperature=0)
print(repr(out["choices"][0]["text"]))
"""

REBUILD = (
    'CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF" .venv/bin/pip install --force-reinstall '
    "--no-cache-dir --no-deps -c requirements/constraints.txt llama-cpp-python"
)


def check_local_model(model: str = "smollm2", timeout: float = 300.0) -> tuple[bool, str]:
    """(answered, one line saying what happened and, on failure, what to do)."""
    start = time.monotonic()
    try:
        r = subprocess.run(
            [sys.executable, "-c", _CHILD, model],
            capture_output=True,
            text=True,
            timeout=timeout,
            errors="replace",
        )
    except subprocess.TimeoutExpired:
        return False, (
            f"the local model gave no answer in {timeout:.0f} s: the machine may be too busy or "
            "too small; try again, or `grandrounds doctor --timeout 900`"
        )
    took = time.monotonic() - start
    if r.returncode == 0:
        return True, f"the local model {model} answered in {took:.1f} s ({r.stdout.strip()})"
    if r.returncode < 0:
        sig = -r.returncode
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return False, (
            f"the local model {model} crashed ({name}) while answering: llama.cpp was built with "
            "instructions this processor does not run correctly. Rebuild it portable: " + REBUILD
        )
    last = [line for line in (r.stderr or "").splitlines() if line.strip()]
    why = last[-1] if last else f"exit {r.returncode}"
    if "ModuleNotFoundError" in why and "llama_cpp" in why:
        return False, "llama-cpp-python is not installed: bash scripts/setup.sh installs it"
    return False, f"the local model {model} could not answer: {why}"


def register(app: typer.Typer, store_path: Callable[[Path | None], Path], StoreOpt: Any) -> None:
    del store_path, StoreOpt

    @app.command()
    def doctor(
        model: str = typer.Option(
            "smollm2", "--model", help="a packaged model's name or a GGUF file's path"
        ),
        timeout: float = typer.Option(300.0, "--timeout", min=1.0, help="seconds to wait"),
    ) -> None:
        """Check that the local model answers on this machine (set-up runs this last)."""
        ok, line = check_local_model(model, timeout)
        print(
            ("ok: " if ok else "error: ") + safe_text(line), file=sys.stdout if ok else sys.stderr
        )
        if not ok:
            raise typer.Exit(1)
