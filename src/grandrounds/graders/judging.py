"""The one judge engine: ask, parse, re-ask unreadable replies only, panel votes, resume.

Every judged protocol (HealthBench, MedEQBench, GAPS, LLMEval-Med) describes its judge prompts as
:class:`Ask` units: the item ids a prompt covers, how to build the prompt for the ids still
pending, and how to read a reply. The engine then:

- sends the prompt to a judge and reads the reply; items the reply does not settle are asked
  again with the next ``attempt`` number (so the cache never returns the same unreadable reply),
  at most ``max_reask`` times; items still unread become ``unknown`` votes with the raw reply;
- a failed judge call (the executor already retried it) makes its pending items unknown at once,
  with the error kept on the vote, so a later re-grade can ask again;
- asks every judge of the panel and returns one :class:`~grandrounds.core.records.Vote` per judge per
  item; the grader's own rule (majority, GAPS' vote, a mean of runs) decides from the votes;
- when re-grading with ``only_unknown``, known votes are kept and only unknown ones asked again,
  continuing the attempt numbers each vote has used.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grandrounds.core.errors import ConfigError
from grandrounds.core.markers import (  # re-exported: graders build prompts with them
    answer_boundary as answer_boundary,
)
from grandrounds.core.markers import (
    delimit_answer as delimit_answer,
)
from grandrounds.core.records import Message, Verdict, VerdictStatus, Vote
from grandrounds.graders.base import GradeContext, Judge

#: Recorded in the template hashes of a grading whose judges see the answer between markers
#: (:func:`delimit_answer`); the version names the wording and the marker form.
ANSWER_MARKERS = {"answer_markers": "v1"}


_MARKED = re.compile(r"<<(ANSWER-[0-9a-f]{16})>>\n(.*?)\n<</\1>>", re.S)


def marked_answer(prompt: str) -> str | None:
    """The answer a judge prompt holds between its markers (:func:`delimit_answer`), or None."""
    m = _MARKED.search(prompt)
    return m.group(2) if m else None


@dataclass(frozen=True)
class Reading:
    """What a parser read for one item: a verdict, optionally a numeric score and an explanation."""

    status: VerdictStatus
    explanation: str = ""
    score: float | None = None


#: Reads one reply for the pending ids: id -> Reading (or any value, for free-form asks).
Parser = Callable[[str, Sequence[str]], Mapping[str, Any]]


def fixed(messages: Sequence[Message]) -> Callable[[Sequence[str]], Sequence[Message]]:
    """An :class:`Ask`'s ``build`` for a one-item prompt made beforehand: ``messages``, whatever is
    pending."""
    return lambda _pending: messages


@dataclass(frozen=True)
class Ask:
    """One judge prompt covering ``ids``.

    ``build`` makes the messages for the ids still pending (a batched prompt may re-ask only
    those; a single-item prompt ignores the argument); ``parse`` reads a reply. ``first_attempt``
    fixes the first attempt number (protocols that ask the same prompt several times on purpose,
    like LLMEval-Med's runs, space them apart); None continues after the item's earlier votes.
    """

    ids: tuple[str, ...]
    build: Callable[[Sequence[str]], Sequence[Message]]
    parse: Parser
    first_attempt: int | None = None


@dataclass(frozen=True, kw_only=True)
class Reply:
    """One ask with its re-asks: per id the value read and the reply it was read from."""

    read: Mapping[str, tuple[Any, str]]
    raw: str
    next_attempt: int
    keys: tuple[str, ...]
    error: str | None = None
    #: A reply of this ask was cut off by the judge's token limit.
    truncated: bool = False


async def ask(judge: Judge, a: Ask, first_attempt: int, max_reask: int) -> Reply:
    """Send ``a`` to ``judge``; re-ask (attempt + 1) while ids are unread, at most ``max_reask`` times."""
    pending = list(a.ids)
    read: dict[str, tuple[Any, str]] = {}
    keys: list[str] = []
    raw = ""
    attempt = first_attempt
    truncated = False
    while pending and attempt <= first_attempt + max_reask:
        resp = await judge(tuple(a.build(pending)), attempt=attempt)
        keys.append(resp.key)
        attempt += 1
        if not resp.ok or resp.text is None:
            return Reply(
                read=read,
                raw=raw,
                next_attempt=attempt,
                keys=tuple(keys),
                error=f"judge call failed: {resp.error or 'no text'}",
                truncated=truncated,
            )
        raw = resp.text
        truncated = truncated or resp.truncated
        for item, value in a.parse(resp.text, pending).items():
            if item in pending and value is not None:
                read[item] = (value, resp.text)
        pending = [i for i in pending if i not in read]
    return Reply(read=read, raw=raw, next_attempt=attempt, keys=tuple(keys), truncated=truncated)


def votes_of(
    judge: str, a: Ask, reply: Reply, prior: Mapping[str, Vote], run: int = 0
) -> dict[str, Vote]:
    """One vote per id of ``a`` from ``reply``; unread ids are unknown, with the reason kept.

    ``attempts`` counts every prompt sent for the vote, earlier gradings included.
    """
    out: dict[str, Vote] = {}
    for item in a.ids:
        old = prior.get(item)
        keys = (old.keys if old else ()) + reply.keys
        attempts = (old.attempts if old else 0) + len(reply.keys)
        if item in reply.read:
            value, raw = reply.read[item]
            if not isinstance(value, Reading):
                raise TypeError(
                    f"a judge vote needs a Reading, the parser gave {type(value).__name__}"
                )
            out[item] = Vote(
                judge=judge,
                status=value.status,
                score=value.score,
                explanation=value.explanation,
                raw=raw,
                attempts=attempts,
                keys=keys,
                run=run,
                truncated=reply.truncated,
            )
        else:
            why = reply.error or "judge reply could not be read"
            raw = "" if reply.error else reply.raw
            out[item] = Vote(
                judge=judge,
                status="unknown",
                explanation=why,
                raw=raw,
                attempts=attempts,
                keys=keys,
                error=reply.error,
                run=run,
                truncated=reply.truncated,
            )
    return out


def majority(statuses: Sequence[str]) -> VerdictStatus:
    """Majority of the known votes; a tie (or no known vote) is ``unknown``."""
    met = sum(1 for s in statuses if s == "met")
    unmet = sum(1 for s in statuses if s == "unmet")
    if met > unmet:
        return "met"
    if unmet > met:
        return "unmet"
    return "unknown"


def previous_votes(ctx: GradeContext) -> dict[str, tuple[Vote, ...]]:
    """Per criterion, the stored votes to resume from (only when re-grading unknowns)."""
    if not (ctx.only_unknown and ctx.previous is not None):
        return {}
    return {v.criterion_id: v.votes for v in ctx.previous.verdicts}


async def panel(
    ids: Sequence[str],
    make_asks: Callable[[int, Sequence[str]], Sequence[Ask]],
    ctx: GradeContext,
    previous: Mapping[str, Sequence[Vote]] | None = None,
) -> dict[str, tuple[Vote, ...]]:
    """Votes of every judge in ``ctx`` on ``ids``, in panel order.

    With ``previous`` (item -> stored votes in panel order), a judge is asked only about items
    whose vote from it is missing or unknown; its known votes are reused as they are.
    ``make_asks(judge_index, pending_ids)`` builds the prompts.
    """
    if not ctx.judges:
        raise ConfigError("this benchmark is graded by an LLM judge; configure one (--judge)")
    previous = previous or {}

    def prior(j: int, item: str) -> Vote | None:
        old = previous.get(item, ())
        return old[j] if j < len(old) else None

    async def one_judge(j: int, judge: Judge) -> dict[str, Vote]:
        pending = [i for i in ids if (p := prior(j, i)) is None or p.status == "unknown"]
        if not pending:
            return {}
        asks = make_asks(j, pending)
        olds = [{i: p for i in a.ids if (p := prior(j, i)) is not None} for a in asks]
        starts = [
            a.first_attempt
            if a.first_attempt is not None
            else max((v.attempts for v in old.values()), default=0)
            for a, old in zip(asks, olds)
        ]
        replies = await asyncio.gather(
            *(ask(judge, a, s, ctx.max_reask) for a, s in zip(asks, starts))
        )
        got: dict[str, Vote] = {}
        for a, reply, old in zip(asks, replies, olds):
            got.update(votes_of(judge.name, a, reply, old))
        return got

    fresh = await asyncio.gather(*(one_judge(j, judge) for j, judge in enumerate(ctx.judges)))
    out: dict[str, tuple[Vote, ...]] = {}
    for item in ids:
        row = []
        for j, judge in enumerate(ctx.judges):
            vote = fresh[j].get(item) or prior(j, item)
            row.append(
                vote
                if vote is not None
                else Vote(judge=judge.name, status="unknown", explanation="not asked")
            )
        out[item] = tuple(row)
    return out


def decide(
    item: str, votes: Sequence[Vote], rule: Callable[[Sequence[str]], str] = majority
) -> Verdict:
    """A verdict from votes by ``rule``; the explanation is the first deciding vote's."""
    decided = rule([v.status for v in votes])
    status: VerdictStatus = (
        "met" if decided == "met" else "unmet" if decided == "unmet" else "unknown"
    )
    chosen = [v for v in votes if v.status == status] if status != "unknown" else list(votes)
    explanation = next((v.explanation for v in chosen if v.explanation), "")
    return Verdict(item, status, explanation, tuple(votes))


async def judge_criteria(
    ids: Sequence[str],
    make_asks: Callable[[int, Sequence[str]], Sequence[Ask]],
    ctx: GradeContext,
    rule: Callable[[Sequence[str]], str] = majority,
) -> tuple[Verdict, ...]:
    """Verdicts for ``ids`` (in order) from every judge; known verdicts kept when re-grading unknowns."""
    kept: dict[str, Verdict] = {}
    if ctx.only_unknown and ctx.previous is not None:
        kept = {v.criterion_id: v for v in ctx.previous.verdicts if v.status != "unknown"}
    todo = [i for i in ids if i not in kept]
    votes = await panel(todo, make_asks, ctx, previous_votes(ctx)) if todo else {}
    return tuple(kept[i] if i in kept else decide(i, votes[i], rule) for i in ids)


def judge_keys(verdicts: Sequence[Verdict], votes: Sequence[Vote] = ()) -> tuple[str, ...]:
    """Every judge request key behind ``verdicts`` and ``votes``, in first-use order, no repeats."""
    keys = [k for v in verdicts for k in v.judge_keys] + [k for v in votes for k in v.keys]
    return tuple(dict.fromkeys(keys))


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


def compare_modes(grades_a: Sequence[Any], grades_b: Sequence[Any]) -> ModeComparison:
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
