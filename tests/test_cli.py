"""The command line as a user types it: list, run on real MMLU files, leaderboard with breakdowns, report."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections import Counter

from tests.conftest import offline_env, shared_file
from tests.test_resume_and_bad_input import ROOT


def gr(*args: str, cwd=None) -> subprocess.CompletedProcess:
    env = {
        "PYTHONPATH": str(ROOT / "src"),
        "PATH": "/usr/bin:/bin",
        "HOME": str(ROOT),
        "COLUMNS": "200",
        **offline_env(),
    }
    return subprocess.run(
        [sys.executable, "-m", "grandrounds", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=cwd,
    )


def test_list_names_every_benchmark_and_provider():
    r = gr("list")
    assert r.returncode == 0, r.stderr
    for name in (
        "medqa",
        "medmcqa",
        "pubmedqa",
        "mmlu-medical",
        "cmb",
        "healthbench",
        "medeqbench",
        "llmeval-med",
        "gaps",
        "medcalc-bench",
        "medec",
        "medbench",
        "demo",
        "openai",
        "llamacpp",
        "scripted",
    ):
        assert name in r.stdout, name


def test_unknown_benchmark_suggests_the_close_name(tmp_path):
    r = gr("run", "medqaa", "--model", "scripted/x", "--store", str(tmp_path / "s.db"))
    assert r.returncode == 2
    assert "did you mean medqa" in r.stderr


def test_mmlu_run_then_leaderboard_shows_subject_breakdown(tmp_path):
    folder = shared_file("mmlu-medical", "anatomy_test.csv").parent
    db = tmp_path / "s.db"
    # The scripted model always answers "A": per-subject accuracy is the share of A keys.
    r = gr(
        "run",
        "mmlu-medical",
        "--data",
        str(folder),
        "--model",
        "scripted/always-a",
        "--store",
        str(db),
        "--out",
        str(tmp_path / "out"),
        "--protocol",
        "grandrounds",
    )  # a bare "A" is read by ours, not simple-evals
    assert r.returncode == 0, r.stderr
    want: dict[str, float] = {}
    total = Counter()
    for path in sorted(folder.glob("*_test.csv")):
        keys = [row[5] for row in csv.reader(path.open(encoding="utf-8", newline=""))]
        want[path.stem.removesuffix("_test")] = keys.count("A") / len(keys)
        total.update(keys)
    res = json.loads((tmp_path / "out" / "results.json").read_text())["results"][0]
    assert res["n"] == 1089
    assert abs(res["score"] - total["A"] / 1089) < 1e-12
    subjects = res["breakdown"]["subject"]
    assert {k: round(v["score"], 12) for k, v in subjects.items()} == {
        k: round(v, 12) for k, v in want.items()
    }

    r = gr("leaderboard", "--store", str(db))
    assert r.returncode == 0, r.stderr
    assert "mmlu-medical by subject" in r.stdout
    for subject, acc in want.items():
        line = next(ln for ln in r.stdout.splitlines() if f" {subject} " in ln)
        assert f"{acc:.3f}" in line

    out = tmp_path / "report.html"
    r = gr("report", "--format", "html", "--out", str(out), "--store", str(db))
    assert r.returncode == 0, r.stderr
    html = out.read_text(encoding="utf-8")
    assert (
        "mmlu-medical" in html
        and "<script src=" not in html
        and "http://" not in html.split("<body", 1)[0]
    )


def test_api_key_never_reaches_store_outputs_or_logs(tmp_path):
    from grandrounds.testing import LoopbackServer

    secret = "sk-test-7f3a9c1e5b2d4f6a8c0e"
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    db = tmp_path / "s.db"
    env = {
        "PYTHONPATH": str(ROOT / "src"),
        "PATH": "/usr/bin:/bin",
        "HOME": str(ROOT),
        "OPENAI_API_KEY": secret,
        **offline_env(),
    }
    with LoopbackServer(lambda b: "Answer: A") as srv:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "grandrounds",
                "run",
                "medqa",
                "--data",
                str(data),
                "--limit",
                "5",
                "--model",
                "openai/m",
                "--base-url",
                srv.base_url,
                "--store",
                str(db),
                "--out",
                str(tmp_path / "out"),
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert srv.stats.authorizations == {f"Bearer {secret}"}, (
            "the key is used, and only in the request header"
        )
    assert r.returncode == 0, r.stderr
    r2 = gr("report", "--format", "json", "--out", str(tmp_path / "rep.json"), "--store", str(db))
    assert r2.returncode == 0, r2.stderr
    blobs = [r.stdout, r.stderr, r2.stdout] + [
        p.read_bytes().decode("utf-8", "replace") for p in tmp_path.rglob("*") if p.is_file()
    ]
    assert blobs and all(secret not in b for b in blobs)
