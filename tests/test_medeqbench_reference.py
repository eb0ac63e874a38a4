"""MedEQBench under ``--protocol reference`` against the official evaluator, on all 413 real rows.

The official code (Health_EQBench.py ``evaluate_prompt`` and ``Health_EQBenchEvaluator``; utils.py
``parse_rubric``, ``parse_llm_evaluation``, ``calc_score_percent_one_query``, ``rubrics_tags``,
``find_most_similar_tag``) is pulled out of ../shared/reference with ``tests.official.load_official``
and the evaluator's own ``score`` runs end to end, with its judge call replaced by a lookup from
the exact prompt to a reply. Every row is answered, then judged in each reply format below by our
grader (reference protocol) and by the official evaluator; per-question scores, per-question
dimension scores, the final score and the per-dimension means must be equal, and the official
lookup only finds a reply for the prompt our grader sent (so the prompts are the same text).

``find_most_similar_tag`` needs jieba and scikit-learn. Where they are installed the official
function itself maps the spellings; where not, it is replaced by our tabulated mapping and the
test checking that table against the official function is skipped. The per-format table is
printed (run with ``-s``).
"""

from __future__ import annotations

import ast
import asyncio
import csv
import importlib.util
import io
import json
import math
import random
from collections.abc import Callable
from functools import cache, lru_cache
from types import SimpleNamespace
from typing import Any

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.medeqbench import MedEQBench, reference_dimension
from grandrounds.core.records import Grade, Response, Sample
from grandrounds.graders.base import GradeContext
from grandrounds.graders.medeq_grader import (
    MedEQGrader,
    MedEQParams,
    official_template,
    reference_counts,
)
from grandrounds.scoring.medeq import DIMENSIONS, reference_question, sample_items
from grandrounds.sources.medeqbench import (
    CONFIG,
    EVALUATE_PROMPT,
    EVALUATOR,
    GRANDROUNDS,
    REFERENCE,
    UTILS,
)
from tests.conftest import reference_file, shared_file
from tests.official import load_official

HAVE_TFIDF = all(importlib.util.find_spec(m) is not None for m in ("jieba", "sklearn"))
FAILED = "<judge call failed>"  # a reply marker: the judge call fails (the official judge then returns "")


# ---- the official pipeline ----------------------------------------------------------------------


class _Registry:
    def register_module(self, *args: Any, **kwargs: Any) -> Callable[[type], type]:
        return lambda cls: cls


@lru_cache(maxsize=1)
def official() -> SimpleNamespace:
    names = ["rubrics_tags", "parse_rubric", "parse_llm_evaluation", "calc_score_percent_one_query"]
    extra: dict[str, Any] = {}
    if HAVE_TFIDF:
        names.append("find_most_similar_tag")
    else:  # the official mapping as we tabulate it (checked against the real one where jieba is installed)
        extra["find_most_similar_tag"] = lambda tag, candidates: (reference_dimension(tag), 1.0)
    utils = load_official("medeqbench/Health_EQBench/utils.py", names, extra)
    if HAVE_TFIDF:  # the official function, remembered per spelling (it refits TF-IDF on every call: minutes over 7 x 7,355 items)
        tfidf = utils.find_most_similar_tag
        utils.find_most_similar_tag = lru_cache(maxsize=None)(
            lambda tag, candidates: tfidf(tag, list(candidates))
        )
        utils.parse_rubric.__globals__["find_most_similar_tag"] = lambda tag, candidates: (
            utils.find_most_similar_tag(tag, tuple(candidates))
        )
    replies: dict[str, str] = {}

    def evaluate_score(
        prompt: str,
    ) -> str:  # utils.py evaluate_score: the judge's stripped reply, "" when the call failed
        if prompt not in replies:
            raise AssertionError("the official evaluator built a prompt our grader did not send")
        return replies[prompt]

    shared = {n: getattr(utils, n) for n in names} | {
        "evaluate_score": evaluate_score,
        "BaseEvaluator": object,
        "ICL_EVALUATORS": _Registry(),
        "LOAD_DATASET": _Registry(),
    }
    main = load_official(
        "medeqbench/Health_EQBench/Health_EQBench.py",
        ["evaluate_prompt", "rubrics_tags", "Health_EQBenchEvaluator"],
        shared,
    )
    return SimpleNamespace(
        **shared,
        evaluate_prompt=main.evaluate_prompt,
        evaluator=main.Health_EQBenchEvaluator(),
        replies=replies,
    )


@lru_cache(maxsize=1)
def csv_rows() -> list[dict[str, str]]:
    """med_eq.csv as the official loader's pandas read gives it (no cell is blank or NA-like)."""
    text = shared_file("medeqbench", "med_eq.csv").read_text(encoding="utf-8-sig")
    return list(csv.DictReader(io.StringIO(text, newline="")))


@lru_cache(maxsize=1)
def samples() -> list[Sample]:
    return MedEQBench().load(shared_file("medeqbench", "med_eq.csv"))


def answer_of(sample: Sample) -> str:
    """A candidate answer; some carry a reasoning block and braces, which the judge must see unchanged."""
    n = int(sample.id)
    return (
        f"<think>先想想{{草稿}}</think>您好，理解您的担心。第{n}号回答。"
        if n % 7 == 0
        else f"您好，理解您的担心（{n}）。"
    )


# ---- reply formats ------------------------------------------------------------------------------

Line = tuple[str, str, str, int]  # kind, number, name, value


def items_of(sample: Sample, rng: random.Random) -> list[Line]:
    spell = sample.metadata["dimension_spellings"]
    return [
        (c.id.split("_")[0], c.id.split("_")[1], spell[c.id], rng.randint(0, 1))
        for c in sample.rubric
    ]


def official_line(kind: str, n: str, name: str, v: int) -> str:
    return f'{kind}_{n}_"{name}":{v} | Reason: 回答{"有" if v else "未"}体现该条目 | 给出具体出现的内容: "您好，理解您的担心"'


def clean(s: Sample, rng: random.Random) -> str:
    return "\n".join(official_line(*it) for it in items_of(s, rng))


def duplicated(s: Sample, rng: random.Random) -> str:
    lines = [official_line(*it) for it in items_of(s, rng)]
    out = []
    for kind, n, name, v in items_of(s, random.Random(rng.random())):
        out.append(official_line(kind, n, name, v))
        r = rng.random()
        if r < 0.25:  # the same line again
            out.append(official_line(kind, n, name, v))
        elif r < 0.35:  # a second, contradicting line
            out.append(official_line(kind, n, name, 1 - v))
    if rng.random() < 0.3:  # a "re-check" block repeating every line
        out += ["", "复核："] + lines
    return "\n".join(out)


def prose(s: Sample, rng: random.Random) -> str:
    its = items_of(s, rng)
    think = "\n".join(official_line(k, n, name, 1 - v) for k, n, name, v in its[:3])
    body = "\n".join(("- " if rng.random() < 0.3 else "") + official_line(*it) for it in its)
    fence = rng.random() < 0.3
    total = sum(v for *_, v in its)
    parts = [
        f"<think>先逐条核对：\n{think}\n</think>" if rng.random() < 0.5 else "",
        "好的，以下是逐项评分结果：",
        "```" if fence else "",
        body,
        "```" if fence else "",
        f"总结：共 {len(its)} 项，符合 {total} 项。",
    ]
    return "\n".join(p for p in parts if p)


def spellings(s: Sample, rng: random.Random) -> str:
    """The alternate spellings a judge writes: canonical or raw names, reason labels, bars, quotes, separators."""
    out = []
    for c, (kind, n, name, v) in zip(s.rubric, items_of(s, rng)):
        name = rng.choice([name, c.tags[0], c.tags[0].replace(" ", "")])
        style = rng.randrange(8)
        if style == 0:
            out.append(official_line(kind, n, name, v))
        elif style == 1:
            out.append(f'{kind}_{n}_"{name}":{v} | reason: 小写标签 | 出现内容: 无')
        elif style == 2:
            out.append(f'{kind}_{n}_"{name}":{v} | 理由: 中文标签 | 出现内容: 无')
        elif style == 3:
            out.append(f'{kind}_{n}_"{name}":{v} | Reason: 没有第二个竖线')
        elif style == 4:
            out.append(f'{kind}_{n}_"{name}": "{v}" | Reason: 引号里的值 | 出现内容: 无')
        elif style == 5:
            out.append(f'{kind} {n} "{name}":{v} | Reason: 空格分隔 | 出现内容: 无')
        elif style == 6:
            out.append(f"{kind}_{n}:{v} | Reason: 没有名称 | 出现内容: 无")
        else:
            out.append(f'{kind}_{n}_"{name}":{v}|Reason:紧凑|出现内容:无')
    return "\n".join(out)


def full_width(s: Sample, rng: random.Random) -> str:
    """Full-width punctuation and digits, Chinese quotes; mixed with ASCII lines, so a line without an
    ASCII colon runs into the next one in the official pattern."""
    fw = str.maketrans("0123456789", "０１２３４５６７８９")
    out = []
    for kind, n, name, v in items_of(s, rng):
        style = rng.randrange(6)
        if style == 0:
            out.append(official_line(kind, n, name, v))
        elif style == 1:
            out.append(f"{kind}_{n}_“{name}”：{v} ｜ Reason：全角冒号 ｜ 给出具体出现的内容：无")
        elif style == 2:
            out.append(f"{kind}＿{n}＿“{name}”:{v} | Reason: 全角下划线 | 给出具体出现的内容: 无")
        elif style == 3:
            out.append(
                f'{kind}_{n.translate(fw)}_"{name}":{v} | Reason: 全角序号 | 给出具体出现的内容: 无'
            )
        elif style == 4:
            out.append(f'{kind}_{n}_"{name}":{v} ｜ Reason: 全角竖线 ｜ 给出具体出现的内容: 无')
        else:
            out.append(
                f'{kind}_{n}_"{name}"：{v} | Reason: 冒号全角其余半角 | 给出具体出现的内容: 无'
            )
    return "\n".join(out)


def missing(s: Sample, rng: random.Random) -> str:
    """Items left out; some replies with nothing readable, some judge calls failing."""
    r = rng.random()
    if r < 0.05:
        return FAILED
    if r < 0.10:
        return rng.choice(["", "抱歉，我无法完成评分。", "加分项评分：全部符合"])
    return "\n".join(official_line(*it) for it in items_of(s, rng) if rng.random() > 0.3)


def leading_zeros_and_mixed(s: Sample, rng: random.Random) -> str:
    """Every format above mixed line by line, with numbers written 01, 1.0, or as an item that does not exist."""
    makers = [clean, duplicated, prose, spellings, full_width]
    lines = [ln for m in makers for ln in m(s, random.Random(rng.random())).split("\n")]
    rng.shuffle(lines)
    extra = [
        f'加分项_0{len(s.rubric) % 9 + 1}_"x":1 | Reason: 前导零 | 出现内容: 无',
        f'加分项_{len(s.rubric) + 5}_"x":1 | Reason: 没有这个条目 | 出现内容: 无',
        '减分项_1_"医疗沟通失言情境":1 | Reason: 没有减分项 | 出现内容: 无',
    ]
    return "\n".join(lines[: len(lines) // 2] + extra)


FORMATS: dict[str, Callable[[Sample, random.Random], str]] = {
    "clean": clean,
    "duplicated": duplicated,
    "prose": prose,
    "spellings": spellings,
    "full-width": full_width,
    "missing": missing,
    "mixed": leading_zeros_and_mixed,
}


def replies_for(fmt: str) -> list[str]:
    return [FORMATS[fmt](s, random.Random(f"{fmt}:{s.id}")) for s in samples()]


# ---- our side -----------------------------------------------------------------------------------


class OneReplyJudge:
    """Answers every prompt with one fixed reply (or a failed call) and keeps the prompts."""

    name = "judge"

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.prompts: list[str] = []

    async def __call__(self, messages, *, attempt=0):
        self.prompts.append(messages[-1].content)
        if self.reply == FAILED:
            return Response(key=f"j{attempt}", error="judge 500")
        return Response(key=f"j{attempt}:{hash(messages[-1].content)}", text=self.reply)


def grade_rows(protocol: str, replies: list[str]) -> tuple[list[Grade], list[OneReplyJudge]]:
    grader = MedEQGrader(MedEQParams(protocol))
    judges = [OneReplyJudge(r) for r in replies]

    async def go():
        return await asyncio.gather(
            *(
                grader.grade(
                    s, Response(key="a", text=answer_of(s)), GradeContext(judges=(j,), max_reask=1)
                )
                for s, j in zip(samples(), judges)
            )
        )

    return list(asyncio.run(go())), judges


def official_run(replies: list[str], prompts: list[str]) -> dict[str, Any]:
    """The official evaluator's ``score`` on our answers, its judge answering with ``replies``."""
    o = official()
    o.replies.clear()
    o.replies.update({p: ("" if r == FAILED else r.strip()) for p, r in zip(prompts, replies)})
    refs = [
        json.dumps(
            {"id": int(r["id"]), "question": r["question"], "rubrics": r["rubrics"]},
            ensure_ascii=False,
        )
        for r in csv_rows()
    ]
    return o.evaluator.score(
        [answer_of(s) for s in samples()], refs, [r["question"] for r in csv_rows()]
    )


def same(a: float | None, b: float) -> bool:
    return (a is None and math.isnan(b)) or (a is not None and not math.isnan(b) and a == b)


@cache
def compare(fmt: str) -> dict[str, Any]:
    replies = replies_for(fmt)
    grades, judges = grade_rows("reference", replies)
    assert all(len(j.prompts) == 1 for j in judges), "the reference protocol never re-asks"
    prompts = [j.prompts[0] for j in judges]
    off = official_run(replies, prompts)
    agg = MedEQBench().aggregate(samples(), grades, RunOptions(protocol="reference"))
    ours_grades, _ = grade_rows("grandrounds", replies)
    ours_agg = MedEQBench().aggregate(samples(), ours_grades, RunOptions(protocol="grandrounds"))
    rows = []
    for s, g, case in zip(samples(), grades, off["detail"]["cases"]):
        mine = reference_question(sample_items(s), g.details["reference_counts"])
        value = (
            g.value if g.value is not None else 0.0
        )  # an answer nothing was read from counts 0 (aggregate)
        rows.append(
            {
                "id": s.id,
                "score_ok": value == case["single_score"] and mine.score == case["single_score"],
                "tags_ok": all(
                    same(None if math.isnan(mine.tags[t]) else mine.tags[t], case["tag_scores"][t])
                    for t in DIMENSIONS
                )
                and (
                    g.value is None
                    or all(
                        same(g.details["dimension_scores"][t], case["tag_scores"][t])
                        for t in DIMENSIONS
                    )
                ),
                "differs_from_ours": g.details["other_value"] != g.value,
                "official": case["single_score"],
                "ours": g.value,
            }
        )
    tag_ok = all(
        same(agg.breakdown["dimension"][t].score, off["detail"]["tag_scores"][t])
        for t in DIMENSIONS
    )
    return {
        "rows": rows,
        "official": off,
        "agg": agg,
        "ours_agg": ours_agg,
        "tag_ok": tag_ok,
        "grades": grades,
    }


# ---- the differential test ------------------------------------------------------------------------


def test_reference_equals_the_official_evaluator_on_every_row_and_format(capsys):
    table = []
    for fmt in FORMATS:
        c = compare(fmt)
        rows = c["rows"]
        bad = [r for r in rows if not (r["score_ok"] and r["tags_ok"])]
        table.append(
            (
                fmt,
                len(rows),
                sum(r["score_ok"] for r in rows),
                sum(r["tags_ok"] for r in rows),
                c["agg"].score == c["official"]["score"],
                c["tag_ok"],
                sum(r["differs_from_ours"] for r in rows),
                c["official"]["score"],
                c["agg"].extra["other_protocol"]["score"],
            )
        )
        assert not bad, (fmt, bad[:3])
        assert c["agg"].score == c["official"]["score"], fmt  # exactly, not approximately
        assert c["tag_ok"], fmt
        assert c["agg"].n == 413 and c["agg"].n_unscored == 0
        # the grandrounds run on the same replies names the official figure as its other protocol's
        assert c["ours_agg"].extra["other_protocol"]["score"] == c["official"]["score"], fmt
    with capsys.disabled():
        print(
            "\nMedEQBench reference vs official evaluator (413 rows per format; tag = 22 dimension scores per row)"
        )
        print(
            f"{'format':12} {'rows':>5} {'score=':>7} {'tags=':>6} {'final=':>7} {'dims=':>6} {'ours≠':>6} {'official':>9} {'ours':>9}"
        )
        for fmt, n, ok, tok, fin, dims, diff, score, ours in table:
            print(
                f"{fmt:12} {n:5d} {ok:7d} {tok:6d} {str(fin):>7} {str(dims):>6} {diff:6d} {score:9.4f} {ours if ours is None else round(ours, 4):>9}"
            )
        print(
            f"find_most_similar_tag: {'official (jieba + scikit-learn)' if HAVE_TFIDF else 'tabulated (jieba/scikit-learn not installed)'}"
        )
    assert len(FORMATS) * 413 == sum(t[1] for t in table)


def test_formats_exercise_what_they_claim():
    """The corpus does contain repeated lines, unread items, failed calls and cross-line matches."""
    dup = compare("duplicated")["grades"]
    assert sum(1 for g in dup for v in g.details["reference_counts"].values() if v >= 2) > 100
    miss = compare("missing")
    assert miss["agg"].extra["n_counted_zero"] > 10
    assert any(
        g.status == "unreadable" and "judge call failed" in (g.error or "") for g in miss["grades"]
    )
    fw = compare("full-width")["rows"]
    assert (
        sum(r["differs_from_ours"] for r in fw) > 300
    )  # ours reads what the official pattern cannot


def test_official_items_and_dimensions_on_every_row():
    """Keys, weights and dimensions of every row as utils.py parse_rubric gives them."""
    o = official()
    dropped = []
    for s, row in zip(samples(), csv_rows()):
        theirs = o.parse_rubric(row["rubrics"])
        mine = s.metadata["reference_items"]
        assert list(mine) == list(theirs), s.id
        assert all(mine[k] == [theirs[k]["score"], theirs[k]["tag"]] for k in theirs), s.id
        dropped += [(s.id, c.id) for c in s.rubric if c.id not in mine]
    assert dropped == [("72", "加分项_6"), ("399", "加分项_6")]
    changed = {
        (s.id, c.id)
        for s in samples()
        for c in s.rubric
        if c.id in s.metadata["reference_items"]
        and s.metadata["reference_items"][c.id][1] != c.tags[0]
    }
    assert changed == {("123", "加分项_1"), ("405", "加分项_9")}


@pytest.mark.skipif(not HAVE_TFIDF, reason="the official tag mapping needs jieba and scikit-learn")
def test_tabulated_dimensions_equal_the_official_tfidf_mapping():
    o = official()
    spellings = {
        t
        for row in csv_rows()
        for t in (v["original_tag"] for v in o.parse_rubric(row["rubrics"]).values())
    }
    assert len(spellings) == 48
    for sp in sorted(spellings):
        assert reference_dimension(sp) == o.find_most_similar_tag(sp, tuple(o.rubrics_tags))[0], sp


@pytest.mark.parametrize(
    "reply, counts",
    [
        (
            '加分项_1_"a":1 | Reason: x | y\n加分项_1_"a":1 | Reason: x | y',
            {"加分项_1": 2},
        ),  # every line counts
        ('加分项_1_"a":1 | Reason: x', {}),  # no second bar: not read
        (
            '加分项_1_"a"：1 ｜ Reason：x ｜ y\n加分项_2_"b":0 | Reason: z | w',
            {"加分项_1": 0},
        ),  # no ASCII colon: runs into line 2
        (
            '加分项_1_"a"：1 | Reason: x | y\n加分项_2_"b":0 | Reason: z | w',
            {"加分项_2": 0},
        ),  # stops at "Reason:" of line 1
        ('<think>加分项_3_"c":1 | Reason: r | e</think>', {"加分项_3": 1}),  # reasoning is read too
        ('加分项_１_"a":1 | Reason: x | y', {"加分项_１": 1}),  # a full-width number names no item
        ('加分项_01_"a":1 | Reason: x | y', {"加分项_01": 1}),
        ('加分项_1_"a": 1 | Reason: x | y', {}),
    ],
)
def test_official_line_reading_table(reply, counts):
    assert reference_counts(reply) == counts
    theirs: dict[str, int] = {}
    for item in official().parse_llm_evaluation(reply):
        key = f"{item['type']}_{item['index']}"
        theirs[key] = theirs.get(key, 0) + item["score"]
    assert theirs == counts


# ---- presets, prompt text and a real run -----------------------------------------------------------


def _sources_sha256(path: str) -> str:
    for line in reference_file("SOURCES.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        folder, _, _, p, sha = line.split("\t")
        if folder == "medeqbench" and p == path:
            return sha
    raise AssertionError(f"{path} not in SOURCES.tsv")


def _call_keywords(tree: ast.AST, func: str) -> dict[str, Any]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == func:
            names = [a.arg for a in node.args.args]
            defaults = [ast.literal_eval(d) for d in node.args.defaults]
            return dict(zip(names[len(names) - len(defaults) :], defaults))
    raise AssertionError(func)


def test_presets_are_the_official_settings():
    utils = ast.parse(
        reference_file("medeqbench", "Health_EQBench", "utils.py").read_text(encoding="utf-8")
    )
    infer = _call_keywords(utils, "llm_infer")
    stream = _call_keywords(utils, "openai_api_infer_stream")
    model = next(
        ast.literal_eval(n.value)
        for n in utils.body
        if isinstance(n, ast.Assign) and n.targets[0].id == "EVAL_MODEL_NAME"
    )
    assert (REFERENCE.judge.temperature, REFERENCE.judge.max_tokens, REFERENCE.judge.top_p) == (
        infer["temperature"],
        infer["max_tokens"],
        stream["top_p"],
    )
    assert REFERENCE.judge_model == f"openai/{model}" and REFERENCE.judge.system is None
    config = reference_file("medeqbench", "configs", "examples_config.py").read_text(
        encoding="utf-8"
    )
    tree = ast.parse(config)
    models = next(
        n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "models"
    )
    kw = {k.arg: k.value for k in models.elts[0].keywords}
    assert REFERENCE.answer.temperature == ast.literal_eval(kw["temperature"])
    assert (
        REFERENCE.answer.max_tokens == ast.literal_eval(kw["max_out_len"]) == 1024 * 16
    )  # the inferencer's max_out_len
    assert REFERENCE.answer.system is None and REFERENCE.answer.top_p is None
    assert (GRANDROUNDS.answer.temperature, GRANDROUNDS.judge.temperature) == (0.0, 0.0)
    for f in (EVALUATOR, UTILS, CONFIG):
        assert (
            f.sha256 == _sources_sha256(f.path)
            and f.commit == "8a3a047d48e6ab49e3a263cc06c07c3787d0fb87"
        )


def test_the_official_prompt_is_read_from_the_pinned_file():
    text = EVALUATE_PROMPT.load()
    assert text.text == official().evaluate_prompt
    fp = MedEQGrader(MedEQParams("reference")).template_hashes()["evaluate_prompt"]
    assert (
        fp["sha256"] == _sources_sha256("Health_EQBench/Health_EQBench.py")
        and fp["text_sha256"] == text.fingerprint()["text_sha256"]
    )
    assert (
        official_template().text.count("{") == 3
    )  # question, answer, rubric: str.format fills exactly these
    s = samples()[
        6
    ]  # id 7: an answer with a reasoning block and braces goes to the judge unchanged
    sent = MedEQGrader(MedEQParams("reference")).prompt(s, answer_of(s))
    row = csv_rows()[6]
    assert sent == official().evaluate_prompt.format(
        question=row["question"], answer=answer_of(s), rubric=row["rubrics"]
    )
    assert "<think>" in sent and "{草稿}" in sent
    padded = MedEQGrader(MedEQParams("reference")).prompt(
        s, "\n  答复  \n"
    )  # OpenCompass stores the reply stripped
    assert "<answer>\n答复\n</answer>" in padded
    ours = MedEQGrader(MedEQParams("grandrounds")).prompt(s, answer_of(s))
    assert "<think>" not in ours and ours != sent


def test_a_run_sends_the_official_prompt_and_settings(tmp_path):
    from grandrounds.run.config import JudgeConfig, RunConfig
    from grandrounds.run.runner import run
    from grandrounds.store import Store
    from grandrounds.testing import LoopbackServer

    rows = csv_rows()[:3]
    seen: dict[str, list[dict[str, Any]]] = {"cand": [], "judge": []}

    def cand(body):
        seen["cand"].append(body)
        return "您好，我理解您的担心。"

    def judge(body):
        seen["judge"].append(body)
        prompt = body["messages"][-1]["content"]
        row = next(r for r in rows if f"<question>\n{r['question']}\n</question>" in prompt)
        return "\n".join(
            f'加分项_{k.split("_")[1]}_"x":1 | Reason: 有 | 出现内容: 无'
            for k in official().parse_rubric(row["rubrics"])
        )

    with LoopbackServer(cand) as c, LoopbackServer(judge) as j:
        cfg = RunConfig(
            benchmark="medeqbench",
            model="openai/cand",
            data=shared_file("medeqbench", "med_eq.csv"),
            base_url=c.base_url,
            limit=3,
            judges=(JudgeConfig(spec="openai/gpt-4.1", base_url=j.base_url),),
        )
        out = asyncio.run(run(Store(tmp_path / "s.db"), cfg))
    assert sorted(b["messages"][0]["content"] for b in seen["cand"]) == sorted(
        r["question"] for r in rows
    )
    assert all(
        len(b["messages"]) == 1 and b["messages"][0]["role"] == "user" for b in seen["cand"]
    )  # no system message
    assert all((b["temperature"], b["max_tokens"]) == (0.7, 16384) for b in seen["cand"])
    for body in seen["judge"]:
        assert (body["temperature"], body["max_tokens"], body["top_p"]) == (0.0, 8192, 1.0)
        assert len(body["messages"]) == 1 and body["messages"][0]["role"] == "user"
    sent = {b["messages"][0]["content"] for b in seen["judge"]}
    want = {
        official().evaluate_prompt.format(
            question=r["question"], answer="您好，我理解您的担心。", rubric=r["rubrics"]
        )
        for r in rows
    }
    assert sent == want
    assert (
        out.result.score == 100.0
        and out.result.extra["other_protocol"]["protocol"] == "grandrounds"
    )
    assert (
        out.result.fingerprint["templates"]["evaluate_prompt"]["text_sha256"]
        == EVALUATE_PROMPT.load().fingerprint()["text_sha256"]
    )


def test_the_issues_findings_under_each_protocol():
    """A repeated line counts again, the two dropped items and the two re-mapped spellings: reference only."""
    by_id = {s.id: s for s in samples()}

    def grade(protocol: str, s: Sample, reply: str) -> Grade:
        return asyncio.run(
            MedEQGrader(MedEQParams(protocol)).grade(
                s, Response(key="a", text="答"), GradeContext(judges=(OneReplyJudge(reply),))
            )
        )

    s = by_id["1"]
    first = s.rubric[0]
    reply = "\n".join(official_line(*c.id.split("_"), "x", int(c.id == first.id)) for c in s.rubric)
    twice = reply + "\n" + official_line(*first.id.split("_"), "x", 1)
    total = sum(c.points for c in s.rubric)
    assert grade("reference", s, twice).value == round(2 * first.points / total * 100, 2)
    assert grade("grandrounds", s, twice).value == round(100 * first.points / total, 2)
    assert (
        grade("reference", s, twice).details["other_value"] == grade("grandrounds", s, twice).value
    )

    s = by_id["72"]  # item 6 has "]" for "】": the official parser drops it from the rubric
    six = next(c for c in s.rubric if c.id == "加分项_6")
    reply = "\n".join(official_line(*c.id.split("_"), "x", 1) for c in s.rubric)
    ref, ours = grade("reference", s, reply), grade("grandrounds", s, reply)
    assert ref.value == 100.0 and ours.value == 100.0
    reply = "\n".join(official_line(*c.id.split("_"), "x", int(c.id != six.id)) for c in s.rubric)
    assert (
        grade("reference", s, reply).value == 100.0
    )  # its 0 is not read: the item is not in the rubric
    assert grade("grandrounds", s, reply).value == round(
        100 * (sum(c.points for c in s.rubric) - six.points) / sum(c.points for c in s.rubric), 2
    )

    s = by_id["405"]  # 【情绪转化】: the reference's TF-IDF files it under 医学语言通俗转化
    reply = "\n".join(official_line(*c.id.split("_"), "x", 1) for c in s.rubric)
    dims = grade("reference", s, reply).details["dimension_scores"]
    assert dims["医学语言通俗转化"] == 100.0 and dims["情绪转换"] is None
    assert grade("grandrounds", s, reply).details["dimension_scores"]["情绪转换"] == 100.0
