"""HealthBench under ``--protocol reference`` against openai/simple-evals' own code (../shared/reference).

The official functions are pulled out of ``healthbench_eval.py``, ``common.py`` and
``sampler/chat_completion_sampler.py`` with ``tests.official.load_official`` and run on the real
500-row sample; the OpenAI client inside the official sampler is replaced by a recording fake.

- Prompts: for every one of the 5,965 (conversation, rubric item) pairs, the messages the official
  ``HealthBenchEval.grade_sample`` hands its grader sampler, as the sampler sends them (its system
  message added), equal byte for byte the messages our grader sends to a recording fake judge.
- Settings: the grader sampler of ``physician_completions_main`` (read from its AST) and the
  sampler's defaults equal the reference preset.
- Scores: per-example metrics from ``grade_sample`` and every metric of
  ``_aggregate_get_clipped_mean`` (mean, n_samples, bootstrap_std with the same seed) equal ours.
- Parsing: the official re-ask loop on a corpus of grader replies against our reading.
- End to end: a real run (loopback servers) sends the candidate and the judge what simple-evals would.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import functools
import hashlib
import io
import json
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.healthbench import HealthBench
from grandrounds.core.records import Response
from grandrounds.graders.base import GradeContext
from grandrounds.graders.healthbench_grader import HealthBenchGrader, parse_reference, with_system
from grandrounds.sources.healthbench import API_SYSTEM_MESSAGE, GRADER_TEMPLATE, REFERENCE
from grandrounds.sources.protocols import system_text
from tests.conftest import reference_file, shared_file
from tests.official import load_official

SEED = 20250509
TOL = 1e-9


# ---- the official code, loaded --------------------------------------------------------------------


@dataclass
class SamplerResponse:  # simple-evals types.SamplerResponse
    response_text: str
    response_metadata: dict
    actual_queried_message_list: list


@dataclass
class SingleEvalResult:  # simple-evals types.SingleEvalResult
    score: float | None
    metrics: dict
    html: str = ""
    convo: Any = None
    example_level_metadata: Any = None


@dataclass
class EvalResult:  # simple-evals types.EvalResult
    score: float | None
    metrics: dict | None
    htmls: list
    convos: list
    metadata: dict | None


class FakeOpenAI:
    """What ``ChatCompletionSampler`` calls (``client.chat.completions.create``), recorded; replies by ``reply``."""

    reply: Callable[[list[dict[str, str]]], str] = staticmethod(lambda messages: "")
    log: list[dict[str, Any]] = []

    def __init__(self) -> None:
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    def create(
        self, *, model: str, messages: list[dict[str, str]], temperature: float, max_tokens: int
    ) -> Any:
        FakeOpenAI.log.append(
            {
                "model": model,
                "messages": messages,
                "temperature": temperature,
                "max_tokens": max_tokens,
            }
        )
        content = FakeOpenAI.reply(messages)
        return SimpleNamespace(
            choices=[SimpleNamespace(message=SimpleNamespace(content=content))], usage=None
        )


@functools.cache
def official() -> SimpleNamespace:
    with warnings.catch_warnings():  # common.py has regex literals with invalid escapes
        warnings.simplefilter("ignore", DeprecationWarning)
        common = load_official("simple-evals/common.py", ["map_with_progress"])
    types = {
        "SamplerBase": object,
        "SamplerResponse": SamplerResponse,
        "MessageList": list,
        "Eval": object,
        "EvalResult": EvalResult,
        "SingleEvalResult": SingleEvalResult,
    }
    sampler = load_official(
        "simple-evals/sampler/chat_completion_sampler.py",
        ["OPENAI_SYSTEM_MESSAGE_API", "ChatCompletionSampler"],
        types,
    )
    sampler.ChatCompletionSampler.__init__.__globals__["OpenAI"] = (
        FakeOpenAI  # the API client, replaced
    )
    hb = load_official(
        "simple-evals/healthbench_eval.py",
        [
            "GRADER_TEMPLATE",
            "parse_json_to_dict",
            "RubricItem",
            "calculate_score",
            "_compute_clipped_stats",
            "_aggregate_get_clipped_mean",
            "HealthBenchEval",
        ],
        types | {"common": common},
    )
    return SimpleNamespace(**vars(hb), **vars(sampler))


@pytest.fixture(autouse=True)
def _sequential(monkeypatch):
    """common.map_with_progress maps in order in one thread when ``debug`` is set (its own branch)."""
    monkeypatch.setenv("debug", "1")


def official_grader_kwargs() -> dict[str, Any]:
    """The keyword arguments of the grader sampler ``physician_completions_main`` builds (from its AST)."""
    tree = ast.parse(
        reference_file("simple-evals", "healthbench_eval.py").read_text(encoding="utf-8")
    )
    fn = next(
        n
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and n.name == "physician_completions_main"
    )
    call = next(
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "ChatCompletionSampler"
    )
    return {
        k.arg: (k.value.id if isinstance(k.value, ast.Name) else ast.literal_eval(k.value))
        for k in call.keywords
    }


def official_sampler(model: str, **kw: Any) -> Any:
    o = official()
    return o.ChatCompletionSampler(model=model, system_message=o.OPENAI_SYSTEM_MESSAGE_API, **kw)


# ---- generated verdicts and replies ---------------------------------------------------------------

#: Official-readable reply shapes (the verdicts decide the scores; the shapes exercise the reading).
REPLY_SHAPES = (
    '```json\n{{\n  "explanation": "generated",\n  "criteria_met": {met}\n}}\n```',
    '{{"explanation": "generated", "criteria_met": {met}}}',
    '  ```json{{"criteria_met": {met}}}```\n',
    '```json\n{{"criteria_met": {met}, "explanation": ["a", "b"]}}\n```',
)


def _h(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def verdict(mode: int, points: str, criterion: str) -> bool:
    """Per example mode: 0 half at random, 1 every positive met, 2 every negative met and no positive
    (scores below 0, so clipping matters), 3 four in five met."""
    h = _h(criterion)
    return (h[0] % 2 == 0, int(points) > 0, int(points) < 0, h[0] % 5 != 0)[mode]


def judge_reply(prompt: str) -> str:
    """The fake grader: reads the mode from the answer and the item from the official prompt."""
    item = prompt.rsplit("# Rubric item\n", 1)[1].split("\n\n# Instructions", 1)[0]
    points, criterion = item[1:].split("] ", 1)
    mode = int(prompt.rsplit("assistant: ANSWER mode=", 1)[1][0])
    met = json.dumps(verdict(mode, points, criterion))
    return REPLY_SHAPES[_h(criterion)[1] % len(REPLY_SHAPES)].format(met=met)


def answer_for(i: int) -> str:
    """The candidate's answer to row ``i``; some carry the template's own markers, as a reply might."""
    extra = " It mentions <<rubric_item>> and <<conversation>> verbatim." if i % 50 == 7 else ""
    return f"ANSWER mode={i % 4}. See a doctor if it gets worse.\n\nTake care!{extra}"


class RecordingJudge:
    name = "openai/gpt-4.1-2025-04-14"

    def __init__(self) -> None:
        self.sent: list[list[tuple[str, str]]] = []

    async def __call__(self, messages, *, attempt: int = 0) -> Response:
        self.sent.append([(m.role, m.content) for m in messages])
        return Response(key=f"{len(self.sent)}", text=judge_reply(messages[-1].content))


# ---- the real data through both -------------------------------------------------------------------


@functools.cache
def _rows(path: Path) -> list[dict[str, Any]]:
    """The rows as simple-evals reads them: ``json.loads`` on each line of the binary file."""
    return [json.loads(line) for line in path.read_bytes().split(b"\n") if line.strip()]


@functools.cache
def both_ways(path: Path) -> SimpleNamespace:
    """Every row graded by the official code and by ours with the same generated verdicts."""
    o = official()
    rows = _rows(path)
    bench = HealthBench()
    opts = bench.check_options(RunOptions(seed=SEED))
    samples = bench.load(path)
    grader = bench.grader(opts)
    candidate = official_sampler("candidate", max_tokens=2048)
    grading_sampler = o.ChatCompletionSampler(
        **{
            k: getattr(o, v) if k == "system_message" else v
            for k, v in official_grader_kwargs().items()
        }
    )
    stub = SimpleNamespace(grader_model=grading_sampler)
    results, grades, official_sent, our_sent, cand_sent = [], [], [], [], []
    for i, (row, sample) in enumerate(zip(rows, samples)):
        answer = answer_for(i)
        FakeOpenAI.log, FakeOpenAI.reply = [], staticmethod(lambda messages, a=answer: a)
        queried = candidate(
            row["prompt"]
        ).actual_queried_message_list  # what simple-evals' fn() does
        cand_sent.append(FakeOpenAI.log[0])
        FakeOpenAI.log, FakeOpenAI.reply = (
            [],
            staticmethod(lambda messages: judge_reply(messages[-1]["content"])),
        )
        metrics, _, _ = o.HealthBenchEval.grade_sample(
            stub,
            prompt=queried,
            response_text=answer,
            example_tags=row["example_tags"],
            rubric_items=[o.RubricItem.from_dict(d) for d in row["rubrics"]],
        )
        official_sent.append(FakeOpenAI.log)
        results.append(SingleEvalResult(score=metrics["overall_score"], metrics=metrics))
        judge = RecordingJudge()
        grades.append(
            asyncio.run(
                grader.grade(
                    sample, Response(key=f"a{i}", text=answer), GradeContext(judges=(judge,))
                )
            )
        )
        our_sent.append(judge.sent)
    np.random.seed(SEED)  # simple-evals draws its bootstrap from the global state
    final = o._aggregate_get_clipped_mean(results)
    agg = bench.aggregate(samples, grades, opts)
    return SimpleNamespace(
        rows=rows,
        samples=samples,
        results=results,
        grades=grades,
        official_sent=official_sent,
        our_sent=our_sent,
        cand_sent=cand_sent,
        final=final,
        agg=agg,
        opts=opts,
        bench=bench,
    )


@pytest.fixture
def hb(shared_data, official_reference):
    return both_ways(shared_data("healthbench", "healthbench_500.jsonl"))


def test_every_judge_prompt_is_what_simple_evals_sends(hb):
    """5,965 prompts: the messages of each official grader call (system message and GRADER_TEMPLATE
    filled by grade_sample) equal what our judge receives, byte for byte and in rubric order."""
    n = same = 0
    for off, ours in zip(hb.official_sent, hb.our_sent):
        assert len(off) == len(ours)
        for call, sent in zip(off, ours):
            n += 1
            same += [(m["role"], m["content"]) for m in call["messages"]] == sent
    assert n == 5965 and same == n
    # answers quoting "<<rubric_item>>" get it replaced too, as the official two replace() calls do
    assert sum("It mentions [" in sent[0][1][1] for sent in hb.our_sent) == 10
    print(f"\njudge prompts byte-identical to simple-evals: {same}/{n}")


def test_judge_and_candidate_settings_are_the_official_ones(hb):
    kwargs = official_grader_kwargs()
    assert kwargs == {
        "model": "gpt-4.1-2025-04-14",
        "system_message": "OPENAI_SYSTEM_MESSAGE_API",
        "max_tokens": 2048,
    }
    assert REFERENCE.judge_model == "openai/" + kwargs["model"]
    calls = [c for sample in hb.official_sent for c in sample]
    assert {(c["model"], c["temperature"], c["max_tokens"]) for c in calls} == {
        ("gpt-4.1-2025-04-14", 0.5, 2048)
    }
    assert (REFERENCE.judge.temperature, REFERENCE.judge.max_tokens) == (0.5, 2048)
    assert (
        system_text(REFERENCE.judge)
        == official().OPENAI_SYSTEM_MESSAGE_API
        == calls[0]["messages"][0]["content"]
    )
    # The candidate: the sampler's defaults with simple_evals.py's system message and 2,048 tokens.
    assert {(c["temperature"], c["max_tokens"]) for c in hb.cand_sent} == {(0.5, 2048)}
    assert (REFERENCE.answer.temperature, REFERENCE.answer.max_tokens) == (0.5, 2048)
    for cand, sample in zip(hb.cand_sent, hb.samples):  # what the runner sends the candidate
        sent = with_system(hb.bench.prompt(sample, hb.opts).messages, system_text(REFERENCE.answer))
        assert [(m["role"], m["content"]) for m in cand["messages"]] == [
            (m.role, m.content) for m in sent
        ]


def test_template_is_read_from_the_pinned_file():
    o = official()
    assert GRADER_TEMPLATE.load().text == o.GRADER_TEMPLATE
    assert API_SYSTEM_MESSAGE.load().text == o.OPENAI_SYSTEM_MESSAGE_API
    sources = reference_file("SOURCES.tsv").read_text(encoding="utf-8").splitlines()
    pinned = {(c[0], c[3]): (c[1], c[2], c[4]) for c in (line.split("\t") for line in sources[1:])}
    for ref in (GRADER_TEMPLATE, API_SYSTEM_MESSAGE):
        f = ref.source
        assert pinned[(f.folder, f.path)] == (f.repo, f.commit, f.sha256)
    fp = HealthBenchGrader().template_hashes()["GRADER_TEMPLATE"]
    assert fp["sha256"] == pinned[("simple-evals", "healthbench_eval.py")][2]
    assert fp["text_sha256"] == hashlib.sha256(o.GRADER_TEMPLATE.encode("utf-8")).hexdigest()


def test_per_example_metrics_equal_grade_sample(hb):
    n_metrics = exact = 0
    for res, g in zip(hb.results, hb.grades):
        ours = {"overall_score": g.value, **g.details["tag_scores"]}
        assert ours.keys() == res.metrics.keys()
        for k, v in res.metrics.items():
            assert abs(ours[k] - v) <= TOL, k
            exact += ours[k] == v
        n_metrics += len(ours)
    scores = [r.score for r in hb.results]
    assert len(scores) == 500 and min(scores) < 0 and max(scores) == 1.0  # clipping is exercised
    print(
        f"\nper-example: 500/500 scores and {n_metrics}/{n_metrics} example metrics equal grade_sample ({exact} bit for bit)"
    )


def test_every_aggregate_metric_equals_aggregate_get_clipped_mean(hb):
    final, agg = hb.final, hb.agg
    assert abs(agg.score - final.score) <= TOL
    assert agg.n == final.metrics["score:n_samples"] == 500 and agg.n_unscored == 0
    assert abs(agg.extra["bootstrap_std"] - final.metrics["score:bootstrap_std"]) <= TOL
    tags = [
        k
        for k in final.metrics
        if k != "overall_score" and not k.endswith((":n_samples", ":bootstrap_std"))
    ]
    by_family: Counter[str] = Counter()
    exact = 0
    for name in tags:
        family, _, value = name.partition(":")
        cell = agg.breakdown[family][value]
        assert abs(cell.score - final.metrics[name]) <= TOL, name
        assert cell.n == final.metrics[f"{name}:n_samples"], name
        assert abs(cell.metrics["bootstrap_std"] - final.metrics[f"{name}:bootstrap_std"]) <= TOL, (
            name
        )
        exact += (
            cell.score == final.metrics[name]
            and cell.metrics["bootstrap_std"] == final.metrics[f"{name}:bootstrap_std"]
        )
        by_family[family] += 1
    ours = {
        f"{fam}:{key}" for fam, cells in agg.breakdown.items() for key, c in cells.items() if c.n
    }
    assert ours == set(tags)
    assert abs(final.metrics["overall_score"] - agg.score) <= TOL
    clipped = sum(1 for k in tags if final.metrics[k] in (0.0, 1.0))
    print(
        f"\naggregate: score {agg.score:.6f} (std {agg.extra['bootstrap_std']:.6f}) and {len(tags)} tag metrics "
        f"x (mean, n_samples, bootstrap_std) equal simple-evals, {exact} bit for bit ({dict(by_family)}; {clipped} clipped to 0 or 1)"
    )


# ---- the official re-ask loop on a corpus of replies ----------------------------------------------

CORPUS = [
    '```json\n{"explanation": "x", "criteria_met": true}\n```',
    '```json\n{"explanation": "x", "criteria_met": false}\n```',
    '{"explanation": "x", "criteria_met": true}',
    '{"criteria_met":false}',
    '```json{"criteria_met": true}```',
    '```json {"criteria_met": true} ```',
    '  \n```json\n{"criteria_met": false}\n```\n\n',
    '```json\r\n{"criteria_met": true}\r\n```',
    '```json\n\n{"criteria_met": true}',
    '{"criteria_met": true}```',
    '{"criteria_met": true, "criteria_met": false}',
    '{"criteria_met": true, "explanation": ["a", "b"]}',
    '{"criteria_met": true, "explanation": null}',
    '{"explanation": "符合", "criteria_met": true}',
    '{"criteria_met": false, "explanation": "line\\nbreak"}',
    '{"criteria_met": true, "extra": {"nested": [1, 2]}}',
    '{"explanation": "' + "long " * 400 + '", "criteria_met": false}',
    '```JSON\n{"criteria_met": true}\n```',
    '```\n{"criteria_met": true}\n```',
    '``` json\n{"criteria_met": true}\n```',
    '````json\n{"criteria_met": true}\n````',
    '```json\n{"criteria_met": true}\n```\n```',
    'Here is the grade:\n```json\n{"criteria_met": true}\n```',
    '```json\n{"criteria_met": true}\n```\nHope this helps.',
    '{"criteria_met": true}\n\nI hope this helps',
    '<think>easy</think>{"criteria_met": true}',
    'json\n{"criteria_met": true}',
    '{"criteria_met": "true"}',
    '{"criteria_met": "false"}',
    '{"criteria_met": 1}',
    '{"criteria_met": 0}',
    '{"criteria_met": 0.0}',
    '{"criteria_met": null}',
    '{"criteria_met": []}',
    '{"criteria_met": {}}',
    '{"explanation": "no verdict"}',
    '{"Criteria_met": true}',
    '{"result": {"criteria_met": true}}',
    "{}",
    '{"criteria_met": True}',
    "{'criteria_met': True}",
    '{"criteria_met": true,}',
    '{"criteria_met": false, "explanation": "line\nbreak"}',
    '{"criteria_met": true} // sure',
    '{"criteria_met": true}\n{"criteria_met": false}',
    '｛"criteria_met"：true｝',
    '\ufeff{"criteria_met": true}',
    "",
    "   ",
    "```json\n```",
    "criteria_met: true",
    "The response meets the criterion.",
    '"no"',
    "[]",
    '[{"criteria_met": true}]',
    # JSON that is not an object: simple-evals indexes or searches it and raises TypeError
    "true",
    "false",
    "3",
    "-0",
    "null",
    "NaN",
    "Infinity",
    '"criteria_met"',
    '"criteria_met: true"',
    '["criteria_met"]',
]


def official_outcome(reply: str) -> tuple[str, str | None]:
    """What simple-evals does with ``reply`` as a grader's first answer: its verdict, a re-ask, or a crash."""
    o = official()
    sentinel = '{"explanation": "sentinel", "criteria_met": false}'
    answers = iter([reply, sentinel])
    FakeOpenAI.log, FakeOpenAI.reply = [], staticmethod(lambda messages: next(answers))
    stub = SimpleNamespace(grader_model=official_sampler("gpt-4.1-2025-04-14", max_tokens=2048))
    item = o.RubricItem(criterion="Says hello", points=5, tags=[])
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # it prints each failure
            _, _, graded = o.HealthBenchEval.grade_sample(
                stub, [{"role": "user", "content": "hi"}], "hello", [], [item]
            )
    except TypeError:
        return "raises TypeError", None
    if len(FakeOpenAI.log) > 1:
        return "re-asked", None
    return ("met" if graded[0]["criteria_met"] else "unmet"), graded[0]["explanation"]


def our_outcome(reply: str) -> tuple[str, str | None]:
    met, explanation = parse_reference(reply)
    return ("re-asked", None) if met is None else ("met" if met else "unmet", explanation)


def test_reply_corpus_against_the_official_reask_loop():
    assert len(CORPUS) >= 50 and len(set(CORPUS)) == len(CORPUS)
    table: Counter[tuple[str, str]] = Counter()
    for reply in CORPUS:
        (off, off_expl), (ours, our_expl) = official_outcome(reply), our_outcome(reply)
        table[(off, ours)] += 1
        if off == "raises TypeError":
            assert ours == "re-asked", reply  # the documented exception: unreadable, re-asked
            continue
        assert off == ours, reply
        if off in ("met", "unmet") and isinstance(off_expl, str) and '"explanation"' in reply:
            assert our_expl == off_expl  # (shown only; a missing one is "" here)
    agree = sum(n for (a, b), n in table.items() if a == b)
    assert agree + table[("raises TypeError", "re-asked")] == len(CORPUS)
    rows = "; ".join(f"official {a} / ours {b}: {n}" for (a, b), n in sorted(table.items()))
    print(f"\nreply corpus: {agree}/{len(CORPUS)} identical; {rows}")


def test_reference_grader_reasks_what_the_official_loop_reasks(shared_data, official_reference):
    """Through our engine: an unreadable reply is asked again (attempt 1), a readable one is not."""
    sample = HealthBench().load(shared_data("healthbench", "healthbench_500.jsonl"))[0]
    replies = {
        "re-asked": '{"criteria_met": "true"}',
        "met": '```json\n{"criteria_met": true}\n```',
    }
    for outcome, reply in replies.items():
        assert official_outcome(reply)[0] == outcome

        class Judge:
            name = "j"
            attempts: list[int] = []

            async def __call__(self, messages, *, attempt=0):
                Judge.attempts.append(attempt)
                return Response(
                    key=f"{attempt}", text=reply if attempt == 0 else '{"criteria_met": false}'
                )

        g = asyncio.run(
            HealthBenchGrader().grade(
                sample, Response(key="a", text="x"), GradeContext(judges=(Judge(),))
            )
        )
        assert Counter(Judge.attempts) == (
            {0: len(sample.rubric)}
            if outcome == "met"
            else {0: len(sample.rubric), 1: len(sample.rubric)}
        )
        assert {v.status for v in g.verdicts} == {"met" if outcome == "met" else "unmet"}


# ---- a real run sends what simple-evals sends -----------------------------------------------------


def test_a_run_sends_the_official_candidate_and_judge_requests(tmp_path, official_reference):
    from grandrounds.run.config import JudgeConfig, RunConfig
    from grandrounds.run.runner import run
    from grandrounds.store import Store
    from grandrounds.testing import LoopbackServer

    src = shared_file("healthbench", "healthbench_500.jsonl")
    rows = _rows(src)[:3]
    data = tmp_path / "hb3.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    answers = {json.dumps(r["prompt"][-1]["content"]): answer_for(i) for i, r in enumerate(rows)}
    cand_bodies: list[dict[str, Any]] = []
    judge_bodies: list[dict[str, Any]] = []

    def cand(body):
        cand_bodies.append(body)
        return answers[json.dumps(body["messages"][-1]["content"])]

    def judge(body):
        judge_bodies.append(body)
        return judge_reply(body["messages"][-1]["content"])

    with LoopbackServer(cand) as c, LoopbackServer(judge) as j:
        cfg = RunConfig(
            benchmark="healthbench",
            model="openai/cand",
            data=data,
            base_url=c.base_url,
            judges=(JudgeConfig(spec="openai/gpt-4.1-2025-04-14", base_url=j.base_url),),
        )
        out = asyncio.run(run(Store(tmp_path / "hb.db"), cfg))
    # What simple-evals would send for the same rows and answers.
    o = official()
    expected_cand, expected_judge = [], []
    for i, row in enumerate(rows):
        FakeOpenAI.log, FakeOpenAI.reply = [], staticmethod(lambda messages, a=answer_for(i): a)
        queried = official_sampler("candidate", max_tokens=2048)(
            row["prompt"]
        ).actual_queried_message_list
        expected_cand += FakeOpenAI.log
        FakeOpenAI.log, FakeOpenAI.reply = (
            [],
            staticmethod(lambda messages: judge_reply(messages[-1]["content"])),
        )
        o.HealthBenchEval.grade_sample(
            SimpleNamespace(grader_model=official_sampler("gpt-4.1-2025-04-14", max_tokens=2048)),
            queried,
            answer_for(i),
            row["example_tags"],
            [o.RubricItem.from_dict(d) for d in row["rubrics"]],
        )
        expected_judge += FakeOpenAI.log

    def key(b):
        return (
            b["model"],
            b["temperature"],
            b["max_tokens"],
            json.dumps(b["messages"], sort_keys=True),
        )

    assert sorted(key(b) for b in cand_bodies) == sorted(
        key(b | {"model": "cand"}) for b in expected_cand
    )
    assert sorted(key(b) for b in judge_bodies) == sorted(key(b) for b in expected_judge)
    assert len(judge_bodies) == sum(len(r["rubrics"]) for r in rows)
    fp = out.result.fingerprint
    pinned = HealthBenchGrader().template_hashes()
    assert (
        fp["templates"] == pinned
        and fp["templates"]["GRADER_TEMPLATE"]["sha256"] == GRADER_TEMPLATE.source.sha256
    )
    assert out.result.n == 3 and out.result.extra["other_protocol"]["protocol"] == "grandrounds"
