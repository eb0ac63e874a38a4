"""End to end against a real HTTP server on 127.0.0.1 that answers MedQA by a known rule.

The server never sees the key; it looks each question up in the real file, answers correctly
for questions whose stem length is divisible by 3 and wrongly otherwise, in varied reply styles.
The reported accuracy must equal that rule's accuracy exactly.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.run.config import RunConfig
from grandrounds.run.executor import RetryPolicy
from grandrounds.run.runner import run
from grandrounds.store import Store
from grandrounds.testing import Fault, LoopbackServer
from tests.conftest import shared_file

STYLES = [
    "The answer is ({x}).",
    "答案：{x}",
    "**{x}**",
    "After weighing the options... Answer: {x}",
    "{x}",
]


def load_key(path: Path) -> dict[str, list[dict]]:
    """First line of each stem (80 chars) -> records, so a prompt can be matched quickly."""
    out: dict[str, list[dict]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        out.setdefault(rec["question"].split("\n")[0][:80], []).append(rec)
    return out


def lookup(key: dict[str, list[dict]], content: str) -> tuple[str, str, dict[str, str]]:
    for para in content.split("\n"):
        for rec in key.get(para[:80], ()):
            if rec["question"] in content:
                return rec["question"], rec["answer_idx"], rec["options"]
    raise AssertionError("question not found in prompt")


def wrong(letter: str) -> str:
    return "ABCD"[("ABCD".index(letter) + 1) % 4]


def rule_answer(question: str, answer: str) -> str:
    return answer if len(question) % 3 == 0 else wrong(answer)


def make_rule(key, faults: float = 0.0):
    seen: dict[str, int] = {}
    kinds = ["429", "500", "drop", "malformed"]

    def rule(body):
        content = body["messages"][-1]["content"]
        question, answer, _ = lookup(key, content)
        letter = rule_answer(question, answer)
        h = sum(question.encode()) % 100
        if faults and h < faults * 100:
            n = seen.get(question, 0)
            seen[question] = n + 1
            if n == 0:  # each chosen question fails once, then succeeds
                return Fault(kinds[h % 4], retry_after=0.01)
        return STYLES[len(question) % len(STYLES)].format(x=letter)

    return rule


def expected_accuracy(path: Path) -> tuple[float, int]:
    recs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    right = sum(1 for r in recs if len(r["question"]) % 3 == 0)
    return right / len(recs), len(recs)


FAST = RetryPolicy(max_attempts=6, base_delay=0.01, max_delay=0.05)


def _cfg(data: Path, url: str) -> RunConfig:
    return RunConfig(
        benchmark="medqa",
        model="openai/loopback-rule",
        data=data,
        base_url=url,
        concurrency=32,
        retry=FAST,
        options=RunOptions(protocol="grandrounds"),
    )


def test_accuracy_equals_rule_and_warm_rerun_makes_no_call(tmp_path):
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    key = load_key(data)
    want, n = expected_accuracy(data)
    with LoopbackServer(make_rule(key)) as srv:
        store = Store(tmp_path / "s.db")
        out = asyncio.run(run(store, _cfg(data, srv.base_url)))
        assert out.result.n == n == 1273
        assert out.result.n_unscored == 0
        assert out.result.score == pytest.approx(want, abs=0)
        assert out.result.extra["n_unextracted"] == 0
        lo, hi = out.result.ci95
        assert lo < want < hi
        first = srv.stats.requests
        assert first == n
        again = asyncio.run(run(store, _cfg(data, srv.base_url)))
        assert srv.stats.requests == first, "warm re-run must make 0 calls"
        assert again.answer_stats.made == 0 and again.answer_stats.cached == n
        assert again.result.score == out.result.score


def test_twenty_percent_faults_give_identical_results(tmp_path):
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    key = load_key(data)
    with LoopbackServer(make_rule(key)) as clean:
        ref = asyncio.run(run(Store(tmp_path / "a.db"), _cfg(data, clean.base_url)))
    with LoopbackServer(make_rule(key, faults=0.2)) as flaky:
        got = asyncio.run(run(Store(tmp_path / "b.db"), _cfg(data, flaky.base_url)))
        faults = sum(flaky.stats.faults.values())
        kinds = set(flaky.stats.faults)
    assert 0.15 * 1273 < faults < 0.25 * 1273, faults
    assert kinds == {"429", "500", "drop", "malformed"}
    assert got.answer_stats.retries >= faults
    assert got.answer_stats.failed == 0
    assert got.result.score == ref.result.score
    assert [g.value for g in got.grades] == [g.value for g in ref.grades]
    assert [g.extracted for g in got.grades] == [g.extracted for g in ref.grades]
    assert got.result.breakdown == ref.result.breakdown


def test_failed_calls_are_unscored_not_wrong_and_retried_later(tmp_path):
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    key = load_key(data)
    broken = {"on": True}

    def rule(body):
        question, answer, _ = lookup(key, body["messages"][-1]["content"])
        if broken["on"] and len(question) % 5 == 0:
            return Fault("500")
        return rule_answer(question, answer)

    cfg = RunConfig(
        benchmark="medqa",
        model="openai/x",
        data=data,
        limit=200,
        concurrency=16,
        retry=RetryPolicy(3, 0.001, 0.002),
        options=RunOptions(protocol="grandrounds"),
    )
    with LoopbackServer(rule) as srv:
        cfg.base_url = srv.base_url
        store = Store(tmp_path / "s.db")
        out = asyncio.run(run(store, cfg))
        failing = sum(
            1
            for line in data.read_text().splitlines()[:200]
            if len(json.loads(line)["question"]) % 5 == 0
        )
        assert out.result.n_unscored == failing > 0
        assert out.result.n == 200 - failing
        assert all(
            g.value is None and "answer failed" in (g.error or "")
            for g in out.grades
            if g.value is None
        )
        broken["on"] = False
        before = srv.stats.requests
        again = asyncio.run(run(store, cfg))
        assert srv.stats.requests - before == failing, "only the failed calls are asked again"
        assert again.result.n_unscored == 0 and again.result.n == 200


def test_non_retryable_error_is_not_retried(tmp_path):
    """A 400 is the caller's fault: asked once, stored as a failed call, the sample unscored (never wrong)."""
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    with LoopbackServer(lambda body: Fault("400")) as srv:
        cfg = RunConfig(
            benchmark="medqa",
            model="openai/m",
            data=data,
            limit=3,
            base_url=srv.base_url,
            retry=RetryPolicy(base_delay=0.001),
            options=RunOptions(protocol="grandrounds"),
        )
        out = asyncio.run(run(Store(tmp_path / "s.db"), cfg))
        assert srv.stats.requests == 3, "one request per question, no retry"
    assert (
        out.answer_stats.made == 3
        and out.answer_stats.failed == 3
        and out.answer_stats.retries == 0
    )
    assert all(
        g.value is None and g.status == "answer_failed" and "400" in g.error for g in out.grades
    )
    assert out.result.score is None and out.result.n == 0 and out.result.n_unscored == 3


def test_unknown_provider_fails_before_any_call(tmp_path):
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    from grandrounds.core.registry import UnknownComponent

    store = Store(tmp_path / "s.db")
    with pytest.raises(UnknownComponent, match="did you mean openai"):
        asyncio.run(run(store, RunConfig(benchmark="medqa", model="opena/x", data=data, limit=2)))
    assert store.runs() == [], "nothing stored for a run that could not start"


def test_answer_modes_and_shuffle_are_recorded(tmp_path):
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    key = load_key(data)

    def rule(body):
        question, answer, options = lookup(key, body["messages"][-1]["content"])
        content = body["messages"][-1]["content"]
        # With shuffled options the right letter is where the right text now stands.
        right_text = options[answer]
        for letter in "ABCD":
            if f"\n{letter}. {right_text}\n" in content + "\n":
                return letter
        raise AssertionError("option not found")

    with LoopbackServer(rule) as srv:
        store = Store(tmp_path / "s.db")
        for mode in ("generate", "next-token"):
            cfg = RunConfig(
                benchmark="medqa",
                model="openai/oracle",
                data=data,
                base_url=srv.base_url,
                limit=40,
                options=RunOptions(
                    answer_mode=mode, shuffle_options=True, seed=7, protocol="grandrounds"
                ),
            )
            out = asyncio.run(run(store, cfg))
            assert out.result.score == 1.0 and out.result.n == 40, mode
            assert out.result.fingerprint["answer_mode"] == mode
            assert (
                out.result.fingerprint["shuffle_options"] is True
                and out.result.fingerprint["seed"] == 7
            )
            assert out.result.n_unscored == 0 and out.result.n == 40
            assert all("permutation" in g.details for g in out.grades)
