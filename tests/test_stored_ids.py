"""Stored runs keep their identities: run ids, request keys, grader fingerprints and scores of
runs made with the released code, pinned here, are what the current code computes for the same
commands. A change that moved a key would make every stored answer look new (and every re-run pay
again), so it must be deliberate and show up here.

The pinned values were computed by the code before the package was laid out in layers (commit
ddc1230), on the real files in ../shared/data with scripted models (``scripted/a`` answers "A";
``scripted/j`` judges "A", which no protocol reads as a verdict, so the judged runs are unscored
but fully keyed).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT, offline_env, shared_file

#: (run id, benchmark) of every run the commands made, as stored by ddc1230.
PINNED_RUNS = [
    ("22880c0d4a2fc1fc", "pubmedqa"),
    ("616b652f4ae54c35", "demo"),
    ("6617841bca5551d9", "healthbench"),
    ("6860aa31557d9de9", "medqa"),
    ("8540adfaccc83ffd", "healthbench"),
    ("e09147d67e7852b3", "demo"),
    ("e6432fae632f96a0", "medcalc-bench"),
    ("f09dd084f5d292e1", "medqa"),
]
#: (run id, grader fingerprint, score, n) of each result, as stored by ddc1230.
PINNED_RESULTS = [
    (
        "22880c0d4a2fc1fc",
        "47ce3fc572e8d35e38208670b4e6f4be746bed3e986585f01325afdddc9b701f",
        1.0,
        10,
    ),
    (
        "616b652f4ae54c35",
        "1c933fea96fe4716e45d1cfe6f99bf22387d861a93ab8001aac7fb315c65c8ff",
        0.0,
        12,
    ),
    (
        "6617841bca5551d9",
        "951837d500da3cd35583c148c52af57d9ccfb7a4769138eec965fdf073ef063a",
        None,
        0,
    ),
    (
        "6860aa31557d9de9",
        "1ff9b2e70035f24adae5ceefe988015435fc8e28ecb03549190d222e5fbb7a88",
        0.15,
        20,
    ),
    # grandrounds-protocol judging shows the judge the answer between markers ("answer_markers": "v1"
    # in its template hashes): this grading's fingerprint and its judge calls' keys moved
    # (was 9d02df327d43ed58d970f0d445dcc1af666dc1f53d2b0cb90250866102695c9e); its run id did not.
    (
        "8540adfaccc83ffd",
        "5ff4d0c940a652ac08f013c29275fdd8c166bd2aeec124828f043bff2318da3c",
        None,
        0,
    ),
    (
        "e09147d67e7852b3",
        "cda5411ea8bd41d5597b27e1e6c0672086e3036e034a76d67cf57ab54b484187",
        0.0,
        12,
    ),
    (
        "e6432fae632f96a0",
        "cbea08f72c380415698bde38ce8668173eeee1979548f233b82eb94c4dc538f1",
        0.0,
        10,
    ),
    (
        "f09dd084f5d292e1",
        "62890748bbe087434e13d2bec2ec9bdcb0b6fe11d9551ddd036ac24e4b959dae",
        0.0,
        20,
    ),
]
#: How many calls the commands made, and the sha256 of their sorted request keys, one per line.
#: (The batched grandrounds HealthBench run's 5 judge prompts hold the answer between markers since
#: the answer markers: was d398fb7e51060ddf78f84d83ca1bd8d04a03982974a9286757f6bb4a103457f8.)
PINNED_CALLS = (286, "852d01ec8cc033a89658da50f973ff02c040ab52c170fd73d01058ffd2110200")


def commands() -> list[list[str]]:
    medqa = str(shared_file("medqa", "phrases_no_exclude_test.jsonl"))
    hb = str(shared_file("healthbench", "healthbench_500.jsonl"))
    return [
        ["run", "demo", "--model", "scripted/a"],
        ["run", "demo", "--model", "scripted/a", "--answer-mode", "letter-loglik"],
        ["run", "medqa", "--model", "scripted/a", "--data", medqa, "--limit", "20"],
        [
            "run",
            "medqa",
            "--model",
            "scripted/a",
            "--data",
            medqa,
            "--limit",
            "20",
            "--protocol",
            "grandrounds",
            "--shuffle-options",
        ],
        [
            "run",
            "healthbench",
            "--model",
            "scripted/a",
            "--judge",
            "scripted/j",
            "--data",
            hb,
            "--limit",
            "5",
        ],
        [
            "run",
            "healthbench",
            "--model",
            "scripted/a",
            "--judge",
            "scripted/j",
            "--data",
            hb,
            "--limit",
            "5",
            "--protocol",
            "grandrounds",
            "--judge-mode",
            "batched",
        ],
        [
            "run",
            "medcalc-bench",
            "--model",
            "scripted/a",
            "--data",
            str(shared_file("medcalc-bench")),
            "--limit",
            "10",
        ],
        [
            "run",
            "pubmedqa",
            "--model",
            "scripted/a",
            "--data",
            str(shared_file("pubmedqa")),
            "--limit",
            "10",
        ],
    ]


def test_runs_keep_their_ids_keys_fingerprints_and_scores(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    env = dict(os.environ) | offline_env() | {"PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    for args in commands():
        r = subprocess.run(
            [sys.executable, "-m", "grandrounds", *args, "--store", str(db)],
            capture_output=True,
            text=True,
            env=env,
        )
        assert r.returncode in (0, 3), r.stderr
    con = sqlite3.connect(db)
    try:
        runs = sorted(con.execute("SELECT id, benchmark_spec FROM runs").fetchall())
        keys = [k for (k,) in con.execute("SELECT key FROM calls ORDER BY key")]
        results = [
            (rid, fp, json.loads(js).get("score"), json.loads(js).get("n"))
            for rid, fp, js in con.execute(
                "SELECT run_id, grader_fp, result_json FROM results ORDER BY run_id, grader_fp"
            )
        ]
    finally:
        con.close()
    assert runs == PINNED_RUNS
    assert (len(keys), hashlib.sha256("\n".join(keys).encode()).hexdigest()) == PINNED_CALLS
    assert results == PINNED_RESULTS
