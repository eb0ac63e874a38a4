"""Run an exam benchmark through the real CLI with a scripted model that answers by a rule of ours.

The bot is a ScriptedProvider registered under a name for the duration of a run; ``typer``'s
CliRunner invokes ``grandrounds run`` in-process, and the result is read back from ``results.json``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from grandrounds.cli.main import app
from grandrounds.core.records import Request
from grandrounds.core.registry import PROVIDERS
from grandrounds.providers.scripted import ScriptedProvider


def longest(options: list[str]) -> int:
    """The rule: the index of the longest option text (the first on a tie)."""
    return max(range(len(options)), key=lambda i: len(options[i].strip()))


def cli_run(
    tmp_path: Path, bench: str, data: Path, reply: Callable[[Request], object], *extra: str
) -> dict:
    """``grandrounds run BENCH --data DATA --model examrule/x`` answering with ``reply``; results.json's result."""

    class Bot(ScriptedProvider):
        def __init__(self, spec, **options):
            super().__init__(spec, script=reply, **options)

    out = tmp_path / "out"
    args = [
        "run",
        bench,
        "--data",
        str(data),
        "--model",
        "examrule/x",
        "--store",
        str(tmp_path / "s.db"),
        "--out",
        str(out),
        *extra,
    ]
    with PROVIDERS.registered("examrule", Bot):
        r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 0, (r.output, r.exception)
    return json.loads((out / "results.json").read_text(encoding="utf-8"))["results"][0]
