"""MedHallu: the real Arrow file, a scripted model through the CLI scored by scikit-learn's F1, and
Medmarks' postprocess_medhallu against our aggregation on a corpus of replies."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.medhallu import ARROW, PROMPTS, MedHallu
from grandrounds.cli.main import app
from grandrounds.core.errors import DataError
from grandrounds.core.registry import PROVIDERS
from grandrounds.graders.medhallu_grader import our_prediction, reference_prediction
from grandrounds.providers.scripted import ScriptedProvider
from grandrounds.scoring.medhallu import detection_metrics
from tests.conftest import shared_file
from tests.official import load_official

pa = pytest.importorskip("pyarrow")


def folder() -> Path:
    return shared_file("medhallu", "MedHallu_pqa_labeled", "train", ARROW.filename).parents[1]


def table_rows() -> list[dict]:
    import pyarrow.ipc as ipc

    with open(folder() / "train" / ARROW.filename, "rb") as f:
        return ipc.open_stream(f).read_all().to_pylist()


def test_real_file_loads_1000_rows_as_2000_items() -> None:
    rows = table_rows()
    samples = MedHallu().load(folder())
    assert len(rows) == 1000 and len(samples) == 2000  # SOURCE.md
    assert sum(s.metadata["difficulty"] == "hard" for s in samples) == 2 * 408
    assert [s.metadata["answer"] for s in samples[:2]] == [
        rows[0]["Ground Truth"],
        rows[0]["Hallucinated Answer"],
    ]
    assert [s.target for s in samples[:2]] == ["0", "1"]
    assert (
        MedHallu().load(folder() / "train" / ARROW.filename) == samples
    )  # the file, its folder or its parent


def rule(answer: str) -> str:
    """The scripted model's verdict from the answer's length alone."""
    n = len(answer)
    if n % 11 == 0:
        return "I cannot tell."  # unreadable under both readings
    if n % 7 == 0:
        return "Judgement: 2"
    return f"Judgement: {1 if n > 250 else 0}"


def test_scripted_model_through_the_cli_equals_sklearn_f1(tmp_path: Path) -> None:
    from sklearn.metrics import f1_score

    rows = table_rows()

    def script(req):
        text = req.messages[-1].content
        answer = text.split("\nAnswer: ", 1)[1].rsplit("\n\nIs this answer factual", 1)[0]
        return rule(answer)

    class Scripted(ScriptedProvider):
        def __init__(self, spec, **kw):
            super().__init__(spec, script=script, **kw)

    with PROVIDERS.registered("medhallu-script", Scripted):
        r = CliRunner().invoke(
            app,
            [
                "run",
                "medhallu",
                "--data",
                str(folder()),
                "--model",
                "medhallu-script/x",
                "--protocol",
                "grandrounds",
                "--store",
                str(tmp_path / "s.db"),
                "--out",
                str(tmp_path / "out"),
            ],
        )
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]
    items = [
        (row[col], label, row["Difficulty Level"])
        for row in rows
        for col, label in (("Ground Truth", "0"), ("Hallucinated Answer", "1"))
    ]
    preds = [rule(a).rsplit(" ", 1)[-1] for a, _, _ in items]
    kept = [(lab, p) for (_, lab, _), p in zip(items, preds) if p in ("0", "1")]
    want = f1_score([t for t, _ in kept], [p for _, p in kept], pos_label="1")
    assert res["score"] == pytest.approx(want) and res["n"] == len(kept)
    assert res["extra"]["dropped_unsure"] == sum(p == "2" for p in preds)
    hard = [(lab, p) for (_, lab, d), p in zip(items, preds) if d == "hard" and p in ("0", "1")]
    assert res["breakdown"]["difficulty"]["hard"]["score"] == pytest.approx(
        f1_score([t for t, _ in hard], [p for _, p in hard], pos_label="1")
    )
    assert (
        res["extra"]["other_protocol"]["score"] is None
    )  # Medmarks reads no \boxed{} and no bare digit here: all dropped, an unknown (not an F1 of 0)


def test_reference_prompt_is_medmarks_when_its_file_is_at_hand() -> None:
    from grandrounds.sources.upstream import local_path

    try:
        local_path(PROMPTS)
    except DataError as e:
        pytest.skip(
            f"Medmarks' prompts.py is not in the reference folder and cannot be downloaded here: {e}"
        )
    sample = MedHallu().load(folder())[1]
    text = MedHallu().prompt(sample, RunOptions()).messages[0].content
    assert (
        text.startswith("\nQuestion: ")
        and "Your Judgement:" in text
        and sample.metadata["answer"] in text
    )


@pytest.mark.parametrize(
    "text, ref, ours",
    [
        ("\\boxed{1}", "1", "1"),
        ("1", "1", "1"),
        ("\\boxed{ 1 }", None, "1"),
        ("The answer is \\boxed{0}.", "0", "0"),
        ("\\boxed{2}", "2", "2"),
        ("\\boxed{0} no wait \\boxed{1}", "1", "1"),
        ("\\boxed{\\text{1}}", None, None),
        ("Judgement: 1", None, "1"),
        ("hallucinated", None, None),
        ("<think>\\boxed{0}</think>\\boxed{1}", "1", "1"),
    ],
)
def test_both_readings(text: str, ref, ours) -> None:
    assert reference_prediction(text) == ref and our_prediction(text) == ours


def verifiers_boxed():
    """extract_boxed_answer of the verifiers release Medmarks runs (v0.1.7.post0), from its pinned file."""
    return load_official(
        "verifiers/verifiers/utils/data_utils.py", ["extract_boxed_answer"]
    ).extract_boxed_answer


def test_aggregation_agrees_with_medmarks_postprocess(tmp_path: Path) -> None:
    """postprocess_medhallu (shared reference) on a results.jsonl, with verifiers' extract_boxed_answer
    executed from the pinned release file: its drops, accuracy, precision, recall and F1 against ours."""
    official = load_official(
        "medmarks-envs/environments/medhallu/postprocess.py",
        ["_extract_completion_text", "_iter_lines", "postprocess_medhallu"],
        extra={"extract_boxed_answer": verifiers_boxed()},
    )
    rng = random.Random(3)
    forms = [
        "\\boxed{%s}",
        "%s",
        "Answer: \\boxed{%s}.",
        "\\boxed{ %s }",
        "I think %s",
        "\\boxed{%s} or \\boxed{1}",
    ]
    agree = total = 0
    for case in range(30):
        gold = [rng.choice("01") for _ in range(rng.randint(0, 60))]
        replies = [rng.choice(forms) % rng.choice("0122x") for _ in gold]
        path = tmp_path / f"r{case}.jsonl"
        path.write_text(
            "".join(
                json.dumps({"answer": g, "completion": [{"content": c}]}) + "\n"
                for g, c in zip(gold, replies)
            )
        )
        want = official.postprocess_medhallu(str(path))
        got = detection_metrics(gold, [reference_prediction(c) for c in replies])
        for k in want:
            total += 1
            agree += got[k] == pytest.approx(want[k])
    print(f"MedHallu postprocess agreement: {agree}/{total} figures over 30 reply sets")
    assert agree == total
