"""LLMEval-Med judge: a 1-5 holistic score per answer, averaged over several judge runs.

Protocol (PROTOCOLS.md section 2; LLMEval-Med Evaluate.py and evaluate/Aggregate.py): one
Chinese prompt per category, the judge sees only the current turn (question, answer, reference
``sanswer`` and, for three categories, the checklist); the score is the first ``[n]`` in the
reply. Over N runs, ``mean = mean(valid scores)`` and the answer is *usable* iff ``mean >= 4.0``.

Our convention differs from the reference in one place only: an answer with no valid score in
any run is *unscored* (value None, reported) instead of silently "unusable". The reference
convention is kept in ``details["reference_usable"]`` so the aggregate can report both.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable, Mapping, Sequence, TypeVar

from grandrounds.graders.base import GradeContext, Grader, Judge, unscored
from grandrounds.graders.judge_parse import extract_json_object
from grandrounds.records import Grade, Message, Response, Sample, Verdict
from grandrounds.registry import Spec
from grandrounds.textutil import normalize_width, strip_reasoning

T = TypeVar("T")

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


def load_templates(prefix: str, names: Sequence[str]) -> dict[str, str]:
    """Template texts ``<prefix><name>.txt`` from the package, keyed by name."""
    root = resources.files("grandrounds.templates")
    return {n: (root / f"{prefix}{n}.txt").read_text(encoding="utf-8") for n in names}


def parse_score(text: str | None) -> int | None:
    """The first ``[n]`` of a judge reply if 1 <= n <= 5, else None (invalid: re-ask)."""
    if not text:
        return None
    m = _SCORE.search(normalize_width(strip_reasoning(text)))
    if not m:
        return None
    n = int(m.group(1))
    return n if 1 <= n <= 5 else None


@dataclass(frozen=True)
class Asked:
    """Outcome of one judge question with its re-asks: parsed value or None, and the trail."""

    value: Any
    raw: str
    attempts: tuple[int, ...]
    keys: tuple[str, ...]
    error: str | None = None


async def ask_judge(
    judge: Judge,
    messages: Sequence[Message],
    parse: Callable[[str | None], T | None],
    attempts: Sequence[int],
) -> Asked:
    """Ask ``judge`` with each attempt number in turn until ``parse`` reads the reply.

    A failed call (``Response.error``) stops the re-asks: the runner already retried it, so it
    is recorded, not hammered. Unparseable after all attempts -> value None with the raw text.
    """
    raw, used, keys = "", [], []
    for attempt in attempts:
        resp: Response = await judge(messages, attempt=attempt)
        used.append(attempt)
        keys.append(resp.key)
        if not resp.ok:
            return Asked(None, raw, tuple(used), tuple(keys), resp.error)
        raw = resp.text or ""
        value = parse(raw)
        if value is not None:
            return Asked(value, raw, tuple(used), tuple(keys))
    return Asked(None, raw, tuple(used), tuple(keys))


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


class LLMEvalGrader(Grader):
    """Scores one turn ``runs`` times per judge; value 1.0 usable / 0.0 not / None no valid score."""

    def __init__(self, runs: int = 3) -> None:
        if runs < 1:
            raise ValueError("judge runs must be >= 1")
        self.runs = runs
        self.templates = load_templates("llmeval_", [c.lower() for c in CATEGORY_CODES.values()])

    def spec(self) -> Spec:
        return Spec("llmeval-med", {"runs": self.runs})

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        if not response.ok:
            return unscored(sample, f"answer call failed: {response.error}", reference_usable=False)
        if not ctx.judges:
            return unscored(sample, "no judge given", reference_usable=False)
        code = CATEGORY_CODES.get(sample.metadata.get("category", ""))
        if code is None:
            return unscored(sample, f"unknown category {sample.metadata.get('category')!r}")
        msgs = judge_messages(self.templates[code.lower()], sample, strip_reasoning(response.text or ""))
        plan = self._plan(ctx)
        asked = await asyncio.gather(*(ask_judge(j, msgs, parse_score, att) for j, _, att in plan["todo"]))
        verdicts = dict(plan["kept"])
        for (judge, vid, _), a in zip(plan["todo"], asked):
            verdicts[vid] = _verdict(vid, a, plan["prior_attempts"].get(vid, 0))
        ordered = [verdicts[vid] for vid in plan["order"]]
        scores = [int(v.votes[0]) if v.status != "unknown" and v.votes else None for v in ordered]
        summary = summarize(scores)
        details = {**summary, "next_attempt": plan["next_attempt"], "runs": self.runs}
        keys = tuple(k for v in ordered for k in v.judge_keys)
        value = None if summary["usable"] is None else float(summary["usable"])
        error = None if value is not None else "no valid judge score in any run"
        return Grade(sample.id, value, verdicts=tuple(ordered), details=details, error=error, judge_keys=keys)

    def _plan(self, ctx: GradeContext) -> dict[str, Any]:
        """Which (judge, run) verdicts to ask, with which attempt numbers, and which to keep.

        First grading: run r of a judge uses attempts r*(R+1) .. r*(R+1)+R (R = max_reask), so
        runs never share a cache key. Re-grading unknowns continues after the highest attempt
        number used before (``details["next_attempt"]``), so no re-ask repeats a cached reply.
        """
        stride = ctx.max_reask + 1
        order = [f"{j.name}/run{r}" for j in ctx.judges for r in range(self.runs)]
        prev = ctx.previous if ctx.only_unknown else None
        kept: dict[str, Verdict] = {}
        prior: dict[str, int] = {}
        next_attempt = self.runs * stride
        if prev is not None:
            old = {v.criterion_id: v for v in prev.verdicts}
            kept = {vid: v for vid, v in old.items() if vid in order and v.status != "unknown"}
            prior = {vid: v.attempts for vid, v in old.items() if v.status == "unknown"}
            fallback = self.runs * stride + sum(v.attempts for v in prev.verdicts)
            next_attempt = int(prev.details.get("next_attempt", fallback))
        todo = []
        for j in ctx.judges:
            for r in range(self.runs):
                vid = f"{j.name}/run{r}"
                if vid in kept:
                    continue
                if prev is None:
                    att = range(r * stride, (r + 1) * stride)
                else:
                    att = range(next_attempt, next_attempt + stride)
                    next_attempt += stride
                todo.append((j, vid, tuple(att)))
        return {"order": order, "kept": kept, "todo": todo, "prior_attempts": prior, "next_attempt": next_attempt}


def _verdict(vid: str, a: Asked, prior_attempts: int) -> Verdict:
    """met = this run scored >= 4, unmet = scored below, unknown = no valid score (raw kept)."""
    explanation = ""
    if a.value is not None:
        obj = extract_json_object(a.raw) or {}
        basis = obj.get("判断依据", "")
        explanation = basis if isinstance(basis, str) else str(basis)
        status = "met" if a.value >= USABLE_THRESHOLD else "unmet"
    else:
        status = "unknown"
        explanation = f"judge call failed: {a.error}" if a.error else "no score [1-5] found in reply"
    return Verdict(
        criterion_id=vid,
        status=status,
        explanation=explanation,
        raw=a.raw if a.value is not None or not a.error else a.error,
        votes=(str(a.value),) if a.value is not None else (),
        attempts=prior_attempts + len(a.attempts),
        judge_keys=a.keys,
    )
