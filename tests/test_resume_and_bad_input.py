"""kill -9 in the middle of a run, then resume; bad input files change nothing in the store."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grandrounds.testing import LoopbackServer
from tests.conftest import shared_file
from tests.test_spine_e2e import load_key, lookup, rule_answer

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str, env: dict | None = None) -> subprocess.Popen:
    e = dict(os.environ, PYTHONPATH=str(ROOT / "src"), **(env or {}))
    return subprocess.Popen(
        [sys.executable, "-m", "grandrounds", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=e,
        text=True,
    )


def stored_answer_keys(db: Path) -> set[str]:
    con = sqlite3.connect(db)
    try:
        return {
            r[0]
            for r in con.execute("SELECT key FROM calls WHERE error IS NULL AND purpose = 'answer'")
        }
    except sqlite3.OperationalError:  # schema not created yet
        return set()
    finally:
        con.close()


def stored_questions(db: Path) -> set[str]:
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT request_json FROM calls WHERE error IS NULL")
        return {json.loads(r[0])["messages"][-1]["content"] for r in rows}
    finally:
        con.close()


def recording_rule(data: Path, asked: list[str]):
    """Answer MedQA prompts by the known rule, recording every prompt the server is asked."""
    key = load_key(data)

    def rule(body):
        content = body["messages"][-1]["content"]
        asked.append(content)
        q, a, _ = lookup(key, content)
        return f"Answer: {rule_answer(q, a)}"

    return rule


def test_kill_minus_nine_then_resume_repeats_no_stored_call(tmp_path):
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    asked: list[str] = []
    rule = recording_rule(data, asked)

    with LoopbackServer(rule, latency=0.02) as srv:
        ref_dir, run_dir = tmp_path / "ref", tmp_path / "run"
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
            "8",
        ]
        p = cli(*args, "--store", str(tmp_path / "ref.db"), "--out", str(ref_dir))
        assert p.wait(300) == 0, p.stderr.read()
        asked.clear()

        db = tmp_path / "killed.db"
        p = cli(*args, "--store", str(db))
        deadline = time.time() + 120
        while time.time() < deadline:
            time.sleep(0.2)
            if db.exists() and len(stored_answer_keys(db)) >= 300:
                break
        p.send_signal(signal.SIGKILL)
        p.wait(30)
        assert p.returncode == -signal.SIGKILL
        done_before = stored_questions(db)
        assert 300 <= len(done_before) < 1273, "killed in the middle"
        asked.clear()

        p = cli(*args, "--store", str(db), "--out", str(run_dir))
        assert p.wait(300) == 0, p.stderr.read()
        assert not (set(asked) & done_before), "the resumed run repeated a stored call"
        assert len(asked) == 1273 - len(done_before)
    ref = json.loads((ref_dir / "results.json").read_text())["results"][0]
    got = json.loads((run_dir / "results.json").read_text())["results"][0]
    for k in ("score", "ci95", "n", "n_unscored", "breakdown"):
        assert got[k] == ref[k], k
    ref_lines = (ref_dir / "samples.jsonl").read_text().splitlines()
    got_lines = (run_dir / "samples.jsonl").read_text().splitlines()
    assert [json.loads(x)["score"] for x in got_lines] == [
        json.loads(x)["score"] for x in ref_lines
    ]


def _digest(db: Path) -> str:
    """Content of every table, so 'nothing changed' is checked on data, not file bytes."""
    con = sqlite3.connect(db)
    try:
        h = hashlib.sha256()
        for (name,) in con.execute(
            "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name"
        ):
            for row in con.execute(f"SELECT * FROM {name} ORDER BY 1"):
                h.update(repr(row).encode())
        return h.hexdigest()
    finally:
        con.close()


BAD_INPUTS = [
    ("empty.jsonl", b"", "file is empty"),
    (
        "truncated.jsonl",
        b'{"question": "q1", "options": {"A": "x", "B": "y"}, "answer_idx": "A"}\n{"question": "q2", "opti',
        "line 2",
    ),
    ("missing.jsonl", b'{"question": "q1", "options": {"A": "x", "B": "y"}}\n', "answer_idx"),
    (
        "encoding.jsonl",
        b'{"question": "\xff\xfe\xfa\xfb", "options": {"A": "x", "B": "y"}, "answer_idx": "A"}\n',
        "line 1",
    ),
    # Windows-1252 text is valid GB18030 byte pairs ("Ménière" -> "M閚i鑢e"): refused, not misread
    (
        "cp1252.jsonl",
        '{"question": "Ménière disease?", "options": {"A": "x", "B": "y"}, "answer_idx": "A"}\n'.encode(
            "cp1252"
        ),
        "--encoding",
    ),
    ("deep.jsonl", b"[" * 100_000 + b"]" * 100_000 + b"\n", "line 1: JSON nested too deeply"),
]


@pytest.mark.parametrize("name,content,needle", BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_one_clear_error_and_store_unchanged(tmp_path, name, content, needle):
    db = tmp_path / "s.db"
    # A store with real content first: the demo file answered by the scripted provider.
    p = cli("run", "demo", "--model", "scripted/always-a", "--store", str(db))
    assert p.wait(60) == 0, p.stderr.read()
    before = _digest(db)
    bad = tmp_path / name
    bad.write_bytes(content)
    p = cli("run", "medqa", "--data", str(bad), "--model", "scripted/always-a", "--store", str(db))
    code = p.wait(60)
    err = p.stderr.read()
    assert code == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) <= 3, err  # one clear error, not a dump
    flat = " ".join(err.split())
    assert str(bad) in flat or bad.name in flat
    assert needle in flat
    assert _digest(db) == before


def test_ctrl_c_stops_cleanly_and_resume_asks_only_the_rest(tmp_path):
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    asked: list[str] = []
    rule = recording_rule(data, asked)

    with LoopbackServer(rule, latency=0.02) as srv:
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
            "8",
            "--store",
            str(db),
        ]
        p = cli(*args)
        deadline = time.time() + 120
        while time.time() < deadline and len(asked) < 200:
            time.sleep(0.05)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 130, err
        assert "resume" in err and "Traceback" not in err
        stored = stored_questions(db)
        # Everything answered before the interrupt was written on the way out.
        assert len(stored) >= len(set(asked)) - 8  # at most the calls in flight were lost
        asked.clear()
        p = cli(*args, "--out", str(tmp_path / "out"))
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert not (set(asked) & stored)
        assert len(asked) == 1273 - len(stored)
    res = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]
    assert res["n"] == 1273 and res["n_unscored"] == 0
