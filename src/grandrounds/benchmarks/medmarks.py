"""What the exams whose ``reference`` protocol is a Medmarks environment share.

Medmarks (tmabraham/med-lm-envs, at the commit pinned for the reference folder
``medmarks-envs``) builds each question's user prompt in its environment file; the benchmark reads
that prompt's text out of the pinned file at run time (:mod:`grandrounds.sources.upstream`). The
environment also fixes the answer format: its system prompt (``XML_SYSTEM_PROMPT`` of Medmarks'
``prompts.py``, or ``BOXED_SYSTEM_PROMPT`` of the verifiers release it runs, v0.1.7.post0, both read
at run time) and the reading that goes with it (the first ``<answer>`` tag, the last ``\\boxed{}``,
or the whole reply, then ``multiple_choice_accuracy``: :mod:`grandrounds.graders.readings_medmarks`).
``reference`` sends that system prompt and reads Medmarks' way; ``grandrounds`` sends our prompt
and reads ours.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark
from grandrounds.core.records import AnswerMode
from grandrounds.sources.protocols import Generation, Protocol, ours
from grandrounds.sources.upstream import MEDMARKS, VERIFIERS, TextRef, UpstreamFile

#: Medmarks' XML system prompt (HEAD-QA's and MedConceptsQA's default answer format).
MEDMARKS_PROMPTS = MEDMARKS.file(
    "REDACTED_verifiers/prompts.py",
    "f51750327cb27f6154e6bd053decaaecbd0d5436fb2ddcc357165fae50f70310",
)
#: verifiers v0.1.7.post0's boxed system prompt (CareQA's and SuperGPQA's).
VERIFIERS_DATA_UTILS = VERIFIERS.file(
    "verifiers/utils/data_utils.py",
    "8f21442afba86ae8907e7faefa0a13f476af7edc2aa91c6d8937e6a2d6f2ea90",
)
#: answer format -> (system prompt, the reading of EXAM_READINGS, what the protocol record says)
FORMATS: dict[str, tuple[TextRef | None, str, str]] = {
    "xml": (
        TextRef(MEDMARKS_PROMPTS, "XML_SYSTEM_PROMPT"),
        "medmarks-xml",
        "the first <answer>...</answer> (verifiers XMLParser.parse_answer; none: wrong)",
    ),
    "boxed": (
        TextRef(VERIFIERS_DATA_UTILS, "BOXED_SYSTEM_PROMPT"),
        "medmarks-boxed",
        "the last \\boxed{} (verifiers extract_boxed_answer; none: the whole reply)",
    ),
    "plain": (None, "medmarks-plain", "the whole reply (vf.Parser())"),
}

DIFFERENCES = {
    "generate": "reference: Medmarks' system and user prompts and its reading (parser + "
    "multiple_choice_accuracy), failed calls counted wrong; grandrounds: our prompt and tolerant "
    "reading, failed calls excluded and counted",
    "logprob": "same prompt and argmax; reference counts failed or unreadable answers wrong, grandrounds excludes them",
}


def medmarks_protocols(
    env_path: str,
    prompt: str,
    extra_prompts: Mapping[str, str] | None = None,
    answer_format: str = "plain",
) -> dict[str, Protocol]:
    """``reference`` (Medmarks' system prompt for ``answer_format`` and user prompt ``prompt`` read from
    ``env_path``, greedy, Medmarks' reading, accuracy over every item) and ``grandrounds`` (our prompt
    and reading, failed calls excluded)."""
    system, _, parsed = FORMATS[answer_format]
    system_note = (
        f"system: {system.source.repo}@{system.source.commit[:7]} {system.source.path} {system.name}"
        if system is not None
        else "no system prompt"
    )
    prompts = {
        "generate": f"Medmarks {env_path} {prompt} (read at run time; {system_note})",
        "text-loglik": "ours",
        "next-token": "ours",
        "letter-loglik": "not offered (no lm-eval task)",
        **(extra_prompts or {}),
    }
    reference = Protocol(
        name="reference",
        # Medmarks fixes no sampling settings in the environment: greedy, 1,024 tokens (ours)
        answer=Generation(temperature=0.0, max_tokens=1024, system=system),
        extraction=f"generate: Medmarks' reading: {parsed}, then multiple_choice_accuracy against the "
        "key's label and text (REDACTED_verifiers/rewards); log-prob modes: argmax",
        aggregation="accuracy over every item: a failed or unreadable answer counts wrong (Medmarks' mean reward)",
        source=f"{MEDMARKS.repo}@{MEDMARKS.commit[:7]} {env_path}",
        settings={"prompt": prompts},
    )
    grandrounds = ours(
        reference,
        extraction="generate: our tolerant reading (choice_extract.py); log-prob modes: argmax",
        aggregation="accuracy over scored items: failed calls excluded and counted",
        settings={"prompt": {**prompts, "generate": "ours"}},
    )
    return {"reference": reference, "grandrounds": grandrounds}


def medmarks_fidelity(
    env_path: str, user_prompt: str, answer_format: str, **more: str
) -> dict[str, str]:
    """The docs' "Against the reference" statement of a Medmarks-referenced exam (``more`` adds to or
    replaces its entries)."""
    system, _, parsed = FORMATS[answer_format]
    system_text = (
        f"`{system.name}` ({system.source.repo}@{system.source.commit[:7]} `{system.source.path}`)"
        if system is not None
        else "none"
    )
    return {
        "reference": f"Medmarks (tmabraham/med-lm-envs@{MEDMARKS.commit[:7]}) `{env_path}`, the "
        "named peer (the authors publish no reading for language models)",
        "reader": f"{parsed}, then Medmarks' `multiple_choice_accuracy` against the key's label "
        "and text (LaTeX rendered with pylatexenc as there); reimplemented in "
        "`graders/readings_medmarks.py`",
        "prompt": f"user: `{user_prompt}` read from the pinned file at run time; system: {system_text}",
        "equal": "each reply's grade, checked against Medmarks' parser and `multiple_choice_accuracy` "
        "executed from their pinned files, through the CLI on 300+ written reply shapes (0 differ)",
        "differs": "Medmarks samples with its runner's settings; greedy here (none is pinned). "
        "A failed call is wrong, as Medmarks' reward is 0",
        **more,
    }


class MedmarksExam(MultipleChoiceBenchmark):
    """An exam whose ``reference`` prompt and reading are a Medmarks environment's (:attr:`env`,
    :attr:`answer_format`); no lm-eval task, so no ``letter-loglik``."""

    answer_modes: ClassVar[tuple[AnswerMode, ...]] = ("generate", "text-loglik", "next-token")
    protocol_differences: ClassVar[Mapping[str, str]] = DIFFERENCES
    #: the pinned Medmarks environment file the reference prompt is read from
    env: ClassVar[UpstreamFile]
    #: the environment's answer format (:data:`FORMATS`): its system prompt and reading
    answer_format: ClassVar[str] = "plain"

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "reference_reading" not in cls.__dict__:
            cls.reference_reading = FORMATS[cls.answer_format][1]

    def upstream_files(self) -> tuple[UpstreamFile, ...]:
        system = FORMATS[self.answer_format][0]
        return (self.env,) + ((system.source,) if system is not None else ())
