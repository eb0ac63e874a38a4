"""The two-parameter logistic fit behind :mod:`grandrounds.analyses.irt`: the estimates and their
standard errors from a respondents x items matrix of right (1), wrong (0) and missing (NaN) answers.

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
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from grandrounds.core.errors import GrandroundsError


class IrtError(GrandroundsError):
    """An item response fit that cannot be made from what the store holds."""


@dataclass(frozen=True)
class Priors:
    """Normal priors of the joint MAP fit (means and standard deviations)."""

    theta_sd: float = 1.0
    a_mean: float = 1.0
    a_sd: float = 1.0
    b_sd: float = 2.0


@dataclass(frozen=True, kw_only=True)
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
        theta=theta,
        theta_se=theta_se,
        a=a,
        a_se=a_se,
        b=b,
        b_se=b_se,
        log_posterior=lp,
        iterations=iterations,
        converged=converged,
        seconds=time.perf_counter() - start,
        priors=priors,
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
