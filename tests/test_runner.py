"""Runner behaviour with the scripted provider: failures are data, never wrong answers."""

from __future__ import annotations

import asyncio

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.demo import DemoExam
from grandrounds.core.records import Message, Sample
from grandrounds.core.registry import PROVIDERS
from grandrounds.graders.mcq_grader import MCQGrader
from grandrounds.providers.base import ProviderError
from grandrounds.providers.scripted import ScriptedProvider
from grandrounds.run.config import RunConfig
from grandrounds.run.executor import RetryPolicy
from grandrounds.run.runner import run
from grandrounds.run.samples import group_samples
from grandrounds.store import Store


def test_grader_crash_is_counted_unscored_and_redone_later(tmp_path, monkeypatch):
    real = MCQGrader.grade

    async def crashy(self, sample, response, ctx):
        if sample.id == "3":
            raise RuntimeError("boom")
        return await real(self, sample, response, ctx)

    monkeypatch.setattr(MCQGrader, "grade", crashy)
    store = Store(tmp_path / "s.db")
    cfg = RunConfig(
        benchmark="demo",
        model="scripted/a",
        options=RunOptions(protocol="grandrounds"),
        provider_options={"script": lambda req: "Answer: A"},
    )
    out = asyncio.run(run(store, cfg))
    bad = [g for g in out.grades if g.value is None]
    assert (
        len(bad) == 1
        and bad[0].sample_id == "3"
        and bad[0].error == "grading failed: RuntimeError: boom"
    )
    assert bad[0].status == "grader_error"
    assert out.result.n == 11 and out.result.n_unscored == 1
    monkeypatch.setattr(MCQGrader, "grade", real)
    again = asyncio.run(run(store, cfg))
    assert again.answer_stats.made == 0, "the answer is reused, only the grade is redone"
    assert again.result.n == 12 and again.result.n_unscored == 0


def test_non_retryable_failure_is_not_retried_and_unscored(tmp_path):
    calls = {"n": 0}

    def script(req):
        calls["n"] += 1
        return ProviderError("HTTP 400: bad request", retryable=False)

    cfg = RunConfig(
        benchmark="demo",
        model="scripted/bad",
        limit=3,
        options=RunOptions(protocol="grandrounds"),
        provider_options={"script": script},
        retry=RetryPolicy(5, 0.001, 0.001),
    )
    out = asyncio.run(run(Store(tmp_path / "s.db"), cfg))
    assert calls["n"] == 3
    assert out.result.n == 0 and out.result.n_unscored == 3 and out.result.score is None
    assert all(g.error.startswith("answer failed: HTTP 400") for g in out.grades)


def test_retryable_failure_gives_up_after_the_bound(tmp_path):
    calls = {"n": 0}

    def script(req):
        calls["n"] += 1
        return ProviderError("HTTP 503: overloaded", retryable=True)

    cfg = RunConfig(
        benchmark="demo",
        model="scripted/down",
        limit=2,
        options=RunOptions(protocol="grandrounds"),
        provider_options={"script": script},
        retry=RetryPolicy(4, 0.001, 0.001),
    )
    out = asyncio.run(run(Store(tmp_path / "s.db"), cfg))
    assert calls["n"] == 8, "4 attempts each, no more"
    assert out.result.n_unscored == 2
    assert "gave up after 4 attempts" in out.grades[0].error


def test_groups_keep_turn_order_and_singletons_alone():
    def s(i, group=None, turn=0):
        return Sample(
            id=str(i), benchmark="x", messages=(Message("user", str(i)),), group=group, turn=turn
        )

    groups = group_samples([s(1), s(2, "g", 2), s(3, "g", 1), s(4), s(5, "h", 1)])
    assert [[x.id for x in g] for g in groups] == [["1"], ["3", "2"], ["4"], ["5"]]


class ReversedProvider(ScriptedProvider):
    """Answers later questions sooner, so answers complete in the reverse of source order."""

    finished: list[str] = []

    async def call(self, request):
        order = self.started = getattr(self, "started", -1) + 1
        await asyncio.sleep(0.005 * (20 - order))  # the first asked waits longest
        out = await super().call(request)
        ReversedProvider.finished.append(request.messages[-1].content)
        return out


def test_samples_are_stored_with_their_answers_in_source_order(tmp_path):
    with PROVIDERS.registered("reversed", ReversedProvider):
        _reversed_order(tmp_path)
    assert "reversed" not in PROVIDERS.names(), "a test registration does not leak"


def _reversed_order(tmp_path):
    store = Store(tmp_path / "s.db")
    bench = DemoExam()
    cfg = RunConfig(
        benchmark="demo",
        model="reversed/a",
        limit=7,
        options=RunOptions(protocol="grandrounds"),
        provider_options={"script": lambda req: "Answer: A"},
    )
    out = asyncio.run(run(store, cfg))
    dataset = out.run.dataset_sha256
    asked = [s.messages[-1].content for s in out.samples]
    assert ReversedProvider.finished == asked[::-1], "the answers completed in reverse order"
    stored = store.samples("demo", dataset)
    # only the samples the run asked, each exactly once, in the file's order whatever order they completed in
    assert [s.id for s in stored] == [s.id for s in out.samples] == [s.id for s in bench.load()[:7]]
    assert stored == out.samples
    again = asyncio.run(
        run(
            store,
            RunConfig(
                benchmark="demo",
                model="reversed/a",
                options=RunOptions(protocol="grandrounds"),
                provider_options={"script": lambda req: "Answer: A"},
            ),
        )
    )
    assert again.answer_stats.made == 12 - 7
    assert [s.id for s in store.samples("demo", dataset)] == [s.id for s in again.samples]
