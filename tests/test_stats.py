"""grandrounds.scoring.stats against textbook values and independent formulas.

Reference values come from published tables (Newcombe 1998 for the Wilson interval, the
Wikipedia/Cohen worked example for kappa, scikit-learn's documented macro-F1 example) or
are recomputed here by a different route: the Wilson endpoints as roots of the score-test
quadratic, McNemar's p from exact Fractions, kappa and F1 from a confusion matrix.
"""

from __future__ import annotations

import math
import random
import statistics
from fractions import Fraction

import numpy as np
import pytest

from grandrounds.scoring.stats import (
    Z95,
    bootstrap,
    clipped_mean,
    cohen_kappa,
    macro_f1,
    mcnemar_exact,
    mean_ci,
    paired_bootstrap,
    wilson_ci,
)

# ---- independent references ------------------------------------------------------------------


def wilson_by_quadratic(k: int, n: int, z: float) -> tuple[float, float]:
    """Endpoints p solving (phat - p)^2 = z^2 p (1 - p) / n, i.e. a p^2 + b p + c = 0."""
    phat = k / n
    a = 1 + z * z / n
    b = -(2 * phat + z * z / n)
    c = phat * phat
    disc = math.sqrt(b * b - 4 * a * c)
    return (-b - disc) / (2 * a), (-b + disc) / (2 * a)


def binom_two_sided_p(b: int, c: int) -> Fraction:
    """Exact two-sided binomial p (p0 = 1/2) by the 'as or less likely' rule, in exact Fractions."""
    n = b + c
    pmf = [Fraction(math.comb(n, i), 2**n) for i in range(n + 1)]
    observed = pmf[b]
    return min(Fraction(1), sum(p for p in pmf if p <= observed))


def kappa_from_confusion(x, y) -> float:
    """kappa = (N * trace - sum_i row_i col_i) / (N^2 - sum_i row_i col_i) on the confusion matrix."""
    labels = sorted(set(x) | set(y), key=str)
    index = {lab: i for i, lab in enumerate(labels)}
    m = np.zeros((len(labels), len(labels)))
    for a, b in zip(x, y):
        m[index[a], index[b]] += 1
    n = m.sum()
    chance = float((m.sum(axis=1) * m.sum(axis=0)).sum())
    return float((n * np.trace(m) - chance) / (n * n - chance))


def macro_f1_from_confusion(truth, pred) -> float:
    """Per-class F1 as the harmonic mean of precision and recall (0 where undefined)."""
    labels = sorted(set(truth) | set(pred), key=str)
    index = {lab: i for i, lab in enumerate(labels)}
    m = np.zeros((len(labels), len(labels)))
    for t, p in zip(truth, pred):
        m[index[t], index[p]] += 1
    f1s = []
    for i in range(len(labels)):
        tp = m[i, i]
        predicted = m[:, i].sum()
        actual = m[i, :].sum()
        precision = tp / predicted if predicted else 0.0
        recall = tp / actual if actual else 0.0
        f1s.append(2 * precision * recall / (precision + recall) if precision + recall else 0.0)
    return float(np.mean(f1s))


# ---- Wilson interval -------------------------------------------------------------------------


def test_z95_is_the_975th_normal_quantile():
    assert pytest.approx(statistics.NormalDist().inv_cdf(0.975), abs=1e-12) == Z95


# Newcombe RG (1998), "Two-sided confidence intervals for the single proportion: comparison of
# seven methods", Statistics in Medicine 17:857-872, Table II, method 3 (score, no continuity correction).
@pytest.mark.parametrize(
    "k,n,lo,hi",
    [
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0000, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ],
)
def test_wilson_matches_newcombe_table(k, n, lo, hi):
    got = wilson_ci(k, n)
    assert got is not None
    assert got[0] == pytest.approx(lo, abs=5e-5)
    assert got[1] == pytest.approx(hi, abs=5e-5)


@pytest.mark.parametrize(
    "k,n", [(1, 2), (3, 10), (7, 10), (50, 100), (1, 1000), (999, 1000), (12, 12 + 5), (2, 3)]
)
def test_wilson_equals_roots_of_score_quadratic(k, n):
    lo, hi = wilson_by_quadratic(k, n, Z95)
    got = wilson_ci(k, n)
    assert got == pytest.approx((max(0.0, lo), min(1.0, hi)), abs=1e-12)


@pytest.mark.parametrize("k,n", [(3, 10), (40, 90), (1, 50), (49, 50)])
def test_wilson_endpoints_are_exactly_z_standard_errors_away(k, n):
    """At each endpoint p the score statistic |phat - p| / sqrt(p(1-p)/n) equals z."""
    phat = k / n
    for p in wilson_ci(k, n):
        assert abs(phat - p) / math.sqrt(p * (1 - p) / n) == pytest.approx(Z95, rel=1e-9)


def test_wilson_uses_the_given_z():
    z90 = statistics.NormalDist().inv_cdf(0.95)
    narrow = wilson_ci(30, 80, z=z90)
    wide = wilson_ci(30, 80)
    assert narrow == pytest.approx(wilson_by_quadratic(30, 80, z90), abs=1e-12)
    assert wide[0] < narrow[0] < 30 / 80 < narrow[1] < wide[1]


def test_wilson_of_no_data_is_none():
    assert wilson_ci(0, 0) is None


@pytest.mark.parametrize("n", [1, 5, 20, 1000])
def test_wilson_at_zero_and_all_successes_touches_the_bound(n):
    lo0, hi0 = wilson_ci(0, n)
    lon, hin = wilson_ci(n, n)
    assert lo0 == pytest.approx(0.0, abs=1e-15) and lo0 >= 0.0
    assert hin == pytest.approx(1.0, abs=1e-15) and hin <= 1.0
    # The other end is the closed form z^2 / (n + z^2) (and its mirror).
    assert hi0 == pytest.approx(Z95**2 / (n + Z95**2), rel=1e-12)
    assert lon == pytest.approx(n / (n + Z95**2), rel=1e-12)


@pytest.mark.parametrize("k,n", [(0, 7), (2, 7), (5, 40), (33, 60)])
def test_wilson_is_symmetric_under_swapping_success_and_failure(k, n):
    lo, hi = wilson_ci(k, n)
    lo2, hi2 = wilson_ci(n - k, n)
    assert lo == pytest.approx(1 - hi2, abs=1e-12)
    assert hi == pytest.approx(1 - lo2, abs=1e-12)


def test_wilson_contains_phat_and_narrows_with_more_data():
    widths = []
    for n in (10, 40, 160, 640):
        k = 3 * n // 10
        lo, hi = wilson_ci(k, n)
        assert lo < k / n < hi
        widths.append(hi - lo)
    assert widths == sorted(widths, reverse=True)
    # Width shrinks roughly as 1/sqrt(n): quadrupling n about halves it.
    assert widths[-2] / widths[-1] == pytest.approx(2.0, rel=0.05)


def test_wilson_centre_is_pulled_toward_one_half():
    for k, n in [(1, 10), (9, 10), (0, 5)]:
        lo, hi = wilson_ci(k, n)
        centre = (lo + hi) / 2
        assert abs(centre - 0.5) < abs(k / n - 0.5)


# ---- bootstrap -----------------------------------------------------------------------------


VALUES = [0.2, 0.9, 0.4, 0.55, 0.1, 0.75, 0.3, 0.95, 0.6, 0.45, 0.05, 0.8]


def test_bootstrap_of_empty_is_none():
    assert bootstrap([]) is None


def test_bootstrap_same_seed_same_numbers_other_seed_other_numbers():
    a = bootstrap(VALUES, seed=7)
    b = bootstrap(VALUES, seed=7)
    c = bootstrap(VALUES, seed=8)
    assert a == b
    assert a != c


def test_bootstrap_follows_the_documented_recipe_so_stored_numbers_reproduce():
    """numpy default_rng(seed), n_resamples rows of n indices, np.mean, 2.5/97.5 percentiles."""
    rng = np.random.default_rng(11)
    arr = np.asarray(VALUES)
    means = arr[rng.integers(0, arr.size, size=(300, arr.size))].mean(axis=1)
    want_lo, want_hi = np.percentile(means, [2.5, 97.5])
    std, (lo, hi) = bootstrap(VALUES, n_resamples=300, seed=11)
    assert std == pytest.approx(float(np.std(means)), rel=1e-12)
    assert (lo, hi) == pytest.approx((want_lo, want_hi), rel=1e-12)


def test_bootstrap_std_approximates_standard_error_of_the_mean():
    rng = random.Random(3)
    values = [rng.gauss(0.6, 0.2) for _ in range(200)]
    se = statistics.pstdev(values) / math.sqrt(len(values))
    std, (lo, hi) = bootstrap(values, n_resamples=4000, seed=1)
    assert std == pytest.approx(se, rel=0.08)
    m = statistics.fmean(values)
    # Percentile interval close to mean +/- 1.96 se for a near-normal sampling distribution.
    assert lo == pytest.approx(m - Z95 * se, abs=0.25 * se)
    assert hi == pytest.approx(m + Z95 * se, abs=0.25 * se)


def test_bootstrap_of_constant_values_has_zero_spread():
    std, (lo, hi) = bootstrap([0.37] * 25, seed=5)
    assert std == pytest.approx(0.0, abs=1e-15)
    assert lo == pytest.approx(0.37) and hi == pytest.approx(0.37)


def test_bootstrap_calls_stat_once_per_resample_with_resamples_of_the_data():
    seen: list[np.ndarray] = []

    def stat(arr):
        seen.append(arr.copy())
        return float(np.max(arr))

    out = bootstrap(VALUES, stat=stat, n_resamples=57, seed=2)
    assert len(seen) == 57
    assert all(len(s) == len(VALUES) for s in seen)
    assert all(set(s.tolist()) <= set(VALUES) for s in seen)
    # The max of a resample never exceeds the max of the data, so neither does the interval.
    assert out[1][1] <= max(VALUES)


def test_bootstrap_with_median_stat_stays_within_the_data():
    values = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1000]  # an outlier the median ignores
    _, (lo, hi) = bootstrap(values, stat=np.median, seed=0)
    assert 1 <= lo <= statistics.median(values) <= hi <= 9
    _, (mlo, mhi) = bootstrap(values, seed=0)
    assert mhi > 100  # the mean's interval is dragged by the outlier


def test_bootstrap_interval_brackets_the_sample_mean():
    for seed in range(5):
        _, (lo, hi) = bootstrap(VALUES, seed=seed)
        assert lo <= statistics.fmean(VALUES) <= hi


def test_bootstrap_more_resamples_gives_stabler_std():
    small = [bootstrap(VALUES, n_resamples=50, seed=s)[0] for s in range(20)]
    large = [bootstrap(VALUES, n_resamples=2000, seed=s)[0] for s in range(20)]
    assert statistics.pstdev(large) < statistics.pstdev(small)


# ---- clipped_mean / mean_ci --------------------------------------------------------------------


@pytest.mark.parametrize(
    "values,want",
    [
        ([0.2, 0.4], 0.3),
        ([-0.5, 0.2], 0.0),
        ([1.5, 0.9], 1.0),
        ([0.0, 1.0], 0.5),
        ([-2.0, 3.0], 0.5),
    ],
)
def test_clipped_mean(values, want):
    assert clipped_mean(np.asarray(values)) == pytest.approx(want)


def test_mean_ci_of_empty_is_none():
    assert mean_ci([]) is None


@pytest.mark.parametrize(
    "values",
    [[1, 0, 1, 1, 0], [True, False, True], [1.0] * 10, [0.0] * 4, [0, 1] * 30],
)
def test_mean_ci_of_binary_values_is_wilson(values):
    assert mean_ci(values) == wilson_ci(sum(1 for v in values if v), len(values))


def test_mean_ci_of_binary_values_ignores_seed():
    values = [1, 0, 0, 1, 1, 1, 0]
    assert mean_ci(values, seed=1) == mean_ci(values, seed=99)


def test_mean_ci_of_graded_values_is_the_seeded_bootstrap_interval():
    values = [0.0, 0.5, 1.0, 0.25, 0.75, 1.0, 0.0]
    assert mean_ci(values, seed=4) == bootstrap(values, seed=4)[1]
    assert mean_ci(values, seed=4) != mean_ci(values, seed=5)
    lo, hi = mean_ci(values, seed=4)
    assert 0.0 <= lo < statistics.fmean(values) < hi <= 1.0


# ---- paired bootstrap --------------------------------------------------------------------------


@pytest.mark.parametrize("a,b", [([], []), ([1.0], []), ([1.0, 0.0], [1.0])])
def test_paired_bootstrap_rejects_unequal_or_empty(a, b):
    with pytest.raises(ValueError, match="equal, non-empty"):
        paired_bootstrap(a, b)


def test_paired_bootstrap_point_estimate_is_mean_difference():
    a = [1, 0, 1, 1, 0, 1, 1, 0]
    b = [0, 0, 1, 0, 0, 1, 0, 1]
    diff, (lo, hi) = paired_bootstrap(a, b, seed=3)
    assert diff == pytest.approx((5 - 3) / 8)
    assert lo <= diff <= hi


def test_paired_bootstrap_of_identical_systems_is_zero_with_zero_width():
    a = [0.1, 0.9, 0.5, 0.3, 1.0]
    diff, (lo, hi) = paired_bootstrap(a, list(a))
    assert diff == 0.0 and lo == 0.0 and hi == 0.0


def test_paired_bootstrap_constant_difference_has_degenerate_interval():
    b = [0.1, 0.9, 0.5, 0.3, 0.0, 0.45]
    a = [x + 0.25 for x in b]
    diff, (lo, hi) = paired_bootstrap(a, b)
    assert diff == pytest.approx(0.25)
    assert lo == pytest.approx(0.25) and hi == pytest.approx(0.25)


def test_paired_bootstrap_is_deterministic_per_seed():
    rng = random.Random(0)
    a = [rng.random() for _ in range(40)]
    b = [rng.random() for _ in range(40)]
    assert paired_bootstrap(a, b, seed=1) == paired_bootstrap(a, b, seed=1)
    assert paired_bootstrap(a, b, seed=1)[1] != paired_bootstrap(a, b, seed=2)[1]


def test_paired_bootstrap_is_antisymmetric():
    rng = random.Random(1)
    a = [rng.random() for _ in range(30)]
    b = [rng.random() for _ in range(30)]
    d1, (lo1, hi1) = paired_bootstrap(a, b, seed=9)
    d2, (lo2, hi2) = paired_bootstrap(b, a, seed=9)
    assert d2 == pytest.approx(-d1)
    assert lo2 == pytest.approx(-hi1) and hi2 == pytest.approx(-lo1)


def test_paired_bootstrap_interval_width_matches_normal_theory():
    rng = random.Random(5)
    b = [rng.random() for _ in range(400)]
    a = [x + rng.gauss(0.05, 0.1) for x in b]
    d = [x - y for x, y in zip(a, b)]
    se = statistics.pstdev(d) / math.sqrt(len(d))
    diff, (lo, hi) = paired_bootstrap(a, b, n_resamples=4000, seed=0)
    assert diff == pytest.approx(statistics.fmean(d))
    assert hi - lo == pytest.approx(2 * Z95 * se, rel=0.1)


def test_pairing_removes_item_difficulty_from_the_interval():
    """Two systems that differ by a small, consistent margin on items of very different difficulty:
    the paired interval excludes 0 although each system's own scores vary widely."""
    rng = random.Random(2)
    difficulty = [rng.random() for _ in range(60)]
    b = difficulty
    a = [x + 0.02 + rng.uniform(-0.005, 0.005) for x in difficulty]
    diff, (lo, hi) = paired_bootstrap(a, b, seed=0)
    assert 0 < lo < diff < hi
    assert hi - lo < 0.01
    # An unpaired view of the same data could not tell them apart.
    _, (alo, ahi) = bootstrap(a, seed=0)
    _, (blo, bhi) = bootstrap(b, seed=0)
    assert alo < bhi and blo < ahi


def test_paired_bootstrap_is_unchanged_by_a_common_shift():
    a = [0.2, 0.7, 0.4, 0.9, 0.1]
    b = [0.3, 0.5, 0.4, 0.6, 0.0]
    d1, ci1 = paired_bootstrap(a, b, seed=6)
    d2, ci2 = paired_bootstrap([x + 10 for x in a], [x + 10 for x in b], seed=6)
    assert d2 == pytest.approx(d1)
    assert ci2 == pytest.approx(ci1)


# ---- McNemar exact ---------------------------------------------------------------------------


def pairs_for(b: int, c: int, both_right: int = 0, both_wrong: int = 0):
    a_correct = [True] * b + [False] * c + [True] * both_right + [False] * both_wrong
    b_correct = [False] * b + [True] * c + [True] * both_right + [False] * both_wrong
    return a_correct, b_correct


@pytest.mark.parametrize(
    "b,c,p",
    [
        (1, 5, Fraction(14, 64)),  # 2 * (C(6,0) + C(6,1)) / 2^6
        (0, 6, Fraction(2, 64)),
        (0, 1, Fraction(1)),  # 2 * 1/2
        (2, 2, Fraction(1)),  # tail 11/16 doubled is capped at 1
        (3, 9, Fraction(2 * (1 + 12 + 66 + 220), 4096)),
        (10, 0, Fraction(2, 1024)),
    ],
)
def test_mcnemar_hand_worked(b, c, p):
    got_b, got_c, got_p = mcnemar_exact(*pairs_for(b, c, both_right=4, both_wrong=3))
    assert (got_b, got_c) == (b, c)
    assert got_p == pytest.approx(float(p), rel=1e-12)


@pytest.mark.parametrize(
    "b,c", [(0, 0), (1, 1), (4, 7), (12, 30), (25, 25), (40, 41), (0, 17), (100, 140)]
)
def test_mcnemar_matches_exact_binomial_test(b, c):
    _, _, p = mcnemar_exact(*pairs_for(b, c))
    assert p == pytest.approx(float(binom_two_sided_p(b, c)) if b + c else 1.0, rel=1e-9)


def test_mcnemar_no_discordant_pairs_is_p_one():
    assert mcnemar_exact(*pairs_for(0, 0, both_right=10, both_wrong=5)) == (0, 0, 1.0)
    assert mcnemar_exact([], []) == (0, 0, 1.0)


def test_mcnemar_is_symmetric_in_the_two_systems():
    a, b = pairs_for(3, 11, both_right=7, both_wrong=2)
    b1, c1, p1 = mcnemar_exact(a, b)
    b2, c2, p2 = mcnemar_exact(b, a)
    assert (b2, c2) == (c1, b1) and p2 == p1


def test_mcnemar_concordant_pairs_do_not_change_p():
    p_few = mcnemar_exact(*pairs_for(2, 9))[2]
    p_many = mcnemar_exact(*pairs_for(2, 9, both_right=500, both_wrong=300))[2]
    assert p_few == p_many


def test_mcnemar_order_of_items_does_not_matter():
    a, b = pairs_for(6, 14, both_right=5, both_wrong=5)
    order = list(range(len(a)))
    random.Random(4).shuffle(order)
    assert mcnemar_exact([a[i] for i in order], [b[i] for i in order]) == mcnemar_exact(a, b)


def test_mcnemar_large_sample_is_finite_and_exact():
    b, c = 700, 800  # 2**1500 overflows a float; the p-value must still come out right
    _, _, p = mcnemar_exact(*pairs_for(b, c))
    assert 0 < p < 0.05
    assert p == pytest.approx(float(binom_two_sided_p(b, c)), rel=1e-9)


def test_mcnemar_accepts_truthy_values():
    got = mcnemar_exact([1, 1, 0, 0, 1], [0, 1, 1, 1, 1])
    assert got[:2] == (1, 2)


# ---- Cohen's kappa -----------------------------------------------------------------------------


def test_kappa_worked_example_two_raters_fifty_items():
    # 20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no: po = 0.7, pe = 0.5*0.6 + 0.5*0.4 = 0.5 -> 0.4.
    x = ["yes"] * 25 + ["no"] * 25
    y = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    assert cohen_kappa(x, y) == pytest.approx(0.4)


def test_kappa_three_categories_by_hand():
    # Confusion (rows rater 1, cols rater 2) over met/unmet/unknown:
    # [[4, 1, 0], [1, 3, 1], [0, 0, 2]] -> N=12, po = 9/12,
    # row marginals 5, 5, 2; col marginals 5, 4, 3; pe = (25 + 20 + 6) / 144 = 51/144.
    pairs = (
        [("met", "met")] * 4
        + [("met", "unmet")]
        + [("unmet", "met")]
        + [("unmet", "unmet")] * 3
        + [("unmet", "unknown")]
        + [("unknown", "unknown")] * 2
    )
    x, y = zip(*pairs)
    po, pe = 9 / 12, 51 / 144
    assert cohen_kappa(list(x), list(y)) == pytest.approx((po - pe) / (1 - pe))


@pytest.mark.parametrize("seed", range(8))
def test_kappa_matches_confusion_matrix_formula(seed):
    rng = random.Random(seed)
    labels = ["met", "unmet", "unknown"][: 2 + seed % 2]
    x = [rng.choice(labels) for _ in range(50)]
    y = [a if rng.random() < 0.6 else rng.choice(labels) for a in x]
    assert cohen_kappa(x, y) == pytest.approx(kappa_from_confusion(x, y), abs=1e-12)


def test_kappa_is_symmetric_and_label_name_free():
    x = ["A", "B", "B", "C", "A", "C", "B", "A"]
    y = ["A", "B", "C", "C", "B", "C", "B", "A"]
    rename = {"A": 10, "B": 20, "C": 30}
    k = cohen_kappa(x, y)
    assert cohen_kappa(y, x) == pytest.approx(k)
    assert cohen_kappa([rename[v] for v in x], [rename[v] for v in y]) == pytest.approx(k)


@pytest.mark.parametrize(
    "x,y,want",
    [
        (["met", "unmet", "met"], ["met", "unmet", "met"], 1.0),
        (["met"] * 5, ["met"] * 5, 1.0),  # chance agreement is 1: defined as 1 when all agree
        ([1, 0] * 5, [0, 1] * 5, -1.0),  # systematic disagreement
        ([1, 1, 0, 0], [1, 0, 1, 0], 0.0),  # agreement exactly at chance
    ],
)
def test_kappa_boundary_cases(x, y, want):
    assert cohen_kappa(x, y) == pytest.approx(want)


@pytest.mark.parametrize("x,y", [([], []), (["a"], []), (["a", "b"], ["a"])])
def test_kappa_undefined_for_empty_or_unequal(x, y):
    assert cohen_kappa(x, y) is None


def test_kappa_of_one_sided_rater_is_zero():
    # Rater 2 always says "met": po = share of "met" in rater 1, pe = the same -> kappa 0.
    x = ["met", "unmet", "met", "unmet", "met"]
    assert cohen_kappa(x, ["met"] * 5) == pytest.approx(0.0)


# ---- macro F1 ----------------------------------------------------------------------------------


def test_macro_f1_scikit_learn_documented_example():
    # sklearn.metrics.f1_score docs: y_true [0,1,2,0,1,2], y_pred [0,2,1,0,0,1], macro -> 0.267
    # class 0: tp 2, fp 1, fn 0 -> 0.8; classes 1 and 2: tp 0 -> 0.
    got = macro_f1([0, 1, 2, 0, 1, 2], [0, 2, 1, 0, 0, 1])
    assert got == pytest.approx(0.8 / 3)


def test_macro_f1_counts_labels_only_predicted():
    # class a: tp 1, fp 0, fn 1 -> 2/3; class b (never true): tp 0, fp 1 -> 0.
    assert macro_f1(["a", "a"], ["a", "b"]) == pytest.approx((2 / 3 + 0) / 2)


def test_macro_f1_perfect_and_all_wrong():
    truth = ["yes", "no", "maybe", "yes"]
    assert macro_f1(truth, truth) == 1.0
    assert macro_f1(["yes", "no"], ["no", "yes"]) == 0.0


def test_macro_f1_binary_is_mean_of_both_classes_f1():
    truth = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    pred = [1, 1, 1, 0, 1, 1, 0, 0, 0, 0]
    # positive class: tp 3, fp 2, fn 1 -> 6/9; negative: tp 4, fp 1, fn 2 -> 8/11
    assert macro_f1(truth, pred) == pytest.approx((6 / 9 + 8 / 11) / 2)


@pytest.mark.parametrize("seed", range(8))
def test_macro_f1_matches_precision_recall_formula(seed):
    rng = random.Random(100 + seed)
    labels = ["yes", "no", "maybe"]
    truth = [rng.choice(labels) for _ in range(40)]
    pred = [t if rng.random() < 0.5 else rng.choice(labels + ["unreadable"]) for t in truth]
    assert macro_f1(truth, pred) == pytest.approx(macro_f1_from_confusion(truth, pred), abs=1e-12)


@pytest.mark.parametrize("t,p", [([], []), (["a"], ["a", "b"])])
def test_macro_f1_undefined_for_empty_or_unequal(t, p):
    assert macro_f1(t, p) is None


def test_macro_f1_is_invariant_to_item_order():
    truth = ["a", "b", "c", "a", "b", "c", "a"]
    pred = ["a", "c", "c", "b", "b", "a", "a"]
    order = [6, 2, 0, 5, 1, 4, 3]
    assert macro_f1([truth[i] for i in order], [pred[i] for i in order]) == pytest.approx(
        macro_f1(truth, pred)
    )


def test_stats_module_does_not_import_numpy_at_import_time():
    """The module promise: exam runs need only Wilson, so importing stats must not load numpy."""
    import subprocess
    import sys

    code = "import sys, grandrounds.scoring.stats as s; s.wilson_ci(3, 10); print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
