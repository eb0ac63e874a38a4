"""A grading's aggregate: what it keeps of each sample until it aggregates (:class:`Collected`), the
Result it makes (:func:`make_result`) with the bounds unscored answers put on the headline
(:func:`headline_bounds`) and the fingerprint of what the result was made from
(:func:`result_fingerprint`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from grandrounds.benchmarks.base import Benchmark, RunOptions
from grandrounds.core.records import Grade, Result, Sample, judge_call_failed, needs_redo
from grandrounds.graders.flags import flag_outcome
from grandrounds.run.costs import judge_of
from grandrounds.store import RunRecord, Store
from grandrounds.store.rows import CallUsage


class Collected:
    """What a grading keeps of each sample until it aggregates: the benchmark's summary of it
    (:meth:`Benchmark.summarize`, small) and counts beside the headline. The calls behind the
    result are counted by the store (the answers a run links, the judge calls each grade names)."""

    def __init__(
        self,
        store: Store,
        run_id: str,
        bench: Benchmark,
        options: RunOptions,
        judges: Sequence[str],
    ) -> None:
        self.store, self.run_id, self.bench, self.options, self.judges = (
            store,
            run_id,
            bench,
            options,
            list(judges),
        )
        self.summaries: dict[int, Any] = {}
        self.status: Counter[str] = Counter()
        self.judge_failed = 0
        self.truncated_votes = 0
        self.redo = 0  # grades a re-run would do again
        self.flagged = 0  # answers that address the grader (graders.flags)
        self.flag_outcomes: Counter[str] = Counter()  # what --flagged made of them
        self.values: dict[int, float | None] = {}  # each sample's value, for the headline's bounds

    def add(self, position: int, sample: Sample, grade: Grade) -> None:
        self.summaries[position] = self.bench.summarize(sample, grade, self.options)
        self.status[grade.status] += 1
        self.flagged += bool(grade.details.get("flags"))
        if (outcome := flag_outcome(grade)) is not None:
            self.flag_outcomes[outcome] += 1
        self.values[position] = grade.value if grade.status == "scored" else None
        self.redo += needs_redo(grade)
        self.judge_failed += judge_call_failed(grade)
        self.truncated_votes += sum(
            1
            for v in (*grade.votes, *(v for verdict in grade.verdicts for v in verdict.votes))
            if v.truncated
        )

    def aggregate(self) -> Any:
        return self.bench.aggregate_summaries(
            [self.summaries[i] for i in sorted(self.summaries)], self.options
        )

    def counts(self) -> dict[str, Any]:
        """Truncated replies, then what kept answers from a score, beside every headline: answers
        whose call failed (or turns never asked), answers that could not be read (no option
        extracted, no log-probabilities), grader errors, and answers with a failed judge call
        (re-running the command retries them)."""
        return {
            "n_truncated": self.store.truncated_answers(self.run_id),
            "n_truncated_judge": self.truncated_votes,
            "n_items": sum(self.status.values()),
            "n_answer_failed": self.status["answer_failed"] + self.status["not_asked"],
            "n_unreadable": self.status["unreadable"],
            "n_grader_error": self.status["grader_error"],
            "n_judge_failed": self.judge_failed,
            "n_flagged": self.flagged,
            "flag_outcomes": dict(sorted(self.flag_outcomes.items())),
        }

    def tally(self) -> dict[str, Any]:
        """What the grades hold, stored when the grading settles
        (:func:`~grandrounds.run.runner.settled_result`): how many, how many a re-run would redo,
        how many by status."""
        return {"n": sum(self.status.values()), "redo": self.redo, "status": dict(self.status)}

    def usage(self, run_id: str, grader_fp: str) -> tuple[CallUsage, list[CallUsage]]:
        """(the run's answer calls, the grading's judge calls by judge) as the store counts them;
        calls no vote names go to the only judge, or to ``unattributed`` on a panel."""
        by_judge: dict[str, CallUsage] = {}
        for u in self.store.judge_usage(run_id, grader_fp):
            who = judge_of(u.who, self.judges)
            was = by_judge.get(who)
            by_judge[who] = (
                u
                if was is None
                else CallUsage(
                    who=who,
                    calls=was.calls + u.calls,
                    prompt_tokens=was.prompt_tokens + u.prompt_tokens,
                    completion_tokens=was.completion_tokens + u.completion_tokens,
                    no_usage=was.no_usage + u.no_usage,
                )
            )
        answers = (
            self.store.episode_usage(run_id) if self.bench.episodic else None
        )  # every step of every episode
        return answers or self.store.answer_usage(run_id), [
            replace(u, who=w) for w, u in by_judge.items()
        ]


def make_result(
    bench: Benchmark,
    options: RunOptions,
    collected: Collected,
    run_rec: RunRecord,
    grader_fp: Mapping[str, Any],
    judges: Sequence[str],
) -> Result:
    """The Result of one grading: the benchmark's aggregate plus the full fingerprint.

    Truncated replies (cut off by the token limit) are counted beside every headline:
    ``n_truncated`` answers and ``n_truncated_judge`` judge votes.
    """
    agg = collected.aggregate()
    extra = dict(agg.extra) | collected.counts()
    bounds = headline_bounds(agg.score, agg.metric, agg.n, agg.n_unscored, collected.values)
    if bounds is not None:
        extra["bounds"] = bounds
    served = collected.store.system_fingerprints(collected.run_id)
    if served:  # what the server said answered the run's calls (system_fingerprint, model version): value -> calls
        extra["system_fingerprints"] = served
    if judges:  # the judge sees the answer between markers (ours), or unmarked as the official prompt shows it
        extra["answer_markers"] = grader_fp.get("templates", {}).get("answer_markers", "off")
    return Result(
        benchmark=bench.name,
        model=run_rec.model,
        judge=",".join(judges) or None,
        metric=agg.metric,
        score=agg.score,
        ci95=agg.ci95,
        n=agg.n,
        n_unscored=agg.n_unscored,
        breakdown=agg.breakdown,
        fingerprint=result_fingerprint(bench, options, run_rec, grader_fp),
        extra=extra,
    )


def headline_bounds(
    score: float | None,
    metric: str,
    n: int,
    n_unscored: int,
    values: Mapping[int, float | None],
) -> dict[str, Any] | None:
    """How far the unscored answers could move the headline: the score with every unscored answer
    wrong (0) and with every one right (the scale's top: 100 for a 0-100 metric, else 1), over
    scored and unscored answers together; the leaderboard can rank by the lower bound.

    Given only where the headline is the mean of the per-answer values (clipped to the scale, as
    HealthBench clips it) over the same answers; None where nothing is unscored, or the headline
    is another statistic (an F1, a mean per dialogue)."""
    known = [v for v in values.values() if v is not None]
    unscored = len(values) - len(known)
    if score is None or not n_unscored or not known or len(known) != n or unscored != n_unscored:
        return None
    top = 100.0 if "0-100" in metric else 1.0

    def clip(x: float) -> float:
        return min(top, max(0.0, x))

    total = sum(known)
    if abs(clip(total / len(known)) - score) > 1e-9 * max(1.0, top):
        return None
    everyone = len(known) + unscored
    return {
        "lower": clip(total / everyone),
        "upper": clip((total + unscored * top) / everyone),
        "n_unscored": unscored,
        "meaning": "every unscored answer wrong / every one right",
    }


def result_fingerprint(
    bench: Benchmark, options: RunOptions, run_rec: RunRecord, grader_fp: Mapping[str, Any]
) -> dict[str, Any]:
    """What a result was made from: the grading's fingerprint, the model, its generation and
    answer settings, the templates, the seed and the package version."""
    return (
        dict(grader_fp)
        | {
            "model": run_rec.model,
            "gen_params": run_rec.gen_params,
            "prompt_templates": bench.template_hashes(options),
            "answer_mode": options.answer_mode,
            "shuffle_options": options.shuffle_options,
            "seed": options.seed,
            "package_version": run_rec.package_version,
            "run_id": run_rec.id,
            "limit": run_rec.options.get("limit"),
        }
        | {
            k: run_rec.options[k]
            for k in ("engine", "encoding", "simulator")
            if run_rec.options.get(k)
        }
    )  # vLLM/SGLang name and version; --encoding, --simulator when given
