"""HealthBench (OpenAI): physician-written rubrics over health conversations, graded by an LLM judge.

Data: the original JSONL (``prompt_id``, ``prompt`` message list, ``rubrics`` [{criterion, points,
tags}], ``example_tags``, ``ideal_completions_data``, ``canary``), from openai/simple-evals @ ee3b031.
The conversation goes to the model as is (system and earlier assistant turns included); the judge
sees it with the model's answer appended. Arithmetic: :mod:`grandrounds.scoring.healthbench`.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

from grandrounds.benchmarks.base import Aggregate, Benchmark, Prompt, RemoteFile, RunOptions
from grandrounds.benchmarks.readers import read_jsonl
from grandrounds.errors import DataError
from grandrounds.graders.healthbench_grader import MODES
from grandrounds.registry import Spec
from grandrounds.records import Cell, Criterion, Grade, Message, Sample
from grandrounds.scoring.healthbench import ClippedStat, aggregate_metrics, known_example_metrics

BASE_URL = "https://openaipublic.blob.core.windows.net/simple-evals/healthbench/"
#: Tag families reported in the breakdown, in display order (example tags first).
FAMILIES = ("theme", "physician_agreed_category", "axis", "level", "cluster")


def _remote(filename: str, sha256: str | None) -> RemoteFile:
    return RemoteFile(url=BASE_URL + filename, filename=filename, sha256=sha256)


def _str_list(value: Any, path: Path, where: str, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise DataError(path, where, f"{field} must be a list of strings")
    return value


def parse_record(rec: Any, path: Path, line: int, benchmark: str) -> Sample:
    """One JSONL record -> Sample; DataError naming the line for anything malformed."""
    if not isinstance(rec, dict):
        raise DataError(path, line, "record is not a JSON object")
    pid = rec.get("prompt_id")
    if not isinstance(pid, str) or not pid:
        raise DataError(path, line, "missing prompt_id")
    prompt = rec.get("prompt")
    if not isinstance(prompt, list) or not prompt:
        raise DataError(path, line, f"{pid}: prompt must be a non-empty list of messages")
    messages = []
    for m in prompt:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
            raise DataError(path, line, f"{pid}: each prompt message needs string role and content")
        messages.append(Message(m["role"], m["content"]))
    rubrics = rec.get("rubrics")
    if not isinstance(rubrics, list) or not rubrics:
        raise DataError(path, line, f"{pid}: rubrics must be a non-empty list")
    rubric = []
    for i, r in enumerate(rubrics):
        pts = r.get("points") if isinstance(r, dict) else None
        if not isinstance(r, dict) or not isinstance(r.get("criterion"), str) or isinstance(pts, bool) or not isinstance(pts, (int, float)):
            raise DataError(path, line, f"{pid}: rubric item {i} needs a string criterion and numeric points")
        rubric.append(Criterion(str(i), r["criterion"], pts, tuple(_str_list(r.get("tags", []), path, line, f"{pid}: rubric item {i} tags"))))
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
    return Sample(pid, benchmark, tuple(messages), rubric=tuple(rubric), metadata=meta)


class HealthBench(Benchmark):
    """HealthBench main (5,000 conversations)."""

    name = "healthbench"
    description = "OpenAI HealthBench: rubric-graded health conversations (LLM judge)"
    language = "en"
    remote_files = (
        _remote("2025-05-07-06-14-12_oss_eval.jsonl", "e99dd3c6372c10d6fcc5e385c5fae69d0dd40392dae56836ef9493ae324ecd2f"),
    )
    needs_judge = True
    judge_modes = MODES

    def load(self, root: Path) -> list[Sample]:
        path = self.data_files(root)[0]
        samples: list[Sample] = []
        seen: set[str] = set()
        for n, rec in read_jsonl(path):
            sample = parse_record(rec, path, n, self.name)
            if sample.id in seen:
                raise DataError(path, n, f"duplicate prompt_id {sample.id}")
            seen.add(sample.id)
            samples.append(sample)
        if not samples:
            raise DataError(path, None, "no records")
        return samples

    def prompt(self, sample: Sample, options: RunOptions, history: Sequence[tuple[Sample, str]] = ()) -> Prompt:
        return Prompt(sample.messages)

    def grader_spec(self, options: RunOptions) -> Spec:
        mode = "per-criterion" if options.judge_mode == "default" else options.judge_mode
        return Spec("healthbench", {"mode": mode})

    def aggregate(self, samples: Sequence[Sample], grades: Sequence[Grade], options: RunOptions) -> Aggregate:
        """Clipped mean over scored examples with seeded bootstrap; per-tag metrics like the reference."""
        by_id = {s.id: s for s in samples}
        per_example = []
        known = total = 0
        n_unknown = sum(1 for g in grades for v in g.verdicts if v.status == "unknown")
        unscored_tags: Counter[str] = Counter()
        for g in grades:
            sample = by_id.get(g.sample_id)
            if sample is None:
                continue
            ks = None if g.value is None else known_example_metrics(sample.rubric, g.verdicts, sample.metadata.get("example_tags", ()))
            if ks is None or ks.overall is None:
                unscored_tags.update(_tags(sample))
                continue
            per_example.append(ks.metrics)
            known, total = known + ks.known, total + ks.total
        stats = aggregate_metrics(per_example, seed=options.seed)
        overall = stats.pop("overall_score", None)
        breakdown = _tag_breakdown(stats, unscored_tags)
        extra = {
            "coverage": known / total if total else None,
            "n_unknown_verdicts": n_unknown,
            "bootstrap_std": overall.std if overall else None,
            "judge_mode": options.judge_mode,
        }
        return Aggregate(
            metric="overall_score (clipped mean, 0-1)",
            score=overall.score if overall else None,
            ci95=overall.ci95 if overall else None,
            n=len(per_example),
            n_unscored=len(grades) - len(per_example),
            breakdown=breakdown,
            extra=extra,
        )


def _tags(sample: Sample) -> set[str]:
    """Every tag an example carries: its example tags and the tags of its rubric items."""
    return set(sample.metadata.get("example_tags", ())) | {t for c in sample.rubric for t in c.tags}


def _tag_breakdown(stats: Mapping[str, ClippedStat], unscored: Mapping[str, int]) -> dict[str, dict[str, Cell]]:
    """``family:value`` tag metrics as families of cells: :data:`FAMILIES` first, empty ones left out.

    A cell's score is the reference's clipped mean with its bootstrap CI (``bootstrap_std`` in
    metrics); ``n_unscored`` counts the unscored examples that carry the tag.
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
