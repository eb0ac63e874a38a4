"""Batch execution against a loopback server that speaks OpenAI's Batch API and Anthropic's Message
Batches: whole runs through the CLI, resume after a kill, partial failure, expiry, cancellation,
failed validation, bounded attempts, results shared with live runs, and what is stored."""

from __future__ import annotations

import asyncio
import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from contextlib import suppress
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandrounds.cli.main import app
from grandrounds.core.errors import ConfigError
from grandrounds.core.records import Message, Request
from grandrounds.core.registry import BENCHMARKS
from grandrounds.providers.anthropic import AnthropicProvider
from grandrounds.providers.base import ModelSpec
from grandrounds.providers.openai_compat import OpenAIProvider
from grandrounds.providers.scripted import ScriptedProvider
from grandrounds.run.batches.events import BatchEvent
from grandrounds.run.batches.executor import BatchExecutor, executor_for
from grandrounds.run.batches.settings import BatchSettings
from grandrounds.run.executor import Executor
from grandrounds.store import Store
from grandrounds.testing import Fault, last_user_text
from grandrounds.testing.batch import BatchServer, Plan
from tests.conftest import offline_env
from tests.rubric_bench.triage import TriageRubric
from tests.test_new_rubric_benchmark import MET, ROWS, expected, judge_rule
from tests.test_resume_and_bad_input import ROOT

FAST = dict(window=0.05, poll_interval=0.05)
WIRES = ["openai", "anthropic"]


def make_provider(wire: str, srv: BatchServer):
    if wire == "openai":
        return OpenAIProvider(ModelSpec("openai", "m", srv.openai_url))
    return AnthropicProvider(ModelSpec("anthropic", "m", srv.anthropic_url))


def requests_for(p, n: int, start: int = 0) -> list[Request]:
    return [
        Request(
            provider=p.spec.provider,
            model="m",
            messages=(Message("system", "Be brief."), Message("user", f"question {i}")),
            base_url=p.request_base_url(),
        )
        for i in range(start, start + n)
    ]


def echo(body) -> str:
    return "reply to " + last_user_text(body)


class Watch:
    """A run's progress observer: calls and batch events."""

    def __init__(self) -> None:
        self.calls = 0
        self.events: list[BatchEvent] = []

    def on_call(self, response, *, retries: int) -> None:
        self.calls += 1

    def on_batch(self, event: BatchEvent) -> None:
        self.events.append(event)

    def states(self) -> list[str]:
        return [e.what for e in self.events]


def ask_all(store, p, reqs, observer=None, **settings):
    async def go():
        ex = BatchExecutor(
            store, p, BatchSettings(answers=True, **(FAST | settings)), observer=observer
        )
        try:
            return await asyncio.gather(*(ex(r) for r in reqs)), ex
        finally:
            await p.aclose()

    return asyncio.run(go())


# ---- the happy path, both wire formats --------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_one_batch_answers_every_request_and_stores_them_as_batch_calls(wire, tmp_path):
    watch = Watch()
    with (
        BatchServer(echo, plan=lambda n, ids: Plan(polls=3)) as srv,
        Store(tmp_path / "s.db") as st,
    ):
        p = make_provider(wire, srv)
        reqs = requests_for(p, 12)
        out, ex = ask_all(st, p, reqs, watch)
        assert [r.text for r in out] == [f"reply to question {i}" for i in range(12)]
        assert srv.batch_sizes() == [12] and srv.stats.live == 0 and srv.stats.polls == 3
        sent = srv.stats.submissions[0]
        assert sent.custom_ids == [r.key() for r in reqs]
        if wire == "anthropic":
            assert sent.bodies[0]["system"] == "Be brief." and sent.bodies[0]["messages"] == [
                {"role": "user", "content": "question 0"}
            ]
        else:
            assert (
                sent.bodies[0]["messages"][0] == {"role": "system", "content": "Be brief."}
                and sent.bodies[0]["model"] == "m"
            )
        # stored in the calls cache like live calls, marked as batch calls, the batch closed
        for r in reqs:
            got = st.get_call(r.key())
            assert got is not None and got.text == f"reply to {r.messages[-1].content}"
        row = st.db.execute(
            "SELECT request_json FROM calls WHERE key = ?", (reqs[0].key(),)
        ).fetchone()
        assert json.loads(row[0])["batch"] is True
        [batch] = st.batches()
        assert batch.collected_at is not None and set(batch.keys) == {r.key() for r in reqs}
        assert st.db.execute("SELECT COUNT(*) FROM batch_requests").fetchone()[0] == 0
    assert (
        ex.stats.made == 12
        and ex.stats.batched == 12
        and ex.stats.submitted == 12
        and ex.stats.failed == 0
    )
    assert watch.calls == 12
    ended = "completed" if wire == "openai" else "ended"
    assert watch.states()[0] == "submitted" and watch.states()[-1] == f"collected ({ended})"
    assert ended in watch.states() and ex.hub.stats.polls == 3


def test_requests_are_split_by_size_and_identical_ones_shared(tmp_path):
    with BatchServer(echo) as srv, Store(tmp_path / "s.db") as st:
        p = make_provider("openai", srv)
        reqs = requests_for(p, 10)
        out, ex = ask_all(st, p, reqs + reqs[:3], max_requests=4)
        assert sorted(srv.batch_sizes()) == [2, 4, 4] and sum(srv.stats.submitted.values()) == 10
    assert all(r.ok for r in out) and out[10].text == out[0].text


def test_results_land_line_by_line_across_chunks(tmp_path):
    """300 replies of about 3 KB: the result file arrives in many pieces; every line is read whole."""
    long = "x" * 3000
    with BatchServer(lambda b: long + last_user_text(b)) as srv, Store(tmp_path / "s.db") as st:
        p = make_provider("anthropic", srv)
        reqs = requests_for(p, 300)
        out, _ = ask_all(st, p, reqs)
    assert [r.text for r in out] == [long + f"question {i}" for i in range(300)]


# ---- the CLI ----------------------------------------------------------------------------------


def test_full_run_through_the_cli_with_both_wire_formats(tmp_path, monkeypatch):
    """Answers through OpenAI's Batch API, judge calls through Anthropic's Message Batches, then the
    same command again (everything from the store) and a live run that reuses the batch results."""
    monkeypatch.setenv("GRANDROUNDS_BATCH_POLL", "0.05")
    monkeypatch.setenv("GRANDROUNDS_BATCH_WINDOW", "0.1")
    data = tmp_path / "triage.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    store = tmp_path / "s.db"
    n_criteria = sum(len(row["rubric"]) for row in ROWS)
    with (
        BENCHMARKS.registered("triage-rubric", TriageRubric),
        BatchServer(lambda b: "advice") as cand,
        BatchServer(judge_rule) as judge,
    ):
        args = [
            "run",
            "triage-rubric",
            "--data",
            str(data),
            "--model",
            "openai/cand",
            "--base-url",
            cand.openai_url,
            "--judge",
            f"anthropic/judge@{judge.anthropic_url}",
            "--store",
            str(store),
            "--out",
            str(tmp_path / "out"),
        ]
        r = CliRunner().invoke(app, [*args, "--batch", "both"])
        assert r.exit_code == 0, r.output
        assert cand.batch_sizes() == [len(ROWS)] and judge.batch_sizes() == [n_criteria]
        assert cand.stats.live == judge.stats.live == 0
        assert "collected (completed)" in r.output and "collected (ended)" in r.output
        result = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]
        want = [expected(row) for row in ROWS]
        assert result["score"] == pytest.approx(sum(want) / len(want)) and MET

        r = CliRunner().invoke(app, [*args, "--batch", "both"])
        assert r.exit_code == 0, r.output
        assert len(cand.stats.submissions) == 1 and len(judge.stats.submissions) == 1, (
            "nothing submitted again"
        )

        run_id = result["fingerprint"]["run_id"]
        r = CliRunner().invoke(
            app,
            [
                "regrade",
                "--run",
                run_id,
                "--judge",
                f"anthropic/judge@{judge.anthropic_url}",
                "--store",
                str(store),
                "--batch",
            ],
        )
        assert r.exit_code == 0, r.output
        assert len(judge.stats.submissions) == 1, "the same judge: every call from the store"
        r = CliRunner().invoke(
            app,
            [
                "regrade",
                "--run",
                run_id,
                "--judge",
                f"anthropic/judge2@{judge.anthropic_url}",
                "--store",
                str(store),
                "--batch",
            ],
        )
        assert r.exit_code == 0, r.output
        assert judge.batch_sizes() == [n_criteria, n_criteria] and {
            b["model"] for b in judge.stats.submissions[1].bodies
        } == {"judge2"}
        r = CliRunner().invoke(app, args)  # live: the batch results are cache hits
        assert r.exit_code == 0, r.output
        assert cand.stats.live == judge.stats.live == 0 and len(judge.stats.submissions) == 2
    with Store(store) as st:
        assert [b.state for b in st.batches()] == ["completed", "ended", "ended"] and all(
            b.collected_at for b in st.batches()
        )
        flagged = st.db.execute(
            "SELECT COUNT(*) FROM calls WHERE json_extract(request_json, '$.batch') = 1"
        ).fetchone()[0]
        assert flagged == len(ROWS) + 2 * n_criteria


def test_batch_option_is_checked(tmp_path):
    r = CliRunner().invoke(
        app,
        [
            "run",
            "demo",
            "--model",
            "scripted/x",
            "--batch",
            "everything",
            "--store",
            str(tmp_path / "s.db"),
        ],
    )
    assert r.exit_code == 2 and "--batch 'everything': expected answers, judges or both" in r.output
    r = CliRunner().invoke(
        app,
        [
            "run",
            "demo",
            "--model",
            "scripted/x",
            "--batch",
            "answers",
            "--store",
            str(tmp_path / "s.db"),
        ],
    )
    assert r.exit_code == 2 and "provider scripted has no batch API" in r.output


def test_settings_from_the_environment(monkeypatch):
    monkeypatch.setenv("GRANDROUNDS_BATCH_POLL", "0.5")
    s = BatchSettings.parse("judges")
    assert s is not None and (s.answers, s.judges, s.poll_interval, s.window) == (
        False,
        True,
        0.5,
        1.0,
    )
    assert BatchSettings.parse(None) is None and BatchSettings.parse("") is None
    monkeypatch.setenv("GRANDROUNDS_BATCH_POLL", "soon")
    with pytest.raises(ConfigError, match="GRANDROUNDS_BATCH_POLL"):
        BatchSettings.parse("both")
    assert executor_for(None, "answers") is Executor and executor_for(s, "answers") is Executor
    with pytest.raises(ConfigError, match="no batch API"):
        BatchExecutor(None, ScriptedProvider(ModelSpec("scripted", "x")), s)  # type: ignore[arg-type]


# ---- resume -------------------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_resume_after_a_kill_never_submits_a_key_twice(wire, tmp_path):
    """The first process is stopped as soon as its batch is stored; the second picks the batch up,
    including results for requests it does not ask for itself."""
    path = tmp_path / "s.db"
    with BatchServer(echo, plan=lambda n, ids: Plan(polls=4)) as srv:
        p = make_provider(wire, srv)
        reqs = requests_for(p, 8)

        async def submit_then_die():
            st = Store(path)
            ex = BatchExecutor(st, p, BatchSettings(answers=True, **FAST))
            task = asyncio.ensure_future(asyncio.gather(*(ex(r) for r in reqs)))
            while not st.batches():
                await asyncio.sleep(0.01)
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
            await p.aclose()
            st.close()

        asyncio.run(submit_then_die())
        with Store(path) as st:
            [open_batch] = st.open_batches(
                wire,
                f"{p.spec.base_url}/chat/completions"
                if wire == "openai"
                else f"{p.spec.base_url}/v1/messages",
            )
            assert set(open_batch.keys) == {r.key() for r in reqs} and all(
                st.get_call(r.key()) is None for r in reqs
            )

        watch = Watch()
        p2 = make_provider(wire, srv)
        with Store(path) as st:
            out, ex = ask_all(st, p2, requests_for(p2, 5), watch)  # asks only 5 of the 8
            assert [r.text for r in out] == [f"reply to question {i}" for i in range(5)]
            assert all(
                st.get_call(r.key()).text == f"reply to {r.messages[-1].content}" for r in reqs
            ), "all 8 stored"
            assert st.open_batches(wire, open_batch.endpoint) == []
        assert len(srv.stats.submissions) == 1 and set(srv.stats.submitted.values()) == {1}
        assert (
            srv.stats.polls >= 4
            and ex.stats.resumed == 5
            and ex.stats.submitted == 0
            and ex.hub.stats.resumed_batches == 1
        )
        assert watch.states()[0].startswith("resumed")


def test_cli_run_killed_while_waiting_resumes_without_resubmitting(tmp_path):
    """A real kill (SIGKILL) of `grandrounds run --batch answers` while its batch is in progress."""
    db = tmp_path / "s.db"
    env = {
        "PYTHONPATH": str(ROOT / "src"),
        "PATH": "/usr/bin:/bin",
        "HOME": str(ROOT),
        "GRANDROUNDS_BATCH_POLL": "0.05",
        "GRANDROUNDS_BATCH_WINDOW": "0.2",
        **offline_env(),
    }
    with BatchServer(
        lambda b: "Answer: C", plan=lambda n, ids: Plan(polls=10**9)
    ) as srv:  # in progress until told
        cmd = [
            sys.executable,
            "-m",
            "grandrounds",
            "run",
            "demo",
            "--model",
            "openai/m",
            "--base-url",
            srv.openai_url,
            "--protocol",
            "grandrounds",
            "--batch",
            "answers",
            "--store",
            str(db),
        ]
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        deadline = time.monotonic() + 60
        while (
            time.monotonic() < deadline and srv.stats.polls < 2
        ):  # submitted, stored, being watched
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        assert srv.batch_sizes() == [12]
        with sqlite3.connect(db) as con:
            assert (
                con.execute("SELECT COUNT(*) FROM batches WHERE collected_at IS NULL").fetchone()[0]
                == 1
            )
            assert con.execute("SELECT COUNT(*) FROM calls").fetchone()[0] == 0

        srv.finish_all()  # the provider finishes the batch while nobody watches
        r = subprocess.run(
            cmd + ["--out", str(tmp_path / "out")],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        assert srv.batch_sizes() == [12] and srv.stats.live == 0
        assert "resumed (validating)" in r.stderr or "resumed (in_progress)" in r.stderr
    res = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]
    assert res["n"] == 12 and res["n_unscored"] == 0


# ---- failures -----------------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_partial_failure_retries_the_failed_lines_in_a_new_batch(wire, tmp_path):
    seen: Counter[str] = Counter()

    def rule(body):
        q = last_user_text(body)
        seen[q] += 1
        if q in ("question 1", "question 4") and seen[q] == 1:
            return Fault("500")  # fails once: retried
        if q == "question 6":
            return Fault(
                "400",
                body={"error": {"message": "invalid request: bad field"}}
                if wire == "openai"
                else None,
            )
        return echo(body)

    watch = Watch()
    with BatchServer(rule) as srv, Store(tmp_path / "s.db") as st:
        p = make_provider(wire, srv)
        reqs = requests_for(p, 8)
        out, ex = ask_all(st, p, reqs, watch)
        assert srv.batch_sizes() == [8, 2]
        assert set(srv.stats.submissions[1].custom_ids) == {reqs[1].key(), reqs[4].key()}
        assert [r.ok for r in out] == [True] * 6 + [False, True]
        assert "400" in out[6].error and "invalid" in out[6].error
        failed = st.db.execute(
            "SELECT error, attempts FROM calls WHERE key = ?", (reqs[6].key(),)
        ).fetchone()
        assert (
            failed[0] == out[6].error and failed[1] == 1
        )  # stored as a failed call: the next run retries it
        assert st.get_call(reqs[1].key()).text == "reply to question 1"
    assert (
        ex.stats.failed == 1
        and ex.stats.retries == 2
        and ex.stats.made == 8
        and ex.stats.submitted == 10
    )
    assert ex.stats.errors and sum(ex.stats.errors.values()) == 1


@pytest.mark.parametrize("wire", WIRES)
def test_an_expired_batch_keeps_its_results_and_retries_the_rest(wire, tmp_path):
    with (
        BatchServer(
            echo, plan=lambda n, ids: Plan(end="expired", processed=3) if n == 1 else Plan()
        ) as srv,
        Store(tmp_path / "s.db") as st,
    ):
        p = make_provider(wire, srv)
        reqs = requests_for(p, 7)
        out, ex = ask_all(st, p, reqs)
        assert [r.text for r in out] == [f"reply to question {i}" for i in range(7)]
        assert srv.batch_sizes() == [7, 4]
        assert srv.stats.submitted == Counter(
            {r.key(): 1 if i < 3 else 2 for i, r in enumerate(reqs)}
        )
        states = [b.state for b in st.batches()]
    assert states == (["expired", "completed"] if wire == "openai" else ["ended", "ended"])
    assert ex.stats.retries == 4 and ex.stats.failed == 0


@pytest.mark.parametrize("wire", WIRES)
def test_a_cancelled_batch_is_retried(wire, tmp_path):
    with (
        BatchServer(
            echo,
            plan=lambda n, ids: Plan(polls=2, end="cancelled", processed=1) if n == 1 else Plan(),
        ) as srv,
        Store(tmp_path / "s.db") as st,
    ):
        p = make_provider(wire, srv)
        reqs = requests_for(p, 5)
        out, ex = ask_all(st, p, reqs)
        assert all(r.ok for r in out) and srv.batch_sizes() == [5, 4]
    assert ex.stats.retries == 4


def test_openai_batch_that_fails_validation_is_retried_then_fails_with_its_reason(tmp_path):
    with (
        BatchServer(
            echo,
            plan=lambda n, ids: Plan(end="failed", detail="model m is not available for batch"),
        ) as srv,
        Store(tmp_path / "s.db") as st,
    ):
        p = make_provider("openai", srv)
        reqs = requests_for(p, 3)
        out, ex = ask_all(st, p, reqs, max_attempts=2)
        assert srv.batch_sizes() == [3, 3]
        assert all(not r.ok for r in out)
        assert "batch failed: invalid_request: model m is not available for batch" in out[0].error
        assert out[0].error.endswith("(gave up after 2 attempts)")
        assert all(
            st.get_call(r.key()) is None for r in reqs
        )  # failures are not cache hits: a re-run asks again
    assert (
        ex.stats.failed == 3 and len(ex.stats.errors) == 1
    )  # one reason, counted without its attempt count


@pytest.mark.parametrize("wire", WIRES)
def test_batches_that_keep_expiring_end_in_counted_failures_then_a_rerun_recovers(wire, tmp_path):
    expire = {"on": True}
    with (
        BatchServer(
            echo, plan=lambda n, ids: Plan(end="expired", processed=0) if expire["on"] else Plan()
        ) as srv,
        Store(tmp_path / "s.db") as st,
    ):
        p = make_provider(wire, srv)
        reqs = requests_for(p, 4)
        out, ex = ask_all(st, p, reqs, max_attempts=3)
        assert srv.batch_sizes() == [4, 4, 4] and all(not r.ok for r in out)
        assert all(
            "expired" in r.error and r.error.endswith("(gave up after 3 attempts)") for r in out
        )
        assert ex.stats.failed == 4 and ex.stats.made == 4 and ex.stats.retries == 8
        expire["on"] = False
        out, ex = ask_all(st, make_provider(wire, srv), reqs)
        assert all(r.ok for r in out) and srv.batch_sizes() == [4, 4, 4, 4]


@pytest.mark.parametrize("wire", WIRES)
def test_a_submission_refused_for_a_while_is_sent_again_and_one_refused_for_good_fails_the_calls(
    wire, tmp_path
):
    with BatchServer(echo) as srv, Store(tmp_path / "s.db") as st:
        srv.create_faults = [529, 500]
        p = make_provider(wire, srv)
        out, ex = ask_all(st, p, requests_for(p, 3))
        assert (
            all(r.ok for r in out)
            and srv.batch_sizes() == [3]
            and ex.hub.stats.submit_failures == 2
        )
        assert (
            ex.stats.retries == 0
        )  # a refused submission is the endpoint's failure, counted there, not each call's

        srv.create_faults = [400]
        p = make_provider(wire, srv)
        reqs = requests_for(p, 2, start=10)
        out, ex = ask_all(st, p, reqs)
        assert all(
            r.error.startswith("batch not submitted: HTTP 400") for r in out
        ) and srv.batch_sizes() == [3]
        assert ex.stats.failed == 2 and st.batches()[-1].keys != tuple(r.key() for r in reqs)


def test_context_overflow_in_a_batch_is_a_final_failure_naming_the_flag(tmp_path):
    overflow = {
        "error": {
            "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
            "(3000 in the messages, 2000 in the completion).",
            "code": "context_length_exceeded",
        }
    }
    with BatchServer(lambda b: Fault("400", body=overflow)) as srv, Store(tmp_path / "s.db") as st:
        p = make_provider("openai", srv)
        [out], ex = ask_all(st, p, requests_for(p, 1))
    assert (
        out.error
        == "context 4096 exceeded: prompt 3000 + max_tokens 1024: lower --max-tokens or serve the model with a larger context"
    )
    assert srv.batch_sizes() == [1]


def test_a_batch_that_cannot_be_polled_fails_its_calls_for_this_run_and_stays_open(tmp_path):
    with (
        BatchServer(echo, plan=lambda n, ids: Plan(polls=10**9)) as srv,
        Store(tmp_path / "s.db") as st,
    ):
        p = make_provider("openai", srv)
        reqs = requests_for(p, 2)

        async def go():
            ex = BatchExecutor(st, p, BatchSettings(answers=True, **FAST))
            task = asyncio.ensure_future(asyncio.gather(*(ex(r) for r in reqs)))
            while not st.batches():
                await asyncio.sleep(0.01)
            srv.forget_all()  # the provider forgets it: every look is a 404
            try:
                return await task, ex
            finally:
                await p.aclose()

        out, ex = asyncio.run(go())
        assert all(
            not r.ok and "HTTP 404" in r.error and "run the same command again" in r.error
            for r in out
        )
        assert len(st.open_batches("openai", f"{srv.openai_url}/chat/completions")) == 1
    assert ex.hub.stats.poll_failures == 1


def test_log_probability_requests_are_asked_live(tmp_path):
    with BatchServer(lambda b: "C") as srv, Store(tmp_path / "s.db") as st:
        p = make_provider("openai", srv)
        req = Request(
            provider="openai",
            model="m",
            messages=(Message("user", "Pick one"),),
            kind="next_token",
            continuations=("A", "B", "C"),
            base_url=p.request_base_url(),
        )
        [out], ex = ask_all(st, p, [req])
    assert (
        max(out.scores, key=out.scores.get) == "C"
        and srv.stats.live == 1
        and srv.batch_sizes() == []
    )
    assert ex.stats.made == 1 and ex.stats.batched == 0


def test_request_lines_carry_the_live_body(tmp_path):
    """A batched call sends what the live call would: same body for OpenAI (the provider's own
    parameter mapping), Message Batches params equal to the Messages API body."""
    from grandrounds.core.records import GenParams

    with BatchServer(echo) as srv, Store(tmp_path / "s.db") as st:
        for wire in WIRES:
            p = make_provider(wire, srv)
            req = Request(
                provider=p.spec.provider,
                model="m",
                messages=(Message("system", "S"), Message("user", "U")),
                base_url=p.request_base_url(),
                params=GenParams(
                    temperature=0.3, max_tokens=17, top_p=0.9, stop=("\n",), json_object=True
                ),
            )
            ask_all(st, p, [req])
            p = make_provider(wire, srv)
            asyncio.run(_live(p, req))
        batched = [s.bodies[0] for s in srv.stats.submissions]
        assert batched == srv.stats.live_bodies
    assert batched[0]["response_format"] == {"type": "json_object"} and batched[1][
        "stop_sequences"
    ] == ["\n"]


async def _live(p, req):
    try:
        return await p.call(req)
    finally:
        await p.aclose()


def test_no_request_waits_forever_when_results_cannot_be_read(tmp_path):
    """A result line too large for the cap: the calls fail with the reason instead of hanging."""
    with BatchServer(lambda b: "y" * 4096) as srv, Store(tmp_path / "s.db") as st:
        p = OpenAIProvider(ModelSpec("openai", "m", srv.openai_url), max_response_mb=0.002)
        out, _ = ask_all(st, p, requests_for(p, 2))
    assert all("response too large" in r.error for r in out)


def test_nothing_is_left_open_after_a_batched_run(tmp_path, recwarn):
    with BatchServer(echo) as srv, Store(tmp_path / "s.db") as st:
        p = make_provider("anthropic", srv)
        ask_all(st, p, requests_for(p, 3))
    assert not [w for w in recwarn if "Unclosed" in str(w.message)]
    assert Path(tmp_path / "s.db").exists()
