"""kormedmcqa, cmexam, medconceptsqa: no copy of their data in ../shared, so each is tested on small
files written here in the dataset's published layout, run through the real CLI with a scripted model
whose accuracy is counted independently, fed bad input, and compared with the official or peer
code's reading on a reply corpus.

The reference protocols read upstream files at run time (lm-evaluation-harness, CMExam, Medmarks):
the tests take them from the shared reference folder; ``--protocol grandrounds`` runs need none."""

from __future__ import annotations

import ast
import csv
import io
import re
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.cmexam import EVALUATE as CMEXAM_EVALUATE
from grandrounds.benchmarks.cmexam import PROMPTS as CMEXAM_PROMPTS
from grandrounds.benchmarks.cmexam import CMExam
from grandrounds.benchmarks.kormedmcqa import TEMPLATE as KOR_TEMPLATE
from grandrounds.benchmarks.kormedmcqa import UTILS as KOR_UTILS
from grandrounds.benchmarks.kormedmcqa import KorMedMCQA
from grandrounds.benchmarks.medconceptsqa import ENV as MCQA_ENV
from grandrounds.benchmarks.medconceptsqa import MedConceptsQA
from grandrounds.benchmarks.medmarks import MEDMARKS_PROMPTS
from grandrounds.core.errors import DataError
from grandrounds.core.hashing import file_sha256
from grandrounds.graders.readings_peers import (
    KORMEDMCQA_STOPS,
    cmexam_choice,
    cut_at_stops,
    kormedmcqa_choice,
)
from tests.conftest import reference_file
from tests.exam_cli import cli_run
from tests.test_careqa_metamedqa_supergpqa_taiwan import write_parquet

UPSTREAM = (KOR_TEMPLATE, KOR_UTILS, CMEXAM_PROMPTS, CMEXAM_EVALUATE, MCQA_ENV, MEDMARKS_PROMPTS)


def upstream_bytes(f: Any) -> bytes:
    """The pinned upstream file ``f`` from the shared reference folder (skipped without it, failed in CI)."""
    return reference_file(f.folder, *f.path.split("/")).read_bytes()


@pytest.fixture()
def reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A reference folder holding the upstream files, copied from the shared reference folder."""
    root = tmp_path / "ref"
    for f in UPSTREAM:
        dest = root / f.folder / f.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(upstream_bytes(f))
        assert file_sha256(dest) == f.sha256, f.path
    monkeypatch.setenv("GRANDROUNDS_REFERENCE", str(root))
    return root


def load_official(source: str, names: Sequence[str]) -> SimpleNamespace:
    """``names`` (top-level functions and constants) of an official file, executed after its importable imports."""
    tree = ast.parse(source)
    ns: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            try:
                exec(compile(ast.Module([node], []), "official", "exec"), ns)  # noqa: S102
            except Exception:
                continue
    for node in tree.body:
        name = (
            node.name
            if isinstance(node, (ast.FunctionDef, ast.ClassDef))
            else (
                node.targets[0].id
                if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
                else None
            )
        )
        if name in names:
            exec(compile(ast.Module([node], []), "official", "exec"), ns)  # noqa: S102
    return SimpleNamespace(**{n: ns[n] for n in names})


# ---- files in the published layouts ---------------------------------------------------------------


def kor_rows(exam: str) -> list[dict]:
    def row(i: int, q: str, answer: int, year: int = 2023) -> dict:
        return {
            "subject": exam,
            "year": year,
            "period": 1,
            "q_number": i,
            "question": q,
            **{k: f"{exam} 선택지 {k}{i}" for k in "ABCDE"},
            "answer": answer,
            "cot": "",
        }

    return [
        row(1, f"{exam}: 다음 중 옳은 것은? ", 2),
        row(2, f"{exam}: 가장 적절한 처치는?", 1, 2022),
        row(3, f"{exam}: 원인균은?", 5),
    ]


def write_kor(root: Path, rows: dict[str, list[dict]] | None = None) -> Path:
    for exam in ("doctor", "nurse", "pharm", "dentist"):
        (root / exam).mkdir(parents=True, exist_ok=True)
        write_parquet(
            root / exam / "test-00000-of-00001.parquet", (rows or {}).get(exam, kor_rows(exam))
        )
    return root


CMEXAM_HEADER = [
    "Question",
    "Options",
    "Answer",
    "Explanation",
    "Disease Group",
    "Area of Competency",
    "Clinical Department",
    "Medical Discipline",
    "Difficulty level",
]
CMEXAM_ROWS = [
    [
        "急性心肌梗死最早升高的血清标志物是",
        "A 肌红蛋白\nB 肌钙蛋白I\nC 肌酸激酶同工酶\nD 乳酸脱氢酶\nE 天门冬氨酸氨基转移酶",
        "A",
        "肌红蛋白最早。",
        "循环系统疾病",
        "疾病诊断和鉴别诊断",
        "内科",
        "临床医学",
        "1.0",
    ],
    [
        "关于高血压的治疗，正确的有",
        "A 限盐\nB 戒烟\nC 大量饮酒\nD 长期熬夜\nE 暴饮暴食",
        "AB",
        "生活方式干预。",
        "循环系统疾病",
        "疾病治疗",
        "内科",
        "临床医学",
        "3.0",
    ],
    [
        "胰岛素由哪种细胞分泌",
        "A α细胞\nB β细胞\nC δ细胞\nD PP细胞\nE 腺泡细胞",
        "B",
        "",
        "内分泌、营养或代谢疾病",
        "医学基础知识",
        "内科",
        "临床医学",
        "2.0",
    ],
    [
        "无答案的题目",
        "A 甲\nB 乙\nC 丙\nD 丁\nE 戊",
        "",
        "",
        "不符合",
        "不符合",
        "不符合",
        "临床医学",
        "",
    ],
    [
        "下列属于β受体阻滞剂的是",
        "A 卡托普利\nB 普萘洛尔\nC 呋塞米\nD 氨氯地平\nE 硝苯地平",
        "B",
        "",
        "循环系统疾病",
        "疾病治疗",
        "药学",
        "药学",
        "2.0",
    ],
]


def write_cmexam(path: Path, rows: list[list[str]] = CMEXAM_ROWS) -> Path:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(CMEXAM_HEADER)
    w.writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8")
    return path


def mcqa_rows(split: str) -> list[dict]:
    def row(i: int, code: str, answer: str, level: str = "easy") -> dict:
        return {
            "question_id": i,
            "answer": f"desc {answer}",
            "answer_id": answer,
            "option1": f"desc {code} one",
            "option2": f"desc {code} two",
            "option3": f"desc {code} three",
            "option4": f"desc {code} four",
            "question": f"What is the description of the medical code {code} in ICD10CM?\nA. desc {code} one\nB. desc {code} two",
            "vocab": "ICD10CM",
            "level": level,
        }

    if split == "dev":
        return [row(100 + i, f"D{i}", "ABCD"[i % 4]) for i in range(5)]
    return [row(1, "A01.1", "B"), row(2, "B02.2", "C"), row(3, "C03.3", "B"), row(4, "E11.9", "A")]


def write_mcqa(root: Path) -> Path:
    (root / "icd10cm_easy").mkdir(parents=True, exist_ok=True)
    write_parquet(root / "icd10cm_easy" / "test-00000-of-00001.parquet", mcqa_rows("test"))
    write_parquet(root / "icd10cm_easy" / "dev-00000-of-00001.parquet", mcqa_rows("dev"))
    return root


# ---- loading and prompts -------------------------------------------------------------------------------


def test_files_load_with_their_counts_keys_and_breakdown_labels(tmp_path: Path) -> None:
    kor = KorMedMCQA().load(write_kor(tmp_path / "kor"))
    assert (
        len(kor) == 12
        and [s.target for s in kor[:3]] == ["B", "A", "E"]
        and kor[0].id == "doctor-0"
    )
    assert {s.metadata["exam"] for s in kor} == {"doctor", "nurse", "pharm", "dentist"} and kor[
        1
    ].metadata["year"] == "2022"
    assert len(KorMedMCQA(exams=["nurse"]).load(tmp_path / "kor")) == 3
    one = KorMedMCQA().load(tmp_path / "kor" / "pharm" / "test-00000-of-00001.parquet")
    assert len(one) == 3 and one[0].metadata["exam"] == "pharm"

    cm = CMExam().load(write_cmexam(tmp_path / "test_with_annotations.csv"))
    assert [s.target for s in cm] == ["A", "AB", "B", "B"]  # the row with no Answer is skipped
    assert [s.metadata["multi"] for s in cm] == [False, True, False, False]
    assert (
        cm[0].metadata["difficulty"] == "1"
        and cm[3].metadata["department"] == "药学"
        and cm[1].choices["E"] == "暴饮暴食"
    )
    assert (
        "一个或多个" in cm[0].messages[0].content and "一个或多个" in cm[1].messages[0].content
    )  # the prompt never tells

    mc = MedConceptsQA().load(write_mcqa(tmp_path / "mcqa"))
    assert [s.target for s in mc] == ["B", "C", "B", "A"] and mc[0].metadata["question"].endswith(
        "in ICD10CM?"
    )
    assert len(mc[0].metadata["shots"]) == 4 and mc[0].metadata["level"] == "easy"
    assert MedConceptsQA(shots=0).load(tmp_path / "mcqa")[0].metadata["shots"] == []


def test_reference_prompts_are_the_upstream_texts(tmp_path: Path, reference: Path) -> None:
    kor = KorMedMCQA().load(write_kor(tmp_path / "kor"))[0]
    text = KorMedMCQA().prompt(kor, RunOptions()).messages[0].content
    q, c = kor.metadata["question"], kor.choices
    assert (
        text
        == f"{q.strip()}\nA. {c['A']}\nB. {c['B']}\nC. {c['C']}\nD. {c['D']}\nE. {c['E']}\n정답："
    )

    cm = CMExam().load(write_cmexam(tmp_path / "test_with_annotations.csv"))[1]
    text = CMExam().prompt(cm, RunOptions()).messages[0].content
    assert text == f"问题: {CMEXAM_ROWS[1][0]}, \n 选项: {CMEXAM_ROWS[1][1]}"

    mc = MedConceptsQA().load(write_mcqa(tmp_path / "mcqa"))[0]
    text = MedConceptsQA().prompt(mc, RunOptions()).messages[0].content
    shots = "".join(
        f"What is the description of the medical code D{i} in ICD10CM?\nA. desc D{i} one\nB. desc D{i} two\nC. desc D{i} three\n"
        f"D. desc D{i} four\nAnswer: <answer>{'ABCD'[i]}</answer>\n\n"
        for i in range(4)
    )
    item = "What is the description of the medical code A01.1 in ICD10CM?\nA. desc A01.1 one\nB. desc A01.1 two\nC. desc A01.1 three\nD. desc A01.1 four"
    assert (
        text
        == "Answer A, B, C, D according to the answer to this multiple choice question.\n"
        + shots
        + "\n"
        + item
        + "\nAnswer:"
    )


# ---- CLI runs counted independently ---------------------------------------------------------------------


def _bot(reply_for: Any, unreadable: str):
    def reply(req):
        prompt = req.messages[-1].content
        return "I cannot tell / 모르겠습니다 / 不确定" if unreadable in prompt else reply_for

    return reply


@pytest.mark.parametrize("protocol", ["reference", "grandrounds"])
def test_cli_runs_score_the_independent_count(
    tmp_path: Path, protocol: str, request: pytest.FixtureRequest
) -> None:
    if protocol == "reference":
        request.getfixturevalue("reference")
    kor_all = [r for e in ("doctor", "nurse", "pharm", "dentist") for r in kor_rows(e)]
    cm_rows = [r for r in CMEXAM_ROWS if r[2]]
    cases = {  # name: (--data, reply, the item given no answer, [(is the reply right?, the item's text)], family, labels)
        "kormedmcqa": (
            write_kor(tmp_path / "kor-data"),
            "B",
            "nurse: 원인균",
            [(r["answer"] == 2, r["question"]) for r in kor_all],
            "exam",
            {"doctor", "nurse", "pharm", "dentist"},
        ),
        "cmexam": (
            write_cmexam(tmp_path / "test_with_annotations.csv"),
            "答案：B",
            "胰岛素",
            [(r[2] == "B", r[0]) for r in cm_rows],
            "department",
            {"内科", "药学"},
        ),
        "medconceptsqa": (
            write_mcqa(tmp_path / "mcqa-data"),
            # reference: Medmarks' XML answer format, which its system prompt asks for
            "<answer>B</answer>" if protocol == "reference" else "Answer: B",
            "C03.3",
            [(r["answer_id"] == "B", r["question"]) for r in mcqa_rows("test")],
            "level",
            {"easy"},
        ),
    }
    for name, (data, answer, unreadable, items, family, labels) in cases.items():
        d = tmp_path / name
        d.mkdir()
        res = cli_run(d, name, data, _bot(answer, unreadable), "--protocol", protocol)
        correct = sum(1 for right, text in items if right and unreadable not in text)
        assert res["n"] == len(items), name
        assert res["score"] == pytest.approx(correct / len(items)), name
        assert res["extra"]["n_unextracted"] == 1, name
        assert set(res["breakdown"][family]) == labels, name
        print(name, protocol, res["score"], f"{correct}/{len(items)}")


# ---- bad input -------------------------------------------------------------------------------------------


def test_bad_records_are_one_line_errors(tmp_path: Path) -> None:
    rows = kor_rows("doctor")
    rows[1] = {**rows[1], "answer": 6}
    write_kor(tmp_path / "k", {"doctor": rows})
    with pytest.raises(
        DataError,
        match=r"doctor/test-00000-of-00001\.parquet.*row 2.*'answer' must name an option by its number 1 to 5, got 6",
    ) as e:
        KorMedMCQA().load(tmp_path / "k")
    assert "\n" not in str(e.value)
    (tmp_path / "k2" / "doctor").mkdir(parents=True)
    with pytest.raises(DataError, match=r"no test-\*\.parquet"):
        KorMedMCQA(exams=["doctor"]).load(tmp_path / "k2")
    write_kor(
        tmp_path / "k3",
        {"nurse": [{k: v for k, v in r.items() if k != "E"} for r in kor_rows("nurse")]},
    )
    with pytest.raises(DataError, match=r"nurse.*missing column.*E"):
        KorMedMCQA().load(tmp_path / "k3")

    bad = [list(CMEXAM_ROWS[0]), [*CMEXAM_ROWS[2][:2], "F", *CMEXAM_ROWS[2][3:]]]
    with pytest.raises(
        DataError, match=r"test_with_annotations\.csv.*line 7.*Answer 'F'"
    ):  # a row spans five lines (its Options cell)
        CMExam().load(write_cmexam(tmp_path / "test_with_annotations.csv", bad))
    bad = [[CMEXAM_ROWS[0][0], "A 甲\nC 丙", *CMEXAM_ROWS[0][2:]]]
    with pytest.raises(DataError, match=r"option line 'C 丙'"):
        CMExam().load(write_cmexam(tmp_path / "test_with_annotations.csv", bad))

    root = write_mcqa(tmp_path / "m")
    write_parquet(
        root / "icd10cm_easy" / "test-00000-of-00001.parquet",
        [{**mcqa_rows("test")[0], "answer_id": "E"}],
    )
    with pytest.raises(DataError, match=r"test-00000-of-00001\.parquet.*row 1.*answer_id 'E'"):
        MedConceptsQA().load(root)
    with pytest.raises(DataError, match="needs the dataset folder"):
        MedConceptsQA().load(root / "icd10cm_easy" / "test-00000-of-00001.parquet")


# ---- differential: our readings against the official code ------------------------------------------------

KOR_REPLIES = [
    "B",
    "정답: C",
    "정답：D",
    "정답은 A입니다.",
    "정답은 E 입니다",
    "e",
    "b. 폐렴",
    "A. 첫째\n\nB. 둘째",
    "답은 c입니다",
    "Q: 다음 문제",
    "I think (B) is right. Actually C.",
    "C와 D 중 D",
    "선택지 A, B 모두 오답이고 정답: E",
    "",
    "모르겠습니다",
    "</s>A",
    "A<|im_end|>B",
    "The answer is a",
    "정답 B.",
    "1번",
    "**정답: B**",
    "A\nB\nC",
    "ABCDE",
    "option d",
    "정답은 B입니다",
    "Answer: E.",
    "정답:\nD",
]


def test_kormedmcqa_reading_matches_lm_eval(reference: Path) -> None:
    official = load_official(
        upstream_bytes(KOR_UTILS).decode(), ["CHOICE_PATTERNS", "extract_choice"]
    )
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    until = yaml.load(upstream_bytes(KOR_TEMPLATE).decode(), Loader=Loader)["generation_kwargs"][
        "until"
    ]  # noqa: S506
    assert tuple(until) == KORMEDMCQA_STOPS
    agree = 0
    for reply in KOR_REPLIES:
        # lm-eval's chat path sends only stop[:4] (checked against the pinned _create_payload in
        # tests/test_reader_fidelity.py)
        theirs = official.extract_choice(cut_at_stops(reply, tuple(until)[:4])) or None
        ours = kormedmcqa_choice(reply)
        assert ours == theirs, reply
        agree += ours == theirs
    print(
        f"kormedmcqa: {agree}/{len(KOR_REPLIES)} replies read the same as lm-eval's ExtractChoiceFilter"
    )


CM_OPTIONS = "A 肌红蛋白\nB 肌钙蛋白I\nC 肌酸激酶 同工酶\nD 乳酸脱氢酶\nE 天门冬氨酸氨基转移酶"
CM_REPLIES = [
    "答案：A",
    "A",
    "答案: AB",
    "答案：B\n解释：肌钙蛋白特异性高。",
    "肌红蛋白",
    "我认为是肌钙蛋白I",
    "ACE",
    "答案：无\n解释：A和B都不对",
    "选C（肌酸激酶）",
    "",
    "不知道",
    "The answer is D",
    "答案：E。解释：...",
    "肌酸激酶 同工酶 与 乳酸脱氢酶",
    "a b c",
    "解释：略\n答案：B",
]


def test_cmexam_reading_matches_parse_options(reference: Path) -> None:
    official = load_official(upstream_bytes(CMEXAM_EVALUATE).decode(), ["parse_options"])
    choices = dict(line.split(" ", 1) for line in CM_OPTIONS.split("\n"))
    agree = 0
    for reply in [*CM_REPLIES, None]:
        theirs = official.parse_options({"model_result": reply, "选项": CM_OPTIONS})
        ours = cmexam_choice(reply, choices)
        assert (ours or "无答案") == theirs, reply
        agree += 1
    print(f"cmexam: {agree}/{len(CM_REPLIES) + 1} replies read the same as parse_options")


def test_readings_are_pure_functions_of_the_reply() -> None:
    assert (
        kormedmcqa_choice("정답은 B입니다. 왜냐하면 A는...") == "B"
        and kormedmcqa_choice("설명. 정답 C") is None
    )
    assert (
        cmexam_choice("答案：B", {"A": "甲", "B": "乙"}) == "B"
        and cmexam_choice("乙", {"A": "甲", "B": "乙"}) == "B"
    )
    assert re.fullmatch(r"[A-E]+", cmexam_choice("ABC", {k: k * 3 for k in "ABCDE"}) or "")
