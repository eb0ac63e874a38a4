"""HealthBench rubric grader: per-criterion judging (the reference) or one batched call per answer.

Per-criterion mode follows openai/simple-evals healthbench_eval.py: one judge call per rubric item,
the conversation plus the candidate's final turn rendered as ``"role: content"`` blocks joined by
blank lines, the item as ``"[points] criterion"``, reply ``{"explanation", "criteria_met"}``. The
reference re-asks without limit until it gets a boolean; we re-ask ``ctx.max_reask`` times and then
record the criterion as unknown. Batched mode asks about all items of an answer in one call and
re-asks only the items missing from the reply.
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from grandrounds.errors import ConfigError
from grandrounds.graders.base import GradeContext, Grader, unscored
from grandrounds.graders.judge_parse import as_bool, parse_criteria_met
from grandrounds.graders.rubric import Ask, Parsed, judge_keys, judge_rubric, load_template
from grandrounds.records import Criterion, Grade, Message, Response, Sample
from grandrounds.registry import Spec
from grandrounds.scoring.healthbench import known_example_metrics
from grandrounds.textutil import normalize_width, strip_reasoning

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


def json_values(text: str) -> list[Any]:
    """Every JSON object or array in a reply (fenced or bare, reasoning stripped), outermost first."""
    body = strip_reasoning(text)
    folded = normalize_width(body).replace("“", '"').replace("”", '"')
    out: list[Any] = []
    for variant in dict.fromkeys((body, folded)):  # full-width punctuation folded only if present
        decoder = json.JSONDecoder()
        i = 0
        while i < len(variant):
            if variant[i] in "{[":
                try:
                    value, end = decoder.raw_decode(variant, i)
                except ValueError:
                    i += 1
                    continue
                if value not in out:
                    out.append(value)
                i = end
            else:
                i += 1
    return out


def _entry(value: Any) -> tuple[bool, str] | None:
    if isinstance(value, dict):
        met = as_bool(value.get("criteria_met", value.get("met")))
        expl = value.get("explanation", "")
        return (met, expl if isinstance(expl, str) else json.dumps(expl, ensure_ascii=False)) if met is not None else None
    met = as_bool(value)
    return (met, "") if met is not None else None


def _cid(key: Any) -> str:
    """A criterion id as the judge echoed it: ``0``, ``"0"``, ``id 0``, ``criterion #0``."""
    return re.sub(r"^(?:id|criterion)\s*[:#]?\s*", "", str(key).strip(), flags=re.I)


def parse_batched(text: str, pending: Sequence[str]) -> Parsed:
    """Per-criterion verdicts from a batched reply: ``{id: {...}}``, ``{id: bool}`` or ``[{"id":..}, ...]``."""
    wanted = set(pending)
    for value in json_values(text):
        if isinstance(value, dict) and len(value) == 1 and isinstance(next(iter(value.values())), list):
            value = next(iter(value.values()))  # {"verdicts": [...]}
        found: dict[str, tuple[bool, str]] = {}
        if isinstance(value, dict):
            for key, item in value.items():
                entry = _entry(item)
                if _cid(key) in wanted and entry is not None:
                    found[_cid(key)] = entry
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict) and "id" in item:
                    entry = _entry(item)
                    if _cid(item["id"]) in wanted and entry is not None:
                        found[_cid(item["id"])] = entry
        if found:
            return found
    return {}


def _parse_single(text: str, pending: Sequence[str]) -> Parsed:
    met, expl = parse_criteria_met(text)
    return {pending[0]: (met, expl)} if met is not None and pending else {}


class HealthBenchGrader(Grader):
    """Judge each rubric item of a HealthBench answer; score over the known verdicts."""

    def __init__(self, mode: str = "per-criterion") -> None:
        if mode == "default":
            mode = "per-criterion"
        if mode not in MODES:
            raise ConfigError(f"unknown HealthBench judge mode {mode!r} (choose {', '.join(MODES)})")
        self.mode = mode
        name = "healthbench_grader" if mode == "per-criterion" else "healthbench_batched"
        self.template = load_template(f"{name}.txt")
        self.templates = {name: self.template}

    def spec(self) -> Spec:
        return Spec(type(self).__name__, {"mode": self.mode})

    def _asks(self, sample: Sample, convo: str, ids: Sequence[str]) -> list[Ask]:
        by_id = {c.id: c for c in sample.rubric}

        def messages(prompt: str) -> tuple[Message, ...]:
            return (Message("system", JUDGE_SYSTEM), Message("user", prompt))

        if self.mode == "per-criterion":
            return [
                Ask(
                    (cid,),
                    lambda _p, c=by_id[cid]: messages(self.template.format(conversation=convo, rubric_item=render_item(c))),
                    _parse_single,
                )
                for cid in ids
            ]

        def build(pending: Sequence[str]) -> tuple[Message, ...]:
            items = "\n".join(f"- id {cid}: {render_item(by_id[cid])}" for cid in pending)
            return messages(self.template.format(conversation=convo, rubric_items=items))

        return [Ask(tuple(ids), build, parse_batched)]

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        if not response.ok or response.text is None:
            return unscored(sample, f"answer call failed: {response.error or 'no text'}")
        convo = render_conversation(sample.messages, strip_reasoning(response.text))
        ids = [c.id for c in sample.rubric]
        verdicts = await judge_rubric(ids, lambda pending: self._asks(sample, convo, pending), ctx)
        example_tags = tuple(sample.metadata.get("example_tags", ()))
        ks = known_example_metrics(sample.rubric, verdicts, example_tags)
        n_unknown = sum(1 for v in verdicts if v.status == "unknown")
        details = {
            "judge_mode": self.mode,
            "coverage": {"known": ks.known, "total": ks.total},
            "n_unknown": n_unknown,
            "tag_scores": {k: v for k, v in ks.metrics.items() if k != "overall_score"},
        }
        error = None if ks.overall is not None else "no criterion with positive points has a known verdict"
        return Grade(sample.id, ks.overall, None, verdicts, details, error, judge_keys(verdicts))
