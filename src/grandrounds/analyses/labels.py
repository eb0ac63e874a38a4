"""What the viewer calls things: a question's own text, and a run's label.

A list row shows the sample's question, not the prompt around it: multiple-choice exams keep
the stem in ``metadata["question"]`` (PubMedQA its bare question in ``pubmed_question``,
MedCalc-Bench the task beside the patient note), the other benchmarks ask the last user
message. Where every sample of a dataset opens with the same lines (an instruction paragraph,
as in MEDEC), :func:`strip_shared_lines` removes them.

A column is one grading of one run. Runs of one model differ by answer mode, protocol, judge or
limit; :func:`run_facts` collects those from the run record and the grading's fingerprint,
:func:`full_label` names them all with the one labelling rule the leaderboard and reports use
(:func:`grandrounds.analyses.leaderboard.run_label`), and :func:`column_labels` keeps, within a set of
columns, the model, the facts that differ between them, and the run id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from grandrounds.analyses.leaderboard import run_label
from grandrounds.core.records import Sample

#: How :func:`grandrounds.analyses.leaderboard.run_label` joins a label's parts.
SEP = " · "
#: Metadata keys holding a sample's own question, most specific first.
QUESTION_KEYS = ("pubmed_question", "question")
#: Metadata keys whose text belongs with the question in a list (MedCalc-Bench's patient note).
CONTEXT_KEYS = ("note",)


def question_of(sample: Sample) -> tuple[str, bool]:
    """(the sample's question, True when it came from the sample's own fields).

    False means the last user message was used (or the last message), which may open with
    an instruction every sample shares; :func:`strip_shared_lines` takes care of that.
    """
    md = sample.metadata or {}
    for key in QUESTION_KEYS:
        value = md.get(key)
        if isinstance(value, str) and value.strip():
            context = [
                str(md[k]).strip()
                for k in CONTEXT_KEYS
                if isinstance(md.get(k), str) and md[k].strip()
            ]
            return " — ".join([value.strip(), *context]), True
    for m in reversed(sample.messages):
        if m.role == "user":
            return m.text.strip(), False
    return (sample.messages[-1].text.strip() if sample.messages else ""), False


def shown_questions(samples: Sequence[Sample]) -> list[str]:
    """Each sample's question as a list shows it: :func:`question_of`, and where that is the
    prompt itself, without the lines every such prompt of ``samples`` (one dataset) opens with."""
    found = [question_of(s) for s in samples]
    prompts = iter(strip_shared_lines([q for q, own in found if not own]))
    return [q if own else next(prompts) for q, own in found]


def strip_shared_lines(texts: Sequence[str]) -> list[str]:
    """``texts`` without the whole lines all of them open with (two texts or more).

    Only complete lines are removed, and a text that would be left empty is kept whole.
    """
    if len(texts) < 2:
        return list(texts)
    first, last = (
        min(texts),
        max(texts),
    )  # the common prefix of all is the common prefix of these two
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    if first == last:
        return list(texts)
    cut = first.rfind("\n", 0, n) + 1  # just after the last line break all of them share
    if cut <= 0:
        return list(texts)
    return [t[cut:].strip() or t for t in texts]


@dataclass(frozen=True, kw_only=True)
class RunFacts:
    """What tells one grading of one run from another: the fields of its fingerprint that
    :func:`grandrounds.analyses.leaderboard.run_label` reads (model, answer mode, protocol, limit, run id)
    and its judge names."""

    run_id: str
    grader_fp: str
    benchmark: str
    model: str
    fingerprint: dict[str, Any] = field(default_factory=dict)
    judge: str = ""

    def parts(self) -> list[str]:
        """The label's facts between the model and the run id, as ``run_label`` writes them."""
        return run_label(self.fingerprint, self.judge or None, with_id=False).split(SEP)[1:]

    @property
    def short_id(self) -> str:
        return run_label({"run_id": self.run_id}, with_id=True).split(SEP)[-1]


def run_facts(
    run_id: str,
    grader_fp: str,
    run: Any | None,
    fingerprint: Mapping[str, Any] | None,
    judge: str | None = None,
) -> RunFacts:
    """The facts of one grading: ``run`` is the stored run record (None if missing), ``fingerprint``
    the grading's (its result's, or the stored grader spec), ``judge`` the result's judge names."""
    fp = fingerprint or {}
    options = dict(getattr(run, "options", None) or {})
    mode = str(options.get("answer_mode") or fp.get("answer_mode") or "generate")
    mode = {"letter": "next-token", "loglik": "text-loglik"}.get(
        mode, mode
    )  # earlier names of two modes
    if not judge:
        judge = ",".join(
            str(j.get("model", "?")) for j in fp.get("judges") or () if isinstance(j, Mapping)
        )
    model = str(getattr(run, "model", None) or fp.get("model") or "?")
    limit = options.get("limit", fp.get("limit"))
    return RunFacts(
        run_id=run_id,
        grader_fp=grader_fp,
        benchmark=str(getattr(run, "benchmark", None) or fp.get("benchmark") or "?"),
        model=model,
        fingerprint={
            "model": model,
            "answer_mode": mode,
            # a run with no result yet (interrupted) is labelled with the protocol it ran under,
            # from its own record, not the default
            "protocol": fp.get("protocol")
            or ({"name": str(options["protocol"])} if options.get("protocol") else None),
            "limit": limit,
            "run_id": run_id,
        },
        judge=judge or "",
    )


def full_label(f: RunFacts) -> str:
    """Every fact, as the leaderboard and reports write it (:func:`grandrounds.analyses.leaderboard.run_label`)."""
    return run_label(f.fingerprint, f.judge or None)


def column_labels(facts: Sequence[RunFacts]) -> list[str]:
    """Short labels for columns shown together: the model, the facts not shared by every column
    of the same benchmark, and the run id (with the grading's when a run has several)."""
    shared: dict[str, set[str]] = {}
    for f in facts:
        parts = set(f.parts())
        shared[f.benchmark] = shared[f.benchmark] & parts if f.benchmark in shared else parts
    gradings: dict[str, int] = {}
    for f in facts:
        gradings[f.run_id] = gradings.get(f.run_id, 0) + 1
    out = []
    for f in facts:
        ident = f.short_id + (f"/{f.grader_fp[:4]}" if gradings[f.run_id] > 1 else "")
        out.append(
            SEP.join([f.model, *(p for p in f.parts() if p not in shared[f.benchmark]), ident])
        )
    return out
