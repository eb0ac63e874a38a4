"""HealthBench rubric grader: per-criterion judging (the reference) or one batched call per answer.

Per-criterion mode follows openai/simple-evals healthbench_eval.py: one judge call per rubric item,
the conversation plus the candidate's final turn rendered as ``"role: content"`` blocks joined by
blank lines, the item as ``"[points] criterion"``, reply ``{"explanation", "criteria_met"}``. The
reference re-asks without limit until it gets a boolean; we re-ask ``ctx.max_reask`` times and then
record the criterion as unknown. Batched mode asks about all items of an answer in one call and
re-asks only the items missing from the reply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from grandrounds.errors import ConfigError
from grandrounds.graders.base import GradeContext, Grader, load_templates
from grandrounds.graders.judge_json import as_bool, explanation_text, json_values, parse_criteria_met
from grandrounds.graders.judging import Ask, Reading, judge_criteria, judge_keys
from grandrounds.records import Criterion, Grade, Message, Response, Sample
from grandrounds.scoring.healthbench import known_example_metrics, known_rubric_score
from grandrounds.textutil import strip_reasoning

#: simple-evals grades with its API system message (OPENAI_SYSTEM_MESSAGE_API).
JUDGE_SYSTEM = "You are a helpful assistant."
MODES = ("per-criterion", "batched")


def render_conversation(messages: Sequence[Message], answer: str) -> str:
    """The conversation with the answer appended, as simple-evals shows it to the grader."""
    turns = list(messages) + [Message("assistant", answer)]
    return "\n\n".join(f"{m.role}: {m.content}" for m in turns)


def _points(p: float) -> str:
    return str(int(p)) if float(p).is_integer() else str(p)


def render_item(crit: Criterion) -> str:
    """``[points] criterion``, the reference's ``str(RubricItem)``."""
    return f"[{_points(crit.points)}] {crit.text}"


def _reading(value: Any) -> Reading | None:
    if isinstance(value, dict):
        met = as_bool(value.get("criteria_met", value.get("met")))
        if met is None:
            return None
        return Reading("met" if met else "unmet", explanation_text(value.get("explanation", "")))
    met = as_bool(value)
    return None if met is None else Reading("met" if met else "unmet")


def _cid(key: Any) -> str:
    """A criterion id as the judge echoed it: ``0``, ``"0"``, ``id 0``, ``criterion #0``."""
    return re.sub(r"^(?:id|criterion)\s*[:#]?\s*", "", str(key).strip(), flags=re.I)


def parse_batched(text: str, pending: Sequence[str]) -> dict[str, Reading]:
    """Per-criterion verdicts from a batched reply: ``{id: {...}}``, ``{id: bool}`` or ``[{"id":..}, ...]``."""
    wanted = set(pending)
    for value in json_values(text):
        if isinstance(value, dict) and len(value) == 1 and isinstance(next(iter(value.values())), list):
            value = next(iter(value.values()))  # {"verdicts": [...]}
        pairs: list[tuple[Any, Any]] = []
        if isinstance(value, dict):
            pairs = list(value.items())
        elif isinstance(value, list):
            pairs = [(item["id"], item) for item in value if isinstance(item, dict) and "id" in item]
        found = {_cid(k): r for k, v in pairs if _cid(k) in wanted and (r := _reading(v)) is not None}
        if found:
            return found
    return {}


def parse_single(text: str, pending: Sequence[str]) -> dict[str, Reading]:
    """The one criterion of a per-criterion reply, if its ``criteria_met`` is a readable boolean."""
    met, expl = parse_criteria_met(text)
    return {pending[0]: Reading("met" if met else "unmet", expl)} if met is not None and pending else {}


@dataclass(frozen=True)
class HealthBenchParams:
    mode: str = "per-criterion"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"unknown HealthBench judge mode {self.mode!r} (choose {', '.join(MODES)})")


class HealthBenchGrader(Grader):
    """Judge each rubric item of a HealthBench answer; score over the known verdicts."""

    name = "healthbench"
    Params = HealthBenchParams
    judged = True

    def __init__(self, params: HealthBenchParams | None = None) -> None:
        super().__init__(params)
        self.mode = self.params.mode
        key = "healthbench_grader" if self.mode == "per-criterion" else "healthbench_batched"
        self.templates = load_templates(key)
        self.template = self.templates[key]

    def _asks(self, sample: Sample, convo: str, ids: Sequence[str]) -> list[Ask]:
        by_id = {c.id: c for c in sample.rubric}

        def messages(prompt: str) -> tuple[Message, ...]:
            return (Message("system", JUDGE_SYSTEM), Message("user", prompt))

        if self.mode == "per-criterion":
            return [
                Ask((cid,), lambda _p, c=by_id[cid]: messages(self.template.format(conversation=convo, rubric_item=render_item(c))), parse_single)
                for cid in ids
            ]

        def build(pending: Sequence[str]) -> tuple[Message, ...]:
            items = "\n".join(f"- id {cid}: {render_item(by_id[cid])}" for cid in pending)
            return messages(self.template.format(conversation=convo, rubric_items=items))

        return [Ask(tuple(ids), build, parse_batched)]

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        convo = render_conversation(sample.messages, strip_reasoning(response.text or ""))
        ids = [c.id for c in sample.rubric]
        verdicts = await judge_criteria(ids, lambda _j, pending: self._asks(sample, convo, pending), ctx)
        example_tags = tuple(sample.metadata.get("example_tags", ()))
        ks = known_example_metrics(sample.rubric, verdicts, example_tags)
        details = {
            "judge_mode": self.mode,
            "coverage": {"known": ks.known, "total": ks.total},
            "n_unknown": sum(1 for v in verdicts if v.status == "unknown"),
            "tag_scores": {k: v for k, v in ks.metrics.items() if k != "overall_score"},
        }
        keys = judge_keys(verdicts)
        if ks.overall is None:
            return Grade(sample.id, None, None, verdicts, details, "no criterion with positive points has a known verdict", keys, "unreadable")
        return Grade(sample.id, ks.overall, None, verdicts, details, None, keys)

    def rescore(self, sample: Sample, grade: Grade, statuses: Mapping[str, str]) -> float | None:
        """simple-evals ``calculate_score`` over the criteria with a known (judged or reviewed) verdict."""
        return known_rubric_score(sample.rubric, {v.criterion_id: v.status for v in grade.verdicts} | dict(statuses))
