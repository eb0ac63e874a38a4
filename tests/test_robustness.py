"""Robustness probes on MedQA: option-order permutations, "None of the above", added distractors and
an attacker's rewrites, each paired with the unperturbed run.

The models are scripted from the prompt: one always answers the first option, one answers the first
option with a known probability (drawn from the prompt's sha256) and the correct one otherwise, so
the position bias the probes must measure is built in.

The attacker shares the runs' endpoint limits: connection slots, and the request rate when it is
the candidate's own model there (vendors limit each model apart); ``--attacker-rpm`` holds it alone.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from grandrounds.analyses.robustness import (
    Attacker,
    expand_probes,
    read_rewrite,
    rewrite_questions,
    run_probes,
    summarize_set,
)
from grandrounds.benchmarks.base import RunOptions
from grandrounds.benchmarks.demo import DemoExam
from grandrounds.benchmarks.medqa import MedQA
from grandrounds.benchmarks.probes import Probe, probe_dataset_hash, rewrites_path
from grandrounds.cli.main import app
from grandrounds.core.errors import ConfigError
from grandrounds.core.registry import PROVIDERS
from grandrounds.providers.scripted import ScriptedProvider
from grandrounds.run import limits
from grandrounds.run.config import RunConfig
from grandrounds.run.limits import EndpointLimits
from grandrounds.run.runner import run
from grandrounds.scoring.stats import wilson_ci
from grandrounds.store import Store
from grandrounds.testing import LoopbackServer
from tests.conftest import shared_file
from tests.test_rate_limits import Arrivals, most_in_window


def medqa() -> Path:
    return shared_file("medqa", "phrases_no_exclude_test.jsonl")


def records(path: Path) -> list[dict]:
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def asked_question(prompt: str) -> str:
    """The question in our generate prompt: between the instruction paragraph and the option lines."""
    return prompt.split("\n\n", 1)[1].rsplit("\n\nA. ", 1)[0]


def draw(text: str) -> float:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big") / 2**32


def positional(path: Path, p: float):
    """Answers option A with probability ``p`` (per prompt), else the option holding the right text
    (A when the right text is not shown, as under NOTA)."""
    right = {r["question"]: r["options"][r["answer_idx"]] for r in records(path)}

    def script(req):
        text = req.messages[-1].content
        if draw(text) < p:
            return "Answer: A"
        q = asked_question(text)
        truth = right.get(q) or next(
            v for k, v in right.items() if q.endswith(k)
        )  # a rewrite keeps the question at its end
        shown = text + "\n"  # option lines "K. text" (a text may hold a line break)
        return next(
            (f"Answer: {k}" for k in "ABCDEFGHIJ" if f"\n{k}. {truth}\n" in shown), "Answer: A"
        )

    return script


def probe_set(db: Path, data: Path, probes, script, limit, attacker=None, protocol="grandrounds"):
    cfg = RunConfig(
        benchmark="medqa",
        model="scripted/positional",
        data=data,
        limit=limit,
        options=RunOptions(protocol=protocol),
        provider_options={"script": script},
    )
    with Store(db) as st:
        return asyncio.run(run_probes(st, cfg, probes, attacker))


def by_position(summary):
    return {p.position: p for p in summary.position_bias.positions}


# ---- option order --------------------------------------------------------------------------------


def test_always_first_model_bias_consistency_and_drops_are_exact(tmp_path):
    data = medqa()
    raw = records(data)[:200]
    ps = probe_set(
        tmp_path / "s.db", data, expand_probes(["permute"], seeds=3), lambda req: "Answer: A", 200
    )
    assert [p for p, _ in ps.probes] == ["permute:1", "permute:2", "permute:3"]
    s = summarize_set(ps)
    perms = [o for _, o in ps.probes]
    for o in perms:  # each permuted item shows the same options, the key still on the right text
        for smp, r in zip(o.samples, raw):
            assert sorted(smp.choices.values()) == sorted(r["options"].values())
            assert smp.choices[smp.target] == r["options"][r["answer_idx"]]
    assert any(
        o.samples[i].choices != ps.baseline.samples[i].choices for o in perms for i in range(200)
    )

    keyed_a = [sum(r["answer_idx"] == "A" for r in raw)] + [
        sum(smp.target == "A" for smp in o.samples) for o in perms
    ]
    pos = by_position(s)
    assert pos["A"].chosen == 1.0 and pos["A"].attraction == 1.0 and pos["A"].accuracy_keyed == 1.0
    assert all(
        pos[k].chosen == 0.0 and pos[k].attraction == 0.0 and pos[k].accuracy_keyed == 0.0
        for k in "BCD"
    )
    assert pos["A"].keyed == pytest.approx(sum(keyed_a) / 800) and pos["A"].n_answers == 800
    assert s.baseline_accuracy == pytest.approx(keyed_a[0] / 200)

    for d, o, k in zip(
        s.drops, perms, keyed_a[1:]
    ):  # always-A is right exactly where the key sits at A
        assert (d.probed, d.drop) == (pytest.approx(k / 200), pytest.approx((keyed_a[0] - k) / 200))
        right_to_wrong = sum(
            r["answer_idx"] == "A" and smp.target != "A" for r, smp in zip(raw, o.samples)
        )
        wrong_to_right = sum(
            r["answer_idx"] != "A" and smp.target == "A" for r, smp in zip(raw, o.samples)
        )
        assert d.mcnemar[:2] == (right_to_wrong, wrong_to_right)
        assert d.ci95[0] <= d.drop <= d.ci95[1] and d.n_paired == 200
    assert s.drops[-1].probe == "permute (mean of 3)"

    same_first = sum(
        len({r["options"]["A"], *(o.samples[i].choices["A"] for o in perms)}) == 1
        for i, r in enumerate(raw)
    )
    c = s.consistency
    assert (c.n_orders, c.n, c.n_consistent) == (4, 200, same_first) and c.ci95 == wilson_ci(
        same_first, 200
    )


def test_random_positional_model_bias_is_recovered_within_its_ci(tmp_path):
    data = medqa()
    p = 0.3
    ps = probe_set(
        tmp_path / "s.db", data, expand_probes(["permute"], seeds=3), positional(data, p), 300
    )
    pos = by_position(summarize_set(ps))
    a = pos["A"]
    assert a.attraction_ci95[0] <= p <= a.attraction_ci95[1] and a.n_key_elsewhere > 800
    assert a.accuracy_keyed == 1.0  # with the key at A both of its answers are right
    assert all(pos[k].attraction == 0.0 for k in "BCD")  # it never picks B-D unless right
    n_keyed = sum(pos[k].n_keyed for k in "BCD")  # and is right there with probability 1 - p
    right = round(sum(pos[k].accuracy_keyed * pos[k].n_keyed for k in "BCD"))
    lo, hi = wilson_ci(right, n_keyed)
    assert lo <= 1 - p <= hi and n_keyed > 800


def test_a_rerun_makes_no_call_and_an_identity_permutation_reuses_the_unperturbed_answer(tmp_path):
    data = medqa()
    calls = []

    def script(req):
        calls.append(req)
        return "Answer: B"

    first = probe_set(tmp_path / "s.db", data, ["permute:1"], script, 40)
    identity = sum(
        smp.choices == b.choices
        for smp, b in zip(first.probes[0][1].samples, first.baseline.samples)
    )
    assert identity > 0 and len(calls) == 80 - identity  # same prompt, same stored call
    again = probe_set(tmp_path / "s.db", data, ["permute:1"], script, 40)
    assert len(calls) == 80 - identity and again.probes[0][1].run.id == first.probes[0][1].run.id
    assert summarize_set(again).to_json() == summarize_set(first).to_json()


def test_permuted_cmb_items_reletter_the_key_its_official_reading_compares(
    tmp_path, official_reference
):
    """CMB's score.py compares the key string as written ("EB"); a permuted item must carry it relettered."""
    key = json.loads(shared_file("cmb", "CMB-test-choice-answer.json").read_text(encoding="utf-8"))
    pick = (
        [r for r in key if r["question_type"] == "单项选择题"][:6]
        + [r for r in key if r["answer"] == "EB"][:1]
        + [r for r in key if len(r["answer"]) >= 3][:3]
    )
    (tmp_path / "CMB-test-choice-answer.json").write_text(
        json.dumps(key, ensure_ascii=False), encoding="utf-8"
    )
    questions = [
        {
            "id": r["id"],
            "question": f"第{r['id']}题",
            "option": {ch: f"选项{ch}{r['id']}" for ch in "ABCDE"},
        }
        for r in pick
    ]
    (tmp_path / "CMB-test-choice-question-merge.json").write_text(
        json.dumps(questions, ensure_ascii=False), encoding="utf-8"
    )
    written = {str(r["id"]): r["answer"] for r in pick}

    def as_written(req):  # the right options' letters, in the order the key writes them
        shown = {
            orig + rid: k
            for k, orig, rid in re.findall(
                r"^([A-E])\. 选项([A-E])(\d+)$", req.messages[-1].content, re.M
            )
        }
        rid = re.search(r"第(\d+)题", req.messages[-1].content).group(1)
        return "".join(shown[ch + rid] for ch in written[rid])

    cfg = RunConfig(
        benchmark="cmb", model="scripted/x", data=tmp_path, provider_options={"script": as_written}
    )
    with Store(tmp_path / "s.db") as st:
        ps = asyncio.run(run_probes(st, cfg, ["permute:1"]))
    ((_, out),) = ps.probes
    eb = next(s for s in out.samples if written[s.id] == "EB")
    assert eb.metadata["key"] == "".join(
        k for ch in "EB" for k, v in eb.choices.items() if v == f"选项{ch}{eb.id}"
    )
    assert eb.metadata["key"] != "EB" and sorted(eb.metadata["key"]) == list(eb.target)
    assert [g.value for g in ps.baseline.grades] == [1.0] * 10 and [
        g.value for g in out.grades
    ] == [1.0] * 10


# ---- None of the above -----------------------------------------------------------------------------


def small_exam(path: Path) -> list[dict]:
    rows = [
        {
            "question": f"Question {i}: which is right?",
            "options": {k: f"option {k}{i}" for k in "ABCD"},
            "answer_idx": "ABCD"[i % 4],
        }
        for i in range(8)
    ]
    rows[2]["options"]["D"] = "None of the above"  # already offers NOTA (not the key): left out
    rows[5]["options"][rows[5]["answer_idx"]] = "All of the above"  # speaks of the others: left out
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return rows


def test_nota_replaces_the_correct_option_and_keeps_its_letter(tmp_path):
    data = tmp_path / "exam.jsonl"
    rows = small_exam(data)
    items = MedQA(probe="nota").load(data)
    assert [s.id for s in items] == ["0", "1", "3", "4", "6", "7"]
    for s in items:
        r = rows[int(s.id)]
        key = r["answer_idx"]
        assert s.target == key and s.choices[key] == "None of the above"
        assert r["options"][key] not in s.choices.values()
        assert {k: v for k, v in s.choices.items() if k != key} == {
            k: v for k, v in r["options"].items() if k != key
        }
        assert s.metadata["probe"] == {"name": "nota", "replaced": r["options"][key]}
        assert "D. " in s.messages[0].content and "None of the above" in s.messages[0].content

    ps = probe_set(tmp_path / "s.db", data, ["nota"], positional(data, 0.0), None)
    d = summarize_set(ps).drops[0]
    keyed_a = sum(1 for s in items if s.target == "A")  # the right text is gone: it answers A
    assert (d.n_items, d.n_paired, d.n_not_applicable) == (6, 6, 2)
    assert (d.baseline, d.probed) == (1.0, pytest.approx(keyed_a / 6))


def test_nota_speaks_the_benchmark_language():
    class ChineseDemo(DemoExam):
        language = "zh"

    bench = ChineseDemo()
    items = Probe.parse("nota").apply(bench, bench.load())
    assert items and all(s.choices[s.target] == "以上都不是" for s in items)
    assert "以上都不是" in items[0].messages[0].content


# ---- distractors -----------------------------------------------------------------------------------


def test_distractors_come_from_other_items_and_are_seeded():
    data = medqa()
    raw = records(data)
    items = MedQA(probe="distractors:3:5").load(data)
    plain = MedQA().load(data)
    assert len(items) == len(raw) == 1273
    every_text = {t for r in raw for t in r["options"].values()}
    for s, p, r in zip(items, plain, raw):
        assert list(s.choices) == list("ABCDEFG") and s.target == r["answer_idx"]
        assert {k: s.choices[k] for k in "ABCD"} == r["options"]
        added = [s.choices[k] for k in "EFG"]
        own = {t.casefold() for t in r["options"].values()}
        assert all(t in every_text and t.casefold() not in own for t in added)
        assert len({t.casefold() for t in added}) == 3
        assert s.metadata["probe"]["added"] == dict(zip("EFG", added))
        assert s.messages[0].content.endswith("\nG. " + added[2]) and s.messages != p.messages
    again = MedQA(probe="distractors:3:5").load(data)
    other = MedQA(probe="distractors:3:6").load(data)
    assert [s.choices for s in again] == [s.choices for s in items]
    assert sum(a.choices != b.choices for a, b in zip(items, other)) > 0.9 * len(items)

    base = MedQA().dataset_hash(data)
    assert (
        MedQA(probe="distractors:3:5").dataset_hash(data)
        == probe_dataset_hash(base, "distractors:3:5")
        != base
    )
    assert str(MedQA(probe="distractors:3:5").spec()) == 'medqa{"probe":"distractors:3:5"}'
    with pytest.raises(ConfigError, match="at most 10"):
        MedQA(probe="distractors:7").load(data)


def test_distractors_run_and_a_prompt_that_cannot_show_them_is_refused_before_any_call(tmp_path):
    data = medqa()
    ps = probe_set(tmp_path / "s.db", data, ["distractors"], positional(data, 0.0), 30)
    d = summarize_set(ps).drops[0]
    assert d.probe == "distractors:2:0" and (d.baseline, d.probed, d.n_paired) == (1.0, 1.0, 30)
    with pytest.raises(
        ConfigError, match="four options"
    ):  # simple-evals' prompt has room for A-D only
        probe_set(
            tmp_path / "r.db",
            data,
            ["distractors:2:0"],
            positional(data, 0.0),
            30,
            protocol="reference",
        )
    with Store(tmp_path / "r.db") as st:
        assert st.runs() == []


def test_probe_spellings():
    assert [
        Probe.parse(t).text
        for t in ("permute", "permute:4", "nota", "distractors", "distractors:3", "distractors:3:9")
    ] == ["permute:1", "permute:4", "nota", "distractors:2:0", "distractors:3:0", "distractors:3:9"]
    p = Probe.parse("rewrite:openai/llama3:8b:0123456789abcdef")
    assert (p.attacker, p.digest) == ("openai/llama3:8b", "0123456789abcdef")
    for bad in (
        "shuffle",
        "permute:x",
        "nota:1",
        "distractors:0",
        "rewrite:openai/m",
        "rewrite:openai/m:XYZ",
    ):
        with pytest.raises(ConfigError, match="probe"):
            Probe.parse(bad)
    assert expand_probes(["permute", "nota"], seeds=2) == ["permute:1", "permute:2", "nota"]
    assert expand_probes(["nota"], attacker=True) == ["nota", "rewrite"]
    with pytest.raises(ConfigError, match="--attacker"):
        expand_probes(["rewrite"])


# ---- attacker rewrites -----------------------------------------------------------------------------

DETAIL = "The patient, a retired lighthouse keeper who distrusts hospitals, insists on telling the story himself."


def attacker_script(refuse: str):
    """Prepends a biasing detail to each question; refuses (no tags) on the question ``refuse``."""
    seen = []

    def script(req):
        seen.append(req)
        q = req.messages[-1].content.split("Question:\n", 1)[1].split("\n\nOptions:\n", 1)[0]
        return "I would rather not." if q == refuse else f"Sure.\n<question>{DETAIL} {q}</question>"

    return script, seen


def swayed(path: Path):
    """Right on plain questions; answers A when the biasing detail is there."""
    honest = positional(path, 0.0)
    return lambda req: "Answer: A" if DETAIL in req.messages[-1].content else honest(req)


def test_attacker_rewrites_keep_the_key_are_stored_and_resume(tmp_path):
    data = medqa()
    raw = records(data)[:12]
    script, seen = attacker_script(refuse=raw[4]["question"])
    attacker = Attacker(spec="scripted/attacker", options={"script": script})
    db = tmp_path / "s.db"
    ps = probe_set(db, data, ["rewrite"], swayed(data), 12, attacker)

    assert ps.rewrites.failures == {"4": "no <question>...</question> in the reply"}
    assert ps.attacker_stats.made == 11 + 3 and len(seen) == 14  # the refusal is asked again twice
    ((probe, out),) = ps.probes
    assert (
        probe.startswith("rewrite:scripted/attacker:")
        and out.run.benchmark_spec == f'medqa{{"probe":"{probe}"}}'
    )
    base = {s.id: s for s in ps.baseline.samples}
    assert [s.id for s in out.samples] == [str(i) for i in range(12) if i != 4]
    for s in out.samples:
        b = base[s.id]
        assert (s.choices, s.target) == (b.choices, b.target)  # the answer key is kept
        assert s.metadata["question"] == f"{DETAIL} {b.metadata['question']}"
        assert s.metadata["probe"]["original_question"] == b.metadata["question"]
        assert DETAIL in s.messages[0].content
    with Store(db) as st:
        stored = {s.id: s for s in st.samples("medqa", out.run.dataset_sha256)}
        assert {k: v.metadata["question"] for k, v in stored.items()} == {
            s.id: s.metadata["question"] for s in out.samples
        }
        assert (
            st.samples("medqa", ps.baseline.run.dataset_sha256)[0].metadata["question"]
            == raw[0]["question"]
        )
    with sqlite3.connect(db) as con:
        assert dict(con.execute("SELECT purpose, COUNT(*) FROM calls GROUP BY purpose")) == {
            "answer": 12 + 11,
            "attack": 14,
        }

    s = summarize_set(ps)
    d = s.drops[0]
    keyed_a = sum(1 for x in out.samples if x.target == "A")
    assert (d.n_paired, d.n_not_applicable, d.baseline, d.probed) == (
        11,
        1,
        1.0,
        pytest.approx(keyed_a / 11),
    )
    assert d.mcnemar[:2] == (11 - keyed_a, 0)
    assert [(r.sample_id, r.original) for r in s.rewrites] == [
        (x.id, base[x.id].metadata["question"]) for x in out.samples
    ]
    assert s.attacker_failures == ps.rewrites.failures

    rewrites_path(
        Probe.parse(probe)
    ).unlink()  # the rewrites file is rebuilt from the stored attacker calls
    again = probe_set(db, data, ["rewrite"], swayed(data), 12, attacker)
    assert again.attacker_stats.made == 0 and again.attacker_stats.cached == 14 and len(seen) == 14
    assert again.probes[0][0] == probe and again.probes[0][1].answer_stats.made == 0


def test_a_rewrite_that_names_the_answer_or_lacks_its_tags_is_not_used():
    smp = MedQA().make_sample(
        "1", "A 40-year-old man has chest pain.", {"A": "Aspirin", "B": "Rest"}, "A"
    )
    assert read_rewrite(
        "<question>A man who takes aspirin daily has chest pain.</question>", smp
    ) == (None, "the rewrite names the correct option")
    assert read_rewrite("A 40-year-old man has chest pain.", smp)[0] is None
    assert read_rewrite("<question> </question>", smp) == (None, "empty rewrite")
    assert read_rewrite(
        "ok <QUESTION>A 40-year-old chess player has chest pain.</QUESTION>", smp
    ) == ("A 40-year-old chess player has chest pain.", "")


# ---- the command and the report ------------------------------------------------------------------


class AlwaysFirst(ScriptedProvider):
    def __init__(self, spec, **options):
        super().__init__(spec, script=lambda req: "Answer: A", **options)


class Rewriter(ScriptedProvider):
    def __init__(self, spec, **options):
        def script(req):
            q = req.messages[-1].content.split("Question:\n", 1)[1].split("\n\nOptions:\n", 1)[0]
            return f"<question><script>alert(1)</script> A retired sailor. {q}</question>"

        super().__init__(spec, script=script, **options)


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})


def test_robustness_command_and_report_section(tmp_path):
    data = medqa()
    db, out, html = tmp_path / "s.db", tmp_path / "rob.json", tmp_path / "r.html"
    with PROVIDERS.registered("first", AlwaysFirst), PROVIDERS.registered("rewriter", Rewriter):
        r = invoke(
            "robustness",
            "medqa",
            "--data",
            str(data),
            "--limit",
            "30",
            "--model",
            "first/m",
            "--probe",
            "permute",
            "--seeds",
            "2",
            "--probe",
            "nota",
            "--attacker",
            "rewriter/x",
            "--protocol",
            "grandrounds",
            "--store",
            str(db),
            "--json",
            str(out),
        )
        assert r.exit_code == 0, r.output
        assert (
            "consistency over 3 option orders" in r.output and "30 questions rewritten" in r.output
        )
        got = json.loads(out.read_text(encoding="utf-8"))
        probes = [d["probe"] for d in got["drops"]]
        assert (
            probes[:3] == ["permute:1", "permute:2", "nota"] and probes[4] == "permute (mean of 2)"
        )
        assert probes[3].startswith("rewrite:rewriter/x:")
        pos = {p["position"]: p for p in got["position_bias"]["positions"]}
        assert (
            pos["A"]["chosen"] == 1.0
            and pos["A"]["attraction"] == 1.0
            and pos["B"]["chosen"] == 0.0
        )
        keyed_a = sum(1 for x in records(data)[:30] if x["answer_idx"] == "A") / 30
        assert got["baseline_accuracy"] == pytest.approx(keyed_a)
        nota = got["drops"][2]
        assert (
            nota["probed"] == pytest.approx(keyed_a) and nota["drop"] == 0.0
        )  # NOTA keeps the key's letter
        assert len(got["rewrites"]) == 30 and got["rewrites"][0]["rewritten"].startswith("<script>")

        again_args = [
            "robustness",
            "medqa",
            "--data",
            str(data),
            "--limit",
            "30",
            "--model",
            "first/m",
            "--probe",
            "permute",
            "--seeds",
            "2",
            "--probe",
            "nota",
            "--attacker",
            "rewriter/x",
            "--protocol",
            "grandrounds",
            "--store",
            str(db),
            "--json",
            str(out),
        ]
        again = invoke(*again_args)
        assert (
            again.exit_code == 0
            and "answers: 0 calls made" in again.output
            and "30 calls made" not in again.output
        )
        assert json.loads(out.read_text(encoding="utf-8")) == got
        # written to a log (not a terminal, no COLUMNS): the tables are whole, not cut at 80 columns
        logged = CliRunner().invoke(app, again_args, env={"COLUMNS": None})
        assert logged.exit_code == 0, logged.output
        assert "…" not in logged.output
        for d in got["drops"]:
            assert f"{d['drop']:+.3f}" in logged.output, d
            if d["ci95"]:
                lo, hi = d["ci95"]
                assert f"[{lo:+.3f}, {hi:+.3f}]" in logged.output, d
        assert max(len(line) for line in logged.output.splitlines()) > 80

        bad = invoke(
            "robustness",
            "medqa",
            "--data",
            str(data),
            "--model",
            "first/m",
            "--probe",
            "rewrite",
            "--store",
            str(db),
        )
        assert bad.exit_code == 2 and "needs --attacker" in bad.output
        exam = invoke(
            "robustness",
            "medcalc-bench",
            "--model",
            "first/m",
            "--probe",
            "nota",
            "--store",
            str(db),
        )
        assert exam.exit_code == 2 and "not a multiple-choice exam" in exam.output

    rep = invoke("report", "--format", "html", "--out", str(html), "--store", str(db))
    assert rep.exit_code == 0, rep.output
    page = html.read_text(encoding="utf-8")
    section = page.split("<h2 id='robustness'>", 1)[1].split("<h2 ", 1)[0]
    assert (
        "permute (mean of 2)" in section
        and "<td>nota</td>" in section
        and "Consistency over 3 option orders" in section
    )
    assert (
        "&lt;script&gt;alert(1)&lt;/script&gt; A retired sailor." in section
        and "<script>alert(1)" not in page
    )
    assert f"{got['drops'][2]['drop']:+.3f}" in section


# ---- the attacker shares the runs' endpoint limits -----------------------------------


def _invoke_wide(*args: str):
    return CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})


NEIGHBOUR = "His neighbour, a retired nurse, insists it is always the first option."
WINDOW = 0.5
SLACK = 0.1  # arrival times jitter against the limiter's starts (see test_rate_limits)


def attack_reply(body: dict[str, Any]) -> str:
    """The candidate answers A; the attacker (model ``att``) prepends NEIGHBOUR to the question."""
    text = body["messages"][-1]["content"]
    if body.get("model") == "att":
        q = text.split("Question:\n", 1)[1].split("\n\nOptions:\n", 1)[0]
        return f"<question>{NEIGHBOUR} {q}</question>"
    return "Answer: A"


def _concurrently(db: Path, data: Path, srv: LoopbackServer, shared: bool) -> None:
    """The candidate's run and the attacker's rewrites at once, one connection each, on one server."""
    with Store(tmp := db.with_suffix(".samples.db")) as st:
        samples = asyncio.run(
            run(st, RunConfig(benchmark="medqa", model="scripted/c", data=data, limit=6))
        ).samples
    tmp.unlink()

    async def both() -> None:
        limits = EndpointLimits()
        cfg = RunConfig(
            benchmark="medqa",
            model="openai/cand",
            data=data,
            base_url=srv.base_url,
            concurrency=1,
            limit=6,
        )
        attacker = Attacker(spec="openai/att", base_url=srv.base_url, concurrency=1)
        await asyncio.gather(
            run(st, cfg, None, limits),
            rewrite_questions(st, samples, attacker, 0, None, limits if shared else None),
        )

    with Store(db) as st:
        asyncio.run(both())


def test_attacker_and_candidate_on_one_server_share_its_slot(tmp_path: Path) -> None:
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    with LoopbackServer(Arrivals(attack_reply), latency=0.03) as srv:
        _concurrently(tmp_path / "apart.db", data, srv, shared=False)
        assert srv.stats.max_in_flight == 2  # apart, they overlap: the measure sees it
    with LoopbackServer(seen := Arrivals(attack_reply), latency=0.03) as srv:
        _concurrently(tmp_path / "shared.db", data, srv, shared=True)
        assert srv.stats.max_in_flight == 1
    assert seen.models.count("cand") == 6 and seen.models.count("att") == 6


@pytest.fixture
def short_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "RATE_WINDOW", WINDOW)


def robustness(srv: str, attacker: str, db: Path, *flags: str) -> Any:
    data = shared_file("medqa", "phrases_no_exclude_test.jsonl")
    return _invoke_wide(
        "robustness",
        "medqa",
        "--data",
        str(data),
        "--limit",
        "6",
        "--model",
        "openai/cand",
        "--base-url",
        srv,
        "--attacker",
        attacker,
        "--concurrency",
        "1",
        *flags,
        "--store",
        str(db),
    )


def test_robustness_attacker_on_the_candidates_server_keeps_its_rpm(
    tmp_path: Path, short_window: None
) -> None:
    """An attacker of another model on the candidate's server shares its connection slot, not its
    rate (vendors limit each model); the candidate's own model as attacker shares both."""
    with LoopbackServer(seen := Arrivals(attack_reply)) as srv:
        r = robustness(srv.base_url, f"openai/att@{srv.base_url}", tmp_path / "s.db", "--rpm", "5")
        assert r.exit_code == 0, r.output
        assert srv.stats.max_in_flight == 1
    assert (
        seen.models.count("att") == 6 and seen.models.count("cand") == 12
    )  # unperturbed, then rewritten
    cand = [t for t, m in zip(seen.times, seen.models) if m == "cand"]
    assert most_in_window(cand, WINDOW - SLACK) <= 5
    att = [t for t, m in zip(seen.times, seen.models) if m == "att"]
    # the attacker's six rewrites were not held to the candidate's rate (at 5 a window they would span 0.5 s)
    assert max(att) - min(att) < WINDOW / 2

    def same_model(body: dict[str, Any]) -> str:  # the attacker's prompt asks for a <question>
        return attack_reply(
            body | {"model": "att"} if "<question>" in body["messages"][-1]["content"] else body
        )

    with LoopbackServer(both := Arrivals(same_model)) as srv:
        r = robustness(
            srv.base_url, f"openai/cand@{srv.base_url}", tmp_path / "s2.db", "--rpm", "5"
        )
        assert r.exit_code == 0, r.output
        assert srv.stats.max_in_flight == 1
    assert len(both.times) == 6 + 12
    assert (
        most_in_window(both.times, WINDOW - SLACK) <= 5
    )  # one model: one rate for its answers and rewrites
    assert (
        max(both.times) - min(both.times) >= (18 // 5 - 1) * WINDOW - SLACK
    )  # 18 starts at 5 a window


def test_attacker_rpm_on_its_own_server_and_the_lower_on_a_shared_one(
    tmp_path: Path, short_window: None
) -> None:
    cand, att = Arrivals(attack_reply), Arrivals(attack_reply)
    with LoopbackServer(cand) as c, LoopbackServer(att) as a:
        r = robustness(
            c.base_url, f"openai/att@{a.base_url}", tmp_path / "s.db", "--attacker-rpm", "3"
        )
        assert r.exit_code == 0, r.output
    assert len(att.times) == 6 and most_in_window(att.times, WINDOW - SLACK) <= 3
    assert (
        len(cand.times) == 12 and most_in_window(cand.times, WINDOW) > 3
    )  # the attacker's limit is not the candidate's

    with LoopbackServer(seen := Arrivals(attack_reply)) as srv:
        r = robustness(
            srv.base_url,
            f"openai/att@{srv.base_url}",
            tmp_path / "t.db",
            "--rpm",
            "600",
            "--attacker-rpm",
            "4",
        )
        assert r.exit_code == 0, r.output
    att_times = [t for t, m in zip(seen.times, seen.models) if m == "att"]
    assert len(att_times) == 6 and most_in_window(att_times, WINDOW - SLACK) <= 4


def test_a_bad_attacker_rpm_is_refused_before_any_call(tmp_path: Path) -> None:
    with LoopbackServer(seen := Arrivals(attack_reply)) as srv:
        r = robustness(
            srv.base_url, f"openai/att@{srv.base_url}", tmp_path / "s.db", "--attacker-rpm", "0"
        )
    assert r.exit_code == 2 and "Invalid value for '--attacker-rpm'" in r.output
    assert not seen.times and not (tmp_path / "s.db").exists()
