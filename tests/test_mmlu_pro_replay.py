"""MMLU-Pro health: real published replies replayed through the CLI.

``../shared/data/mmlu-pro-health/published/`` holds gpt-4o's and deepseek's replies to the 818 health
questions as MMLU-Pro's authors published them (TIGER-AI-Lab/MMLU-Pro @ ff991b5). A scripted loopback
server answers each request with the recorded reply of the item it asks; every reading stored by the
run must equal the pinned ``evaluate_from_api.py`` reader (executed from the pinned file) run on the
same reply. The test also counts how many differ from the ``pred`` the authors' 2024 scripts recorded,
and checks why: those scripts read only ``answer is (X)`` in the raw reply (no ``**`` removed, no
``Answer: X`` or last-letter fallback), so every difference is a reply they read as nothing."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from grandrounds.cli.main import app
from grandrounds.testing import LoopbackServer
from tests.conftest import shared_file
from tests.official import load_official

PRO = "mmlu-pro/evaluate_from_api.py"
#: The one pattern the authors' 2024 scripts (run_gpt4o.py, run_deepseek.py at ff991b5) read.
OLD_PATTERN = re.compile(r"answer is \(?([A-J])\)?")


def published() -> dict[str, dict[str, dict]]:
    path = shared_file("mmlu-pro-health", "published", "gpt4o_deepseek_health.jsonl.gz")
    out: dict[str, dict[str, dict]] = {}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            out.setdefault(rec["run"], {})[str(rec["id"])] = rec
    return out


def question_of(prompt: str) -> str:
    """The asked question's block (question and options) in a zero-shot reference prompt."""
    return prompt.rsplit("Question: ", 1)[1]


@pytest.mark.parametrize("run", ["gpt4o", "deepseek"])
def test_published_replies_read_as_the_pinned_reader_reads_them(tmp_path: Path, run: str) -> None:
    replies = published()[run]
    rows = [
        json.loads(x)
        for x in shared_file("mmlu-pro-health", "test.jsonl").read_text("utf-8").splitlines()
    ]
    # the block each item's prompt ends with, as format_example writes it (checked against the run's prompts below)
    block = {
        str(r["realidx"]): f"{r['question']}\nOptions: "
        + "".join(f"{k}. {v}\n" for k, v in r["options"].items())
        + "Answer: Let's think step by step.\n\n"
        for r in rows
    }
    served: dict[
        str, str
    ] = {}  # prompt block -> the reply of the first item (in data order) that has one
    for r in rows:
        rid = str(r["realidx"])
        if rid in replies:
            served.setdefault(block[rid], replies[rid]["reply"])

    def rule(body: dict) -> str:
        return served.get(question_of(body["messages"][0]["content"]), "no recorded reply")

    out = tmp_path / "out"
    with LoopbackServer(rule) as srv:
        args = ["run", "mmlu-pro-health", "--param", "shots=0", "--model", f"openai/{run}"]
        args += ["--data", str(shared_file("mmlu-pro-health", "test.jsonl"))]
        args += ["--base-url", srv.base_url, "--store", str(tmp_path / "s.db"), "--out", str(out)]
        r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 0, (r.output, r.exception)
    lines = [json.loads(x) for x in (out / "samples.jsonl").read_text("utf-8").splitlines()]
    assert len(lines) == 818
    ns = load_official(PRO, ["extract_answer", "extract_again", "extract_final"])
    differ, vs_2024, why = 0, 0, Counter()
    own = 0
    for line in lines:
        rid = line["sample_id"]
        assert question_of(line["prompt"][0]["content"]) == block[rid]
        reply = line["response"]
        with contextlib.redirect_stdout(io.StringIO()):  # the official reader prints as it goes
            official = ns.extract_answer(reply.replace("**", ""))
        differ += line["extracted"] != official
        rec = replies.get(rid)
        if rec is None or rec["reply"] != reply:
            continue  # an item the authors' file lacks, or one sharing an earlier item's prompt
        own += 1
        if official != rec["pred"]:
            vs_2024 += 1
            old = m.group(1) if (m := OLD_PATTERN.search(reply)) else None
            why[
                "2024: only 'answer is (X)' in the raw reply, read nothing"
                if old == rec["pred"] is None and official is not None
                else "other"
            ] += 1
    assert differ == 0  # every reading equals the pinned reader on the same reply
    assert set(why) <= {"2024: only 'answer is (X)' in the raw reply, read nothing"}
    result = json.loads((out / "results.json").read_text())["results"][0]
    right = sum(1 for x in lines if x["score"] == 1.0)
    assert result["score"] == pytest.approx(right / 818)
    # over the whole published file (each reply read alone, not through the run): the same reason
    every = 0
    for rec in replies.values():
        with contextlib.redirect_stdout(io.StringIO()):
            every += ns.extract_answer(rec["reply"].replace("**", "")) != rec["pred"]
    assert vs_2024 > 0 and every == {"gpt4o": 62, "deepseek": 83}[run]
    print(
        f"{run}: {818 - differ}/818 readings equal the pinned extract_answer; {vs_2024} of {own} "
        f"items served their own reply read otherwise than the authors' 2024 pred ({dict(why)}); "
        f"{every} of the file's {len(replies)}; accuracy {result['score']:.3f}"
    )
