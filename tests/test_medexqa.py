"""MedExQA (MedAgentsBench's 935-question MCQ repackaging): the real file, a scripted model through
the CLI against its own keys, the specialty breakdown and the official macro average."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from grandrounds.benchmarks.medagentsbench import MedExQA
from tests.conftest import shared_file
from tests.exam_cli import cli_run, longest

SPECIALTIES = {
    "clinical_laboratory_scientist": 371,
    "occupational_therapist": 188,
    "biomedical_engineer": 142,
    "speech_pathologist": 129,
    "clinical_psychologist": 105,
}


def records() -> list[dict]:
    path = shared_file("medexqa", "test.jsonl")
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def test_real_file_loads_the_source_notes_count() -> None:
    samples = MedExQA().load(shared_file("medexqa", "test.jsonl").parent)
    assert len(samples) == len(records()) == 935
    assert Counter(s.metadata["specialty"] for s in samples) == Counter(SPECIALTIES)
    assert "NOT the official" in MedExQA.description


@pytest.mark.parametrize("protocol", ["reference", "grandrounds"])
def test_scripted_model_accuracy_through_the_cli(tmp_path: Path, protocol: str) -> None:
    def reply(req):
        prompt = req.messages[-1].content
        if protocol == "reference":
            line = prompt.split("Options:\n", 1)[1].split("\n\n", 1)[0]
            opts = [t.strip() for t in re.split(r"(?:^| )\([A-D]\) ", line)[1:]]
        else:
            opts = [m.group(1) for m in re.finditer(r"^[A-D]\. (.*)$", prompt, re.M)]
        return f"Answer: {'ABCD'[longest(opts)]}"

    res = cli_run(
        tmp_path,
        "medexqa",
        shared_file("medexqa", "test.jsonl").parent,
        reply,
        "--protocol",
        protocol,
    )
    rows = records()
    right = [longest(list(r["options"].values())) == "ABCD".index(r["answer_idx"]) for r in rows]
    assert res["n"] == 935 and res["score"] == pytest.approx(sum(right) / 935)
    by = {}
    for r, ok in zip(rows, right):
        by.setdefault(r["realidx"].split("_", 1)[1], []).append(ok)
    per = {k: sum(v) / len(v) for k, v in by.items()}
    assert {k: c["score"] for k, c in res["breakdown"]["specialty"].items()} == pytest.approx(per)
    assert res["extra"]["macro_accuracy"] == pytest.approx(sum(per.values()) / 5)
    print(
        f"medexqa {protocol}: {res['score']:.4f} = {sum(right)}/935, macro {res['extra']['macro_accuracy']:.4f} (independent count)"
    )
