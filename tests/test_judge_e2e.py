"""Judged benchmarks through the real runner and CLI, with loopback candidate and judge servers.

The judge answers by a known rule (met iff the rubric item's text has even length). A first
judge replies garbage for items whose text length is 1 mod 4: those criteria end up unknown,
coverage drops, and the score comes from the rest. ``grandrounds regrade --only-unknown`` with a
judge of the same model that now answers properly asks exactly the unknown ones again, without
generating answers again, and the result then equals the reference arithmetic over all items.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np

from grandrounds.testing import LoopbackServer
from tests.conftest import offline_env, shared_file
from tests.test_resume_and_bad_input import ROOT

# The item in our per-criterion prompt ("# How to judge" follows) or the official one ("# Instructions").
ITEM = re.compile(
    r"# Rubric item\n\[(-?\d+(?:\.\d+)?)\] (.*?)\n\n# (?:How to judge|Instructions)", re.S
)
N = 30


def is_garbled(criterion: str) -> bool:
    return len(criterion) % 4 == 1


def rule_met(criterion: str) -> bool:
    return len(criterion) % 2 == 0


def judge_rule(garble: bool):
    def rule(body):
        m = ITEM.search(body["messages"][-1]["content"])
        assert m, "judge prompt without a rubric item"
        criterion = m.group(2)
        if garble and is_garbled(criterion):
            return "I am not sure what you mean."
        return (
            "```json\n"
            + json.dumps({"explanation": "by rule", "criteria_met": rule_met(criterion)})
            + "\n```"
        )

    return rule


def gr(*args: str) -> subprocess.CompletedProcess:
    env = {
        "PYTHONPATH": str(ROOT / "src"),
        "PATH": "/usr/bin:/bin",
        "HOME": str(ROOT),
        **offline_env(),
    }
    return subprocess.run(
        [sys.executable, "-m", "grandrounds", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def reference(rows: list[dict], known) -> tuple[list[float | None], float]:
    """HealthBench arithmetic written out again: met points / positive points, mean clipped to [0, 1]."""
    per = []
    for row in rows:
        items = [c for c in row["rubrics"] if known(c["criterion"])]
        pos = sum(c["points"] for c in items if c["points"] > 0)
        per.append(
            sum(c["points"] for c in items if rule_met(c["criterion"])) / pos if pos > 0 else None
        )
    vals = [p for p in per if p is not None]
    return per, float(np.clip(np.mean(vals), 0, 1))


def test_healthbench_unknowns_coverage_then_regrade_only_unknown(tmp_path):
    data = shared_file("healthbench", "healthbench_500.jsonl")
    rows = [json.loads(x) for x in data.read_text(encoding="utf-8").splitlines()[:N]]
    n_crit = sum(len(r["rubrics"]) for r in rows)
    n_bad = sum(1 for r in rows for c in r["rubrics"] if is_garbled(c["criterion"]))
    assert 0 < n_bad < n_crit
    db = tmp_path / "s.db"
    common = ["--store", str(db), "--max-reask", "1"]

    # scores over the known criteria are grandrounds' rule (the reference leaves such examples unscored)
    with (
        LoopbackServer(lambda b: "Please see a doctor soon.") as cand,
        LoopbackServer(judge_rule(True)) as judge1,
    ):
        r = gr(
            "run",
            "healthbench",
            "--data",
            str(data),
            "--limit",
            str(N),
            "--model",
            "openai/cand",
            "--protocol",
            "grandrounds",
            "--base-url",
            cand.base_url,
            "--judge",
            f"openai/judge@{judge1.base_url}",
            "--out",
            str(tmp_path / "a"),
            *common,
        )
        assert r.returncode == 0, r.stderr
        assert cand.stats.requests == N
        # each garbled item: first ask + 1 re-ask
        assert judge1.stats.requests == (n_crit - n_bad) + 2 * n_bad

    first = json.loads((tmp_path / "a" / "results.json").read_text())["results"][0]
    assert first["n"] == N and first["n_unscored"] == 0
    assert abs(first["extra"]["coverage"] - (n_crit - n_bad) / n_crit) < 1e-9
    per_known, overall_known = reference(rows, lambda c: not is_garbled(c))
    assert abs(first["score"] - overall_known) < 1e-12
    lines = [json.loads(x) for x in (tmp_path / "a" / "samples.jsonl").read_text().splitlines()]
    for row, line, want in zip(rows, lines, per_known):
        unknown = {v["criterion_id"] for v in line["verdicts"] if v["status"] == "unknown"}
        assert len(unknown) == sum(1 for c in row["rubrics"] if is_garbled(c["criterion"]))
        assert all(v["raw"] for v in line["verdicts"] if v["status"] == "unknown"), "raw reply kept"
        assert abs(line["score"] - want) < 1e-12

    with (
        LoopbackServer(judge_rule(False)) as judge2,
        LoopbackServer(lambda b: "never asked") as cand2,
    ):
        r = gr(
            "regrade",
            "--run",
            first["fingerprint"]["run_id"],
            "--judge",
            f"openai/judge@{judge2.base_url}",
            "--only-unknown",
            "--out",
            str(tmp_path / "b"),
            *common,
        )
        assert r.returncode == 0, r.stderr
        assert judge2.stats.requests == n_bad, "only the unknown verdicts are asked again"
        assert cand2.stats.requests == 0

    second = json.loads((tmp_path / "b" / "results.json").read_text())["results"][0]
    per_all, overall_all = reference(rows, lambda c: True)
    assert second["extra"]["coverage"] == 1.0
    assert abs(second["score"] - overall_all) < 1e-12
    lines = [json.loads(x) for x in (tmp_path / "b" / "samples.jsonl").read_text().splitlines()]
    assert [round(x["score"], 12) for x in lines] == [round(p, 12) for p in per_all]
    assert all(v["status"] != "unknown" for x in lines for v in x["verdicts"])


def test_regrade_only_unknown_needs_the_same_judge(tmp_path):
    data = shared_file("healthbench", "healthbench_500.jsonl")
    db = tmp_path / "s.db"
    with (
        LoopbackServer(lambda b: "See a doctor.") as cand,
        LoopbackServer(judge_rule(True)) as judge,
    ):
        # grandrounds: the garbled criteria leave every one of these 3 examples without an official score
        r = gr(
            "run",
            "healthbench",
            "--data",
            str(data),
            "--limit",
            "3",
            "--model",
            "openai/cand",
            "--base-url",
            cand.base_url,
            "--judge",
            f"openai/judge@{judge.base_url}",
            "--store",
            str(db),
            "--out",
            str(tmp_path / "a"),
            "--protocol",
            "grandrounds",
        )
        assert r.returncode == 0, r.stderr
        run_id = json.loads((tmp_path / "a" / "results.json").read_text())["results"][0][
            "fingerprint"
        ]["run_id"]
        before = judge.stats.requests
        r = gr(
            "regrade",
            "--run",
            run_id,
            "--judge",
            f"openai/another-judge@{judge.base_url}",
            "--only-unknown",
            "--store",
            str(db),
        )
        assert r.returncode == 2
        assert "no grades by this judge" in r.stderr and "Traceback" not in r.stderr
        assert judge.stats.requests == before
