"""HealthBench Professional (OpenAI): 525 real clinician chat tasks, rubric-graded, with a length adjustment.

Data (``data/assets/README`` of medicalsphere/HealthBench @ 0f3b62d, the reference implementation
of the benchmark): JSON Lines, one task per line: ``id``, ``conversation`` (the user and
assistant messages, ending with a user message; the reference code reads it as
``conversation["messages"]``, the data card as a list: both are read), ``rubric_items``
(``criterion_text``, signed ``points``), ``use_case`` (consult, writing, research), ``type``
(good_faith, red_teaming), ``difficulty`` (difficult, typical), ``specialty``, and
``physician_response`` (kept in the sample's metadata). The public copy is the file the reference
bundles (``data/assets/healthbench_professional_eval.jsonl`` at the pinned commit; the Hugging Face
dataset ``openai/healthbench-professional`` holds the same rows); ``--data PATH`` reads a local copy.

Protocols (``--protocol``):

- ``reference`` (``healthbench/healthbench_eval.py`` and ``README.md`` @ 0f3b62d, read from the
  pinned files): the candidate as in HealthBench (simple-evals' chat sampler: its system message,
  temperature 0.5, 2,048 tokens); one grader call per rubric item with that file's
  ``GRADER_TEMPLATE`` (simple-evals' text with one typo corrected), the item shown as
  ``[points] criterion_text``; the grader is ``gpt-5.4-2026-03-05`` at low reasoning effort through
  the Responses API (README), built by ``ResponsesSampler(reasoning_model=True)`` without a system
  message, temperature or token limit. Replies are read like ``parse_json_to_dict``. The score is
  ``calculate_score`` (met points / positive points), then ``calculate_length_adjusted_score``:
  ``score - penalty * (len(response) - center) / 500`` with ``PROFESSIONAL_LENGTH_ADJUSTMENT_CENTER``
  (2,000 characters) and ``PROFESSIONAL_LENGTH_ADJUSTMENT_PENALTY_PER_500_CHARS`` (0.0147), read from
  the pinned file; per example unclipped, every metric a clipped mean with simple-evals' bootstrap
  std (``_aggregate_get_clipped_mean``). The headline is the length-adjusted mean
  (``overall_score_length_adjusted``), the paper's; the unadjusted mean (simple-evals' ``score``)
  is beside it.
- ``grandrounds``: HealthBench's grandrounds judging (our template and system message,
  temperature 0, tolerant reading, scores over known criteria, batched mode allowed); the length
  is counted on the answer as the judge sees it (reasoning traces and surrounding whitespace stripped).

Breakdowns by use case, type, difficulty and specialty: each cell's score is the length-adjusted
clipped mean of its examples (seeded bootstrap CI); its ``unadjusted`` metric is the reference's
tag metric (the example's unadjusted score, clipped mean, with the reference's bootstrap std
under ``reference``).

Where the reference differs (checked in tests/test_healthbench_professional.py):

- The reference's grader is a reasoning model asked through the Responses API with a reasoning
  effort; grandrounds' OpenAI provider asks Chat Completions and sends neither a reasoning effort
  nor "no token limit". The preset records them (``settings``) and uses temperature 1.0 (the only
  one such models accept) and 32,768 tokens (ours: the reference sets no limit).
- The reference puts the four fields' values into one tag namespace (a specialty named like a use
  case would be merged with it, and a row with two equal values stops the run); here each field
  is its own breakdown family.
- Unreadable replies are re-asked ``--max-reask`` times, then the criterion is unknown and the
  example is unscored under ``reference`` (counted), as in HealthBench.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from grandrounds.benchmarks.base import Aggregate, Benchmark, RunOptions
from grandrounds.benchmarks.healthbench import HealthBench, judged_extra
from grandrounds.benchmarks.readers.lines import iter_jsonl
from grandrounds.benchmarks.readers.records import IdSet, check_points
from grandrounds.core.errors import DataError
from grandrounds.core.records import Cell, Criterion, Grade, Message, Sample
from grandrounds.core.registry import Spec
from grandrounds.scoring.healthbench import (
    ClippedStat,
    aggregate_metrics,
    clipped_stat,
    reference_aggregate,
)
from grandrounds.sources.downloads import RemoteFile
from grandrounds.sources.healthbench import JUDGE_MODES
from grandrounds.sources.healthbench_professional import PRO_REPOSITORY, PROTOCOLS, length_settings

#: The breakdown families: the task fields the reference turns into example tags, in its order.
FAMILIES = ("use_case", "type", "difficulty", "specialty")
DATA_FILE = "healthbench_professional_eval.jsonl"


# ---- data ---------------------------------------------------------------------------------------


def _messages(conv: Any, path: Path, line: int, tid: str) -> tuple[Message, ...]:
    msgs = conv.get("messages") if isinstance(conv, dict) else conv
    if not isinstance(msgs, list) or not msgs:
        raise DataError(
            path,
            line,
            f"{tid}: conversation must be a non-empty list of messages (or an object with one under messages)",
        )
    out = []
    for m in msgs:
        if (
            not isinstance(m, dict)
            or not isinstance(m.get("role"), str)
            or not isinstance(m.get("content"), str)
        ):
            raise DataError(
                path, line, f"{tid}: each conversation message needs string role and content"
            )
        out.append(Message(m["role"], m["content"]))
    return tuple(out)


def parse_task(rec: Mapping[str, Any], path: Path, line: int, benchmark: str) -> Sample:
    """One task -> Sample; DataError naming the line for anything malformed."""
    tid = rec.get("id", rec.get("prompt_id"))
    if isinstance(tid, int) and not isinstance(tid, bool):
        tid = str(tid)
    if not isinstance(tid, str) or not tid:
        raise DataError(path, line, "missing id")
    messages = _messages(rec.get("conversation"), path, line, tid)
    items = rec.get("rubric_items")
    if not isinstance(items, list) or not items:
        raise DataError(path, line, f"{tid}: rubric_items must be a non-empty list")
    rubric = []
    for i, it in enumerate(items):
        pts = it.get("points") if isinstance(it, dict) else None
        if (
            not isinstance(it, dict)
            or not isinstance(it.get("criterion_text"), str)
            or isinstance(pts, bool)
            or not isinstance(pts, (int, float))
        ):
            raise DataError(
                path,
                line,
                f"{tid}: rubric item {i} needs a string criterion_text and numeric points",
            )
        rubric.append(
            Criterion(str(i), it["criterion_text"], pts)
        )  # points as loaded: the prompt shows str(points)
    check_points(path, line, f"{tid}: ", (c.points for c in rubric))
    if not any(c.points > 0 for c in rubric):
        raise DataError(path, line, f"{tid}: rubric has no positive points, so no score is defined")
    meta: dict[str, Any] = {}
    for fam in FAMILIES:
        value = rec.get(fam)
        if value is not None and not isinstance(value, str):
            raise DataError(path, line, f"{tid}: {fam} must be a string")
        if value is not None:
            meta[fam] = value
    meta["example_tags"] = [f"{fam}:{meta[fam]}" for fam in FAMILIES if fam in meta]
    physician = rec.get("physician_response")
    if physician is not None and not isinstance(physician, str):
        raise DataError(path, line, f"{tid}: physician_response must be a string")
    meta["physician_response"] = physician
    return Sample(
        id=tid, benchmark=benchmark, messages=messages, rubric=tuple(rubric), metadata=meta
    )


# ---- the benchmark ------------------------------------------------------------------------------


class HealthBenchProfessional(HealthBench):
    """HealthBench Professional (525 clinician tasks), scored with the length adjustment."""

    name = "healthbench-professional"
    description = "OpenAI HealthBench Professional: clinician chat tasks, length-adjusted rubric score (LLM judge)"
    remote_files = (
        RemoteFile(
            url=PRO_REPOSITORY.url(f"data/assets/{DATA_FILE}"),
            filename=DATA_FILE,
            sha256=None,
        ),
    )
    judge_modes = JUDGE_MODES
    protocols = PROTOCOLS

    def iter_samples(self, root: Path) -> Iterator[Sample]:
        path = self.data_files(root)[0]
        seen = IdSet(path)
        for n, rec in iter_jsonl(path):
            sample = parse_task(rec, path, n, self.name)
            seen.add(sample.id, n, f"duplicate id {sample.id}")
            yield sample

    # Its aggregate reads the grades' length-adjusted details: the default summaries, not HealthBench's.
    summarize = Benchmark.summarize

    def aggregate_summaries(
        self, summaries: Sequence[Any], options: RunOptions, n_grades: int | None = None
    ) -> Aggregate:
        return Benchmark.aggregate_summaries(self, summaries, options)

    def grader_spec(self, options: RunOptions) -> Spec:
        mode = JUDGE_MODES[0] if options.judge_mode == "default" else options.judge_mode
        return Spec("healthbench-professional", {"mode": mode, "protocol": options.protocol})

    def aggregate(
        self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions
    ) -> Aggregate:
        """The length-adjusted clipped mean (headline), the unadjusted one, and the four breakdowns.

        Per example, the metrics in the reference's order (``overall_score``,
        ``overall_score_length_adjusted``, then the example's tags with its unadjusted score), so
        under ``reference`` the bootstrap draws the same resamples as ``_aggregate_get_clipped_mean``.
        """
        reference = options.protocol == "reference"
        by_id = {s.id: s for s in samples}
        per_example: list[dict[str, float]] = []
        adjusted_by_tag: dict[str, list[float]] = {}
        unscored_tags: Counter[str] = Counter()
        others: list[float] = []
        chars: list[int] = []
        known = total = unscored_unknown = 0
        n_unknown = sum(1 for g in grades for v in g.verdicts if v.status == "unknown")
        for g in grades:
            sample = by_id.get(g.sample_id)
            if sample is None:
                continue
            tags = list(sample.metadata.get("example_tags", ()))
            if isinstance(g.details.get("other_value_length_adjusted"), (int, float)):
                others.append(float(g.details["other_value_length_adjusted"]))
            if g.verdicts:
                known += sum(1 for v in g.verdicts if v.status in ("met", "unmet"))
                total += len(sample.rubric)
            if g.value is None:
                unscored_unknown += any(v.status == "unknown" for v in g.verdicts)
                unscored_tags.update(tags)
                continue
            overall = float(g.details["overall_score"])
            metrics = {"overall_score": overall, "overall_score_length_adjusted": g.value}
            metrics.update(dict.fromkeys(tags, overall))
            per_example.append(metrics)
            for tag in tags:
                adjusted_by_tag.setdefault(tag, []).append(g.value)
            chars.append(int(g.details.get("response_chars", 0)))
        stats = (
            reference_aggregate(per_example, seed=options.seed)
            if reference
            else aggregate_metrics(per_example, seed=options.seed)
        )
        head = stats.get("overall_score_length_adjusted")
        plain = stats.get("overall_score")
        center, penalty = length_settings()
        extra = {
            "overall_score": plain.score if plain else None,
            "overall_score_bootstrap_std": plain.std if plain else None,
            "bootstrap_std": head.std if head else None,
            "length_adjustment": {"center": center, "penalty_per_500_chars": penalty},
            "mean_response_chars": float(np.mean(chars)) if chars else None,
        } | judged_extra(options, known, total, n_unknown, unscored_unknown, others, OTHER_DIFFERS)
        return Aggregate(
            metric="overall_score_length_adjusted (clipped mean, 0-1)",
            score=head.score if head else None,
            ci95=head.ci95 if head else None,
            n=len(per_example),
            n_unscored=len(grades) - len(per_example),
            breakdown=_breakdown(stats, adjusted_by_tag, unscored_tags, options.seed),
            extra=extra,
        )


OTHER_DIFFERS = {
    "grandrounds": "the same judge replies read tolerantly, an example scored over the criteria with a verdict and its "
    "length counted without reasoning traces (the grandrounds protocol would also use its own prompt at temperature 0)",
    "reference": "the same judge replies read like simple-evals (strict JSON), an example scored only when every "
    "criterion has a verdict, its length counted on the reply as returned (the reference protocol would also use the "
    "official prompt and grader)",
}


def _breakdown(
    stats: Mapping[str, ClippedStat],
    adjusted: Mapping[str, Sequence[float]],
    unscored: Mapping[str, int],
    seed: int,
) -> dict[str, dict[str, Cell]]:
    """Per family (use case, type, difficulty, specialty): the length-adjusted clipped mean per value,
    with the reference's unadjusted tag metric beside it."""
    out: dict[str, dict[str, Cell]] = {f: {} for f in FAMILIES}
    for tag in sorted(set(adjusted) | set(unscored)):
        family, _, value = tag.partition(":")
        adj = clipped_stat(adjusted.get(tag, ()), seed=seed)
        plain = stats.get(tag)
        metrics: dict[str, float | None] = {}
        if adj is not None:
            metrics["bootstrap_std"] = adj.std
        if plain is not None:
            metrics["unadjusted"] = plain.score
            metrics["unadjusted_bootstrap_std"] = plain.std
        out.setdefault(family, {})[value] = Cell(
            score=adj.score if adj else None,
            n=adj.n if adj else 0,
            n_unscored=unscored.get(tag, 0),
            ci95=adj.ci95 if adj else None,
            metrics=metrics,
        )
    return {f: cells for f, cells in out.items() if cells}
