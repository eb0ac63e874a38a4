"""MedAgentsBench's hard subset (894 questions from 10 sources) and its MedExQA pool (935 questions).

Data: ``xk-huang/medagents-benchmark`` at 36ee14d, the fork of the authors' gersteinlab repository
(the paper, arXiv 2503.07459, links gersteinlab; its HF copy cannot be reached): JSON Lines with
``realidx, question, options {letter: text}, answer_idx, answer`` and per-source extras.

- ``medagentsbench``: ``data/<source>/test_hard.jsonl`` for medqa, pubmedqa, medmcqa, medbullets,
  mmlu, mmlu-pro, afrimedqa, medexqa, medxpertqa-r, medxpertqa-u (100, 100, 100, 89, 73, 100, 32,
  100, 100, 100), 3 to 10 options; broken down by source. The subset was chosen from questions
  models failed (under 50% accuracy), so it is biased against the models used to select it.
  Licence MIT (Apache-2.0 before 2025-04-03); the questions keep their source datasets' terms.
- ``medexqa``: ``data/medexqa/test.jsonl``, the MCQ part of MedExQA as MedAgentsBench repackaged
  it: 935 four-option questions over five specialties (from ``realidx``). **Not the official
  MedExQA test split** (940 questions on HF, with explanations; this file's CLS count exceeds it),
  and without the explanations, so the official explanation score cannot be computed. Broken down
  by specialty; the official MedExQA figure is the mean over the five specialties, given as
  ``macro_accuracy``.

Protocols. ``reference`` is the MedAgentsBench authors' chain-of-thought baseline
(baselines/MedPrompt/cot.py at gersteinlab f5e50b6, read at run time): its system message and user
prompt for chat models (the branch every non-o1/Claude model takes), the options written
``(A) text`` joined by spaces, temperature 0 (the script also sets seed 42, and max_tokens 4,096 on
its Claude branch, which is used here). The authors read the answer with a second call, to
gpt-4o-mini with a JSON schema restricting ``answer_idx`` to the option letters; that call is not
reproduced: replies are read by our deterministic reading (unreadable ones counted), a stated
deviation. The zero-shot script (zero_shot.py) is not among the pinned files. Aggregation: accuracy
per source as the paper reports, with micro accuracy over all questions as the headline.
``grandrounds``: our prompt and reading, failed calls excluded. No lm-evaluation-harness task
exists, so no ``letter-loglik`` mode.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

from grandrounds.benchmarks.base import (
    Prompt,
    RemoteFile,
    RunOptions,
    chosen_subjects,
    resolve_file,
)
from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark, accuracy_by, cached, macro_average
from grandrounds.benchmarks.readers.exam_options import medqa_format_options
from grandrounds.benchmarks.readers.lines import iter_jsonl
from grandrounds.benchmarks.readers.records import IdSet, require_fields
from grandrounds.core.errors import DataError
from grandrounds.core.params import Param
from grandrounds.core.records import AnswerMode, Grade, Message, Sample
from grandrounds.sources.protocols import Generation, Protocol, ours
from grandrounds.sources.upstream import (
    MEDAGENTSBENCH,
    MEDAGENTSBENCH_DATA,
    UpstreamFile,
    python_fstring,
    python_message_contents,
)

_BASE = MEDAGENTSBENCH_DATA.url("data")
#: Source -> sha256 of its test_hard.jsonl (in the paper's table order).
SOURCES: dict[str, str] = {
    "medqa": "ba4680bc129139bf8b466d506f077bfce7ac978dfaf2a9367d484d3d91c454bb",
    "pubmedqa": "868f7cf06b34a77a55341256929985edda5225c61479661a4141db10198e2947",
    "medmcqa": "2ea559cdcb8efb8fefcbe2ea7545077d068d8db3bf2bfb0266f79d1a1d010ff1",
    "medbullets": "2ca3c84767bfea5a67b2fa80c7f70cd1349bdc86b9e213f62148f448a6d99c30",
    "mmlu": "b59e43ffb7f6a7a1786317099dea996e80035e167a3a63cca3dea7592e79897d",
    "mmlu-pro": "534a6d2315a101e985cac9c24641059e2064ac9c9363ac0d3522f3c9837e9fd7",
    "afrimedqa": "dc67b084912c1a58403025e8661930385848e38fcbd031a5cbce9aa93bb75ff3",
    "medexqa": "8e2b60ad6f2b32051fbc16a9746f30839c6958e7ebce312da387155d887f7644",
    "medxpertqa-r": "0100818865c1cbfb3e22effb740e1c447057e00b4e2282a0e1e52dd974e06cf1",
    "medxpertqa-u": "4d73686a46b2a5dfe908a8d32d409608d00af43dc59ee463271626c4a9ec867e",
}
COT = MEDAGENTSBENCH.file(
    "baselines/MedPrompt/cot.py",
    "a9376813bf15d8aacf2474bc2bda7a9df6bd25a6b712aac24521690d33465fa5",
)

_PROMPTS = {
    "generate": "MedAgentsBench baselines/MedPrompt/cot.py run_cot (chat-model branch: system + user)",
    "text-loglik": "ours",
    "next-token": "ours",
    "letter-loglik": "not offered (no lm-evaluation-harness task)",
}
REFERENCE = Protocol(
    name="reference",
    # cot.py: temperature=0.0 (and seed=42); max_tokens 4096 as its Claude branch (the OpenAI branch sets none)
    answer=Generation(temperature=0.0, max_tokens=4096),
    extraction="generate: our deterministic reading; the authors' gpt-4o-mini JSON-schema extraction call is not reproduced; "
    "log-prob modes: argmax",
    aggregation="accuracy over every question (failed or unreadable = wrong), per source as the paper reports",
    source=f"{COT.repo}@{COT.commit[:7]} {COT.path}",
    settings={"prompt": _PROMPTS},
)
GRANDROUNDS = ours(
    REFERENCE,
    extraction="generate: our tolerant reading (choice_extract.py); log-prob modes: argmax",
    aggregation="accuracy over scored questions: failed calls excluded and counted",
    settings={"prompt": {**_PROMPTS, "generate": "ours"}},
)


class _MedAgentsExam(MultipleChoiceBenchmark):
    """The JSONL format of the MedAgentsBench repository, and the authors' CoT prompt."""

    answer_modes: ClassVar[tuple[AnswerMode, ...]] = ("generate", "text-loglik", "next-token")
    reference_reading = "ours"
    protocols = {"reference": REFERENCE, "grandrounds": GRANDROUNDS}
    protocol_differences = {
        "generate": "reference: the authors' CoT prompt, temperature 0, 4,096 tokens, failed calls wrong; grandrounds: our "
        "prompt, 1,024 tokens, failed calls excluded; both read by ours (the authors' LLM extractor is not run)",
        "logprob": "same prompt and argmax; reference counts failed or unreadable answers wrong, grandrounds excludes them",
    }

    def upstream_files(self) -> tuple[UpstreamFile, ...]:
        return (COT,)

    def read_file(self, path: Path, source: str) -> Iterator[Sample]:
        """Samples of one JSONL file; ids ``<source>-<realidx>``."""
        seen = IdSet(path)
        for no, rec in iter_jsonl(path):
            require_fields(path, no, rec, ("realidx", "question", "options", "answer_idx"))
            choices, key = medqa_format_options(path, no, rec)
            sid = seen.add(f"{source}-{rec['realidx']}", no)
            yield self.make_sample(
                sid,
                rec["question"],
                choices,
                key,
                **self.meta(source, rec, path, no),
            )

    def meta(self, source: str, rec: dict[str, Any], path: Path, no: int) -> dict[str, Any]:
        return {"source": source, "realidx": rec["realidx"]}

    def prompt(
        self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()
    ) -> Prompt:
        """The exam layer's prompt; the reference generated answer is cot.py's system and user messages."""
        if options.protocol != "reference" or self.effective_mode(sample, options) != "generate":
            return super().prompt(sample, options, history)
        shown, _ = self.prepare(sample, options)
        system = cached(python_message_contents, COT, within="run_cot")[1][
            1
        ]  # [0] is the o1/Claude branch's user message
        return Prompt(
            (Message("system", system.render()), Message("user", self.reference_prompt(shown)))
        )

    def reference_prompt(self, sample: Sample) -> str:
        """cot.py's user message for chat models: the question, and ``options_text`` as ``run`` builds it
        (each option ``({key}) {value}``, read from the file, joined by a space)."""
        user = cached(python_message_contents, COT, within="run_cot")[2][1]
        line = cached(python_fstring, COT, within="run", fields=("key", "value"))
        options = " ".join(line.render(key=k, value=v) for k, v in sample.choices.items())
        return user.render(question_text=sample.metadata["question"], options_text=options)


class MedAgentsBench(_MedAgentsExam):
    """MedAgentsBench test_hard: 894 questions from 10 sources."""

    name: ClassVar[str] = "medagentsbench"
    description: ClassVar[str] = (
        "MedAgentsBench hard subset, 894 questions from 10 medical QA sources (3-10 options); accuracy by source"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = tuple(
        RemoteFile(f"{_BASE}/{s}/test_hard.jsonl", f"{s}_test_hard.jsonl", sha)
        for s, sha in SOURCES.items()
    )
    category_fields: ClassVar[tuple[str, ...]] = ("source",)
    parameters: ClassVar[tuple[Param, ...]] = (
        Param(
            name="sources",
            type=list[str],
            default=tuple(SOURCES),
            help="sources to ask (default all ten)",
            choices=tuple(SOURCES),
        ),
    )

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        self.sources = chosen_subjects(self, tuple(SOURCES), "sources")
        self.remote_files = tuple(  # type: ignore[misc]  # a class's files, narrowed to those the parameters choose
            rf
            for rf in type(self).remote_files
            if rf.filename.removesuffix("_test_hard.jsonl") in self.sources
        )

    def data_files(self, root: Path) -> list[Path]:
        if root.is_file():
            return [root]
        return [_source_file(root, s) for s in self.sources]

    def records(self, root: Path) -> Iterator[Sample]:
        if not root.exists():
            raise DataError(root, None, "file or directory not found")
        if root.is_file():
            yield from self.read_file(
                root, root.parent.name if root.parent.name in SOURCES else root.stem
            )
            return
        for source in self.sources:
            path = _source_file(root, source)
            if not path.exists():
                raise DataError(
                    path, None, f"file not found (expected {source}/test_hard.jsonl under {root})"
                )
            yield from self.read_file(path, source)

    def extra_metrics(
        self,
        pairs: Sequence[tuple[Sample, Grade]],
        values: Sequence[float | None],
        options: RunOptions,
    ) -> dict[str, Any]:
        return {
            "macro_accuracy": macro_average(accuracy_by(pairs, "source", values)),
            "headline": "micro",
        }


def _source_file(root: Path, source: str) -> Path:
    """A source's file: the cache's ``<source>_test_hard.jsonl``, else ``[data/]<source>/test_hard.jsonl``."""
    for path in (
        root / f"{source}_test_hard.jsonl",
        root / source / "test_hard.jsonl",
        root / "data" / source / "test_hard.jsonl",
    ):
        if path.exists():
            return path
    return root / source / "test_hard.jsonl"


class MedExQA(_MedAgentsExam):
    """MedExQA's multiple-choice questions as MedAgentsBench repackaged them (935; not the official split)."""

    name: ClassVar[str] = "medexqa"
    description: ClassVar[str] = (
        "MedExQA multiple-choice part as repackaged by MedAgentsBench, 935 questions over 5 specialties "
        "(NOT the official 940-question test split; no explanations); accuracy by specialty"
    )
    remote_files: ClassVar[tuple[RemoteFile, ...]] = (
        RemoteFile(
            f"{_BASE}/medexqa/test.jsonl",
            "test.jsonl",
            "443d5274ed17a656e4554f05caf821ea3838d1dd844511734088dc8c377b2a5c",
        ),
    )
    category_fields: ClassVar[tuple[str, ...]] = ("specialty",)

    def records(self, root: Path) -> Iterator[Sample]:
        return self.read_file(resolve_file(root, self.remote_files[0].filename), "medexqa")

    def meta(self, source: str, rec: dict[str, Any], path: Path, no: int) -> dict[str, Any]:
        idx = str(rec["realidx"])
        number, sep, specialty = idx.partition("_")
        if not sep or not number.isdigit() or not specialty:
            raise DataError(path, no, f"realidx {idx!r} is not <number>_<specialty>")
        return {"specialty": specialty, "realidx": idx}

    def extra_metrics(
        self,
        pairs: Sequence[tuple[Sample, Grade]],
        values: Sequence[float | None],
        options: RunOptions,
    ) -> dict[str, Any]:
        """The official MedExQA figure: the unweighted mean over the specialties (evaluate_pipe_MedExQA.py)."""
        return {
            "macro_accuracy": macro_average(accuracy_by(pairs, "specialty", values)),
            "headline": "micro",
            "note": "MedAgentsBench's repackaging of MedExQA, not the official test split",
        }
