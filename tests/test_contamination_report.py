"""Contamination probes shown beside the scores in report files and the viewer, never among them.

The store holds the probes of the scripted memoriser of tests/test_contamination.py (it knows the
MedQA items whose id hashes even) and an ordinary scored run of the same model; the report's
contamination section must hold each probe's numbers as the probe computed them, and the score
tables none of them.
"""

from __future__ import annotations

import asyncio
import json
import re
from html import unescape

import pytest
from typer.testing import CliRunner

from grandrounds.analyses.contamination import PREFIX, ProbeConfig, run_probes
from grandrounds.cli.main import app
from grandrounds.core.display import fmt, fmt_ci
from grandrounds.store import Store
from grandrounds.viewer import queries
from tests.conftest import shared_file
from tests.test_contamination import Memoriser

LIMIT = 40
MODEL = "scripted/memo"


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    tmp = tmp_path_factory.mktemp("contam-report")
    cfg = ProbeConfig(
        benchmark="medqa",
        model=MODEL,
        data=data,
        limit=LIMIT,
        provider_options={"script": Memoriser(data)},
    )
    with Store(tmp / "s.db") as st:
        results, _ = asyncio.run(run_probes(st, cfg))
    r = CliRunner().invoke(app, ["run", "demo", "--model", MODEL, "--store", str(tmp / "s.db")])
    assert r.exit_code == 0, (r.output, r.exception)
    return tmp / "s.db", {p.probe: p for p in results}


def report(tmp_path, db, fmt_name: str) -> str:
    out = tmp_path / f"r.{fmt_name}"
    r = CliRunner().invoke(
        app, ["report", "--format", fmt_name, "--out", str(out), "--store", str(db)]
    )
    assert r.exit_code == 0, (r.output, r.exception)
    return out.read_text(encoding="utf-8")


def signed(v: float) -> str:
    return f"{v:+.3f}"


def test_html_report_has_a_contamination_section_with_each_probes_numbers(tmp_path, store_path):
    db, results = store_path
    page = report(tmp_path, db, "html")
    start = page.index("<h2 id='contamination'>Contamination probes (not scores)</h2>")
    board = page[page.index("<h2 id='leaderboard'>") : start]
    section = page[start : page.index("</table>", start)]
    rows = {}
    for tr in re.findall(r"<tr>(.*?)</tr>", section):
        cells = [unescape(c) for c in re.findall(r"<td>(.*?)</td>", tr)]
        if cells:  # the header row has none
            rows[cells[2]] = cells
    assert set(rows) == {"masked-option", "min-k"}
    for probe, p in results.items():
        assert p.difference is not None and p.ci95 is not None
        assert rows[probe] == [
            "medqa",
            MODEL,
            probe,
            p.unit,
            str(LIMIT),
            str(p.n_paired),
            str(p.n_failed),
            fmt(p.original),
            fmt(p.control),
            signed(p.difference),
            fmt_ci(p.ci95),
        ]
    assert (
        results["masked-option"].difference > 0.3
    )  # the planted memorisation shows in the section
    # the leaderboard above it holds the scored run and no probe
    assert (
        "<h3>demo" in board
        and "masked-option" not in board
        and PREFIX not in board
        and "min-k" not in board
    )


def test_json_and_md_reports_hold_the_probes_apart_from_the_leaderboard(tmp_path, store_path):
    db, results = store_path
    data = json.loads(report(tmp_path, db, "json"))
    assert [row["benchmark"] for row in data["leaderboard"]] == ["demo"]
    got = {row["probe"]: row for row in data["contamination"]}
    for probe, p in results.items():
        assert (got[probe]["original"], got[probe]["control"], got[probe]["difference"]) == (
            p.original,
            p.control,
            p.difference,
        )
        assert (got[probe]["ci95_low"], got[probe]["ci95_high"]) == tuple(p.ci95)
        assert (got[probe]["model"], got[probe]["benchmark"], got[probe]["n_paired"]) == (
            MODEL,
            "medqa",
            p.n_paired,
        )
    md = report(tmp_path, db, "md")
    board, _, probes = md.partition("## Contamination probes (not scores)")
    assert "| masked-option |" in probes and "| min-k |" in probes and "masked-option" not in board
    assert f"{results['masked-option'].difference:.4f}" in probes


def test_the_viewer_lists_probe_runs_apart_with_their_figures(store_path):
    db, results = store_path
    with Store(db, readonly=True) as st:
        rows = queries.runs(st)
    probes = {r["contamination"]["probe"]: r for r in rows if r["contamination"]}
    assert set(probes) == {"masked-option", "min-k"}
    for probe, p in results.items():
        c = probes[probe]["contamination"]
        assert (c["original"], c["control"], c["difference"], tuple(c["ci95"])) == (
            p.original,
            p.control,
            p.difference,
            tuple(p.ci95),
        )
        assert probes[probe]["benchmark"] == PREFIX + "medqa"
    assert [r["benchmark"] for r in rows if not r["contamination"]] == ["demo"]
    from grandrounds.viewer.page import (
        APP_JS,
    )  # the runs page splits probe runs into their own table

    assert "showProbes(all.filter(r => r.benchmark.startsWith('contamination:')))" in APP_JS
    assert "all.filter(r => !r.benchmark.startsWith('contamination:'))" in APP_JS
