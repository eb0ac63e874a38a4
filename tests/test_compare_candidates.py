"""``compare A B`` when the two models' latest runs differ in their settings: it compares the latest
runs that match, saying so, or lists every run of both with the settings in which they differ; and
it names the engine (vLLM/SGLang and version) that served each side, with no engine column where
none did.

Stores are filled by the real runner with scripted models on the bundled demo exam; each model
answers right on a known set of questions, so the compared means are known.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from typer.testing import CliRunner

from grandrounds.benchmarks.base import RunOptions
from grandrounds.cli.main import app
from grandrounds.core.records import Request
from grandrounds.run.config import RunConfig
from grandrounds.run.runner import run
from grandrounds.store import Store
from tests.conftest import medqa_records, shared_file, write_jsonl

DEMO_FILE = Path(__file__).resolve().parents[1] / "src" / "grandrounds" / "data" / "demo_exam.jsonl"
DEMO = [
    json.loads(line) for line in DEMO_FILE.read_text(encoding="utf-8").splitlines() if line.strip()
]


def right_on(right: set[int]):
    def script(req: Request) -> str:
        text = req.messages[-1].text
        [i] = [k for k, q in enumerate(DEMO) if q["question"] in text]
        key = DEMO[i]["answer_idx"]
        return f"Answer: {key if i in right else next(x for x in 'ABCD' if x != key)}"

    return script


def add_run(st: Store, model: str, right: set[int], protocol: str) -> str:
    cfg = RunConfig(
        benchmark="demo",
        model=f"scripted/{model}",
        options=RunOptions(protocol=protocol),
        provider_options={"script": right_on(right)},
    )
    return asyncio.run(run(st, cfg)).run.id


def compare(db: Path, a: str, b: str):
    return CliRunner().invoke(app, ["compare", a, b, "--store", str(db)], env={"COLUMNS": "400"})


def test_latest_runs_differ_so_the_latest_matching_runs_are_compared(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with Store(db) as st:
        a_old = add_run(st, "alpha", set(range(9)), "grandrounds")  # 9/12 right
        b_only = add_run(st, "beta", {0, 1, 2}, "grandrounds")  # 3/12 right
        a_new = add_run(
            st, "alpha", set(range(12)), "reference"
        )  # the latest of alpha: another protocol
    r = compare(db, "alpha", "beta")
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if line.startswith("│ demo"))
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert cells[1:5] == ["12", "0.7500", "0.2500", "+0.5000"], (
        "alpha's grandrounds run against beta's, not its latest"
    )
    assert "not comparable" not in r.output
    assert (
        f"demo: the latest runs ({a_new[:8]}, {b_only[:8]}) differ in grader, protocol; compared the latest runs that match: "
        f"{a_old[:8]} and {b_only[:8]}" in r.output
    )


def test_no_matching_runs_lists_the_candidates_with_their_settings(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with Store(db) as st:
        a_id = add_run(st, "alpha", set(range(9)), "reference")
        b_id = add_run(st, "beta", {0, 1, 2}, "grandrounds")
    r = compare(db, "alpha", "beta")
    assert r.exit_code == 0, r.output
    assert "not comparable: differs in grader, protocol" in r.output
    assert "demo: no run of alpha has the settings of a run of beta; their runs:" in r.output
    lines = r.output.splitlines()
    a_line = next(x for x in lines if x.startswith(f"  {a_id[:12]}"))
    b_line = next(x for x in lines if x.startswith(f"  {b_id[:12]}"))
    assert (
        a_line
        == f'  {a_id[:12]}  scripted/alpha  grader.args.protocol="reference", protocol=reference'
    )
    assert (
        b_line
        == f'  {b_id[:12]}  scripted/beta  grader.args.protocol="grandrounds", protocol=grandrounds'
    )
    assert "run one model again with the settings of one of the other's runs" in r.output


# ---- the engine that served each side ------------------------------------------------


def _invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


def test_compare_shows_the_engine_of_each_side(tmp_path: Path) -> None:
    from tests.test_engines import gr, medqa

    db = tmp_path / "s.db"
    for version in ("0.9.1", "0.9.2"):
        p = gr(*medqa(tmp_path, "vllm/fake-model", limit=4), FAKE_ENGINE_VERSION=version)
        assert p.returncode == 0, p.stderr
    with Store(db) as st:
        ids = {
            st.result(r.id, st.latest_grader_fp(r.id))["fingerprint"]["engine"]["version"]: r.id
            for r in st.runs()
        }
    assert sorted(ids) == ["0.9.1", "0.9.2"]
    r = _invoke("compare", ids["0.9.1"], ids["0.9.2"], "--store", str(db))
    assert r.exit_code == 0, r.output
    header = next(line for line in r.output.splitlines() if "benchmark" in line)
    assert "A engine" in header and "B engine" in header
    row = next(line for line in r.output.splitlines() if line.strip("│ ").startswith("medqa"))
    assert row.index("vllm 0.9.1") < row.index("vllm 0.9.2")  # A's, then B's
    assert "0.0000" in row  # the same answers on both versions: compared, not refused

    # a model no engine served: its side is empty, the other still named
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    r = _invoke(
        "run",
        "medqa",
        "--data",
        str(data),
        "--limit",
        "4",
        "--model",
        "scripted/plain",
        "--store",
        str(db),
    )
    assert r.exit_code == 0, r.output
    r = _invoke("compare", "scripted/plain", ids["0.9.2"], "--store", str(db))
    assert r.exit_code == 0, r.output
    row = next(line for line in r.output.splitlines() if line.strip("│ ").startswith("medqa"))
    assert [c.strip() for c in row.strip("│ ").split("│")][1:3] == ["", "vllm 0.9.2"]


def test_compare_without_engines_has_no_engine_columns(medqa_store: Path, tmp_path: Path) -> None:
    data = write_jsonl(tmp_path / "mq2" / "phrases_no_exclude_test.jsonl", medqa_records(3))
    with Store(medqa_store) as st:
        asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="medqa",
                    model="scripted/other",
                    data=data,
                    provider_options={"script": lambda req: "Answer: B"},
                ),
            )
        )
    r = _invoke("compare", "scripted/cand", "scripted/other", "--store", str(medqa_store))
    assert r.exit_code == 0, r.output
    assert "engine" not in r.output and "medqa" in r.output
