"""C-Eval medical: the real val (and dev) CSVs, a scripted model through the CLI against the CSVs' own
keys, the ChatGPT evaluator's messages, and a differential test of its reading against the official code."""

from __future__ import annotations

import csv
import re
import string
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.ceval import SUBJECTS, CEvalMedical
from grandrounds.graders.readings_cn import ceval_choice
from tests.conftest import shared_file
from tests.exam_cli import cli_run, longest
from tests.official import load_official

COUNTS = {"basic_medicine": 19, "clinical_medicine": 22, "physician": 49, "veterinary_medicine": 23}


def root() -> Path:
    return shared_file("ceval-medical", "val", "physician_val.csv").parent.parent


def rows(subject: str, split: str = "val") -> list[dict[str, str]]:
    with open(root() / split / f"{subject}_{split}.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_real_files_load_the_source_notes_counts() -> None:
    samples = CEvalMedical().load(root())
    assert len(samples) == 113 == sum(COUNTS.values())
    for subject, n in COUNTS.items():
        assert sum(s.metadata["subject"] == subject for s in samples) == n == len(rows(subject))
    assert [s.target for s in samples] == [r["answer"] for sub in SUBJECTS for r in rows(sub)]
    assert "non-commercial" in CEvalMedical.description


def official_evaluator():
    base = load_official("ceval/code/evaluator_series/evaluators/evaluator.py", ["Evaluator"])
    chat = load_official(
        "ceval/code/evaluator_series/evaluators/chatgpt.py",
        ["ChatGPT_Evaluator"],
        {"Evaluator": base.Evaluator},
    )
    ev = chat.ChatGPT_Evaluator.__new__(chat.ChatGPT_Evaluator)
    ev.choices, ev.k, ev.puncs = ["A", "B", "C", "D"], 5, list(string.punctuation)
    return ev


@pytest.mark.parametrize("shots", [0, 5])
def test_reference_messages_equal_the_official_ones(shots: int) -> None:
    """The official eval_subject run on each question with a fake OpenAI client that records what it is sent."""
    import pandas as pd

    ev = official_evaluator()
    sent: list = []

    class ChatCompletion:
        @staticmethod
        def create(model, messages, temperature):
            sent.append(([dict(m) for m in messages], temperature))
            return {"choices": [{"message": {"content": "A"}}]}

    ev.__class__.eval_subject.__globals__.update(
        openai=type("openai", (), {"ChatCompletion": ChatCompletion}),
        tqdm=lambda it, total=None: it,
    )
    ev.model_name = "gpt-x"
    bench = CEvalMedical(shots=shots)
    same = total = 0
    for s in bench.load(root()):
        sub = s.metadata["subject"]
        row = pd.DataFrame([{"question": s.metadata["question"], **s.choices, "answer": s.target}])
        dev = pd.DataFrame(rows(sub, "dev"))
        ev.eval_subject(sub, row, dev if shots else None, few_shot=bool(shots))
        want, temperature = sent.pop()
        got = [
            {"role": m.role, "content": m.content}
            for m in bench.prompt(s, RunOptions(protocol="reference")).messages
        ]
        same += got == want
        total += 1
        assert temperature == bench.protocols["reference"].answer.temperature
    print(f"C-Eval ChatGPT messages ({shots}-shot): {same}/{total} identical")
    assert same == total


@pytest.mark.parametrize("protocol", ["reference", "grandrounds"])
def test_scripted_model_accuracy_through_the_cli(tmp_path: Path, protocol: str) -> None:
    def reply(req):
        prompt = req.messages[-1].content
        options = [m.group(1) for m in re.finditer(r"^[A-D]\. (.*)$", prompt, re.M)][-4:]
        return f"答案是{'ABCD'[longest(options)]}"

    res = cli_run(tmp_path, "ceval-medical", root(), reply, "--protocol", protocol)
    right = [
        longest([r[k] for k in "ABCD"]) == "ABCD".index(r["answer"])
        for sub in SUBJECTS
        for r in rows(sub)
    ]
    assert res["n"] == 113 and res["score"] == pytest.approx(sum(right) / 113)
    assert set(res["breakdown"]["subject"]) == set(SUBJECTS)
    print(f"ceval-medical {protocol}: {res['score']:.4f} = {sum(right)}/113 (independent count)")


CORPUS = [
    "A",
    "B.",
    " C ",
    "答案是B",
    "答案是 选项 C",
    "答案为D。",
    "我认为答案是A，但答案是C",
    "选B",
    "选项D",
    "答案：A",
    "答案: B",
    "正确的一项是C",
    "答案应该是：D",
    "这题选 A",
    "不确定",
    "",
    "The answer is B",
    "b",
    "答案：A或B",
    "所以答案为B，不是A。答案为：C",
    "**答案：B**",
    "答案选项B",
]


@pytest.mark.parametrize("few_shot", [False, True])
def test_reading_agrees_with_the_official_chatgpt_evaluator(few_shot: bool) -> None:
    ev = official_evaluator()
    agree = 0
    for reply in CORPUS:
        body = reply.strip()
        for key in "ABCD":  # the official verdict for each possible key, compared with ours
            if not body:
                want = False
            elif few_shot:
                want = ev.exact_match(body, key)
            else:
                found = ev.extract_ans(body)
                want = bool(found) and found[-1] == key
            assert (ceval_choice(reply, few_shot) == key) == want, (reply, key)
        agree += 1
    print(
        f"C-Eval reading ({'few' if few_shot else 'zero'}-shot): {agree}/{len(CORPUS)} replies scored alike for every key"
    )
