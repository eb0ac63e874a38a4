"""CMMLU medical: the real test (and dev) CSVs, a scripted model through the CLI against the CSVs'
own keys, the authors' prompt, and a differential test of extract_choice against the official one."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.cmmlu import SUBJECTS, CMMLUMedical
from grandrounds.core.errors import DataError
from grandrounds.graders.readings_cn import cmmlu_choice
from tests.conftest import shared_file
from tests.exam_cli import cli_run, longest
from tests.official import load_official

COUNTS = {
    "anatomy": 148,
    "clinical_knowledge": 237,
    "college_medicine": 273,
    "genetics": 176,
    "nutrition": 145,
    "traditional_chinese_medicine": 185,
    "virology": 169,
}


def root() -> Path:
    return shared_file("cmmlu-medical", "data", "test", "anatomy.csv").parent.parent


def rows(subject: str, split: str = "test") -> list[dict[str, str]]:
    with open(root() / split / f"{subject}.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_real_files_load_the_source_notes_counts() -> None:
    samples = CMMLUMedical().load(root())
    assert len(samples) == 1333 == sum(COUNTS.values())
    for subject, n in COUNTS.items():
        assert sum(s.metadata["subject"] == subject for s in samples) == n == len(rows(subject))
    assert [s.target for s in samples] == [r["Answer"] for sub in SUBJECTS for r in rows(sub)]
    assert "non-commercial" in CMMLUMedical.description


def test_reference_prompt_is_the_authors_gen_prompt() -> None:
    bench = CMMLUMedical(shots=5)
    s = bench.load(root())[0]
    dev = rows("anatomy", "dev")
    want = "以下是关于解剖学的单项选择题，请直接给出正确答案的选项。\n\n"
    for r in dev + [None]:
        q = r or {"Question": s.metadata["question"], **s.choices}
        want += "题目：" + q["Question"] + "".join(f"\n{k}. {q[k]}" for k in "ABCD") + "\n答案是："
        want += f"{r['Answer']}\n\n" if r else ""
    assert bench.prompt(s, RunOptions(protocol="reference")).messages[-1].content == want
    assert (
        bench.prompt(s, RunOptions(answer_mode="letter-loglik"))
        .messages[-1]
        .content.endswith("\n答案：")
    )


@pytest.mark.parametrize("protocol", ["reference", "grandrounds"])
def test_scripted_model_accuracy_through_the_cli(tmp_path: Path, protocol: str) -> None:
    first = rows("anatomy")[0]["Question"]

    def reply(req):
        prompt = req.messages[-1].content
        if first in prompt:
            return "我不知道。"  # nothing to read: wrong, and counted unextracted
        options = [m.group(1) for m in re.finditer(r"^[A-D]\. (.*)$", prompt, re.M)][-4:]
        return f"答案是{'ABCD'[longest(options)]}"

    res = cli_run(tmp_path, "cmmlu-medical", root(), reply, "--protocol", protocol)
    per_subject = {}
    for sub in SUBJECTS:
        got = [longest([r[k] for k in "ABCD"]) == "ABCD".index(r["Answer"]) for r in rows(sub)]
        if sub == "anatomy":
            got[0] = False
        per_subject[sub] = sum(got) / len(got)
    micro = sum(per_subject[s] * COUNTS[s] for s in SUBJECTS) / 1333
    macro = sum(per_subject.values()) / len(per_subject)
    assert res["score"] == pytest.approx(macro if protocol == "reference" else micro)
    assert res["extra"]["micro_accuracy"] == pytest.approx(micro) and res["extra"][
        "macro_accuracy"
    ] == pytest.approx(macro)
    assert {k: c["score"] for k, c in res["breakdown"]["subject"].items()} == pytest.approx(
        per_subject
    )
    assert res["extra"]["n_unextracted"] == 1
    print(
        f"cmmlu-medical {protocol}: {res['score']:.4f} (micro {micro:.4f}, macro {macro:.4f}; independent count agrees)"
    )


CORPUS = [
    "A",
    "B. 肋胸膜",
    "答案是C",
    "答案为：D",
    "答案是选项 B",
    "故选：A",
    "B选项正确",
    "正确的选项是 C",
    "答案应该是D",
    "选项 A 是正确的",
    "选择答案 B",
    "答案：C",
    "D符合题意",
    "答案选项：A",
    "答案为肺胸膜，即B",
    "A、B都不当选，C当选",
    "我认为A不对，B不对，C正确",
    "最终是：D",
    "不是A",
    "只能是B吧",
    "这道题很难。",
    "",
    "  B",
    "The answer is (C).",
    "解析：肺胸膜属于脏胸膜。\n\n答案是：B",
    "C和D都可能",
    "选B。",
    "答案：\nA",
    "**答案：D**",
    "AB",
    "A或者B",
    "以上都不对",
]


def test_extract_choice_agrees_with_the_official_one() -> None:
    official = load_official("cmmlu/src/mp_utils.py", ["extract_choice", "choices"])

    class Guess(Exception):
        pass

    class NoRandom:
        @staticmethod
        def randint(a, b):
            raise Guess

    official.extract_choice.__globals__["random"] = NoRandom
    agree = 0
    for reply in CORPUS:
        try:
            want = official.extract_choice(reply) if reply else None  # official: IndexError on ""
        except Guess:
            want = None  # the official code draws a random letter; ours leaves it unextracted
        got = cmmlu_choice(reply)
        agree += got == want
        assert got == want, reply
    print(f"CMMLU extract_choice: {agree}/{len(CORPUS)} replies read alike")


def test_bad_rows_are_one_line_errors(tmp_path: Path) -> None:
    folder = tmp_path / "test"
    folder.mkdir()
    (folder / "anatomy.csv").write_text(
        ",Question,A,B,C,D,Answer\n0,q,a,b,c,d,E\n", encoding="utf-8"
    )
    with pytest.raises(DataError, match=r"anatomy\.csv.*line 2.*'Answer' must be A, B, C or D"):
        CMMLUMedical(subjects="anatomy").load(tmp_path)
