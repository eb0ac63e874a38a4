"""HealthBench Professional against its reference implementation (medicalsphere/HealthBench @ 0f3b62d).

The official ``healthbench/healthbench_eval.py`` (../shared/reference/healthbench-professional) is
loaded with ``tests.official.load_official``. Tasks are generated in the released format (the real
file is not reachable here): ``id``, ``conversation`` (as ``{"messages": [...]}``, the shape the
reference code reads, or as a plain list, the data card's), ``rubric_items`` with
``criterion_text`` and ``points``, ``use_case``, ``type``, ``difficulty``, ``specialty``,
``physician_response``.

- The length adjustment equals ``calculate_length_adjusted_score`` with the constants read from the
  pinned file, on 2,000 generated (score, reply) pairs.
- End to end: the official ``HealthBenchProfessionalEval`` (candidate through simple-evals' chat
  sampler with a fake client, grader a fake Responses sampler) and our runner grade the same tasks
  with a judge following the same rule: judge prompts byte for byte, per-example adjusted scores,
  and every aggregate metric (mean, n_samples, bootstrap_std with the same seed), clipping included.
- A scripted judge run under ``grandrounds`` with unreadable replies: headline and breakdowns
  recomputed independently from the generated verdicts.
- The CLI runs a file in the released format with ``--data``.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.healthbench_professional import FAMILIES, HealthBenchProfessional
from grandrounds.core.records import Request
from grandrounds.core.registry import PROVIDERS
from grandrounds.graders.judging import marked_answer
from grandrounds.providers.scripted import ScriptedProvider
from grandrounds.run.config import JudgeConfig, RunConfig
from grandrounds.run.runner import run
from grandrounds.scoring.healthbench import length_adjusted
from grandrounds.sources.healthbench_professional import (
    JUDGE_MODEL,
    JUDGE_REASONING_EFFORT,
    PRO_EVAL,
    PRO_GRADER_TEMPLATE,
    PRO_README,
    REFERENCE,
    length_settings,
)
from grandrounds.sources.upstream import read_text
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer
from tests.conftest import offline_env, reference_file
from tests.official import load_official
from tests.test_healthbench_reference import (
    EvalResult,
    FakeOpenAI,
    SamplerResponse,
    SingleEvalResult,
    official_sampler,
)
from tests.test_resume_and_bad_input import ROOT

SEED = 20260305
SPECIALTIES = ("Cardiology", "Dermatology", "Emergency Medicine", "Pediatrics", "Oncology")


def _h(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:4], "big")


# ---- generated tasks --------------------------------------------------------------------------------


def make_tasks(
    n: int, seed: int, modes: tuple[int, ...] = (0, 0, 0, 1, 1, 2), plain_list_every: int | None = 3
) -> list[dict[str, Any]]:
    """``n`` tasks; each task's answer mode (in its first message) tells the judge how to grade it:
    0 by the criterion's hash, 1 every positive met and no negative (score 1), 2 every negative met and
    no positive (score below 0). Oncology tasks are all mode 2, so its tag metric clips to 0. Every
    ``plain_list_every``-th conversation is a plain list (the data card's shape; the reference code
    reads only ``{"messages": [...]}``)."""
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        specialty = rng.choice(SPECIALTIES if 2 in modes else SPECIALTIES[:-1])
        mode = 2 if specialty == "Oncology" else rng.choice(modes)
        messages = [
            {
                "role": "user",
                "content": f"TASK t{i} MODE={mode}: a 54-year-old with chest pain and a normal ECG; next step?",
            }
        ]
        if rng.random() < 0.3:
            messages += [
                {"role": "assistant", "content": "Is the troponin back?"},
                {"role": "user", "content": "Yes, negative twice."},
            ]
        items = [
            {
                "criterion_text": f"t{i} item {k}: recommends {rng.choice(('a stress test', 'admission', 'aspirin', 'CT angiography'))}.",
                "points": rng.choice((10, 8, 5, 3, -1, -2)),
            }
            for k in range(rng.randint(2, 7))
        ]
        if not any(it["points"] > 0 for it in items):
            items[0]["points"] = 6
        task = {
            "id": f"t{i}",
            "conversation": messages
            if plain_list_every and i % plain_list_every == 0
            else {"messages": messages},
            "rubric_items": items,
            "use_case": rng.choice(("consult", "writing", "research")),
            "type": rng.choice(("good_faith", "red_teaming")),
            "difficulty": rng.choice(("difficult", "typical")),
            "specialty": specialty,
            "physician_response": f"Physician answer for t{i}.",
        }
        tasks.append(task)
    return tasks


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    return path


def answer_for(task_line: str, short: bool = False) -> str:
    """The candidate's reply: its length set by the task, from 0 to about 9,000 characters (some with non-ASCII)."""
    tid = re.search(r"TASK (t\d+)", task_line).group(1)
    mode = re.search(r"MODE=(\d)", task_line).group(1)
    n = _h(tid) % 40 if short else _h(tid) % 9000
    body = ("Évaluer le risque; " * (n // 19 + 1))[:n] if _h(tid) % 5 == 0 else ("x" * n)
    return f"ANSWER mode={mode}\n{body}" if n else f"ANSWER mode={mode}"


def verdict(mode: int, points: int, criterion: str) -> bool:
    return (_h(criterion) % 2 == 0, points > 0, points < 0)[mode]


ITEM = re.compile(
    r"# Rubric item\n\[(-?\d+(?:\.\d+)?)\] (.*?)\n\n# (?:Instructions|How to judge)", re.S
)


def judge_reply(prompt: str, garble: bool = False) -> str:
    m = ITEM.search(prompt)
    assert m, "a judge prompt without a rubric item"
    points, criterion = int(float(m.group(1))), m.group(2)
    if garble and _h(criterion) % 6 == 0:
        return "not sure"
    answer = marked_answer(
        prompt
    )  # between the markers (ours), or where the official prompt shows it
    mode = int(
        (
            re.match(r"ANSWER mode=(\d)", answer)
            if answer is not None
            else re.search(r"assistant: ANSWER mode=(\d)", prompt)
        ).group(1)
    )
    return (
        "```json\n"
        + json.dumps({"explanation": "by rule", "criteria_met": verdict(mode, points, criterion)})
        + "\n```"
    )


SENT: list[list[tuple[str, str]]] = []


class ProBot(ScriptedProvider):
    def __init__(self, spec: Any, **options: Any) -> None:
        def script(req: Request) -> str:
            SENT.append([(m.role, m.content) for m in req.messages])
            return judge_reply(req.messages[-1].content, garble=req.model == "garbler")

        super().__init__(spec, script=script, **options)


# ---- the official code ------------------------------------------------------------------------------


class FakeResponsesGrader:
    """What ``ResponsesSampler(reasoning_model=True)`` returns: no system message added; the calls recorded."""

    def __init__(self) -> None:
        self.log: list[list[dict[str, str]]] = []

    def __call__(self, message_list: list[dict[str, str]]) -> SamplerResponse:
        self.log.append(message_list)
        return SamplerResponse(
            judge_reply(message_list[-1]["content"]), {"usage": None}, message_list
        )


@functools.cache
def official_pro() -> SimpleNamespace:
    common = load_official("simple-evals/common.py", ["map_with_progress"])
    renderer = SimpleNamespace(
        from_string=lambda template: SimpleNamespace(render=lambda **kw: "")
    )  # HTML is not compared
    fake_common = SimpleNamespace(
        HTML_JINJA="", jinja_env=renderer, map_with_progress=common.map_with_progress
    )
    return load_official(
        "healthbench-professional/healthbench/healthbench_eval.py",
        [
            "GRADER_TEMPLATE",
            "HEALTHBENCH_HTML_JINJA",
            "parse_json_to_dict",
            "RubricItem",
            "calculate_length_adjusted_score",
            "calculate_score",
            "get_usage_dict",
            "_compute_clipped_stats",
            "_aggregate_get_clipped_mean",
            "HealthBenchEval",
            "PROFESSIONAL_LENGTH_ADJUSTMENT_CENTER",
            "PROFESSIONAL_LENGTH_ADJUSTMENT_PENALTY_PER_500_CHARS",
            "_convert_professional_example",
            "HealthBenchProfessionalEval",
        ],
        {
            "common": fake_common,
            "Eval": object,
            "EvalResult": EvalResult,
            "SingleEvalResult": SingleEvalResult,
            "SamplerBase": object,
            "MessageList": list,
        },
    )


def run_official(path: Path, short: bool = False) -> SimpleNamespace:
    o = official_pro()
    grader = FakeResponsesGrader()
    ev = o.HealthBenchProfessionalEval(grader_model=grader, data_path=path, n_threads=1)
    candidate = official_sampler("candidate", max_tokens=2048)
    FakeOpenAI.log, FakeOpenAI.reply = (
        [],
        staticmethod(lambda messages: answer_for(messages[1]["content"], short)),
    )
    np.random.seed(SEED)  # _compute_clipped_stats draws from the global state
    old = os.environ.get("debug")
    os.environ["debug"] = "1"  # map_with_progress in order, in this thread
    try:
        final = ev(candidate)
    finally:
        if old is None:
            del os.environ["debug"]
    return SimpleNamespace(final=final, grader_calls=grader.log, candidate_calls=FakeOpenAI.log)


def run_ours(
    path: Path,
    store: Path,
    protocol: str = "reference",
    judge: str = f"probot/{JUDGE_MODEL}",
    short: bool = False,
    **kw: Any,
) -> Any:
    SENT.clear()
    cfg = RunConfig(
        benchmark="healthbench-professional",
        model="scripted/cand",
        data=path,
        judges=(JudgeConfig(spec=judge),),
        options=RunOptions(seed=SEED, protocol=protocol, **kw),
        provider_options={
            "script": lambda req: answer_for(
                next(m.content for m in req.messages if m.role == "user"), short
            )
        },
    )
    with PROVIDERS.registered("probot", ProBot), Store(store) as st:
        return asyncio.run(run(st, cfg))


# ---- the formula ------------------------------------------------------------------------------------


def test_length_adjustment_equals_the_reference_function():
    o = official_pro()
    center, penalty = length_settings()
    assert (
        (center, penalty)
        == (
            o.PROFESSIONAL_LENGTH_ADJUSTMENT_CENTER,
            o.PROFESSIONAL_LENGTH_ADJUSTMENT_PENALTY_PER_500_CHARS,
        )
        == (2000.0, 0.0147)
    )
    rng = random.Random(SEED)
    n = bits = 0
    for _ in range(2000):
        score = rng.choice((rng.uniform(-1.5, 1.0), 0.0, 1.0, -0.25))
        text = rng.choice(
            (
                "",
                "é",
                "x" * rng.randint(0, 12000),
                "Évaluer " * rng.randint(0, 900),
                "\U0001f600" * rng.randint(0, 300),
            )
        )
        ours = length_adjusted(score, text, center, penalty)
        theirs = o.calculate_length_adjusted_score(
            score, text, center=center, penalty_per_500_chars=penalty
        )
        n += 1
        bits += ours == theirs
    assert bits == n
    # the figures the README and the issue state: 2,000 characters, 0.0147 per 500
    assert length_adjusted(0.5, "x" * 2000, center, penalty) == 0.5
    assert length_adjusted(0.5, "x" * 2500, center, penalty) == pytest.approx(0.5 - 0.0147)
    assert length_adjusted(0.5, "", center, penalty) == pytest.approx(0.5 + 4 * 0.0147)
    print(
        f"\nlength adjustment: {bits}/{n} equal calculate_length_adjusted_score bit for bit (center {center}, penalty {penalty})"
    )


def test_reference_settings_come_from_the_pinned_files():
    o = official_pro()
    assert PRO_GRADER_TEMPLATE.load().text == o.GRADER_TEMPLATE
    readme = read_text(PRO_README)
    assert (
        f"`healthbench_professional` uses `{JUDGE_MODEL}` at {JUDGE_REASONING_EFFORT} reasoning effort"
        in readme
    )
    assert "center=2,000 chars, penalty=0.0147 per 500 chars" in readme
    assert REFERENCE.judge_model == f"openai/{JUDGE_MODEL}" and REFERENCE.judge.system is None
    assert (
        REFERENCE.settings["judge_reasoning_effort"] == "low"
        and REFERENCE.settings["judge_api"] == "responses"
    )
    sources = reference_file("SOURCES.tsv").read_text(encoding="utf-8").splitlines()
    pinned = {(c[0], c[3]): (c[1], c[2], c[4]) for c in (line.split("\t") for line in sources[1:])}
    for f in (PRO_EVAL, PRO_README):
        assert pinned[(f.folder, f.path)] == (f.repo, f.commit, f.sha256)


# ---- end to end against HealthBenchProfessionalEval ------------------------------------------------


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pro")
    path = write_jsonl(folder / "pro.jsonl", make_tasks(48, SEED, plain_list_every=None))
    ours = run_ours(path, folder / "s.db")
    sent = list(SENT)
    return SimpleNamespace(path=path, ours=ours, sent=sent, theirs=run_official(path))


def test_prompts_and_settings_are_the_reference_ones(mixed):
    theirs = sorted(
        json.dumps([[m["role"], m["content"]] for m in call]) for call in mixed.theirs.grader_calls
    )
    ours = sorted(json.dumps([list(m) for m in call]) for call in mixed.sent)
    assert theirs == ours and len(ours) == sum(
        len(t["rubric_items"]) for t in map(json.loads, mixed.path.read_text().splitlines())
    )
    assert all(
        len(call) == 1 and call[0][0] == "user" for call in mixed.sent
    )  # no system message for the grader
    # the candidate: simple-evals' chat sampler (system message, 0.5, 2,048 tokens), as our runner sends it
    assert {(c["temperature"], c["max_tokens"]) for c in mixed.theirs.candidate_calls} == {
        (0.5, 2048)
    }
    assert (REFERENCE.answer.temperature, REFERENCE.answer.max_tokens) == (0.5, 2048)
    print(
        f"\nProfessional grader prompts byte-identical to HealthBenchProfessionalEval's: {len(ours)}/{len(theirs)}"
    )


def test_per_example_scores_equal_the_reference(mixed):
    o = official_pro()
    center, penalty = length_settings()
    meta = {m["prompt_id"]: m for m in mixed.theirs.final.metadata["example_level_metadata"]}
    bits = 0
    for g in mixed.ours.grades:
        m = meta[g.sample_id]
        text = m["completion"][0]["content"]
        assert g.details["overall_score"] == m["score"]
        expected = o.calculate_length_adjusted_score(
            m["score"], text, center=center, penalty_per_500_chars=penalty
        )
        assert g.value == expected
        bits += 1
    assert bits == 48
    assert (
        min(g.value for g in mixed.ours.grades) < 0
        and max(len(meta[g.sample_id]["completion"][0]["content"]) for g in mixed.ours.grades)
        > 6000
    )


def test_every_aggregate_metric_equals_the_reference(mixed):
    final, res = mixed.theirs.final, mixed.ours.result
    m = final.metrics
    assert (
        res.score == m["overall_score_length_adjusted"]
        and res.n == m["overall_score_length_adjusted:n_samples"] == 48
    )
    assert res.extra["bootstrap_std"] == m["overall_score_length_adjusted:bootstrap_std"]
    assert res.extra["overall_score"] == final.score == m["overall_score"]
    assert res.extra["overall_score_bootstrap_std"] == m["overall_score:bootstrap_std"]
    n_tags = clipped = 0
    for fam in FAMILIES:
        for value, cell in res.breakdown[fam].items():
            assert cell.metrics["unadjusted"] == m[value], value
            assert cell.metrics["unadjusted_bootstrap_std"] == m[f"{value}:bootstrap_std"], value
            assert cell.n == m[f"{value}:n_samples"], value
            n_tags += 1
            clipped += m[value] in (0.0, 1.0)
    tags = {k for k in m if ":" not in k} - {"overall_score", "overall_score_length_adjusted"}
    assert (
        n_tags == len(tags)
        and m["Oncology"] == 0.0
        and clipped >= 1
        and 0 < res.score < res.extra["overall_score"] < 1
    )
    print(
        f"\nProfessional aggregate: adjusted {res.score:.6f} (std {res.extra['bootstrap_std']:.6f}), unadjusted "
        f"{res.extra['overall_score']:.6f}, {n_tags} tag metrics x (mean, n_samples, bootstrap_std) equal bit for bit ({clipped} clipped)"
    )


def test_adjusted_mean_clips_at_one_like_the_reference(tmp_path):
    """Short perfect answers: every example scores 1 plus a length bonus; the mean clips to 1 in both."""
    path = write_jsonl(tmp_path / "pro.jsonl", make_tasks(12, 3, modes=(1,), plain_list_every=None))
    ours = run_ours(path, tmp_path / "s.db", short=True)
    theirs = run_official(path, short=True)
    assert np.mean([g.value for g in ours.grades]) > 1.0
    assert ours.result.score == theirs.final.metrics["overall_score_length_adjusted"] == 1.0
    assert (
        ours.result.extra["bootstrap_std"]
        == theirs.final.metrics["overall_score_length_adjusted:bootstrap_std"]
        == 0.0
    )


# ---- a scripted judge under grandrounds, recomputed independently ---------------------------------


def test_grandrounds_run_breakdowns_and_unknowns(tmp_path):
    tasks = make_tasks(40, 9)
    path = write_jsonl(tmp_path / "pro.jsonl", tasks)
    out = run_ours(
        path, tmp_path / "s.db", protocol="grandrounds", judge="probot/garbler", max_reask=1
    )
    res = out.result
    center, penalty = 2000.0, 0.0147
    per: dict[str, float] = {}
    unknown = 0
    for t, g in zip(tasks, out.grades):
        mode = int(
            re.search(
                r"MODE=(\d)",
                (
                    t["conversation"]["messages"]
                    if isinstance(t["conversation"], dict)
                    else t["conversation"]
                )[0]["content"],
            ).group(1)
        )
        known = [it for it in t["rubric_items"] if _h(it["criterion_text"]) % 6 != 0]
        unknown += len(t["rubric_items"]) - len(known)
        pos = sum(it["points"] for it in known if it["points"] > 0)
        if pos == 0:
            assert g.value is None
            continue
        met = sum(it["points"] for it in known if verdict(mode, it["points"], it["criterion_text"]))
        reply = answer_for(
            f"TASK {t['id']} MODE={mode}"
        ).strip()  # grandrounds counts the answer as the judge sees it
        per[t["id"]] = met / pos - penalty * (len(reply) - center) / 500
        assert g.value == pytest.approx(per[t["id"]], abs=1e-12)
        assert g.details["response_chars"] == len(reply)
    assert unknown > 0 and res.extra["n_unknown_verdicts"] == unknown
    assert res.score == pytest.approx(float(np.clip(np.mean(list(per.values())), 0, 1)), abs=1e-12)
    assert res.n == len(per) and res.n_unscored == 40 - len(per)
    for fam in FAMILIES:
        groups: dict[str, list[float]] = {}
        for t in tasks:
            if t["id"] in per:
                groups.setdefault(t[fam], []).append(per[t["id"]])
        assert set(res.breakdown[fam]) <= {t[fam] for t in tasks}
        for value, vals in groups.items():
            cell = res.breakdown[fam][value]
            assert cell.n == len(vals) and cell.score == pytest.approx(
                float(np.clip(np.mean(vals), 0, 1)), abs=1e-12
            )
            assert cell.ci95 is not None and cell.ci95[0] <= cell.score <= cell.ci95[1]
    assert res.extra["other_protocol"]["protocol"] == "reference"
    samples = HealthBenchProfessional().load(path)
    assert (
        samples[1].metadata["physician_response"] == "Physician answer for t1."
        and samples[0].messages[0].role == "user"
    )


# ---- the CLI on a file in the released format -------------------------------------------------------


def gr(*args: str) -> subprocess.CompletedProcess:
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
        timeout=600,
    )


def test_cli_runs_a_file_with_data(tmp_path):
    path = write_jsonl(tmp_path / "healthbench_professional_eval.jsonl", make_tasks(10, 5))
    db = tmp_path / "s.db"
    with (
        LoopbackServer(
            lambda b: answer_for(next(m["content"] for m in b["messages"] if m["role"] == "user"))
        ) as cand,
        LoopbackServer(lambda b: judge_reply(b["messages"][-1]["content"])) as judge,
    ):
        r = gr(
            "run",
            "healthbench-professional",
            "--data",
            str(path),
            "--model",
            "openai/cand",
            "--base-url",
            cand.base_url,
            "--judge",
            f"openai/{JUDGE_MODEL}@{judge.base_url}",
            "--store",
            str(db),
            "--out",
            str(tmp_path / "o"),
        )
        assert r.returncode == 0, r.stderr
        assert cand.stats.requests == 10
        assert judge.stats.requests == sum(
            len(t["rubric_items"]) for t in map(json.loads, path.read_text().splitlines())
        )
    [res] = json.loads((tmp_path / "o" / "results.json").read_text())["results"]
    assert res["metric"].startswith("overall_score_length_adjusted") and set(
        res["breakdown"]
    ) == set(FAMILIES)
    assert res["fingerprint"]["protocol"]["settings"]["judge_reasoning_effort"] == "low"
    assert res["fingerprint"]["judges"][0]["params"]["temperature"] == 1.0
    r = gr(
        "run",
        "healthbench-professional",
        "--data",
        str(path),
        "--model",
        "openai/cand",
        "--judge-mode",
        "batched",
        "--store",
        str(db),
    )
    assert r.returncode == 2 and "batched" in r.stderr
    bad = make_tasks(3, 1)
    del bad[2]["rubric_items"][0]["criterion_text"]
    r = gr(
        "run",
        "healthbench-professional",
        "--data",
        str(write_jsonl(tmp_path / "bad.jsonl", bad)),
        "--model",
        "openai/cand",
        "--judge",
        "openai/j@http://127.0.0.1:9/v1",
        "--store",
        str(db),
    )
    assert r.returncode == 2 and re.search(
        r"bad\.jsonl, line 3: t2: rubric item 0 needs a string criterion_text", r.stderr
    ), r.stderr
