"""HEAD-QA: the real files (ES and EN), a scripted model through the CLI scored against the files' own
keys with the exam's points, Medmarks' prompt byte for byte, lm-eval's request, the number reading, bad input."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.headqa import FILES, HeadQA
from grandrounds.core.errors import DataError
from grandrounds.graders.readings_cn import numbered_choice
from tests.conftest import shared_file
from tests.exam_cli import cli_run, longest
from tests.official import load_official

FOLDER = {"en": "HEAD_EN", "es": "HEAD"}


def published(lang: str) -> Path:
    return shared_file("head-qa", FOLDER[lang], FILES[lang].filename)


def questions(lang: str) -> list[tuple[str, dict, dict]]:
    """(exam key, exam, question) read with json alone."""
    doc = json.loads(published(lang).read_text(encoding="utf-8"))
    return [(k, e, q) for k, e in doc["exams"].items() for q in e["data"]]


@pytest.mark.parametrize("lang", ["en", "es"])
def test_real_file_loads_the_source_notes_count(lang: str) -> None:
    rows = questions(lang)
    samples = HeadQA(language=lang).load(shared_file("head-qa"))
    assert len(rows) == len(samples) == 2742  # SOURCE.md: 2,742 per language
    assert Counter(s.metadata["category"] for s in samples) == Counter(
        {
            "biology": 454,
            "nursery": 455,
            "pharmacology": 457,
            "medicine": 463,
            "psychology": 455,
            "chemistry": 458,
        }
    )
    assert sum(s.metadata["image"] == "yes" for s in samples) == 67
    assert len(HeadQA(language=lang, images="skip").load(shared_file("head-qa"))) == 2675
    for s, (k, e, q) in zip(samples, rows):
        assert s.id == f"{k}-{q['qid']}" and s.metadata["year"] == str(e["year"])
        assert s.choices[s.target] == q["answers"][int(q["ra"]) - 1]["atext"]
    assert HeadQA(language=lang).dataset_hash(shared_file("head-qa")) == FILES[lang].sha256


def test_spanish_and_english_align_one_to_one() -> None:
    es = HeadQA(language="es").load(shared_file("head-qa"))
    en = HeadQA(language="en").load(shared_file("head-qa"))
    assert [s.id for s in es] == [s.id for s in en] and [s.target for s in es] == [
        s.target for s in en
    ]


def numbered_options(prompt: str) -> list[str]:
    return [m.group(2) for m in re.finditer(r"^(\d+)\. (.*)$", prompt, re.M)][-4:]


@pytest.mark.parametrize("protocol", ["reference", "grandrounds"])
def test_scripted_model_accuracy_and_points_through_the_cli(tmp_path: Path, protocol: str) -> None:
    rows = questions("en")
    failing, unreadable = rows[0][2]["qtext"].strip(), rows[1][2]["qtext"].strip()

    def reply(req):
        prompt = req.messages[-1].content
        if failing in prompt:
            return RuntimeError("upstream 500")
        if unreadable in prompt:
            return "I cannot tell without the full exam."
        n = longest(numbered_options(prompt)) + 1
        if protocol == "reference":  # Medmarks' XML answer format, as its system prompt asks
            assert req.messages[0].role == "system" and "<answer>" in req.messages[0].content
            return f"Reasoning...\n<answer>{n}</answer>"
        return f"Reasoning...\nAnswer: {n}"

    res = cli_run(tmp_path, "head-qa", shared_file("head-qa"), reply, "--protocol", protocol)
    # Independently: the rule over each question's answers, against ra; the first two are a failed call and a blank.
    right = [longest([a["atext"] for a in q["answers"]]) + 1 == int(q["ra"]) for _, _, q in rows]
    answered = right[2:]
    if protocol == "reference":
        assert res["n"] == 2742 and res["score"] == pytest.approx(sum(answered) / 2742)
    else:
        assert res["n"] == 2741 and res["score"] == pytest.approx(sum(answered) / 2741)
    per_exam: dict[str, int] = {}
    for i, (k, _, _) in enumerate(rows):
        per_exam[k] = per_exam.get(k, 0) + (0 if i < 2 else 3 if right[i] else -1)
    assert res["extra"]["points_per_exam"] == per_exam and res["extra"]["points"] == sum(
        per_exam.values()
    )
    assert res["extra"]["n_blank"] == 2 and res["extra"]["n_unextracted"] == 1
    assert (
        res["breakdown"]["exam"]["Cuaderno_2016_1_B"]["metrics"]["points"]
        == per_exam["Cuaderno_2016_1_B"]
    )
    assert set(res["breakdown"]) >= {"category", "year", "exam", "image"}
    print(
        f"head-qa {protocol}: accuracy {res['score']:.4f}, points {res['extra']['points']} (independent count agrees)"
    )


def test_reference_prompt_is_medmarks_zero_shot_prompt_byte_for_byte() -> None:
    official = load_official("medmarks-envs/environments/head_qa/head_qa.py", ["zero_shot_prompt"])
    bench = HeadQA()
    rows = questions("en")
    samples = bench.load(shared_file("head-qa"))
    same = 0
    for s, (_, _, q) in zip(samples, rows):
        want = official.zero_shot_prompt(
            {"qtext": q["qtext"], "answers": q["answers"], "ra": int(q["ra"])}
        )["question"]
        got = bench.prompt(s, RunOptions(protocol="reference")).messages[-1].content
        same += got == want
    print(f"Medmarks head_qa prompt: {same}/{len(rows)} byte-identical")
    assert same == len(rows)


def test_letter_loglik_is_lm_eval_headqa_request() -> None:
    bench = HeadQA(language="es")
    s = bench.load(shared_file("head-qa"))[0]
    p = bench.prompt(s, RunOptions(answer_mode="letter-loglik"))
    assert p.messages[-1].content == f"Question: {s.metadata['question']}\nAnswer:"
    assert p.continuations == tuple(" " + t for t in s.choices.values())


def test_number_reading() -> None:
    ch = dict(zip("ABCD", ["w", "x", "y", "z"]))
    cases = {
        "2": "B",
        "Answer: 3": "C",
        "<answer>4</answer>": "D",
        "La respuesta correcta es la 1.": "A",
        "The answer is (1). Option 2 is incorrect.": "A",
        "Respuesta: 1": "A",
        "1. Fibronectin is right": "A",
        "Answer: 5": None,
        "I think 2 or 3": None,
        "**Answer:** (2)": "B",
        "Option 3 is best.\nAnswer: 4": "D",
        "": None,
        "\\boxed{2}": "B",
    }
    got = {t: numbered_choice(t, ch) for t in cases}
    assert got == cases


@pytest.mark.parametrize(
    "edit, problem",
    [
        (lambda d: d["exams"]["E"]["data"][0].update(ra="7"), "right answer 'ra'"),
        (
            lambda d: d["exams"]["E"]["data"][0]["answers"][1].update(aid=3),
            "answer ids must be 1..2",
        ),
        (lambda d: d["exams"]["E"].pop("category"), "missing field 'category'"),
    ],
)
def test_bad_records_are_one_line_errors_naming_file_and_record(
    tmp_path: Path, edit, problem
) -> None:
    doc = {
        "exams": {
            "E": {
                "name": "E",
                "category": "biology",
                "year": 2016,
                "data": [
                    {
                        "qid": "1",
                        "qtext": "q?",
                        "ra": "1",
                        "answers": [{"aid": 1, "atext": "a"}, {"aid": 2, "atext": "b"}],
                        "image": "",
                    }
                ],
            }
        }
    }
    edit(doc)
    path = tmp_path / "test_HEAD_EN.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(DataError, match=re.escape(problem)) as e:
        HeadQA().load(path)
    assert "test_HEAD_EN.json" in str(e.value) and "\n" not in str(e.value)
