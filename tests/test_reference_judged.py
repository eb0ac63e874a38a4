"""The judged-against-reference grader base (graders/reference_judged.py) through each of its three
families, careqa-open, medicationqa and meddialog, on samples loaded from their published layouts
(MedicationQA's real workbook; careqa-open and meddialog written here, as their tests write them).

Fake judges reply from a table of (attempt -> text), None for a failed call, so every figure is
worked out by hand: a readable reply, one read only after a re-ask, one never read (the answer is
unscored, never 0), a question without a reference (refused before any call), a re-grade with
``only_unknown`` keeping the known votes, and Medmarks' per-judge figure of MedicationQA, taken from
each judge's first reply, surviving a re-grade. The spec and template hashes (what a grading's
fingerprint holds of the grader) are pinned per family and protocol.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from grandrounds.benchmarks.careqa_open import CareQAOpen
from grandrounds.benchmarks.meddialog import MedDialog
from grandrounds.benchmarks.medicationqa import MedicationQA
from grandrounds.core.hashing import file_sha256
from grandrounds.core.records import Grade, Message, Response, Sample
from grandrounds.core.registry import Spec
from grandrounds.graders import build
from grandrounds.graders.base import GradeContext
from grandrounds.graders.reference_judged import ReferenceJudgedGrader
from grandrounds.sources.careqa_open import ENV as CAREQA_ENV
from grandrounds.sources.careqa_open import parser_tags
from grandrounds.sources.medicationqa import ENVIRONMENT, JUDGE_PROMPTS
from tests.conftest import shared_file
from tests.test_careqa_metamedqa_supergpqa_taiwan import write_json
from tests.test_careqa_open_meddialog_longhealth import CAREQA_OPEN, write_meddialog
from tests.test_kormedmcqa_cmexam_medconceptsqa import upstream_bytes

FAMILIES = ("careqa-open", "medicationqa", "meddialog")
ANSWER = "<think>let me see</think> The answer, briefly."
DETAIL_KEYS = ["protocol", "coverage", "n_unknown", "judge_values"]
#: The benchmark's own figures each family adds after the coverage, in order.
OWN_KEYS = {
    "careqa-open": ["medmarks_value"],
    "medicationqa": ["medmarks_values", "medmarks_value"],
    "meddialog": ["medmarks_values", "medmarks_value"],
}


def tags(**v: bool) -> str:
    return "<analysis>x</analysis>" + "".join(f"<{k}>{str(b).lower()}</{k}>" for k, b in v.items())


def scores(a: object, c: object, k: object) -> str:
    return json.dumps(
        {"accuracy": {"score": a}, "completeness": {"score": c}, "clarity": {"score": k}}
    )


#: Per family: a reply worth 1.0, one worth 0.5 (careqa: correct, no detail, no addition, an error)
#: or 0.4 (3, 2, 1 out of 5), and their values.
HIGH = {
    "careqa-open": tags(
        semantically_correct=True,
        matches_details=True,
        substantive_addition=False,
        critical_error=False,
    ),
    "medicationqa": scores(5, 5, 5),
    "meddialog": scores(5, 5, 5),
}
LOW = {
    "careqa-open": tags(
        semantically_correct=True,
        matches_details=False,
        substantive_addition=False,
        critical_error=True,
    ),
    "medicationqa": scores(3, "2", 1),
    "meddialog": scores(3, "2", 1),
}
LOW_VALUE = {"careqa-open": 0.5, "medicationqa": 0.4, "meddialog": 0.4}
GARBAGE = "The answer looks fine to me."


class TableJudge:
    """A fake judge: ``replies[attempt]`` (or ``replies[-1]`` past the end); None is a failed call."""

    def __init__(self, name: str, replies: Sequence[str | None]) -> None:
        self.name = name
        self.replies = list(replies)
        self.calls: list[tuple[tuple[Message, ...], int]] = []

    async def __call__(self, messages: Sequence[Message], *, attempt: int = 0) -> Response:
        self.calls.append((tuple(messages), attempt))
        text = self.replies[min(attempt, len(self.replies) - 1)]
        key = f"{self.name}#{attempt}"
        return (
            Response(key=key, error="HTTP 503: down")
            if text is None
            else Response(key=key, text=text)
        )


def grade(
    family: str,
    sample: Sample,
    judges: Sequence[TableJudge],
    protocol: str = "grandrounds",
    **ctx: Any,
) -> Grade:
    grader = build(Spec(family, {"protocol": protocol}))
    context = GradeContext(judges=tuple(judges), **ctx)
    return asyncio.run(grader.grade(sample, Response(key="answer-key", text=ANSWER), context))


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Sample]]:
    tmp = tmp_path_factory.mktemp("rj")
    return {
        "careqa-open": CareQAOpen().load(
            write_json(tmp / "CareQA_en_open.json", CAREQA_OPEN).parent
        ),
        "medicationqa": MedicationQA().load(
            shared_file("medicationqa", "MedInfo2019-QA-Medications.xlsx").parent
        ),
        "meddialog": MedDialog().load(write_meddialog(tmp / "md")),
    }


def with_target(samples: dict[str, list[Sample]], family: str) -> Sample:
    return next(s for s in samples[family] if s.target)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("protocol", ["reference", "grandrounds"])
def test_the_three_share_the_base_and_keep_their_fingerprint(family: str, protocol: str) -> None:
    grader = build(Spec(family, {"protocol": protocol}))
    assert isinstance(grader, ReferenceJudgedGrader) and "grade" not in vars(type(grader))
    assert grader.judged and grader.min_judges == 1
    sample = Sample(id="1", benchmark=family, messages=(), target="ref", metadata={})
    assert grader.planned_judge_calls(sample, 3) == 3
    # what a grading's fingerprint holds of the grader: its spec and its template hashes
    assert grader.spec() == Spec(family, {"protocol": protocol})
    assert grader.template_hashes() == (
        {"answer_markers": "v1"} if protocol == "grandrounds" else {}
    )
    assert type(grader.params).__module__ == type(grader).__module__


@pytest.mark.parametrize("family", FAMILIES)
def test_readable_and_reasked_replies_give_the_mean(family: str, samples) -> None:
    sample = with_target(samples, family)
    first = TableJudge("j1", [HIGH[family]])
    second = TableJudge("j2", [GARBAGE, LOW[family]])  # read on the re-ask
    g = grade(family, sample, [first, second], max_reask=2)
    low = LOW_VALUE[family]
    assert (g.value, g.status, g.error) == (pytest.approx((1.0 + low) / 2), "scored", None)
    assert list(g.details) == DETAIL_KEYS + OWN_KEYS[family]
    assert g.details["coverage"] == {"known": 2, "total": 2} and g.details["n_unknown"] == 0
    assert g.details["judge_values"] == [1.0, pytest.approx(low)]
    assert [(v.judge, v.status, v.attempts, v.raw) for v in g.votes] == [
        ("j1", "met", 1, HIGH[family]),
        ("j2", "met", 2, LOW[family]),
    ]
    assert g.judge_keys == ("j1#0", "j2#0", "j2#1")
    # every judge saw one user message, the grader's prompt about the reply as the model wrote it
    prompt = build(Spec(family, {"protocol": "grandrounds"})).judge_prompt(sample, ANSWER)
    assert [c for j in (first, second) for c in j.calls] == [
        ((Message("user", prompt),), 0),
        ((Message("user", prompt),), 0),
        ((Message("user", prompt),), 1),
    ]
    assert sample.target in prompt and "let me see" not in prompt  # ours drops the reasoning


@pytest.mark.parametrize("family", FAMILIES)
def test_no_readable_reply_after_the_reasks_is_unscored(family: str, samples) -> None:
    judges = [TableJudge("j1", [GARBAGE]), TableJudge("j2", [None])]
    g = grade(family, with_target(samples, family), judges, max_reask=1)
    assert (g.value, g.status, g.error) == (None, "unreadable", "no judge gave a readable verdict")
    assert g.details["coverage"] == {"known": 0, "total": 2} and g.details["n_unknown"] == 2
    assert g.details["judge_values"] == [None, None]
    assert [(v.status, v.attempts, v.raw, v.error) for v in g.votes] == [
        ("unknown", 2, GARBAGE, None),  # asked, re-asked once, never read
        ("unknown", 1, "", "judge call failed: HTTP 503: down"),  # a failed call is not re-asked
    ]
    assert g.judge_keys == ("j1#0", "j1#1", "j2#0")


@pytest.mark.parametrize("family", FAMILIES)
def test_a_question_without_reference_is_refused_before_any_call(family: str, samples) -> None:
    sample = next((s for s in samples[family] if not s.target), None)
    if (
        sample is None
    ):  # MedDialog's files have no such row: the same sample with its summary emptied
        sample = replace(samples[family][0], target="")
    judge = TableJudge("j1", [HIGH[family]])
    g = grade(family, sample, [judge])
    assert (g.value, g.status, g.error) == (
        None,
        "grader_error",
        "no reference answer in the file for this question",
    )
    assert g.details == {"protocol": "grandrounds"} and g.votes == () and judge.calls == []


@pytest.mark.parametrize("family", FAMILIES)
def test_regrading_unknowns_keeps_the_known_votes(family: str, samples) -> None:
    sample = with_target(samples, family)
    before = grade(family, sample, [TableJudge("j1", [HIGH[family]]), TableJudge("j2", [None])])
    assert before.value == 1.0 and before.details["n_unknown"] == 1
    again = [TableJudge("j1", [GARBAGE]), TableJudge("j2", [None, LOW[family]])]
    after = grade(family, sample, again, previous=before, only_unknown=True)
    assert again[0].calls == [] and after.votes[0] == before.votes[0]  # kept as it was
    assert [a for _m, a in again[1].calls] == [1]  # asked after the attempt already used
    assert after.votes[1].status == "met" and after.votes[1].attempts == 2
    assert after.value == pytest.approx((1.0 + LOW_VALUE[family]) / 2)
    assert after.details["coverage"] == {"known": 2, "total": 2}
    assert after.judge_keys == ("j1#0", "j2#0", "j2#1")
    # without only_unknown the stored grade is not resumed: every judge is asked afresh
    fresh = [TableJudge("j1", [GARBAGE]), TableJudge("j2", [LOW[family]])]
    redo = grade(family, sample, fresh, previous=before, only_unknown=False, max_reask=0)
    assert [len(j.calls) for j in fresh] == [1, 1] and redo.value == pytest.approx(
        LOW_VALUE[family]
    )


@pytest.fixture()
def reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A reference folder holding Medmarks' careqa and medicationqa files, from the shared copy."""
    root = tmp_path / "ref"
    for f in (CAREQA_ENV, JUDGE_PROMPTS, ENVIRONMENT):
        dest = root / f.folder / f.path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(upstream_bytes(f))
        assert file_sha256(dest) == f.sha256, f.path
    monkeypatch.setenv("GRANDROUNDS_REFERENCE", str(root))
    return root


def test_careqa_literal_figure_reads_every_vote_as_medmarks_parser_does(
    reference: Path, samples
) -> None:
    # Medmarks' parser reads the tags its file lists, which name no substantive_addition: that
    # term adds 0 there, and an unknown vote (its last unread reply) adds 0 in all
    assert "substantive_addition" not in parser_tags()
    sample = with_target(samples, "careqa-open")
    judges = [TableJudge("j1", [HIGH["careqa-open"]]), TableJudge("j2", [GARBAGE])]
    g = grade("careqa-open", sample, judges, protocol="reference", max_reask=0)
    assert g.value == 1.0 and g.details["judge_values"] == [1.0, None]
    assert g.details["medmarks_value"] == pytest.approx((0.75 + 0.0) / 2)
    # re-graded: j2 now reads; the figure is made again from every vote's reply, kept ones included
    again = [TableJudge("j1", [GARBAGE]), TableJudge("j2", [GARBAGE, LOW["careqa-open"]])]
    after = grade("careqa-open", sample, again, protocol="reference", previous=g, only_unknown=True)
    assert after.value == pytest.approx(0.75) and again[0].calls == []
    assert after.details["medmarks_value"] == pytest.approx((0.75 + 0.25) / 2)
    ours = grade("careqa-open", sample, judges[:1], max_reask=0)
    assert ours.details["medmarks_value"] is None  # no parser tag list without the pinned file


def test_medicationqa_figure_from_the_first_reply_survives_a_regrade(
    reference: Path, samples
) -> None:
    sample = with_target(samples, "medicationqa")
    # a boolean score: no number for us (re-asked), 1 for Medmarks' _coerce_score, which reads only
    # this first reply; j2's call fails, which Medmarks scores 0
    boolean = scores(5, 5, True)
    judges = [TableJudge("j1", [boolean, HIGH["medicationqa"]]), TableJudge("j2", [None])]
    g = grade("medicationqa", sample, judges, protocol="reference")
    first_figure = (1.0 + 1.0 + 0.2) / 3
    assert g.value == 1.0 and g.votes[0].raw == HIGH["medicationqa"]
    assert g.details["medmarks_values"] == [pytest.approx(first_figure), 0.0]
    assert g.details["medmarks_value"] == pytest.approx(first_figure / 2)
    # re-graded: j1's kept vote holds only its last reply (1.0 for Medmarks), yet its figure stays
    # the first reply's; j2, now read, keeps the 0 of its failed first call
    again = [TableJudge("j1", [GARBAGE]), TableJudge("j2", [None, LOW["medicationqa"]])]
    after = grade(
        "medicationqa", sample, again, protocol="reference", previous=g, only_unknown=True
    )
    assert again[0].calls == [] and after.value == pytest.approx((1.0 + 0.4) / 2)
    assert after.details["medmarks_values"] == g.details["medmarks_values"]
    # a grading that does not resume reads each judge's first reply afresh
    fresh = [TableJudge("j1", [HIGH["medicationqa"]]), TableJudge("j2", [LOW["medicationqa"]])]
    redo = grade("medicationqa", sample, fresh, protocol="reference", previous=g)
    assert redo.details["medmarks_values"] == [1.0, pytest.approx(0.4)]


def test_medicationqa_reference_reads_the_last_object_ours_the_first_complete_one(
    reference: Path, samples
) -> None:
    sample = with_target(samples, "medicationqa")
    reply = scores(5, 5, 5) + " and later " + scores(3, 2, 1)
    for protocol, want in (("reference", 0.4), ("grandrounds", 1.0)):
        g = grade("medicationqa", sample, [TableJudge("j1", [reply])], protocol=protocol)
        assert g.value == pytest.approx(want), protocol
    assert g.details["medmarks_values"] == [pytest.approx(0.4)]  # Medmarks' own, either protocol
