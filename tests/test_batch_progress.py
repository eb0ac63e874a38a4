"""Batched runs as the user sees them: batch states on the progress bar, the batches of each role in
the closing summary (run and regrade), and judge calls that overflow the context re-sent once in a
new batch with max_tokens shrunk as a live call would be. Against the loopback server that speaks
both batch wire formats (grandrounds.testing.batch)."""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections import Counter

import pytest
from rich.console import Console
from typer.testing import CliRunner

from grandrounds.cli.common import call_summary
from grandrounds.cli.main import app
from grandrounds.core.records import GenParams, Message, Request, Response
from grandrounds.core.registry import BENCHMARKS
from grandrounds.run.batches.events import BatchEvent
from grandrounds.run.batches.executor import BatchExecutor, wire_for
from grandrounds.run.batches.settings import BatchSettings
from grandrounds.run.executor import CONTEXT_MARGIN, Executor
from grandrounds.run.progress import BatchColumn, RichProgress
from grandrounds.store import Store
from grandrounds.testing import Fault, last_user_text
from grandrounds.testing.batch import BatchServer, Plan
from tests.rubric_bench.triage import TriageRubric
from tests.test_batching import FAST, WIRES, ask_all, echo, make_provider, requests_for
from tests.test_new_rubric_benchmark import ROWS, judge_rule


class Recording(RichProgress):
    """A RichProgress on a string console that keeps the bar's batch text after every event."""

    def __init__(self) -> None:
        self.buf = io.StringIO()
        super().__init__(Console(file=self.buf, width=250, force_terminal=False))
        self.texts: list[str] = []

    def on_batch(self, event: BatchEvent) -> None:
        super().on_batch(event)
        self.texts.append(self.bar.tasks[0].fields["batches"])


def run_batched(store, provider, reqs, observer=None, **settings):
    return ask_all(store, provider, reqs, observer, **({"judges": True} | settings))


# ---- the progress bar ---------------------------------------------------------------------------


@pytest.mark.parametrize("wire", WIRES)
def test_progress_bar_shows_how_many_batches_are_in_which_state_and_calls_back_as_polls_land(
    wire, tmp_path
):
    # batch 1 (6 requests): reported 3 more processed per look, its last two looks "finalizing" (OpenAI);
    # batch 2 (4 requests): 2 more per look, ends later.
    plans = {1: Plan(polls=4, progress=3, finalizing=2), 2: Plan(polls=6, progress=2)}
    prog = Recording()
    with (
        BatchServer(echo, plan=lambda n, ids: plans[n]) as srv,
        Store(tmp_path / "s.db") as st,
        prog,
    ):
        prog.start(10, "demo · m")
        p = make_provider(wire, srv)
        reqs = requests_for(p, 10)
        # split by size (6 lines fit) in one submission, so both batches are watched from the first poll
        w = wire_for(p, BatchSettings())
        size = len(w.line(reqs[0].key(), w.body(p, reqs[0])))
        out, ex = run_batched(st, p, reqs, prog, max_bytes=6 * size + size // 2)
        assert srv.batch_sizes() == [6, 4] and all(r.ok for r in out)
    texts = prog.texts
    if wire == "openai":  # created as validating; then each look moves the counts
        assert texts[:2] == [
            "batches: 1 validating · 0/6 calls back",
            "batches: 2 validating · 0/10 calls back",
        ]
        assert "batches: 1 in_progress, 1 validating · 3/10 calls back" in texts
        assert "batches: 1 finalizing, 1 in_progress · 8/10 calls back" in texts
        assert (
            "batches: 1 completed, 1 in_progress · 10/10 calls back" in texts
        )  # done, results being read
    else:  # a message batch is in_progress from its creation, then "ended"
        assert texts[:2] == [
            "batches: 1 in_progress · 0/6 calls back",
            "batches: 2 in_progress · 0/10 calls back",
        ]
        assert "batches: 2 in_progress · 5/10 calls back" in texts
        assert "batches: 1 ended, 1 in_progress · 10/10 calls back" in texts
    assert (
        "batches: 1 closed · 10/10 calls back" not in texts
    )  # one collected while the other is watched
    assert "batches: 1 in_progress · 10/10 calls back" in texts
    assert texts[-1] == "batches: 2 closed · 10/10 calls back"
    # every change moved the bar; only submissions and collections were printed as lines
    shown = prog.buf.getvalue()
    assert "batches: 2 closed · 10/10 calls back" in shown
    lines = [line for line in shown.splitlines() if line.startswith("batch ")]
    ended = "completed" if wire == "openai" else "ended"
    assert [
        re.sub(r"batch_?\d+|msgbatch_\d+", "ID", line.split(":")[1].split(",")[0]) for line in lines
    ] == [" submitted", " submitted", f" collected ({ended})", f" collected ({ended})"]
    assert ex.hub.stats.polls == 10 and len(texts) > len(lines)


def test_a_live_run_shows_no_batch_column():
    prog = Recording()
    with prog:
        prog.start(2, "demo · m")
        columns = prog.bar.columns
        prog.on_call(Response(key="a", text="A"), retries=0)
    assert prog.bar.columns == columns and not any(isinstance(c, BatchColumn) for c in columns)
    assert "batches" not in prog.buf.getvalue() and "batches" not in prog.bar.tasks[0].fields


def test_batch_text_counts_states_and_requests_processed_over_both_wire_formats():
    prog = Recording()
    prog.start(1000, "x")
    prog.on_batch(
        BatchEvent(
            provider="openai",
            batch_id="b1",
            what="in_progress",
            size=400,
            counts={"total": 400, "completed": 180, "failed": 20},
            state="in_progress",
        )
    )
    prog.on_batch(
        BatchEvent(
            provider="openai",
            batch_id="b2",
            what="in_progress",
            size=400,
            counts={"total": 400, "completed": 100, "failed": 0},
            state="in_progress",
        )
    )
    prog.on_batch(
        BatchEvent(
            provider="anthropic",
            batch_id="b3",
            what="canceling",
            size=200,
            counts={"processing": 160, "succeeded": 30, "errored": 5, "canceled": 5, "expired": 0},
            state="finalizing",
        )
    )
    assert prog.texts[-1] == "batches: 2 in_progress, 1 finalizing · 340/1,000 calls back"
    prog.on_batch(
        BatchEvent(
            provider="openai",
            batch_id="b1",
            what="collected (completed)",
            size=400,
            counts={},
            state="completed",
            closed=True,
        )
    )
    assert prog.texts[-1] == "batches: 1 finalizing, 1 in_progress · 540/1,000 calls back"
    prog.on_batch(
        BatchEvent(
            provider="openai",
            batch_id="b2",
            what="not reachable",
            size=400,
            counts={},
            state="in_progress",
            closed=True,
        )
    )
    assert prog.texts[-1] == "batches: 1 finalizing · 540/1,000 calls back", (
        "an unreachable batch counts what was seen of it"
    )


# ---- the closing summary --------------------------------------------------------------------------


def flaky_once(*questions: str):
    seen: Counter[str] = Counter()

    def rule(body):
        q = last_user_text(body)
        seen[q] += 1
        return Fault("500") if q in questions and seen[q] == 1 else echo(body)

    return rule


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize(
    "end, ended, cause",
    [
        ("expired", "1 expired", "after an expiry"),
        ("cancelled", "1 cancelled", "after a cancellation"),
    ],
)
def test_summary_names_each_batch_outcome_and_the_calls_retried_by_cause(
    wire, end, ended, cause, tmp_path
):
    """Batch 1 ends early with 4 of its 6 requests processed, one of them a server error: the error
    and the 2 requests never run go out again in batch 2, which completes."""
    plan = lambda n, ids: Plan(end=end, processed=4) if n == 1 else Plan()  # noqa: E731
    with BatchServer(flaky_once("question 1"), plan=plan) as srv, Store(tmp_path / "s.db") as st:
        p = make_provider(wire, srv)
        out, ex = run_batched(st, p, requests_for(p, 6))
        assert all(r.ok for r in out) and srv.batch_sizes() == [6, 3]
    others = {"1 expired": "0 expired", "1 cancelled": "0 cancelled"}
    outcomes = f"1 completed, {ended if end == 'expired' else others['1 expired']}, {ended if end == 'cancelled' else others['1 cancelled']}, 0 failed"
    resent = {"after an expiry": 0, "after a cancellation": 0} | {cause: 2}
    want = (
        f"answers batches: 2 submitted, 0 picked up from an earlier run; ended: {outcomes}; calls retried: "
        f"{resent['after an expiry']} after an expiry, {resent['after a cancellation']} after a cancellation, 1 after a failed line"
    )
    assert call_summary(ex.stats, []) == [
        "answers: 6 calls made, 0 from the store, 0 failed, 3 retries",
        want,
    ]


def test_summary_counts_a_batch_that_failed_validation(tmp_path):
    plan = lambda n, ids: Plan(end="failed") if n == 1 else Plan()  # noqa: E731
    with BatchServer(echo, plan=plan) as srv, Store(tmp_path / "s.db") as st:
        p = make_provider("openai", srv)
        _, ex = run_batched(st, p, requests_for(p, 3))
        assert srv.batch_sizes() == [3, 3]
    assert ex.stats.batch_line() == (
        "batches: 2 submitted, 0 picked up from an earlier run; ended: 1 completed, 0 expired, "
        "0 cancelled, 1 failed; calls retried: 0 after an expiry, 0 after a cancellation, 3 after a failed line"
    )


@pytest.mark.parametrize("wire", WIRES)
def test_summary_counts_batches_picked_up_from_an_earlier_run(wire, tmp_path):
    path = tmp_path / "s.db"
    with BatchServer(echo, plan=lambda n, ids: Plan(polls=3)) as srv:
        p = make_provider(wire, srv)
        reqs = requests_for(p, 4)

        async def submit_then_stop():
            with Store(path) as st:
                ex = BatchExecutor(st, p, BatchSettings(answers=True, **FAST))
                task = asyncio.ensure_future(asyncio.gather(*(ex(r) for r in reqs)))
                while not st.batches():
                    await asyncio.sleep(0.01)
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                await p.aclose()
            return ex

        first = asyncio.run(submit_then_stop())
        assert first.stats.batch_line().startswith(
            "batches: 1 submitted, 0 picked up from an earlier run; ended: 0 completed, "
            "0 expired, 0 cancelled, 0 failed, 1 still open;"
        )
        with Store(path) as st:
            p = make_provider(wire, srv)
            out, ex = run_batched(st, p, requests_for(p, 4))
        assert all(r.ok for r in out) and srv.batch_sizes() == [4]
    assert ex.stats.batch_line() == (
        "batches: 0 submitted, 1 picked up from an earlier run; ended: 1 completed, 0 expired, "
        "0 cancelled, 0 failed; calls retried: 0 after an expiry, 0 after a cancellation, 0 after a failed line"
    )


def words(text: str) -> str:
    """Output as one line (the console wraps long lines at the terminal's width)."""
    return " ".join(text.split())


def test_run_and_regrade_summaries_through_the_cli(tmp_path, monkeypatch):
    """Answers batched on OpenAI's wire, judges on Anthropic's; the regrade's judge batch expires
    with two requests processed, the rest going out again."""
    monkeypatch.setenv("GRANDROUNDS_BATCH_POLL", "0.05")
    monkeypatch.setenv("GRANDROUNDS_BATCH_WINDOW", "0.1")
    data = tmp_path / "triage.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    store = tmp_path / "s.db"
    n_criteria = sum(len(row["rubric"]) for row in ROWS)
    judge_plan = lambda n, ids: Plan(end="expired", processed=2) if n == 2 else Plan()  # noqa: E731
    with (
        BENCHMARKS.registered("triage-rubric", TriageRubric),
        BatchServer(lambda b: "advice") as cand,
        BatchServer(judge_rule, plan=judge_plan) as judge,
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
        shown = words(r.output)
        none = "0 expired, 0 cancelled, 0 failed; calls retried: 0 after an expiry, 0 after a cancellation, 0 after a failed line"
        assert (
            f"answers batches: 1 submitted, 0 picked up from an earlier run; ended: 1 completed, {none}"
            in shown
        )
        assert (
            f"judge anthropic/judge batches: 1 submitted, 0 picked up from an earlier run; ended: 1 completed, {none}"
            in shown
        )

        r = CliRunner().invoke(app, [*args, "--batch", "both"])
        assert r.exit_code == 0, r.output
        assert (
            "answers batches: none submitted or picked up (every call came from the store)"
            in words(r.output)
        )

        fingerprint = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0][
            "fingerprint"
        ]
        assert "engine" not in fingerprint, "only engine-served models name an engine"
        run_id = fingerprint["run_id"]
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
        assert judge.batch_sizes() == [n_criteria, n_criteria, n_criteria - 2]
    assert (
        f"judge anthropic/judge2 batches: 2 submitted, 0 picked up from an earlier run; ended: 1 completed, 1 expired, "
        f"0 cancelled, 0 failed; calls retried: {n_criteria - 2} after an expiry, 0 after a cancellation, 0 after a failed line"
    ) in words(r.output)
    assert "answers" not in r.output, "a regrade asks no answers"


# ---- context overflow: shrunk once, as a live call ----------------------------------------------


def overflow_body(wire: str, prompt: int, max_tokens: int, limit: int = 4096) -> dict:
    """What each provider says when the prompt plus max_tokens do not fit (OpenAI: the Chat
    Completions message; Anthropic: the Messages API's)."""
    if wire == "openai":
        return {
            "error": {
                "message": f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{prompt + max_tokens} tokens ({prompt} in the messages, {max_tokens} in the completion).",
                "code": "context_length_exceeded",
            }
        }
    return {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": f"input length and `max_tokens` exceed context limit: {prompt} + {max_tokens} > {limit}, "
            "decrease input length or `max_tokens` and try again",
        },
    }


def context_rule(wire: str, prompts: dict[str, int], limit: int = 4096):
    """A server with a ``limit``-token context: question -> prompt size (others: 10 tokens)."""

    def rule(body):
        q = last_user_text(body)
        prompt = prompts.get(q, 10)
        if prompt + body["max_tokens"] > limit:
            return Fault("400", body=overflow_body(wire, prompt, body["max_tokens"], limit))
        return f"verdict for {q} in at most {body['max_tokens']} tokens"

    return rule


def judge_requests(p, n: int, max_tokens: int = 2000) -> list[Request]:
    return [
        Request(
            provider=p.spec.provider,
            model="m",
            messages=(Message("user", f"question {i}"),),
            params=GenParams(max_tokens=max_tokens),
            purpose="judge",
            base_url=p.request_base_url(),
        )
        for i in range(n)
    ]


@pytest.mark.parametrize("wire", WIRES)
def test_a_batched_judge_call_over_the_context_is_sent_again_once_with_max_tokens_shrunk(
    wire, tmp_path
):
    room = 4096 - 3000 - CONTEXT_MARGIN
    rule = context_rule(wire, {"question 0": 3000, "question 2": 3000})
    with BatchServer(rule) as srv, Store(tmp_path / "s.db") as st:
        p = make_provider(wire, srv)
        reqs = judge_requests(p, 4)
        out, ex = run_batched(st, p, reqs)
        assert srv.batch_sizes() == [4, 2]
        again = srv.stats.submissions[1]
        assert again.custom_ids == [reqs[0].key(), reqs[2].key()], (
            "the same calls: results land under their own keys"
        )
        assert [b["max_tokens"] for b in again.bodies] == [room, room]
        assert [r.text for r in out] == [
            f"verdict for question {i} in at most {room if i in (0, 2) else 2000} tokens"
            for i in range(4)
        ]
        assert st.get_call(reqs[0].key()).text == out[0].text
        # the live executor, on the same server, re-sends the very same body
        p = make_provider(wire, srv)
        live = Executor(st, p)

        async def ask_live():
            try:
                return await live(judge_requests(p, 1, max_tokens=1999)[0])
            finally:
                await p.aclose()

        assert asyncio.run(ask_live()).ok and live.stats.shrunk == 1
        assert (
            srv.stats.live_bodies[-1]["max_tokens"] == room
            and srv.stats.live_bodies[-1]["messages"] == again.bodies[0]["messages"]
        )
    assert (
        ex.stats.shrunk == 2
        and ex.stats.retries == 0
        and ex.stats.failed == 0
        and ex.stats.submitted == 6
    )
    assert ex.stats.resent == {}, "a shrink is not a retry"
    assert call_summary(ex.stats, [])[0] == (
        "answers: 4 calls made, 0 from the store, 0 failed, 0 retries, 2 shrunk to fit the context "
        "(max tokens lowered to what the server's context leaves)"
    )


@pytest.mark.parametrize("wire", WIRES)
def test_an_overflow_that_cannot_be_fitted_fails_naming_the_numbers(wire, tmp_path):
    with (
        BatchServer(context_rule(wire, {"question 0": 5000})) as srv,
        Store(tmp_path / "s.db") as st,
    ):
        p = make_provider(wire, srv)
        [out], ex = run_batched(st, p, judge_requests(p, 1))
        assert srv.batch_sizes() == [1], "nothing to shrink to: not sent again"
    assert out.error == (
        "context 4096 exceeded: prompt 5000 + max_tokens 2000: the prompt alone is over the model's context "
        "(5000 tokens, context 4096), so no max tokens can fit it: serve the model with a larger context "
        "(not asked again with the same model and options)"
    )
    assert out.finish_reason == "context_length", "final: a later run takes it from the store"
    assert ex.stats.shrunk == 0 and ex.stats.failed == 1


@pytest.mark.parametrize("wire", WIRES)
def test_a_shrunk_call_that_overflows_again_fails_with_the_max_tokens_it_was_sent_with(
    wire, tmp_path
):
    """The server counts 40 more prompt tokens than it said the first time: the shrunk request
    overflows too, and is not shrunk a second time."""
    said = {"n": 0}

    def rule(body):
        said["n"] += 1
        prompt = 3000 if said["n"] == 1 else 3040
        return Fault("400", body=overflow_body(wire, prompt, body["max_tokens"]))

    with BatchServer(rule) as srv, Store(tmp_path / "s.db") as st:
        p = make_provider(wire, srv)
        [out], ex = run_batched(st, p, judge_requests(p, 1))
        assert srv.batch_sizes() == [1, 1]
    room = 4096 - 3000 - CONTEXT_MARGIN
    assert out.error == (
        f"context 4096 exceeded: prompt 3040 + max_tokens {room}: lower --judge-max-tokens "
        "or serve the model with a larger context"
    )
    assert ex.stats.shrunk == 1 and ex.stats.failed == 1 and ex.stats.retries == 0


def test_an_answer_over_the_context_is_not_shrunk(tmp_path):
    """Only judge calls adapt (as live): a candidate's max_tokens is the protocol's."""
    with (
        BatchServer(context_rule("openai", {"question 0": 3000})) as srv,
        Store(tmp_path / "s.db") as st,
    ):
        p = make_provider("openai", srv)
        req = Request(
            provider="openai",
            model="m",
            messages=(Message("user", "question 0"),),
            params=GenParams(max_tokens=2000),
            base_url=p.request_base_url(),
        )
        [out], ex = run_batched(st, p, [req])
        assert srv.batch_sizes() == [1]
    assert (
        out.error.startswith(
            "context 4096 exceeded: prompt 3000 + max_tokens 2000: lower --max-tokens"
        )
        and ex.stats.shrunk == 0
    )
