"""Item response theory over the store: a two-parameter logistic model of who gets which item right.

Each *respondent* is one setting of one model on a benchmark (model + answer mode + protocol),
represented by the grades of its latest result; each *item* is a sample id. A right answer is 1,
a wrong one 0, and an unscored answer (failed call, unreadable reply, grader error) is missing,
never 0. Graded benchmarks (values strictly between 0 and 1) are refused unless a threshold is
given, which turns ``value >= threshold`` into a right answer and is recorded with the figures.

The model is the two-parameter logistic, P(right) = sigmoid(a_j * (theta_i - b_j)), fitted by
joint maximum a posteriori estimation: its formulas, sources and standard errors are in
:mod:`grandrounds.analyses.irt_fit`; here, the responses read from the store and the fit read for
people (abilities, item parameters, candidate wrong keys).

Items every respondent gets right, or none does, carry no information on the model's parameters
(the likelihood grows without bound as b runs to -inf or +inf); they are listed and left out of
the fit, like items fewer than two respondents answered.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

from grandrounds.analyses.irt_fit import Fit2PL, IrtError, Priors, fit_2pl, informative

if TYPE_CHECKING:
    from grandrounds.store import Store

#: Fewer respondents than this and a benchmark gets no fit (the CLI says so; the report skips it).
MIN_RESPONDENTS = 3

#: z for a two-sided 95% interval.
Z95 = 1.959963984540054


# ---------------------------------------------------------------------------------------------
# responses, and the analysis of a fit
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
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
        benchmark=benchmark,
        dataset=dataset,
        respondents=tuple(r for r, _ in kept),
        items=items,
        y=y,
        threshold=threshold,
        notes=tuple(notes),
    )


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
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


@dataclass(frozen=True, kw_only=True)
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
                    id=sid,
                    n=int(n_obs[j]),
                    n_right=int(n_right[j]),
                    status="fitted",
                    difficulty=float(fit.b[k]),
                    difficulty_se=float(fit.b_se[k]),
                    discrimination=float(fit.a[k]),
                    discrimination_se=float(fit.a_se[k]),
                )
            )
            k += 1
        else:
            status = (
                "too_few"
                if n_obs[j] < 2
                else ("all_right" if n_right[j] == n_obs[j] else "all_wrong")
            )
            items.append(ItemFit(id=sid, n=int(n_obs[j]), n_right=int(n_right[j]), status=status))
    abilities = []
    at = 0  # the respondent's row in the fit
    for i, who in enumerate(resp.respondents):
        n_i, right_i = int(observed[i].sum()), int(np.nansum(y[i]))
        if rows[i]:
            abilities.append(
                Ability(
                    respondent=who,
                    n=n_i,
                    n_right=right_i,
                    theta=float(fit.theta[at]),
                    se=float(fit.theta_se[at]),
                )
            )
            at += 1
        else:
            abilities.append(Ability(respondent=who, n=n_i, n_right=right_i, theta=None, se=None))
    return IrtAnalysis(
        benchmark=resp.benchmark,
        dataset=resp.dataset,
        threshold=resp.threshold,
        abilities=tuple(abilities),
        items=tuple(items),
        fit=fit,
        notes=tuple(notes),
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
        model=model,
        answer_mode=str(fp.get("answer_mode") or "generate"),
        protocol=protocol_label(fp),
        run_id=run_id,
        grader_fp=grader_fp,
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
