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

Agreement (``compute_metrics_for_rater_by_class``, ``compute_f1_metric``,
``compute_balanced_metric``, reproduced from their arithmetic): a rater (the judge, or one
physician) is compared with the other raters of the same rows; every (rater label, other label)
pair counts once.

- ``precision_pos`` = share of agreeing pairs among pairs where the rater said met;
  ``precision_neg`` the same where it said unmet;
- ``recall_pos`` = share of agreeing pairs among pairs where the other rater said met;
  ``recall_neg`` the same where the other said unmet;
- ``f1_c`` = 2 p r / (p + r) (0 when both are 0), counted over n_p + n_r - p n_p pairs;
- ``*_balanced`` = (pos + neg) / 2, for precision, recall and F1; ``f1_balanced`` (simple-evals'
  ``pairwise_model_f1_balanced``) is the headline: the macro F1 over met and unmet.

A figure exists only when it has pairs (an F1 only with its precision and recall, a balanced
figure only with both classes), overall and per category, as in the reference. Physicians:
each physician against the other physicians of the rows they labelled (leave one out), over
every selected row.

Bootstrap. The reference's only bootstrap is ``common.aggregate_results`` over per-row metrics
(``num_physician_labels``, ``percent_physician_pos``, ``model_predicted_positive``, each also per
category, and ``score``): mean, n_samples and the std of the mean over 1,000 resamples drawn from
the unseeded ``np.random``; :func:`reference_row_stats` draws them from ``RandomState(seed)``, so
with the same seed both agree. The agreement figures have no interval in the reference; ours
(:func:`judge_interval`) is the 2.5/97.5 percentile of the judge's balanced F1 over 1,000
resamples of conversations (rows sharing a conversation and completion are resampled together,
since their labels are not independent).

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
  them, so the figures agree (:func:`reference_keys` gives the reference's names).
- The physicians' summary (mean and median over physicians, how many the judge beats) is ours:
  the reference returns each physician's figures only.
- The grader prompt is simple-evals' ``GRADER_TEMPLATE``, as its meta-evaluation imports it
  (medicalsphere/HealthBench's copy corrects one typo; HealthBench Professional uses that one, so a
  validation under ``reference`` is shown beside Professional scores marked as another prompt).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

import grandrounds
from grandrounds.benchmarks.healthbench import BASE_URL
from grandrounds.benchmarks.readers.lines import read_jsonl
from grandrounds.core.errors import ConfigError, DataError
from grandrounds.core.hashing import content_hash, file_sha256, to_jsonable
from grandrounds.core.records import Grade, Message
from grandrounds.core.textutil import strip_reasoning
from grandrounds.sources.downloads import RemoteFile, cache_dir, fetch
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
    from grandrounds.run.runner import Progress

SUITE = "healthbench-meta"
#: The public meta-eval file (simple-evals ``INPUT_PATH``); size 136,224,466 bytes.
META_FILE = RemoteFile(
    url=BASE_URL + "2025-05-07-06-14-12_oss_meta_eval.jsonl",
    filename="2025-05-07-06-14-12_oss_meta_eval.jsonl",
    sha256="6a343ed3fcb6f28353c2c6c157ae30ddf2db874c947b27ba474ad54da9c5dbac",
)
#: The judge presets: HealthBench's (the meta-eval grades with the same grader and sampler).
PROTOCOLS: Mapping[str, Protocol] = {"reference": HB_REFERENCE, "grandrounds": HB_GRANDROUNDS}
#: Benchmarks whose scores are judged with HealthBench's grader prompt, so a measured agreement applies.
HEALTHBENCH_FAMILY = (
    "healthbench",
    "healthbench-hard",
    "healthbench-consensus",
    "healthbench-professional",
)
#: Resamples of the reference's bootstrap (``_compute_stat``) and of ours.
N_RESAMPLES = 1000

Rater = Literal["model", "physician"]


# ---- data ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetaRow:
    """One meta-eval row: a judged item with the physicians' labels of it."""

    line: int
    messages: tuple[Message, ...]
    completion: str
    rubric: str
    category: str
    labels: tuple[bool, ...]
    physicians: tuple[str, ...]


def parse_row(rec: Mapping[str, Any], path: Path, line: int) -> MetaRow:
    """One JSONL record -> MetaRow; DataError naming the line for anything malformed."""
    prompt = rec.get("prompt")
    if not isinstance(prompt, list) or not prompt:
        raise DataError(path, line, "prompt must be a non-empty list of messages")
    messages = []
    for m in prompt:
        if (
            not isinstance(m, dict)
            or not isinstance(m.get("role"), str)
            or not isinstance(m.get("content"), str)
        ):
            raise DataError(path, line, "each prompt message needs string role and content")
        messages.append(Message(m["role"], m["content"]))
    for name in ("completion", "rubric", "category"):
        if not isinstance(rec.get(name), str):
            raise DataError(path, line, f"{name} must be a string")
    if not rec["rubric"].strip():
        raise DataError(path, line, "rubric is empty")
    labels = rec.get("binary_labels")
    if not isinstance(labels, list) or not labels or not all(isinstance(x, bool) for x in labels):
        raise DataError(path, line, "binary_labels must be a non-empty list of true/false")
    ids = rec.get("anonymized_physician_ids")
    if not isinstance(ids, list) or not all(
        isinstance(x, (str, int)) and not isinstance(x, bool) for x in ids
    ):
        raise DataError(path, line, "anonymized_physician_ids must be a list of ids")
    if len(ids) != len(labels):
        raise DataError(
            path, line, f"{len(labels)} binary_labels but {len(ids)} anonymized_physician_ids"
        )
    return MetaRow(
        line,
        tuple(messages),
        rec["completion"],
        rec["rubric"],
        rec["category"],
        tuple(labels),
        tuple(str(x) for x in ids),
    )


def load_rows(path: Path) -> list[MetaRow]:
    """Every row of a meta-eval file in the original format, in file order."""
    return [parse_row(rec, path, n) for n, rec in read_jsonl(path)]


def select_rows(rows: Sequence[MetaRow], limit: int | None) -> list[MetaRow]:
    """The rows simple-evals evaluates with ``num_examples=limit``: all, or ``random.Random(0).sample``."""
    if limit is not None and limit < 1:
        raise ConfigError(f"--limit must be at least 1, not {limit}")
    if limit is not None and len(rows) > limit:
        return random.Random(0).sample(list(rows), limit)
    return list(rows)


def data_path(data: Path | None) -> Path:
    """``data`` if given (it must exist), else the public file through the checksummed cache."""
    if data is not None:
        if not data.exists():
            raise DataError(data, None, "file not found")
        if data.is_dir():
            data = data / META_FILE.filename
            if not data.exists():
                raise DataError(
                    data, None, f"file not found (expected {META_FILE.filename} in the directory)"
                )
        return data
    return fetch(META_FILE, cache_dir() / SUITE)


# ---- agreement arithmetic -----------------------------------------------------------------------


@dataclass(frozen=True)
class Stat:
    """One agreement figure: its value (None: undefined) over ``n`` pairs (a float for F1, as in the reference)."""

    n: float
    value: float | None


@dataclass(frozen=True)
class RaterMetrics:
    """A rater's figures overall and per category: name (``precision_pos``, ``f1_balanced``, ...) -> Stat."""

    overall: Mapping[str, Stat]
    by_category: Mapping[str, Mapping[str, Stat]]


def _f1(p: Stat, r: Stat) -> Stat:
    # compute_f1_metric in healthbench_meta_eval.py: the same operations in the same order, so the
    # floats agree to the last bit; n = TP+FP + TP+FN - TP with TP = precision * n_precision.
    if p.value is None or r.value is None:
        return Stat(p.n + r.n, None)
    tp = p.value * p.n
    if p.value == 0 and r.value == 0:
        return Stat(p.n + r.n - tp, 0.0)
    return Stat(p.n + r.n - tp, 2 * (p.value * r.value) / (p.value + r.value))


def _figures(counts: Mapping[str, list[int]]) -> dict[str, Stat]:
    """Precision and recall per class from (agreeing, total) pair counts, then F1 and balanced figures."""
    out = {name: Stat(n, agree / n) for name, (agree, n) in counts.items() if n}
    for cls in ("pos", "neg"):
        p, r = out.get(f"precision_{cls}"), out.get(f"recall_{cls}")
        if p is not None and r is not None:
            out[f"f1_{cls}"] = _f1(p, r)
    for metric in ("precision", "recall", "f1"):
        pos, neg = out.get(f"{metric}_pos"), out.get(f"{metric}_neg")
        if pos is not None and neg is not None:
            value = None if pos.value is None or neg.value is None else (pos.value + neg.value) / 2
            out[f"{metric}_balanced"] = Stat(pos.n + neg.n, value)
    return out


def rater_metrics(
    selves: Sequence[bool], others: Sequence[Sequence[bool]], categories: Sequence[str]
) -> RaterMetrics:
    """A rater's labels against the other raters' labels of the same rows, overall and per category.

    Each (label, other label) pair adds to the rater's precision for the class the rater chose
    and to its recall for the class the other rater chose, agreeing or not.
    """
    if not len(selves) == len(others) == len(categories):
        raise ValueError("selves, others and categories differ in length")
    overall: dict[str, list[int]] = {}
    per: dict[str, dict[str, list[int]]] = {}
    for mine, theirs, cat in zip(selves, others, categories):
        scopes = (overall, per.setdefault(cat, {}))
        for other in theirs:
            agree = int(mine == other)
            for name in (
                "precision_pos" if mine else "precision_neg",
                "recall_pos" if other else "recall_neg",
            ):
                for scope in scopes:
                    c = scope.setdefault(name, [0, 0])
                    c[0] += agree
                    c[1] += 1
    return RaterMetrics(_figures(overall), {cat: _figures(c) for cat, c in per.items() if c})


def judge_metrics(rows: Sequence[MetaRow], verdicts: Sequence[bool | None]) -> RaterMetrics:
    """The judge against every physician label of the rows it labelled (unknown rows left out)."""
    kept = [(r, v) for r, v in zip(rows, verdicts, strict=True) if v is not None]
    return rater_metrics(
        [v for _, v in kept], [r.labels for r, _ in kept], [r.category for r, _ in kept]
    )


def physician_metrics(rows: Sequence[MetaRow]) -> dict[str, RaterMetrics]:
    """Each physician (first-seen order) against the other physicians of every row they labelled."""
    lists: dict[str, tuple[list[bool], list[tuple[bool, ...]], list[str]]] = {}
    for row in rows:
        for i, (pid, label) in enumerate(zip(row.physicians, row.labels)):
            mine, theirs, cats = lists.setdefault(pid, ([], [], []))
            mine.append(label)
            theirs.append(row.labels[:i] + row.labels[i + 1 :])
            cats.append(row.category)
    return {pid: rater_metrics(*v) for pid, v in lists.items()}


def reference_keys(m: RaterMetrics, rater: Rater) -> dict[str, dict[str, float | None]]:
    """The figures under simple-evals' names: ``pairwise_{rater}_{metric}_{class}`` and
    ``{category}: pairwise_...``, each ``{"n": ..., "value": ...}``."""
    out = {f"pairwise_{rater}_{k}": {"n": s.n, "value": s.value} for k, s in m.overall.items()}
    for cat, figs in m.by_category.items():
        out.update(
            {f"{cat}: pairwise_{rater}_{k}": {"n": s.n, "value": s.value} for k, s in figs.items()}
        )
    return out


def physician_summary(per: Mapping[str, RaterMetrics]) -> dict[str, Any]:
    """Mean and median of each figure over the physicians who have it, overall and per category (ours)."""

    def summarise(figs: Sequence[Mapping[str, Stat]]) -> dict[str, dict[str, float | int]]:
        values: dict[str, list[float]] = {}
        for f in figs:
            for name, s in f.items():
                if s.value is not None:
                    values.setdefault(name, []).append(s.value)
        return {
            k: {"mean": statistics.fmean(v), "median": statistics.median(v), "n_physicians": len(v)}
            for k, v in values.items()
        }

    cats = sorted({c for m in per.values() for c in m.by_category})
    return {
        "n_physicians": len(per),
        "overall": summarise([m.overall for m in per.values()]),
        "by_category": {
            c: summarise([m.by_category[c] for m in per.values() if c in m.by_category])
            for c in cats
        },
    }


# ---- bootstraps ---------------------------------------------------------------------------------


def reference_row_stats(
    rows: Sequence[MetaRow],
    verdicts: Sequence[bool | None],
    seed: int = 0,
    n_resamples: int = N_RESAMPLES,
) -> dict[str, dict[str, float]]:
    """simple-evals' per-row metrics aggregated as ``common.aggregate_results`` does with
    ``("mean", "n_samples", "bootstrap_std")``: names in the order it first sees them (each row's
    metrics, then ``score``), each resampled 1,000 times with replacement.

    ``np.random.choice(values, n)`` draws ``randint(0, n, n)``; drawing those from
    ``RandomState(seed)`` in the same order (in blocks of rows, the same stream) gives the same
    resamples as the reference with ``np.random.seed(seed)``.
    """
    name2values: dict[str, list[float]] = {}
    for row, v in zip(rows, verdicts, strict=True):
        if v is None:
            continue
        k = len(row.labels)
        metrics: dict[str, float] = {
            "num_physician_labels": k,
            "percent_physician_pos": sum(row.labels) / k,
            "model_predicted_positive": v,
        }
        metrics |= {f"{row.category}: {name}": value for name, value in metrics.items()}
        for name, value in metrics.items():
            name2values.setdefault(name, []).append(value)
        name2values.setdefault("score", []).append(v)
    rng = np.random.RandomState(seed)
    out: dict[str, dict[str, float]] = {}
    for name, values in name2values.items():
        arr = np.asarray(values, dtype=float)
        block = max(1, 2_000_000 // arr.size)
        means = []
        for start in range(0, n_resamples, block):
            idx = rng.randint(0, arr.size, size=(min(block, n_resamples - start), arr.size))
            means.append(arr[idx].mean(axis=1))
        out[name] = {
            "mean": float(np.mean(arr)),
            "n_samples": len(values),
            "bootstrap_std": float(np.std(np.concatenate(means))),
        }
    return out


def _pair_counts(row: MetaRow, verdict: bool) -> tuple[int, ...]:
    """A judged row's (agreeing, total) pair counts for precision_pos, precision_neg, recall_pos, recall_neg."""
    k, p = len(row.labels), sum(row.labels)
    if verdict:
        return (p, k, 0, 0, p, p, 0, k - p)
    return (0, 0, k - p, k, 0, p, k - p, k - p)


def _balanced_f1(sums: np.ndarray) -> np.ndarray:
    """Balanced F1 from summed pair counts (last axis: the 8 counts of :func:`_pair_counts`); NaN where undefined."""
    with np.errstate(divide="ignore", invalid="ignore"):
        f1s = []
        for base in (0, 2):  # pos, neg
            p = sums[..., base] / sums[..., base + 1]
            r = sums[..., base + 4] / sums[..., base + 5]
            f1 = np.where((p == 0) & (r == 0), 0.0, 2 * p * r / (p + r))
            f1s.append(f1)
        return (f1s[0] + f1s[1]) / 2


def judge_interval(
    rows: Sequence[MetaRow],
    verdicts: Sequence[bool | None],
    seed: int = 0,
    n_resamples: int = N_RESAMPLES,
) -> dict[str, Any]:
    """95% percentile interval of the judge's balanced F1, overall and per category (ours).

    Conversations (rows with the same messages and completion) are resampled with replacement,
    ``n_resamples`` times from ``default_rng(seed)``; a resample where a figure is undefined is
    left out of that figure's interval.
    """
    judged = [(r, v) for r, v in zip(rows, verdicts, strict=True) if v is not None]
    if not judged:
        return {"overall": None, "by_category": {}}
    cats = sorted({r.category for r, _ in judged})
    cat_index = {c: i for i, c in enumerate(cats)}
    clusters: dict[tuple[Any, ...], int] = {}
    rows_counts = []
    for r, v in judged:
        cid = clusters.setdefault((r.messages, r.completion), len(clusters))
        rows_counts.append((cid, cat_index[r.category], _pair_counts(r, v)))
    counts = np.zeros((len(clusters), 1 + len(cats), 8))
    for cid, ci, c in rows_counts:
        counts[cid, 0] += c
        counts[cid, 1 + ci] += c
    flat = counts.reshape(len(clusters), -1)
    rng = np.random.default_rng(seed)
    n = len(clusters)
    stats = []
    block = max(1, 2_000_000 // n)
    for start in range(0, n_resamples, block):
        size = min(block, n_resamples - start)
        draws = rng.integers(0, n, size=(size, n))
        weights = np.stack([np.bincount(d, minlength=n) for d in draws]).astype(float)
        stats.append(_balanced_f1((weights @ flat).reshape(size, 1 + len(cats), 8)))
    f1 = np.concatenate(stats)  # (n_resamples, 1 + categories)

    def interval(col: np.ndarray) -> list[float] | None:
        ok = col[~np.isnan(col)]
        return [float(x) for x in np.percentile(ok, [2.5, 97.5])] if ok.size else None

    return {
        "overall": interval(f1[:, 0]),
        "by_category": {c: interval(f1[:, 1 + i]) for i, c in enumerate(cats)},
        "n_conversations": n,
        "n_resamples": n_resamples,
    }


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


@dataclass(frozen=True)
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


@dataclass
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
        proto, [JudgeConfig(spec, url, json_object=cfg.json_object)], cfg.judge_overrides, cfg.seed
    )
    return proto, judges[0], deviations.get(spec, {})


async def validate(
    store: Store, cfg: ValidateConfig, progress: Progress | None = None
) -> Validation:
    """Ask the judge every selected row, compute the agreement figures and store them."""
    from grandrounds.graders.judging import Ask, ask
    from grandrounds.run.executor import RetryPolicy
    from grandrounds.run.limits import EndpointLimits
    from grandrounds.run.runner import make_judges, run_pool

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
            progress.advance(Grade(f"line {row.line}", 1.0 if got is not None else None))

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
    return Validation(rows, done, record, execs[0].stats, judge_cfg)


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


@dataclass(frozen=True)
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
                model,
                best.summary.get("f1_balanced"),
                best.summary.get("physician_f1_balanced_mean"),
                int(best.summary.get("n_judged", 0)),
                not why,
                ", ".join(why),
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
