"""The viewer shows what each run sent: the stored request's messages, not the sample's own prompt;
one block when every run sent the same, else each run's under its answer. A run with no result yet
is labelled with the protocol it ran under."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from grandrounds.analyses.labels import run_facts
from grandrounds.analyses.leaderboard import protocol_label
from grandrounds.benchmarks.base import RunOptions
from grandrounds.run.config import RunConfig
from grandrounds.run.runner import run
from grandrounds.store import Store
from grandrounds.viewer.page import APP_JS
from grandrounds.viewer.queries import item
from grandrounds.viewer.state import ViewerState
from tests.conftest import shared_file


def _script(req: Any) -> Any:
    if req.kind == "chat":
        return "Answer: B"
    return {c: -1.0 - i for i, c in enumerate(req.continuations)}


def _runs(db: Path, data: Path) -> dict[str, Any]:
    st = Store(db)
    out = {}
    for name, opts in (
        ("reference", RunOptions(protocol="reference")),
        ("logprob", RunOptions(protocol="grandrounds", answer_mode="next-token")),
    ):
        out[name] = asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="medqa",
                    model="scripted/a",
                    data=data,
                    limit=3,
                    options=opts,
                    provider_options={"script": _script},
                ),
            )
        )
    st.close()
    return out


def _stored_messages(db: Path, run_id: str, sample_id: str) -> list[dict[str, Any]]:
    st = Store(db)
    try:
        key = st.answer(run_id, sample_id)[0]
        row = st.db.execute("SELECT request_json FROM calls WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0])["messages"]
    finally:
        st.close()


def test_each_answer_carries_the_messages_its_run_sent(tmp_path: Path) -> None:
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    db = tmp_path / "s.db"
    runs = _runs(db, data)
    state = ViewerState(db)
    state.refresh(force=True)
    con = state.con()
    got = item(con, state.store(), 1)
    assert got is not None
    by_run = {a["run_id"]: a for a in got["answers"]}
    sid = got["sample"]["id"]
    for name, outcome in runs.items():
        sent = by_run[outcome.run.id]["sent"]
        assert sent["messages"] == _stored_messages(db, outcome.run.id, sid), name
    ref = by_run[runs["reference"].run.id]["sent"]
    tok = by_run[runs["logprob"].run.id]["sent"]
    # the two runs sent different things, and neither is the sample's own grandrounds prompt
    assert ref["messages"] != tok["messages"]
    assert ref["kind"] == "chat" and tok["kind"] != "chat" and tok["continuations"]
    shown = [m["content"] for m in got["sample"]["messages"]]
    assert shown != [m["content"] for m in ref["messages"]]
    # the page draws a run's own messages when runs differ, one block when they agree
    assert "sent by this run" in APP_JS and "Sent to the model" in APP_JS


def test_a_run_without_a_result_is_labelled_with_its_own_protocol(tmp_path: Path) -> None:
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    db = tmp_path / "s.db"
    runs = _runs(db, data)
    st = Store(db)
    try:
        record = st.get_run(runs["reference"].run.id)
    finally:
        st.close()
    assert record is not None
    facts = run_facts(record.id, "", record, None)  # as for an interrupted run: no result
    assert protocol_label(facts.fingerprint) == "reference"
