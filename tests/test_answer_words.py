"""The report and the viewer say in words what was read from each answer and what it was scored
against: a log-probability answer as the option chosen with its share of the options' probability
(not an empty box), a MedCalc-Bench target as its value and accepted range (not a Python dict)."""

from __future__ import annotations

import asyncio
import html
import json
import math
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from grandrounds.benchmarks.base import RunOptions
from grandrounds.cli.main import app
from grandrounds.core.records import Request
from grandrounds.run.config import RunConfig
from grandrounds.run.runner import run
from grandrounds.store import Store
from grandrounds.viewer.server import make_server
from tests.conftest import shared_file

DEMO_FILE = Path(__file__).resolve().parents[1] / "src" / "grandrounds" / "data" / "demo_exam.jsonl"
DEMO = [
    json.loads(line) for line in DEMO_FILE.read_text(encoding="utf-8").splitlines() if line.strip()
]
#: The log-probabilities the scripted model gives the options, in the order it is asked them.
LOGPROBS = (-0.4, -1.9, -2.6, -3.3)


def shares() -> list[float]:
    """Each option's share: its probability renormalised over the options (softmax), written out again."""
    p = [math.exp(x) for x in LOGPROBS]
    return [x / sum(p) for x in p]


def loglik(req: Request) -> dict[str, float]:
    return dict(zip(req.continuations, LOGPROBS))


def medcalc_answer(req: Request) -> str:
    return '{"step_by_step_thinking": "by the formula", "answer": "25.1"}'


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    with Store(path) as st:
        asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="demo",
                    model="scripted/lp",
                    options=RunOptions(answer_mode="letter-loglik", protocol="grandrounds"),
                    provider_options={"script": loglik},
                ),
            )
        )
        asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="medcalc-bench",
                    model="scripted/calc",
                    data=shared_file("medcalc-bench", "test_data.csv"),
                    limit=2,
                    options=RunOptions(protocol="grandrounds"),
                    provider_options={"script": medcalc_answer},
                ),
            )
        )
    return path


def expected_read(question: dict[str, Any]) -> str:
    s = shares()
    key = question["answer_idx"]
    tail = "; the key" if key == "A" else f"; the key is {key} ({100 * s['ABCD'.index(key)]:.1f}%)"
    return (
        f"chose A ({100 * s[0]:.1f}% of the options' probability); next B ({100 * s[1]:.1f}%){tail}"
    )


MEDCALC_TARGET = "25.238 (a decimal; accepted from 23.9761 to 26.4999)"


def test_report_says_what_was_read_and_the_target_as_a_value(db: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    r = CliRunner().invoke(app, ["report", "--out", str(out), "--store", str(db)])
    assert r.exit_code == 0, r.output
    page = html.unescape(out.read_text(encoding="utf-8"))
    for q in DEMO:
        assert f"Read: {expected_read(q)}" in page
    assert f"Target: {MEDCALC_TARGET}" in page
    assert "'kind'" not in page and "'lower_text'" not in page, (
        "no target is shown as a Python dict"
    )


@pytest.fixture
def viewer(db: Path) -> Iterator[str]:
    srv = make_server(db, port=0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def get(base: str, path: str) -> Any:
    with urllib.request.urlopen(base + path) as r:
        return json.load(r)


def test_viewer_says_what_was_read_and_the_target_as_a_value(viewer: str) -> None:
    items = get(viewer, "/api/items?per_page=100")["items"]
    seen = 0
    for it in items:
        d = get(viewer, f"/api/item/{it['id']}")
        [answer] = d["answers"]
        if d["benchmark"] == "demo":
            q = next(
                q
                for q in DEMO
                if q["question"] in json.dumps(d["sample"]["messages"], ensure_ascii=False)
            )
            assert answer["text"] is None and answer["read"] == expected_read(q)
            seen += 1
        elif d["sample"]["id"] == "1":
            assert d["sample"]["target_text"] == MEDCALC_TARGET and answer["read"] is None
            seen += 1
    assert seen == len(DEMO) + 1
    page = urllib.request.urlopen(viewer + "/app.js").read().decode()
    assert "'Read: ' + a.read" in page and "s.target_text" in page
