"""Nothing scored is n/a, never 0: a headline over no items has no score and no interval and is not
ranked; exit 3's advice tells failed calls (asked again) from unreadable answers (read the same
way again); an interval of no width is marked."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from grandrounds.benchmarks.base import Aggregate
from grandrounds.cli.main import app
from grandrounds.core.display import fmt_ci
from grandrounds.core.records import Cell
from grandrounds.core.registry import PROVIDERS
from grandrounds.providers.scripted import ScriptedProvider
from tests.conftest import shared_file


def test_an_aggregate_over_no_items_has_no_score() -> None:
    agg = Aggregate.of("f1", Cell(score=0.0, n=0, n_unscored=5, ci95=(0.0, 0.0)), {}, {})
    assert agg.score is None and agg.ci95 is None and agg.n_unscored == 5
    kept = Aggregate.of("accuracy", Cell(score=0.0, n=3, n_unscored=0, ci95=(0.0, 0.5)), {}, {})
    assert kept.score == 0.0 and kept.ci95 == (0.0, 0.5)  # a real zero stays a zero


def test_a_degenerate_interval_is_marked() -> None:
    assert fmt_ci((0.0, 0.0)) == "[0.000, 0.000] (degenerate)"
    assert fmt_ci((0.25, 0.75)) == "[0.250, 0.750]"
    assert fmt_ci(None) == "n/a"


class _Unsure(ScriptedProvider):
    """Answers every MedHallu question with no label at all: nothing can be read."""

    def __init__(self, spec, **kw):
        super().__init__(spec, script=lambda req: "I cannot tell.", **kw)


def test_medhallu_with_nothing_read_prints_na_is_not_ranked_and_says_why(tmp_path: Path) -> None:
    folder = shared_file("medhallu")
    db = tmp_path / "s.db"
    with PROVIDERS.registered("unsure", _Unsure):
        r = CliRunner().invoke(
            app,
            [
                "run",
                "medhallu",
                "--data",
                str(folder),
                "--model",
                "unsure/x",
                "--protocol",
                "grandrounds",
                "--limit",
                "6",
                "--store",
                str(db),
                "--out",
                str(tmp_path / "out"),
            ],
        )
    assert r.exit_code == 3, r.output
    res = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]
    assert res["score"] is None and res["ci95"] is None and res["n"] == 0
    assert "f1 0.000" not in r.output and "f1 n/a" in " ".join(r.output.split())
    said = " ".join(r.output.split())
    assert "could not be read" in said and "retries every failed call" not in said
    board = CliRunner().invoke(app, ["leaderboard", "--store", str(db)], env={"COLUMNS": "250"})
    assert board.exit_code == 0, board.output
    row = next(ln for ln in board.output.splitlines() if "unsure/x" in ln and "no score" in ln)
    cols = [c.strip() for c in row.split("│")]
    assert cols[2] == "-" and cols[6] == "n/a" and cols[7] == "n/a"  # neither ranked nor scored
    cells = [ln for ln in board.output.splitlines() if ln.startswith(("│ hard", "│ truth"))]
    assert cells and all("0.000" not in ln and "n/a" in ln for ln in cells), cells
