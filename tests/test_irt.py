"""Item response theory: recovery of known 2PL parameters, wrong keys, missing answers, and the
``irt`` command and report section over a store filled by real runs of scripted models."""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from grandrounds.analyses.irt import Respondent, Responses, analyse, responses_from_values
from grandrounds.analyses.irt_fit import IrtError, fit_2pl, informative
from grandrounds.benchmarks.base import RunOptions
from grandrounds.cli.main import app
from grandrounds.core.records import Request
from grandrounds.providers.base import ProviderError
from grandrounds.reports import build_report
from grandrounds.run.config import RunConfig
from grandrounds.run.runner import run
from grandrounds.store import Store
from tests.synthetic import SynthSpec, build_store


def simulate(n: int, j: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Responses of ``n`` respondents to ``j`` items from known 2PL parameters: abilities spread
    evenly over the range models on a leaderboard cover, discriminations 0.5-2.5, difficulties
    within the abilities' range."""
    rng = np.random.default_rng(seed)
    theta = rng.uniform(-2.5, 2.5, n)
    a = rng.uniform(0.5, 2.5, j)
    b = rng.uniform(-2.0, 2.0, j)
    y = (rng.random((n, j)) < 1 / (1 + np.exp(-a * (theta[:, None] - b)))).astype(float)
    return theta, a, b, y


def respondents(n: int) -> tuple[Respondent, ...]:
    return tuple(
        Respondent(
            model=f"scripted/m{i:02d}",
            answer_mode="generate",
            protocol="grandrounds",
            run_id=f"run{i:02d}",
            grader_fp="fp",
        )
        for i in range(n)
    )


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.corrcoef(x, y)[0, 1])


def test_recovers_known_parameters_20_respondents_500_items() -> None:
    r_b, r_a, r_theta = [], [], []
    for seed in range(5):
        theta, a, b, y = simulate(20, 500, seed=seed)
        keep = informative(y)
        fit = fit_2pl(y[:, keep])
        assert fit.converged
        r_b.append(pearson(fit.b, b[keep]))
        r_a.append(pearson(fit.a, a[keep]))
        r_theta.append(pearson(fit.theta, theta))
    print(
        f"20 x 500, 5 seeds: r(difficulty) {np.round(r_b, 3)}, r(discrimination) {np.round(r_a, 3)}, r(ability) {np.round(r_theta, 3)}"
    )
    assert np.mean(r_b) >= 0.9 and min(r_b) >= 0.85
    assert min(r_theta) >= 0.98
    # Each item is answered by 20 respondents only, which bounds how well any estimator can place its
    # discrimination: with the abilities known and the true prior, the posterior mean reaches
    # r ~ 0.63 on this design (bench/irt_recovery.py prints that bound beside this fit's figure).
    assert np.mean(r_a) >= 0.55


def test_discrimination_recovered_at_0_9_once_enough_respondents_answer() -> None:
    theta, a, b, y = simulate(200, 500, seed=12)
    keep = informative(y)
    fit = fit_2pl(y[:, keep])
    r_a, r_b = pearson(fit.a, a[keep]), pearson(fit.b, b[keep])
    print(f"200 x 500: r(difficulty) {r_b:.3f}, r(discrimination) {r_a:.3f}")
    assert r_a >= 0.9 and r_b >= 0.95


def test_planted_wrong_key_is_flagged_and_uninformative_items_listed() -> None:
    theta, a, b, y = simulate(20, 500, seed=13)
    y[:, 42] = 1 - (
        np.random.default_rng(5).random(20) < 1 / (1 + np.exp(-1.5 * theta))
    )  # key inverted: strong models "wrong"
    y[:, 7] = 1.0  # everybody right
    y[:, 8] = 0.0  # nobody right
    y[1:, 9] = np.nan  # answered once
    res = analyse(
        Responses(
            benchmark="sim",
            dataset="d",
            respondents=respondents(20),
            items=tuple(f"q{k}" for k in range(500)),
            y=y,
        )
    )
    by_id = {it.id: it for it in res.items}
    flagged = [it.id for it in res.negative]
    assert "q42" in flagged and by_id["q42"].negative_95
    assert flagged[0] == "q42", "the inverted item is the most negative one"
    assert len(flagged) <= 5, (
        f"true discriminations are all >= 0.5: few false alarms, got {flagged}"
    )
    assert [it.id for it in res.items if it.negative_95] == ["q42"], (
        "only the planted item is below 0 with 95% confidence"
    )
    assert [it.id for it in res.by_status("all_right")] == ["q7"] and [
        it.id for it in res.by_status("all_wrong")
    ] == ["q8"]
    assert by_id["q7"].discrimination is None and by_id["q7"].n_right == 20
    assert by_id["q9"].status == "too_few" and by_id["q9"].n == 1
    doc = res.to_json()
    assert doc["negative_discrimination"][0] == "q42" and doc["counts"]["fitted"] == 497
    json.dumps(doc, allow_nan=False)  # every figure is a number or null


def test_missing_responses_are_left_out_not_counted_wrong() -> None:
    theta, a, b, y = simulate(20, 500, seed=14)
    full = analyse(
        Responses(
            benchmark="sim",
            dataset="d",
            respondents=respondents(20),
            items=tuple(f"q{k}" for k in range(500)),
            y=y,
        )
    )
    holes = y.copy()
    rng = np.random.default_rng(3)
    holes[rng.random(y.shape) < 0.3] = np.nan  # 30% unscored at random
    holes[0, 250:] = np.nan  # one respondent answered half the items
    part = analyse(
        Responses(
            benchmark="sim",
            dataset="d",
            respondents=respondents(20),
            items=tuple(f"q{k}" for k in range(500)),
            y=holes,
        )
    )
    assert part.abilities[0].n == int((~np.isnan(holes[0])).sum()) < 250
    th_full = np.array([x.theta for x in full.abilities])
    th_part = np.array([x.theta for x in part.abilities])
    assert pearson(th_part, theta) >= 0.97
    assert abs(th_part[0] - th_full[0]) < 3 * part.abilities[0].se, (
        "half the answers missing moves the estimate within its error"
    )
    assert part.abilities[0].se > full.abilities[0].se, "fewer answers, wider interval"
    # the same holes filled with zeros (counted wrong) pull abilities down: missing is not wrong
    zeros = np.where(np.isnan(holes), 0.0, holes)
    wrong = analyse(
        Responses(
            benchmark="sim",
            dataset="d",
            respondents=respondents(20),
            items=tuple(f"q{k}" for k in range(500)),
            y=zeros,
        )
    )
    assert wrong.abilities[0].theta < part.abilities[0].theta - 2 * part.abilities[0].se
    fitted = {it.id: it for it in part.items if it.status == "fitted"}
    b_part = np.array([fitted[f"q{k}"].difficulty for k in range(500) if f"q{k}" in fitted])
    b_true = np.array([b[k] for k in range(500) if f"q{k}" in fitted])
    assert pearson(b_part, b_true) >= 0.85


def test_ability_standard_errors_cover_the_truth() -> None:
    """About 95% of true abilities lie in the 95% intervals (after putting the estimates on the
    truth's scale by the items' difficulties: mean-sigma linking)."""
    inside = total = 0
    for seed in range(4):
        theta, a, b, y = simulate(20, 500, seed=100 + seed)
        keep = informative(y)
        fit = fit_2pl(y[:, keep])
        scale = np.std(b[keep]) / np.std(fit.b)
        shift = np.mean(b[keep]) - scale * np.mean(fit.b)
        est, se = scale * fit.theta + shift, scale * fit.theta_se
        inside += int(np.sum(np.abs(est - theta) <= 1.96 * se))
        total += len(theta)
    assert 0.85 <= inside / total <= 1.0, f"coverage {inside}/{total}"


def test_graded_values_need_a_threshold_and_respondents_are_counted() -> None:
    who = respondents(3)
    vals = [
        (who[0], {"s1": 0.4, "s2": 1.0}),
        (who[1], {"s1": 0.9, "s2": None}),
        (who[2], {"s1": None, "s2": None}),
    ]
    with pytest.raises(IrtError, match=r"graded answers \(2 of 3 scored values .* --threshold"):
        responses_from_values("medeqbench", "d", vals)
    resp = responses_from_values("medeqbench", "d", vals, order=["s2", "s1"], threshold=0.5)
    assert resp.items == ("s2", "s1") and len(resp.respondents) == 2
    assert resp.y.tolist()[0] == [1.0, 0.0] and math.isnan(resp.y[1, 0]) and resp.y[1, 1] == 1.0
    assert any("no scored answer" in n for n in resp.notes)
    with pytest.raises(IrtError, match="needs at least 3 respondents .* the store has 2"):
        analyse(resp)


# --------------------------------------------------------------------------------------------
# end to end: real runs of scripted models on an exam in MedQA's format, then `grandrounds irt`
# --------------------------------------------------------------------------------------------

N_ITEMS = 48
WRONG_KEY = "13"  # sample ids are line numbers: strong models answer C to item 13, the key says B
EASY, IMPOSSIBLE = "0", "1"
ABILITY = {f"m{i}": -2.0 + 4.0 * i / 7 for i in range(8)}


def write_exam(folder: Path) -> dict[int, str]:
    """An exam in MedQA's format (the demo benchmark's reader) at ``folder``; returns item -> key."""
    rng = np.random.default_rng(0)
    keys, lines = {}, []
    for k in range(N_ITEMS):
        keys[k] = "B" if str(k) == WRONG_KEY else "ABCD"[int(rng.integers(4))]
        opts = {x: f"option {x} of item {k}" for x in "ABCD"}
        lines.append(
            json.dumps(
                {
                    "question": f"[q{k}] Which option is right for item {k}?",
                    "answer": opts[keys[k]],
                    "options": opts,
                    "meta_info": "synthetic",
                    "answer_idx": keys[k],
                }
            )
        )
    (folder / "demo_exam.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return keys


def scripted(name: str, keys: dict[int, str], fail_every: int = 0):
    """Model ``name`` answers item k right iff 1.6 (ability - b_k) beats seeded logistic noise; on
    the wrong-keyed item, models above average answer C and the others the key B. With
    ``fail_every``, items k % fail_every == 3 fail (a non-retryable provider error)."""
    theta = ABILITY[name]
    rng = np.random.default_rng(int(name[1:]) + 7)
    b = np.linspace(-1.8, 1.8, N_ITEMS)
    noise = np.log(1 / rng.random(N_ITEMS) - 1)  # logistic(0, 1) draws

    def script(req: Request) -> object:
        k = int(re.search(r"\[q(\d+)\]", req.messages[-1].content).group(1))
        if fail_every and k % fail_every == 3:
            return ProviderError("scripted outage", retryable=False)
        if str(k) == WRONG_KEY:
            return "Answer: C" if theta > 0 else "Answer: B"
        right = {EASY: True, IMPOSSIBLE: False}.get(str(k), 1.6 * (theta - b[k]) > noise[k])
        return f"Answer: {keys[k] if right else next(x for x in 'ABCD' if x != keys[k])}"

    return script


@pytest.fixture
def exam_store(tmp_path: Path) -> Path:
    keys = write_exam(tmp_path)
    path = tmp_path / "s.db"
    with Store(path) as st:
        for name in ABILITY:
            opts = {"script": scripted(name, keys, fail_every=5 if name == "m3" else 0)}
            if (
                name == "m6"
            ):  # an older run of the same setting (10 items, every call failed): the newer full run stands for it
                outage = {
                    "script": lambda req: ProviderError("down", retryable=False)
                }  # failures are not cached: the full run asks again
                asyncio.run(
                    run(
                        st,
                        RunConfig(
                            benchmark="demo",
                            model=f"scripted/{name}",
                            data=tmp_path,
                            limit=10,
                            options=RunOptions(protocol="grandrounds"),
                            provider_options=outage,
                        ),
                    )
                )
            asyncio.run(
                run(
                    st,
                    RunConfig(
                        benchmark="demo",
                        model=f"scripted/{name}",
                        data=tmp_path,
                        options=RunOptions(protocol="grandrounds"),
                        provider_options=opts,
                    ),
                )
            )
        # the strongest model under the reference protocol too: another respondent
        asyncio.run(
            run(
                st,
                RunConfig(
                    benchmark="demo",
                    model="scripted/m7",
                    data=tmp_path,
                    options=RunOptions(protocol="reference"),
                    provider_options={"script": scripted("m7", keys)},
                ),
            )
        )
    return path


def test_irt_command_end_to_end(exam_store: Path, tmp_path: Path) -> None:
    out = tmp_path / "irt.json"
    res = CliRunner().invoke(
        app, ["irt", "demo", "--store", str(exam_store), "--json", str(out)], catch_exceptions=False
    )
    assert res.exit_code == 0, res.output
    assert "Candidate wrong keys: 1 item(s)" in res.output and "│ 13 " in res.output
    doc = json.loads(out.read_text(encoding="utf-8"))
    labels = [r["label"] for r in doc["respondents"]]
    assert len(labels) == 9 and len(set(labels)) == 9
    assert (
        "scripted/m7 · generate · reference" in labels
        and "scripted/m7 · generate · grandrounds" in labels
    )
    by_label = {r["label"]: r for r in doc["respondents"]}
    with Store(exam_store) as st:
        m6 = [rj for _, _, rj in st.results() if rj["model"] == "scripted/m6"]
    assert [(rj["n"], rj["n_unscored"]) for rj in m6] == [(0, 10), (N_ITEMS, 0)], (
        "an older failed run, then the full one"
    )
    assert by_label["scripted/m6 · generate · grandrounds"]["n"] == N_ITEMS, (
        "the latest (full) run of m6, not the 10-item one"
    )
    failing = by_label["scripted/m3 · generate · grandrounds"]
    assert failing["n"] == N_ITEMS - sum(1 for k in range(N_ITEMS) if k % 5 == 3), (
        "failed calls are missing, not wrong"
    )
    assert failing["se"] > 0 and failing["ci95"][0] < failing["ability"] < failing["ci95"][1]
    order = [by_label[f"scripted/m{i} · generate · grandrounds"]["ability"] for i in range(8)]
    assert pearson(np.array(order), np.array(list(ABILITY.values()))) >= 0.9
    assert doc["negative_discrimination"][0] == WRONG_KEY
    assert doc["wrong_key_evidence"][WRONG_KEY]["key"] == "B"
    assert doc["wrong_key_evidence"][WRONG_KEY]["stronger_half_answered"].get("C", 0) >= 4
    assert EASY in doc["all_right"] and IMPOSSIBLE in doc["all_wrong"]
    items = {it["id"]: it for it in doc["items"]}
    assert items[EASY]["status"] == "all_right" and items[EASY]["discrimination"] is None
    assert doc["counts"]["items"] == N_ITEMS and doc["fit"]["converged"]


def test_report_has_an_irt_section(exam_store: Path, tmp_path: Path) -> None:
    with Store(exam_store) as st:
        [html] = build_report(st, "html", tmp_path / "r.html")
    text = html.read_text(encoding="utf-8")
    assert "<h2 id='irt'>Item response theory</h2>" in text
    section = text.split("<h2 id='irt'>", 1)[1]
    wrong = section.split("class='irt-wrong-keys'", 1)[1].split("</table>", 1)[0]
    assert f">{WRONG_KEY}</a>" in wrong and "<td>B</td><td>C ×4</td>" in wrong
    assert section.count("<tr><td>scripted/m") >= 9


def test_report_has_no_irt_section_for_graded_benchmarks(tmp_path: Path) -> None:
    st = build_store(tmp_path / "g.db", SynthSpec(n_samples=30, n_models=3))
    try:
        [html] = build_report(st, "html", tmp_path / "r.html")
    finally:
        st.close()
    assert "id='irt'" not in html.read_text(encoding="utf-8")


def test_irt_command_errors(exam_store: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["irt", "medqaa", "--store", str(exam_store)])
    assert (
        res.exit_code == 2
        and "unknown benchmark 'medqaa'; did you mean medqa" in res.output
        and "results in" in res.output
    )
    res = runner.invoke(app, ["irt", "medqa", "--store", str(exam_store)])
    assert res.exit_code == 2 and "no results for medqa" in res.output
    res = runner.invoke(app, ["irt", "demo", "--store", str(exam_store), "--min-respondents", "10"])
    assert (
        res.exit_code == 2
        and "needs at least 10 respondents" in res.output
        and "the store has 9" in res.output
    )
    empty = tmp_path / "empty.db"
    Store(empty).close()
    res = runner.invoke(app, ["irt", "demo", "--store", str(empty)])
    assert res.exit_code == 2 and "holds no results yet" in res.output
    res = runner.invoke(app, ["irt", "demo", "--store", str(tmp_path / "none.db")])
    assert res.exit_code == 2 and "no store at" in res.output
    graded = build_store(tmp_path / "g.db", SynthSpec(n_samples=30, n_models=3))
    graded.close()
    res = runner.invoke(app, ["irt", "healthbench", "--store", str(tmp_path / "g.db")])
    assert res.exit_code == 2 and "graded answers" in res.output and "--threshold" in res.output
    res = runner.invoke(
        app, ["irt", "healthbench", "--store", str(tmp_path / "g.db"), "--threshold", "0.5"]
    )
    assert res.exit_code == 0, res.output
    assert "a value >= 0.5 counts as right" in res.output
