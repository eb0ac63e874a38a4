"""MedEQBench grader: the whole rubric in one judge call, one ``加分项_<n>_"名称":<0|1> | Reason: …`` line per item.

``Params.protocol`` picks how (the protocols are described in :mod:`grandrounds.benchmarks.medeqbench`):

- ``reference``: the official ``evaluate_prompt`` (Health_EQBench.py @ 8a3a047, read at run time
  from the pinned file) filled by ``str.format`` with the question, the answer as the model
  returned it, only stripped of surrounding whitespace as OpenCompass's OpenAI wrapper stores it
  (the official reasoning stripper is never called), and the rubric cell. The
  reply is read by the official line pattern (utils.py ``parse_llm_evaluation``): an ASCII colon
  before the 0/1 and ``| Reason: … |`` after it are required, every matching line counts (a
  repeated line counts again), and an item with no line counts 0; nothing is re-asked.
- ``grandrounds``: our template (``templates/medeq_judge.txt``), reasoning traces removed from the
  answer and from the reply, lines read tolerantly (full-width ``：`` ``｜`` ``＿`` and digits, a
  missing Reason part, quotes around the 0/1), the first line per item wins, missing items are
  re-asked (attempt + 1) and those still missing recorded as ``unknown``.

Every grade reads its judge replies both ways: ``details["reference_counts"]`` holds the official
counted value of each official item (the sum of its lines' 0/1s), ``details["other_value"]`` the
other protocol's question score, so a run's aggregate shows both figures.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from grandrounds.core.records import Grade, Message, Response, Sample, Verdict, VerdictStatus
from grandrounds.core.textutil import normalize_width, strip_leading_reasoning, strip_reasoning
from grandrounds.graders.base import GradeContext, Grader, load_templates
from grandrounds.graders.judging import (
    ANSWER_MARKERS,
    Ask,
    Reading,
    delimit_answer,
    judge_criteria,
    judge_keys,
    majority,
)
from grandrounds.scoring.medeq import question_score, reference_question, sample_items
from grandrounds.sources.protocols import check_protocol
from grandrounds.sources.upstream import UpstreamText

TEMPLATE_NAME = "medeq_judge"

# ---- reading a reply: ours ------------------------------------------------------------------------

_LINE = re.compile(
    # key, then anything up to the colon (a quoted name may itself contain colons), then the 0/1
    r"(加分项|减分项)\s*_\s*(\d+)[^\n\"“]*?(?:[\"“][^\"”\n]*[\"”])?[^:\n]*?:\s*[\"'“”‘’]?\s*([01])\b[\"'“”‘’]?"
    r"(?:\s*\|\s*(?:Reason|reason|理由)?\s*:?\s*([^|\n]*))?"
)


def parse_medeq_reply(text: str) -> dict[str, tuple[bool, str]]:
    """Item key (``加分项_<n>``) -> (met, reason) for every readable line; where several lines read
    one key, the first gives the reason, and lines that disagree leave the key unread (the answer
    the judge quotes may hold lines of its own)."""
    body = normalize_width(strip_leading_reasoning(text))
    out: dict[str, tuple[bool, str]] = {}
    split: set[str] = set()
    for m in _LINE.finditer(body):
        key = f"{m.group(1)}_{int(m.group(2))}"
        met = m.group(3) == "1"
        if key not in out:
            out[key] = (met, (m.group(4) or "").strip())
        elif out[key][0] != met:
            split.add(key)
    return {k: v for k, v in out.items() if k not in split}


def _read_ours(text: str, pending: Sequence[str]) -> dict[str, Reading]:
    found = parse_medeq_reply(text)
    return {
        cid: Reading("met" if found[cid][0] else "unmet", found[cid][1])
        for cid in pending
        if cid in found
    }


# ---- reading a reply: the reference's ------------------------------------------------------------

#: The line pattern of utils.py ``parse_llm_evaluation`` @ 8a3a047, with its meaning spelled out.
#: Matches never overlap and each one counts; the reply is read raw (no width folding, and
#: lines inside a ``<think>`` block count too).
_OFFICIAL_LINE = re.compile(
    r"""
    (加分项|减分项) _ (\d+)      # item type and number; \d also takes full-width digits, which then match no item
    [^:]* :                     # anything but an ASCII colon, across lines if need be; '：' is not a colon here
    ([01]) \s* \| \s*           # the verdict and a bar
    Reason: \s* (.*?) \s* \|    # the literal 'Reason:', a reason on the same line, and a closing bar
    """,
    re.X,
)


def reference_lines(text: str) -> list[tuple[str, int, str]]:
    """Every (item key, 0/1, reason) the official parser reads from ``text``, in order, repeats kept.

    The key is spelt as the official code builds it (``加分项_`` + the digits as written), so
    ``加分项_０１`` is a key no rubric item has.
    """
    return [
        (f"{kind}_{number}", int(value), reason.strip())
        for kind, number, value, reason in _OFFICIAL_LINE.findall(text)
    ]


def reference_counts(text: str) -> dict[str, int]:
    """Item key -> the sum of its lines' 0/1s: what utils.py ``calc_score_percent_one_query`` multiplies by the weight."""
    out: dict[str, int] = {}
    for key, value, _ in reference_lines(text):
        out[key] = out.get(key, 0) + value
    return out


def _read_reference(text: str, pending: Sequence[str]) -> dict[str, Reading]:
    """One Reading per pending item, so nothing is re-asked (the reference never re-asks).

    ``score`` holds the counted value (2 for a ``1`` line given twice); an item with no line is
    ``unknown`` here and counts 0 in the reference's arithmetic.
    """
    lines = reference_lines(text)
    counts = reference_counts(text)
    reasons: dict[str, str] = {}
    for key, _, reason in lines:
        reasons.setdefault(key, reason)
    out: dict[str, Reading] = {}
    for cid in pending:
        if cid in counts:
            out[cid] = Reading(
                "met" if counts[cid] > 0 else "unmet", reasons[cid], float(counts[cid])
            )
        else:
            out[cid] = Reading(
                "unknown",
                "no line the official parser reads for this item (counted 0 by the reference)",
            )
    return out


# ---- values from verdicts -------------------------------------------------------------------------

Items = Mapping[str, tuple[float, str]]


def official_counts(
    verdicts: Sequence[Verdict], items: Items, statuses: Mapping[str, str] | None = None
) -> tuple[dict[str, float], bool]:
    """(official counted value per item that has a line, whether any item has one), from the replies behind the votes.

    Each vote is re-read from its raw reply by the official parser; a panel's value is the mean
    over its judges (a judge without a line for the item counts 0). A verdict with no votes, or
    one whose status ``statuses`` changes (a clinician review), counts 1 if met, else 0.
    """
    by_id = {v.criterion_id: v for v in verdicts}
    cache: dict[str, dict[str, int]] = {}
    counts: dict[str, float] = {}
    for key in items:
        v = by_id.get(key)
        if v is None:
            continue
        status = (statuses or {}).get(key, v.status)
        if not v.votes or status != v.status:
            if status in ("met", "unmet"):
                counts[key] = 1 if status == "met" else 0
            continue
        for vote in v.votes:
            if vote.raw not in cache:
                cache[vote.raw] = reference_counts(vote.raw)
        read = [cache[vote.raw] for vote in v.votes]
        if any(key in r for r in read):
            values = [r.get(key, 0) for r in read]
            counts[key] = values[0] if len(values) == 1 else sum(values) / len(values)
    return counts, bool(counts)


def tolerant_verdicts(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """The verdicts our tolerant reader gives the same replies (majority over the panel's votes)."""
    cache: dict[str, dict[str, tuple[bool, str]]] = {}
    out = []
    for v in verdicts:
        if not v.votes:
            out.append(v)
            continue
        statuses = []
        for vote in v.votes:
            if vote.raw not in cache:
                cache[vote.raw] = parse_medeq_reply(vote.raw)
            got = cache[vote.raw]
            statuses.append(
                ("met" if got[v.criterion_id][0] else "unmet")
                if v.criterion_id in got
                else "unknown"
            )
        out.append(Verdict(v.criterion_id, majority(statuses)))
    return out


def _present(tags: Mapping[str, float]) -> dict[str, float | None]:
    return {t: (None if math.isnan(x) else x) for t, x in tags.items()}


# ---- the grader ----------------------------------------------------------------------------------


@functools.cache
def official_template() -> UpstreamText:
    """The official judge prompt, read from the pinned Health_EQBench.py (``evaluate_prompt``)."""
    from grandrounds.sources.medeqbench import EVALUATE_PROMPT

    return EVALUATE_PROMPT.load()


def rubric_text(sample: Sample) -> str:
    """The rubric as the judge sees it: the original cell, or one rebuilt from the criteria."""
    text = sample.metadata.get("rubric_text")
    if isinstance(text, str) and text.strip():
        return text
    lines, section = [], ""
    for c in sample.rubric:
        kind, _, number = c.id.partition("_")
        if kind != section:
            lines.append(kind)
            section = kind
        dim = c.tags[0] if c.tags else ""
        lines.append(f"{number}、【{dim}】{c.text}{{{'+' if c.points > 0 else ''}{int(c.points)}}}")
    return "\n".join(lines)


@dataclass(frozen=True)
class MedEQParams:
    #: ``reference`` (the official prompt and line parser) or ``grandrounds`` (ours).
    protocol: str = "reference"

    def __post_init__(self) -> None:
        check_protocol(self.protocol)


READERS: Mapping[str, Callable[[str, Sequence[str]], dict[str, Reading]]] = {
    "reference": _read_reference,
    "grandrounds": _read_ours,
}


class MedEQGrader(Grader):
    """One judge call per answer covering all rubric items; the question score of the chosen protocol."""

    name = "medeq"
    Params = MedEQParams
    judged = True

    def __init__(self, params: MedEQParams | None = None) -> None:
        super().__init__(params)
        self.protocol: str = self.params.protocol
        self.templates = {} if self.protocol == "reference" else load_templates(TEMPLATE_NAME)

    def template_hashes(self) -> dict[str, Any]:
        if self.protocol == "reference":
            return {"evaluate_prompt": official_template().fingerprint()}
        return super().template_hashes() | ANSWER_MARKERS

    def prompt(self, sample: Sample, answer: str) -> str:
        """The judge prompt of this protocol for ``sample`` and the candidate's reply."""
        question = "\n".join(m.text for m in sample.messages if m.role == "user")
        if (
            self.protocol == "reference"
        ):  # Health_EQBench.py: evaluate_prompt.format(question=, answer=, rubric=)
            # the prediction as OpenCompass's OpenAI wrapper stores it: the reply's content, stripped
            return official_template().text.format(
                question=question, answer=answer.strip(), rubric=rubric_text(sample)
            )
        shown = delimit_answer(strip_reasoning(answer), question)
        return self.templates[TEMPLATE_NAME].format(
            question=question, answer=shown, rubric=rubric_text(sample)
        )

    def planned_judge_calls(self, sample: Sample, judges: int = 1) -> int | None:
        """The whole rubric in one call per judge."""
        return judges if sample.rubric else 0

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        messages = (Message("user", self.prompt(sample, response.text or "")),)
        ids = [c.id for c in sample.rubric]
        read = READERS[self.protocol]
        verdicts = await judge_criteria(
            ids, lambda _j, pending: [Ask(tuple(pending), lambda _p: messages, read)], ctx
        )
        return self.grade_of(sample, verdicts)

    def grade_of(self, sample: Sample, verdicts: Sequence[Verdict]) -> Grade:
        """The grade from the verdicts (and the replies behind their votes), with the other protocol's value."""
        items = sample_items(sample)
        counts, any_line = official_counts(verdicts, items)
        ref = reference_question(items, counts) if any_line else None
        ours = question_score(
            sample.rubric,
            verdicts if self.protocol == "grandrounds" else tolerant_verdicts(verdicts),
        )
        known = sum(1 for v in verdicts if v.status in ("met", "unmet"))
        details: dict[str, Any] = {
            "protocol": self.protocol,
            "coverage": {"known": known, "total": len(sample.rubric)},
            "n_unknown": len(sample.rubric) - known,
            "reference_counts": counts,
        }
        keys = judge_keys(verdicts)
        if self.protocol == "reference":
            details |= {
                "dimension_scores": _present(ref.tags) if ref else {},
                "other_value": ours.score,
            }
            if ref is None:
                why = (
                    next((vote.error for v in verdicts for vote in v.votes if vote.error), None)
                    or "no line the official parser reads"
                )
                return Grade(
                    sample_id=sample.id,
                    value=None,
                    verdicts=tuple(verdicts),
                    details=details,
                    error=f"{why}; the official evaluator counts this answer 0",
                    judge_keys=keys,
                    status="unreadable",
                )
            return Grade(
                sample_id=sample.id,
                value=ref.score,
                verdicts=tuple(verdicts),
                details=details,
                judge_keys=keys,
            )
        details |= {
            "dimension_scores": dict(ours.dimensions),
            "other_value": ref.score if ref else None,
        }
        if ours.score is None:
            return Grade(
                sample_id=sample.id,
                value=None,
                verdicts=tuple(verdicts),
                details=details,
                error="no positive item has a known verdict",
                judge_keys=keys,
                status="unreadable",
            )
        return Grade(
            sample_id=sample.id,
            value=ours.score,
            verdicts=tuple(verdicts),
            details=details,
            judge_keys=keys,
        )

    def rescore(self, sample: Sample, grade: Grade, statuses: Mapping[str, str]) -> float | None:
        """The question score with reviewed items decided as the reviewer says (the protocol's arithmetic)."""
        if self.protocol == "reference":
            items = sample_items(sample)
            counts, any_line = official_counts(grade.verdicts, items, statuses)
            return reference_question(items, counts).score if any_line else None
        # a review decides an item met or unmet
        verdicts = [
            replace(v, status=cast(VerdictStatus, statuses.get(v.criterion_id, v.status)))
            for v in grade.verdicts
        ]
        return question_score(sample.rubric, verdicts).score
