"""careqa-mc, metamedqa, supergpqa-medicine, medqa-taiwan: no copy of their data in ../shared, so each is
tested on small files written here in the dataset's published layout (several records, its quirks),
run through the real CLI with a scripted model whose accuracy is counted independently, and fed bad input.

The reference protocols read Medmarks' environment files at run time: the tests take them from a
local snapshot of tmabraham/med-lm-envs when there is one (skipped otherwise); ``--protocol
grandrounds`` runs need no upstream file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.careqa import ENV as CAREQA_ENV
from grandrounds.benchmarks.careqa import CareQAMC
from grandrounds.benchmarks.medmarks import VERIFIERS_DATA_UTILS
from grandrounds.benchmarks.medqa_taiwan import MedQATaiwan
from grandrounds.benchmarks.metamedqa import ENV as METAMEDQA_ENV
from grandrounds.benchmarks.metamedqa import MetaMedQA
from grandrounds.benchmarks.supergpqa import ENV as SUPERGPQA_ENV
from grandrounds.benchmarks.supergpqa import SuperGPQAMedicine
from grandrounds.core.errors import DataError
from grandrounds.core.hashing import file_sha256
from tests.conftest import SHARED_REFERENCE, reference_file
from tests.exam_cli import cli_run
from tests.official import load_official

# ---- files in the published layouts ---------------------------------------------------------------

CAREQA = [
    {
        "exam_id": 1,
        "question": "Which vitamin deficiency causes scurvy?",
        "op1": "A",
        "op2": "C",
        "op3": "D",
        "op4": "K",
        "cop": 2,
        "year": 2020,
        "category": "medicine",
        "unique_id": "u1",
    },
    {
        "exam_id": 2,
        "question": "Normal adult resting heart rate (beats/min)?",
        "op1": "20-40",
        "op2": "60-100",
        "op3": "120-160",
        "op4": "180-200",
        "cop": 2,
        "year": 2021,
        "category": "nursing",
        "unique_id": "u2",
    },
    {
        "exam_id": 3,
        "question": "Enzima que fija CO₂ en el ciclo de Calvin：",
        "op1": "RuBisCO",
        "op2": "ATP sintasa",
        "op3": "Catalasa",
        "op4": "Amilasa",
        "cop": 1,
        "year": 2021,
        "category": "biology",
        "unique_id": "u3",
    },
    {
        "exam_id": 4,
        "question": "pH of pure water at 25 °C?",
        "op1": "5",
        "op2": "6",
        "op3": "7",
        "op4": "8",
        "cop": 3,
        "year": 2022,
        "category": "chemistry",
        "unique_id": "u4",
    },
    {
        "exam_id": 5,
        "question": "Drug class of atenolol?",
        "op1": "ACE inhibitor",
        "op2": "Beta blocker",
        "op3": "Diuretic",
        "op4": "Statin",
        "cop": 2,
        "year": 2022,
        "category": "pharmacology",
        "unique_id": "u5",
    },
]

TAIWAN = [
    {
        "question": "下列何者為胰島素的分泌細胞？",
        "options": {"A": "α細胞", "B": "β細胞", "C": "δ細胞", "D": "PP細胞"},
        "answer": "β細胞",
        "answer_idx": "B",
    },
    {
        "question": "成人正常血鈣濃度（mg/dL）約為：",
        "options": {"A": "4–5", "B": "8.5–10.5", "C": "12–14", "D": "15–17"},
        "answer_idx": "B",
    },
    {
        "question": "「心肌梗塞」最常見的早期血清標記為何？",
        "options": {"A": "肌鈣蛋白", "B": "澱粉酶", "C": "脂肪酶", "D": "膽紅素"},
        "answer": "肌鈣蛋白",
        "answer_idx": "A",
    },
    {
        "question": "下列哪一種藥物屬於β阻斷劑？",
        "options": {"A": "Captopril", "B": "Furosemide", "C": "Propranolol", "D": "Amlodipine"},
        "answer": "Propranolol",
        "answer_idx": "C",
    },
]


def supergpqa_rows() -> list[dict]:
    def row(uuid, discipline, field, sub, diff, options, letter):
        return {
            "uuid": uuid,
            "question": f"Question {uuid}?",
            "options": options,
            "answer": options["ABCDEFGHIJ".index(letter)],
            "answer_letter": letter,
            "discipline": discipline,
            "field": field,
            "subfield": sub,
            "difficulty": diff,
            "is_calculation": False,
        }

    ten = [f"option {i}" for i in range(10)]
    return [
        row("m1", "Medicine", "Clinical Medicine", "Internal Medicine", "easy", ten, "B"),
        row("e1", "Engineering", "Mechanics", "Solid Mechanics", "hard", ten, "B"),
        row("m2", "Medicine", "Pharmacy", "Pharmacology", "middle", ten, "D"),
        row(
            "m3",
            "Medicine",
            "Traditional Chinese Medicine",
            "中医学",
            "hard",
            ["气虚", "血虚（全角）", "阴虚", "阳虚"],
            "B",
        ),
        row("p1", "Philosophy", "Philosophy", "Ethics", "easy", ten[:4], "A"),
        row("m4", "Medicine", "Clinical Medicine", "Surgery", "hard", ten[:7], "G"),
        row("m5", "Medicine", "Basic Medicine", "Immunology", "easy", ten, "B"),
    ]


def metamedqa_rows() -> list[dict]:
    def opts(*texts):
        return {L: (texts[i] if i < len(texts) else None) for i, L in enumerate("ABCDEF")}

    return [
        {
            "question": "A 45-year-old man ... most likely diagnosis?",
            "options": opts("MI", "PE", "GERD", "Pneumonia", "I don't know", "None of the above"),
            "answer": "MI",
            "answer_idx": "A",
            "kind": "original",
            "meta_info": "step1",
            "metamap_phrases": "[]",
        },
        {
            "question": "A patient with fictional Glorbitis ... next step?",
            "options": opts("Rest", "Surgery", "Antibiotics", "I don't know"),
            "answer": "I don't know",
            "answer_idx": "D",
            "kind": "fictional",
            "meta_info": "step2&3",
            "metamap_phrases": "[]",
        },
        {
            "question": "Malformed question ... ?",
            "options": opts("X", "Y", "Z", "I don't know", "None of the above"),
            "answer": "None of the above",
            "answer_idx": "E",
            "kind": "malformed",
            "meta_info": "step1",
            "metamap_phrases": "[]",
        },
        {
            "question": "Which drug ... ?",
            "options": opts("Aspirin", "Heparin", "Warfarin", "Clopidogrel", "I don't know"),
            "answer": "Heparin",
            "answer_idx": "B",
            "kind": "original",
            "meta_info": "step1",
            "metamap_phrases": "[]",
        },
    ]


def write_parquet(path: Path, rows: list[dict]) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_json(path: Path, rows: list[dict]) -> Path:
    path.write_text(json.dumps(rows, ensure_ascii=False), encoding="utf-8")
    return path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text(
        "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8"
    )
    return path


@pytest.fixture()
def medmarks_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The reference folder holding the Medmarks environment files and the verifiers release's."""
    for f in (CAREQA_ENV, METAMEDQA_ENV, SUPERGPQA_ENV, VERIFIERS_DATA_UTILS):
        assert file_sha256(reference_file(f.folder, *f.path.split("/"))) == f.sha256
    monkeypatch.setenv("GRANDROUNDS_REFERENCE", str(SHARED_REFERENCE))
    return SHARED_REFERENCE


# ---- loading -----------------------------------------------------------------------------------------


def test_files_load_with_their_counts_keys_and_breakdown_labels(tmp_path: Path) -> None:
    (tmp_path / "CareQA_en.json").write_text(
        json.dumps(CAREQA, ensure_ascii=False), encoding="utf-8"
    )
    care = CareQAMC().load(tmp_path)
    assert [s.target for s in care] == ["B", "B", "A", "C", "B"] and [s.id for s in care] == [
        "u1",
        "u2",
        "u3",
        "u4",
        "u5",
    ]
    assert (
        care[2].metadata["category"] == "biology"
        and care[2].metadata["year"] == "2021"
        and care[2].choices["A"] == "RuBisCO"
    )
    write_jsonl(tmp_path / "CareQA_en.json", CAREQA)  # the same records as JSON Lines
    assert [s.target for s in CareQAMC().load(tmp_path)] == [s.target for s in care]

    tw = MedQATaiwan().load(write_jsonl(tmp_path / "test.jsonl", TAIWAN))
    assert [s.target for s in tw] == ["B", "B", "A", "C"] and tw[1].choices["B"] == "8.5–10.5"
    assert (
        "答案" in MedQATaiwan().prompt(tw[0], RunOptions()).messages[0].content
        and "β細胞" in tw[0].messages[0].content
    )

    sg = SuperGPQAMedicine().load(write_jsonl(tmp_path / "SuperGPQA-all.jsonl", supergpqa_rows()))
    assert [s.id for s in sg] == ["m1", "m2", "m3", "m4", "m5"] and [
        len(s.choices) for s in sg
    ] == [10, 10, 4, 7, 10]
    assert [s.target for s in sg] == ["B", "D", "B", "G", "B"] and sg[2].metadata[
        "subfield"
    ] == "中医学"

    mm = MetaMedQA().load(write_parquet(tmp_path / "test-00000-of-00001.parquet", metamedqa_rows()))
    assert [len(s.choices) for s in mm] == [6, 4, 5, 5] and [s.target for s in mm] == [
        "A",
        "D",
        "E",
        "B",
    ]
    assert [s.metadata["kind"] for s in mm] == ["original", "fictional", "malformed", "original"]


def test_reference_prompts_are_medmarks_texts(tmp_path: Path, medmarks_reference: Path) -> None:
    (tmp_path / "CareQA_en.json").write_text(json.dumps(CAREQA[:1]), encoding="utf-8")
    care = CareQAMC().load(tmp_path)[0]
    text = CareQAMC().prompt(care, RunOptions()).messages[0].content
    assert (
        text
        == "Question: Which vitamin deficiency causes scurvy?\nChoices:\nA. A\nB. C\nC. D\nD. K\nAnswer:"
    )
    mm = MetaMedQA().load(
        write_parquet(tmp_path / "test-00000-of-00001.parquet", metamedqa_rows())
    )[1]
    text = MetaMedQA().prompt(mm, RunOptions()).messages[0].content
    assert (
        text.startswith("You are a clinician.")
        and "Options:\nA. Rest\nB. Surgery\nC. Antibiotics\nD. I don't know\nE. None\nF. None\n\n"
        in text
    )  # the struct's empty letters printed as Medmarks prints them
    official = load_official("medmarks-envs/environments/metamedqa/metamedqa.py", ["_build_prompt"])
    row = metamedqa_rows()[1]
    assert text == official._build_prompt(row["question"], row["options"])
    assert text.endswith("(A, B, C, D, E, F).")
    sg = SuperGPQAMedicine().load(write_jsonl(tmp_path / "SuperGPQA-all.jsonl", supergpqa_rows()))[
        2
    ]
    text = SuperGPQAMedicine().prompt(sg, RunOptions()).messages[0].content
    assert "'Answer: \\boxed{$LETTER}'" in text and text.endswith(
        "Question m3?\nA) 气虚\nB) 血虚（全角）\nC) 阴虚\nD) 阳虚"
    )
    tw = MedQATaiwan().load(write_jsonl(tmp_path / "test.jsonl", TAIWAN))[
        0
    ]  # no peer prompt: ours under both
    assert MedQATaiwan().prompt(tw, RunOptions()) == MedQATaiwan().prompt(
        tw, RunOptions(protocol="grandrounds")
    )


# ---- CLI runs counted independently ---------------------------------------------------------------------


def _bot(unreadable: str, boxed: bool = False):
    """Always answers B (boxed or as an 'Answer:' line), except a reply with no letter to the item whose prompt holds ``unreadable``."""

    def reply(req):
        prompt = req.messages[-1].content
        if unreadable in prompt:  # no lone letter: Medmarks would read "I" as option I
            return "Cannot tell."
        return "Reasoning...\nAnswer: \\boxed{B}" if boxed else "Thinking it over.\nAnswer: B"

    return reply


@pytest.mark.parametrize("protocol", ["reference", "grandrounds"])
def test_cli_runs_score_the_independent_count(
    tmp_path: Path, protocol: str, request: pytest.FixtureRequest
) -> None:
    if protocol == "reference":
        request.getfixturevalue("medmarks_reference")
    cases = {  # name: (write the file and return --data, the items' records, the item given no letter, is B its key?, family)
        "careqa-mc": (
            lambda d: write_json(d / "CareQA_en.json", CAREQA),
            CAREQA,
            "Drug class of atenolol",
            lambda r: r["cop"] == 2,
            "category",
        ),
        "medqa-taiwan": (
            lambda d: write_jsonl(d / "test.jsonl", TAIWAN),
            TAIWAN,
            "血鈣",
            lambda r: r["answer_idx"] == "B",
            None,
        ),
        "supergpqa-medicine": (
            lambda d: write_jsonl(d / "SuperGPQA-all.jsonl", supergpqa_rows()),
            [r for r in supergpqa_rows() if r["discipline"] == "Medicine"],
            "Question m5?",
            lambda r: r["answer_letter"] == "B",
            "difficulty",
        ),
        "metamedqa": (
            lambda d: write_parquet(d / "test-00000-of-00001.parquet", metamedqa_rows()),
            metamedqa_rows(),
            "Malformed question",
            lambda r: r["answer_idx"] == "B",
            "kind",
        ),
    }
    for name, (write, rows, unreadable, is_b, family) in cases.items():
        d = tmp_path / name
        d.mkdir()
        res = cli_run(
            d,
            name,
            write(d),
            _bot(unreadable, boxed=name == "supergpqa-medicine"),
            "--protocol",
            protocol,
        )
        correct = [
            is_b(r) and unreadable not in r["question"] for r in rows
        ]  # the reply with no letter counts wrong in both
        assert res["n"] == len(rows), name
        assert res["score"] == pytest.approx(sum(correct) / len(rows)), name
        assert res["extra"]["n_unextracted"] == 1, name
        if family:
            assert set(res["breakdown"][family]) == {str(r[family]) for r in rows}, name
        print(name, protocol, res["score"], f"{sum(correct)}/{len(rows)}")


# ---- bad input: one-line errors naming the file and record ---------------------------------------------


def test_bad_records_are_one_line_errors(tmp_path: Path) -> None:
    bad = [dict(CAREQA[0]), {**CAREQA[1], "cop": 5}]
    (tmp_path / "CareQA_en.json").write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(
        DataError,
        match=r"CareQA_en\.json.*record 1.*'cop' must name an option by its number 1 to 4, got 5",
    ) as e:
        CareQAMC().load(tmp_path)
    assert "\n" not in str(e.value)
    write_jsonl(
        tmp_path / "CareQA_en.json", [CAREQA[0], {k: v for k, v in CAREQA[1].items() if k != "op3"}]
    )
    with pytest.raises(DataError, match=r"line 2.*missing field 'op3'"):
        CareQAMC().load(tmp_path)

    write_jsonl(tmp_path / "test.jsonl", [TAIWAN[0], {**TAIWAN[2], "answer_idx": "E"}])
    with pytest.raises(DataError, match=r"test\.jsonl.*line 2.*'E'"):
        MedQATaiwan().load(tmp_path / "test.jsonl")
    write_jsonl(tmp_path / "test.jsonl", [{k: v for k, v in TAIWAN[0].items() if k != "options"}])
    with pytest.raises(DataError, match=r"line 1.*missing field 'options'"):
        MedQATaiwan().load(tmp_path)

    rows = supergpqa_rows()
    rows[3] = {**rows[3], "answer_letter": "F"}  # four options
    write_jsonl(tmp_path / "SuperGPQA-all.jsonl", rows)
    with pytest.raises(DataError, match=r"SuperGPQA-all\.jsonl.*line 4.*answer_letter 'F'"):
        SuperGPQAMedicine().load(tmp_path)
    write_jsonl(
        tmp_path / "SuperGPQA-all.jsonl",
        [r for r in supergpqa_rows() if r["discipline"] != "Medicine"],
    )
    with pytest.raises(DataError, match="no question of the discipline 'Medicine'"):
        SuperGPQAMedicine().load(tmp_path)

    rows = metamedqa_rows()
    rows[2] = {**rows[2], "answer_idx": "F"}
    write_parquet(tmp_path / "test-00000-of-00001.parquet", rows)
    with pytest.raises(DataError, match=r"parquet.*row 3.*answer_idx 'F'"):
        MetaMedQA().load(tmp_path)
    write_parquet(
        tmp_path / "test-00000-of-00001.parquet",
        [{k: v for k, v in r.items() if k != "kind"} for r in metamedqa_rows()],
    )
    with pytest.raises(DataError, match="missing column.*kind"):
        MetaMedQA().load(tmp_path)
    (tmp_path / "test-00000-of-00001.parquet").write_text("not parquet", encoding="utf-8")
    with pytest.raises(DataError, match="not a readable Parquet file"):
        MetaMedQA().load(tmp_path)
