"""Output that goes to a log file: a plain progress line every few seconds (done/total, rate,
failures, ETA; no control characters), and summary lines kept whole instead of cut at 80 columns.

The CLI runs in-process with its output captured (not a terminal), as ``grandrounds run ... > log``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandrounds.cli.main import app
from grandrounds.run import progress
from grandrounds.testing import LoopbackServer

LINE = re.compile(
    r"^demo · openai/\S+: (\d+)/12 \((\d+)%\) · \d+\.\d calls/s"
    r"(?: · calls (\d+) answered(?: \([^)]*\))?)?(?: · (\d+) in flight for \d+:\d\d:\d\d)?"
    r" · failed (\d+) · retries \d+ · unscored \d+ · "
    r"elapsed \d+:\d\d:\d\d · ETA (-|\d+:\d\d:\d\d)$"
)
LONG_MODEL = "openai/" + "a-rather-long-model-name-of-a-local-server-instruct-q4_k_m-" * 2 + "gguf"


def run_demo(srv: LoopbackServer, store: Path, model: str = "openai/local") -> str:
    args = [
        "run",
        "demo",
        "--model",
        model,
        "--base-url",
        srv.base_url,
        "--store",
        str(store),
        "--protocol",
        "grandrounds",
    ]
    r = CliRunner().invoke(app, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return r.output


def test_a_run_logged_to_a_file_prints_plain_progress_lines_every_few_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress, "LOG_EVERY", 0.2)
    with LoopbackServer(
        lambda body: "B", latency=0.1, serial=True
    ) as srv:  # 12 questions, one at a time: over a second
        out = run_demo(srv, tmp_path / "s.db")
    lines = [ln for ln in out.splitlines() if LINE.match(ln)]
    assert len(lines) >= 4, out
    done = [int(LINE.match(ln).group(1)) for ln in lines]
    assert done == sorted(done) and done[-1] == 12 and done[0] < 12, (
        "counts move on, line by line, to the end"
    )
    assert LINE.match(lines[-1]).group(2) == "100" and LINE.match(lines[-1]).group(6) == "0:00:00"
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", out), (
        "no control characters: no bar, no cursor moves, no colours"
    )
    assert "━" not in out, "no bar drawn"


def test_progress_lines_come_while_every_call_is_waiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A timer prints them, not the calls: one slow first answer still shows the run is alive."""
    monkeypatch.setattr(progress, "LOG_EVERY", 0.2)
    with LoopbackServer(lambda body: "B", latency=1.2, serial=True) as srv:
        out = run_demo(srv, tmp_path / "s.db")
    waiting = [ln for ln in out.splitlines() if LINE.match(ln) and LINE.match(ln).group(1) == "0"]
    assert len(waiting) >= 3 and all(LINE.match(ln).group(6) == "-" for ln in waiting), (
        "no pace yet: ETA unknown, never 0"
    )
    # the call inside the item is shown moving: sent and waiting, before any item is done
    assert any(int(LINE.match(ln).group(4) or 0) >= 1 for ln in waiting), waiting


def test_summary_lines_are_kept_whole_in_a_log_file(tmp_path: Path) -> None:
    """The real command with stderr and stdout redirected to a file and no COLUMNS: Rich would
    assume 80 columns there; every summary line holds the whole model name and run id."""
    with LoopbackServer(lambda body: "B") as srv:
        log = tmp_path / "log.txt"
        env = {k: v for k, v in __import__("os").environ.items() if k != "COLUMNS"}
        with open(log, "w") as f:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "grandrounds",
                    "run",
                    "demo",
                    "--model",
                    LONG_MODEL,
                    "--base-url",
                    srv.base_url,
                    "--store",
                    str(tmp_path / "s.db"),
                    "--protocol",
                    "grandrounds",
                ],
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                check=True,
                timeout=120,
            )
    text = log.read_text(encoding="utf-8")
    assert "…" not in text, text
    run_line = next(ln for ln in text.splitlines() if ": run " in ln)
    assert re.fullmatch(rf"demo · {re.escape(LONG_MODEL)}: run [0-9a-f]{{16}}", run_line), run_line
    final = [ln for ln in text.splitlines() if ln.startswith(f"demo · {LONG_MODEL}: 12/12 (100%)")]
    assert len(final) == 1 and len(final[0]) > 80, text
