"""MEDIQA 2019 QA: the real files, a scripted model through the CLI scored by the official evaluator itself,
and our reproduction of the evaluator against it on a corpus of submissions."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandrounds.benchmarks.mediqa_qa import MediqaQA, read_gold
from grandrounds.cli.main import app
from grandrounds.core.errors import DataError
from grandrounds.core.registry import PROVIDERS
from grandrounds.graders.mediqa_grader import read_choice, submission_rows
from grandrounds.providers.scripted import ScriptedProvider
from grandrounds.scoring.mediqa import official_metrics
from tests.conftest import shared_file
from tests.official import load_official

EVALUATOR = "mediqa-2019/Eval_Scripts/mediqa2019_evaluator_allTasks_final.py"


def folder() -> Path:
    return shared_file("mediqa-qa-2019", "MEDIQA2019-Task3-QA-TestSet-wLabels.xml").parent


def gold_rows() -> list[tuple[str, str, str]]:
    lines = (
        (folder() / "QA_testSet_ground_truth_round_2.txt").read_text(encoding="utf-8").splitlines()
    )
    assert lines[0] == "question_id,answer_id,label"
    return [tuple(line.split(",")) for line in lines[1:]]  # type: ignore[misc]


def official(
    tmp_path: Path, gold: list[tuple[str, ...]], submission: list[tuple[str, ...]]
) -> dict:
    """The evaluator run on files: it reads the gold without a header (with the header line it raises
    KeyError, so it was run on a headerless copy) and the submission as written."""
    pytest.importorskip("pandas")
    ns = load_official(EVALUATOR, ["MediqaEvaluator"])
    g, s = tmp_path / "gold.csv", tmp_path / "sub.csv"
    g.write_text("".join(",".join(r) + "\n" for r in gold), encoding="utf-8")
    s.write_text("".join(",".join(r) + "\n" for r in submission), encoding="utf-8")
    out = ns.MediqaEvaluator(str(g), task=3)._evaluate({"submission_file_path": str(s)})
    return {
        "accuracy": out["score"],
        "spearman": float(out["score_secondary"]),
        "mrr": out["meta"]["MRR"],
        "precision": out["meta"]["Precision"],
    }


def test_real_files_load_150_questions_and_1107_answers() -> None:
    samples = MediqaQA().load(folder())
    assert len(samples) == 150  # SOURCE.md
    assert sum(len(s.metadata["answer_ids"]) for s in samples) == 1107
    gold = gold_rows()
    assert [(s.id, a, lab) for s in samples for a, lab in s.target["gold"]] == gold
    assert all(s.target["gold"][0][0] == s.target["reference_rank_1"] for s in samples)
    assert "Answer 1:\n" in samples[0].messages[0].content and samples[0].messages[
        0
    ].content.endswith('"Correct: none" if none of them is correct.')


def script_reply(prompt: str) -> str:
    """Name the first half of the candidates (rounded up), last first."""
    n = len(re.findall(r"^Answer \d+:$", prompt, flags=re.M))
    k = (n + 1) // 2
    return "Looking at each candidate...\nCorrect: " + ", ".join(str(i) for i in range(k, 0, -1))


def test_scripted_model_through_the_cli_equals_the_official_evaluator(tmp_path: Path) -> None:
    samples = MediqaQA().load(folder())
    failing, unreadable = samples[0].metadata["question"], samples[1].metadata["question"]

    def script(req):
        text = req.messages[-1].content
        if failing in text:
            return RuntimeError("upstream 500")
        if unreadable in text:
            return "All of them look plausible."
        return script_reply(text)

    class Scripted(ScriptedProvider):
        def __init__(self, spec, **kw):
            super().__init__(spec, script=script, **kw)

    with PROVIDERS.registered("mediqa-script", Scripted):
        r = CliRunner().invoke(
            app,
            [
                "run",
                "mediqa-qa-2019",
                "--data",
                str(folder()),
                "--model",
                "mediqa-script/x",
                "--store",
                str(tmp_path / "s.db"),
                "--out",
                str(tmp_path / "out"),
            ],
        )
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]
    # Independently: the submission file the rule gives, scored by the official evaluator; the two
    # questions without a usable reply are absent from it (reference protocol).
    gold = gold_rows()
    sub = []
    for s in samples[2:]:
        ids = s.metadata["answer_ids"]
        k = (len(ids) + 1) // 2
        picked = [ids[i] for i in range(k - 1, -1, -1)]
        sub += [(s.id, a, "1") for a in picked] + [(s.id, a, "0") for a in ids if a not in picked]
    want = official(tmp_path, gold, sub)
    print(
        "official",
        want,
        "ours",
        res["score"],
        res["extra"]["spearman"],
        res["extra"]["mrr"],
        res["extra"]["precision"],
    )
    assert res["score"] == pytest.approx(want["accuracy"])
    assert res["extra"]["spearman"] == pytest.approx(want["spearman"])
    assert res["extra"]["mrr"] == pytest.approx(want["mrr"]) and res["extra"][
        "precision"
    ] == pytest.approx(want["precision"])
    assert res["extra"]["n_unreadable"] == 1 and res["extra"]["n_failed"] == 1
    kept = {s.id for s in samples[2:]}
    want_ours = official(tmp_path, [g for g in gold if g[0] in kept], sub)
    assert res["extra"]["other_protocol"]["score"] == pytest.approx(want_ours["accuracy"])


def random_submission(
    rng: random.Random, gold: list[tuple[str, str, str]]
) -> list[tuple[str, str, str]]:
    """A varied submission: questions dropped, answers shuffled, labels flipped, duplicates, stray rows."""
    by_q: dict[str, list[str]] = {}
    for q, a, _ in gold:
        by_q.setdefault(q, []).append(a)
    sub: list[tuple[str, str, str]] = []
    for q, ids in by_q.items():
        if rng.random() < 0.1:
            continue
        ids = ids[:]
        rng.shuffle(ids)
        sub += [(q, a, rng.choice("01")) for a in ids if rng.random() > 0.05]
        if rng.random() < 0.2 and sub:
            sub.append((q, ids[0], rng.choice("01")))  # a duplicate: the first is kept
        if rng.random() < 0.05:
            sub.append((q, f"{q}_Answer99", "1"))  # an answer the gold does not have
    return sub


def test_our_evaluator_agrees_with_the_official_one_on_varied_submissions(tmp_path: Path) -> None:
    gold = gold_rows()
    rng = random.Random(7)
    agree = total = 0
    cases = [random_submission(rng, gold) for _ in range(25)]
    cases += [
        [(q, a, lab) for q, a, lab in gold],
        [(q, a, "1") for q, a, _ in gold],
        [(q, a, "1") for q, a, _ in reversed(gold)],
    ]
    for sub in cases:
        want = official(tmp_path, gold, sub)
        got = official_metrics(gold, sub)
        for k in ("accuracy", "spearman", "mrr", "precision"):
            total += 1
            agree += got[k] == pytest.approx(want[k], abs=1e-12)
    print(f"MEDIQA evaluator agreement: {agree}/{total} figures over {len(cases)} submissions")
    assert agree == total


@pytest.mark.parametrize(
    "text, n, want",
    [
        ("Correct: 3, 1, 5", 5, [3, 1, 5]),
        ("**Correct:** 2", 3, [2]),
        ("correct answers: [4] [2]", 4, [4, 2]),
        ("Correct: none", 3, []),
        ("Correct: 1, 1, 2.", 2, [1, 2]),
        ("Correct: 1 and 3", 3, [1, 3]),
        ("Correct: 1\nthen later\nCorrect: 2", 2, [2]),
        ("<think>Correct: 1</think>Correct: 2", 2, [2]),
        ("Correct: 6", 5, None),
        ("Correct: answer one", 3, None),
        ("I think 2 is right", 3, None),
        ("", 3, None),
    ],
)
def test_reading_the_reply(text: str, n: int, want) -> None:
    assert read_choice(text, n) == want


def test_rows_put_the_named_answers_first() -> None:
    assert submission_rows(["a", "b", "c"], [3, 1]) == [("c", "1"), ("a", "1"), ("b", "0")]


def test_a_gold_file_that_disagrees_with_the_xml_is_one_line(tmp_path: Path) -> None:
    src = folder()
    (tmp_path / "MEDIQA2019-Task3-QA-TestSet-wLabels.xml").write_bytes(
        (src / "MEDIQA2019-Task3-QA-TestSet-wLabels.xml").read_bytes()
    )
    text = (
        (src / "QA_testSet_ground_truth_round_2.txt")
        .read_text(encoding="utf-8")
        .replace("1,1_Answer8,1", "1,1_Answer8,0", 1)
    )
    (tmp_path / "QA_testSet_ground_truth_round_2.txt").write_text(text, encoding="utf-8")
    with pytest.raises(DataError) as e:
        MediqaQA().load(tmp_path)
    assert "answer 1_Answer8: gold label 0, ReferenceScore" in str(e.value) and "\n" not in str(
        e.value
    )
    (tmp_path / "QA_testSet_ground_truth_round_2.txt").write_text(
        "question_id,answer_id,label\n1,x,2\n", encoding="utf-8"
    )
    with pytest.raises(DataError, match="line 2: expected question_id,answer_id,label"):
        read_gold(tmp_path / "QA_testSet_ground_truth_round_2.txt")
