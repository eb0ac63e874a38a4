"""MedBench: question files as the platform hands them out, submission file, local scoring."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.medbench import MedBench, write_submission
from grandrounds.core.errors import DataError
from grandrounds.core.records import Response
from grandrounds.graders.base import GradeContext
from grandrounds.graders.choice_extract import mcq_letters
from tests.grading import grade_answer

STEM = "你是一名医疗安全领域专家，请完成下列医疗安全单选题，只需要输出最适合的选项字母，不要输出解释。\n## 问题\n医疗膳食的留样时间至少为：\n"
OPTION_ORDERS = (("72小时", "48小时", "24小时", "12小时"), ("48小时", "72小时", "12小时", "24小时"))


def _q(options: tuple[str, ...]) -> str:
    return STEM + "\n".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(options))


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text(
        "\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n", encoding="utf-8"
    )
    return path


@pytest.fixture
def v4_dir(tmp_path: Path) -> Path:
    """Two v4-style task files; MedSafety repeats id 4 with shuffled options, answers withheld."""
    d = tmp_path / "questions"
    d.mkdir()
    _write(
        d / "MedSafety_V4.jsonl",
        [
            {
                "question": _q(OPTION_ORDERS[0]),
                "answer": "",
                "other": {"id": 4, "source": "MedSafety_V4"},
            },
            {
                "question": _q(OPTION_ORDERS[1]),
                "answer": "",
                "other": {"id": 4, "source": "MedSafety_V4"},
            },
            {
                "question": _q(OPTION_ORDERS[0]),
                "answer": "",
                "other": {"id": 5, "source": "MedSafety_V4"},
            },
        ],
    )
    _write(
        d / "MedDiag_V4.jsonl",
        [
            {
                "question": "请根据病历给出诊断。\n患者男，65岁……",
                "answer": "",
                "other": {"id": 1, "source": "MedDiag_V4"},
                "img_path": ["imgs/1.png"],
            },
        ],
    )
    (d / "imgs").mkdir()
    _png(d / "imgs" / "1.png", (200, 10, 10))
    return d


def _png(path: Path, colour: tuple[int, int, int], size: tuple[int, int] = (32, 24)) -> Path:
    from PIL import Image

    Image.new("RGB", size, colour).save(path, "PNG")
    return path


def test_loads_every_row_including_repeated_ids(v4_dir):
    samples = MedBench().load(v4_dir)
    assert [s.id for s in samples] == [
        "MedDiag_V4/1/0",
        "MedSafety_V4/4/0",
        "MedSafety_V4/4/1",
        "MedSafety_V4/5/2",
    ]
    assert samples[1].messages[-1].content == _q(OPTION_ORDERS[0])
    assert samples[2].messages[-1].content.endswith("D. 24小时")
    assert all(s.target is None for s in samples)
    assert samples[0].metadata["has_images"] and samples[0].metadata["source"] == "MedDiag_V4"
    assert MedBench().data_files(v4_dir) == sorted(v4_dir.glob("*.jsonl"))


def test_withheld_answers_are_unscored(v4_dir):
    bench = MedBench()
    samples = bench.load(v4_dir)
    grader = bench.grader(RunOptions())
    grades = [
        asyncio.run(grader.grade(s, Response(key="k", text="A"), GradeContext())) for s in samples
    ]
    assert all(g.value is None and g.error == "answer withheld" for g in grades)
    agg = bench.aggregate(samples, grades, RunOptions())
    assert agg.score is None and agg.n_unscored == 4 and agg.extra["n_withheld"] == 4


def test_submission_has_the_same_lines_with_answers_filled(v4_dir, tmp_path):
    samples = MedBench().load(v4_dir)
    answers = {
        "MedSafety_V4/4/0": "<think>留样48小时</think>A",
        "MedSafety_V4/4/1": "B",
        "MedDiag_V4/1/0": "诊断：肺炎",
    }
    out = tmp_path / "submission"
    out.mkdir()
    report = write_submission(samples, answers, out)
    assert report["missing"] == ["MedSafety_V4/5/2"] and report["n_written"] == 3
    original = (v4_dir / "MedSafety_V4.jsonl").read_text(encoding="utf-8").splitlines()
    written = (out / "MedSafety_V4.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(written) == len(original) == 3
    for before, after, answer in zip(original, written, ["A", "B", ""]):
        b, a = json.loads(before), json.loads(after)
        assert a == {**b, "answer": answer}  # same question, same other, answer filled
    assert "医疗膳食" in written[0]  # Chinese kept as text, not \\u escapes
    diag = json.loads((out / "MedDiag_V4.jsonl").read_text(encoding="utf-8"))
    assert diag["img_path"] == ["imgs/1.png"] and diag["answer"] == "诊断：肺炎"
    single = tmp_path / "all.jsonl"
    write_submission(samples, answers, single)
    assert len(single.read_text(encoding="utf-8").splitlines()) == 4


def test_local_scoring_when_answers_are_present(tmp_path):
    path = _write(
        tmp_path / "MedExam_V4.jsonl",
        [
            {
                "question": _q(OPTION_ORDERS[0]),
                "answer": "A",
                "other": {"id": 1, "source": "MedExam_V4"},
            },
            {
                "question": _q(OPTION_ORDERS[1]),
                "answer": "B",
                "other": {"id": 1, "source": "MedExam_V4"},
            },
            {
                "question": "多选题……",
                "answer": "<A><C>",
                "other": {"id": 2, "source": "MedExam_V4"},
            },
            {"question": "多选题……", "answer": "ACD", "other": {"id": 3, "source": "MedExam_V4"}},
        ],
    )
    bench = MedBench()
    samples = bench.load(path)
    replies = ["答案是A", "A", "AC", "A、C"]
    grades = [
        asyncio.run(bench.grader(RunOptions()).grade(s, Response(key="k", text=r), GradeContext()))
        for s, r in zip(samples, replies)
    ]
    assert [g.value for g in grades] == [1.0, 0.0, 1.0, 0.0]
    assert grades[3].extracted == "AC"
    agg = bench.aggregate(samples, grades, RunOptions())
    assert agg.score == 0.5 and agg.n_unscored == 0 and agg.breakdown["source"]["MedExam_V4"].n == 4
    failed = grade_answer(bench.grader(RunOptions()), samples[0], Response(key="k", error="429"))
    assert failed.value is None and failed.status == "answer_failed" and "429" in failed.error


@pytest.mark.parametrize(
    "text, letters",
    [
        ("B", "B"),
        ("<B>", "B"),
        ("A、C、D", "ACD"),
        ("答案：ACD。", "ACD"),
        ("The answer is C.", "C"),
        ("<think>A</think>正确选项为 D", "D"),
        ("Answer: a drug", None),
        ("I think B is right but maybe not", None),
    ],
)
def test_mcq_letters(text, letters):
    assert mcq_letters(text) == letters


def test_malformed_lines_are_data_errors(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"question": "q", "answer": "", "other": {"id": 1, "source": "S"}}\n{"question": "q"\n',
        encoding="utf-8",
    )
    with pytest.raises(DataError, match="line 2: invalid JSON"):
        MedBench().load(path)
    path.write_text('{"question": "q", "answer": ""}\n', encoding="utf-8")
    with pytest.raises(DataError, match="line 1: each line needs 'other'"):
        MedBench().load(path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no \\*.jsonl"):
        MedBench().load(empty)


def test_submission_command_writes_a_runs_stored_answers(v4_dir, tmp_path):
    """run (loopback model) then `grandrounds submission`: the platform file holds the stored answers."""
    from typer.testing import CliRunner

    from grandrounds.cli.main import app
    from grandrounds.store import Store
    from grandrounds.testing import LoopbackServer, last_user_text

    def rule(body):
        return "A" if "72小时" in last_user_text(body).split("A. ")[-1][:5] else "诊断：肺炎"

    store = tmp_path / "s.db"
    with LoopbackServer(rule) as srv:
        r = CliRunner().invoke(
            app,
            [
                "run",
                "medbench",
                "--data",
                str(v4_dir),
                "--model",
                "openai/m",
                "--base-url",
                srv.base_url,
                "--store",
                str(store),
            ],
        )
        assert r.exit_code == 0, r.output
    with Store(store) as st:
        (run_rec,) = st.runs()
    out = tmp_path / "sub"
    out.mkdir()
    r = CliRunner().invoke(
        app, ["submission", "--run", run_rec.id, "--out", str(out), "--store", str(store)]
    )
    assert r.exit_code == 0, r.output
    written = [
        json.loads(x) for x in (out / "MedSafety_V4.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert [w["answer"] for w in written] == ["A", "诊断：肺炎", "A"]
    assert (
        json.loads((out / "MedDiag_V4.jsonl").read_text(encoding="utf-8"))["answer"] == "诊断：肺炎"
    )


def test_submission_is_refused_for_a_benchmark_scored_here(tmp_path):
    from typer.testing import CliRunner

    from grandrounds.cli.main import app

    store = tmp_path / "s.db"
    r = CliRunner().invoke(
        app, ["run", "demo", "--model", "scripted/a", "--limit", "2", "--store", str(store)]
    )
    assert r.exit_code == 0, r.output
    from grandrounds.store import Store

    with Store(store) as st:
        (run_rec,) = st.runs()
    r = CliRunner().invoke(
        app,
        [
            "submission",
            "--run",
            run_rec.id,
            "--out",
            str(tmp_path / "x.jsonl"),
            "--store",
            str(store),
        ],
    )
    assert r.exit_code != 0 and "demo has no submission format" in str(r.exception or r.output)


def test_agent_track_is_a_named_subset_with_its_submission(tmp_path):
    """--param track=agent keeps the Agent task sets (prompts, no tools) and writes their submission."""
    from typer.testing import CliRunner

    from grandrounds.cli.main import app

    d = tmp_path / "v4"
    d.mkdir()
    tool_prompt = (
        "API 描述：RequestICUBed（ICU床位申请）……用户问题：我是急诊科的李医生，请紧急申请ICU床位。"
    )
    _write(
        d / "MedCallAPI.jsonl",
        [
            {
                "question": tool_prompt,
                "answer": "",
                "other": {"id": 103, "source": "MedCallAPI_V4"},
            },
            {
                "question": tool_prompt + "（二）",
                "answer": "",
                "other": {"id": 104, "source": "MedCallAPI_V4"},
            },
        ],
    )
    _write(
        d / "MedShield.jsonl",
        [
            {
                "question": "请拒绝不安全的请求：……",
                "answer": "",
                "other": {"id": 7, "source": "MedShield_V4"},
            }
        ],
    )
    _write(
        d / "MedSafety_V4.jsonl",
        [
            {
                "question": _q(OPTION_ORDERS[0]),
                "answer": "",
                "other": {"id": 4, "source": "MedSafety_V4"},
            }
        ],
    )
    agent = MedBench(track="agent").load(d)
    assert [s.metadata["source"] for s in agent] == [
        "MedCallAPI_V4",
        "MedCallAPI_V4",
        "MedShield_V4",
    ]
    assert {s.metadata["track"] for s in MedBench().load(d)} == {"agent", "llm"}
    assert [s.metadata["source"] for s in MedBench(track="llm").load(d)] == ["MedSafety_V4"]
    assert (
        MedBench(track="agent").spec() != MedBench().spec()
    )  # a named subset: its own spec, so its own run id
    store = tmp_path / "s.db"
    r = CliRunner().invoke(
        app,
        [
            "run",
            "medbench",
            "--data",
            str(d),
            "--param",
            "track=agent",
            "-m",
            "scripted/x",
            "--store",
            str(store),
        ],
    )
    assert r.exit_code == 0, r.output
    from grandrounds.store import Store

    with Store(store) as st:
        (run_rec,) = st.runs()
    assert "track" in run_rec.benchmark_spec
    out = tmp_path / "sub"
    out.mkdir()
    r = CliRunner().invoke(
        app, ["submission", "--run", run_rec.id, "--out", str(out), "--store", str(store)]
    )
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in out.iterdir()) == [
        "MedCallAPI.jsonl",
        "MedShield.jsonl",
    ]  # the Agent files only
    lines = [
        json.loads(x) for x in (out / "MedCallAPI.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert [x["other"]["id"] for x in lines] == [103, 104] and all(
        x["answer"] == "A" for x in lines
    )
