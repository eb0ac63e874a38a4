"""Item response theory over the store: a two-parameter logistic model of who gets which item right.

Each *respondent* is one setting of one model on a benchmark (model + answer mode + protocol),
represented by the grades of its latest result; each *item* is a sample id. A right answer is 1,
a wrong one 0, and an unscored answer (failed call, unreadable reply, grader error) is missing,
never 0. Graded benchmarks (values strictly between 0 and 1) are refused unless a threshold is
given, which turns ``value >= threshold`` into a right answer and is recorded with the figures.

The model (Birnbaum's two-parameter logistic, in Lord & Novick 1968, ch. 17):

    P(respondent i answers item j right) = sigmoid(a_j * (theta_i - b_j))

with ability ``theta_i``, difficulty ``b_j`` and discrimination ``a_j``. It is fitted by joint
maximum a posteriori estimation (joint maximum likelihood with priors, Baker & Kim 2004,
*Item Response Theory: Parameter Estimation Techniques*, 2nd ed., ch. 3 and 7): theta ~ N(0, 1)
fixes the scale, a ~ N(1, 1) and b ~ N(0, 2^2) keep items stable when only a handful of models
answered them. The prior on ``a`` is normal, not log-normal, so a discrimination may come out
negative: an item that strong models miss and weak ones get right, the signature of a wrong
answer key. Responses are missing at random: the likelihood runs over observed cells only.
The posterior is maximised jointly over all parameters by Newton steps (Fisher scoring where the
observed information is not positive definite), each halved until the posterior rises; as an
item's posterior given the abilities can have two modes (an item that separates little fits
about as well with its slope mirrored), every item's other mode is sought too and the higher
one kept. numpy only.

Standard errors come from the observed information (minus the Hessian of the log posterior) at
the estimate. Abilities' errors account for the uncertainty of every item's parameters through
the Schur complement of the item blocks (the item part of the information is block diagonal,
one 2x2 block per item), so the whole matrix is never formed.

Items every respondent gets right, or none does, carry no information on the model's parameters
(the likelihood grows without bound as b runs to -inf or +inf); they are listed and left out of
the fit, like items fewer than two respondents answered.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

from grandrounds.core.errors import GrandroundsError

if TYPE_CHECKING:
    from grandrounds.store import Store

#: Fewer respondents than this and a benchmark gets no fit (the CLI says so; the report skips it).
MIN_RESPONDENTS = 3

#: z for a two-sided 95% interval.
Z95 = 1.959963984540054


class IrtError(GrandroundsError):
    """An item response fit that cannot be made from what the store holds."""


# ---------------------------------------------------------------------------------------------
# the fit
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Priors:
    """Normal priors of the joint MAP fit (means and standard deviations)."""

    theta_sd: float = 1.0
    a_mean: float = 1.0
    a_sd: float = 1.0
    b_sd: float = 2.0


@dataclass(frozen=True)
class Fit2PL:
    """Estimates and standard errors of a 2PL fit; respondents and items in the input's order."""

    theta: np.ndarray
    theta_se: np.ndarray
    a: np.ndarray
    a_se: np.ndarray
    b: np.ndarray
    b_se: np.ndarray
    log_posterior: float
    iterations: int
    converged: bool
    seconds: float
    priors: Priors


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # stable for large |z|


def fit_2pl(
    y: np.ndarray, priors: Priors = Priors(), max_iter: int = 500, tol: float = 1e-6
) -> Fit2PL:
    """Fit the 2PL model to ``y`` (respondents x items, 1.0 right, 0.0 wrong, NaN missing).

    Every item should have both a right and a wrong answer among its observed responses (see
    :func:`informative`); the priors keep the estimates finite otherwise, but such items say
    nothing about the model. Returns estimates with standard errors from the observed information.
    """
    y = np.asarray(y, dtype=float)
    if y.ndim != 2 or y.shape[0] < 2 or y.shape[1] < 1:
        raise IrtError(
            f"a 2PL fit needs a respondents x items matrix with at least 2 respondents and 1 item, got shape {y.shape}"
        )
    observed = ~np.isnan(y)
    if not observed.any(axis=1).all():
        raise IrtError("every respondent needs at least one observed response")
    mask = observed.astype(float)
    yy = np.where(observed, y, 0.0)
    start = time.perf_counter()
    theta, a, b = _start(yy, mask)
    iterations, converged = 0, False
    for _ in range(10):
        theta, a, b, lp, it, converged = _ascend(
            theta, a, b, yy, mask, priors, max_iter - iterations, tol
        )
        iterations += it
        # Given the abilities, an item's posterior over (a, b) can have two modes, one the other's
        # near mirror image (a, b) ~ (-a', -b') when the item separates little. The climb finds
        # the one it started near; take the other wherever it is higher, and climb again.
        a, b, switched = _better_item_modes(theta, a, b, yy, mask, priors)
        if not switched or iterations >= max_iter:
            break
    theta_se, a_se, b_se = _standard_errors(theta, a, b, yy, mask, priors)
    lp = _log_posterior(theta, a, b, yy, mask, priors)
    return Fit2PL(
        theta,
        theta_se,
        a,
        a_se,
        b,
        b_se,
        lp,
        iterations,
        converged,
        time.perf_counter() - start,
        priors,
    )


def _ascend(
    theta: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    yy: np.ndarray,
    mask: np.ndarray,
    priors: Priors,
    max_iter: int,
    tol: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, int, bool]:
    """Climb the joint posterior from (theta, a, b) to where its gradient vanishes."""
    lp = _log_posterior(theta, a, b, yy, mask, priors)
    converged, it = False, 0
    for it in range(1, max_iter + 1):  # noqa: B007 (the count of steps is returned)
        diff = theta[:, None] - b[None, :]
        p = _sigmoid(a[None, :] * diff)
        w = mask * p * (1 - p)
        r = mask * (yy - p)
        g_theta = r @ a - theta / priors.theta_sd**2
        g_item = np.stack(
            [
                np.sum(r * diff, axis=0) - (a - priors.a_mean) / priors.a_sd**2,
                -a * r.sum(axis=0) - b / priors.b_sd**2,
            ],
            axis=1,
        )
        if max(float(np.max(np.abs(g_theta))), float(np.max(np.abs(g_item)))) < tol:
            converged = True
            break
        # A Newton step (observed information) where it points uphill, else a Fisher scoring step
        # (expected information, which the priors keep positive definite, so it always climbs);
        # either is halved until the posterior rises.
        moved = None
        for info in (
            _information(a, diff, w, r, priors),
            _information(a, diff, w, np.zeros_like(r), priors),
        ):
            got = _solve(*info, g_theta, g_item)
            if got is None or float(got[0] @ g_theta + np.sum(got[1] * g_item)) <= 0:
                continue
            moved = _climb(theta, a, b, got, lp, yy, mask, priors)
            if moved is not None:
                break
        if (
            moved is None
        ):  # no step raises the posterior: as close to the maximum as floating point gets
            converged = True
            break
        theta, a, b, lp = moved
    return theta, a, b, lp, it, converged


def _item_log_posterior(
    theta: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    yy: np.ndarray,
    mask: np.ndarray,
    priors: Priors,
) -> np.ndarray:
    """Each item's part of the log posterior given the abilities."""
    z = a[None, :] * (theta[:, None] - b[None, :])
    ll = np.sum(mask * (yy * z - np.logaddexp(0.0, z)), axis=0)
    return ll - 0.5 * ((a - priors.a_mean) ** 2 / priors.a_sd**2 + b**2 / priors.b_sd**2)


def _better_item_modes(
    theta: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    yy: np.ndarray,
    mask: np.ndarray,
    priors: Priors,
    max_iter: int = 100,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Climb every item's posterior given the abilities from the mirror image (-a, -b) of its
    estimate (Newton steps, Fisher scoring where the item's observed information is not positive
    definite, each halved until that item's posterior rises); keep the new mode where it is
    higher. Returns the items' parameters and how many changed."""
    here = _item_log_posterior(theta, a, b, yy, mask, priors)
    a2, b2 = -a, -b
    lp2 = _item_log_posterior(theta, a2, b2, yy, mask, priors)
    active = np.arange(len(a))
    for _ in range(max_iter):
        if not len(active):
            break
        ya, ma, aa, ba = yy[:, active], mask[:, active], a2[active].copy(), b2[active].copy()
        diff = theta[:, None] - ba[None, :]
        p = _sigmoid(aa[None, :] * diff)
        w = ma * p * (1 - p)
        r = ma * (ya - p)
        g = np.stack(
            [
                np.sum(r * diff, axis=0) - (aa - priors.a_mean) / priors.a_sd**2,
                -aa * r.sum(axis=0) - ba / priors.b_sd**2,
            ],
            axis=1,
        )
        done = np.max(np.abs(g), axis=1) < 1e-7
        c_obs = _information(aa, diff, w, r, priors)[2]
        c_exp = _information(aa, diff, w, np.zeros_like(r), priors)[2]
        det = c_obs[:, 0, 0] * c_obs[:, 1, 1] - c_obs[:, 0, 1] ** 2
        c = np.where(((det > 0) & (c_obs[:, 0, 0] > 0))[:, None, None], c_obs, c_exp)
        inverse = _inverse2(c)
        assert (
            inverse is not None
        )  # every block is positive definite: the expected one is, under the priors
        step = _times(inverse, g)
        cur = lp2[active]
        pending = np.flatnonzero(
            ~done
        )  # positions in ``active`` still looking for a step that climbs
        t = 1.0
        while len(pending) and t > 1e-10:
            ta, tb = aa[pending] + t * step[pending, 0], ba[pending] + t * step[pending, 1]
            new = _item_log_posterior(theta, ta, tb, ya[:, pending], ma[:, pending], priors)
            ok = new > cur[pending]
            hit = pending[ok]
            aa[hit], ba[hit], cur[hit] = ta[ok], tb[ok], new[ok]
            pending = pending[~ok]
            t /= 2
        a2[active], b2[active], lp2[active] = aa, ba, cur
        stuck = np.zeros(len(active), dtype=bool)
        stuck[pending] = True
        active = active[~done & ~stuck]  # converged, or no step climbs any more: stop there
    better = lp2 > here + 1e-9 * np.maximum(1.0, np.abs(here))
    return np.where(better, a2, a), np.where(better, b2, b), int(better.sum())


def _climb(
    theta: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    step: tuple[np.ndarray, np.ndarray],
    lp: float,
    yy: np.ndarray,
    mask: np.ndarray,
    priors: Priors,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float] | None:
    """The step, halved until the log posterior rises (None if it never does)."""
    d_theta, d_item = step
    t = 1.0
    while t > 1e-8:
        t2, a2, b2 = theta + t * d_theta, a + t * d_item[:, 0], b + t * d_item[:, 1]
        lp2 = _log_posterior(t2, a2, b2, yy, mask, priors)
        if lp2 > lp:
            return t2, a2, b2, lp2
        t /= 2
    return None


def _log_posterior(
    theta: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    yy: np.ndarray,
    mask: np.ndarray,
    priors: Priors,
) -> float:
    """Log-likelihood of the observed cells (a Bernoulli with logit z: y z - log(1 + e^z)) plus the
    log prior densities, up to a constant."""
    z = a[None, :] * (theta[:, None] - b[None, :])
    ll = float(np.sum(mask * (yy * z - np.logaddexp(0.0, z))))
    return ll - 0.5 * (
        float(np.sum(theta**2)) / priors.theta_sd**2
        + float(np.sum((a - priors.a_mean) ** 2)) / priors.a_sd**2
        + float(np.sum(b**2)) / priors.b_sd**2
    )


def _solve(
    d: np.ndarray, bt: np.ndarray, c: np.ndarray, g_theta: np.ndarray, g_item: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Solve [[D, B], [B', C]] [x; u] = [g; h] by eliminating the items' 2x2 blocks:
    x = S^-1 (g - B C^-1 h) with S = D - B C^-1 B', then u = C^-1 (h - B' x). None when the
    matrix is not positive definite."""
    got = _schur(d, bt, c)
    if got is None:
        return None
    cinv, bc, s, _ = got
    x = np.linalg.solve(s, g_theta - np.sum(bc * g_item[None, :, :], axis=(1, 2)))
    u = _times(cinv, g_item - np.tensordot(x, bt, axes=(0, 0)))
    return x, u


def _inverse2(c: np.ndarray) -> np.ndarray | None:
    """Inverses of a stack of symmetric 2x2 matrices; None unless all are positive definite."""
    det = c[:, 0, 0] * c[:, 1, 1] - c[:, 0, 1] * c[:, 1, 0]
    if not (np.all(det > 0) and np.all(c[:, 0, 0] > 0)):
        return None
    cinv = np.empty_like(c)
    cinv[:, 0, 0] = c[:, 1, 1] / det
    cinv[:, 1, 1] = c[:, 0, 0] / det
    cinv[:, 0, 1] = cinv[:, 1, 0] = -c[:, 0, 1] / det
    return cinv


def _times(m: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``v[..., j, :] @ m[j]`` for a stack of 2x2 matrices ``m`` (symmetric, so also m[j] @ v)."""
    return np.stack(
        [
            v[..., 0] * m[:, 0, 0] + v[..., 1] * m[:, 1, 0],
            v[..., 0] * m[:, 0, 1] + v[..., 1] * m[:, 1, 1],
        ],
        axis=-1,
    )


def _schur(
    d: np.ndarray, bt: np.ndarray, c: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """C^-1, B C^-1 (n x items x 2), S = D - B C^-1 B' and the inverse of S's Cholesky factor;
    None unless every item block and S are positive definite."""
    cinv = _inverse2(c)
    if cinv is None:
        return None
    n, j = bt.shape[:2]
    bc = _times(cinv, bt)
    s = np.diag(d) - bc.reshape(n, 2 * j) @ bt.reshape(n, 2 * j).T
    try:
        chol_inv = np.linalg.inv(np.linalg.cholesky(s))
    except np.linalg.LinAlgError:
        return None
    return cinv, bc, s, chol_inv


def _start(yy: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Starting values: standardised logits of each respondent's and each item's share right."""
    n_obs_r = mask.sum(axis=1)
    n_obs_i = mask.sum(axis=0)
    pr = (yy.sum(axis=1) + 0.5) / (n_obs_r + 1.0)
    pi = (yy.sum(axis=0) + 0.5) / (np.maximum(n_obs_i, 0) + 1.0)
    lr = np.log(pr / (1 - pr))
    theta = (lr - lr.mean()) / (lr.std() or 1.0)
    b = -np.log(pi / (1 - pi))
    return theta, np.ones(yy.shape[1]), b


def _standard_errors(
    theta: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    yy: np.ndarray,
    mask: np.ndarray,
    priors: Priors,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Standard errors from the inverse of the observed information at the estimate.

    The information I = -H is [[D, B], [B', C]] with D diagonal (abilities), C block diagonal
    (a 2x2 block (a_j, b_j) per item) and B the ability-item cross terms. By the block inverse,
    the abilities' covariance is (D - B C^-1 B')^-1 and item j's is
    C_j^-1 + C_j^-1 B_j' S^-1 B_j C_j^-1 with S = D - B C^-1 B'.
    """
    diff = theta[:, None] - b[None, :]
    p = _sigmoid(a[None, :] * diff)
    w = mask * p * (1 - p)
    r = mask * (yy - p)
    obs = _information(a, diff, w, r, priors)
    out = _invert_blocks(*obs)
    if out is None:  # the observed information is not positive definite here: use the expected one
        out = _invert_blocks(*_information(a, diff, w, np.zeros_like(r), priors))
    if out is None:
        nan_n, nan_j = np.full(len(theta), math.nan), np.full(len(a), math.nan)
        return nan_n, nan_j, nan_j.copy()
    return out


def _information(
    a: np.ndarray, diff: np.ndarray, w: np.ndarray, r: np.ndarray, priors: Priors
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Minus the Hessian of the log posterior, as (D diagonal, B as n x items x 2, C as items x 2 x 2).

    Second derivatives of sum y*z - log(1+e^z), z = a (theta - b), p = sigmoid(z), w = p (1-p),
    r = y - p: d2/dtheta2 = -a^2 w; d2/dtheta da = r - a (theta-b) w; d2/dtheta db = a^2 w;
    d2/da2 = -(theta-b)^2 w; d2/da db = -r + a (theta-b) w; d2/db2 = -a^2 w.
    """
    d = (w * a[None, :] ** 2).sum(axis=1) + 1.0 / priors.theta_sd**2
    bt = np.stack([a[None, :] * diff * w - r, -(a[None, :] ** 2) * w], axis=2)  # n x items x 2
    c = np.empty((len(a), 2, 2))
    c[:, 0, 0] = (diff**2 * w).sum(axis=0) + 1.0 / priors.a_sd**2
    c[:, 0, 1] = c[:, 1, 0] = (r - a[None, :] * diff * w).sum(axis=0)
    c[:, 1, 1] = a**2 * w.sum(axis=0) + 1.0 / priors.b_sd**2
    return d, bt, c


def _invert_blocks(
    d: np.ndarray, bt: np.ndarray, c: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    got = _schur(d, bt, c)
    if got is None:
        return None
    cinv, bc, _, chol_inv = got
    n, j = bt.shape[:2]
    s_inv = chol_inv.T @ chol_inv
    t = (s_inv @ bc.reshape(n, 2 * j)).reshape(n, j, 2)
    item_var = np.stack([cinv[:, 0, 0], cinv[:, 1, 1]], axis=1) + np.sum(
        bc * t, axis=0
    )  # + diag of C_j^-1 B_j' S^-1 B_j C_j^-1
    return np.sqrt(np.diag(s_inv)), np.sqrt(item_var[:, 0]), np.sqrt(item_var[:, 1])


def informative(y: np.ndarray) -> np.ndarray:
    """Items with at least two observed responses, at least one right and one wrong."""
    observed = ~np.isnan(y)
    right = np.nansum(y, axis=0)
    n = observed.sum(axis=0)
    return (n >= 2) & (right > 0) & (right < n)


# ---------------------------------------------------------------------------------------------
# responses, and the analysis of a fit
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Respondent:
    """One setting of one model on a benchmark: the grades of one stored result stand for it."""

    model: str
    answer_mode: str
    protocol: str
    run_id: str
    grader_fp: str

    @property
    def label(self) -> str:
        return f"{self.model} · {self.answer_mode} · {self.protocol}"


@dataclass(frozen=True)
class Responses:
    """Right (1) / wrong (0) / missing (NaN) answers: respondents x items (sample ids) of one dataset."""

    benchmark: str
    dataset: str
    respondents: tuple[Respondent, ...]
    items: tuple[str, ...]
    y: np.ndarray
    threshold: float | None = None
    notes: tuple[str, ...] = ()


def responses_from_values(
    benchmark: str,
    dataset: str,
    values: Sequence[tuple[Respondent, Mapping[str, float | None]]],
    order: Sequence[str] = (),
    threshold: float | None = None,
    notes: Iterable[str] = (),
) -> Responses:
    """The response matrix from each respondent's per-sample values (None = unscored = missing).

    Values other than 0 and 1 need ``threshold`` (``value >= threshold`` is right); without one
    they are refused with an error that says how many there are. Items are ``order``'s ids first
    (a dataset's source order), then any other id, sorted; an id no respondent has a score for is
    not an item. Respondents with no scored answer at all are left out, and a note says so.
    """
    notes = list(notes)
    graded = [
        v for _, vals in values for v in vals.values() if v is not None and v not in (0.0, 1.0)
    ]
    if graded and threshold is None:
        n_all = sum(1 for _, vals in values for v in vals.values() if v is not None)
        raise IrtError(
            f"{benchmark} has graded answers ({len(graded)} of {n_all} scored values lie strictly between 0 and 1, e.g. {graded[0]:.3g}): "
            "this fit models right/wrong answers; pass --threshold T to count a value >= T as right"
        )
    kept = []
    for resp, vals in values:
        if any(v is not None for v in vals.values()):
            kept.append((resp, vals))
        else:
            notes.append(f"{resp.label} has no scored answer on {benchmark} and is left out")
    scored_ids = {sid for _, vals in kept for sid, v in vals.items() if v is not None}
    ordered = [sid for sid in dict.fromkeys(order) if sid in scored_ids]
    items = tuple(ordered + sorted(scored_ids - set(ordered)))
    col = {sid: k for k, sid in enumerate(items)}
    y = np.full((len(kept), len(items)), np.nan)
    for i, (_, vals) in enumerate(kept):
        for sid, v in vals.items():
            if v is not None:
                y[i, col[sid]] = float(v >= threshold) if threshold is not None else float(v)
    return Responses(
        benchmark, dataset, tuple(r for r, _ in kept), items, y, threshold, tuple(notes)
    )


@dataclass(frozen=True)
class ItemFit:
    """One item: its responses, and its parameters when it was fitted.

    ``status`` is ``fitted``, ``all_right`` (every respondent that answered got it right),
    ``all_wrong`` (none did) or ``too_few`` (fewer than two scored responses); only fitted items
    have parameters.
    """

    id: str
    n: int
    n_right: int
    status: str
    difficulty: float | None = None
    difficulty_se: float | None = None
    discrimination: float | None = None
    discrimination_se: float | None = None

    @property
    def negative(self) -> bool:
        """Discrimination below zero: stronger respondents are likelier to get it wrong."""
        return self.discrimination is not None and self.discrimination < 0

    @property
    def negative_95(self) -> bool:
        """Discrimination below zero with 95% confidence (the upper end of its interval is < 0)."""
        d, se = self.discrimination, self.discrimination_se
        return d is not None and d < 0 and _finite(se) and d + Z95 * se < 0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "n": self.n,
            "n_right": self.n_right,
            "status": self.status,
            "difficulty": _num(self.difficulty),
            "difficulty_se": _num(self.difficulty_se),
            "discrimination": _num(self.discrimination),
            "discrimination_se": _num(self.discrimination_se),
            "negative_discrimination": self.negative,
            "negative_discrimination_95": self.negative_95,
        }


@dataclass(frozen=True)
class Ability:
    """A respondent's ability (theta) with its standard error and 95% interval."""

    respondent: Respondent
    n: int
    n_right: int
    theta: float | None
    se: float | None

    @property
    def ci95(self) -> tuple[float, float] | None:
        if self.theta is None or not _finite(self.se):
            return None
        return (self.theta - Z95 * self.se, self.theta + Z95 * self.se)

    def to_json(self) -> dict[str, Any]:
        r = self.respondent
        ci = self.ci95
        return {
            "label": r.label,
            "model": r.model,
            "answer_mode": r.answer_mode,
            "protocol": r.protocol,
            "run_id": r.run_id,
            "grader_fp": r.grader_fp,
            "n": self.n,
            "n_right": self.n_right,
            "ability": _num(self.theta),
            "se": _num(self.se),
            "ci95": [_num(ci[0]), _num(ci[1])] if ci else None,
        }


@dataclass(frozen=True)
class IrtAnalysis:
    """A benchmark's 2PL fit read for people: abilities, item parameters, flagged items."""

    benchmark: str
    dataset: str
    threshold: float | None
    abilities: tuple[Ability, ...]
    items: tuple[ItemFit, ...]
    fit: Fit2PL
    notes: tuple[str, ...] = ()

    def by_status(self, status: str) -> list[ItemFit]:
        return [it for it in self.items if it.status == status]

    @property
    def fitted(self) -> list[ItemFit]:
        return self.by_status("fitted")

    @property
    def negative(self) -> list[ItemFit]:
        """Candidate wrong keys: fitted items with negative discrimination, most negative first."""
        return sorted(
            (it for it in self.items if it.negative), key=lambda it: it.discrimination or 0.0
        )

    def to_json(self) -> dict[str, Any]:
        f = self.fit
        return {
            "benchmark": self.benchmark,
            "dataset": self.dataset,
            "model": f"2PL: P(right) = sigmoid(a_j * (theta_i - b_j)); joint MAP with theta~N(0,{f.priors.theta_sd:g}), a~N({f.priors.a_mean:g},{f.priors.a_sd:g}), b~N(0,{f.priors.b_sd:g})",
            "threshold": self.threshold,
            "fit": {
                "iterations": f.iterations,
                "converged": f.converged,
                "seconds": round(f.seconds, 4),
                "log_posterior": _num(f.log_posterior),
            },
            "counts": {
                "respondents": len(self.abilities),
                "items": len(self.items),
                "fitted": len(self.fitted),
                "all_right": len(self.by_status("all_right")),
                "all_wrong": len(self.by_status("all_wrong")),
                "too_few": len(self.by_status("too_few")),
                "negative_discrimination": len(self.negative),
                "negative_discrimination_95": sum(1 for it in self.items if it.negative_95),
            },
            "respondents": [a.to_json() for a in self.abilities],
            "items": [it.to_json() for it in self.items],
            "negative_discrimination": [it.id for it in self.negative],
            "all_right": [it.id for it in self.by_status("all_right")],
            "all_wrong": [it.id for it in self.by_status("all_wrong")],
            "notes": list(self.notes),
        }


def analyse(
    resp: Responses, min_respondents: int = MIN_RESPONDENTS, priors: Priors = Priors()
) -> IrtAnalysis:
    """Fit the 2PL model to ``resp`` and classify its items; an :class:`IrtError` says why it cannot."""
    n = len(resp.respondents)
    if n < min_respondents:
        have = ", ".join(r.label for r in resp.respondents) or "none"
        raise IrtError(
            f"item response theory on {resp.benchmark} needs at least {min_respondents} respondents "
            f"(a respondent is a model with an answer mode and a protocol); the store has {n} with scored answers ({have})"
        )
    y = resp.y
    observed = ~np.isnan(y)
    n_obs = observed.sum(axis=0)
    n_right = np.nansum(y, axis=0).astype(int)
    keep = informative(y)
    rows = observed[:, keep].any(axis=1)
    notes = list(resp.notes)
    if not keep.any():
        raise IrtError(
            f"no item of {resp.benchmark} separates the respondents: each was answered right by all or by none of them"
        )
    if rows.sum() < 2:
        raise IrtError(
            f"on {resp.benchmark}, fewer than 2 respondents answered an item that someone got right and someone wrong"
        )
    for none in np.flatnonzero(~rows):
        notes.append(
            f"{resp.respondents[none].label} answered no item that separates the respondents: no ability estimate"
        )
    fit = fit_2pl(y[np.ix_(rows, keep)], priors)
    if not fit.converged:
        notes.append(
            f"the optimiser stopped after {fit.iterations} iterations before meeting its tolerance: treat the figures as approximate"
        )
    items = []
    k = 0
    for j, sid in enumerate(resp.items):
        if keep[j]:
            items.append(
                ItemFit(
                    sid,
                    int(n_obs[j]),
                    int(n_right[j]),
                    "fitted",
                    float(fit.b[k]),
                    float(fit.b_se[k]),
                    float(fit.a[k]),
                    float(fit.a_se[k]),
                )
            )
            k += 1
        else:
            status = (
                "too_few"
                if n_obs[j] < 2
                else ("all_right" if n_right[j] == n_obs[j] else "all_wrong")
            )
            items.append(ItemFit(sid, int(n_obs[j]), int(n_right[j]), status))
    abilities = []
    at = 0  # the respondent's row in the fit
    for i, who in enumerate(resp.respondents):
        n_i, right_i = int(observed[i].sum()), int(np.nansum(y[i]))
        if rows[i]:
            abilities.append(
                Ability(who, n_i, right_i, float(fit.theta[at]), float(fit.theta_se[at]))
            )
            at += 1
        else:
            abilities.append(Ability(who, n_i, right_i, None, None))
    return IrtAnalysis(
        resp.benchmark,
        resp.dataset,
        resp.threshold,
        tuple(abilities),
        tuple(items),
        fit,
        tuple(notes),
    )


def _finite(x: float | None) -> TypeGuard[float]:
    return x is not None and math.isfinite(x)


def _num(x: float | None) -> float | None:
    """A figure for JSON: NaN and infinities (an estimate that could not be made) become null."""
    return float(x) if _finite(x) else None


# ---------------------------------------------------------------------------------------------
# reading the store
# ---------------------------------------------------------------------------------------------


def respondent_of(run_id: str, grader_fp: str, result: Mapping[str, Any], model: str) -> Respondent:
    """The respondent a stored result stands for: its model, answer mode and protocol."""
    from grandrounds.analyses.leaderboard import protocol_label

    fp = result.get("fingerprint") or {}
    return Respondent(
        model, str(fp.get("answer_mode") or "generate"), protocol_label(fp), run_id, grader_fp
    )


def collect(
    store: Store, benchmark: str, threshold: float | None = None, dataset: str | None = None
) -> Responses:
    """The response matrix of ``benchmark`` from the store: per respondent, its latest result.

    A benchmark whose results span several datasets (a different ``--data`` file) is fitted on
    one of them: ``dataset`` (a prefix of its sha256) or else the one with the most respondents;
    a note names the others. Errors (an :class:`IrtError`) say what is missing: an empty store, a
    benchmark nobody registered or nobody ran, an unknown dataset prefix.
    """
    runs = {r.id: r for r in store.runs()}
    latest: dict[
        tuple[str, str], Respondent
    ] = {}  # (dataset, label) -> respondent: the newest result wins
    benches: set[str] = set()
    n_probe = 0
    for run_id, fp, rj in store.results():  # oldest first
        run = runs.get(run_id)
        bench = rj.get("benchmark") or (run.benchmark if run else None)
        if bench is None or run is None:
            continue
        benches.add(bench)
        if bench != benchmark:
            continue
        if is_probe(rj):
            n_probe += 1
            continue
        who = respondent_of(run_id, fp, rj, rj.get("model") or run.model)
        latest[(run.dataset_sha256, who.label)] = who
    if not benches:
        raise IrtError(
            f"the store {store.path} holds no results yet: run a benchmark first (grandrounds run BENCHMARK --model SPEC)"
        )
    if not latest and n_probe:
        raise IrtError(
            f"{benchmark} has only robustness probe results in the store (perturbed questions); run it unperturbed first"
        )
    if not latest:
        raise IrtError(_no_benchmark(benchmark, sorted(benches), str(store.path)))
    by_dataset: dict[str, list[Respondent]] = {}
    for (ds, _), who in latest.items():
        by_dataset.setdefault(ds, []).append(who)
    if dataset:
        chosen = [ds for ds in by_dataset if ds.startswith(dataset)]
        if len(chosen) != 1:
            known = ", ".join(f"{ds[:12]} ({len(w)} respondents)" for ds, w in by_dataset.items())
            raise IrtError(
                f"--dataset {dataset!r} matches {len(chosen)} of the datasets {benchmark} has results on: {known}"
            )
        ds = chosen[0]
    else:
        ds = max(by_dataset, key=lambda d: (len(by_dataset[d]), d))
    notes = [
        f"{len(w)} respondent(s) on another dataset of {benchmark} ({other[:12]}) are not in this fit (pick it with --dataset {other[:12]})"
        for other, w in by_dataset.items()
        if other != ds
    ]
    respondents = sorted(by_dataset[ds], key=lambda r: r.label)
    values = [(r, store.grade_values(r.run_id, r.grader_fp)) for r in respondents]
    order = [s.id for s in store.samples(benchmark, ds)]
    if n_probe:
        notes.append(
            f"{n_probe} robustness probe result(s) (perturbed questions) are not in this fit"
        )
    if threshold is not None:
        notes.append(f"a value >= {threshold:g} counts as right")
    return responses_from_values(benchmark, ds, values, order, threshold, notes)


def _no_benchmark(benchmark: str, have: list[str], where: str) -> str:
    import difflib

    from grandrounds.core.registry import BENCHMARKS

    known = set(BENCHMARKS.names()) | set(have)
    listed = f"benchmarks with results in {where}: {', '.join(have)}"
    if benchmark not in known:
        close = difflib.get_close_matches(benchmark, sorted(known), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        return f"unknown benchmark {benchmark!r}{hint} ({listed})"
    return f"no results for {benchmark} in the store ({listed})"


def key_evidence(
    store: Store, analysis: IrtAnalysis, item_ids: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """For items flagged as candidate wrong keys: the stored key and what the stronger half of the
    respondents answered (see :func:`evidence`), read from the store."""

    def target(sid: str) -> str | None:
        sample = store.sample(analysis.benchmark, analysis.dataset, sid)
        return None if sample is None or sample.target is None else str(sample.target)

    def answer(who: Respondent, sid: str) -> tuple[float | None, str | None] | None:
        g = store.grade(who.run_id, who.grader_fp, sid)
        return None if g is None else (g.value, g.extracted)

    return evidence(analysis, item_ids, target, answer)


def evidence(
    analysis: IrtAnalysis,
    item_ids: Sequence[str],
    target: Callable[[str], str | None],
    answer: Callable[[Respondent, str], tuple[float | None, str | None] | None],
) -> dict[str, dict[str, Any]]:
    """Per item: its key (``target(id)``) and how often each answer was read from the stronger half
    of the respondents by ability (``answer(respondent, id)`` -> (value, extracted answer)); a reader
    judges a candidate wrong key at a glance when strong models agree on another option."""
    from collections import Counter

    ranked = sorted(
        (a for a in analysis.abilities if a.theta is not None), key=lambda a: -(a.theta or 0.0)
    )
    strong = ranked[: max(1, len(ranked) // 2)]
    out: dict[str, dict[str, Any]] = {}
    for sid in item_ids:
        answers: Counter[str] = Counter()
        for a in strong:
            got = answer(a.respondent, sid)
            if got is not None and got[0] is not None:
                answers[str(got[1]) if got[1] is not None else "(none read)"] += 1
        out[sid] = {"key": target(sid), "stronger_half_answered": dict(answers.most_common())}
    return out


def is_probe(result: Mapping[str, Any]) -> bool:
    """A robustness probe's result (perturbed questions: not the benchmark's items). Its benchmark
    spec in the fingerprint reads ``name{"probe": ...}``."""
    spec = str((result.get("fingerprint") or {}).get("benchmark") or "")
    _, brace, rest = spec.partition("{")
    if not brace:
        return False
    try:
        args = json.loads(brace + rest)
    except ValueError:
        return False
    return isinstance(args, dict) and "probe" in args


def responses_from_section(section: Any) -> tuple[Responses, dict[tuple[str, str, str], Any]]:
    """The response matrix of one drill-down section of the report (a benchmark dataset with each
    result's grade per sample), and per (run id, grader fingerprint, sample id) its grade, for :func:`evidence`.

    The report holds every stored result but not when each was made, so where one respondent has
    several results (a re-grade, a run with another --limit) the one with the most scored answers
    stands for it. Probe runs are left out. Raises :class:`IrtError` for graded values.
    """
    rows: dict[tuple[str, str], Any] = {}
    vals: dict[tuple[str, str], dict[str, float | None]] = {}
    graded: dict[tuple[str, str, str], Any] = {}
    for item in section.items:
        for a in item.answers:
            row = a.row
            if is_probe({"fingerprint": row.fingerprint}):
                continue
            rows.setdefault(row.key, row)
            vals.setdefault(row.key, {})[item.sample.id] = (
                a.grade.value if a.grade is not None else None
            )
            if a.grade is not None:
                graded[(row.run_id, row.grader_fp, item.sample.id)] = a.grade
    best: dict[str, tuple[Respondent, dict[str, float | None]]] = {}
    for key, row in rows.items():
        who = respondent_of(row.run_id, row.grader_fp, {"fingerprint": row.fingerprint}, row.model)
        n = sum(v is not None for v in vals[key].values())
        if who.label not in best or n > sum(v is not None for v in best[who.label][1].values()):
            best[who.label] = (who, vals[key])
    values = [best[label] for label in sorted(best)]
    order = [item.sample.id for item in section.items]
    return responses_from_values(section.benchmark, section.dataset, values, order), graded
