"""HealthBench rubric grader: per-criterion judging (both protocols) or one batched call per answer (ours).

Under the ``reference`` protocol the grader does what openai/simple-evals healthbench_eval.py
does (``HealthBenchEval.grade_sample``): one judge call per rubric item, the official
``GRADER_TEMPLATE`` (read at run time) with ``<<conversation>>`` replaced by the conversation the
candidate was sent (its system message included) plus the answer, as ``role: content`` blocks
joined by blank lines, then ``<<rubric_item>>`` by ``[points] criterion``; the judge messages are
the sampler's system message and that prompt. A reply counts when, fences stripped, it parses as
a JSON object whose ``criteria_met`` is a JSON bool (``parse_json_to_dict``). The reference re-asks
without limit; we re-ask ``ctx.max_reask`` times, then the criterion is unknown and the example
has no official score.

Under ``grandrounds``: our templates, the answer with reasoning traces stripped, tolerant JSON
reading, the example scored over its known criteria; ``batched`` mode asks about all items in one
call and re-asks only those missing from the reply. A batched reply may key verdicts by id or list
them in the order the items were given (a list of the same length; another length is unreadable).

Each grade also carries ``details["other_value"]``: the example's value under the other protocol's
reading and scoring of the same replies.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from grandrounds.core.errors import ConfigError
from grandrounds.core.records import Criterion, Grade, Message, Response, Sample, Verdict
from grandrounds.core.textutil import strip_reasoning
from grandrounds.graders.base import GradeContext, Grader, load_templates
from grandrounds.graders.judge_json import as_bool, explanation_text, parse_criteria_met, top_values
from grandrounds.graders.judging import (
    ANSWER_MARKERS,
    Ask,
    Reading,
    delimit_answer,
    judge_criteria,
    judge_keys,
    majority,
)
from grandrounds.scoring.healthbench import (
    known_example_metrics,
    known_rubric_score,
    reference_rubric_score,
)
from grandrounds.sources.healthbench import BATCHED_IS_OURS, GRADER_TEMPLATE, JUDGE_MODES, PROTOCOLS
from grandrounds.sources.protocols import check_protocol, system_text

MODES = JUDGE_MODES


def with_system(messages: Sequence[Message], system: str | None) -> tuple[Message, ...]:
    """The messages the candidate was sent: ``system`` first unless the conversation opens with one.

    The same rule as the runner's; simple-evals' grader sees the sampler's message list with the
    system message it added (``actual_queried_message_list``).
    """
    if system is None or (messages and messages[0].role == "system"):
        return tuple(messages)
    return (Message("system", system), *messages)


def render_conversation(messages: Sequence[Message], answer: str) -> str:
    """The conversation with the answer appended, as simple-evals shows it to the grader."""
    turns = list(messages) + [Message("assistant", answer)]
    return "\n\n".join(f"{m.role}: {m.text}" for m in turns)


def _points(p: float) -> str:
    return str(int(p)) if float(p).is_integer() else str(p)


def render_item(crit: Criterion) -> str:
    """``[points] criterion`` with whole points shown without a decimal (our templates)."""
    return f"[{_points(crit.points)}] {crit.text}"


def reference_item(crit: Criterion) -> str:
    """``str(RubricItem)`` in simple-evals: the points as loaded from JSON (``[5]``, ``[5.0]``)."""
    return f"[{crit.points}] {crit.text}"


# parse_json_to_dict in healthbench_eval.py: a leading ```json fence and a trailing ``` fence removed
# from the stripped reply, then json.loads.
_OFFICIAL_FENCES = re.compile(r"^```json\s*|\s*```$")


def parse_reference(text: str | None) -> tuple[bool | None, str]:
    """(criteria_met, explanation) read the simple-evals way; (None, "") when it would re-ask.

    A JSON value that is not an object makes the official code raise (it indexes it); here it is
    unreadable like any other reply without a boolean ``criteria_met``.
    """
    stripped = (text or "").strip()
    try:
        value = json.loads(_OFFICIAL_FENCES.sub("", stripped) if "```" in stripped else stripped)
    except json.JSONDecodeError:
        return None, ""
    if not isinstance(value, dict):
        return None, ""
    met = value.get("criteria_met")
    if met is not True and met is not False:
        return None, ""
    return met, explanation_text(value.get("explanation", ""))


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
    """Per-criterion verdicts from a batched reply.

    Keyed by id: ``{id: {...}}``, ``{id: bool}``, ``[{"id": .., "criteria_met": ..}, ...]``. Or in
    prompt order without ids: a list of ``{"criteria_met": ..}`` objects or of booleans, one per
    pending criterion in the order they were listed (a single bare object when one was listed); a
    list of another length is not read (the items are re-asked), never matched up by guess.
    ``{"verdicts": [...]}`` wrappers are opened. A reply holding more than one JSON value with
    verdicts is not read (re-asked): the answer the judge quotes may hold one of its own.
    """
    wanted = set(pending)
    readings: list[dict[str, Reading]] = []
    for value in top_values(text):
        if (
            isinstance(value, dict)
            and len(value) == 1
            and isinstance(next(iter(value.values())), list)
        ):
            value = next(iter(value.values()))  # {"verdicts": [...]}
        pairs: list[tuple[Any, Any]] = []
        if (
            isinstance(value, dict) and "criteria_met" in value
        ):  # one bare verdict: only for one item
            pairs = [(pending[0], value)] if len(pending) == 1 else []
        elif isinstance(value, dict):
            pairs = list(value.items())
        elif isinstance(value, list):
            keyed = [item for item in value if isinstance(item, dict) and "id" in item]
            if keyed:
                pairs = [(item["id"], item) for item in keyed]
            elif len(value) == len(pending):  # in prompt order
                pairs = list(zip(pending, value))
        found = {
            _cid(k): r for k, v in pairs if _cid(k) in wanted and (r := _reading(v)) is not None
        }
        if found:
            readings.append(found)
    # one verdict set, or nothing: a second one may be the graded answer's own (quoted by the judge)
    return readings[0] if len(readings) == 1 else {}


def _single(
    read: Callable[[str | None], tuple[bool | None, str]],
) -> Callable[[str, Sequence[str]], dict[str, Reading]]:
    """A per-criterion parser: the one pending criterion, if ``read`` finds its boolean."""

    def parse(text: str, pending: Sequence[str]) -> dict[str, Reading]:
        met, expl = read(text)
        return (
            {pending[0]: Reading("met" if met else "unmet", expl)}
            if met is not None and pending
            else {}
        )

    return parse


parse_single = _single(parse_criteria_met)
parse_single_reference = _single(parse_reference)


@dataclass(frozen=True)
class HealthBenchParams:
    mode: str = "per-criterion"
    protocol: str = "reference"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(
                f"unknown HealthBench judge mode {self.mode!r} (choose {', '.join(MODES)})"
            )
        check_protocol(self.protocol)
        if self.protocol == "reference" and self.mode == "batched":
            raise ConfigError(f"healthbench: {BATCHED_IS_OURS}")


class HealthBenchGrader(Grader):
    """Judge each rubric item of a HealthBench answer; score it the protocol's way."""

    name = "healthbench"
    Params = HealthBenchParams
    judged = True

    def __init__(self, params: HealthBenchParams | None = None) -> None:
        super().__init__(params)
        self.mode = self.params.mode
        self.reference = self.params.protocol == "reference"
        self.preset = PROTOCOLS[self.params.protocol]
        if self.reference:
            self.templates = {}
        else:
            key = "healthbench_grader" if self.mode == "per-criterion" else "healthbench_batched"
            self.templates = load_templates(key)
            self.template = self.templates[key]

    @cached_property
    def official_template(self) -> str:
        """GRADER_TEMPLATE as simple-evals holds it (the triple-quoted literal, stripped)."""
        return GRADER_TEMPLATE.load().text

    @cached_property
    def judge_system(self) -> str | None:
        return system_text(self.preset.judge)

    @cached_property
    def answer_system(self) -> str | None:
        return system_text(self.preset.answer)

    def template_hashes(self) -> dict[str, Any]:
        if not self.reference:
            return super().template_hashes() | ANSWER_MARKERS
        refs = {"GRADER_TEMPLATE": GRADER_TEMPLATE.load()}
        if self.preset.judge.system is not None and not isinstance(self.preset.judge.system, str):
            refs["judge_system"] = self.preset.judge.system.load()
        return {name: t.fingerprint() for name, t in refs.items()}

    def reference_prompt(self, convo: str, crit: Criterion) -> str:
        """The official grader prompt: two ``str.replace`` calls, in healthbench_eval.py's order."""
        return self.official_template.replace("<<conversation>>", convo).replace(
            "<<rubric_item>>", reference_item(crit)
        )

    def _messages(self, prompt: str) -> tuple[Message, ...]:
        system = self.judge_system
        return ((Message("system", system),) if system is not None else ()) + (
            Message("user", prompt),
        )

    def _asks(self, sample: Sample, answer: str, ids: Sequence[str]) -> list[Ask]:
        by_id = {c.id: c for c in sample.rubric}
        if self.reference:
            convo = self.conversation(sample, answer)

            def reference_ask(cid: str, c: Criterion) -> Ask:
                return Ask(
                    (cid,),
                    lambda _p: self._messages(self.reference_prompt(convo, c)),
                    parse_single_reference,
                )

            return [reference_ask(cid, by_id[cid]) for cid in ids]
        if self.mode == "per-criterion":

            def single_ask(cid: str, c: Criterion) -> Ask:
                return Ask(
                    (cid,),
                    lambda _p: self._messages(
                        self.template.format(
                            conversation=self.conversation(sample, answer, render_item(c)),
                            rubric_item=render_item(c),
                        )
                    ),
                    parse_single,
                )

            return [single_ask(cid, by_id[cid]) for cid in ids]

        def build(pending: Sequence[str]) -> tuple[Message, ...]:
            items = "\n".join(f"- id {cid}: {render_item(by_id[cid])}" for cid in pending)
            return self._messages(
                self.template.format(
                    conversation=self.conversation(sample, answer, items), rubric_items=items
                )
            )

        return [Ask(tuple(ids), build, parse_batched)]

    def planned_judge_calls(self, sample: Sample, judges: int = 1) -> int | None:
        """One call per rubric item per judge; batched, one per judge."""
        if not sample.rubric:
            return 0
        return judges * (len(sample.rubric) if self.mode == "per-criterion" else 1)

    def conversation(self, sample: Sample, answer: str, asked: str = "") -> str:
        """What the judge is shown: the conversation as sent to the candidate, then its answer
        (ours: between markers named after the answer and ``asked``, the rubric text of the call)."""
        if self.reference:  # simple-evals passes the reply's content on unchanged
            return render_conversation(with_system(sample.messages, self.answer_system), answer)
        shown = strip_reasoning(answer)
        return render_conversation(
            with_system(sample.messages, self.answer_system), delimit_answer(shown, asked)
        )

    async def grade(self, sample: Sample, response: Response, ctx: GradeContext) -> Grade:
        answer = response.text or ""
        ids = [c.id for c in sample.rubric]
        verdicts = await judge_criteria(
            ids, lambda _j, pending: self._asks(sample, answer, pending), ctx
        )
        example_tags = tuple(sample.metadata.get("example_tags", ()))
        ks = known_example_metrics(sample.rubric, verdicts, example_tags)
        status = {v.criterion_id: v.status for v in verdicts}
        value = reference_rubric_score(sample.rubric, status) if self.reference else ks.overall
        n_unknown = sum(1 for v in verdicts if v.status == "unknown")
        details = {
            "judge_mode": self.mode,
            "protocol": self.params.protocol,
            "coverage": {"known": ks.known, "total": ks.total},
            "n_unknown": n_unknown,
            "tag_scores": {k: v for k, v in ks.metrics.items() if k != "overall_score"}
            if value is not None
            else {},
            "other_value": self.other_value(sample, verdicts),
        }
        keys = judge_keys(verdicts)
        if value is None:
            why = (
                f"{n_unknown} of {len(ids)} criteria have no readable verdict; the official score needs every one"
                if self.reference
                else "no criterion with positive points has a known verdict"
            )
            return Grade(
                sample_id=sample.id,
                value=None,
                verdicts=verdicts,
                details=details,
                error=why,
                judge_keys=keys,
                status="unreadable",
            )
        return Grade(
            sample_id=sample.id,
            value=value,
            verdicts=verdicts,
            details=details,
            judge_keys=keys,
        )

    def other_value(self, sample: Sample, verdicts: Sequence[Verdict]) -> float | None:
        """The example's value under the other protocol's reading and scoring of the same replies.

        Per-criterion replies are read again with the other protocol's parser (each judge's
        vote, then the majority); batched replies, which the reference cannot read, keep their
        verdicts. Reference scoring needs every criterion; grandrounds' uses the known ones.
        """
        read = parse_criteria_met if self.reference else parse_reference
        status: dict[str, str] = {}
        for v in verdicts:
            if self.mode == "batched" or not v.votes:
                status[v.criterion_id] = v.status
                continue
            votes = []
            for vote in v.votes:
                met = read(vote.raw)[0] if vote.raw else None
                votes.append("unknown" if met is None else "met" if met else "unmet")
            status[v.criterion_id] = majority(votes)
        if self.reference:
            return known_rubric_score(sample.rubric, status)
        return reference_rubric_score(sample.rubric, status)

    def rescore(self, sample: Sample, grade: Grade, statuses: Mapping[str, str]) -> float | None:
        """simple-evals ``calculate_score`` over every criterion (reference: None unless all have a
        judged or reviewed verdict) or over those with one (grandrounds)."""
        merged = {v.criterion_id: v.status for v in grade.verdicts} | dict(statuses)
        if self.reference:
            return reference_rubric_score(sample.rubric, merged)
        return known_rubric_score(sample.rubric, merged)
