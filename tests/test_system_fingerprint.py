"""What the server says answered each call (``system_fingerprint``, a dated model behind the name)
is recorded per call, counted on the result, and a change within one run is said in the summary.

The candidate is the loopback OpenAI-compatible server answering MedQA through the real CLI.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from grandrounds.cli.main import app
from grandrounds.core.records import Message, Request
from grandrounds.run.batches.openai_wire import _chat_response
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer, Reply, last_user_text
from tests.conftest import shared_file

LIMIT = 10


def _fp_of(text: str) -> str:
    """Two server builds, chosen by the question's hash (so the split is fixed, whatever the call order)."""
    return "fp_a1" if hashlib.sha256(text.encode()).digest()[0] % 2 == 0 else "fp_b2"


def _run(tmp_path: Path, srv: LoopbackServer) -> tuple[Any, dict]:
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    out = tmp_path / "out"
    args = [
        "run",
        "medqa",
        "--data",
        str(data),
        "--limit",
        str(LIMIT),
        "--model",
        "openai/m",
        "--base-url",
        srv.base_url,
        "--store",
        str(tmp_path / "s.db"),
        "--out",
        str(out),
    ]
    r = CliRunner().invoke(app, args, env={"COLUMNS": "200", "OPENAI_API_KEY": "sk-loopback"})
    assert r.exit_code == 0, (r.output, r.exception)
    return r, json.loads((out / "results.json").read_text(encoding="utf-8"))["results"][0]


def test_two_fingerprints_are_counted_and_the_change_is_said(tmp_path):
    seen: dict[str, str] = {}
    lock = threading.Lock()

    def rule(body: dict[str, Any]) -> Reply:
        text = last_user_text(body)
        with lock:
            seen[text] = _fp_of(text)
        return Reply(text="Answer: A", system_fingerprint=_fp_of(text))

    with LoopbackServer(rule) as srv:
        r, res = _run(tmp_path, srv)
        planted = dict(Counter(seen.values()))
        assert len(planted) == 2 and sum(planted.values()) == LIMIT, (
            "the rule splits the ten questions between two builds"
        )
        assert res["extra"]["system_fingerprints"] == planted
        assert "the server's system_fingerprint changed within this run" in r.output
        assert f"fp_a1: {planted['fp_a1']}" in r.output and f"fp_b2: {planted['fp_b2']}" in r.output
        calls_before = srv.stats.requests

        again, res2 = _run(tmp_path, srv)
        assert srv.stats.requests == calls_before, (
            "the fingerprint is not part of any key: a re-run makes 0 calls"
        )
        assert res2["extra"]["system_fingerprints"] == planted, "read back from the store"
        assert "changed within this run" in again.output

    with sqlite3.connect(tmp_path / "s.db") as db:
        stored = Counter(
            v
            for (v,) in db.execute("SELECT system_fingerprint FROM calls WHERE purpose = 'answer'")
        )
    assert dict(stored) == planted


def test_one_fingerprint_and_a_dated_model_are_recorded_without_a_warning(tmp_path):
    with LoopbackServer(
        lambda body: Reply(text="Answer: B", system_fingerprint="fp_same", model="m-2025-01-01")
    ) as srv:
        r, res = _run(tmp_path, srv)
    assert res["extra"]["system_fingerprints"] == {"fp_same; model m-2025-01-01": LIMIT}
    assert "changed within this run" not in r.output
    with Store(tmp_path / "s.db") as st:
        run_id = st.runs()[0].id
        responses = [resp for _, resp in st.answers(run_id).values()]
    assert responses and all(
        resp is not None and resp.system_fingerprint == "fp_same; model m-2025-01-01"
        for resp in responses
    )


def test_a_server_that_says_nothing_leaves_no_entry(tmp_path):
    with LoopbackServer(lambda body: "Answer: C") as srv:
        r, res = _run(tmp_path, srv)
    assert "system_fingerprints" not in res["extra"]
    assert "system_fingerprint" not in r.output


def test_batch_lines_carry_the_fingerprint_and_the_served_model():
    body = {
        "model": "m-2025-02-02",
        "system_fingerprint": "fp_\x1b[2Jz",
        "choices": [{"message": {"content": "A"}, "finish_reason": "stop"}],
    }
    got = _chat_response(body, "k", "m")
    assert got.system_fingerprint == "fp_\x1b[2Jz; model m-2025-02-02"
    assert (
        _chat_response(
            {"model": "m", "choices": [{"message": {"content": "A"}}]}, "k", "m"
        ).system_fingerprint
        is None
    )
    req = Request(provider="openai", model="m", messages=(Message("user", "q"),))
    assert "fingerprint" not in req.canonical(), "never part of a key"
