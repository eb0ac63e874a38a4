"""HealthBench (OpenAI): physician-written rubrics over health conversations, graded by an LLM judge.

Data: the original JSONL (``prompt_id``, ``prompt`` message list, ``rubrics`` [{criterion, points,
tags}], ``example_tags``, ``ideal_completions_data``, ``canary``), from openai/simple-evals @ ee3b031.
The conversation goes to the model as is (system and earlier assistant turns included); the judge
sees it with the model's answer appended. Arithmetic: :mod:`grandrounds.scoring.healthbench`.

Protocols (``--protocol``):

- ``reference`` (openai/simple-evals @ ee3b031, ``healthbench_eval.py`` and
  ``sampler/chat_completion_sampler.py``): the candidate is sampled the way simple-evals' model
  table sets up its chat samplers (``ChatCompletionSampler(system_message=OPENAI_SYSTEM_MESSAGE_API,
  max_tokens=2048)`` with the sampler's default temperature 0.5); one grader call per rubric item
  with the official ``GRADER_TEMPLATE``, read at run time, its ``<<conversation>>`` and
  ``<<rubric_item>>`` replaced as ``HealthBenchEval.grade_sample`` does (the conversation the
  candidate was actually sent, its system message included, then the answer, as ``role: content``
  blocks joined by blank lines; the item as ``str(RubricItem)``); the grader is the one
  ``physician_completions_main`` builds: gpt-4.1-2025-04-14 with ``OPENAI_SYSTEM_MESSAGE_API``,
  max_tokens 2048, temperature 0.5. Replies are read like ``parse_json_to_dict`` (fences off,
  ``json.loads``, ``criteria_met`` a JSON bool). Aggregation is ``calculate_score`` and
  ``_aggregate_get_clipped_mean`` (clipped mean, ``n_samples``, bootstrap std of 1,000 resamples
  drawn like ``np.random.choice``, seeded here by ``--seed``).
- ``grandrounds``: our judge templates (``healthbench_grader.txt``, ``healthbench_batched.txt``),
  temperature 0, tolerant JSON reading, reasoning traces stripped from the answer, and examples
  scored over the criteria that have a verdict (coverage reported). The batched judge mode
  (one call per conversation listing every criterion) is ours and exists only here: asked under
  ``reference`` it is refused before anything runs, since no official prompt or reading exists.

Where the reference differs from the official code (checked in tests/test_healthbench_reference.py):

- simple-evals re-asks an unreadable grader reply forever; we re-ask ``--max-reask`` times, then
  the criterion is unknown, and an example with an unknown criterion is unscored (counted in
  ``n_unscored`` and ``n_unscored_unknown``): the official score is defined only with every verdict.
- A reply that is valid JSON but not an object (``true``, ``3``, ``null``, or a list or string
  holding the text ``criteria_met``) makes the official code raise ``TypeError`` and stop the
  whole run; here it is an unreadable reply, re-asked.
- The bootstrap is seeded (simple-evals' is not); with the same seed in ``np.random`` both give the
  same resamples, so ``bootstrap_std`` agrees to the last bit.
- The runner adds the protocol's system message unless a conversation already opens with one
  (simple-evals' sampler adds it in front of any); no conversation of the 500-row sample opens
  with a system message.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from grandrounds.benchmarks.base import Aggregate, Benchmark, Prompt, RemoteFile, RunOptions
from grandrounds.benchmarks.readers.lines import iter_jsonl
from grandrounds.benchmarks.readers.records import IdSet, check_points
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.records import Cell, Criterion, Grade, Message, Sample
from grandrounds.core.registry import Spec
from grandrounds.scoring.healthbench import (
    ClippedStat,
    aggregate_metrics,
    known_example_metrics,
    reference_aggregate,
    reference_example_metrics,
)
from grandrounds.sources.healthbench import BATCHED_IS_OURS, JUDGE_MODES, PROTOCOLS

BASE_URL = "https://openaipublic.blob.core.windows.net/simple-evals/healthbench/"
#: Tag families reported in the breakdown, in display order (example tags first).
FAMILIES = ("theme", "physician_agreed_category", "axis", "level", "cluster")


def _remote(filename: str, sha256: str | None) -> RemoteFile:
    return RemoteFile(url=BASE_URL + filename, filename=filename, sha256=sha256)


def _str_list(value: Any, path: Path, where: int, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise DataError(path, where, f"{field} must be a list of strings")
    return value


def prompt_messages(prompt: Any, path: Path, line: int, who: str = "") -> list[Message]:
    """A HealthBench ``prompt`` (a non-empty list of {role, content}) -> messages; a DataError
    naming the line (and ``who``, the record's id, where it has one) for anything malformed."""
    if not isinstance(prompt, list) or not prompt:
        raise DataError(path, line, f"{who}prompt must be a non-empty list of messages")
    messages = []
    for m in prompt:
        if (
            not isinstance(m, dict)
            or not isinstance(m.get("role"), str)
            or not isinstance(m.get("content"), str)
        ):
            raise DataError(path, line, f"{who}each prompt message needs string role and content")
        messages.append(Message(m["role"], m["content"]))
    return messages


def parse_record(rec: Any, path: Path, line: int, benchmark: str) -> Sample:
    """One JSONL record -> Sample; DataError naming the line for anything malformed."""
    if not isinstance(rec, dict):
        raise DataError(path, line, "record is not a JSON object")
    pid = rec.get("prompt_id")
    if not isinstance(pid, str) or not pid:
        raise DataError(path, line, "missing prompt_id")
    messages = prompt_messages(rec.get("prompt"), path, line, f"{pid}: ")
    rubrics = rec.get("rubrics")
    if not isinstance(rubrics, list) or not rubrics:
        raise DataError(path, line, f"{pid}: rubrics must be a non-empty list")
    rubric = []
    for i, r in enumerate(rubrics):
        pts = r.get("points") if isinstance(r, dict) else None
        if (
            not isinstance(r, dict)
            or not isinstance(r.get("criterion"), str)
            or isinstance(pts, bool)
            or not isinstance(pts, (int, float))
        ):
            raise DataError(
                path, line, f"{pid}: rubric item {i} needs a string criterion and numeric points"
            )
        # points keep their JSON type: the official prompt shows str(points) ("[5]" vs "[5.0]")
        rubric.append(
            Criterion(
                str(i),
                r["criterion"],
                pts,
                tuple(_str_list(r.get("tags", []), path, line, f"{pid}: rubric item {i} tags")),
            )
        )
    check_points(path, line, f"{pid}: ", (c.points for c in rubric))
    if not any(c.points > 0 for c in rubric):
        raise DataError(path, line, f"{pid}: rubric has no positive points, so no score is defined")
    example_tags = _str_list(rec.get("example_tags", []), path, line, f"{pid}: example_tags")
    meta: dict[str, Any] = {"example_tags": example_tags}
    for tag in example_tags:
        family, _, value = tag.partition(":")
        if family in ("theme", "physician_agreed_category"):
            meta[family] = value
    ideal = rec.get("ideal_completions_data")
    if isinstance(ideal, dict) and ideal.get("ideal_completions_group"):
        meta["ideal_completions_group"] = ideal["ideal_completions_group"]
    return Sample(
        id=pid, benchmark=benchmark, messages=tuple(messages), rubric=tuple(rubric), metadata=meta
    )


class HealthBench(Benchmark):
    """HealthBench main (5,000 conversations)."""

    name = "healthbench"
    description = "OpenAI HealthBench: rubric-graded health conversations (LLM judge)"
    language = "en"
    remote_files = (
        _remote(
            "2025-05-07-06-14-12_oss_eval.jsonl",
            "e99dd3c6372c10d6fcc5e385c5fae69d0dd40392dae56836ef9493ae324ecd2f",
        ),
    )
    needs_judge = True
    judge_modes = JUDGE_MODES
    protocols = PROTOCOLS

    def check_options(self, options: RunOptions) -> RunOptions:
        checked = super().check_options(options)
        if checked.protocol == "reference" and checked.judge_mode == "batched":
            raise ConfigError(f"{self.name}: {BATCHED_IS_OURS}")
        return checked

    def load(self, root: Path) -> list[Sample]:
        return list(self.iter_samples(root))

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        path = self.data_files(root)[0]
        seen = IdSet(path)
        for n, rec in iter_jsonl(path):
            sample = parse_record(rec, path, n, self.name)
            seen.add(sample.id, n, f"duplicate prompt_id {sample.id}")
            yield sample

    def prompt(
        self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()
    ) -> Prompt:
        return Prompt(sample.messages)

    def grader_spec(self, options: RunOptions) -> Spec:
        mode = JUDGE_MODES[0] if options.judge_mode == "default" else options.judge_mode
        return Spec("healthbench", {"mode": mode, "protocol": options.protocol})

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        """Clipped mean over scored examples and per-tag metrics, the chosen protocol's way.

        ``reference``: an example counts only with every criterion judged; statistics as
        simple-evals' ``_aggregate_get_clipped_mean``. ``grandrounds``: examples scored over their
        known criteria, seeded bootstrap. Either way the other protocol's figure (from each
        grade's ``other_value``) is in ``extra["other_protocol"]``.
        """
        by_id = {s.id: s for s in samples}
        pairs = ((by_id[g.sample_id], g) for g in grades if g.sample_id in by_id)
        return self.aggregate_summaries(
            [self.summarize(s, g, options) for s, g in pairs], options, n_grades=len(grades)
        )

    def summarize(self, sample: Sample, grade: Grade, options: RunOptions) -> ExampleSummary:
        """The numbers the aggregate uses of one graded conversation (its metrics, or its tags when unscored)."""
        metrics = (
            None
            if grade.value is None
            else _example_metrics(sample, grade, options.protocol == "reference")
        )
        other = grade.details.get("other_value")
        return ExampleSummary(
            metrics=metrics,
            other=float(other) if isinstance(other, (int, float)) else None,
            judged=bool(grade.verdicts),
            known=sum(1 for v in grade.verdicts if v.status in ("met", "unmet")),
            criteria=len(sample.rubric),
            unknown=sum(1 for v in grade.verdicts if v.status == "unknown"),
            tags=frozenset(_tags(sample)) if metrics is None else frozenset(),
        )

    def aggregate_summaries(
        self, summaries: Sequence[Any], options: RunOptions, n_grades: int | None = None
    ) -> Aggregate:
        """The aggregate from each conversation's :class:`ExampleSummary`, in sample order."""
        reference = options.protocol == "reference"
        per_example: list[Mapping[str, float]] = []
        others: list[float] = []
        known = total = unscored_unknown = 0
        n_unknown = sum(x.unknown for x in summaries)
        unscored_tags: Counter[str] = Counter()
        for x in summaries:
            if x.other is not None:
                others.append(x.other)
            if x.judged:  # coverage over every judged answer, scored or not
                known, total = known + x.known, total + x.criteria
            if x.metrics is None:
                unscored_unknown += x.unknown > 0
                unscored_tags.update(x.tags)
                continue
            per_example.append(x.metrics)
        if reference:
            stats = reference_aggregate(per_example, seed=options.seed)
            headline = stats.pop("score", None)  # simple-evals' headline: the "score" metric
        else:
            stats = aggregate_metrics(per_example, seed=options.seed)
            headline = stats.get("overall_score")
        stats.pop("overall_score", None)
        extra = {"bootstrap_std": headline.std if headline else None} | judged_extra(
            options, known, total, n_unknown, unscored_unknown, others, OTHER_DIFFERS
        )
        return Aggregate(
            metric="overall_score (clipped mean, 0-1)",
            score=headline.score if headline else None,
            ci95=headline.ci95 if headline else None,
            n=len(per_example),
            n_unscored=(len(summaries) if n_grades is None else n_grades) - len(per_example),
            breakdown=_tag_breakdown(stats, unscored_tags),
            extra=extra,
        )


@dataclass(frozen=True)
class ExampleSummary:
    """One graded conversation as the aggregate sees it: a few numbers, not its text."""

    #: The example's metrics (overall and per tag), None when it is unscored.
    metrics: Mapping[str, float] | None
    #: Its score under the other protocol (``other_value``), where the grade has one.
    other: float | None
    judged: bool
    known: int
    criteria: int
    unknown: int
    #: Every tag of an unscored example (counted beside each tag's score).
    tags: frozenset[str]


def judged_extra(
    options: RunOptions,
    known: int,
    total: int,
    n_unknown: int,
    unscored_unknown: int,
    others: Sequence[float],
    differs: Mapping[str, str],
) -> dict[str, Any]:
    """What a rubric-judged headline shows beside it: the verdicts' coverage, the unknown verdicts and
    the examples they left unscored, the judge mode, and the other protocol's figure from the same
    judge replies (``differs`` says what that protocol changes)."""
    other = "grandrounds" if options.protocol == "reference" else "reference"
    return {
        "coverage": known / total if total else None,
        "n_unknown_verdicts": n_unknown,
        "n_unscored_unknown": unscored_unknown,
        "judge_mode": options.judge_mode,
        "other_protocol": {
            "protocol": other,
            "score": float(np.clip(np.mean(others), 0.0, 1.0)) if others else None,
            "differs": differs[other],
        },
    }


#: What the figure in ``extra["other_protocol"]`` changes, by the protocol it is computed for.
OTHER_DIFFERS = {
    "grandrounds": "the same judge replies read tolerantly, an example scored over the criteria with a verdict "
    "(the grandrounds protocol would also use its own prompt at temperature 0)",
    "reference": "the same judge replies read like simple-evals (strict JSON), an example scored only when every "
    "criterion has a verdict (the reference protocol would also use the official prompt at temperature 0.5)",
}


def _example_metrics(sample: Sample, grade: Grade, reference: bool) -> Mapping[str, float] | None:
    """An example's metrics from its verdicts: all of them known (reference), or the known ones."""
    tags = sample.metadata.get("example_tags", ())
    if not reference:
        ks = known_example_metrics(sample.rubric, grade.verdicts, tags)
        return ks.metrics if ks.overall is not None else None
    status = {v.criterion_id: v.status for v in grade.verdicts}
    if any(status.get(c.id) not in ("met", "unmet") for c in sample.rubric):
        return None
    return reference_example_metrics(
        sample.rubric, [status[c.id] == "met" for c in sample.rubric], tags
    )


def _tags(sample: Sample) -> set[str]:
    """Every tag an example carries: its example tags and the tags of its rubric items."""
    return set(sample.metadata.get("example_tags", ())) | {t for c in sample.rubric for t in c.tags}


def _tag_breakdown(
    stats: Mapping[str, ClippedStat], unscored: Mapping[str, int]
) -> dict[str, dict[str, Cell]]:
    """``family:value`` tag metrics as families of cells: :data:`FAMILIES` first, empty ones left out.

    A cell's score is the clipped mean with its bootstrap CI (``bootstrap_std`` in metrics);
    ``n_unscored`` counts the unscored examples that carry the tag.
    """
    out: dict[str, dict[str, Cell]] = {f: {} for f in FAMILIES}
    for name in sorted(set(stats) | set(unscored)):
        family, _, value = name.partition(":")
        st = stats.get(name)
        out.setdefault(family, {})[value] = Cell(
            score=st.score if st else None,
            n=st.n if st else 0,
            n_unscored=unscored.get(name, 0),
            ci95=st.ci95 if st else None,
            metrics={"bootstrap_std": st.std} if st else {},
        )
    return {f: cells for f, cells in out.items() if cells}


class HealthBenchHard(HealthBench):
    """HealthBench Hard (1,000 conversations)."""

    name = "healthbench-hard"
    description = "OpenAI HealthBench Hard subset (LLM judge)"
    remote_files = (_remote("hard_2025-05-08-21-00-10.jsonl", None),)


class HealthBenchConsensus(HealthBench):
    """HealthBench Consensus (3,671 conversations, physician-consensus criteria)."""

    name = "healthbench-consensus"
    description = "OpenAI HealthBench Consensus subset (LLM judge)"
    remote_files = (_remote("consensus_2025-05-09-20-00-46.jsonl", None),)
