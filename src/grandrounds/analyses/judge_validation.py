"""HealthBench meta-evaluation: how well a judge agrees with physicians on HealthBench rubric items.

The protocol is openai/simple-evals ``healthbench_meta_eval.py`` @ ee3b031.
Each row of the public meta-eval file (``2025-05-07-06-14-12_oss_meta_eval.jsonl``, 29,511 rows)
holds a conversation (``prompt``), a model's ``completion``, one rubric criterion (``rubric``, a
string), its ``category`` (the criterion's cluster), and ``binary_labels``: one met/unmet label per
physician who graded the row, with their ``anonymized_physician_ids``. The judge grades every row
once with HealthBench's grader prompt, built and read by the HealthBench grader of the chosen
protocol (``reference``: the official ``GRADER_TEMPLATE`` read from the pinned file, the conversation
and completion as ``role: content`` blocks, the rubric string as is, the sampler's system message,
temperature 0.5 and 2,048 tokens; ``grandrounds``: our template, temperature 0, tolerant reading).
Calls go through the cached, retrying executor, so an interrupted validation resumes and a failed
call is asked again the next time.

Agreement (simple-evals' pairwise precision, recall and F1 of a rater against the other raters
of the same rows, and their balanced means) and the bootstraps are computed in
:mod:`grandrounds.analyses.judge_agreement`, over the rows :mod:`grandrounds.analyses.judge_meta_rows`
reads.

Where this differs from the reference:

- simple-evals re-asks an unreadable reply without limit; here ``--max-reask`` times, then the
  row's judge label is unknown. Unknown rows and rows whose judge call failed are left out of the
  judge-vs-physician figures and counted (``n_unknown``, ``n_failed``), never counted as a label;
  physician-vs-physician figures use every selected row, as the reference's do.
- ``--limit N`` picks the rows simple-evals' ``num_examples=N`` picks
  (``random.Random(0).sample``); ``n_repeats`` is not offered.
- The reference names per-category figures by string replacement in ``"<category>: pairwise_..."``
  keys ("precision" to "recall", "pos" to "neg"), which would mix categories whose names contain
  those words; here figures are keyed by (category, metric). No HealthBench cluster name contains
  them, so the figures agree (:func:`~grandrounds.analyses.judge_agreement.reference_keys` gives the reference's names).
- The physicians' summary (mean and median over physicians, how many the judge beats) is ours:
  the reference returns each physician's figures only.
- The grader prompt is simple-evals' ``GRADER_TEMPLATE``, as its meta-evaluation imports it
  (medicalsphere/HealthBench's copy corrects one typo; HealthBench Professional uses that one, so a
  validation under ``reference`` is shown beside Professional scores marked as another prompt).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grandrounds
from grandrounds.analyses.judge_agreement import (
    Stat,
    judge_interval,
    judge_metrics,
    physician_metrics,
    physician_summary,
    reference_row_stats,
)
from grandrounds.analyses.judge_meta_rows import SUITE, MetaRow, data_path, load_rows, select_rows
from grandrounds.core.errors import ConfigError
from grandrounds.core.hashing import content_hash, file_sha256, to_jsonable
from grandrounds.core.records import Grade, Message
from grandrounds.core.textutil import strip_reasoning
from grandrounds.sources.healthbench import GRANDROUNDS as HB_GRANDROUNDS
from grandrounds.sources.healthbench import REFERENCE as HB_REFERENCE
from grandrounds.sources.protocols import PROTOCOL_NAMES, Protocol
from grandrounds.sources.upstream import SIMPLE_EVALS
from grandrounds.store import AgreementRecord, Store

if (
    TYPE_CHECKING
):  # the judging machinery is imported when a validation runs, not when a report shows its figures
    from grandrounds.run.config import JudgeConfig
    from grandrounds.run.executor import CallStats, RetryPolicy
    from grandrounds.run.limits import TokenLimits
    from grandrounds.run.pipeline import Progress

#: The judge presets: HealthBench's (the meta-eval grades with the same grader and sampler).
PROTOCOLS: Mapping[str, Protocol] = {"reference": HB_REFERENCE, "grandrounds": HB_GRANDROUNDS}
#: Benchmarks whose scores are judged with HealthBench's grader prompt, so a measured agreement applies.
HEALTHBENCH_FAMILY = (
    "healthbench",
    "healthbench-hard",
    "healthbench-consensus",
    "healthbench-professional",
)


# ---- the judge ----------------------------------------------------------------------------------


class MetaPrompts:
    """HealthBench's per-criterion grader prompt and reading, applied to a meta-eval row."""

    def __init__(self, protocol: str) -> None:
        if protocol not in PROTOCOL_NAMES:
            raise ConfigError(
                f"unknown --protocol {protocol!r} (protocols: {', '.join(PROTOCOL_NAMES)})"
            )
        from grandrounds.graders.healthbench_grader import (
            HealthBenchGrader,
            HealthBenchParams,
            parse_single,
            parse_single_reference,
        )

        self.protocol = protocol
        self.reference = protocol == "reference"
        self.grader = HealthBenchGrader(HealthBenchParams("per-criterion", protocol))
        self.parse = parse_single_reference if self.reference else parse_single

    def messages(self, row: MetaRow) -> tuple[Message, ...]:
        """What the judge is sent: the grader's system message, then the filled grader prompt.

        Under ``reference``, as ``HealthBenchMetaEval.__call__``: the row's prompt with the
        completion appended, as ``role: content`` blocks joined by blank lines, into
        ``<<conversation>>``, then the rubric string into ``<<rubric_item>>`` (two ``replace`` calls).
        """
        from grandrounds.graders.healthbench_grader import render_conversation

        if self.reference:
            convo = render_conversation(row.messages, row.completion)
            prompt = self.grader.official_template.replace("<<conversation>>", convo).replace(
                "<<rubric_item>>", row.rubric
            )
        else:
            convo = render_conversation(row.messages, strip_reasoning(row.completion))
            prompt = self.grader.template.format(conversation=convo, rubric_item=row.rubric)
        system = self.grader.judge_system
        return ((Message("system", system),) if system is not None else ()) + (
            Message("user", prompt),
        )

    @property
    def prompt_id(self) -> str:
        """Names the prompt a judge saw, so agreement is matched only with scores judged alike."""
        return prompt_id("healthbench", self.protocol, "per-criterion")


def prompt_id(grader: str, protocol: str, mode: str) -> str:
    """The judge prompt family of a HealthBench-style grading: grader prompt, system message, mode.

    HealthBench (and its subsets) grade with the meta-eval's prompts; HealthBench Professional's
    reference judge gets the same prompt without a system message, its grandrounds judge the same
    as HealthBench's.
    """
    if grader == "healthbench-professional" and protocol == "reference":
        return "healthbench-professional:reference:no-system:" + mode
    return f"healthbench:{protocol}:{mode}"


@dataclass(frozen=True)
class RowVerdict:
    status: str  # met | unmet | unknown
    explanation: str = ""
    error: str | None = None
    attempts: int = 0


@dataclass(frozen=True, kw_only=True)
class ValidateConfig:
    """A judge validation: which judge, on which rows, under which protocol."""

    judge: str | None = None
    base_url: str = ""
    protocol: str = "reference"
    data: Path | None = None
    limit: int | None = None
    judge_overrides: Mapping[str, Any] = field(default_factory=dict)
    json_object: bool = False
    concurrency: int | None = None
    #: Judge call starts per minute (``--judge-rpm``); None = no limit.
    rpm: int | None = None
    #: Tokens of judge call starts per minute (``--judge-tpm``); None = no limit.
    tpm: int | str | TokenLimits | None = None
    max_reask: int = 2
    seed: int = 0
    #: The executor's retry policy (None: its default).
    retry: RetryPolicy | None = None


@dataclass(kw_only=True)
class Validation:
    """A finished validation: rows, the judge's verdicts, the figures, the stored record and call counts."""

    rows: list[MetaRow]
    verdicts: list[RowVerdict]
    record: AgreementRecord
    judge_stats: CallStats
    judge: JudgeConfig

    @property
    def labels(self) -> list[bool | None]:
        return [None if v.status == "unknown" else v.status == "met" for v in self.verdicts]


def check_config(cfg: ValidateConfig) -> tuple[Protocol, JudgeConfig, dict[str, Any]]:
    """The protocol, the judge with its generation parameters settled, and its deviations; before any call."""
    from grandrounds.providers.base import check_model
    from grandrounds.run.config import JudgeConfig, resolve_judges
    from grandrounds.run.limits import check_rpm, check_tpm

    if cfg.protocol not in PROTOCOLS:
        raise ConfigError(
            f"unknown --protocol {cfg.protocol!r} (protocols: {', '.join(PROTOCOLS)})"
        )
    if cfg.max_reask < 0:
        raise ConfigError(f"--max-reask must be 0 or more, not {cfg.max_reask}")
    check_rpm(cfg.rpm, "--judge-rpm")
    check_tpm(cfg.tpm, "--judge-tpm")
    proto = PROTOCOLS[cfg.protocol]
    spec = cfg.judge or proto.judge_models[0]
    if "@" in spec:
        spec, url = spec.split("@", 1)
    else:
        url = cfg.base_url
    check_model(spec, {}, "chat")
    judges, deviations = resolve_judges(
        proto,
        [JudgeConfig(spec=spec, base_url=url, json_object=cfg.json_object)],
        cfg.judge_overrides,
        cfg.seed,
    )
    return proto, judges[0], deviations.get(spec, {})


async def validate(
    store: Store, cfg: ValidateConfig, progress: Progress | None = None
) -> Validation:
    """Ask the judge every selected row, compute the agreement figures and store them."""
    from grandrounds.graders.judging import Ask, ask
    from grandrounds.run.executor import RetryPolicy
    from grandrounds.run.limits import EndpointLimits
    from grandrounds.run.pipeline import make_judges, run_pool

    proto, judge_cfg, deviations = check_config(cfg)
    prompts = MetaPrompts(cfg.protocol)
    templates = (
        prompts.grader.template_hashes()
    )  # reads the official template: fails before any call
    path = data_path(cfg.data)
    rows = select_rows(load_rows(path), cfg.limit)
    dataset = file_sha256(path)
    endpoints = EndpointLimits()
    execs, (judge,) = make_judges(
        store,
        [judge_cfg],
        cfg.concurrency,
        cfg.retry or RetryPolicy(),
        cfg.seed,
        progress,
        endpoints,
    )
    endpoints.limit_model(execs[0].provider, cfg.rpm, cfg.tpm, "--judge-")
    verdicts: list[RowVerdict | None] = [None] * len(rows)
    if progress:
        progress.start(len(rows), f"{SUITE} · judge {judge_cfg.spec}")

    async def one(i: int) -> None:
        row = rows[i]
        a = Ask(("0",), lambda _p: prompts.messages(row), prompts.parse)
        reply = await ask(judge, a, 0, cfg.max_reask)
        got = reply.read.get("0")
        if got is not None:
            verdicts[i] = RowVerdict(got[0].status, got[0].explanation, None, len(reply.keys))
        else:
            verdicts[i] = RowVerdict(
                "unknown", "", reply.error or "judge reply could not be read", len(reply.keys)
            )
        if progress:
            progress.advance(
                Grade(sample_id=f"line {row.line}", value=1.0 if got is not None else None)
            )

    async def do_group(group: list[int]) -> None:
        await one(group[0])

    try:
        await run_pool(
            store, ([i] for i in range(len(rows))), do_group, max(4, 2 * execs[0].concurrency)
        )
    finally:
        for e in execs:
            await e.provider.aclose()
    done = [v for v in verdicts if v is not None]
    assert len(done) == len(rows)
    record = agreement_record(
        rows, done, judge_cfg, cfg, prompts, dataset, templates, deviations, proto
    )
    store.put_agreement(record)
    return Validation(
        rows=rows, verdicts=done, record=record, judge_stats=execs[0].stats, judge=judge_cfg
    )


def agreement_record(
    rows: Sequence[MetaRow],
    verdicts: Sequence[RowVerdict],
    judge: JudgeConfig,
    cfg: ValidateConfig,
    prompts: MetaPrompts,
    dataset: str,
    templates: Mapping[str, Any],
    deviations: Mapping[str, Any],
    proto: Protocol,
) -> AgreementRecord:
    """Every figure of one validation, as the store keeps it."""
    labels = [None if v.status == "unknown" else v.status == "met" for v in verdicts]
    metrics = agreement_metrics(rows, labels, cfg.seed)
    judge_all = metrics["judge"]["overall"]
    phys = metrics["physicians"]["summary"]["overall"].get("f1_balanced", {})
    n_failed = sum(
        1
        for v in verdicts
        if v.status == "unknown" and v.error and v.error.startswith("judge call failed")
    )
    summary = {
        "f1_balanced": (judge_all.get("f1_balanced") or {}).get("value"),
        "ci95": metrics["judge_ci95"]["overall"],
        "physician_f1_balanced_mean": phys.get("mean"),
        "physician_f1_balanced_median": phys.get("median"),
        "physicians_below_judge": metrics["judge_vs_physicians"]["below"],
        "n_physicians_compared": metrics["judge_vs_physicians"]["n_physicians"],
        "n_rows": len(rows),
        "n_judged": sum(1 for x in labels if x is not None),
        "n_unknown": sum(1 for x in labels if x is None),
        "n_failed": n_failed,
        "judge_predicted_positive": metrics["reference_stats"]
        .get("model_predicted_positive", {})
        .get("mean"),
    }
    params = to_jsonable(judge.params)
    ident = {
        "suite": SUITE,
        "judge": judge.spec,
        "params": params,
        "protocol": cfg.protocol,
        "prompt": prompts.prompt_id,
        "dataset": dataset,
        "limit": cfg.limit,
        "templates": templates,
    }
    metrics["fingerprint"] = ident | {
        "deviations": dict(deviations),
        "protocol_preset": proto.describe(),
        "max_reask": cfg.max_reask,
        "seed": cfg.seed,
        "source": f"{SIMPLE_EVALS.repo} healthbench_meta_eval.py @ {SIMPLE_EVALS.commit[:7]}",
    }
    return AgreementRecord(
        key=content_hash(ident),
        suite=SUITE,
        judge=judge.spec,
        judge_params=params,
        protocol=cfg.protocol,
        prompt=prompts.prompt_id,
        dataset_sha256=dataset,
        n_rows=len(rows),
        summary=summary,
        metrics=metrics,
        verdicts=[[r.line, v.status] for r, v in zip(rows, verdicts)],
        package_version=grandrounds.__version__,
    )


def _stats_json(figs: Mapping[str, Stat]) -> dict[str, dict[str, float | None]]:
    return {k: {"n": s.n, "value": s.value} for k, s in figs.items()}


def agreement_metrics(
    rows: Sequence[MetaRow], labels: Sequence[bool | None], seed: int = 0
) -> dict[str, Any]:
    """Judge and physician figures, the judge's interval, the reference's row bootstrap, as JSON."""
    judge = judge_metrics(rows, labels)
    per_phys = physician_metrics(rows)
    summary = physician_summary(per_phys)
    mine = (judge.overall.get("f1_balanced") or Stat(0, None)).value
    theirs = [
        m.overall["f1_balanced"].value
        for m in per_phys.values()
        if "f1_balanced" in m.overall and m.overall["f1_balanced"].value is not None
    ]
    return {
        "judge": {
            "overall": _stats_json(judge.overall),
            "by_category": {c: _stats_json(f) for c, f in judge.by_category.items()},
        },
        "judge_ci95": judge_interval(rows, labels, seed),
        "physicians": {
            "summary": summary,
            "per_physician": {pid: _stats_json(m.overall) for pid, m in per_phys.items()},
        },
        "judge_vs_physicians": {
            "n_physicians": len(theirs),
            "below": None if mine is None else sum(1 for t in theirs if t < mine),
        },
        "reference_stats": reference_row_stats(rows, labels, seed),
    }


# ---- agreement beside scores --------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class AgreementNote:
    """A judge's measured agreement as shown beside a score it judged."""

    judge: str
    f1_balanced: float | None
    physicians: float | None
    n_judged: int
    exact: bool
    why_not_exact: str = ""

    def text(self) -> str:
        f1 = "n/a" if self.f1_balanced is None else f"{self.f1_balanced:.3f}"
        md = "" if self.physicians is None else f" (MDs {self.physicians:.3f})"
        return f"F1 {f1}{md}" + ("" if self.exact else " *")


def _comparable(params: Mapping[str, Any]) -> dict[str, Any]:
    """Generation parameters that change a judge's labels (the seed is a request detail, not a setting)."""
    return {k: v for k, v in params.items() if k != "seed"}


def agreement_notes(
    benchmark: str, fingerprint: Mapping[str, Any], agreements: Sequence[AgreementRecord]
) -> list[AgreementNote]:
    """For a result of a HealthBench-family benchmark, each of its judges' measured agreement.

    Exact when the judge model, its generation parameters, the protocol and the prompt family are
    those measured; otherwise the closest measurement of the same model, marked with why it differs.
    The measurement with the most judged rows wins, then the newest.
    """
    if benchmark not in HEALTHBENCH_FAMILY:
        return []
    grader = fingerprint.get("grader") or {}
    args = grader.get("args") or {}
    mine = prompt_id(
        str(grader.get("name", "healthbench")),
        str(args.get("protocol", "grandrounds")),
        str(args.get("mode", "per-criterion")),
    )
    notes = []
    for j in fingerprint.get("judges") or []:
        model, params = j.get("model"), _comparable(j.get("params") or {})
        same_model = [a for a in agreements if a.judge == model and a.suite == SUITE]
        if not same_model:
            continue
        ranked = sorted(
            same_model,
            key=lambda a: (
                _comparable(a.judge_params) == params and a.prompt == mine,
                a.summary.get("n_judged", 0),
                a.created_at,
            ),
        )
        best = ranked[-1]
        why = []
        if _comparable(best.judge_params) != params:
            why.append("other generation settings")
        if best.prompt != mine:
            why.append("other judge prompt")
        notes.append(
            AgreementNote(
                judge=model,
                f1_balanced=best.summary.get("f1_balanced"),
                physicians=best.summary.get("physician_f1_balanced_mean"),
                n_judged=int(best.summary.get("n_judged", 0)),
                exact=not why,
                why_not_exact=", ".join(why),
            )
        )
    return notes


def agreement_text(
    benchmark: str, fingerprint: Mapping[str, Any], agreements: Sequence[AgreementRecord]
) -> str:
    """The notes of one result as one cell: ``F1 0.709 (MDs 0.652)``, per judge for a panel."""
    notes = agreement_notes(benchmark, fingerprint, agreements)
    if len(notes) == 1:
        return notes[0].text()
    return "; ".join(f"{n.judge}: {n.text()}" for n in notes)


def agreement_by_result(store: Store, rows: Sequence[Any]) -> dict[tuple[str, str], str]:
    """(run id, grader fingerprint) -> the agreement cell of each HealthBench-family result in ``rows``
    (leaderboard rows: ``benchmark``, ``fingerprint``, ``key``) whose judge has a measured agreement."""
    rows = [r for r in rows if r.benchmark in HEALTHBENCH_FAMILY]
    agreements = store.agreements(SUITE) if rows else []
    if not agreements:
        return {}
    return {
        r.key: text
        for r in rows
        if (text := agreement_text(r.benchmark, r.fingerprint, agreements))
    }


#: What the agreement cell means, printed under a table that shows one.
AGREEMENT_LEGEND = (
    "judge agreement: the judge's balanced (macro) F1 against physicians on HealthBench's meta-evaluation "
    "(grandrounds validate-judge healthbench-meta), MDs = the physicians' mean against each other; "
    "* measured with other judge settings or another judge prompt"
)
