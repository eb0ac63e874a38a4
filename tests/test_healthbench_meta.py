"""``grandrounds validate-judge healthbench-meta`` against openai/simple-evals' own meta-evaluation code.

The official ``healthbench_meta_eval.py`` (../shared/reference/simple-evals) is loaded with
``tests.official.load_official``; its grader sampler is simple-evals' ``ChatCompletionSampler`` with
the OpenAI client replaced by a recording fake. Rows are generated in the meta-eval format (the
public 29,511-row file is not reachable here): conversations with several rubric rows each,
categories named like HealthBench clusters, 1 to 5 physician labels per row from a pool of
physicians, one of whom only ever says "met" (so some figures are undefined for them).

- Arithmetic: ``compute_metrics_for_rater_by_class`` and ours on 400 generated rater/label sets.
- End to end: the same rows judged by the official ``HealthBenchMetaEval.__call__`` and by our
  ``validate`` with a judge following the same rule: judge prompts byte for byte, every judge and
  physician figure, and ``aggregate_results``' mean / n_samples / bootstrap_std (same seed).
- Through the CLI: a loopback judge, cached re-runs, failed calls counted and retried, a bad row
  named by its line, and the measured agreement beside HealthBench scores judged by that judge.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import random
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from grandrounds.analyses.judge_agreement import (
    judge_interval,
    judge_metrics,
    physician_metrics,
    rater_metrics,
    reference_keys,
    reference_row_stats,
)
from grandrounds.analyses.judge_meta_rows import META_FILE, load_rows, select_rows
from grandrounds.analyses.judge_validation import (
    MetaPrompts,
    ValidateConfig,
    agreement_notes,
    validate,
)
from grandrounds.core.records import Request
from grandrounds.core.registry import PROVIDERS
from grandrounds.providers.scripted import ScriptedProvider
from grandrounds.store import Store
from grandrounds.testing import Fault, LoopbackServer
from tests.conftest import offline_env, reference_file
from tests.official import load_official
from tests.test_healthbench_reference import (
    EvalResult,
    FakeOpenAI,
    SingleEvalResult,
    official,
    official_sampler,
)
from tests.test_resume_and_bad_input import ROOT

SEED = 20250507
CATEGORIES = (
    "cluster:hedging_no-uncertainty_hedges",
    "cluster:emergency_referrals_emergent_emergency_behavior",
    "cluster:communication_health-professional_tailored",
    "cluster:context_seeking_not-enough-context_context_seeking",
    "cluster:global_health_context-matters-but-unclear_language",
    "cluster:complex_responses_detailed_appropriate",
)
#: A physician who labels every row they see "met": their precision_neg and balanced figures do not exist.
ALWAYS_MET = "phys-yes"


# ---- generated rows ---------------------------------------------------------------------------------


def _h(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:4], "big")


def make_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` meta-eval rows: about three rubric rows per conversation and completion."""
    rng = random.Random(seed)
    physicians = [f"phys-{i:02d}" for i in range(24)] + [ALWAYS_MET]
    rows = []
    convo: list[dict[str, str]] = []
    completion = ""
    for i in range(n):
        if i % 3 == 0 or not convo:
            convo = [
                {
                    "role": "user",
                    "content": f"Case {i}: my child has had a fever for {rng.randint(1, 9)} days. What should I do?",
                }
            ]
            if rng.random() < 0.3:
                convo += [
                    {"role": "assistant", "content": "How old is your child?"},
                    {"role": "user", "content": f"{rng.randint(1, 12)} years."},
                ]
            completion = (
                f"Completion {i}: keep them hydrated; see a doctor if the fever passes 3 days."
                + " More detail." * rng.randint(0, 5)
            )
        k = rng.choice((1, 2, 2, 3, 3, 3, 4, 5))
        ids = rng.sample(physicians, k)
        truth = rng.random()
        labels = [True if pid == ALWAYS_MET else rng.random() < truth for pid in ids]
        rows.append(
            {
                "prompt": convo,
                "completion": completion,
                "rubric": f"[{rng.choice((5, 7, -5, 10))}] Criterion {i}: advises a doctor's visit within {rng.randint(1, 4)} days.",
                "category": rng.choice(CATEGORIES),
                "binary_labels": labels,
                "anonymized_physician_ids": ids,
            }
        )
    return rows


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    return path


def judge_met(rubric: str) -> bool:
    return _h(rubric) % 5 < 3


REPLIES = (
    '```json\n{{\n  "explanation": "by rule",\n  "criteria_met": {met}\n}}\n```',
    '{{"explanation": "by rule", "criteria_met": {met}}}',
    '```json{{"criteria_met": {met}}}```',
)


def judge_reply(prompt: str, garble: bool = False) -> str:
    """The judge's rule, read from the official prompt (or ours): met for three rubric texts in five."""
    m = re.search(r"# Rubric item\n(.*?)\n\n# (?:Instructions|How to judge)", prompt, re.S)
    assert m, "a judge prompt without a rubric item"
    rubric = m.group(1)
    if garble and _h(rubric) % 7 == 0:
        return "I cannot tell."
    return REPLIES[_h(rubric) % 3].format(met=json.dumps(judge_met(rubric)))


RECEIVED: list[list[tuple[str, str]]] = []


class MetaBot(ScriptedProvider):
    """A scripted judge (the runner builds judges from their spec alone, so the script is fixed here)."""

    def __init__(self, spec: Any, **options: Any) -> None:
        def script(req: Request) -> str:
            RECEIVED.append([(m.role, m.content) for m in req.messages])
            return judge_reply(req.messages[-1].content, garble=req.model == "garbler")

        super().__init__(spec, script=script, **options)


# ---- the official code ------------------------------------------------------------------------------


@functools.cache
def official_meta() -> SimpleNamespace:
    hb = official()  # GRADER_TEMPLATE, parse_json_to_dict, the chat sampler with its fake client
    common = load_official(
        "simple-evals/common.py",
        ["_compute_stat", "aggregate_results", "map_with_progress"],
        {"EvalResult": EvalResult, "SingleEvalResult": SingleEvalResult},
    )
    renderer = SimpleNamespace(
        from_string=lambda template: SimpleNamespace(render=lambda **kw: "")
    )  # HTML is not compared
    fake_common = SimpleNamespace(
        HTML_JINJA="",
        jinja_env=renderer,
        aggregate_results=common.aggregate_results,
        map_with_progress=common.map_with_progress,
    )
    return load_official(
        "simple-evals/healthbench_meta_eval.py",
        [
            "INDEX_STR_TEMPLATE",
            "CLUSTER_STR_TEMPLATE",
            "HEALTHBENCH_META_HTML_JINJA",
            "HealthBenchMetaEval",
            "compute_metrics_for_rater_by_class",
            "get_f1_metrics",
            "compute_f1_metric",
            "get_balanced_metrics",
            "compute_balanced_metric",
            "INPUT_PATH",
        ],
        {
            "common": fake_common,
            "GRADER_TEMPLATE": hb.GRADER_TEMPLATE,
            "parse_json_to_dict": hb.parse_json_to_dict,
            "Eval": object,
            "EvalResult": EvalResult,
            "SingleEvalResult": SingleEvalResult,
            "SamplerBase": object,
        },
    )


def run_official(
    rows: list[dict[str, Any]], garble: bool = False
) -> tuple[Any, list[list[dict[str, str]]]]:
    """``HealthBenchMetaEval.__call__`` over ``rows`` (its __init__ reads the blob URL, so the rows are set
    directly), with simple-evals' grader sampler; returns the result and the messages each call sent."""
    o = official_meta()
    ev = o.HealthBenchMetaEval.__new__(o.HealthBenchMetaEval)
    # the sampler under evaluation is the grader (``simple_evals --eval=healthbench_meta --model=gpt-4.1``)
    grader = official_sampler("gpt-4.1-2025-04-14", max_tokens=2048)
    ev.examples, ev.n_threads, ev.grader_model = rows, 1, None
    FakeOpenAI.log, FakeOpenAI.reply = (
        [],
        staticmethod(lambda messages: judge_reply(messages[-1]["content"], garble)),
    )
    np.random.seed(SEED)  # aggregate_results draws from the global state
    old = os.environ.get("debug")
    os.environ["debug"] = "1"  # map_with_progress in order, in this thread
    try:
        result = ev(grader)
    finally:
        if old is None:
            del os.environ["debug"]
    return result, [c["messages"] for c in FakeOpenAI.log]


def run_ours(path: Path, store: Path, judge: str = "metabot/gpt-4.1-2025-04-14", **kw: Any) -> Any:
    RECEIVED.clear()
    with PROVIDERS.registered("metabot", MetaBot), Store(store) as st:
        return asyncio.run(validate(st, ValidateConfig(judge=judge, data=path, seed=SEED, **kw)))


# ---- the arithmetic ---------------------------------------------------------------------------------


def test_metric_functions_equal_the_reference_on_generated_raters():
    """400 generated (labels, other labels, categories) sets, as judge and as physician: every key and
    every figure of compute_metrics_for_rater_by_class equals ours, bit for bit."""
    o = official_meta()
    rng = random.Random(SEED)
    keys = bits = undefined_keys = 0
    for trial in range(400):
        n = rng.randint(1, 80)
        cats = [rng.choice(CATEGORIES) for _ in range(n)]
        p_self = rng.choice(
            (0.0, 1.0, rng.random())
        )  # all met / all unmet: some classes have no pairs
        selves = [rng.random() < p_self for _ in range(n)]
        others = [[rng.random() < 0.5 for _ in range(rng.randint(0, 4))] for _ in range(n)]
        rater = ("model", "physician")[trial % 2]
        theirs = o.compute_metrics_for_rater_by_class(
            self_pred_list=selves,
            other_preds_list=others,
            cluster_list=cats,
            model_or_physician=rater,
        )
        ours = reference_keys(rater_metrics(selves, others, cats), rater)
        assert ours.keys() == theirs.keys()
        for k, v in theirs.items():
            assert ours[k]["n"] == v["n"] and (
                ours[k]["value"] == v["value"] or abs(ours[k]["value"] - v["value"]) <= 1e-12
            ), k
            bits += ours[k] == v
        keys += len(theirs)
        undefined_keys += sum(
            1
            for c in CATEGORIES
            for m in ("f1_balanced",)
            if f"{c}: pairwise_{rater}_{m}" not in theirs
        )
    assert bits == keys and undefined_keys > 0
    print(
        f"\nagreement arithmetic: {keys} figures over 400 rater sets equal compute_metrics_for_rater_by_class bit for bit "
        f"({undefined_keys} category balanced F1s undefined in both)"
    )


def test_row_selection_is_the_reference_sample(tmp_path):
    rows = make_rows(120, 1)
    path = write_rows(tmp_path / "meta.jsonl", rows)
    ours = select_rows(load_rows(path), 25)
    # HealthBenchMetaEval.__init__: rng = random.Random(0); examples = rng.sample(examples, num_examples)
    theirs = random.Random(0).sample(rows, 25)
    assert [r.rubric for r in ours] == [t["rubric"] for t in theirs]
    assert [r.rubric for r in select_rows(load_rows(path), 500)] == [t["rubric"] for t in rows]


# ---- end to end against HealthBenchMetaEval ---------------------------------------------------------


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    folder = tmp_path_factory.mktemp("meta")
    rows = make_rows(360, SEED)
    path = write_rows(folder / "meta.jsonl", rows)
    ours = run_ours(path, folder / "s.db")
    received = list(RECEIVED)
    theirs, sent = run_official(rows)
    return SimpleNamespace(
        rows=rows,
        path=path,
        ours=ours,
        received=received,
        theirs=theirs,
        sent=sent,
        store=folder / "s.db",
    )


def test_judge_prompts_are_what_simple_evals_sends(both):
    assert len(both.sent) == len(both.received) == 360
    theirs = sorted(json.dumps([[m["role"], m["content"]] for m in call]) for call in both.sent)
    ours = sorted(json.dumps([list(m) for m in call]) for call in both.received)
    assert theirs == ours
    assert both.received[0][0][0] == "system" and "# Rubric item\n[" in both.received[0][1][1]
    print(
        f"\nmeta-eval judge prompts byte-identical to HealthBenchMetaEval's sampler calls: {len(ours)}/{len(theirs)}"
    )


def test_every_figure_equals_healthbench_meta_eval(both):
    o_model = both.theirs.metadata["model_agreement_metrics"]
    o_phys = both.theirs.metadata["physician_agreement_metric_lists"]
    rows = load_rows(both.path)
    labels = both.ours.labels
    assert all(x is not None for x in labels)
    ours_model = reference_keys(judge_metrics(rows, labels), "model")
    assert ours_model == o_model
    per = physician_metrics(rows)
    n_phys_figs = 0
    for pid, m in per.items():
        mine = reference_keys(m, "physician")
        theirs = {k: v[pid] for k, v in o_phys.items() if pid in v}
        assert mine == theirs, pid
        n_phys_figs += len(mine)
    assert set(per) == {pid for v in o_phys.values() for pid in v}
    assert "pairwise_physician_f1_balanced" not in reference_keys(per[ALWAYS_MET], "physician")
    # the headline and the stored record
    assert (
        both.theirs.score
        == both.ours.record.summary["f1_balanced"]
        == o_model["pairwise_model_f1_balanced"]["value"]
    )
    stored = both.ours.record.metrics["judge"]
    assert stored["overall"]["f1_balanced"]["value"] == both.theirs.score
    print(
        f"\njudge: {len(o_model)} figures equal, balanced F1 {both.theirs.score:.6f}; physicians: {len(per)} physicians, "
        f"{n_phys_figs} figures equal (bit for bit)"
    )


def test_reference_bootstrap_equals_aggregate_results(both):
    """mean, n_samples and bootstrap_std of every per-row metric (and score), same seed: equal."""
    rows = load_rows(both.path)
    stats = reference_row_stats(rows, both.ours.labels, seed=SEED)
    m = both.theirs.metrics
    n = bits = 0
    for name, s in stats.items():
        if (
            name != "score"
        ):  # score's mean became EvalResult.score, then the balanced F1 replaced it
            assert s["mean"] == m[name], name
        assert s["n_samples"] == m[f"{name}:n_samples"], name
        assert abs(s["bootstrap_std"] - m[f"{name}:bootstrap_std"]) <= 1e-12, name
        bits += s["bootstrap_std"] == m[f"{name}:bootstrap_std"]
        n += 1
    assert {k for k in m if k.endswith(":bootstrap_std")} == {f"{k}:bootstrap_std" for k in stats}
    print(
        f"\nreference bootstrap: {n} per-row metrics x (mean, n_samples, bootstrap_std) equal aggregate_results "
        f"with the same seed ({bits} std bit for bit)"
    )


def test_interval_is_seeded_and_brackets_the_figure(both):
    rows = load_rows(both.path)
    a = judge_interval(rows, both.ours.labels, seed=3)
    assert a == judge_interval(rows, both.ours.labels, seed=3)
    lo, hi = a["overall"]
    assert lo < both.ours.record.summary["f1_balanced"] < hi and hi - lo < 0.3
    assert a["n_conversations"] == 120
    assert (
        both.ours.record.summary["ci95"]
        == judge_interval(rows, both.ours.labels, seed=SEED)["overall"]
    )


def test_unreadable_replies_are_unknown_counted_and_left_out(tmp_path):
    """A judge that garbles one item in seven: after the re-asks those rows are unknown, counted, and
    left out; the figures equal the official ones over the rows it could label."""
    rows = make_rows(150, 7)
    path = write_rows(tmp_path / "meta.jsonl", rows)
    out = run_ours(path, tmp_path / "s.db", judge="metabot/garbler", max_reask=1)
    s = out.record.summary
    garbled = [r for r in rows if _h(r["rubric"]) % 7 == 0]
    assert (
        s["n_unknown"] == len(garbled) > 0
        and s["n_failed"] == 0
        and s["n_judged"] == 150 - len(garbled)
    )
    assert len(RECEIVED) == 150 + len(garbled)  # one re-ask each
    kept = [r for r in rows if _h(r["rubric"]) % 7 != 0]
    theirs, _ = run_official(kept)
    assert (
        reference_keys(judge_metrics(load_rows(path), out.labels), "model")
        == theirs.metadata["model_agreement_metrics"]
    )


# ---- the store and the CLI --------------------------------------------------------------------------


def gr(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {
        "PYTHONPATH": str(ROOT / "src"),
        "PATH": "/usr/bin:/bin",
        "HOME": str(ROOT),
        **offline_env(),
        **(env or {}),
    }
    return subprocess.run(
        [sys.executable, "-m", "grandrounds", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def http_rule(state: dict[str, Any]):
    def rule(body: dict[str, Any]) -> Any:
        content = body["messages"][-1]["content"]
        if state.get("fail") and _h(content) % 4 == 0:
            return Fault("400")
        return judge_reply(content)

    return rule


def test_cli_validates_caches_counts_failures_and_retries(tmp_path):
    rows = make_rows(90, 11)
    path = write_rows(tmp_path / "meta.jsonl", rows)
    db = tmp_path / "s.db"
    state = {"fail": True}
    with LoopbackServer(http_rule(state)) as judge:
        spec = f"openai/judge-a@{judge.base_url}"
        r = gr(
            "validate-judge",
            "healthbench-meta",
            "--judge",
            spec,
            "--data",
            str(path),
            "--store",
            str(db),
            "--out",
            str(tmp_path / "a.json"),
        )
        assert r.returncode == 0, r.stderr
        first = judge.stats.requests
        doc = json.loads((tmp_path / "a.json").read_text())
        failed = doc["summary"]["n_failed"]
        assert (
            failed > 0
            and doc["summary"]["n_unknown"] == failed
            and doc["summary"]["n_judged"] == 90 - failed
        )
        out, err = " ".join(r.stdout.split()), " ".join(r.stderr.split())
        assert "retries failed calls" in err and f"{failed} failed calls" in err
        assert (
            "F1 balanced" in out
            and "physicians (mean of 25)" in out
            and f"judged {90 - failed}, unknown {failed}" in out
        )
        state["fail"] = False
        r = gr(
            "validate-judge",
            "healthbench-meta",
            "--judge",
            spec,
            "--data",
            str(path),
            "--store",
            str(db),
            "--out",
            str(tmp_path / "b.json"),
        )
        assert r.returncode == 0, r.stderr
        assert judge.stats.requests - first == failed  # only the failed rows are asked again
        doc = json.loads((tmp_path / "b.json").read_text())
        assert doc["summary"]["n_unknown"] == 0 and doc["summary"]["n_judged"] == 90
        again = judge.stats.requests
        r = gr(
            "validate-judge",
            "healthbench-meta",
            "--judge",
            spec,
            "--data",
            str(path),
            "--store",
            str(db),
            "--limit",
            "30",
        )
        assert (
            r.returncode == 0 and judge.stats.requests == again
        )  # a subset: every reply from the store
    with sqlite3.connect(db) as con:
        recs = con.execute(
            "SELECT judge, n_rows, dataset_sha256, judge_params_json FROM judge_agreement ORDER BY n_rows"
        ).fetchall()
    assert [(j, n) for j, n, _, _ in recs] == [
        ("openai/judge-a", 30),
        ("openai/judge-a", 90),
    ]  # the first record was replaced
    assert recs[0][2] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (
        json.loads(recs[0][3])["temperature"] == 0.5
        and json.loads(recs[0][3])["max_tokens"] == 2048
    )
    # the stored figures are the reference's over the same rows and labels
    theirs, _ = run_official(rows)
    assert doc["summary"]["f1_balanced"] == theirs.score


def test_cli_exit_3_when_every_judge_call_fails_and_bad_rows_are_named(tmp_path):
    path = write_rows(tmp_path / "meta.jsonl", make_rows(12, 3))
    with LoopbackServer(lambda b: Fault("400")) as judge:
        r = gr(
            "validate-judge",
            "healthbench-meta",
            "--judge",
            f"openai/j@{judge.base_url}",
            "--data",
            str(path),
            "--store",
            str(tmp_path / "s.db"),
        )
    assert r.returncode == 3, r.stderr
    assert "no row could be judged" in r.stderr
    bad = make_rows(5, 4)
    bad[3]["anonymized_physician_ids"] = bad[3]["anonymized_physician_ids"][:-1] + ["x", "y"]
    r = gr(
        "validate-judge",
        "healthbench-meta",
        "--judge",
        "openai/j@http://127.0.0.1:9/v1",
        "--data",
        str(write_rows(tmp_path / "bad.jsonl", bad)),
        "--store",
        str(tmp_path / "s.db"),
    )
    assert r.returncode == 2
    assert re.search(
        r"error: .*bad\.jsonl, line 4: \d+ binary_labels but \d+ anonymized_physician_ids", r.stderr
    ), r.stderr
    r = gr("validate-judge", "nope", "--store", str(tmp_path / "s.db"))
    assert r.returncode == 2 and "unknown validation set 'nope'" in r.stderr


def write_healthbench(path: Path, n: int) -> Path:
    rows = []
    for i in range(n):
        rows.append(
            {
                "prompt_id": f"p{i}",
                "prompt": [{"role": "user", "content": f"Question {i} about a rash?"}],
                "rubrics": [
                    {
                        "criterion": f"Criterion {i}-{k}: mentions skin care.",
                        "points": p,
                        "tags": ["axis:accuracy"],
                    }
                    for k, p in enumerate((5, 3, -2))
                ],
                "example_tags": ["theme:hedging"],
                "ideal_completions_data": None,
            }
        )
    return write_rows(path, rows)


def test_agreement_is_shown_beside_healthbench_scores_of_that_judge(tmp_path):
    meta = write_rows(tmp_path / "meta.jsonl", make_rows(60, 5))
    hb = write_healthbench(tmp_path / "hb.jsonl", 6)
    db = tmp_path / "s.db"
    with (
        LoopbackServer(http_rule({})) as judge,
        LoopbackServer(lambda b: "Keep the skin clean.") as cand,
    ):
        common = [
            "--data",
            str(hb),
            "--model",
            "openai/cand",
            "--base-url",
            cand.base_url,
            "--store",
            str(db),
        ]
        r = gr(
            "validate-judge",
            "healthbench-meta",
            "--judge",
            f"openai/judge-a@{judge.base_url}",
            "--data",
            str(meta),
            "--store",
            str(db),
        )
        assert r.returncode == 0, r.stderr
        r = gr("run", "healthbench", *common, "--judge", f"openai/judge-a@{judge.base_url}")
        assert r.returncode == 0, r.stderr
        r = gr(
            "run",
            "healthbench",
            *common,
            "--judge",
            f"openai/judge-a@{judge.base_url}",
            "--judge-temperature",
            "0",
        )
        assert r.returncode == 0, r.stderr
        r = gr("run", "healthbench", *common, "--judge", f"openai/judge-b@{judge.base_url}")
        assert r.returncode == 0, r.stderr
    with Store(db) as st:
        [rec] = st.agreements()
        results = [(rj["judge"], rj["fingerprint"]) for _, _, rj in st.results()]
    f1, md = rec.summary["f1_balanced"], rec.summary["physician_f1_balanced_mean"]
    notes = {
        (j, fp["judges"][0]["params"]["temperature"]): agreement_notes("healthbench", fp, [rec])
        for j, fp in results
    }
    assert [n.exact for n in notes[("openai/judge-a", 0.5)]] == [True]
    assert [(n.exact, n.why_not_exact) for n in notes[("openai/judge-a", 0.0)]] == [
        (False, "other generation settings")
    ]
    assert notes[("openai/judge-b", 0.5)] == []
    shown = f"F1 {f1:.3f} (MDs {md:.3f})"
    r = gr("leaderboard", "--store", str(db), "--no-breakdowns", env={"COLUMNS": "400"})
    assert r.returncode == 0, r.stderr
    lines = {ln for ln in r.stdout.splitlines() if "openai/judge-" in ln}
    assert "judge agreement" in r.stdout and "balanced (macro) F1 against physicians" in r.stdout
    assert sorted(("judge-a" in ln, shown + " *" in ln, shown in ln) for ln in lines) == [
        (False, False, False),
        (True, False, True),
        (True, True, True),
    ]
    r = gr("report", "--store", str(db), "--format", "html", "--out", str(tmp_path / "r.html"))
    assert r.returncode == 0, r.stderr
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert (
        html.count(f"<td>{shown}</td>") == 1
        and html.count(f"<td>{shown} *</td>") == 1
        and "<th>judge agreement</th>" in html
    )


def test_meta_file_is_the_one_simple_evals_names():
    o = official_meta()
    assert META_FILE.url == o.INPUT_PATH
    pinned = reference_file("SOURCES.tsv").read_text(encoding="utf-8")
    assert "healthbench_meta_eval.py\t2e7ff3ce" in pinned
    prompts = MetaPrompts("reference")
    assert prompts.grader.official_template == official().GRADER_TEMPLATE
