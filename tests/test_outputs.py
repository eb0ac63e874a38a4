"""Run outputs (results.json and samples.jsonl) and the progress bar's counters."""

from __future__ import annotations

import io
import json
import time

import pytest
from rich.console import Console

from grandrounds.core.records import (
    Cell,
    Criterion,
    Grade,
    Message,
    Response,
    Result,
    Sample,
    Usage,
    Verdict,
    Vote,
)
from grandrounds.run.outputs import result_json, sample_line, write_outputs
from grandrounds.run.progress import RichProgress

RESULT_KEYS = [
    "benchmark",
    "model",
    "judge",
    "metric",
    "score",
    "ci95",
    "n",
    "n_unscored",
    "breakdown",
    "fingerprint",
    "extra",
]
LINE_KEYS = [
    "benchmark",
    "model",
    "sample_id",
    "prompt",
    "response",
    "error",
    "extracted",
    "target",
    "score",
    "grade_status",
    "grade_error",
    "verdicts",
    "votes",
    "details",
]


def a_result(**kw) -> Result:
    base = dict(
        benchmark="medqa",
        model="openai/gpt-x",
        judge=None,
        metric="accuracy",
        score=0.75,
        ci95=(0.6, 0.86),
        n=40,
        n_unscored=2,
        breakdown={
            "meta_info": {
                "step1": Cell(score=0.8, n=20, n_unscored=1, ci95=(0.58, 0.92)),
                "step2&3": Cell(score=0.7, n=20, n_unscored=1, metrics={"f1": 0.5}),
            }
        },
        fingerprint={"grader": "mcq", "answer_mode": "generate"},
        extra={"unextracted": 3},
    )
    base.update(kw)
    return Result(**base)


SAMPLE = Sample(
    id="q-17",
    benchmark="medqa",
    messages=(Message("user", "Which drug reverses heparin?"),),
    target="B",
    choices={"A": "Vitamin K", "B": "Protamine sulfate"},
)


# ---- result_json -------------------------------------------------------------------------------


def test_result_json_has_every_field_in_a_fixed_order():
    d = result_json(a_result())
    assert list(d) == RESULT_KEYS


def test_result_json_values_are_plain_json():
    d = result_json(a_result())
    assert d["benchmark"] == "medqa" and d["model"] == "openai/gpt-x" and d["judge"] is None
    assert d["score"] == 0.75 and d["n"] == 40 and d["n_unscored"] == 2
    assert d["ci95"] == [0.6, 0.86]  # tuple -> list
    assert d["breakdown"] == {
        "meta_info": {
            "step1": {"score": 0.8, "n": 20, "n_unscored": 1, "ci95": [0.58, 0.92], "metrics": {}},
            "step2&3": {
                "score": 0.7,
                "n": 20,
                "n_unscored": 1,
                "ci95": None,
                "metrics": {"f1": 0.5},
            },
        }
    }
    assert d["fingerprint"] == {"grader": "mcq", "answer_mode": "generate"}
    assert d["extra"] == {"unextracted": 3}
    assert json.loads(json.dumps(d)) == d


def test_result_json_with_no_score():
    d = result_json(a_result(score=None, ci95=None, n=0, n_unscored=40, breakdown={}))
    assert d["score"] is None and d["ci95"] is None and d["breakdown"] == {}


def test_result_json_nan_becomes_null():
    d = result_json(a_result(score=float("nan"), extra={"kappa": float("nan")}))
    assert d["score"] is None and d["extra"] == {"kappa": None}
    json.loads(json.dumps(d, allow_nan=False))  # strictly valid JSON


# ---- sample_line -------------------------------------------------------------------------------


def test_sample_line_for_a_chat_answer():
    resp = Response(key="k1", text="The answer is B.", usage=Usage(12, 5))
    grade = Grade(sample_id="q-17", value=1.0, extracted="B", details={"unextracted": False})
    prompt = [{"role": "user", "content": "Which drug reverses heparin?"}]
    line = sample_line(a_result(), SAMPLE, prompt, resp, grade)
    assert list(line) == LINE_KEYS
    assert line == {
        "benchmark": "medqa",
        "model": "openai/gpt-x",
        "sample_id": "q-17",
        "prompt": prompt,
        "response": "The answer is B.",
        "error": None,
        "extracted": "B",
        "target": "B",
        "score": 1.0,
        "grade_status": "scored",
        "grade_error": None,
        "verdicts": [],
        "votes": [],
        "details": {"unextracted": False},
    }


def test_sample_line_for_a_log_prob_answer_shows_scores():
    resp = Response(key="k", scores={"A": -2.5, "B": -0.1})
    line = sample_line(
        a_result(), SAMPLE, None, resp, Grade(sample_id="q-17", value=1.0, extracted="B")
    )
    assert line["response"] == {"A": -2.5, "B": -0.1}
    assert line["prompt"] is None


def test_sample_line_for_a_failed_call():
    resp = Response(key="k", error="HTTP 503: overloaded (gave up after 6 attempts)")
    grade = Grade(
        sample_id="q-17",
        value=None,
        error="answer failed: HTTP 503: overloaded",
        status="answer_failed",
    )
    line = sample_line(a_result(), SAMPLE, None, resp, grade)
    assert line["response"] is None
    assert line["error"] == "HTTP 503: overloaded (gave up after 6 attempts)"
    assert line["score"] is None
    assert line["grade_status"] == "answer_failed", (
        "why it is unscored is data, not parsed from the message"
    )
    assert line["grade_error"] == "answer failed: HTTP 503: overloaded"


def test_sample_line_without_any_response():
    line = sample_line(
        a_result(),
        SAMPLE,
        None,
        None,
        Grade(sample_id="q-17", value=None, error="not asked", status="not_asked"),
    )
    assert line["response"] is None and line["error"] is None and line["grade_error"] == "not asked"
    assert line["grade_status"] == "not_asked"


def test_sample_line_empty_text_is_kept_not_replaced_by_scores():
    line = sample_line(
        a_result(), SAMPLE, None, Response(key="k", text=""), Grade(sample_id="q-17", value=0.0)
    )
    assert line["response"] == ""


def test_sample_line_structured_target_prompt_and_verdicts():
    sample = Sample(
        id="hb-1",
        benchmark="healthbench",
        messages=(Message("user", "My child has a fever of 39.5 C."),),
        target=("A", "C"),
        rubric=(Criterion("c1", "Advises antipyretic dosing by weight", 5.0),),
    )
    vote = Vote(
        judge="openai/judge", status="met", raw='{"criteria_met": true}', attempts=1, keys=("jk1",)
    )
    grade = Grade(
        sample_id="hb-1",
        value=0.5,
        verdicts=(Verdict("c1", "met", "dosing given", (vote,)),),
        details={"points": (5.0, 10.0), "ratio": float("nan")},
    )
    prompt = (Message("user", "My child has a fever of 39.5 C."),)
    line = sample_line(
        a_result(benchmark="healthbench", judge="openai/judge"),
        sample,
        prompt,
        Response(key="k", text="Give paracetamol."),
        grade,
    )
    assert line["target"] == ["A", "C"]
    assert line["prompt"] == [{"role": "user", "content": "My child has a fever of 39.5 C."}]
    assert line["verdicts"] == [
        {
            "criterion_id": "c1",
            "status": "met",
            "explanation": "dosing given",
            "votes": [
                {
                    "judge": "openai/judge",
                    "status": "met",
                    "score": None,
                    "explanation": "",
                    "raw": '{"criteria_met": true}',
                    "attempts": 1,
                    "keys": ["jk1"],
                    "error": None,
                    "run": 0,
                    "truncated": False,
                }
            ],
            "raw": '{"criteria_met": true}',  # the reply behind the decision
        }
    ]
    assert line["votes"] == []
    assert line["details"] == {"points": [5.0, 10.0], "ratio": None}
    json.loads(json.dumps(line, allow_nan=False))


def test_sample_line_unknown_verdict_shows_every_reply_and_whole_answer_votes():
    votes = (
        Vote(judge="j1", status="met", raw="yes"),
        Vote(judge="j2", status="unmet", raw="no"),
        Vote(judge="j3", status="unknown", raw="???"),
    )
    runs = (
        Vote(judge="j1", status="met", score=4.0, run=0),
        Vote(judge="j1", status="met", score=5.0, run=1),
    )
    grade = Grade(
        sample_id="s",
        value=0.9,
        verdicts=(Verdict("c1", "unknown", "split panel", votes),),
        votes=runs,
    )
    line = sample_line(a_result(), SAMPLE, None, Response(key="k", text="x"), grade)
    assert line["verdicts"][0]["raw"] == "yes\n---\nno\n---\n???"
    assert [v["status"] for v in line["verdicts"][0]["votes"]] == ["met", "unmet", "unknown"]
    assert [(v["score"], v["run"]) for v in line["votes"]] == [(4.0, 0), (5.0, 1)]


def test_sample_line_verdict_raw_is_the_reply_of_a_judge_that_voted_for_the_decision():
    votes = (
        Vote(judge="j1", status="unmet", raw="not met"),
        Vote(judge="j2", status="met", raw="met: dosing"),
        Vote(judge="j3", status="met", raw="met too"),
    )
    grade = Grade(sample_id="s", value=1.0, verdicts=(Verdict("c1", "met", "", votes),))
    line = sample_line(a_result(), SAMPLE, None, Response(key="k", text="x"), grade)
    assert line["verdicts"][0]["raw"] == "met: dosing"


# ---- write_outputs -----------------------------------------------------------------------------


def lines_for(n: int) -> list[dict]:
    out = []
    for i in range(n):
        resp = Response(key=f"k{i}", text=f"回答 {i}\u2028第二行")
        out.append(
            sample_line(
                a_result(),
                SAMPLE,
                None,
                resp,
                Grade(sample_id=SAMPLE.id, value=float(i % 2), extracted="AB"[i % 2]),
            )
        )
    return out


def test_write_outputs_creates_both_files(tmp_path):
    out = tmp_path / "runs" / "nested" / "out"
    results = [a_result(), a_result(benchmark="pubmedqa", metric="accuracy", score=0.5)]
    lines = lines_for(5)
    write_outputs(out, results, lines)
    doc = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert doc == {"results": [result_json(r) for r in results]}
    got = [
        json.loads(x) for x in (out / "samples.jsonl").read_text(encoding="utf-8").split("\n") if x
    ]
    assert got == lines
    assert sorted(p.name for p in out.iterdir()) == ["results.json", "samples.jsonl"], (
        "no temporary files left"
    )


def test_write_outputs_keeps_non_ascii_readable_and_one_record_per_line(tmp_path):
    write_outputs(tmp_path, [a_result(model="openai/千问")], lines_for(3))
    results_text = (tmp_path / "results.json").read_text(encoding="utf-8")
    samples_bytes = (tmp_path / "samples.jsonl").read_bytes()
    assert "千问" in results_text and "\\u" not in results_text
    assert results_text.startswith('{\n  "results": [')  # indented for reading
    assert samples_bytes.count(b"\n") == 3
    assert "回答 0".encode() in samples_bytes
    # Raw U+2028 stays inside its record: a reader that splits at "\n" only sees 3 records.
    assert len([x for x in samples_bytes.decode("utf-8").split("\n") if x]) == 3


def test_write_outputs_replaces_earlier_files(tmp_path):
    write_outputs(tmp_path, [a_result(score=0.1)], lines_for(4))
    write_outputs(tmp_path, [a_result(score=0.9)], lines_for(1))
    doc = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert [r["score"] for r in doc["results"]] == [0.9]
    assert (tmp_path / "samples.jsonl").read_text(encoding="utf-8").count("\n") == 1


def test_write_outputs_with_no_samples(tmp_path):
    write_outputs(tmp_path, [], [])
    assert json.loads((tmp_path / "results.json").read_text()) == {"results": []}
    assert (tmp_path / "samples.jsonl").read_bytes() == b""


def test_write_outputs_accepts_a_generator_of_results(tmp_path):
    write_outputs(tmp_path, (a_result(n=k) for k in (1, 2, 3)), [])
    doc = json.loads((tmp_path / "results.json").read_text())
    assert [r["n"] for r in doc["results"]] == [1, 2, 3]


def test_write_outputs_failure_leaves_the_previous_results_intact(tmp_path):
    write_outputs(tmp_path, [a_result(score=0.25)], lines_for(2))
    before_results = (tmp_path / "results.json").read_bytes()

    class Unserialisable:
        pass

    with pytest.raises(TypeError):
        write_outputs(tmp_path, [a_result(extra={"bad": Unserialisable()})], lines_for(1))
    assert (tmp_path / "results.json").read_bytes() == before_results


# ---- RichProgress --------------------------------------------------------------------------------


def make_progress() -> tuple[RichProgress, io.StringIO]:
    buf = io.StringIO()
    return RichProgress(Console(file=buf, width=160, force_terminal=False)), buf


def test_progress_counts_calls_failures_retries_and_unscored():
    p, buf = make_progress()
    with p:
        p.start(5, "medqa · openai/m")
        p.on_call(Response(key="a", text="A"), retries=0)
        p.on_call(Response(key="b", text="B"), retries=2)  # two failed tries before success
        p.on_call(Response(key="c", error="HTTP 400: bad"), retries=0)
        p.on_call(Response(key="d", error="timeout (gave up)"), retries=3)
        for g in (
            Grade(sample_id="1", value=1.0),
            Grade(sample_id="2", value=None),
            Grade(sample_id="3", value=0.0),
            Grade(sample_id="4", value=None, status="answer_failed"),
        ):
            p.advance(g)
    assert p.calls == 4
    assert p.failed == 2, "calls that finally failed, not attempts"
    assert p.retries == 2 + 3
    assert p.unscored == 2
    task = p.bar.tasks[0]
    assert (task.completed, task.total) == (4, 5)
    assert (
        task.fields["failed"] == 2 and task.fields["retries"] == 5 and task.fields["unscored"] == 2
    )
    assert task.description == "medqa · openai/m"
    text = buf.getvalue()
    assert "4/5" in text and "failed 2" in text and "retries 5" in text and "unscored 2" in text


def test_eta_after_a_resume_is_paced_by_the_work_done_here_not_by_stored_items():
    p, _ = make_progress()
    p.start(100, "x")
    for i in range(50):  # half the run read back from the store: instant
        p.advance(Grade(sample_id=str(i), value=1.0), fresh=False)
    assert p.eta() is None, "no pace before any item took work"
    p.t_work = p.t0 = time.perf_counter() - 10.0
    for i in range(50, 60):  # ten items took 10 s: 1 s each
        p.advance(Grade(sample_id=str(i), value=1.0))
    # 40 items left at 1 s each; counting the stored items too would give 40 * 10/60 = 6.7 s
    assert p.eta() == pytest.approx(40.0, rel=0.05)
    p.draw()  # the bar is handed the counts at most every DRAW_EVERY seconds
    assert p.bar.tasks[0].fields["eta"] in ("0:00:40", "0:00:39", "0:00:41")


def test_progress_score_zero_is_not_unscored():
    p, _ = make_progress()
    p.start(2, "x")
    p.advance(Grade(sample_id="1", value=0.0))
    p.advance(Grade(sample_id="2", value=0.0))
    assert p.unscored == 0
    assert p.bar.tasks[0].completed == 2


def test_progress_rate_is_calls_per_elapsed_second():
    p, _ = make_progress()
    p.start(10, "x")
    p.t0 = time.perf_counter() - 2.0  # pretend the run started two seconds ago
    for _ in range(6):
        p.on_call(Response(key="k", text="A"), retries=0)
    p.draw()  # the bar is handed the counts at most every DRAW_EVERY seconds
    assert p.bar.tasks[0].fields["rate"] == pytest.approx(3.0, rel=0.05)


def test_progress_bar_is_updated_at_most_every_draw_interval_and_for_the_last_item():
    from grandrounds.run import progress

    p, _ = make_progress()
    p.start(1000, "x")
    for i in range(999):
        p.on_call(Response(key="k", text="A"), retries=0)
        p.advance(Grade(sample_id=str(i), value=1.0))
    shown = p.bar.tasks[0].completed
    assert shown < 999, "thousands of updates a second are not each handed to the bar"
    p._drawn -= progress.DRAW_EVERY  # time passes
    p.on_call(Response(key="k", text="A"), retries=0)
    assert p.bar.tasks[0].completed == 999, (
        "once the interval has passed the bar shows every item advanced"
    )
    p.advance(Grade(sample_id="999", value=1.0))
    assert p.bar.tasks[0].completed == 1000, "the last item is shown at once"


def test_progress_start_resets_counters_for_the_next_run():
    p, _ = make_progress()
    p.start(3, "first")
    p.on_call(Response(key="a", error="x"), retries=1)
    p.advance(Grade(sample_id="1", value=None))
    p.start(7, "second")
    assert (p.calls, p.failed, p.retries, p.unscored) == (0, 0, 0, 0)
    p.on_call(Response(key="b", text="ok"), retries=0)
    second = p.bar.tasks[-1]
    assert second.description == "second" and second.total == 7
    assert second.fields["failed"] == 0 and second.completed == 0
    assert len(p.bar.tasks) == 2


def test_progress_events_before_start_are_counted_without_a_bar():
    p, _ = make_progress()
    p.on_call(Response(key="a", error="x"), retries=1)
    p.advance(Grade(sample_id="1", value=None))
    assert (p.calls, p.failed, p.retries, p.unscored) == (1, 1, 1, 1)
    assert p.bar.tasks == []


def test_progress_as_executor_observer(tmp_path):
    """The progress bar is the runner's CallObserver: its counts agree with the executor's."""
    import asyncio

    from grandrounds.core.records import Request
    from grandrounds.providers.base import ModelSpec, ProviderError
    from grandrounds.providers.scripted import ScriptedProvider
    from grandrounds.run.executor import Executor, RetryPolicy
    from grandrounds.store import Store

    tries: dict[str, int] = {}

    def script(req):
        q = req.messages[-1].content
        tries[q] = tries.get(q, 0) + 1
        if q == "flaky" and tries[q] == 1:
            return ProviderError("HTTP 503", retryable=True)
        if q == "broken":
            return ProviderError("HTTP 400: bad", retryable=False)
        return "A"

    p, _ = make_progress()
    store = Store(tmp_path / "s.db")
    ex = Executor(
        store,
        ScriptedProvider(ModelSpec("scripted", "x"), script=script),
        retry=RetryPolicy(3, 0.001, 0.001),
        observer=p,
    )

    async def go():
        for q in ("fine", "flaky", "broken", "fine"):
            await ex(Request(provider="scripted", model="x", messages=(Message("user", q),)))

    p.start(4, "x")
    asyncio.run(go())
    store.close()
    assert p.calls == ex.stats.made == 3
    assert (p.retries, p.failed) == (
        ex.stats.retries,
        ex.stats.failed,
    ) and p.retries + p.failed == 2
