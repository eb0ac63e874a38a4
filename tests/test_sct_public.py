"""SCT-Public: the real file, Medmarks' prompt rebuilt from the pinned prompt files, a scripted model
through the CLI scored against the panel columns of the CSV, and both readings of replies."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.sct_public import FILES, SCTPublic
from grandrounds.cli.main import app
from grandrounds.core.errors import DataError
from grandrounds.core.registry import PROVIDERS
from grandrounds.graders.sct_grader import our_rating, reference_rating
from grandrounds.providers.scripted import ScriptedProvider
from tests.conftest import shared_file


def folder() -> Path:
    return shared_file("sct-public", "sct_cleaned_full.csv").parent


def rows() -> list[dict[str, str]]:
    with open(folder() / "sct_cleaned_full.csv", newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_real_file_loads_174_items_with_their_panels() -> None:
    samples = SCTPublic().load(folder())
    assert len(samples) == 174 == len(rows())  # SOURCE.md
    assert [s.id for s in samples] == [r["question_id"] for r in rows()]
    assert sum(s.metadata["source"] == "Adelaide SCT" for s in samples) == 102
    assert (
        samples[0].target["panel"] == [0.0, 0.4, 0.8, 1.0, 0.2] and samples[0].target["modal"] == 1
    )
    notes = (folder() / "SOURCE.md").read_text(encoding="utf-8")
    assert all(f.sha256 in notes for f in FILES.values())


@pytest.mark.parametrize("reason, few_shot", [(False, False), (True, False), (False, True)])
def test_reference_prompt_is_medmarks_template_byte_for_byte(reason: bool, few_shot: bool) -> None:
    d = folder()
    read = lambda name: (d / name).read_text(encoding="utf-8")  # noqa: E731
    guideline = read("guideline.md")
    if not reason:
        guideline = guideline.replace(" and a brief explanation for your choice", "")
        assert guideline != read("guideline.md")
    examples = "\n## Examples with Response Labels\n" + "".join(
        read(f"example_{r}.md") for r in ("-2", "-1", "0", "+1", "+2")
    )
    template = guideline + (examples if few_shot else "") + read("testcase.md")
    r = rows()[5]
    want = (
        template.replace("{{ scenario }}", r["sct_stem"])
        .replace("{{ hypothesis }}", r["question"])
        .replace("{{ additional information }}", r["additional_info"])
    )
    bench = SCTPublic(reason=reason, few_shot=few_shot)
    sample = bench.load(d)[5]
    assert bench.prompt(sample, RunOptions(protocol="reference")).messages[0].content == want
    assert "37.5Ë" in bench.load(d)[0].messages[0].content  # the file's mojibake, sent as published


def credit(row: dict[str, str], rating: int) -> float:
    panel = [float(row[c]) for c in ("-2", "-1", "0", "1", "2")]
    return panel[rating + 2] / max(panel)


def test_scripted_model_through_the_cli_equals_the_panel_columns(tmp_path: Path) -> None:
    data = rows()
    failing, unsigned = data[0]["additional_info"], data[1]["additional_info"]

    def script(req):
        text = req.messages[-1].content
        if failing in text:
            return RuntimeError("upstream 500")
        if unsigned in text:
            return "Rating: 1\nSlightly more likely."  # Medmarks cannot read a 1 without its sign
        return "Rating: +2" if len(text) % 2 else "Rating: -1 because it argues against it"

    class Scripted(ScriptedProvider):
        def __init__(self, spec, **kw):
            super().__init__(spec, script=script, **kw)

    with PROVIDERS.registered("sct-script", Scripted):
        r = CliRunner().invoke(
            app,
            [
                "run",
                "sct-public",
                "--data",
                str(folder()),
                "--model",
                "sct-script/x",
                "--store",
                str(tmp_path / "s.db"),
                "--out",
                str(tmp_path / "out"),
            ],
        )
    assert r.exit_code == 0, r.output
    res = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]
    bench = SCTPublic()
    prompts = [bench.prompt(s, RunOptions()).messages[0].content for s in bench.load(folder())]
    want_ref, want_ours = (
        [0.0, 0.0],
        [credit(data[1], 1)],
    )  # failed call 0 (reference), unsigned 0 / +1
    for row, p in zip(data[2:], prompts[2:]):
        v = credit(row, 2 if len(p) % 2 else -1)
        want_ref.append(v)
        want_ours.append(v)
    assert res["score"] == pytest.approx(sum(want_ref) / 174) and res["n"] == 174
    assert res["extra"]["other_protocol"]["score"] == pytest.approx(sum(want_ours) / 173)
    assert res["extra"]["n_unextracted"] == 1 and res["extra"]["n_failed"] == 1
    adelaide = [v for v, row in zip(want_ref, data) if row["source"] == "Adelaide SCT"]
    assert res["breakdown"]["source"]["Adelaide SCT"]["score"] == pytest.approx(
        sum(adelaide) / len(adelaide)
    )


@pytest.mark.parametrize(
    "text, ref, ours",
    [
        ("Rating: +2", 2, 2),
        ("Rating: -1\nBecause", -1, -1),
        ("Rating: 0", 0, 0),
        ("Rating: 1", None, 1),
        ("Rating: 2 (strong)", None, 2),
        ("rating: +1", None, 1),
        ("**Rating:** -2", None, -2),
        ("Rating: +1 (0)", None, 1),
        ("Rating: −2", None, -2),
        ("Rating: +10", None, None),
        ("I would say +1", None, None),
        ("Rating: 0\nRating: +2", 0, 2),
    ],
)
def test_both_readings(text: str, ref, ours) -> None:
    assert reference_rating(text) == ref and our_rating(text) == ours


def test_a_bad_panel_row_is_one_line(tmp_path: Path) -> None:
    for name in FILES:
        (tmp_path / name).write_bytes((folder() / name).read_bytes())
    lines = (
        (tmp_path / "sct_cleaned_full.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    )
    lines[3] = lines[3].replace(",0.0,0.0,Adelaide", ",0.0,zero,Adelaide", 1)
    (tmp_path / "sct_cleaned_full.csv").write_text("".join(lines), encoding="utf-8")
    with pytest.raises(DataError) as e:
        SCTPublic().load(tmp_path)
    assert str(e.value).startswith(
        f"{tmp_path / 'sct_cleaned_full.csv'}, line 4: panel scores"
    ) and "\n" not in str(e.value)
