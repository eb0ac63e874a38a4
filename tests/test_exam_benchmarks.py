"""Exam loaders on the real files in ../shared/data, their scoring variants, and bad input."""

from __future__ import annotations

import collections
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.cmb import CMB
from grandrounds.benchmarks.demo import DemoExam
from grandrounds.benchmarks.medmcqa import MedMCQA
from grandrounds.benchmarks.medqa import MedQA
from grandrounds.benchmarks.mmlu_medical import MMLUMedical
from grandrounds.benchmarks.pubmedqa import PubMedQA, macro_f1_fixed
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.hashing import file_sha256
from grandrounds.core.records import Cell, Grade
from grandrounds.core.registry import BENCHMARKS
from grandrounds.scoring.stats import wilson_ci


def test_registry_paths_resolve_to_these_classes():
    for name, cls in [
        ("demo", DemoExam),
        ("medqa", MedQA),
        ("medmcqa", MedMCQA),
        ("pubmedqa", PubMedQA),
        ("mmlu-medical", MMLUMedical),
        ("cmb", CMB),
    ]:
        assert BENCHMARKS.get(name) is cls and cls.name == name
        want = (
            ("generate", "text-loglik", "next-token")
            if cls is CMB
            else ("generate", "letter-loglik", "text-loglik", "next-token")
        )
        assert cls.answer_modes == want  # CMB has no lm-evaluation-harness task


def test_remote_hashes_match_the_local_copies(shared_data):
    pairs = [
        (MedQA, "medqa"),
        (MedMCQA, "medmcqa"),
        (PubMedQA, "pubmedqa"),
        (MMLUMedical, "mmlu-medical"),
        (CMB, "cmb"),
    ]
    for cls, folder in pairs:
        for rf in cls.remote_files:
            if rf.sha256 is None:  # CMB.zip: not in the local snapshot
                continue
            assert file_sha256(shared_data(folder, rf.filename)) == rf.sha256, rf.filename
            assert "raw.githubusercontent.com" in rf.url or "github.com" in rf.url


# ---- real files ---------------------------------------------------------------------------


def test_medqa_real_file(shared_data):
    path = shared_data("medqa", "phrases_no_exclude_test.jsonl")
    bench = MedQA()
    samples = bench.load(path.parent)
    assert len(samples) == 1273 and bench.load(path) == samples
    first = samples[0]
    assert (
        first.id == "0"
        and first.target == "B"
        and "carpal tunnel repair" in first.metadata["question"]
    )
    assert collections.Counter(s.target for s in samples) == {
        "A": 353,
        "B": 309,
        "C": 346,
        "D": 265,
    }
    assert collections.Counter(s.metadata["meta_info"] for s in samples) == {
        "step1": 679,
        "step2&3": 594,
    }
    assert [s.id for s in samples[:3]] == ["0", "1", "2"]
    assert bench.dataset_hash(path.parent) == bench.remote_files[0].sha256


def test_medmcqa_real_file(shared_data):
    path = shared_data("medmcqa", "dev.json")
    samples = MedMCQA().load(path)
    assert len(samples) == 4183
    assert collections.Counter(s.target for s in samples) == {
        "A": 1348,
        "B": 1085,
        "C": 925,
        "D": 825,
    }
    first = samples[0]
    assert first.id == "45258d3d-b974-44dd-a161-c3fccbdadd88" and first.target == "A"
    assert first.choices["A"].startswith("Impulse through myelinated fibers is slower")
    assert first.metadata["subject"] == "Physiology" and first.metadata["choice_type"] == "multi"
    assert collections.Counter(s.metadata["subject"] for s in samples)["Dental"] == 1318
    assert collections.Counter(s.metadata["choice_type"] for s in samples) == {
        "single": 2816,
        "multi": 1367,
    }
    assert not any(
        s.metadata["multi"] for s in samples
    )  # "multi" choice_type is still single-answer


def test_pubmedqa_real_files_test_and_all(shared_data):
    folder = shared_data("pubmedqa", "ori_pqal.json").parent
    shared_data("pubmedqa", "test_ground_truth.json")
    test = PubMedQA().load(folder)
    assert len(test) == 500
    assert collections.Counter(s.metadata["label"] for s in test) == {
        "yes": 276,
        "no": 169,
        "maybe": 55,
    }
    truth = json.loads((folder / "test_ground_truth.json").read_text())
    assert [s.id for s in test] == list(truth)
    assert all(s.choices == {"A": "yes", "B": "no", "C": "maybe"} for s in test)
    assert all(s.choices[s.target] == truth[s.id] for s in test)
    assert (
        test[0].metadata["question"].startswith("Context: ")
        and "\n\nQuestion: " in test[0].metadata["question"]
    )
    assert len(PubMedQA(split="all").load(folder)) == 1000
    assert (
        len(PubMedQA().load(folder / "ori_pqal.json")) == 500
    )  # ground truth found beside the file
    bare = PubMedQA(contexts=False).load(folder)[0]
    assert not bare.metadata["question"].startswith("Context")
    assert (
        len(PubMedQA().data_files(folder)) == 2
        and len(PubMedQA(split="all").data_files(folder)) == 1
    )
    with pytest.raises(ConfigError):
        PubMedQA(split="train")


def test_pubmedqa_macro_f1_from_grades(shared_data):
    folder = shared_data("pubmedqa", "ori_pqal.json").parent
    bench = PubMedQA()
    samples = bench.load(folder)
    # the model answers "yes" to everything: accuracy = 276/500, F1(yes) = 2*276/(2*276+224), others 0
    grades = [
        Grade(
            sample_id=s.id,
            value=1.0 if s.target == "A" else 0.0,
            extracted="A",
            details={"answer_mode": "generate", "extracted_original": "A"},
        )
        for s in samples
    ]
    agg = bench.aggregate(samples, grades, RunOptions(protocol="grandrounds"))
    assert agg.score == pytest.approx(276 / 500)
    assert agg.extra["macro_f1"] == pytest.approx((2 * 276 / (2 * 276 + 224)) / 3)
    assert agg.breakdown["label"]["yes"].score == 1.0 and agg.breakdown["label"]["no"].score == 0.0
    assert "note" not in agg.extra
    assert "note" in bench.aggregate(samples, grades[:10], RunOptions(protocol="grandrounds")).extra


def test_macro_f1_fixed_ignores_unreadable_as_a_class():
    truth = ["yes", "no", "maybe", "yes"]
    assert macro_f1_fixed(truth, ["yes", "no", "maybe", "yes"]) == 1.0
    # an unreadable answer is a miss for "yes" only
    assert macro_f1_fixed(truth, ["yes", "no", "maybe", None]) == pytest.approx((2 / 3 + 1 + 1) / 3)


MMLU_COUNTS = {
    "anatomy": 135,
    "clinical_knowledge": 265,
    "college_biology": 144,
    "college_medicine": 173,
    "medical_genetics": 100,
    "professional_medicine": 272,
}


def test_mmlu_real_files_with_subject_counts(shared_data):
    folder = shared_data("mmlu-medical", "anatomy_test.csv").parent
    bench = MMLUMedical()
    samples = bench.load(folder)
    assert len(samples) == 1089
    assert dict(collections.Counter(s.metadata["subject"] for s in samples)) == MMLU_COUNTS
    assert samples[0].id == "anatomy-0" and samples[0].target == "A"
    assert samples[0].choices["A"] == "paralysis of the facial muscles."
    assert not any(
        "\r" in s.metadata["question"] or any("\r" in c for c in s.choices.values())
        for s in samples
    )
    two = MMLUMedical(subjects="anatomy,medical_genetics")
    assert len(two.load(folder)) == 235 and two.spec().args == {
        "subjects": ["anatomy", "medical_genetics"]
    }
    assert len(MMLUMedical().load(folder / "medical_genetics_test.csv")) == 100
    with pytest.raises(ConfigError):
        MMLUMedical(subjects=["astronomy"])


def test_mmlu_micro_headline_and_macro_extra(shared_data):
    folder = shared_data("mmlu-medical", "anatomy_test.csv").parent
    bench = MMLUMedical(subjects=["anatomy", "medical_genetics"])
    samples = bench.load(folder)
    # all anatomy right (135), all genetics wrong (100): micro 135/235, macro 0.5
    grades = [
        Grade(
            sample_id=s.id,
            value=1.0 if s.metadata["subject"] == "anatomy" else 0.0,
            details={"answer_mode": "generate"},
        )
        for s in samples
    ]
    agg = bench.aggregate(samples, grades, RunOptions(protocol="grandrounds"))
    assert agg.score == pytest.approx(135 / 235)
    assert agg.extra["macro_accuracy"] == pytest.approx(0.5)
    assert agg.breakdown["subject"]["medical_genetics"] == Cell(
        score=0.0, n=100, n_unscored=0, ci95=wilson_ci(0, 100)
    )


def test_mmlu_crlf_inside_quoted_cells(tmp_path):
    path = tmp_path / "anatomy_test.csv"
    path.write_bytes(b'"Line one\r\nline two?",a,"b\r\nb",c,d,C\r\nQ2,w,x,y,z,A\r\n')
    samples = MMLUMedical(subjects=["anatomy"]).load(path)
    assert [s.metadata["question"] for s in samples] == ["Line one\nline two?", "Q2"]
    assert samples[0].choices["B"] == "b\nb" and samples[0].target == "C"


# ---- CMB ----------------------------------------------------------------------------------


def _cmb_key(shared_data) -> list[dict]:
    return json.loads(shared_data("cmb", "CMB-test-choice-answer.json").read_text(encoding="utf-8"))


def _question(rec: dict, n_options: int = 5) -> dict:
    opts = {ch: f"选项{ch}{rec['id']}" for ch in "ABCDEF"[:n_options]}
    if n_options < 6:
        opts["F"] = ""  # a blank trailing option, as some records carry
    return {
        "id": rec["id"],
        "exam_type": rec["exam_type"],
        "exam_class": rec["exam_class"],
        "exam_subject": rec["exam_subject"],
        "question": f"第{rec['id']}题题干",
        "question_type": rec["question_type"],
        "option": opts,
    }


def _cmb_dir(shared_data, tmp_path: Path, recs: list[dict]) -> Path:
    shutil.copy(
        shared_data("cmb", "CMB-test-choice-answer.json"), tmp_path / "CMB-test-choice-answer.json"
    )
    questions = [
        _question(r, 6 if len(r["answer"]) == 6 or "F" in r["answer"] else 5) for r in recs
    ]
    (tmp_path / "CMB-test-choice-question-merge.json").write_text(
        json.dumps(questions, ensure_ascii=False, indent=4).replace("\n", "\r\n"), encoding="utf-8"
    )
    return tmp_path


def test_cmb_answer_key_counts(shared_data):
    key = _cmb_key(shared_data)
    assert len(key) == 11200 and len({r["id"] for r in key}) == 11200
    assert collections.Counter(r["question_type"] for r in key) == {
        "单项选择题": 10010,
        "多项选择题": 1190,
    }


def test_cmb_joins_every_key_id(shared_data, tmp_path):
    key = _cmb_key(shared_data)
    folder = _cmb_dir(shared_data, tmp_path, key)
    samples = CMB().load(folder)
    assert len(samples) == 11200
    assert sum(s.metadata["multi"] for s in samples) == 1190
    by_id = {s.id: s for s in samples}
    assert (
        by_id["1"].target == "D" and by_id["5"].target == "ABCDE" and by_id["5"].metadata["multi"]
    )
    unsorted = next(r for r in key if r["answer"] == "EB")
    assert by_id[str(unsorted["id"])].target == "BE"
    assert "F" not in by_id["1"].choices  # blank trailing option dropped
    assert (
        by_id[str(unsorted["id"])].metadata["key"] == "EB"
    )  # as written, for score.py's exact comparison
    # the reference prompt is CMB's own (workers/base.py query_prompt_2), read at run time
    sent = CMB().prompt(by_id["1"], RunOptions()).messages[0].content
    assert sent.startswith(
        "以下是中国医师考试中规培结业考试的一道单项选择题，不需要做任何分析和解释，直接输出答案选项。\n第1题题干\nA. 选项A1"
    )


def test_cmb_scoring_official_macro_and_set_match(shared_data, tmp_path):
    key = _cmb_key(shared_data)
    # 3 questions of each of two classes in 医师考试 and one class of 护理考试
    pick = []
    for cls in ("规培结业", "执业医师", "护士执业资格"):
        pick += [r for r in key if r["exam_class"] == cls and r["question_type"] == "单项选择题"][
            :3
        ]
    multi = next(r for r in key if r["exam_class"] == "规培结业" and len(r["answer"]) >= 2)
    pick.append(multi)
    bench = CMB()
    samples = bench.load(_cmb_dir(shared_data, tmp_path, pick))
    ours = RunOptions(protocol="grandrounds")  # our set match and micro headline
    grader = bench.grader(ours)
    import asyncio

    from grandrounds.core.records import Response
    from grandrounds.graders.base import GradeContext

    def ask(s, text):
        return asyncio.run(grader.grade(s, Response(key="k", text=text), GradeContext()))

    replies = {}
    for s in samples:
        cls = s.metadata["exam_class"]
        if s.metadata["multi"]:
            replies[s.id] = "答案：" + "、".join(
                reversed(s.target)
            )  # letters in another order still match
        elif cls == "规培结业":
            replies[s.id] = s.target  # all right
        elif cls == "执业医师":
            replies[s.id] = "答案：" + s.target if s.id == samples[3].id else "我不确定"  # 1 of 3
        else:
            replies[s.id] = "ABCDE".replace(s.target, "")[0]  # all wrong
    grades = [ask(s, replies[s.id]) for s in samples]
    assert grades[-1].value == 1.0 and grades[-1].extracted == samples[-1].target
    agg = bench.aggregate(samples, grades, ours)
    assert agg.score == pytest.approx(5 / 10)  # micro over 10 questions: 4 + 1 + 0
    assert agg.extra["accuracy_per_subcategory"]["医师考试"] == {
        "规培结业": 1.0,
        "执业医师": pytest.approx(1 / 3),
    }
    assert agg.extra["accuracy_per_category"]["医师考试"] == pytest.approx((1.0 + 1 / 3) / 2)
    assert agg.extra["accuracy_per_category"]["护理考试"] == 0.0
    assert agg.breakdown["exam_type"]["医师考试"].metrics["official_macro"] == pytest.approx(
        (1.0 + 1 / 3) / 2
    )
    assert agg.extra["n_unextracted"] == 2


def test_cmb_letter_mode_generates_multi_answer_items(shared_data, tmp_path):
    key = _cmb_key(shared_data)
    pick = [key[0], next(r for r in key if r["question_type"] == "多项选择题")]
    bench = CMB()
    single, multi = bench.load(_cmb_dir(shared_data, tmp_path, pick))
    opts = RunOptions(answer_mode="next-token")
    assert bench.prompt(single, opts).kind == "next_token"
    assert bench.prompt(multi, opts).kind == "chat"


def test_cmb_questions_from_zip_and_missing_key(shared_data, tmp_path):
    key = _cmb_key(shared_data)
    folder = _cmb_dir(shared_data, tmp_path, key[:4])
    q = folder / "CMB-test-choice-question-merge.json"
    with zipfile.ZipFile(folder / "CMB.zip", "w") as zf:
        zf.write(q, "CMB-Exam/CMB-test/CMB-test-choice-question-merge.json")
    q.unlink()
    assert [s.id for s in CMB().load(folder)] == ["1", "2", "3", "4"]
    orphan = tmp_path / "orphan"
    orphan.mkdir()
    shutil.copy(folder / "CMB-test-choice-answer.json", orphan)
    stray = _question(key[0]) | {"id": 999999}
    (orphan / "CMB-test-choice-question-merge.json").write_text(
        json.dumps([stray]), encoding="utf-8"
    )
    with pytest.raises(DataError, match="id 999999"):
        CMB().load(orphan)
    (orphan / "CMB-test-choice-question-merge.json").unlink()
    with pytest.raises(DataError, match="no questions"):
        CMB().load(orphan)


# ---- demo ---------------------------------------------------------------------------------


def test_demo_exam_is_packaged_and_balanced():
    bench = DemoExam()
    path = DemoExam.default_path()
    assert path.is_file() and path.name == "demo_exam.jsonl"
    samples = bench.load(path)
    assert len(samples) == 12 and bench.load() == samples
    assert collections.Counter(s.target for s in samples) == {"A": 3, "B": 3, "C": 3, "D": 3}
    assert all(len(s.choices) == 4 for s in samples)
    assert bench.data_files(path) == [path] and len(bench.dataset_hash(path)) == 64


# ---- bad input ----------------------------------------------------------------------------

MEDQA_LINE = {
    "question": "Q?",
    "answer": "x",
    "options": {"A": "x", "B": "y", "C": "z", "D": "w"},
    "meta_info": "step1",
    "answer_idx": "A",
}


def _jsonl(path: Path, records: list, tail: str = "") -> Path:
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records) + tail, encoding="utf-8"
    )
    return path


def test_empty_file(tmp_path):
    empty = tmp_path / "phrases_no_exclude_test.jsonl"
    empty.write_text("")
    with pytest.raises(DataError, match="empty"):
        MedQA().load(empty)
    blank = tmp_path / "blank.jsonl"
    blank.write_text("\n\n")
    with pytest.raises(DataError, match="no records"):
        MedQA().load(blank)


def test_truncated_json_line_names_file_and_line(tmp_path):
    path = _jsonl(tmp_path / "broken.jsonl", [MEDQA_LINE, MEDQA_LINE], tail='{"question": "cut off')
    with pytest.raises(DataError) as e:
        MedQA().load(path)
    assert "broken.jsonl" in str(e.value) and "line 3" in str(e.value)
    dev = tmp_path / "dev.json"
    dev.write_text('{"question": "q", "cop": 1,\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"dev\.json, line 1"):
        MedMCQA().load(tmp_path)


def test_missing_fields_name_the_record(tmp_path):
    bad = dict(MEDQA_LINE)
    del bad["answer_idx"]
    with pytest.raises(DataError, match=r"line 2: missing field 'answer_idx'"):
        MedQA().load(_jsonl(tmp_path / "m.jsonl", [MEDQA_LINE, bad]))
    with pytest.raises(DataError, match="answer_idx 'E'"):
        MedQA().load(_jsonl(tmp_path / "e.jsonl", [MEDQA_LINE | {"answer_idx": "E"}]))
    row = {
        "question": "q",
        "exp": None,
        "cop": 0,
        "opa": "a",
        "opb": "b",
        "opc": "c",
        "opd": "d",
        "subject_name": "Anatomy",
        "topic_name": None,
        "id": "u1",
        "choice_type": "single",
    }
    with pytest.raises(DataError, match=r"'cop' must name an option by its number 1 to 4, got 0"):
        MedMCQA().load(_jsonl(tmp_path / "dev.json", [row]))
    with pytest.raises(DataError, match="missing field 'opd'"):
        MedMCQA().load(
            _jsonl(
                tmp_path / "dev.json", [{k: v for k, v in row.items() if k != "opd"} | {"cop": 1}]
            )
        )
    dup = row | {"cop": 2}
    with pytest.raises(DataError, match="duplicate id"):
        MedMCQA().load(_jsonl(tmp_path / "dev.json", [dup, dup]))
    csv_path = tmp_path / "anatomy_test.csv"
    csv_path.write_text("Q1,a,b,c,d,A\nQ2,a,b,c,B\n", encoding="utf-8")
    with pytest.raises(DataError, match="line 2: expected 6 columns"):
        MMLUMedical(subjects=["anatomy"]).load(csv_path)
    pq = tmp_path / "pq"
    pq.mkdir()
    (pq / "ori_pqal.json").write_text(
        json.dumps({"1": {"QUESTION": "q", "CONTEXTS": ["c"], "final_decision": "yes"}})
    )
    (pq / "test_ground_truth.json").write_text(json.dumps({"2": "yes"}))
    with pytest.raises(DataError, match="PMID 2"):
        PubMedQA().load(pq)


def test_gb18030_decodes_and_garbage_errors(tmp_path):
    rec = MEDQA_LINE | {
        "question": "患者，男性，11岁。此男孩可能患",
        "answer": "原发性肺结核",
        "options": {"A": "小叶型肺炎", "B": "原发性肺结核"},
        "answer_idx": "B",
    }
    path = tmp_path / "gb.jsonl"
    path.write_bytes((json.dumps(rec, ensure_ascii=False) + "\n").encode("gb18030"))
    [s] = MedQA().load(path)
    assert s.choices["B"] == "原发性肺结核" and s.metadata["question"].startswith("患者")
    junk = tmp_path / "junk.jsonl"
    junk.write_bytes(json.dumps(MEDQA_LINE).encode() + b"\n\xff\xfe\x80\x81\xfe\xff\n")
    with pytest.raises(DataError, match=r"junk\.jsonl, line 2: cannot decode"):
        MedQA().load(junk)


def test_jsonl_lines_end_at_newline_only(tmp_path):
    """U+2028 / U+0085 inside a JSON string do not split a record (str.splitlines would)."""
    from grandrounds.benchmarks.readers.lines import read_jsonl

    path = tmp_path / "x.jsonl"
    path.write_text('{"q": "one\u2028two\u0085three"}\r\n\n{"q": 2}\n', encoding="utf-8")
    assert read_jsonl(path) == [(1, {"q": "one\u2028two\u0085three"}), (3, {"q": 2})]
    path.write_text('{"q": 1}\n{"q": \n', encoding="utf-8")
    with pytest.raises(DataError) as err:
        read_jsonl(path)
    assert err.value.where == 2 and "invalid JSON" in err.value.problem


@pytest.mark.parametrize(
    "bench_name, filename",
    [
        ("medcalc-bench", "test_data.csv"),
        ("medec", "MEDEC-MS-TestSet-with-GroundTruth-and-ErrorType.csv"),
        ("medeqbench", "test.csv"),
    ],
)
def test_csv_benchmarks_name_the_missing_columns(tmp_path, bench_name, filename):
    path = tmp_path / filename
    path.write_text("id,question\n1,hello\n", encoding="utf-8")
    with pytest.raises(DataError) as err:
        BENCHMARKS.get(bench_name)().load(path)
    assert err.value.where == 1 and err.value.problem.startswith("missing columns: ")
    assert "question," not in err.value.problem  # only the absent ones are named
