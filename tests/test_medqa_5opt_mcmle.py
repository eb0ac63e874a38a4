"""MedQA five-option (US) and MCMLE (Mainland, Apollo's repackaging): the real files, CLI runs counted
independently from them, and bad records."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.medqa_5opt import MedQA5
from grandrounds.benchmarks.medqa_mcmle import MedQAMCMLE
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.run.config import RunConfig, check_run
from tests.conftest import shared_file
from tests.test_cli import gr


def five_rows() -> list[dict]:
    path = shared_file("medqa-usmle-5opt", "test.jsonl")
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def mcmle_items() -> list[dict]:
    items = json.loads(shared_file("medqa-mcmle", "zh.json").read_text(encoding="utf-8"))
    return [x for x in items if x["source"] == "medqa-mcmle"]


def test_five_option_file_loads_as_source_md_counts() -> None:
    samples = MedQA5().load(shared_file("medqa-usmle-5opt", "test.jsonl").parent)
    assert len(samples) == 1273 and all(list(s.choices) == list("ABCDE") for s in samples)
    assert Counter(s.target for s in samples) == {"A": 273, "B": 277, "C": 252, "D": 269, "E": 202}
    assert Counter(s.metadata["meta_info"] for s in samples) == {"step1": 679, "step2&3": 594}
    assert samples[0].target == "C" and samples[0].choices["C"] == five_rows()[0]["answer"]
    assert "(A/B/C/D/E)" in MedQA5().prompt(samples[0], RunOptions()).messages[0].content


def test_mcmle_items_load_from_apollo_file_with_its_formatting_removed() -> None:
    samples = MedQAMCMLE().load(shared_file("medqa-mcmle", "zh.json").parent)
    items = mcmle_items()
    assert len(samples) == 3426 == len(items)
    assert Counter(s.target for s in samples) == {"A": 779, "B": 926, "C": 902, "D": 819}
    assert samples[0].choices == {"A": "2小时", "B": "4小时内", "C": "12小时内", "D": "24小时内"}
    for s, x in zip(samples, items):  # "(X) text." lines, prefix and Apollo's final "." removed
        assert "\n".join(f"({k}) {v}." for k, v in s.choices.items()) == x["options"]
        assert f"({s.target})" == x["answer"] and s.metadata["question"] == x["question"]
    assert "repackaging" in MedQAMCMLE.description and "Apollo" in MedQAMCMLE.description
    assert "答案" in MedQAMCMLE().prompt(samples[0], RunOptions()).messages[0].content


@pytest.mark.parametrize(
    "name, folder, file",
    [
        ("medqa-usmle-5opt", "medqa-usmle-5opt", "test.jsonl"),
        ("medqa-mcmle", "medqa-mcmle", "zh.json"),
    ],
)
def test_cli_run_scores_the_share_of_A_keys(
    tmp_path: Path, name: str, folder: str, file: str
) -> None:
    r = gr(
        "run",
        name,
        "--data",
        str(shared_file(folder, file)),
        "--model",
        "scripted/always-a",
        "--store",
        str(tmp_path / "s.db"),
        "--out",
        str(tmp_path / "out"),
    )
    assert r.returncode == 0, r.stderr
    result = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]
    keys = (
        [x["answer_idx"] for x in five_rows()]
        if name == "medqa-usmle-5opt"
        else [x["answer"].strip("()") for x in mcmle_items()]
    )
    assert result["n"] == len(keys) and result["score"] == pytest.approx(
        keys.count("A") / len(keys)
    )
    if name == "medqa-usmle-5opt":
        step1 = [x["answer_idx"] for x in five_rows() if x["meta_info"] == "step1"]
        assert result["breakdown"]["meta_info"]["step1"]["score"] == pytest.approx(
            step1.count("A") / len(step1)
        )


def test_bad_records_are_one_line_errors(tmp_path: Path) -> None:
    rows = five_rows()[:2]
    rows[1] = {**rows[1], "answer_idx": "F"}
    (tmp_path / "test.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    with pytest.raises(DataError, match=r"line 2.*'F'"):
        MedQA5().load(tmp_path)
    items = mcmle_items()[:2]
    items[1] = {**items[1], "options": "(A) 一.\n(C) 二."}
    (tmp_path / "zh.json").write_text(json.dumps(items, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(DataError, match=r"item 1.*letters A.. in order"):
        MedQAMCMLE().load(tmp_path)
    (tmp_path / "zh.json").write_text(
        json.dumps([{"source": "cmb-single", "question": "q", "options": "", "answer": ""}]),
        encoding="utf-8",
    )
    with pytest.raises(DataError, match="no item with source"):
        MedQAMCMLE().load(tmp_path)


def test_no_lm_eval_task_so_no_letter_loglik() -> None:
    for name in ("medqa-usmle-5opt", "medqa-mcmle"):
        with pytest.raises(ConfigError, match="letter-loglik"):
            check_run(
                RunConfig(
                    benchmark=name,
                    model="scripted/x",
                    options=RunOptions(answer_mode="letter-loglik"),
                )
            )
