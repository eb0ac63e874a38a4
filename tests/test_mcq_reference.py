"""The exams under ``--protocol reference`` against the official code, loaded from ../shared/reference.

- simple-evals: every generated reply of a corpus is read by the official MMLU scoring function
  (``fn`` inside ``MMLUEval.__call__``, executed with a stand-in sampler) and by ours; the reference
  reading must agree on every reply, and our own reading's agreement is tabulated by reply shape.
- PubMedQA: predictions for the 500 test PMIDs scored by the official evaluation.py (its statements
  executed against a predictions file) and by our aggregate.
- CMB: replies for the whole answer key read by the official match_choice/extract_ans and scored by
  score.py (executed with its file paths redirected), against our grader and aggregate.
- letter-loglik: the context and continuations for every row of MedQA, MedMCQA, PubMedQA and the
  MMLU medical subjects equal what lm-eval's doc_to_text / doc_to_choice produce.
"""

from __future__ import annotations

import ast
import asyncio
import collections
import json
import random
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.cmb import CMB
from grandrounds.benchmarks.demo import DemoExam
from grandrounds.benchmarks.medmcqa import MedMCQA
from grandrounds.benchmarks.medqa import MedQA
from grandrounds.benchmarks.mmlu_medical import MMLUMedical
from grandrounds.benchmarks.pubmedqa import PubMedQA, official_macro_f1
from grandrounds.core.hashing import file_sha256
from grandrounds.core.records import Grade, Request, Response, Sample
from grandrounds.graders.base import GradeContext
from grandrounds.graders.choice_extract import cmb_letters, extract_choice, simple_evals_letter
from grandrounds.graders.mcq_grader import simple_evals_patterns
from grandrounds.run.config import RunConfig
from grandrounds.run.runner import run
from grandrounds.sources.upstream import (
    UpstreamRepo,
    python_appended_strings,
    python_fstring,
    python_returned_string,
    python_string,
    python_value,
)
from grandrounds.store import Store
from tests.conftest import reference_file
from tests.official import load_official

pytestmark = pytest.mark.filterwarnings(
    "ignore:invalid escape sequence:DeprecationWarning"
)  # common.py's own regex strings


def _grade_all(grader, pairs: Sequence[tuple[Sample, Response]]) -> list[Grade]:
    async def go():
        return await asyncio.gather(*(grader.grade(s, r, GradeContext()) for s, r in pairs))

    return asyncio.run(go())


# ---- upstream.py: the generic readers added for the lm-eval hooks ---------------------------------


def test_upstream_reads_appended_strings_fstrings_format_calls_and_literals(tmp_path, monkeypatch):
    src = (
        'PATTERNS = ["a\\\\s*:", "b"]\n'
        "def build(doc):\n"
        '    head = "Q: " + doc["q"] + "\\n"\n'
        "    for k, v in doc['opts'].items():\n"
        '        head += f"{k}) {v}\\n"\n'
        '    head += "A:"\n'
        '    rows = "".join(f"<{x}>" for x in doc["xs"])\n'
        "    return head\n"
        "def fmt(doc):\n"
        '    return "Abstract: {}\\nQ: {}\\n{name}".format(doc["c"], doc["q"], name=doc["n"])\n'
    )
    (tmp_path / "x").mkdir()
    path = tmp_path / "x" / "m.py"
    path.write_text(src, encoding="utf-8")
    monkeypatch.setenv("GRANDROUNDS_REFERENCE", str(tmp_path))
    f = UpstreamRepo("x", "o/r", "0" * 40).file("m.py", file_sha256(path))
    assert python_string(f, "head", within="build").render({"doc['q']": "why?"}) == "Q: why?\n"
    line, tail = python_appended_strings(f, "head", within="build")
    assert line.fields == ("k", "v") and line.render(k="A", v="x") == "A) x\n" and tail.text == "A:"
    assert python_fstring(f, within="build", fields=("x",)).render(x=1) == "<1>"
    got = python_returned_string(f, "fmt")
    assert got.fields == ("doc['c']", "doc['q']", "doc['n']")
    assert got.render({"doc['c']": "C", "doc['q']": "Q", "doc['n']": "N"}) == "Abstract: C\nQ: Q\nN"
    assert python_value(f, "PATTERNS") == ["a\\s*:", "b"]


# ---- simple-evals: the generate-mode reading ----------------------------------------------------


class _Sampler:
    """Stands in for simple-evals' ChatCompletionSampler: answers with ``reply``, records the prompt."""

    def __init__(self) -> None:
        self.reply = ""
        self.sent: list[list[dict[str, Any]]] = []

    def _pack_message(self, role: str, content: Any) -> dict[str, Any]:
        return {"role": str(role), "content": content}

    def __call__(self, messages):
        self.sent.append(messages)
        return SimpleNamespace(
            response_text=self.reply, actual_queried_message_list=messages, response_metadata={}
        )


def official_mmlu_scorer():
    """simple-evals' MMLU scoring function (``fn`` in MMLUEval.__call__), executed as written, with
    common.py's functions and constants; returns score(row, reply) -> (extracted_answer, score) and the
    sampler (to see the prompt sent)."""
    common = load_official(
        "simple-evals/common.py",
        [
            "QUERY_TEMPLATE_MULTICHOICE",
            "MULTILINGUAL_ANSWER_PATTERN_TEMPLATE",
            "MULTILINGUAL_ANSWER_REGEXES",
            "format_multichoice_question",
            "normalize_response",
            "normalize_extracted_answer",
        ],
    )
    path = reference_file("simple-evals", "mmlu_eval.py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "MMLUEval")
    call = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__call__")
    fn = next(n for n in call.body if isinstance(n, ast.FunctionDef) and n.name == "fn")
    seen: dict[str, Any] = {}

    class _Template:
        def render(self, **kw):
            seen.update(kw)
            return ""

    sampler = _Sampler()
    ns: dict[str, Any] = {
        **vars(common),
        "re": re,
        "sampler": sampler,
        "HTML_JINJA": "",
        "subject2category": {},
        "common": SimpleNamespace(jinja_env=SimpleNamespace(from_string=lambda _: _Template())),
        "SingleEvalResult": lambda **kw: SimpleNamespace(**kw),
    }
    exec(compile(ast.Module([fn], []), str(path), "exec"), ns)  # noqa: S102

    def score(row: dict[str, str], reply: str) -> tuple[str | None, float]:
        sampler.reply = reply
        result = ns["fn"](row)
        return seen["extracted_answer"], result.score

    return score, sampler


# Reply shapes: name -> template over {X} (the letter the reply means), {Y} (another letter), {x}
# (X lower-case) and {T} (X's option text).
SHAPES = {
    "answer line": "Answer: {X}",
    "reasoning then answer line": "Option {Y} is tempting, but the findings point elsewhere.\n\nAnswer: {X}",
    "bold label": "**Answer:** {X}",
    "bold letter": "Answer: **{X}**",
    "lower-case letter": "Answer: {x}",
    "space before colon": "Answer : {X}",
    "letter on next line": "Answer:\n{X}",
    "no space": "answer:{X}",
    "upper-case label": "ANSWER: {X}",
    "tab": "Answer:\t{X}",
    "boxed after label": "Answer: $\\boxed{{{X}}}$",
    "text after label": "Answer: $\\text{{{X}}}$",
    "latex parens": "Answer: \\({X}\\)",
    "letter and text": "Answer: {X}. {T}",
    "letter and paren text": "Answer: {X}) {T}",
    "full-width letter": "Answer: {W}",
    "chinese label": "答案：{X}",
    "chinese label ascii colon": "答案: {X}",
    "final answer": "Final Answer: {X}",
    "bold final answer": "**Final Answer**: {X}",
    "issue example": "Answer: {X} ... Why not {Y}? Because answer: {Y} would cause bleeding.",
    "explanation quotes another": "Answer: {X}\n\nExplanation: ... answer: {Y} is a distractor.",
    "revised answer line": "Answer: {Y}\nOn reflection that is wrong.\nAnswer: {X}",
    "reasoning trace": "<think>Answer: {Y}</think>\nAnswer: {X}",
    "bare letter": "{X}",
    "bare letter and text": "{X}. {T}",
    "the answer is": "The answer is {X}.",
    "the answer is in parens": "The answer is ({X}).",
    "correct option": "Therefore, the correct option is {X}.",
    "bold in prose": "The correct answer is **{X}**",
    "boxed alone": "$\\boxed{{{X}}}$",
    "parenthesised after label": "Answer: ({X})",
    "bracketed after label": "Answer: [{X}]",
    "option text after label": "Answer: {T}",
    "two letters": "Answer: {X} or {Y}",
    "two letters joined": "Answer: {X} and {Y}",
    "out of range": "Answer: E",
    "word after label": "Answer: Absolutely, {X}.",
    "other-language label": "Respuesta: {X}",
    "lower-case word after label": "The final answer: a bit unclear, maybe {X}.",
    "no answer": "I cannot decide without more information.",
    "empty": "",
}
WIDE = dict(zip("ABCD", "ＡＢＣＤ"))


def _corpus(samples: Sequence[Sample]) -> list[tuple[str, Sample, str]]:
    """(shape, sample, reply): every shape on five questions, meaning the key or another letter."""
    out = []
    for i, s in enumerate(samples[:5]):
        for j, (shape, template) in enumerate(SHAPES.items()):
            x = s.target if (i + j) % 2 == 0 else "ABCD"[("ABCD".index(s.target) + 1) % 4]
            y = "ABCD"[("ABCD".index(x) + 2) % 4]
            out.append(
                (shape, s, template.format(X=x, Y=y, x=x.lower(), T=s.choices[x], W=WIDE[x]))
            )
    return out


def _row(s: Sample) -> dict[str, str]:
    return {
        "Question": s.metadata["question"],
        **s.choices,
        "Answer": s.target,
        "Subject": "anatomy",
    }


def test_reference_reading_equals_simple_evals_on_a_reply_corpus(shared_data):
    samples = MedQA().load(shared_data("medqa", "phrases_no_exclude_test.jsonl"))
    corpus = _corpus(samples)
    assert len(corpus) >= 200
    score, _ = official_mmlu_scorer()
    bench = MedQA()
    ref = _grade_all(
        bench.grader(RunOptions()), [(s, Response(key="k", text=t)) for _, s, t in corpus]
    )
    patterns = simple_evals_patterns()
    for (shape, s, reply), g in zip(corpus, ref):
        want_extracted, want_score = score(_row(s), reply)
        assert simple_evals_letter(reply, patterns) == want_extracted, (shape, reply)
        assert (g.extracted, g.value) == (want_extracted, want_score), (shape, reply)


# Shapes on which our reading (grandrounds) and simple-evals' differ, and why. The test fails if the
# set changes, so the table in the module docstring of choice_extract.py stays true.
OUR_DIFFERENCES = {
    "lower-case letter": "simple-evals keeps 'b' and compares it with 'B' (wrong); ours reads B",
    "revised answer line": "simple-evals takes the first 'Answer:'; ours the last stated answer",
    "reasoning trace": "simple-evals reads inside <think>; ours strips the reasoning trace first",
    "bare letter": "simple-evals needs an 'Answer:' label; ours reads a reply that is only a letter",
    "bare letter and text": "as above, a reply opening with 'B. <option text>'",
    "the answer is": "no 'Answer:' label for simple-evals; ours reads 'The answer is B.'",
    "the answer is in parens": "as above",
    "correct option": "as above ('the correct option is B')",
    "bold in prose": "as above ('The correct answer is **B**')",
    "boxed alone": "as above (a boxed letter without a label)",
    "parenthesised after label": "simple-evals needs the letter right after the colon; ours skips '('",
    "bracketed after label": "as above, with '['",
    "option text after label": "simple-evals takes the first letter of the option's text when it is A-D; ours matches the text",
    "letter on next line": "simple-evals allows only spaces or tabs between 'Answer:' and the letter; ours a line break too",
    "two letters": "simple-evals takes the first; ours calls 'B or C' ambiguous (unextracted)",
    "two letters joined": "as above",
    "word after label": "simple-evals reads the 'A' of 'Absolutely'; ours reads no word as a letter",
    "other-language label": "simple-evals knows 'Respuesta:' and 40 other labels; ours only English and Chinese",
    "lower-case word after label": "simple-evals reads the 'a' of 'a bit'; ours reads no article as a letter",
}


def test_our_reading_agreement_with_simple_evals_by_reply_shape(shared_data, capsys):
    samples = MedQA().load(shared_data("medqa", "phrases_no_exclude_test.jsonl"))
    corpus = _corpus(samples)
    score, _ = official_mmlu_scorer()
    by_shape: dict[str, list[bool]] = collections.defaultdict(list)
    for shape, s, reply in corpus:
        official = score(_row(s), reply)[0]
        ours = extract_choice(reply, list(s.choices), s.choices)
        by_shape[shape].append(ours == official)
    differing = {shape for shape, oks in by_shape.items() if not all(oks)}
    agree = sum(sum(oks) for oks in by_shape.values())
    with capsys.disabled():
        print(
            f"\nours vs simple-evals: {agree}/{len(corpus)} replies read alike ({agree / len(corpus):.1%})"
        )
        for shape in sorted(differing):
            print(
                f"  {shape}: {len(by_shape[shape]) - sum(by_shape[shape])}/{len(by_shape[shape])} differ - {OUR_DIFFERENCES.get(shape)}"
            )
    assert differing == set(OUR_DIFFERENCES)
    # the example reads A under both
    assert all(by_shape["issue example"]) and all(by_shape["explanation quotes another"])


def test_the_reference_run_sends_simple_evals_prompt_and_settings(tmp_path):
    """A demo run under the reference protocol: the prompt sent is simple-evals' format_multichoice_question
    of the row, at the sampler's defaults (temperature 0.5, 1,024 tokens, no system message)."""
    seen: list[Request] = []

    def script(req: Request) -> str:
        seen.append(req)
        return "Answer: B"

    with Store(tmp_path / "s.db") as st:
        out = asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="demo",
                    model="scripted/m",
                    limit=3,
                    provider_options={"script": script},
                ),
            )
        )
    common = load_official(
        "simple-evals/common.py", ["QUERY_TEMPLATE_MULTICHOICE", "format_multichoice_question"]
    )
    samples = DemoExam().load()[:3]
    by_text = {r.messages[-1].content: r for r in seen}
    for s in samples:
        req = by_text[common.format_multichoice_question(_row(s))]
        assert [m.role for m in req.messages] == ["user"]
        assert req.params.temperature == 0.5 and req.params.max_tokens == 1024
    assert (
        out.result.extra["protocol"] == "reference"
        and out.result.extra["other_protocol"]["protocol"] == "grandrounds"
    )
    assert out.result.fingerprint["prompt_templates"]["simple-evals/common.py"] == file_sha256(
        reference_file("simple-evals", "common.py")
    )


def test_failed_calls_count_wrong_under_reference_and_are_excluded_under_ours(tmp_path):
    from grandrounds.providers.base import ProviderError

    def script(req: Request):
        return (
            ProviderError("HTTP 400", retryable=False)
            if "insulin" in req.messages[-1].content
            else "Answer: B"
        )

    results = {}
    for proto in ("reference", "grandrounds"):
        with Store(tmp_path / f"{proto}.db") as st:
            cfg = RunConfig(
                benchmark="demo",
                model="scripted/m",
                options=RunOptions(protocol=proto),
                provider_options={"script": script},
            )
            results[proto] = asyncio.run(run(st, cfg)).result
    ref, ours = results["reference"], results["grandrounds"]
    right = sum(
        1 for s in DemoExam().load() if s.target == "B" and "insulin" not in s.metadata["question"]
    )
    assert (
        ref.n == 12
        and ref.score == pytest.approx(right / 12)
        and ref.extra["n_unscored_counted_wrong"] == 1
    )
    assert ours.n == 11 and ours.n_unscored == 1 and ours.score == pytest.approx(right / 11)
    assert ref.extra["other_protocol"]["score"] == pytest.approx(ours.score)
    assert ours.extra["other_protocol"]["score"] == pytest.approx(ref.score)


# ---- PubMedQA: evaluation.py ------------------------------------------------------------------------

YNM_REPLIES = {
    "yes": ("The answer is yes.", "A", "Answer: yes", "**yes**"),
    "no": ("No.", "B", "Answer: B", "The answer is no, since the trial was negative."),
    "maybe": ("maybe", "C", "Answer: maybe", "The evidence is mixed.\nAnswer: C"),
}


def _official_pubmedqa(
    tmp_path: Path, monkeypatch, truth_file: Path, predictions: dict[str, str]
) -> tuple[float, float]:
    """Accuracy and macro-F1 as evaluation.py computes them, its statements executed on a predictions file."""
    pytest.importorskip("sklearn", reason="evaluation.py scores with scikit-learn")
    work = tmp_path / "eval"
    (work / "data").mkdir(parents=True)
    shutil.copy(truth_file, work / "data" / "test_ground_truth.json")
    (work / "pred.json").write_text(json.dumps(predictions), encoding="utf-8")
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, "argv", ["evaluation.py", "pred.json"])
    ns = load_official(
        "pubmedqa/evaluation.py",
        ["pred_path", "ground_truth", "predictions", "pmids", "truth", "preds", "acc", "maf"],
    )
    assert set(ns.ground_truth) == set(ns.predictions), "evaluation.py's own assertion"
    return float(ns.acc), float(ns.maf)


@pytest.mark.parametrize("scenario", ["random", "unreadable-and-failed", "all-yes"])
def test_pubmedqa_reference_figures_equal_evaluation_py(
    shared_data, tmp_path, monkeypatch, scenario
):
    folder = shared_data("pubmedqa", "ori_pqal.json").parent
    truth_file = shared_data("pubmedqa", "test_ground_truth.json")
    bench = PubMedQA()
    samples = bench.load(folder)
    rng = random.Random(f"pubmedqa-{scenario}")
    pairs, failed, predictions = [], set(), {}
    for s in samples:
        roll = rng.random()
        if scenario == "unreadable-and-failed" and roll < 0.05:
            failed.add(s.id)
            predictions[s.id] = ""
            continue
        if scenario == "unreadable-and-failed" and roll < 0.15:
            pairs.append((s, Response(key="k", text="The abstract does not settle it either way.")))
            predictions[s.id] = ""
            continue
        label = (
            "yes"
            if scenario == "all-yes"
            else (s.metadata["label"] if roll < 0.6 else rng.choice(["yes", "no", "maybe"]))
        )
        pairs.append((s, Response(key="k", text=rng.choice(YNM_REPLIES[label]))))
        predictions[s.id] = label
    assert len(predictions) == 500
    acc, maf = _official_pubmedqa(tmp_path, monkeypatch, truth_file, predictions)
    by_id = {}
    for proto in ("reference", "grandrounds"):
        graded = _grade_all(bench.grader(RunOptions(protocol=proto)), pairs)
        grades = {g.sample_id: g for g in graded} | {
            sid: Grade(sample_id=sid, value=None, status="answer_failed", error="HTTP 500")
            for sid in failed
        }
        by_id[proto] = [grades[s.id] for s in samples]
        for s, g in zip(
            samples, by_id[proto]
        ):  # our reading gives the prediction written to the file
            assert (s.choices.get(g.details.get("extracted_original") or "") or "") == predictions[
                s.id
            ], s.id
    ref = bench.aggregate(samples, by_id["reference"], RunOptions())
    assert ref.score == pytest.approx(acc, abs=1e-12) and ref.n == 500
    assert ref.extra["macro_f1"] == pytest.approx(maf, abs=1e-12)
    ours = bench.aggregate(samples, by_id["grandrounds"], RunOptions(protocol="grandrounds"))
    assert ours.extra["other_protocol"]["score"] == pytest.approx(acc, abs=1e-12)
    assert ours.extra["other_protocol"]["macro_f1"] == pytest.approx(maf, abs=1e-12)
    assert ref.extra["other_protocol"]["score"] == pytest.approx(ours.score)
    if scenario == "unreadable-and-failed":
        assert ours.n == 500 - len(failed) and ours.extra["macro_f1"] != pytest.approx(maf)


def test_official_macro_f1_counts_a_non_label_prediction_as_a_class():
    sklearn = pytest.importorskip("sklearn.metrics")
    truth = ["yes", "no", "maybe", "yes", "no"]
    for pred in (
        ["yes", "no", "maybe", "yes", "no"],
        ["yes", "", "maybe", "no", ""],
        ["", "", "", "", ""],
    ):
        assert official_macro_f1(truth, pred) == pytest.approx(
            sklearn.f1_score(truth, pred, average="macro"), abs=1e-12
        )


# ---- CMB: match_choice, extract_ans and score.py -------------------------------------------------

CMB_SINGLE = [
    ("stated", "答案是{K}。"),
    ("bare", "{K}"),
    ("correct option", "正确选项为{K}"),
    ("stated wrong", "答案：{W}，因为{K}不对"),
    ("chose", "根据题干，选{K}。"),
    ("letter and text", "{K}. 选项{K}{id}"),
    ("letters before the cue", "DNA检测提示……答案是{K}"),
    ("abbreviation, no cue", "ECG提示房颤，故选{K}"),
    ("unsure", "我不确定"),
    ("full-width", "答案是{KW}"),
    ("should be", "答案应该是{K}"),
    ("english", "The answer is {K}."),
    ("next line", "答案：\n{K}"),
    ("two letters", "答案是{K}和{W}"),
    ("reasoning trace", "<think>答案是{W}</think>答案是{K}"),
]
CMB_MULTI = [
    ("stated", "答案：{K}"),
    ("reversed", "答案：{R}"),
    ("separated", "答案是{S}。"),
    ("bare", "{K}"),
    ("with text", "正确选项为{K}，其余错误。"),
    ("unsure", "不知道"),
]


def _cmb_question(rec: dict) -> dict:
    n = max(5, max("ABCDEFG".index(ch) for ch in rec["answer"]) + 1)
    opts = {ch: f"选项{ch}{rec['id']}" for ch in "ABCDEFG"[:n]}
    return {
        "id": rec["id"],
        "exam_type": rec["exam_type"],
        "exam_class": rec["exam_class"],
        "exam_subject": rec["exam_subject"],
        "question": f"第{rec['id']}题",
        "question_type": rec["question_type"],
        "option": opts,
    }


def _cmb_reply(rec: dict, i: int) -> tuple[str, str]:
    key = rec["answer"]
    wrong = next(ch for ch in "ABCDEFG" if ch not in key)
    shapes = CMB_MULTI if rec["question_type"] == "多项选择题" else CMB_SINGLE
    shape, template = shapes[i % len(shapes)]
    return shape, template.format(
        K=key,
        W=wrong,
        R=key[::-1],
        S="、".join(key),
        id=rec["id"],
        KW="".join(chr(ord(c) + 0xFEE0) for c in key),
    )


def test_cmb_reference_equals_match_choice_and_score_py(shared_data, tmp_path, monkeypatch, capsys):
    key_file = shared_data("cmb", "CMB-test-choice-answer.json")
    key = json.loads(key_file.read_text(encoding="utf-8"))
    folder = tmp_path / "cmb"
    folder.mkdir()
    shutil.copy(key_file, folder / key_file.name)
    (folder / "CMB-test-choice-question-merge.json").write_text(
        json.dumps([_cmb_question(r) for r in key], ensure_ascii=False), encoding="utf-8"
    )
    bench = CMB()
    samples = bench.load(folder)
    by_id = {s.id: s for s in samples}
    replies = {str(r["id"]): _cmb_reply(r, i) for i, r in enumerate(key)}

    # official: match_choice + extract_ans over an answers file, then score.py on its output
    utils = load_official("cmb/src/utils.py", ["match_choice", "extract_ans"])
    answers = tmp_path / "answers.jsonl"
    answers.write_text(
        "".join(
            json.dumps(
                {
                    "id": r["id"],
                    "question_type": r["question_type"],
                    "answer_0": replies[str(r["id"])][1],
                },
                ensure_ascii=False,
            )
            + "\n"
            for r in key
        ),
        encoding="utf-8",
    )
    utils.extract_ans(1, str(answers), True)
    model_answers = {
        str(d["id"]): d["model_answer"] for d in json.loads(answers.read_text(encoding="utf-8"))
    }
    out = tmp_path / "accuracy.json"
    paths = {
        "/data/ground_truth/CMB-test-choice-answer.json": key_file,
        "model_answer.json": answers,
        "accuracy_results_structured.json": out,
    }
    score_py = reference_file("cmb", "score.py")
    with capsys.disabled():
        exec(
            compile(score_py.read_text(encoding="utf-8"), str(score_py), "exec"),  # noqa: S102  (paths redirected)
            {
                "__name__": "official:cmb/score.py",
                "open": lambda p, *a, **k: open(paths[p], *a, **k),
                "print": lambda *a: None,
            },
        )
    official = json.loads(out.read_text(encoding="utf-8"))

    grades = _grade_all(
        bench.grader(RunOptions()),
        [(by_id[sid], Response(key="k", text=t)) for sid, (_, t) in replies.items()],
    )
    agree = collections.Counter()
    for g in grades:
        s = by_id[g.sample_id]
        assert (
            cmb_letters(replies[g.sample_id][1], s.metadata["multi"]) == model_answers[g.sample_id]
        )
        assert (g.extracted or "") == model_answers[g.sample_id], replies[g.sample_id]
        assert g.value == (1.0 if model_answers[g.sample_id] == s.metadata["key"] else 0.0)
        agree[
            (replies[g.sample_id][0], s.metadata["multi"], g.details["other_value"] == g.value)
        ] += 1
    agg = bench.aggregate(samples, grades, RunOptions())
    assert agg.extra["accuracy_per_category"] == pytest.approx(
        official["accuracy_per_category"], abs=1e-12
    )
    for etype, classes in official["accuracy_per_subcategory"].items():
        assert agg.extra["accuracy_per_subcategory"][etype] == pytest.approx(classes, abs=1e-12)
    per_type = list(official["accuracy_per_category"].values())
    assert agg.score == pytest.approx(sum(per_type) / len(per_type), abs=1e-12) and agg.n == 11200
    with capsys.disabled():
        n_same = sum(v for (_, _, same), v in agree.items() if same)
        print(f"\nCMB ours vs official, item values: {n_same}/{len(grades)} agree")
        for (shape, multi, same), v in sorted(agree.items()):
            if not same:
                print(f"  {'multi' if multi else 'single'} / {shape}: {v} differ")


def test_cmb_reference_grading_examples():
    bench = CMB()
    multi = bench.make_sample(
        "9",
        "下列哪些…",
        dict(zip("ABCDE", ["甲甲", "乙乙", "丙丙", "丁丁", "戊戊"])),
        "BE",
        multi=True,
        exam_type="医师考试",
        exam_class="执业医师",
        question_type="多项选择题",
        key="EB",
    )
    single = bench.make_sample(
        "8",
        "下列哪项…",
        dict(zip("ABCDE", ["甲甲", "乙乙", "丙丙", "丁丁", "戊"])),
        "B",
        exam_type="医师考试",
        exam_class="执业医师",
        question_type="单项选择题",
        key="B",
    )
    ref, ours = bench.grader(RunOptions()), bench.grader(RunOptions(protocol="grandrounds"))

    def both(s, text):
        [r], [o] = (
            _grade_all(ref, [(s, Response(key="k", text=text))]),
            _grade_all(ours, [(s, Response(key="k", text=text))]),
        )
        return (r.extracted, r.value), (o.extracted, o.value)

    assert both(multi, "答案：BE") == (
        ("BE", 0.0),
        ("BE", 1.0),
    )  # score.py compares with "EB" as written
    assert both(multi, "答案：EB") == (("EB", 1.0), ("BE", 1.0))
    assert both(single, "答案是B和C") == (
        ("B", 1.0),
        (None, 0.0),
    )  # official keeps the first letter
    assert both(single, "ECG提示，选B") == (
        ("E", 0.0),
        ("B", 1.0),
    )  # official: every A-G when no 答案 cue
    prompt = bench.prompt(single, RunOptions()).messages[0].content
    assert prompt.endswith(
        "下列哪项…\nA. 甲甲\nB. 乙乙\nC. 丙丙\nD. 丁丁"
    )  # "戊" (one character) is left out, as upstream


# ---- letter-loglik: lm-evaluation-harness's request ------------------------------------------------


def _lm_eval_choices(task_yaml: str) -> tuple[list[str], Any]:
    import yaml

    class _Loader(yaml.SafeLoader):
        pass

    _Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    data = yaml.load(
        reference_file("lm-eval", *task_yaml.split("/")).read_text(encoding="utf-8"), Loader=_Loader
    )  # noqa: S506
    assert (
        "target_delimiter" not in data and "description" not in data
    )  # lm-eval's defaults: " " and none
    return data["doc_to_choice"], data.get("doc_to_text")


def _check(bench, samples: Sequence[Sample], doc_to_text, doc_of, choices: list[str]) -> int:
    for s in samples:
        context, conts = bench.letter_loglik_request(s)
        assert context == doc_to_text(doc_of(s)), s.id
        assert conts == tuple(" " + c for c in choices)
        p = bench.prompt(s, RunOptions(answer_mode="letter-loglik"))
        assert (
            p.kind == "loglikelihood"
            and [m.content for m in p.messages] == [context]
            and p.continuations == conts
        )
    return len(samples)


def test_letter_loglik_medqa_equals_lm_eval(shared_data):
    fn = load_official(
        "lm-eval/lm_eval/tasks/medqa/preprocess_medqa.py", ["doc_to_text"]
    ).doc_to_text
    choices, _ = _lm_eval_choices("lm_eval/tasks/medqa/medqa.yaml")
    samples = MedQA().load(shared_data("medqa", "phrases_no_exclude_test.jsonl"))
    doc = lambda s: {
        "sent1": s.metadata["question"],
        **{f"ending{i}": s.choices[k] for i, k in enumerate("ABCD")},
    }  # noqa: E731
    assert _check(MedQA(), samples, fn, doc, choices) == 1273
    assert (
        _check(DemoExam(), DemoExam().load(), fn, doc, choices) == 12
    )  # the demo uses MedQA's task


def test_letter_loglik_medmcqa_equals_lm_eval(shared_data):
    fn = load_official(
        "lm-eval/lm_eval/tasks/medmcqa/utils_medmcqa.py", ["doc_to_text"]
    ).doc_to_text
    choices, _ = _lm_eval_choices("lm_eval/tasks/medmcqa/medmcqa.yaml")
    samples = MedMCQA().load(shared_data("medmcqa", "dev.json"))
    doc = lambda s: {
        "question": s.metadata["question"],
        **{f"op{k.lower()}": v for k, v in s.choices.items()},
    }  # noqa: E731
    assert _check(MedMCQA(), samples, fn, doc, choices) == 4183


def test_letter_loglik_pubmedqa_equals_lm_eval(shared_data):
    fn = load_official(
        "lm-eval/lm_eval/tasks/pubmedqa/preprocess_pubmedqa.py", ["doc_to_text"]
    ).doc_to_text
    choices, _ = _lm_eval_choices("lm_eval/tasks/pubmedqa/pubmedqa.yaml")
    assert choices == ["yes", "no", "maybe"]
    bench = PubMedQA()
    samples = bench.load(shared_data("pubmedqa", "ori_pqal.json").parent)
    doc = lambda s: {"CONTEXTS": s.metadata["contexts"], "QUESTION": s.metadata["pubmed_question"]}  # noqa: E731
    assert _check(bench, samples, fn, doc, choices) == 500
    # the grader maps " yes" / " no" / " maybe" back to the options
    [g] = _grade_all(
        bench.grader(RunOptions(answer_mode="letter-loglik")),
        [(samples[0], Response(key="k", scores={" yes": -3.0, " no": -1.0, " maybe": -2.0}))],
    )
    assert g.extracted == "B" and g.value == (1.0 if samples[0].target == "B" else 0.0)
    assert g.details["acc_norm"] == (
        1.0 if samples[0].target == "B" else 0.0
    )  # -1/2 beats -3/3 and -2/5 too


def test_letter_loglik_mmlu_equals_lm_eval_template(shared_data):
    from jinja2 import BaseLoader, Environment, StrictUndefined

    choices, template = _lm_eval_choices("lm_eval/tasks/mmlu/default/_default_template_yaml")
    env = Environment(
        loader=BaseLoader, undefined=StrictUndefined, keep_trailing_newline=True
    )  # as lm_eval.utils
    compiled = env.from_string(template)
    fn = lambda doc: compiled.render(**doc)  # noqa: E731
    bench = MMLUMedical()
    samples = bench.load(shared_data("mmlu-medical", "anatomy_test.csv").parent)
    doc = lambda s: {
        "question": s.metadata["question"],
        "choices": list(s.choices.values()),
        "answer": "ABCD".index(s.target),
    }  # noqa: E731
    assert _check(bench, samples, fn, doc, choices) == 1089


def test_letter_loglik_is_refused_where_lm_eval_has_no_task():
    from grandrounds.core.errors import ConfigError

    with pytest.raises(ConfigError, match="letter-loglik"):
        CMB().check_options(RunOptions(answer_mode="letter-loglik"))
    with pytest.raises(ConfigError, match="contexts"):
        PubMedQA(contexts=False).check_options(RunOptions(answer_mode="letter-loglik"))


def test_letter_loglik_run_sends_the_raw_context_without_a_system_message(tmp_path):
    seen: list[Request] = []

    def script(req: Request) -> dict[str, float]:
        seen.append(req)
        return {" A": -2.0, " B": -1.0, " C": -3.0, " D": -4.0}

    with Store(tmp_path / "s.db") as st:
        out = asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="demo",
                    model="scripted/lp",
                    options=RunOptions(answer_mode="letter-loglik"),
                    limit=4,
                    provider_options={"script": script},
                ),
            )
        )
    fn = load_official(
        "lm-eval/lm_eval/tasks/medqa/preprocess_medqa.py", ["doc_to_text"]
    ).doc_to_text
    contexts = {
        fn(
            {
                "sent1": s.metadata["question"],
                **{f"ending{i}": s.choices[k] for i, k in enumerate("ABCD")},
            }
        )
        for s in DemoExam().load()[:4]
    }
    assert {r.messages[0].content for r in seen} == contexts
    assert all(
        r.kind == "loglikelihood"
        and len(r.messages) == 1
        and r.continuations == (" A", " B", " C", " D")
        for r in seen
    )
    assert (
        out.result.fingerprint["answer_mode"] == "letter-loglik" and "acc_norm" in out.result.extra
    )
