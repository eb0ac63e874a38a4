"""``grandrounds run --dry-run``: the calls a run would make, their tokens and cost, with no call made.

The run is prepared exactly as :func:`grandrounds.run.runner.run` prepares it (``check_run``,
``prepare`` without recording the run), then walked sample by sample the way the runner walks it,
with stand-ins where the runner has its executors:

- **answers**: each request is built by the runner's own code (``runner._ask``) and looked up in
  the store's call cache by its key, so the count of answer calls to make is exact. Turns of a
  conversation after an answer not yet stored cannot be built (they include that answer): they are
  built with empty earlier answers and counted once per distinct request (planned).
- **judge calls, answer stored**: the grader grades the stored answer with judges that answer from
  the store and record every request the store does not hold, so these counts are exact for the
  first asks (a reply that cannot be read is re-asked in the run; how often depends on the reply).
  A grade already stored and complete needs no call, as in the run.
- **judge calls, answer not yet stored**: planned. The grader grades a placeholder answer, one
  per answer request, with judges that only record; when it asks as many calls as its plan says
  (:meth:`~grandrounds.graders.base.Grader.planned_judge_calls`), the distinct requests are
  counted (a rubric that lists an item twice gets one call for it in the run, as here), else the
  plan's number. Their prompts are measured so, plus the answer's expected length.

Tokens: prompts are counted with a real tokenizer where one applies, else estimated (the label
says which, see :func:`grandrounds.run.costs.token_counter`). Output tokens are the mean of the
stored calls of the same line where there are some (say, from a ``--limit 20`` pilot run),
otherwise at most ``max_tokens`` per call, and the cost is then an upper bound.

With ``--tpm`` / ``--judge-tpm`` the plan also gives the least time the run can take under them:
per model at an endpoint (vendors limit each model apart), the estimated tokens of the calls it
will receive (prompt and output) over the limit in force there (the lower of the two where the
judge is the candidate's own model at the same endpoint), the slowest deciding; under separate
input and output limits, prompt tokens over the one and output tokens over the other, the slower
deciding. It says when a single request is larger than its limit (the run refuses such a request
without sending it).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grandrounds.core import eventloop
from grandrounds.core.hashing import content_hash
from grandrounds.core.records import Request, Response, Sample, needs_redo
from grandrounds.graders.base import GradeContext, Grader
from grandrounds.providers.base import Provider, split_endpoint, without_credentials
from grandrounds.run.config import RunConfig, check_run, make_provider
from grandrounds.run.costs import PriceTable, TokenCounter, fmt_usd, load_prices, token_counter
from grandrounds.run.limits import (
    KIND_WORDS,
    EndpointLimits,
    TokenRate,
    counted_by_kind,
    limit_text,
    request_tokens,
)
from grandrounds.run.pipeline import RunJudge
from grandrounds.run.prepare import Setup, prepare
from grandrounds.run.runner import _ask
from grandrounds.store import RunRecord, Store

NOT_ASKED = "dry run: not asked"


@dataclass(kw_only=True)
class Line:
    """The calls of one executor of the run: the answers, or one judge."""

    role: str
    model: str
    #: Calls the run needs that the store already holds (not made again).
    stored: int = 0
    #: Calls to make, counted from requests built exactly as the run builds them.
    exact: int = 0
    #: Calls to make, counted from the grader's plan (the answer they judge is not known yet).
    planned: int = 0
    #: Samples whose judge calls the grader cannot count.
    unknown: int = 0
    #: Prompt tokens of the calls to make.
    prompt_tokens: int = 0
    #: The most output tokens the calls to make may produce (their max_tokens).
    output_bound: int = 0
    #: Completion tokens of the stored calls, for the expected output length.
    observed: list[int] = field(default_factory=list)
    #: Planned calls whose prompt is measured without the answer (its tokens are added at the end).
    awaiting_answer: int = 0
    #: The run sends this line's calls through the provider's batch API (``--batch``): batch prices.
    batch: bool = False
    #: The endpoint the calls go to.
    endpoint: str = ""
    #: The model at its endpoint, which a token rate counts against (``Provider.rate_key``).
    rate_key: str = ""
    #: The largest request to make, in estimated tokens (prompt + max_tokens), as a token rate reserves it.
    largest: int = 0
    #: The largest prompt and the largest max_tokens of the requests to make (separate input and output limits).
    largest_prompt: int = 0
    largest_output: int = 0

    @property
    def to_make(self) -> int:
        return self.exact + self.planned

    @property
    def output_observed(self) -> bool:
        return bool(self.observed)

    @property
    def output_tokens(self) -> int:
        """Expected output tokens of the calls to make: the stored calls' mean, else the bound."""
        if self.observed:
            return round(sum(self.observed) / len(self.observed) * self.to_make)
        return self.output_bound

    def counted(self) -> str:
        parts = [f"{self.exact:,} exact"] if self.exact else []
        if self.planned:
            parts.append(f"{self.planned:,} planned")
        if self.unknown:
            parts.append(f"{self.unknown:,} samples unknown")
        return ", ".join(parts) or "-"


@dataclass(kw_only=True)
class Plan:
    benchmark: str
    model: str
    run_id: str
    n_samples: int
    #: Samples whose complete grade is stored (no call at all).
    n_graded: int
    lines: list[Line]
    counters: dict[str, TokenCounter]
    prices: PriceTable
    max_reask: int
    notes: list[str] = field(default_factory=list)
    #: Token rates of the run, per model at an endpoint (``Provider.rate_key``), as the run sets them.
    tpm: dict[str, TokenRate] = field(default_factory=dict)
    #: The candidate calls an agent episode may make, of which the plan counts the first (1 else).
    episode_steps: int = 1
    #: An agent benchmark's simulated patient (``--simulator``), "" for none.
    simulator: str = ""

    @property
    def to_make(self) -> int:
        return sum(line.to_make for line in self.lines)

    def cost(self, line: Line) -> float | None:
        price = self.prices.price(line.model)
        return (
            None
            if price is None
            else price.cost(line.prompt_tokens, line.output_tokens, line.batch)
        )

    def cost_text(self, line: Line) -> str:
        cost = self.cost(line)
        if cost is None:
            return "local" if self.prices.is_local(line.model) else "no price"
        bound = "" if line.output_observed or not line.to_make else "≤ "
        return bound + fmt_usd(cost)

    def total_cost(self) -> tuple[float | None, bool, bool]:
        """(cost of the priced lines, every line with calls priced, an upper bound)."""
        costs = [(self.cost(line), line) for line in self.lines if line.to_make]
        priced = [c for c, _ in costs if c is not None]
        bound = any(not line.output_observed for c, line in costs if c is not None)
        return (sum(priced) if priced else None), all(c is not None for c, _ in costs), bound

    def tpm_times(self) -> list[tuple[str, str, int, str, int, float]]:
        """Per model at an endpoint with a token rate, per limit there (prompt + output, input,
        output): (rate key, kind, limit, flag, estimated tokens it counts, least minutes)."""
        out = []
        for key, rate in self.tpm.items():
            lines = [line for line in self.lines if line.rate_key == key]
            counted = counted_by_kind(
                sum(line.prompt_tokens for line in lines), sum(line.output_tokens for line in lines)
            )
            for kind, (limit, flag) in rate.limits.items():
                out.append((key, kind, limit, flag, counted[kind], counted[kind] / limit))
        return out

    def least_minutes(self) -> float | None:
        """The least time the run can take under its token rates, in minutes (None: no token rate).

        Endpoints are asked at the same time, so the slowest decides."""
        times = self.tpm_times()
        return max(t[5] for t in times) if times else None

    def _endpoint_of(self, rate_key: str) -> str:
        return next(line.endpoint for line in self.lines if line.rate_key == rate_key)

    def as_json(self) -> dict[str, Any]:
        total, complete, bound = self.total_cost()
        return {
            "benchmark": self.benchmark,
            "model": self.model,
            "run_id": self.run_id,
            "n_samples": self.n_samples,
            "n_graded_stored": self.n_graded,
            "calls_to_make": self.to_make,
            "lines": [
                {
                    "role": line.role,
                    "model": line.model,
                    "stored": line.stored,
                    "to_make": line.to_make,
                    "exact": line.exact,
                    "planned": line.planned,
                    "unknown_samples": line.unknown,
                    "prompt_tokens": line.prompt_tokens,
                    "output_tokens": line.output_tokens,
                    "output_tokens_from": "observed" if line.output_observed else "max_tokens",
                    "tokens_counted_by": self.counters[line.model].label,
                    "cost_usd": self.cost(line),
                    "batch": line.batch,
                }
                for line in self.lines
            ],
            "cost_usd": total,
            "cost_complete": complete,
            "cost_is_upper_bound": bound,
            "prices": self.prices.describe(),
            "notes": self.notes,
            "tpm": [
                {
                    "endpoint": self._endpoint_of(key),
                    "limits": key,
                    "counts": k,
                    "limit": n,
                    "flag": f,
                    "tokens": t,
                    "least_minutes": m,
                }
                for key, k, n, f, t, m in self.tpm_times()
            ],
            "least_minutes_under_tpm": self.least_minutes(),
        }


class _DryExecutor:
    """Stands where the run's executor stands. ``count``: a request the store holds is returned from
    it (the grader goes on as in the run), any other is counted once and answered "not asked".
    Otherwise (``count`` False, a probe with placeholder answers) requests are only measured:
    ``calls`` asked, ``new`` distinct ones (a request asked twice is made once in the run), and
    the prompt tokens and max tokens of the distinct ones."""

    def __init__(
        self,
        store: Store | None,
        provider: Provider,
        line: Line,
        counter: TokenCounter,
        count: bool,
        seen: set[str],
    ) -> None:
        self.store, self.provider, self.line, self.counter, self.count = (
            store,
            provider,
            line,
            counter,
            count,
        )
        self.seen = seen
        self.calls = 0
        self.new = 0
        self.prompt_tokens = 0
        self.output_bound = 0

    def measure(self, req: Request) -> tuple[int, int]:
        """(prompt tokens, most output tokens) of one request, as the provider sends it (as a token rate counts it)."""
        prompt, most = request_tokens(self.counter, req)
        self.line.largest = max(self.line.largest, prompt + most)
        self.line.largest_prompt = max(self.line.largest_prompt, prompt)
        self.line.largest_output = max(self.line.largest_output, most)
        return prompt, most

    async def __call__(self, req: Request) -> Response:
        key = req.key()
        if not self.count:
            self.calls += 1
            if key not in self.seen:
                self.seen.add(key)
                prompt, most = self.measure(req)
                self.new += 1
                self.prompt_tokens += prompt
                self.output_bound += most
            return Response(key=key, error=NOT_ASKED)
        stored = self.store.get_call(key) if self.store is not None else None
        first = key not in self.seen
        self.seen.add(key)
        if stored is not None:
            if first:
                self.line.stored += 1
                self.line.observed.append(stored.usage.completion_tokens)
            return stored
        if first:
            prompt, most = self.measure(req)
            self.line.exact += 1
            self.line.prompt_tokens += prompt
            self.line.output_bound += most
        return Response(key=key, error=NOT_ASKED)


class _NoWrites:
    """The store as ``prepare`` sees it in a dry run: the run is never recorded."""

    def ensure_run(self, run: RunRecord) -> RunRecord:
        return run

    def checked_data(self, key: str) -> int | None:
        return None  # a dry run checks every record it counts

    def put_checked_data(self, key: str, n_samples: int) -> None:
        pass


def plan(store: Store | None, cfg: RunConfig, prices: PriceTable | None = None) -> Plan:
    """What running ``cfg`` against ``store`` (None: an empty store) would ask, with no call made."""
    return eventloop.run(_plan(store, cfg, prices or load_prices()))


async def _plan(store: Store | None, cfg: RunConfig, prices: PriceTable) -> Plan:
    cfg = check_run(cfg)
    with without_credentials():  # nothing is sent: a preview needs no API key
        s = prepare(_NoWrites(), cfg)  # type: ignore[arg-type]  # prepare only records the run
        judge_providers = [make_provider(j.spec, j.base_url, **j.options) for j in cfg.judges]
    try:
        return await _walk(store, cfg, s, judge_providers, prices)
    finally:
        await s.provider.aclose()
        for p in judge_providers:
            await p.aclose()


async def _walk(
    store: Store | None,
    cfg: RunConfig,
    s: Setup,
    judge_providers: Sequence[Provider],
    prices: PriceTable,
) -> Plan:
    model = split_endpoint(cfg.model)[0]
    counters = {model: token_counter(model)}
    batch = getattr(cfg, "batch", None)
    answers = Line(
        role="answers",
        model=model,
        batch=bool(batch and batch.covers("answers")),
        endpoint=s.provider.endpoint,
        rate_key=s.provider.rate_key,
    )
    lines = [answers]
    seen: set[str] = set()
    probed: set[str] = set()  # requests built around placeholder answers: never equal to real ones
    exact_answers = _DryExecutor(store, s.provider, answers, counters[model], True, seen)
    probe_answers = _DryExecutor(None, s.provider, answers, counters[model], False, probed)
    exact_judges, probe_judges = _dry_judges(
        store, cfg, judge_providers, counters, lines, seen, probed
    )
    exact_ctx = GradeContext(judges=tuple(exact_judges), max_reask=cfg.options.max_reask)
    probe_ctx = GradeContext(judges=tuple(probe_judges), max_reask=0)
    grades = _stored_grades(store, s)
    notes: list[str] = []
    judged = s.grader.judged and bool(cfg.judges)
    n_graded = 0
    later_turns = 0

    for group in s.groups():
        history: list[tuple[Sample, str]] = []
        known = True  # every earlier turn's answer is stored, so this turn's request can be built
        for turn, (_, sample) in enumerate(group):
            if known:
                resp, _ = await _ask(s, cfg, exact_answers, sample, history)
                answer_id = resp.key
                if resp.ok:
                    history.append((sample, resp.text or ""))
                    if sample.id in grades:
                        n_graded += 1
                    elif judged:
                        await _grade(s.grader, sample, resp, exact_ctx, notes)
                    continue
                known = False
            else:  # the request includes earlier answers not yet known: measured with empty ones
                later_turns += 1
                before, earlier = probe_answers.new, [smp for _, smp in group[:turn]]
                resp, _ = await _ask(s, cfg, probe_answers, sample, [(h, "") for h in earlier])
                answer_id = resp.key
                if probe_answers.new > before:
                    answers.planned += 1
                    answers.awaiting_answer += len(
                        earlier
                    )  # earlier answers, added once their length is estimated
            if judged:
                await _plan_judges(
                    s.grader, sample, answer_id, lines[1:], probe_judges, probe_ctx, notes
                )
    answers.prompt_tokens += probe_answers.prompt_tokens
    answers.output_bound += probe_answers.output_bound
    _add_answer_lengths(lines, probe_judges)
    if later_turns:
        notes.append(
            f"{later_turns} later turns of conversations follow an answer not yet stored: planned, their prompts "
            "measured without the earlier answers' text and that text's expected length added"
        )
    notes = _fold_sample_notes(notes)
    _common_notes(s, cfg, lines, notes)
    tpm = _token_rates(cfg, lines)
    _over_tpm_notes(lines, tpm, notes)
    return Plan(
        benchmark=s.bench.name,
        model=model,
        run_id=s.run.id,
        n_samples=s.n,
        n_graded=n_graded,
        lines=lines,
        counters=counters,
        prices=prices,
        max_reask=cfg.options.max_reask,
        notes=notes,
        tpm=tpm,
        episode_steps=int(s.bench.param("max_steps")) if s.bench.episodic else 1,
        simulator=cfg.simulator if s.bench.episodic else "",
    )


def _dry_judges(
    store: Store | None,
    cfg: RunConfig,
    judge_providers: Sequence[Provider],
    counters: dict[str, TokenCounter],
    lines: list[Line],
    seen: set[str],
    probed: set[str],
) -> tuple[list[RunJudge[_DryExecutor]], list[RunJudge[_DryExecutor]]]:
    """A line per judge (appended to ``lines``) and two stand-ins for each judge of the run: one that
    answers from the store and counts the rest (``seen``), one that measures the requests made
    around placeholder answers (``probed``)."""
    batch = getattr(cfg, "batch", None)
    exact_judges, probe_judges = [], []
    for j, provider in zip(cfg.judges, judge_providers):
        counters.setdefault(j.spec, token_counter(j.spec))
        line = Line(
            role="judge",
            model=j.spec,
            batch=bool(batch and batch.covers("judges")),
            endpoint=provider.endpoint,
            rate_key=provider.rate_key,
        )
        lines.append(line)
        exact_judges.append(
            RunJudge(_DryExecutor(store, provider, line, counters[j.spec], True, seen), j)
        )
        probe_judges.append(
            RunJudge(_DryExecutor(None, provider, line, counters[j.spec], False, probed), j)
        )
    return exact_judges, probe_judges


def _fold_sample_notes(notes: list[str]) -> list[str]:
    """``notes`` with those about single samples cut to the first three and a count of the rest."""
    per_sample = [n for n in notes if n.startswith("sample ")]
    if len(per_sample) > 3:  # a grader failing on every sample: say so once, not per sample
        notes = (
            [n for n in notes if not n.startswith("sample ")]
            + per_sample[:3]
            + [f"... and {len(per_sample) - 3} more samples like these"]
        )
    return notes


def _over_tpm_notes(lines: Sequence[Line], tpm: dict[str, TokenRate], notes: list[str]) -> None:
    """A note for each line whose largest request is over a token limit in force on it (the run
    refuses such a request without sending it)."""
    for line in lines:
        if line.rate_key not in tpm:
            continue
        what = "answer" if line.role == "answers" else "judge"
        for kind, (limit, flag) in tpm[line.rate_key].limits.items():
            largest, counted = {
                "total": (line.largest, "tokens (prompt + max_tokens)"),
                "input": (line.largest_prompt, "prompt tokens"),
                "output": (line.largest_output, "max_tokens"),
            }[kind]
            if largest > limit:
                notes.append(
                    f"the largest {what} request of {line.model}, about {largest:,} {counted}, is over "
                    f"{limit_text(kind, limit, flag)}: the run refuses such requests without sending them"
                )


def _token_rates(cfg: RunConfig, lines: Sequence[Line]) -> dict[str, TokenRate]:
    """The token rates in force per model at an endpoint, as the run sets them: ``--tpm`` on the
    candidate's, ``--judge-tpm`` on each judge's, the lower of each kind where a judge is the
    candidate's own model at the same endpoint."""
    limits = EndpointLimits()
    for line in lines:
        if line.role == "answers":
            limits.limit_tokens(line.rate_key, cfg.tpm, "--tpm")
        else:
            limits.limit_tokens(line.rate_key, cfg.judge_tpm, "--judge-tpm")
    return {
        line.rate_key: rate for line in lines if (rate := limits.tokens(line.rate_key)) is not None
    }


def fmt_minutes(minutes: float) -> str:
    """``2 h 05 min``, ``12 min 30 s``, ``45 s``."""
    seconds = round(minutes * 60)
    h, rest = divmod(seconds, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h:,} h {m:02d} min"
    return f"{m} min {sec:02d} s" if m else f"{sec} s"


def _stored_grades(store: Store | None, s: Setup) -> set[str]:
    """Samples whose stored grade the run keeps (complete: no failed call or grader error to redo)."""
    if store is None or store.get_run(s.run.id) is None:
        return set()
    fp_key = content_hash(s.fingerprint)
    return {sid for sid, g in store.grades(s.run.id, fp_key).items() if not needs_redo(g)}


async def _grade(
    grader: Grader, sample: Sample, resp: Response, ctx: GradeContext, notes: list[str]
) -> None:
    try:
        await grader.grade(sample, resp, ctx)
    except Exception as e:  # the run would store a grader_error grade for it: no further judge call
        notes.append(
            f"sample {sample.id}: the grader fails on its stored answer ({type(e).__name__}: {e})"
        )


async def _plan_judges(
    grader: Grader,
    sample: Sample,
    answer_id: str,
    lines: Sequence[Line],
    probes: Sequence[RunJudge[_DryExecutor]],
    ctx: GradeContext,
    notes: list[str],
) -> None:
    """Count the judge calls of an answer not yet known and measure their prompts.

    The grader grades a placeholder answer, one per answer request (the run gets one answer per
    request: samples that send the same request share it), with judges that only record. Where it
    asks as many calls as its plan says (:meth:`Grader.planned_judge_calls`), the distinct ones
    are counted (the run makes a repeated judge request once); otherwise the plan counts.
    """
    planned = grader.planned_judge_calls(sample, len(lines))
    before = [(p.executor.calls, p.executor.new) for p in probes]
    try:
        await grader.grade(sample, Response(key="dry-run", text=f"(answer {answer_id[:16]})"), ctx)
    except Exception as e:
        notes.append(
            f"sample {sample.id}: its judge prompts could not be measured ({type(e).__name__}: {e})"
        )
    asked = [p.executor.calls - b[0] for p, b in zip(probes, before)]
    made = [p.executor.new - b[1] for p, b in zip(probes, before)]
    if planned is None:
        for line in lines:
            line.unknown += 1
        return
    if (
        sum(asked) != planned
    ):  # the plan and the measured prompts disagree: the plan counts, split evenly
        made = [
            planned // len(lines) + (1 if i < planned % len(lines) else 0)
            for i in range(len(lines))
        ]
    for line, n in zip(lines, made):
        line.planned += n
        line.awaiting_answer += n


def _add_answer_lengths(lines: Sequence[Line], probes: Sequence[RunJudge[_DryExecutor]]) -> None:
    """Judge prompts measured without the answer get the answer's expected length; the probes'
    prompt and output measures are scaled to the planned calls."""
    answers = lines[0]
    per_answer = (
        (sum(answers.observed) / len(answers.observed))
        if answers.observed
        else (answers.output_bound / answers.to_make if answers.to_make else 0)
    )
    for line, probe in zip(lines[1:], probes):
        ex = probe.executor
        if line.planned and ex.new:
            line.prompt_tokens += round(ex.prompt_tokens / ex.new * line.planned)
            line.output_bound += round(ex.output_bound / ex.new * line.planned)
    for line in lines:
        line.prompt_tokens += round(per_answer * line.awaiting_answer)


def _common_notes(s: Setup, cfg: RunConfig, lines: Sequence[Line], notes: list[str]) -> None:
    notes.extend(s.notes)
    if s.bench.episodic:
        steps, epochs = int(s.bench.param("max_steps")), int(s.bench.param("epochs"))
        sim = " and as many simulator calls (--simulator)" if s.bench.needs_simulator else ""
        notes.insert(
            0,
            f"agent benchmark: each sample is {epochs} episode(s) of up to {steps} candidate calls{sim}, at most "
            f"{s.n * steps * epochs:,} candidate calls in all; only each episode's first call is counted above "
            "(later steps depend on the replies)",
        )
    if any(line.planned for line in lines[1:]):
        notes.insert(
            0,
            "judge calls of answers not yet stored are planned from the grader (first asks); "
            "their prompts include the answer's expected length",
        )
    if s.grader.judged and cfg.judges:
        notes.append(
            f"not counted: re-asks of judge replies that cannot be read (at most {cfg.options.max_reask} per ask, "
            "--max-reask), and calls that depend on a reply"
            + (" (GAPS passage grading)" if getattr(s.grader.params, "irrelevant", None) else "")
        )
    notes.append("a call is one request; retries of failed requests are not counted")


# ---- printing -------------------------------------------------------------------------------------


def render(p: Plan, console: Any) -> None:
    """Print the plan: a block per executor (answers, each judge), the total, then how each figure was had."""

    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False, soft_wrap=False)

    say(
        f"dry run, no call made: {p.benchmark} · {p.model} · {p.n_samples:,} samples · run {p.run_id}"
    )
    for line in p.lines:
        out = (
            f"{line.output_tokens:,}"
            if line.output_observed or not line.to_make
            else f"≤ {line.output_tokens:,}"
        )
        say(
            f"{'answers' if line.role == 'answers' else 'judge'} {line.model}: {line.to_make:,} calls to make "
            f"({line.counted()}), {line.stored:,} in the store"
        )
        say(
            f"  prompt tokens {line.prompt_tokens:,} · output tokens {out} · cost {p.cost_text(line)}"
        )
    total, complete, bound = p.total_cost()
    judges = sum(line.to_make for line in p.lines[1:])
    cost = (
        "n/a"
        if total is None
        else ("≤ " if bound else "")
        + fmt_usd(total)
        + ("" if complete else " (priced models only)")
    )
    say(
        f"calls to make: {p.to_make} (answers {p.lines[0].to_make}, judges {judges}); "
        f"in the store: {sum(line.stored for line in p.lines)}; cost: {cost}"
    )
    if p.n_graded:
        say(f"{p.n_graded:,} of {p.n_samples:,} samples are graded in the store already (no call)")
    least = p.least_minutes()
    if least is not None:
        times = p.tpm_times()
        parts = [
            f"{tokens:,} estimated {KIND_WORDS[kind]} at {limit_text(kind, limit, flag)}"
            + (f" on {key}: {fmt_minutes(m)}" if len(times) > 1 else "")
            for key, kind, limit, flag, tokens, m in times
        ]
        if any(
            not line.output_observed for line in p.lines if line.to_make and line.rate_key in p.tpm
        ):
            parts.append("output counted at max_tokens: a pilot run gives a closer figure")
        say(f"least time under the token rate: {fmt_minutes(least)} ({'; '.join(parts)})")
    for model, counter in p.counters.items():
        say(f"tokens of {model}: {counter.label}")
    out_lines = [line for line in p.lines if line.to_make]
    if any(not line.output_observed for line in out_lines):
        say(
            "output tokens: at most max_tokens per call for lines with no call stored yet, so costs are upper bounds; "
            "after a pilot run (--limit 20) the stored calls' mean length is used"
        )
    for line in out_lines:
        price = p.prices.price(line.model)
        if price is not None:
            batch = (
                f", through the batch API at {1 - price.batch_discount:g}x" if line.batch else ""
            )
            say(
                f"price of {line.model}: ${price.input:g} in / ${price.output:g} out per million tokens{batch}"
            )
    say(f"prices: {p.prices.describe()}; override with --prices FILE or $GRANDROUNDS_PRICES")
    for note in p.notes:
        say(f"note: {note}")


def dry_run(
    cfg: RunConfig, store_file: Path, prices: Path | None, out: Path | None, console: Any
) -> Plan:
    """``grandrounds run --dry-run``: print the plan (and write ``plan.json`` to ``out``); the store
    is only read (a missing one is an empty one) and no call is made."""
    table = load_prices(prices)
    if store_file.exists():
        with Store(store_file, readonly=True) as st:
            p = plan(st, cfg, table)
    else:
        p = plan(None, cfg, table)
    render(p, console)
    if out is not None:
        from grandrounds.core.files import output_dir, write_text

        output_dir(out)
        write_text(
            out / "plan.json", json.dumps(p.as_json(), ensure_ascii=False, indent=2)
        )  # atomic; a planted link is not written through
        console.print(f"wrote {out / 'plan.json'}", markup=False, highlight=False)
    return p
