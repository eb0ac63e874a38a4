"""How well the 2PL fit (grandrounds.analyses.irt_fit) recovers known parameters, how honest its ability
errors are, and how long it takes.

For each design, responses are drawn from known abilities, difficulties and discriminations
(seeded), the fit runs on the items that separate the respondents, and the script prints:

- Pearson r of recovered vs true difficulty, discrimination and ability (mean over seeds);
- the *bound* on recovery: the same r for the Bayes posterior means of each item's
  discrimination and difficulty computed with the true abilities and the true prior (a grid over
  a and b), which an estimator that sees only the responses is not expected to beat;
- ability-SE coverage: the share of true abilities inside the 95% intervals, after putting the
  estimates on the truth's scale by the items' difficulties (mean-sigma linking, Kolen & Brennan,
  *Test Equating, Scaling, and Linking*, 3rd ed., sec. 6.2);
- a planted wrong key (one item's responses inverted): how often it is flagged, and how many
  other items are flagged (false alarms);
- fit time, also at the sizes of real exams (MedQA's 1,273 and MedMCQA's 4,183 questions).

    python bench/irt_recovery.py            # about a minute on 2 cores
    python bench/irt_recovery.py --seeds 10

Measured (2 shared cores, 5 seeds): see the README's item response theory section.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from grandrounds.analyses.irt import Respondent, Responses, analyse
from grandrounds.analyses.irt_fit import fit_2pl, informative

DESIGNS = {
    # abilities spread like models on a leaderboard (30%-90% accuracy), items of varied quality
    "leaderboard": dict(
        theta=("uniform", -2.5, 2.5), a=("uniform", 0.5, 2.5), b=("uniform", -2.0, 2.0)
    ),
    # the textbook simulation: standard-normal abilities and difficulties, log-normal discrimination
    "textbook": dict(theta=("normal", 0.0, 1.0), a=("lognormal", 0.0, 0.3), b=("normal", 0.0, 1.0)),
    # discriminations from 0 to 3 (some items barely separate anyone)
    "wide-a": dict(theta=("uniform", -2.5, 2.5), a=("uniform", 0.0, 3.0), b=("uniform", -2.0, 2.0)),
}


def draw(rng: np.random.Generator, spec: tuple[str, float, float], size: int) -> np.ndarray:
    kind, p, q = spec
    if kind == "uniform":
        return rng.uniform(p, q, size)
    if kind == "normal":
        return rng.normal(p, q, size)
    return rng.lognormal(p, q, size)


def density(spec: tuple[str, float, float], x: np.ndarray) -> np.ndarray:
    kind, p, q = spec
    if kind == "uniform":
        return ((x >= p) & (x <= q)).astype(float)
    if kind == "normal":
        return np.exp(-0.5 * ((x - p) / q) ** 2)
    safe = np.maximum(x, 1e-9)
    return np.where(x > 0, np.exp(-0.5 * ((np.log(safe) - p) / q) ** 2) / safe, 0.0)


def simulate(
    design: dict, n: int, j: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    theta, a, b = (
        draw(rng, design["theta"], n),
        draw(rng, design["a"], j),
        draw(rng, design["b"], j),
    )
    y = (rng.random((n, j)) < 1 / (1 + np.exp(-a * (theta[:, None] - b)))).astype(float)
    return theta, a, b, y


def oracle(design: dict, theta: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Posterior means of each item's discrimination and difficulty given the TRUE abilities and
    the true prior (on a grid)."""
    ag = (
        np.linspace(0.01, 4.0, 70)
        if design["a"][0] == "lognormal"
        else np.linspace(design["a"][1], design["a"][2], 70)
    )
    bspec = design["b"]
    bg = np.linspace(-4, 4, 90) if bspec[0] == "normal" else np.linspace(bspec[1], bspec[2], 90)
    A, B = np.meshgrid(ag, bg, indexing="ij")
    prior = np.log(density(design["a"], A) + 1e-300) + np.log(density(bspec, B) + 1e-300)
    z = A[..., None] * (theta[None, None, :] - B[..., None])
    lp, lq = -np.logaddexp(0, -z), -np.logaddexp(0, z)
    out_a, out_b = np.empty(y.shape[1]), np.empty(y.shape[1])
    for k in range(y.shape[1]):
        ll = prior + (lp * y[:, k] + lq * (1 - y[:, k])).sum(-1)
        w = np.exp(ll - ll.max())
        out_a[k], out_b[k] = (w * A).sum() / w.sum(), (w * B).sum() / w.sum()
    return out_a, out_b


def r(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.corrcoef(x, y)[0, 1])


def recovery(
    name: str, n: int, j: int, seeds: int, with_oracle: bool, missing: float = 0.0
) -> None:
    design = DESIGNS[name]
    rows = []
    inside = total = 0
    secs = []
    for s in range(seeds):
        theta, a, b, y = simulate(design, n, j, 1000 + s)
        if missing:
            y[np.random.default_rng(s).random(y.shape) < missing] = np.nan
        keep = informative(y)
        fit = fit_2pl(y[:, keep])
        secs.append(fit.seconds)
        if with_oracle and not missing:
            best_a, best_b = oracle(design, theta, y[:, keep])
            bound_a, bound_b = r(best_a, a[keep]), r(best_b, b[keep])
        else:
            bound_a = bound_b = float("nan")
        rows.append(
            (
                r(fit.b, b[keep]),
                r(fit.a, a[keep]),
                r(fit.theta, theta),
                bound_a,
                keep.mean(),
                bound_b,
            )
        )
        scale = np.std(b[keep]) / np.std(fit.b)
        shift = np.mean(b[keep]) - scale * np.mean(fit.b)
        inside += int(
            np.sum(np.abs(scale * fit.theta + shift - theta) <= 1.96 * scale * fit.theta_se)
        )
        total += n
    m = np.array(rows).mean(axis=0)
    lo = np.array(rows).min(axis=0)
    bound_a = "" if np.isnan(m[3]) else f"{m[3]:.3f}"
    bound_b = "" if np.isnan(m[5]) else f"{m[5]:.3f}"
    print(
        f"{name:<12} {n:>4} x {j:<5} {missing:>4.0%}  {m[0]:.3f} ({lo[0]:.3f}) {bound_b:>6}  {m[1]:.3f} ({lo[1]:.3f}) {bound_a:>6}  "
        f"{m[2]:.3f}  {inside / total:6.1%}  {m[4]:5.1%}  {np.mean(secs):6.2f}"
    )


def wrong_keys(seeds: int) -> None:
    found95 = found = false_alarms = false95 = 0
    for s in range(seeds):
        theta, a, b, y = simulate(DESIGNS["leaderboard"], 20, 500, 2000 + s)
        y[:, 0] = 1 - (
            np.random.default_rng(s).random(20) < 1 / (1 + np.exp(-1.5 * theta))
        )  # an a=1.5, b=0 item, key inverted
        res = analyse(
            Responses(
                benchmark="sim",
                dataset="d",
                respondents=tuple(
                    Respondent(
                        model=f"m{i}",
                        answer_mode="generate",
                        protocol="grandrounds",
                        run_id=str(i),
                        grader_fp="",
                    )
                    for i in range(20)
                ),
                items=tuple(str(k) for k in range(500)),
                y=y,
            )
        )
        flagged = {it.id: it for it in res.negative}
        found += "0" in flagged
        found95 += "0" in flagged and flagged["0"].negative_95
        false_alarms += len(flagged) - ("0" in flagged)
        false95 += sum(1 for k, it in flagged.items() if k != "0" and it.negative_95)
    print(
        f"planted wrong key (20 x 500, leaderboard design, {seeds} seeds): flagged {found}/{seeds}, "
        f"below 0 at 95% {found95}/{seeds}; other items flagged: {false_alarms / seeds:.1f} per 500, "
        f"{false95 / seeds:.1f} below 0 at 95% (all true discriminations >= 0.5)"
    )


def timing() -> None:
    for n, j in ((20, 500), (20, 1273), (20, 4183), (50, 4183), (100, 1273)):
        _, _, _, y = simulate(DESIGNS["leaderboard"], n, j, 7)
        keep = informative(y)
        t = time.perf_counter()
        fit = fit_2pl(y[:, keep])
        print(
            f"fit {n:>3} respondents x {int(keep.sum()):>5} items: {time.perf_counter() - t:6.2f} s ({fit.iterations} iterations, converged {fit.converged})"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args()
    print(
        "r = Pearson correlation with the truth, mean over seeds (worst seed in brackets); bound = the r reached by the"
    )
    print(
        "posterior mean given the TRUE abilities and prior; coverage = true abilities inside the 95% intervals; kept = items fitted\n"
    )
    print(
        f"{'design':<12} {'size':>12} {'miss':>4}  {'r(difficulty)':<14} {'bound':>6}  {'r(discrim.)':<14} {'bound':>6}  {'r(abil)':<6} {'coverage':>7} {'kept':>5} {'secs':>6}"
    )
    for name in DESIGNS:
        recovery(name, 20, 500, args.seeds, with_oracle=True)
    recovery("leaderboard", 20, 500, args.seeds, with_oracle=False, missing=0.3)
    for n in (50, 100, 200):
        recovery("leaderboard", n, 500, args.seeds, with_oracle=False)
    print()
    wrong_keys(args.seeds * 2)
    print()
    timing()


if __name__ == "__main__":
    main()
