"""LLMEval-Med judge: a holistic score per answer, averaged over several judge runs.

Protocol (LLMEval-Med Evaluate.py and evaluate/Aggregate.py): one
Chinese prompt per category, the judge sees only the current turn (question, answer, reference
``sanswer`` and, for three categories, the checklist); the score is the first ``[n]`` in the
reply. Over N runs, ``mean = mean(valid scores)`` and the answer is *usable* iff ``mean >= 4.0``.

``Params.protocol`` picks how (see :mod:`grandrounds.benchmarks.llmeval_med`):

- ``reference``: Evaluate.py's prompt, read from the pinned file; the answer as Answer.py keeps
  it (the whole generated text, stripped); the score as Evaluate.py and Aggregate.py read it
  (:func:`official_score`), every reply taken as it is (no re-ask: a reply without a valid score
  is an invalid run, as officially). ``Grade.value`` is None when no run has a valid score; the
  benchmark's reference rate counts that answer as unusable.
- ``grandrounds``: our templates, reasoning traces removed, :func:`parse_score` (1..5 only, full
  width folded, ``【n】`` too), unreadable replies re-asked.

Each grade also reads the same replies the other protocol's way (``details["other_value"]`` and
``other_run_scores``), so a result carries both figures. Each judge run is a whole-answer
:class:`~grandrounds.core.records.Vote` on the grade (``Grade.votes``, with its ``run`` number and
``score``), asked through the shared judge engine.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from grandrounds.core.errors import ConfigError
from grandrounds.core.records import (
    Grade,
    GradeStatus,
    Message,
    Response,
    Sample,
    VerdictStatus,
    Vote,
)
from grandrounds.core.textutil import normalize_width, strip_leading_reasoning, strip_reasoning
from grandrounds.graders.base import GradeContext, Grader, load_templates
from grandrounds.graders.judge_json import explanation_text, extract_json_object
from grandrounds.graders.judging import (
    ANSWER_MARKERS,
    Ask,
    Reading,
    delimit_answer,
    judge_keys,
    panel,
)
from grandrounds.sources.llmeval_med import (
    CATEGORY_CODES,
    EVALUATE,
    SYSTEM_PROMPT,
    USABLE_THRESHOLD,
)
from grandrounds.sources.protocols import check_protocol
from grandrounds.sources.upstream import UpstreamText, python_string

__all__ = [
    "CATEGORY_CODES",
    "LLMEvalGrader",
    "LLMEvalParams",
    "official_score",
    "parse_score",
    "usability",
]

EMPTY = "（无）"  # ours: shown for a missing reference answer or checklist
OFFICIAL_MISSING = (
    "nan"  # Evaluate.py formats a NaN/absent sanswer or checklist into its f-string as "nan"
)

# grandrounds: re.search(r'\[(\d+)\]') after NFKC (full-width ［］ and digits folded), 【】 tolerated.
_SCORE = re.compile(r"[\[【]\s*(\d+)\s*[\]】]")
# Evaluate.py: re.search(r'\[(\d+)\]', resp); \d is any Unicode decimal digit, as there.
_OFFICIAL = re.compile(r"\[(\d+)\]")


def parse_score(text: str | None) -> int | None:
    """grandrounds: the ``[n]`` of a judge reply (leading reasoning removed) if 1 <= n <= 5, else
    None (re-ask); a reply whose bracketed scores disagree is unreadable too (the answer the
    judge quotes may hold a score of its own)."""
    if not text:
        return None
    scores = {
        int(m.group(1)) for m in _SCORE.finditer(normalize_width(strip_leading_reasoning(text)))
    }
    if len(scores) != 1:
        return None
    n = scores.pop()
    return n if 1 <= n <= 5 else None


def official_score(text: str | None) -> float | None:
    """reference: the score Evaluate.py stores for ``text`` as Aggregate.py's ``parse_score`` reads it.

    Evaluate.py strips the reply; an empty one (or a failed call) stores "", a reply without
    ``[digits]`` stores -1, otherwise the digits of the first match; Aggregate.py keeps a float in
    [0, 5] and drops the rest. So ``[0]`` is a valid 0, ``[3.5]`` and ``[10]`` are no score, and
    ``[４]`` (a full-width digit inside ASCII brackets) is 4.
    """
    reply = (text or "").strip()
    m = _OFFICIAL.search(reply) if reply else None
    if m is None:
        return None
    value = float(m.group(1))  # float() reads every Unicode decimal digit that \d matches
    return value if 0.0 <= value <= 5.0 else None


def usability(scores: Sequence[float | None]) -> tuple[float | None, bool | None]:
    """(mean of the valid run scores, usable = mean >= 4.0), both None without a valid score (Aggregate.py)."""
    valid = [s for s in scores if s is not None]
    if not valid:
        return None, None
    mean = sum(valid) / len(valid)
    return mean, mean >= USABLE_THRESHOLD


def _basis(text: str) -> str:
    return explanation_text((extract_json_object(text) or {}).get("判断依据", ""))


def read_ours(text: str, pending: Sequence[str]) -> dict[str, Reading]:
    """grandrounds: one run's vote (met when the score is at least 4); nothing when unreadable, so it is re-asked."""
    score = parse_score(text)
    if score is None:
        return {}
    status: VerdictStatus = "met" if score >= USABLE_THRESHOLD else "unmet"
    return {pending[0]: Reading(status, _basis(text), float(score))}


def read_official(text: str, pending: Sequence[str]) -> dict[str, Reading]:
    """reference: every reply is read once, as Evaluate.py does; no valid score is an unknown run (no re-ask)."""
    score = official_score(text)
    if score is None:
        return {
            pending[0]: Reading(
                "unknown",
                "no score in [0, 5] as [digits] in the reply (Evaluate.py/Aggregate.py: invalid)",
            )
        }
    status: VerdictStatus = "met" if score >= USABLE_THRESHOLD else "unmet"
    return {pending[0]: Reading(status, _basis(text), score)}


def judge_messages(template: str, sample: Sample, answer: str) -> tuple[Message, ...]:
    """grandrounds: system + our category prompt filled with this turn only (the judge never sees history)."""
    md = sample.metadata
    text = template.format(
        question=sample.messages[-1].text,
        answer=answer,
        reference=sample.target or EMPTY,
        checklist=md.get("checklist") or EMPTY,
    )
    return (Message("system", SYSTEM_PROMPT), Message("user", text))


def official_messages(template: UpstreamText, sample: Sample, answer: str) -> tuple[Message, ...]:
    """reference: Evaluate.py's messages, its f-string filled as it fills it (NaN/absent -> "nan")."""
    values = {
        "Question": sample.messages[-1].text,
        "Response": answer,
        "Sanswer": sample.target if sample.target is not None else OFFICIAL_MISSING,
        "checklist": sample.metadata.get("checklist") or OFFICIAL_MISSING,
    }
    return (Message("system", SYSTEM_PROMPT), Message("user", template.render(values)))


@functools.cache
def official_templates() -> dict[str, UpstreamText]:
    """Category code -> Evaluate.py's prompt for it (``prompt_<category key>`` in ``getresponse``)."""
    return {
        code: python_string(EVALUATE, f"prompt_{key}", within="getresponse")
        for key, code in CATEGORY_CODES.items()
    }


#: How each protocol reads a reply, and the answer text the judge is shown.
READERS: Mapping[str, Callable[[str, Sequence[str]], dict[str, Reading]]] = {
    "reference": read_official,
    "grandrounds": read_ours,
}
SCORES: Mapping[str, Callable[[str | None], float | int | None]] = {
    "reference": official_score,
    "grandrounds": parse_score,
}


@dataclass(frozen=True)
class LLMEvalParams:
    runs: int = 3
    protocol: str = "reference"

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ConfigError(f"judge runs must be at least 1, got {self.runs}")
        check_protocol(self.protocol)


class LLMEvalGrader(Grader):
    """Scores one turn ``runs`` times per judge; value 1.0 usable / 0.0 not / None no valid score."""

    name = "llmeval-med"
    Params = LLMEvalParams
    judged = True  # every run is a judge call

    def __init__(
        self,
        params: LLMEvalParams | None = None,
        *,
        runs: int | None = None,
        protocol: str | None = None,
    ) -> None:
        if params is None:
            params = LLMEvalParams(runs if runs is not None else 3, protocol or "reference")
        super().__init__(params)
        self.runs = self.params.runs
        self.protocol = self.params.protocol
        names = [c.lower() for c in CATEGORY_CODES.values()]
        # Our templates for the grandrounds protocol; the official prompts are read when first used.
        self.templates = (
            {}
            if self.protocol == "reference"
            else dict(zip(names, load_templates(*(f"llmeval_{n}" for n in names)).values()))
        )

    def template_hashes(self) -> dict[str, Any]:
        if self.protocol == "reference":
            return {code.lower(): t.fingerprint() for code, t in official_templates().items()}
        return super().template_hashes() | ANSWER_MARKERS

    def messages(self, sample: Sample, answer_text: str) -> tuple[Message, ...]:
        """The judge prompt of this protocol for ``sample`` and the candidate's reply text."""
        code = CATEGORY_CODES.get(sample.metadata.get("category", ""))
        if code is None:
            raise ValueError(f"unknown LLMEval-Med category {sample.metadata.get('category')!r}")
        if self.protocol == "reference":
            # Answer.py keeps the generated text stripped; Evaluate.py shows it as it is.
            return official_messages(official_templates()[code], sample, answer_text.strip())
        shown = delimit_answer(strip_reasoning(answer_text), sample.messages[-1].text)
        return judge_messages(self.templates[code.lower()], sample, shown)

    def planned_judge_calls(self, sample: Sample, judges: int = 1) -> int | None:
        """``runs`` calls per judge (the same prompt, spaced attempt numbers)."""
        return judges * self.runs

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        msgs = self.messages(sample, response.text or "")
        read = READERS[self.protocol]
        run_ids = [f"run{r}" for r in range(self.runs)]
        stride = ctx.max_reask + 1
        prev = ctx.previous if ctx.only_unknown else None
        next_attempt = (
            [int(prev.details.get("next_attempt", self.runs * stride))]
            if prev
            else [self.runs * stride]
        )

        def make_asks(_j: int, pending: Sequence[str]) -> list[Ask]:
            asks = []
            for rid in pending:
                if prev is None:
                    first = run_ids.index(rid) * stride
                else:  # re-asks never reuse an attempt number of any earlier grading
                    first, next_attempt[0] = next_attempt[0], next_attempt[0] + stride
                asks.append(Ask((rid,), lambda _p: msgs, read, first))
            return asks

        votes = await panel(
            run_ids, make_asks, ctx, _previous_runs(prev, len(ctx.judges), self.runs)
        )
        ordered = [
            replace(v, run=r)
            for j in range(len(ctx.judges))
            for r, rid in enumerate(run_ids)
            for v in [votes[rid][j]]
        ]
        scores = [v.score if v.status != "unknown" else None for v in ordered]
        other = "grandrounds" if self.protocol == "reference" else "reference"
        other_scores = [_as_float(SCORES[other](v.raw)) if v.raw else None for v in ordered]
        mean, usable = usability(scores)
        other_mean, other_usable = usability(other_scores)
        details = {
            "protocol": self.protocol,
            "run_scores": scores,
            "mean_score": mean,
            "usable": usable,
            "other_value": None if other_usable is None else float(other_usable),
            "other_run_scores": other_scores,
            "other_mean_score": other_mean,
            "next_attempt": next_attempt[0],
            "runs": self.runs,
        }
        value = None if usable is None else float(usable)
        status: GradeStatus = "scored" if value is not None else "unreadable"
        error = None if value is not None else "no valid judge score in any run"
        return Grade(
            sample_id=sample.id,
            value=value,
            details=details,
            error=error,
            judge_keys=judge_keys((), ordered),
            status=status,
            votes=tuple(ordered),
        )


def _as_float(x: float | int | None) -> float | None:
    return None if x is None else float(x)


def _previous_runs(prev: Grade | None, n_judges: int, runs: int) -> dict[str, tuple[Vote, ...]]:
    """Stored run votes (judge-major order) as run id -> votes in panel order."""
    if prev is None or len(prev.votes) != n_judges * runs:
        return {}
    return {
        f"run{r}": tuple(prev.votes[j * runs + r] for j in range(n_judges)) for r in range(runs)
    }
