"""LLMEval-Med under the reference protocol against the official code (llmeval/LLMEval-Med @ 508516f).

The official score parse lives in Evaluate.py's main loop (no function): the ``if resp:`` block
that stores ``model_answer_score`` is pulled out with ``ast`` and executed on each reply; its
output goes through Aggregate.py's ``parse_score`` and ``aggregate`` (loaded with
``tests.official.load_official``). Our reference reading must agree on every reply, and our
headline and category rates must equal Aggregate.py's on the real 667 turns. Run with ``-s`` to
see the tables.
"""

from __future__ import annotations

import ast
import asyncio
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.llmeval_med import LLMEvalMed
from grandrounds.core.records import Response
from grandrounds.graders.base import GradeContext
from grandrounds.graders.llmeval_grader import LLMEvalGrader, official_score, parse_score
from grandrounds.sources.llmeval_med import CATEGORY_CODES
from tests.conftest import reference_file, shared_file
from tests.official import load_official

EVALUATE = "llmeval-med/evaluate/Evaluate.py"
AGGREGATE = "llmeval-med/evaluate/Aggregate.py"


# ---- the official code --------------------------------------------------------------------------


@cache
def _evaluate_tree() -> ast.Module:
    return ast.parse(reference_file(*EVALUATE.split("/")).read_text(encoding="utf-8"))


@cache
def _store_block() -> Any:
    """Evaluate.py's ``if resp:`` block (score parse and store), compiled."""
    node = next(
        n
        for n in ast.walk(_evaluate_tree())
        if isinstance(n, ast.If) and isinstance(n.test, ast.Name) and n.test.id == "resp"
    )
    return compile(ast.Module([node], []), EVALUATE, "exec")


def official_stored(reply: str | None) -> Any:
    """What Evaluate.py stores as ``model_answer_score`` for a judge reply (None = the call failed)."""
    # getresponse returns message.content.strip(), or "" when the call raised
    resp = "" if reply is None else reply.strip()
    ns: dict[str, Any] = {
        "re": re,
        "print": lambda *a, **k: None,
        "resp": resp,
        "reqtosave": {},
        "keystr": "model_answer_score",
        "keystr2": "model_answer_judgement",
    }
    exec(_store_block(), ns)  # noqa: S102
    return ns["reqtosave"]["model_answer_score"]


@cache
def official_prompts() -> dict[str, Any]:
    """Category key -> the compiled f-string of Evaluate.py's prompt for it."""
    func = next(
        n
        for n in ast.walk(_evaluate_tree())
        if isinstance(n, ast.FunctionDef) and n.name == "getresponse"
    )
    out = {}
    for n in ast.walk(func):
        if (
            isinstance(n, ast.Assign)
            and isinstance(n.targets[0], ast.Name)
            and n.targets[0].id.startswith("prompt_")
        ):
            out[n.targets[0].id[len("prompt_") :]] = compile(
                ast.Expression(n.value), EVALUATE, "eval"
            )
    return out


def official_prompt(key: str, record: dict[str, Any], answer: str) -> str:
    """Evaluate.py's f-string for a dataset record as the official loop fills it."""
    values = {
        "Question": record["problem"],
        "Response": answer,
        "Sanswer": record["sanswer"],
        "checklist": record.get("checklist", math.nan),
    }
    return eval(official_prompts()[key], {}, values)  # noqa: S307


def aggregate_official():
    return load_official(
        AGGREGATE,
        [
            "load_json",
            "parse_score",
            "question_id",
            "average_runs",
            "usable_count",
            "aggregate",
            "CATEGORY_CODES",
            "USABILITY_THRESHOLD",
            "SCORE_FIELD",
        ],
    )


# ---- the reply corpus ---------------------------------------------------------------------------


def corpus() -> list[str | None]:
    """Judge replies: every bracketed number, decimals, several brackets, full-width forms, prose, nothing."""
    out: list[str | None] = []
    out += [f"[{n}]" for n in range(11)]
    out += [f'{{"判断依据"："回答与参考答案一致","得分"："[{n}]"}}' for n in range(7)]
    out += [f'{{"判断依据": "理由", "得分": "[{n}]"}}' for n in range(7)]
    out += [f"判断依据：略。得分：[{n}]分" for n in range(0, 6)]
    out += [
        "[3.5]",
        "[4.0]",
        "[ 4 ]",
        "[-1]",
        "[+4]",
        "[04]",
        "[004]",
        "[45]",
        "[4",
        "4]",
        "[[4]]",
        "[]",
        "[a]",
        "[四]",
        "[４]",
        "［４］",
        "［4］",
        "【4】",
        "【４】",
        "〔4〕",
        "(4)",
        "{4}",
        "[٤]",
        "[४]",
        "[𝟒]",
        "[²]",
        "[4\u200b]",
        "  [4]  ",
        "\n\n[4]\n",
        "\t[5]",
        "[1" + "0" * 30 + "]",
        "[" + "9" * 400 + "]",
        "[0005]",
        "[5]" * 3,
    ]
    out += [
        "[2] 不对，应为 [4]",
        "参见第[1]条，得分[5]",
        "[3.5] 后改为 [4]",
        "[10][3]",
        "【4】然后 [2]",
        "[4][5]",
        "第[12]条：[4]",
        '{"判断依据": "参见第[2]点", "得分": "[4]"}',
        "得分：[4]，满分[5]",
        "[6] [3]",
    ]
    out += [
        "我认为应得4分",
        "得分：4分",
        "Score: 4/5",
        "四分",
        "得分为五分",
        "得分：[五]",
        "4",
        "得分 4",
        "**得分**：4",
        "回答基本正确，但遗漏次要需求。",
        "无法评分",
        "学生回答存在明显安全风险。",
        "The answer is good.",
        '{"判断依据": "完全正确", "得分": "5"}',
        '{"判断依据": "完全正确", "得分": 5}',
    ]
    out += ["", " ", "\n", None]
    out += [
        '<think>先看 [1] 条</think>{"得分": "[5]"}',
        "<think>考虑中</think>得分[4]",
        "<think>未完",
        '```json\n{"判断依据": "x", "得分": "[3]"}\n```',
        "**得分**：[4]",
        "得分：\\[4\\]",
        "[ 5]",
        "[5 ]",
        "［ ４ ］",
        "【 3 】",
        "[3]\n[4]",
        "x" * 1000 + "[2]",
    ]
    return out


def test_corpus_has_over_100_replies():
    assert len(corpus()) >= 100 and len(set(corpus())) == len(corpus())


def test_official_score_equals_evaluate_then_aggregate_parse_on_every_reply():
    agg = aggregate_official()
    rows = []
    for reply in corpus():
        stored = official_stored(reply)
        want = agg.parse_score(stored)
        got = official_score(reply)
        rows.append((reply, stored, want, got, parse_score(reply)))
    disagreements = [r for r in rows if r[2] != r[3]]
    assert disagreements == []
    # Our own (grandrounds) reading of the same replies, for the record: where it differs, and why.
    classes = Counter()
    for reply, _stored, want, _got, ours in rows:
        if (None if ours is None else float(ours)) != want:
            classes[_why(reply or "", want, ours)] += 1
    print(
        f"\nLLMEval-Med score parse: {len(rows)} replies, reference = official on {len(rows) - len(disagreements)}"
    )
    print("grandrounds reading differs on:")
    for why, n in classes.most_common():
        print(f"  {n:3d}  {why}")
    assert (
        classes and "other" not in classes
    )  # the protocols read some replies differently, each for a named reason


def _why(reply: str, official: float | None, ours: int | None) -> str:
    if official == 0.0:
        return "[0]: official valid 0, ours out of the 1-5 range (re-asked)"
    if "<think>" in reply:
        return "reasoning trace: official reads inside it, ours after it"
    if official is None and "²" in reply:
        return "superscript digit: not a decimal digit officially, folded to 2 by NFKC in ours"
    if official is None and ours is not None:
        return "full-width or spaced brackets (【n】, ［n］, [ n ]): official no score, ours reads them"
    if official is not None and ours is not None:
        return "a 【n】 before the first [n]: ours reads the 【n】"
    if (
        official is not None
        and ours is None
        and len(set(re.findall(r"[\[【［]\s*(\d+)\s*[\]】］]", reply))) > 1
    ):
        return "scores that disagree: official takes the first, ours re-asks (a quoted answer may hold one)"
    return "other"


def test_reference_grader_reads_each_reply_once_and_accepts_zero(shared_data):
    sample = next(
        s
        for s in _samples(shared_data("llmeval-med", "dataset.json"))
        if s.metadata["code"] == "MR"
    )
    judge = FakeJudge(['{"得分": "[0]"}', "无分数", "【4】"])
    g = asyncio.run(
        LLMEvalGrader(runs=3).grade(
            sample, Response(key="a", text="答"), GradeContext(judges=(judge,))
        )
    )
    assert len(judge.calls) == 3  # Evaluate.py never re-asks
    assert g.details["run_scores"] == [0.0, None, None] and g.value == 0.0 and g.status == "scored"
    assert [v.status for v in g.votes] == ["unmet", "unknown", "unknown"]
    assert (
        g.details["other_run_scores"] == [None, None, 4.0] and g.details["other_value"] == 1.0
    )  # ours reads 【4】 only


# ---- prompts and aggregation on the real data ---------------------------------------------------


@dataclass
class FakeJudge:
    replies: list[str | None]
    name: str = "judge"
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    async def __call__(self, messages, *, attempt: int = 0) -> Response:
        reply = self.replies[len(self.calls) % len(self.replies)]
        self.calls.append(tuple(messages))
        if reply is None:
            return Response(key=f"k{len(self.calls)}", error="HTTP 500")
        return Response(key=f"k{len(self.calls)}", text=reply)


@cache
def _samples(path: Path):
    return LLMEvalMed().load(path)


def _raw_records(path: Path) -> list[tuple[str, dict[str, Any]]]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    return [(key, rec) for key, recs in raw.items() for rec in recs]


def test_judge_gets_evaluate_py_prompt_byte_for_byte_on_all_667_turns():
    path = shared_file("llmeval-med", "dataset.json")
    grader = LLMEvalGrader(runs=1)
    records = _raw_records(path)
    samples = _samples(path)
    assert len(records) == len(samples) == 667
    for (key, rec), s in zip(records, samples):
        answer = f"  模型回答 {s.id}\n"
        msgs = grader.messages(s, answer)
        assert [m.role for m in msgs] == ["system", "user"] and msgs[
            0
        ].content == "You are a helpful assistant."
        assert msgs[1].content == official_prompt(
            key, rec, answer.strip()
        )  # Answer.py keeps the answer stripped
    # the fingerprint names the pinned file and each template's hash
    fps = grader.template_hashes()
    assert set(fps) == {c.lower() for c in CATEGORY_CODES.values()}
    assert {fp["sha256"] for fp in fps.values()} == {
        "3d5a3165940a5476ec56ef2989d570a3edec21414f23d5677f005bc3890002c9"
    }


def test_no_null_or_blank_reference_fields_in_the_published_file():
    """The one rendering exception (null/blank -> "nan") never occurs in the data."""
    for _key, rec in _raw_records(shared_file("llmeval-med", "dataset.json")):
        for k in ("sanswer", "checklist"):
            v = rec.get(k, math.nan)
            assert v is not None and not (isinstance(v, str) and not v.strip())


@pytest.mark.parametrize("runs, failing", [(3, False), (1, False), (2, True), (5, True)])
def test_aggregate_equals_aggregate_py_on_the_real_turns(tmp_path, runs, failing):
    """Every turn graded ``runs`` times with corpus replies; the same replies through Evaluate.py's
    parse and Aggregate.py give the same OP, category rates and usable counts."""
    path = shared_file("llmeval-med", "dataset.json")
    samples = _samples(path)
    replies = [r for r in corpus() if failing or r is not None]
    bench = LLMEvalMed(judge_runs=runs)
    grader = LLMEvalGrader(runs=runs)
    per_run: list[dict[str, list[dict[str, Any]]]] = [{} for _ in range(runs)]
    grades = []

    async def grade_all():
        for i, s in enumerate(samples):
            mine = [replies[(7 * i + 13 * r + i // 5) % len(replies)] for r in range(runs)]
            g = await grader.grade(
                s, Response(key="a", text="答"), GradeContext(judges=(FakeJudge(mine),))
            )
            grades.append(g)
            for r, reply in enumerate(mine):
                item = {
                    "groupCode": s.metadata["group_code"],
                    "round": s.metadata["round"],
                    "problem": s.messages[-1].content,
                    "model_answer_score": official_stored(reply),
                }
                per_run[r].setdefault(s.metadata["category"], []).append(item)

    asyncio.run(grade_all())
    files = []
    for r, data in enumerate(per_run):
        f = tmp_path / f"run{r}.json"
        f.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        files.append(str(f))
    official = aggregate_official().aggregate(files)
    ours = bench.aggregate(samples, grades, RunOptions())
    assert round(ours.score, 2) == official["overall"]["OP"]
    assert ours.n == official["overall"]["n_questions"] == 667
    n_usable = sum(1 for g in grades if g.value == 1.0)
    assert n_usable == official["overall"]["n_usable"]
    for code, info in official["per_category"].items():
        cell = ours.breakdown["category"][code]
        assert round(cell.score, 2) == info["usability_rate"] and cell.n == info["n_questions"]
    # per question: our mean of valid runs equals Aggregate.py's average_runs
    averaged = aggregate_official().average_runs(files)
    ours_means = [g.details["mean_score"] for g in grades]
    theirs = [m for cat in averaged.values() for m in cat]
    assert ours_means == theirs
    print(
        f"\nLLMEval-Med aggregation, {runs} run(s){' with failed calls' if failing else ''}: 667 questions, "
        f"OP {official['overall']['OP']} (ours {ours.score:.4f}), "
        + ", ".join(f"{c} {i['usability_rate']}" for c, i in official["per_category"].items())
        + f"; grandrounds figure {ours.extra['other_protocol']['score']:.2f}"
    )


def test_reference_run_sends_official_settings_and_prompt(tmp_path):
    """The real runner, reference protocol: candidate at Answer.py's settings with its system message,
    judge gpt-4o's defaults, the judge prompt exactly Evaluate.py's for the turn."""
    from grandrounds.run.config import JudgeConfig, RunConfig
    from grandrounds.run.runner import run
    from grandrounds.store import Store
    from grandrounds.testing import LoopbackServer

    path = shared_file("llmeval-med", "dataset.json")
    records = _raw_records(path)[:7]  # --limit 5 counts dialogues: their 7 turns

    def rule(body):
        if body["model"] == "cand":
            return "  候选回答：建议就医。 "
        return '{"判断依据"："一致","得分"："[0]"}'

    with LoopbackServer(rule, keep_bodies=True) as srv:
        cfg = RunConfig(
            benchmark="llmeval-med",
            model="openai/cand",
            data=path,
            base_url=srv.base_url,
            limit=5,
            judges=(JudgeConfig(spec="openai/judge", base_url=srv.base_url),),
            bench_params={"judge_runs": 1},
        )
        out = asyncio.run(run(Store(tmp_path / "s.db"), cfg))
        bodies = srv.stats.bodies
    cand = [b for b in bodies if b["model"] == "cand"]
    judge = [b for b in bodies if b["model"] == "judge"]
    assert len(cand) == 7 and len(judge) == 7
    assert all(b["temperature"] == 1.0 and b["max_tokens"] == 2048 for b in cand)
    assert all(
        b["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}
        for b in cand
    )
    assert all(b["temperature"] == 1.0 and b["max_tokens"] == 16384 for b in judge)
    sent = sorted(b["messages"][1]["content"] for b in judge)
    want = sorted(official_prompt(k, rec, "候选回答：建议就医。") for k, rec in records)
    assert sent == want
    # [0] is a valid score officially: every answer is judged, none usable, none unscored.
    assert out.result.score == 0.0 and out.result.n == 7 and out.result.n_unscored == 0
    assert out.result.extra["other_protocol"]["score"] is None  # ours rejects [0]: nothing scored
