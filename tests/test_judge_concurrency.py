"""--judge-concurrency bounds the judge calls in flight, on run and on regrade (judges have their own limit)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from grandrounds.cli.main import app
from grandrounds.core.registry import BENCHMARKS
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer
from tests.rubric_bench.triage import TriageRubric

ROWS = [
    {
        "id": f"t{i}",
        "question": f"question {i}",
        "urgency": "routine",
        "rubric": [{"text": f"item {i}.{k}", "points": k + 1} for k in range(4)],
    }
    for i in range(6)
]


def verdict(body: dict) -> str:
    return json.dumps({"explanation": "ok", "criteria_met": True})


def test_judge_concurrency_bounds_judge_calls_on_run_and_regrade(tmp_path: Path) -> None:
    data = tmp_path / "triage.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    store = tmp_path / "s.db"
    n_items = sum(len(r["rubric"]) for r in ROWS)
    with (
        BENCHMARKS.registered("triage-rubric", TriageRubric),
        LoopbackServer(lambda b: "advice") as cand,
    ):
        with LoopbackServer(verdict, latency=0.02) as judge:
            r = CliRunner().invoke(
                app,
                [
                    "run",
                    "triage-rubric",
                    "--data",
                    str(data),
                    "--model",
                    "openai/c",
                    "--base-url",
                    cand.base_url,
                    "--judge",
                    f"openai/j@{judge.base_url}",
                    "--judge-concurrency",
                    "2",
                    "--store",
                    str(store),
                ],
            )
            assert r.exit_code == 0, r.output
            assert judge.stats.requests == n_items and judge.stats.max_in_flight == 2
        with Store(store) as st:
            (run,) = st.runs()
        with LoopbackServer(verdict, latency=0.02) as other:  # a new judge: every item asked again
            r = CliRunner().invoke(
                app,
                [
                    "regrade",
                    "--run",
                    run.id,
                    "--judge",
                    f"openai/k@{other.base_url}",
                    "--judge-concurrency",
                    "1",
                    "--store",
                    str(store),
                ],
            )
            assert r.exit_code == 0, r.output
            assert other.stats.requests == n_items and other.stats.max_in_flight == 1
        with LoopbackServer(
            verdict, latency=0.02
        ) as wide:  # without the flag the judge default allows more
            r = CliRunner().invoke(
                app,
                [
                    "regrade",
                    "--run",
                    run.id,
                    "--judge",
                    f"openai/w@{wide.base_url}",
                    "--store",
                    str(store),
                ],
            )
            assert r.exit_code == 0, r.output
            assert wide.stats.max_in_flight > 2
    assert cand.stats.requests == len(ROWS), "regrading never asks the candidate again"
