"""What the exams whose ``reference`` protocol is a Medmarks environment share.

Medmarks (tmabraham/med-lm-envs, at the commit ../shared/reference/SOURCES.tsv pins for
``medmarks-envs``) builds each question's user prompt in its environment file; the benchmark reads
that prompt's text out of the pinned file at run time (:mod:`grandrounds.sources.upstream`). Two
parts of a Medmarks run are not in that file and so are not reproduced: the system prompt some
environments take from the ``verifiers`` package (``BOXED_SYSTEM_PROMPT``), and the reading of the
reply (verifiers' parser and Medmarks' ``multiple_choice_accuracy``). The reply is therefore read
our way under both protocols (``reference_reading = "ours"``), and each protocol record says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark
from grandrounds.core.records import AnswerMode
from grandrounds.sources.protocols import OUR_ANSWER, Protocol, ours
from grandrounds.sources.upstream import UpstreamFile, UpstreamRepo

#: tmabraham/med-lm-envs at the commit every Medmarks environment is read from (as SOURCES.tsv's medmarks-envs).
MEDMARKS = UpstreamRepo(
    "medmarks-envs", "tmabraham/med-lm-envs", "7ee045209857f85e909670bcab4a5b7260eafe92"
)

DIFFERENCES = {
    "generate": "reference: Medmarks' prompt, failed calls counted wrong; grandrounds: our prompt, failed calls excluded "
    "and counted; both read the reply our way (Medmarks' parser is not in the pinned file)",
    "logprob": "same prompt and argmax; reference counts failed or unreadable answers wrong, grandrounds excludes them",
}


def medmarks_protocols(
    env_path: str, prompt: str, extra_prompts: Mapping[str, str] | None = None
) -> dict[str, Protocol]:
    """``reference`` (Medmarks' user prompt ``prompt`` read from ``env_path``, greedy, our reading, accuracy
    over every item) and ``grandrounds`` (our prompt and reading, failed calls excluded)."""
    prompts = {
        "generate": f"Medmarks {env_path} {prompt} (read at run time; no system prompt)",
        "text-loglik": "ours",
        "next-token": "ours",
        "letter-loglik": "not offered (no lm-eval task)",
        **(extra_prompts or {}),
    }
    reference = Protocol(
        "reference",
        answer=OUR_ANSWER,  # Medmarks fixes no sampling settings in the environment: greedy, 1,024 tokens (ours)
        extraction="generate: ours (Medmarks' boxed/XML parser and multiple_choice_accuracy are not in the pinned "
        "environment file); log-prob modes: argmax",
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


class MedmarksExam(MultipleChoiceBenchmark):
    """An exam whose ``reference`` prompt is read from a Medmarks environment file (:attr:`env`),
    with the reply read our way under both protocols; no lm-eval task, so no ``letter-loglik``."""

    answer_modes: ClassVar[tuple[AnswerMode, ...]] = ("generate", "text-loglik", "next-token")
    reference_reading: ClassVar[str] = "ours"
    protocol_differences: ClassVar[Mapping[str, str]] = DIFFERENCES
    #: the pinned Medmarks environment file the reference prompt is read from
    env: ClassVar[UpstreamFile]

    def upstream_files(self) -> tuple[UpstreamFile, ...]:
        return (self.env,)
