"""Shared rubric-judging machinery: ask a judge until every criterion is read, panels, re-grading.

A benchmark's grader describes its judge prompts as :class:`Ask` units (one per criterion, or one
covering a whole rubric) and a parser turning a reply into per-criterion verdicts. This module
runs them against every judge in the context:

- an unreadable reply (or criteria missing from it) is re-asked with ``attempt`` 1..max_reask,
  then the criteria still missing become ``unknown`` with the raw reply kept;
- a failed judge call makes its pending criteria ``unknown`` at once (the runner already retried);
- with several judges, a criterion's verdict is the majority of the known votes (ties -> unknown);
- with ``ctx.only_unknown`` and ``ctx.previous``, known verdicts are kept and only the unknown
  votes re-asked, continuing the attempt numbers recorded in ``Verdict.attempts``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from importlib.resources import files
from typing import Callable, Mapping, Sequence

from grandrounds.errors import ConfigError
from grandrounds.graders.base import GradeContext, Judge
from grandrounds.records import Grade, Message, Verdict, VerdictStatus

#: criterion id -> (met, explanation) for the criteria a reply could be read for.
Parsed = Mapping[str, tuple[bool, str]]


def load_template(name: str) -> str:
    """A judge template shipped in ``grandrounds/templates`` (its hash goes into the fingerprint)."""
    return (files("grandrounds") / "templates" / name).read_text(encoding="utf-8")


@dataclass(frozen=True)
class Ask:
    """One judge prompt covering ``criterion_ids``.

    ``build`` makes the messages for the criteria still pending (a batched grader may re-ask
    only those; a whole-rubric grader ignores the argument); ``parse`` reads a reply.
    """

    criterion_ids: tuple[str, ...]
    build: Callable[[Sequence[str]], Sequence[Message]]
    parse: Callable[[str, Sequence[str]], Parsed]


@dataclass(frozen=True)
class Vote:
    """One judge's ruling on one criterion."""

    status: VerdictStatus
    explanation: str = ""
    raw: str = ""
    attempts: int = 0
    keys: tuple[str, ...] = ()


async def ask_judge(judge: Judge, ask: Ask, first_attempt: int, max_reask: int) -> dict[str, Vote]:
    """Ask one judge, re-asking (attempt + 1) while criteria are missing, at most ``max_reask`` times."""
    pending = list(ask.criterion_ids)
    votes: dict[str, Vote] = {}
    keys: list[str] = []
    raw = ""
    attempt = first_attempt
    while pending and attempt <= first_attempt + max_reask:
        resp = await judge(tuple(ask.build(pending)), attempt=attempt)
        keys.append(resp.key)
        attempt += 1
        if not resp.ok or resp.text is None:
            why = f"judge call failed: {resp.error or 'no text'}"
            return votes | {c: Vote("unknown", why, "", attempt, tuple(keys)) for c in pending}
        raw = resp.text
        parsed = ask.parse(resp.text, pending)
        for cid in pending:
            if cid in parsed:
                met, expl = parsed[cid]
                votes[cid] = Vote("met" if met else "unmet", expl, resp.text, attempt, tuple(keys))
        pending = [c for c in pending if c not in votes]
    return votes | {c: Vote("unknown", "judge reply could not be read", raw, attempt, tuple(keys)) for c in pending}


def majority(statuses: Sequence[VerdictStatus]) -> VerdictStatus:
    """Majority of the known votes; a tie (or no known vote) is ``unknown``."""
    met = sum(1 for s in statuses if s == "met")
    unmet = sum(1 for s in statuses if s == "unmet")
    if met > unmet:
        return "met"
    if unmet > met:
        return "unmet"
    return "unknown"


def _combine(cid: str, votes: Sequence[Vote], prev: Verdict | None) -> Verdict:
    status = majority([v.status for v in votes])
    chosen = [v for v in votes if v.status == status]
    if status == "unknown":
        raw = "\n---\n".join(v.raw for v in votes if v.raw)
        expl = next((v.explanation for v in votes if v.explanation), "")
    else:
        raw, expl = chosen[0].raw, chosen[0].explanation
    keys = list(prev.judge_keys) if prev else []
    keys += [k for v in votes for k in v.keys if k not in keys]
    attempts = max([v.attempts for v in votes] + [prev.attempts if prev else 0])
    return Verdict(cid, status, expl, raw, tuple(v.status for v in votes), attempts, tuple(keys))


def _needs_asking(prev: Verdict | None, judge_index: int, n_judges: int) -> bool:
    if prev is None or prev.status != "unknown":
        return prev is None
    if len(prev.votes) == n_judges:
        return prev.votes[judge_index] == "unknown"
    return True


async def judge_rubric(
    criterion_ids: Sequence[str],
    make_asks: Callable[[Sequence[str]], Sequence[Ask]],
    ctx: GradeContext,
) -> tuple[Verdict, ...]:
    """Verdicts for ``criterion_ids`` (in order) from every judge in ``ctx``; see the module doc."""
    if not ctx.judges:
        raise ConfigError("this benchmark is graded by an LLM judge; configure one (--judge)")
    regrade = ctx.only_unknown and ctx.previous is not None
    prev = {v.criterion_id: v for v in ctx.previous.verdicts} if regrade and ctx.previous else {}
    n = len(ctx.judges)

    async def one_judge(j: int, judge: Judge) -> dict[str, Vote]:
        pending = [c for c in criterion_ids if not regrade or _needs_asking(prev.get(c), j, n)]
        if not pending:
            return {}
        asks = make_asks(pending)
        start = [max((prev[c].attempts for c in a.criterion_ids if c in prev), default=0) for a in asks]
        results = await asyncio.gather(*(ask_judge(judge, a, s, ctx.max_reask) for a, s in zip(asks, start)))
        return {cid: vote for r in results for cid, vote in r.items()}

    per_judge = await asyncio.gather(*(one_judge(j, judge) for j, judge in enumerate(ctx.judges)))
    out = []
    for cid in criterion_ids:
        old = prev.get(cid)
        if old is not None and old.status != "unknown":
            out.append(old)
            continue
        votes = []
        for j in range(n):
            if cid in per_judge[j]:
                votes.append(per_judge[j][cid])
            elif old is not None and len(old.votes) == n:
                votes.append(Vote(old.votes[j], old.explanation))
            else:  # not asked and nothing to reuse: cannot happen, but never guess
                votes.append(Vote("unknown"))
        out.append(_combine(cid, votes, old))
    return tuple(out)


def judge_keys(verdicts: Sequence[Verdict]) -> tuple[str, ...]:
    """Every judge request key behind ``verdicts``, in first-use order, without repeats."""
    return tuple(dict.fromkeys(k for v in verdicts for k in v.judge_keys))


@dataclass(frozen=True)
class ModeComparison:
    """Agreement of two gradings of the same answers, over criteria known in both."""

    n_compared: int
    n_agree: int
    only_a_known: int
    only_b_known: int

    @property
    def agreement(self) -> float | None:
        return self.n_agree / self.n_compared if self.n_compared else None


def compare_modes(grades_a: Sequence[Grade], grades_b: Sequence[Grade]) -> ModeComparison:
    """Compare e.g. batched vs per-criterion judging: share of (sample, criterion) verdicts that agree.

    Pairs are matched by sample id and criterion id; only criteria known (met/unmet) in both count
    towards the agreement; those known in one grading only are counted separately.
    """
    b_index = {(g.sample_id, v.criterion_id): v.status for g in grades_b for v in g.verdicts}
    compared = agree = only_a = only_b = 0
    seen = set()
    for g in grades_a:
        for v in g.verdicts:
            key = (g.sample_id, v.criterion_id)
            seen.add(key)
            other = b_index.get(key, "unknown")
            a_known, b_known = v.status != "unknown", other != "unknown"
            if a_known and b_known:
                compared += 1
                agree += v.status == other
            elif a_known:
                only_a += 1
            elif b_known:
                only_b += 1
    only_b += sum(1 for key, s in b_index.items() if key not in seen and s != "unknown")
    return ModeComparison(compared, agree, only_a, only_b)
