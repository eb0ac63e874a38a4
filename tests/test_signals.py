"""SIGTERM (a timeout, docker stop, systemd, Slurm) is taken as Ctrl-C is: what finished is stored,
the command says so and how to resume, and exits 143; a re-run asks only what was missing."""

from __future__ import annotations

import json
import signal
import sqlite3
import time

from grandrounds.testing import LoopbackServer
from tests.conftest import shared_file
from tests.test_resume_and_bad_input import cli, recording_rule, stored_questions


def answered_calls(db) -> int:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT count(*) FROM calls WHERE error IS NULL").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


def test_sigterm_stores_what_finished_says_so_and_exits_143_then_resume_asks_only_the_rest(
    tmp_path,
):
    data = tmp_path / "medqa.jsonl"
    lines = (
        shared_file("medqa", "phrases_no_exclude_test.jsonl")
        .read_text(encoding="utf-8")
        .splitlines()[:300]
    )
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    asked: list[str] = []
    with LoopbackServer(
        recording_rule(shared_file("medqa", "phrases_no_exclude_test.jsonl"), asked), latency=0.05
    ) as srv:
        db = tmp_path / "s.db"
        args = [
            "run",
            "medqa",
            "--data",
            str(data),
            "--model",
            "openai/rule",
            "--base-url",
            srv.base_url,
            "--concurrency",
            "4",
            "--store",
            str(db),
        ]
        p = cli(*args)
        deadline = time.time() + 120
        while time.time() < deadline and len(asked) < 60:
            time.sleep(0.05)
        assert len(asked) >= 60, "the run got going"
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 143, err
        assert "Traceback" not in err
        assert (
            "terminated (SIGTERM): everything finished so far is stored" in err
            and "run the same command again to resume" in err
        )
        assert " of 300 items" in err, "it says how much was kept"
        stored = stored_questions(db)
        assert len(stored) >= len(set(asked)) - 4, (
            "every answer but those in flight was stored on the way out"
        )
        assert len(stored) < 300, "stopped mid-run"

        asked.clear()
        p = cli(*args, "--out", str(tmp_path / "out"))
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert not (set(asked) & stored), "nothing stored is asked again"
        assert len(asked) == 300 - len(stored), "only the missing calls are made"
    res = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]
    assert res["n"] == 300 and res["n_unscored"] == 0


def test_sigterm_while_every_call_waits_exits_143_with_the_message(tmp_path):
    """Stopped before any answer came back: the same message and code, nothing lost or half-written."""
    data = tmp_path / "medqa.jsonl"
    data.write_text(
        shared_file("medqa", "phrases_no_exclude_test.jsonl").read_text(encoding="utf-8"),
        encoding="utf-8",
    )
    with LoopbackServer(
        lambda b: "Answer: A", latency=5.0
    ) as srv:  # every call waits: the run sits in its first calls
        p = cli(
            "run",
            "medqa",
            "--data",
            str(data),
            "--model",
            "openai/m",
            "--base-url",
            srv.base_url,
            "--store",
            str(tmp_path / "s.db"),
        )
        deadline = time.time() + 60
        while time.time() < deadline and srv.stats.requests == 0:
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    assert p.returncode == 143, err
    assert "terminated (SIGTERM)" in err and "resume" in err and "Traceback" not in err
