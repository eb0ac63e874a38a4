"""Leaderboard, comparability flags, paired comparison, tie groups, agreement (pure functions)."""

from __future__ import annotations

import pytest

from grandrounds.analyses.leaderboard import (
    AgreementPair,
    ResultRow,
    agreement,
    fingerprint_diff,
    leaderboard,
    paired_compare,
)

FP = {
    "benchmark": "medqa",
    "dataset_sha256": "d1",
    "grader": {"name": "mcq", "args": {"answer_mode": "generate"}},
    "templates": {},
    "prompt_templates": {"generate_en": "abc"},
    "judges": [],
    "scoring": {},
    "answer_mode": "generate",
    "shuffle_options": False,
    "model": "x",
    "run_id": "r",
}


def row(model: str, score: float, ci: tuple[float, float] | None = None, **fp: object) -> ResultRow:
    return ResultRow(
        run_id=f"run-{model}",
        grader_fp="fp",
        benchmark="medqa",
        model=model,
        metric="accuracy",
        score=score,
        ci95=ci,
        n=100,
        n_unscored=0,
        coverage=1.0,
        fingerprint=FP | fp,
    )


def values(correct: list[int]) -> dict[str, float]:
    return {f"s{i}": float(v) for i, v in enumerate(correct)}


def test_paired_compare_known_difference_and_mcnemar() -> None:
    a = values([1] * 80 + [0] * 20)  # 0.80
    b = values([1] * 60 + [0] * 40)  # 0.60: A right & B wrong on 20, never the reverse
    c = paired_compare(a, b, seed=1)
    assert c.n == 100 and c.diff == pytest.approx(0.2)
    assert c.ci95[0] > 0.1 and c.ci95[1] < 0.3 and not c.tied
    assert c.mcnemar[:2] == (20, 0) and c.mcnemar[2] < 1e-5
    assert paired_compare(a, b, seed=1) == c  # seeded


def test_paired_compare_only_uses_samples_both_scored() -> None:
    a = {"s1": 1.0, "s2": None, "s3": 0.0}
    b = {"s1": 1.0, "s2": 0.0, "s4": 1.0}
    c = paired_compare(a, b)
    assert c.n == 1 and c.diff == 0.0 and c.tied
    assert paired_compare({}, {"x": 1.0}).n == 0


def test_paired_compare_non_binary_has_no_mcnemar() -> None:
    c = paired_compare({"a": 0.5, "b": 0.7}, {"a": 0.4, "b": 0.6})
    assert c.mcnemar is None and c.diff == pytest.approx(0.1)


def test_leaderboard_flags_incomparable_settings_and_never_mixes_ranks() -> None:
    rows = [
        row("m1", 0.9),
        row("m2", 0.5),
        row("m3", 0.95, judges=[{"model": "other", "params": {}}]),
    ]
    vals = {
        r.key: values([1] * int(r.score * 100) + [0] * (100 - int(r.score * 100))) for r in rows
    }
    [board] = leaderboard(rows, vals)
    assert board.settings == 2
    by_model = {e.row.model: e for e in board.entries}
    assert by_model["m1"].setting == 1 and by_model["m1"].rank == 1 and by_model["m2"].rank == 2
    assert (
        by_model["m3"].setting == 2 and by_model["m3"].rank == 1
    )  # ranked only in its own setting
    assert any("judges" in f for f in by_model["m3"].flags)
    assert all(e.flags for e in board.entries)  # every entry of a mixed benchmark is flagged


def test_fingerprint_diff_names_fields() -> None:
    assert fingerprint_diff(
        FP, FP | {"dataset_sha256": "d2", "templates": {"a": "1"}, "run_id": "other"}
    ) == ["dataset_sha256", "templates"]


def test_tie_groups_from_paired_ci() -> None:
    base = [1] * 70 + [0] * 30
    near = base[:]
    near[0] = 0  # one sample apart: cannot be told apart
    far = [1] * 30 + [0] * 70
    rows = [row("a", 0.70), row("b", 0.69), row("c", 0.30)]
    vals = {rows[0].key: values(base), rows[1].key: values(near), rows[2].key: values(far)}
    [board] = leaderboard(rows, vals)
    groups = {e.row.model: e.group for e in board.entries}
    assert groups["a"] == groups["b"] != groups["c"]


def test_tie_without_pairs_uses_ci_overlap_and_says_so() -> None:
    rows = [row("a", 0.7, (0.6, 0.8)), row("b", 0.65, (0.55, 0.75)), row("c", 0.2, (0.1, 0.3))]
    [board] = leaderboard(rows, {})
    e = {x.row.model: x for x in board.entries}
    assert e["a"].group == e["b"].group != e["c"].group
    assert any("CI overlap" in f for f in e["b"].flags)


def test_unscored_result_is_listed_unranked() -> None:
    rows = [
        row("a", 0.7),
        ResultRow(
            run_id="r",
            grader_fp="fp",
            benchmark="medqa",
            model="z",
            metric="accuracy",
            score=None,
            ci95=None,
            n=0,
            n_unscored=5,
            coverage=None,
            fingerprint=FP,
        ),
    ]
    [board] = leaderboard(rows, {})
    z = next(e for e in board.entries if e.row.model == "z")
    assert z.rank is None and "no score" in z.flags


def test_agreement_kappa_f1_by_benchmark_and_dimension() -> None:
    pairs = [
        AgreementPair("hb", ("axis:accuracy",), "met", "met"),
        AgreementPair("hb", ("axis:accuracy",), "unmet", "unmet"),
        AgreementPair("hb", ("axis:completeness",), "met", "unmet"),
        AgreementPair("hb", ("axis:completeness",), "unknown", "met"),
        AgreementPair("meq", ("dimension:empathy",), "met", "met"),
    ]
    st = agreement(pairs)
    acc = st["dimension"]["axis:accuracy"]
    assert acc.n == 2 and acc.kappa == pytest.approx(1.0) and acc.macro_f1 == pytest.approx(1.0)
    hb = st["benchmark"]["hb"]
    assert hb.n == 3 and hb.n_judge_unknown == 1 and hb.agree == pytest.approx(2 / 3)
    # reviewer met/unmet/unmet vs judge met/unmet/met: po=2/3, pe=(1/3*2/3 + 2/3*1/3)=4/9 -> kappa 0.4
    assert hb.kappa == pytest.approx((2 / 3 - 4 / 9) / (1 - 4 / 9))
    assert st["overall"]["all"].n == 4


def test_grader_parameters_and_prompt_templates_decide_comparability() -> None:
    batched = FP | {"grader": {"name": "healthbench", "args": {"mode": "batched"}}}
    per_item = FP | {"grader": {"name": "healthbench", "args": {"mode": "per-criterion"}}}
    assert fingerprint_diff(batched, per_item) == ["grader"]
    reworded = FP | {"prompt_templates": {"generate_en": "def"}}
    assert fingerprint_diff(FP, reworded) == ["prompt_templates"]
    # fields outside the comparability set (who ran it, the package version) never split a setting
    assert fingerprint_diff(FP, FP | {"package_version": "9.9", "model": "y", "seed": 3}) == []
