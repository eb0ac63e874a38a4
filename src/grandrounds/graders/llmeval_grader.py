"""LLMEval-Med judge: a 1-5 holistic score per answer, averaged over several judge runs.

Protocol (PROTOCOLS.md section 2; LLMEval-Med Evaluate.py and evaluate/Aggregate.py): one
Chinese prompt per category, the judge sees only the current turn (question, answer, reference
``sanswer`` and, for three categories, the checklist); the score is the first ``[n]`` in the
reply. Over N runs, ``mean = mean(valid scores)`` and the answer is *usable* iff ``mean >= 4.0``.

Our convention differs from the reference in one place only: an answer with no valid score in
any run is *unscored* (value None, reported) instead of silently "unusable". The reference
convention is kept in ``details["reference_usable"]`` so the aggregate can report both.

Each judge run is a whole-answer :class:`~grandrounds.records.Vote` on the grade (``Grade.votes``,
with its ``run`` number and ``score``), asked through the shared judge engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from grandrounds.errors import ConfigError
from grandrounds.graders.base import GradeContext, Grader, load_templates
from grandrounds.graders.judge_json import explanation_text, extract_json_object
from grandrounds.graders.judging import Ask, Reading, judge_keys, panel
from grandrounds.records import Grade, Message, Response, Sample, Vote
from grandrounds.textutil import normalize_width, strip_reasoning

#: Category key in dataset.json -> short code (paper Table 2) -> template file.
CATEGORY_CODES: Mapping[str, str] = {
    "医疗知识": "MK",
    "医疗语言理解": "MLU",
    "医疗推理": "MR",
    "医疗安全伦理": "MSE",
    "医疗文本生成": "MTG",
}
USABLE_THRESHOLD = 4.0  # evaluate/Aggregate.py USABILITY_THRESHOLD
EMPTY = "（无）"  # shown for a missing reference answer or checklist
SYSTEM_PROMPT = "You are a helpful assistant."  # Evaluate.py / Answer.py system message

# Evaluate.py: re.search(r'\[(\d+)\]', reply); full-width ［］ are folded by NFKC first, 【】 tolerated.
_SCORE = re.compile(r"[\[【]\s*(\d+)\s*[\]】]")


def parse_score(text: str | None) -> int | None:
    """The first ``[n]`` of a judge reply if 1 <= n <= 5, else None (invalid: re-ask)."""
    if not text:
        return None
    m = _SCORE.search(normalize_width(strip_reasoning(text)))
    if not m:
        return None
    n = int(m.group(1))
    return n if 1 <= n <= 5 else None


def read_run(text: str, pending: Sequence[str]) -> dict[str, Reading]:
    """One run's vote: met when the score is at least 4, with the judge's stated basis."""
    score = parse_score(text)
    if score is None:
        return {}
    basis = (extract_json_object(text) or {}).get("判断依据", "")
    status = "met" if score >= USABLE_THRESHOLD else "unmet"
    return {pending[0]: Reading(status, explanation_text(basis), float(score))}  # type: ignore[arg-type]


def judge_messages(template: str, sample: Sample, answer: str) -> tuple[Message, ...]:
    """System + the category prompt filled with this turn only (the judge never sees history)."""
    md = sample.metadata
    text = template.format(
        question=sample.messages[-1].content,
        answer=answer,
        reference=sample.target or EMPTY,
        checklist=md.get("checklist") or EMPTY,
    )
    return (Message("system", SYSTEM_PROMPT), Message("user", text))


def summarize(scores: Sequence[int | None]) -> dict[str, Any]:
    """Mean of valid run scores and the usability decisions (ours and the reference's)."""
    valid = [s for s in scores if s is not None]
    mean = sum(valid) / len(valid) if valid else None
    usable = None if mean is None else mean >= USABLE_THRESHOLD
    return {"run_scores": list(scores), "mean_score": mean, "usable": usable, "reference_usable": bool(usable)}


@dataclass(frozen=True)
class LLMEvalParams:
    runs: int = 3

    def __post_init__(self) -> None:
        if self.runs < 1:
            raise ConfigError(f"judge runs must be at least 1, got {self.runs}")


class LLMEvalGrader(Grader):
    """Scores one turn ``runs`` times per judge; value 1.0 usable / 0.0 not / None no valid score."""

    name = "llmeval-med"
    Params = LLMEvalParams
    judged = True  # every run is a judge call

    def __init__(self, params: LLMEvalParams | None = None, *, runs: int | None = None) -> None:
        super().__init__(params if params is not None else LLMEvalParams(runs if runs is not None else 3))
        self.runs = self.params.runs
        names = [c.lower() for c in CATEGORY_CODES.values()]
        self.templates = {n: t for n, t in zip(names, load_templates(*(f"llmeval_{n}" for n in names)).values())}

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        code = CATEGORY_CODES.get(sample.metadata.get("category", ""))
        if code is None:
            raise ValueError(f"unknown LLMEval-Med category {sample.metadata.get('category')!r}")
        msgs = judge_messages(self.templates[code.lower()], sample, strip_reasoning(response.text or ""))
        run_ids = [f"run{r}" for r in range(self.runs)]
        stride = ctx.max_reask + 1
        prev = ctx.previous if ctx.only_unknown else None
        next_attempt = [int(prev.details.get("next_attempt", self.runs * stride))] if prev else [self.runs * stride]

        def make_asks(_j: int, pending: Sequence[str]) -> list[Ask]:
            asks = []
            for rid in pending:
                if prev is None:
                    first = run_ids.index(rid) * stride
                else:  # re-asks never reuse an attempt number of any earlier grading
                    first, next_attempt[0] = next_attempt[0], next_attempt[0] + stride
                asks.append(Ask((rid,), lambda _p: msgs, read_run, first))
            return asks

        votes = await panel(run_ids, make_asks, ctx, _previous_runs(prev, len(ctx.judges), self.runs))
        ordered = [replace(v, run=r) for j in range(len(ctx.judges)) for r, rid in enumerate(run_ids) for v in [votes[rid][j]]]
        scores = [int(v.score) if v.score is not None else None for v in ordered]
        summary = summarize(scores)
        details = {**summary, "next_attempt": next_attempt[0], "runs": self.runs}
        value = None if summary["usable"] is None else float(summary["usable"])
        status = "scored" if value is not None else "unreadable"
        error = None if value is not None else "no valid judge score in any run"
        return Grade(sample.id, value, details=details, error=error, judge_keys=judge_keys((), ordered), status=status, votes=tuple(ordered))


def _previous_runs(prev: Grade | None, n_judges: int, runs: int) -> dict[str, tuple[Vote, ...]]:
    """Stored run votes (judge-major order) as run id -> votes in panel order."""
    if prev is None or len(prev.votes) != n_judges * runs:
        return {}
    return {f"run{r}": tuple(prev.votes[j * runs + r] for j in range(n_judges)) for r in range(runs)}
