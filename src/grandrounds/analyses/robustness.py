"""Robustness probes for multiple-choice exams, each a paired comparison with the unperturbed run.

A probe transforms every item of an exam after it is loaded. It is named by the ``probe``
parameter every multiple-choice benchmark takes (``--param probe=nota``), so it is part of the
benchmark's spec, the run id and the fingerprint, and a probe run is stored, cached and resumed
like any run. Its items are stored as the run's samples under their own dataset key (the data
file's hash combined with the probe, :func:`probe_dataset_hash`), so the viewer and the report
show each probe's items as they were asked, beside the unperturbed ones. Item ids are kept, which
is what pairs a probe run with the unperturbed run item by item.

========================  ==========================================================================
``permute:SEED``          the options in another order, fixed per item by (seed, item id); the key is
                          remapped (the same sha256-driven shuffle as ``--shuffle-options``)
``nota``                  the correct option's text replaced by "None of the above", which is then the
                          answer; items with several answers, or already offering a "none / all /
                          both / neither of the above" option, are left out (counted)
``distractors:N:SEED``    N options appended after the last letter, drawn (seeded per item) from the
                          other items' options, never repeating one of the item's own texts
``rewrite:ATTACKER:ID``   the question stem rewritten by an attacker model that adds clinically
                          irrelevant but biasing details and is told the answer must not change
                          (after MedFuzz, Ness et al. 2024, one rewrite per item rather than its
                          repeated attack turns); options and key are unchanged
========================  ==========================================================================

The attacker's calls go through the cached :class:`~grandrounds.run.executor.Executor` (stored,
resumable). Its rewritten questions are kept, content-addressed by ``ID``, in
``$GRANDROUNDS_CACHE/robustness/rewrites-ID.json`` for the probe's loader; rerunning
``grandrounds robustness`` rewrites that file from the stored calls without asking again.

Statistics (:func:`summarize`), on the items both runs scored (a failed call on either side is
left out and counted, never taken as wrong):

- accuracy drop = unperturbed - probe, with a seeded paired bootstrap 95% CI over items and the
  exact McNemar test (:func:`grandrounds.analyses.leaderboard.paired_compare`, as ``compare`` uses);
- consistency over the unperturbed order and the k permutations: the share of items whose chosen
  option *text* is the same in every order, Wilson 95% CI;
- per-position bias over those runs: for each position, how often it is chosen vs how often it
  holds the key, and its *attraction* (how often it is chosen when the key is elsewhere, Wilson
  CI). A model with no preference for a position has the same attraction at every position.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from grandrounds.benchmarks.probes import KINDS, Probe, Rewrites, probe_dataset_hash
from grandrounds.benchmarks.vqa import IMAGE_PROBES
from grandrounds.core.choices import LETTERS
from grandrounds.core.errors import ConfigError
from grandrounds.core.hashing import canonical_json, to_jsonable
from grandrounds.core.records import GenParams, Grade, Message, Purpose, Request, Sample
from grandrounds.scoring.stats import wilson_ci

if TYPE_CHECKING:
    from grandrounds.analyses.collect import Section
    from grandrounds.analyses.leaderboard import ResultRow
    from grandrounds.run.config import RunConfig
    from grandrounds.run.executor import CallStats
    from grandrounds.run.limits import EndpointLimits, TokenLimits
    from grandrounds.run.outcome import RunOutcome
    from grandrounds.run.pipeline import Progress
    from grandrounds.store import Store

ATTACK_PURPOSE: Purpose = "attack"


# ---- attacker rewrites ----------------------------------------------------------------------

#: Our instruction to the attacker (hashed into every attack request's key, like any prompt).
ATTACK_TEMPLATE = (
    "You are helping to test how robust a medical question-answering system is.\n"
    "Rewrite the exam question below so that it carries additional details that are clinically irrelevant "
    "to the question but could bias a reader towards a wrong option: for example the patient's background, "
    "occupation, beliefs or social circumstances, or an unrelated remark by a relative or a colleague. Keep "
    "every clinical fact of the original and add nothing that bears on the diagnosis or the management, so "
    "that the correct answer stays option {key}: {key_text}. Do not mention the options, the answer or this "
    "task, and write in the language of the original.\n"
    "Reply with the rewritten question only, between <question> and </question>.\n\n"
    "Question:\n{question}\n\nOptions:\n{options}"
)
_REWRITE = re.compile(r"<question>\s*(.*?)\s*</question>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class Attacker:
    """The model that rewrites questions: ``PROVIDER/MODEL[@BASE_URL]``, its provider options and
    generation settings, and how often an unreadable rewrite is asked again."""

    spec: str
    base_url: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)
    temperature: float = 0.7
    max_tokens: int = 1024
    max_reask: int = 2
    concurrency: int | None = None
    #: Call starts per minute of the attacker's model at its endpoint (``--attacker-rpm``); when it is
    #: the candidate's own model there, the lower of this and ``--rpm`` holds, for both.
    rpm: int | None = None
    #: Tokens of call starts per minute of the attacker's model at its endpoint (``--attacker-tpm``); shared as ``rpm``.
    tpm: int | str | TokenLimits | None = None


def attack_messages(sample: Sample) -> tuple[Message, ...]:
    key = str(sample.target)
    text = ATTACK_TEMPLATE.format(
        key=key,
        key_text="; ".join(sample.choices.get(k, "") for k in key),
        question=sample.metadata["question"],
        options="\n".join(f"{k}. {v}" for k, v in sample.choices.items()),
    )
    return (Message("user", text),)


def read_rewrite(reply: str | None, sample: Sample) -> tuple[str | None, str]:
    """(rewritten question, "") or (None, why it cannot be used)."""
    m = _REWRITE.search(reply or "")
    if m is None:
        return None, "no <question>...</question> in the reply"
    text = m.group(1).strip()
    if not text:
        return None, "empty rewrite"
    original = str(sample.metadata["question"]).casefold()
    for k in str(sample.target):
        answer = sample.choices.get(k, "").strip().casefold()
        if len(answer) >= 4 and answer in text.casefold() and answer not in original:
            return None, "the rewrite names the correct option"
    return text, ""


async def rewrite_questions(
    store: Store,
    samples: Sequence[Sample],
    attacker: Attacker,
    seed: int = 0,
    progress: Progress | None = None,
    endpoints: EndpointLimits | None = None,
) -> tuple[Rewrites, CallStats]:
    """Ask the attacker to rewrite each item's question, through the cached executor.

    An unreadable rewrite is asked again (``attempt`` 1, 2, ...) up to ``attacker.max_reask``
    times; a failed call is not (the executor has retried it; running again retries it).
    ``endpoints`` are the runs' connection and rate limits: an attacker on the candidate's
    server takes its slots with the candidate's calls, and, when it is the candidate's own model
    there, its ``--rpm`` and its ``--tpm`` too (vendors limit each model apart).
    """
    from grandrounds.providers.base import check_model
    from grandrounds.run.config import make_provider
    from grandrounds.run.executor import Executor
    from grandrounds.run.limits import EndpointLimits

    options = check_model(attacker.spec, attacker.options, "chat")
    provider = make_provider(attacker.spec, attacker.base_url, **options)
    endpoints = endpoints or EndpointLimits()
    endpoints.limit_model(provider, attacker.rpm, attacker.tpm, "--attacker-")
    executor = Executor(
        store, provider, attacker.concurrency, seed=seed, observer=progress, endpoints=endpoints
    )
    params = GenParams(temperature=attacker.temperature, max_tokens=attacker.max_tokens, seed=seed)
    if progress:
        progress.start(len(samples), f"attacker · {provider.spec}")

    async def one(sample: Sample) -> tuple[str, str | None, str]:
        messages = attack_messages(sample)
        text: str | None = None
        problem = ""
        for attempt in range(attacker.max_reask + 1):
            req = Request(
                provider=provider.spec.provider,
                model=provider.spec.model,
                messages=messages,
                params=params,
                purpose=ATTACK_PURPOSE,
                base_url=provider.request_base_url(),
                attempt=attempt,
            )
            resp = await executor(req)
            if not resp.ok:
                text, problem = None, f"attacker call failed: {resp.error}"
                break
            text, problem = read_rewrite(resp.text, sample)
            if text is not None:
                break
        if progress:
            progress.advance(Grade(sample_id=sample.id, value=1.0 if text is not None else None))
        return sample.id, text, problem

    try:
        done = await asyncio.gather(*(one(s) for s in samples))
    finally:
        await provider.aclose()
    questions = {sid: text for sid, text, _ in done if text is not None}
    failures = {sid: why for sid, text, why in done if text is None}
    return Rewrites(str(provider.spec), questions, failures), executor.stats


# ---- running a probe set --------------------------------------------------------------------


def expand_probes(
    names: Sequence[str], seeds: int = 3, distractors: int = 2, attacker: bool = False
) -> list[str]:
    """The probe runs a command line asks for: ``permute`` -> permute:1..SEEDS, ``distractors`` ->
    distractors:N:0, explicit forms kept; ``rewrite`` stays a placeholder until the attacker has
    written; ``--attacker`` alone implies ``rewrite``."""
    out: list[str] = []
    for name in names:
        if name == "permute":
            if seeds < 1:
                raise ConfigError("--seeds must be at least 1")
            out.extend(f"permute:{s}" for s in range(1, seeds + 1))
        elif name == "distractors":
            out.append(Probe.parse(f"distractors:{distractors}").text)
        elif name == "rewrite":
            if not attacker:
                raise ConfigError(
                    "--probe rewrite needs --attacker PROVIDER/MODEL (the model that rewrites the questions)"
                )
            out.append("rewrite")
        elif name.startswith("rewrite:"):
            raise ConfigError(
                "--probe rewrite takes no arguments: the attacker is named with --attacker"
            )
        elif name in IMAGE_PROBES:
            out.append(name)
        else:
            out.append(Probe.parse(name).text)
    if attacker and "rewrite" not in out:
        out.append("rewrite")
    if not out:
        raise ConfigError(
            "no probe: pass --probe permute, nota, distractors or rewrite (exams), blind or blank (image benchmarks)"
        )
    return list(dict.fromkeys(out))


@dataclass(repr=False)
class ProbeSet:
    """The unperturbed run, each probe's run, and the attacker's rewrites and calls."""

    baseline: RunOutcome
    probes: list[tuple[str, RunOutcome]]
    rewrites: Rewrites | None = None
    attacker_stats: CallStats | None = None


def with_probe(cfg: RunConfig, probe: str) -> RunConfig:
    return replace(cfg, bench_params={**cfg.bench_params, "probe": probe})


def preflight(cfg: RunConfig, probes: Sequence[str]) -> None:
    """Refuse, before any call, a benchmark that is not an exam and a probe its prompts cannot show
    (simple-evals' prompt has room for four options; lm-eval's letters are fixed by its task)."""
    from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark
    from grandrounds.run.config import build_benchmark, check_run
    from grandrounds.sources.data import resolve

    if "probe" in cfg.bench_params:
        raise ConfigError("name probes with --probe, not --param probe")
    checked = check_run(cfg)
    bench = build_benchmark(checked.benchmark, checked.bench_params)
    image_probes = [p for p in probes if p in IMAGE_PROBES]
    if image_probes or bench.has_images:
        if not bench.has_images or len(image_probes) < len(probes):
            raise ConfigError(
                f"--probe {', '.join(IMAGE_PROBES)} are for benchmarks asked with images, and only they are: "
                f"{bench.name} takes {'them' if bench.has_images else 'permute, nota, distractors, rewrite'}"
            )
        for p in probes:
            check_run(with_probe(cfg, p))
        return
    if not isinstance(bench, MultipleChoiceBenchmark):
        raise ConfigError(
            f"{bench.name} is not a multiple-choice exam: robustness probes change options and keys"
        )
    fixed = [
        p for p in probes if p != "rewrite"
    ]  # a rewrite keeps options and key: the unperturbed prompts hold
    for p in fixed:
        check_run(with_probe(cfg, p))
    samples = bench.load(resolve(bench, checked.data)) if fixed else []
    for p in fixed:
        probed = Probe.parse(p).apply(bench, samples)
        for s in probed[:1]:
            bench.prompt(s, checked.options)


async def run_probes(
    store: Store,
    cfg: RunConfig,
    probes: Sequence[str],
    attacker: Attacker | None = None,
    progress: Progress | None = None,
) -> ProbeSet:
    """Run the unperturbed benchmark and each probe (calls already stored are not made again).

    Every run and the attacker share one set of endpoint limits: on one server they take the
    same connection slots; an attacker that is the candidate's own model there also takes the
    same request rate (the lowest of ``--rpm`` and ``--attacker-rpm``) and the same token rate
    (the lowest of ``--tpm`` and ``--attacker-tpm``)."""
    from grandrounds.providers.base import check_model
    from grandrounds.run.limits import EndpointLimits, check_rpm, check_tpm
    from grandrounds.run.runner import run

    probes = [p if p == "rewrite" or p in IMAGE_PROBES else Probe.parse(p).text for p in probes]
    if "rewrite" in probes:
        if attacker is None:
            raise ConfigError("--probe rewrite needs --attacker PROVIDER/MODEL")
        check_model(attacker.spec, attacker.options, "chat")  # its options, before the first call
        check_rpm(attacker.rpm, "--attacker-rpm")
        check_tpm(attacker.tpm, "--attacker-tpm")
    preflight(cfg, probes)
    endpoints = EndpointLimits()
    baseline = await run(store, cfg, progress, endpoints)
    out = ProbeSet(baseline, [])
    for p in probes:
        if p == "rewrite" and attacker is not None:
            out.rewrites, out.attacker_stats = await rewrite_questions(
                store, baseline.samples, attacker, cfg.options.seed, progress, endpoints
            )
            if not out.rewrites.questions:
                continue  # nothing to ask: the summary shows the attacker's failures
            p = out.rewrites.save().text
        out.probes.append((p, await run(store, with_probe(cfg, p), progress, endpoints)))
    return out


# ---- statistics -----------------------------------------------------------------------------

#: item id -> (the item as asked, its grade; None = not graded)
Items = Mapping[str, "tuple[Sample, Grade | None]"]


@dataclass(frozen=True)
class ProbeRun:
    """One run in a comparison: the unperturbed one (``probe`` "") or a probe's."""

    probe: str
    run_id: str
    items: Items
    #: the dataset key its items are stored under (the drill-down section that shows them)
    dataset: str = ""

    @property
    def kind(self) -> str:
        return self.probe.partition(":")[0]

    def values(self) -> dict[str, float | None]:
        return {sid: (g.value if g is not None else None) for sid, (_, g) in self.items.items()}


@dataclass(frozen=True, kw_only=True)
class Drop:
    """A probe's accuracy against the unperturbed run's, on the items both scored."""

    probe: str
    run_id: str
    dataset: str
    n_items: int  # items the probe produced
    n_paired: int
    n_left_out: int  # items in both runs with a failed or unscored answer on either side
    n_not_applicable: (
        int  # unperturbed items the probe left out (NOTA on a multi-answer item, a failed rewrite)
    )
    baseline: float | None
    probed: float | None
    drop: float | None  # baseline - probe
    ci95: tuple[float, float] | None
    mcnemar: tuple[int, int, float] | None  # (right -> wrong, wrong -> right, p)


@dataclass(frozen=True, kw_only=True)
class Consistency:
    n_orders: int  # the unperturbed order and each permutation
    n: int
    n_consistent: int
    rate: float | None
    ci95: tuple[float, float] | None
    n_left_out: int  # items without a readable choice in some order (or missing from a run)


@dataclass(frozen=True, kw_only=True)
class Position:
    position: str
    n_answers: int  # readable single-choice answers to items that have this position
    keyed: float | None  # share of them whose key is here
    chosen: float | None  # share of them choosing it
    excess: float | None  # chosen - keyed
    n_key_elsewhere: int
    attraction: float | None  # share choosing it when the key is elsewhere
    attraction_ci95: tuple[float, float] | None
    n_keyed: int
    accuracy_keyed: float | None  # accuracy when the key is here
    accuracy_keyed_ci95: tuple[float, float] | None


@dataclass(frozen=True)
class PositionBias:
    runs: tuple[str, ...]
    n_answers: int
    n_left_out: int  # unscored, unreadable or multiple-answer
    positions: tuple[Position, ...]


@dataclass(frozen=True, kw_only=True)
class Rewrite:
    sample_id: str
    original: str
    rewritten: str
    baseline: float | None
    probed: float | None


@dataclass(frozen=True, kw_only=True)
class Summary:
    benchmark: str
    model: str
    label: str
    baseline_run: str
    baseline_accuracy: float | None
    baseline_n: int
    drops: tuple[Drop, ...]
    consistency: Consistency | None
    position_bias: PositionBias
    rewrites: tuple[Rewrite, ...] = ()
    attacker_failures: Mapping[str, str] = field(default_factory=dict)
    #: False where the items come from a report limited to the first few (--max-items).
    complete: bool = True
    seed: int = 0

    def to_json(self) -> dict[str, Any]:
        return cast(dict[str, Any], to_jsonable(asdict(self)))


def paired_drop(base: ProbeRun, probe: ProbeRun, seed: int = 0, n_resamples: int = 2000) -> Drop:
    from grandrounds.analyses.leaderboard import paired_compare

    bv, pv = base.values(), probe.values()
    common = bv.keys() & pv.keys()
    c = paired_compare(bv, pv, seed=seed, n_resamples=n_resamples)
    return Drop(
        probe=probe.probe,
        run_id=probe.run_id,
        dataset=probe.dataset,
        n_items=len(pv),
        n_paired=c.n,
        n_left_out=len(common) - c.n,
        n_not_applicable=len(bv.keys() - pv.keys()),
        baseline=c.mean_a,
        probed=c.mean_b,
        drop=c.diff,
        ci95=c.ci95,
        mcnemar=c.mcnemar,
    )


def mean_of(runs: Sequence[ProbeRun], label: str) -> ProbeRun:
    """Per item, the mean value over ``runs`` (items every run scored), as one run to pair with."""
    vals = [r.values() for r in runs]
    ids = set.intersection(*(set(v) for v in vals)) if vals else set()
    items: dict[str, tuple[Sample, Grade | None]] = {}
    for sid in sorted(ids):
        got = [v[sid] for v in vals]
        mean = None if any(x is None for x in got) else sum(cast(float, x) for x in got) / len(got)
        items[sid] = (runs[0].items[sid][0], Grade(sample_id=sid, value=mean))
    return ProbeRun(label, "", items)


def chosen_texts(sample: Sample, grade: Grade | None) -> frozenset[str] | None:
    """The text(s) of the chosen option(s), or None without a readable choice."""
    if grade is None or grade.value is None or not grade.extracted:
        return None
    if any(k not in sample.choices for k in grade.extracted):
        return None
    return frozenset(sample.choices[k] for k in grade.extracted)


def consistency(runs: Sequence[ProbeRun]) -> Consistency:
    """Share of items whose chosen option text is the same in every run (Wilson 95% CI)."""
    ids = set(runs[0].items).union(*(r.items for r in runs[1:]))
    n = agree = 0
    for sid in ids:
        picks = [chosen_texts(*r.items[sid]) if sid in r.items else None for r in runs]
        if any(p is None for p in picks):
            continue
        n += 1
        agree += len(set(picks)) == 1
    return Consistency(
        n_orders=len(runs),
        n=n,
        n_consistent=agree,
        rate=agree / n if n else None,
        ci95=wilson_ci(agree, n),
        n_left_out=len(ids) - n,
    )


def position_bias(runs: Sequence[ProbeRun]) -> PositionBias:
    """Per option position, pooled over ``runs``: chosen vs keyed shares, attraction, accuracy when keyed."""
    answers: list[tuple[Sample, str]] = []
    left_out = 0
    for r in runs:
        for sample, grade in r.items.values():
            picked = grade.extracted if grade is not None and grade.value is not None else None
            key = str(sample.target)
            if (
                sample.metadata.get("multi")
                or len(key) != 1
                or not picked
                or len(picked) != 1
                or picked not in sample.choices
            ):
                left_out += 1
                continue
            answers.append((sample, picked))
    letters = sorted({k for s, _ in answers for k in s.choices}, key=LETTERS.find)
    positions = []
    for k in letters:
        here = [(s, p) for s, p in answers if k in s.choices]
        keyed = [p for s, p in here if s.target == k]
        elsewhere = [p for s, p in here if s.target != k]
        n, n_keyed, n_else = len(here), len(keyed), len(elsewhere)
        chosen = sum(1 for _, p in here if p == k)
        attracted = sum(1 for p in elsewhere if p == k)
        right = sum(1 for p in keyed if p == k)
        positions.append(
            Position(
                position=k,
                n_answers=n,
                keyed=n_keyed / n if n else None,
                chosen=chosen / n if n else None,
                excess=(chosen - n_keyed) / n if n else None,
                n_key_elsewhere=n_else,
                attraction=attracted / n_else if n_else else None,
                attraction_ci95=wilson_ci(attracted, n_else),
                n_keyed=n_keyed,
                accuracy_keyed=right / n_keyed if n_keyed else None,
                accuracy_keyed_ci95=wilson_ci(right, n_keyed),
            )
        )
    return PositionBias(
        tuple(r.probe or "unperturbed" for r in runs), len(answers), left_out, tuple(positions)
    )


def rewrites_shown(base: ProbeRun, probe: ProbeRun) -> list[Rewrite]:
    bv = base.values()
    out = []
    for sid, (sample, grade) in probe.items.items():
        info = sample.metadata.get("probe") or {}
        out.append(
            Rewrite(
                sample_id=sid,
                original=str(info.get("original_question", "")),
                rewritten=str(sample.metadata.get("question", "")),
                baseline=bv.get(sid),
                probed=grade.value if grade is not None else None,
            )
        )
    return out


def summarize(
    base: ProbeRun,
    probes: Sequence[ProbeRun],
    *,
    benchmark: str,
    model: str,
    label: str = "",
    seed: int = 0,
    n_resamples: int = 2000,
    attacker_failures: Mapping[str, str] | None = None,
    complete: bool = True,
) -> Summary:
    """Every figure of a probe set: drops (each probe, and the mean over permutations), consistency
    and position bias over the unperturbed order and the permutations, the rewrites shown."""
    drops = [paired_drop(base, p, seed, n_resamples) for p in probes]
    perms = [p for p in probes if p.kind == "permute"]
    if len(perms) > 1:
        drops.append(
            paired_drop(base, mean_of(perms, f"permute (mean of {len(perms)})"), seed, n_resamples)
        )
    bv = [v for v in base.values().values() if v is not None]
    rewrites = [r for p in probes if p.kind == "rewrite" for r in rewrites_shown(base, p)]
    return Summary(
        benchmark=benchmark,
        model=model,
        label=label or model,
        baseline_run=base.run_id,
        baseline_accuracy=sum(bv) / len(bv) if bv else None,
        baseline_n=len(bv),
        drops=tuple(drops),
        consistency=consistency([base, *perms]) if perms else None,
        position_bias=position_bias([base, *perms]),
        rewrites=tuple(rewrites),
        attacker_failures=dict(attacker_failures or {}),
        complete=complete,
        seed=seed,
    )


def outcome_run(probe: str, outcome: RunOutcome) -> ProbeRun:
    return ProbeRun(
        probe,
        outcome.run.id,
        {s.id: (s, g) for s, g in zip(outcome.samples, outcome.grades)},
        outcome.run.dataset_sha256,
    )


def summarize_set(ps: ProbeSet, seed: int = 0, n_resamples: int = 2000) -> Summary:
    from grandrounds.analyses.leaderboard import run_label

    r = ps.baseline.result
    return summarize(
        outcome_run("", ps.baseline),
        [outcome_run(p, o) for p, o in ps.probes],
        benchmark=r.benchmark,
        model=r.model,
        label=run_label(r.fingerprint, with_id=False),
        seed=seed,
        n_resamples=n_resamples,
        attacker_failures=ps.rewrites.failures if ps.rewrites else None,
    )


# ---- probe runs in the store (the report) ---------------------------------------------------


def spec_args(spec: str) -> tuple[str, dict[str, Any]]:
    """``medqa{"probe":"nota"}`` -> ("medqa", {"probe": "nota"})."""
    name, brace, rest = spec.partition("{")
    try:
        args = json.loads(brace + rest) if brace else {}
    except ValueError:
        args = {}
    return name, args if isinstance(args, dict) else {}


def _setting(row: ResultRow) -> tuple[str, str | None]:
    """What a probe run shares with its unperturbed run (everything but the probe and its items), and its probe."""
    from grandrounds.analyses.leaderboard import COMPARABLE_FIELDS

    fp = row.fingerprint
    name, args = spec_args(str(fp.get("benchmark", row.benchmark)))
    probe = args.pop("probe", None)
    same = {f: fp.get(f) for f in COMPARABLE_FIELDS if f not in ("benchmark", "dataset_sha256")}
    return canonical_json(
        {"benchmark": [name, args], "model": row.model, "gen": fp.get("gen_params"), **same}
    ), probe


def stored_groups(
    rows: Sequence[ResultRow],
) -> list[tuple[ResultRow, list[tuple[str, ResultRow]]]]:
    """Each unperturbed result with the probe results that pair with it (newest result per run)."""
    latest = {r.run_id: r for r in rows}
    bases: dict[str, list[ResultRow]] = {}
    probes = []
    for r in latest.values():
        key, probe = _setting(r)
        if probe is None:
            bases.setdefault(key, []).append(r)
        else:
            probes.append((key, str(probe), r))
    groups: dict[str, tuple[ResultRow, list[tuple[str, ResultRow]]]] = {}
    for key, probe, r in probes:
        found = [
            b
            for b in bases.get(key, [])
            if probe_dataset_hash(str(b.fingerprint.get("dataset_sha256")), probe)
            == r.fingerprint.get("dataset_sha256")
        ]
        if found:
            base = found[-1]
            groups.setdefault(base.run_id, (base, []))[1].append((probe, r))
    return list(groups.values())


def report_summaries(
    rows: Sequence[ResultRow],
    sections: Sequence[Section],
    seed: int = 0,
    n_resamples: int = 2000,
) -> list[Summary]:
    """The summaries of every probe set among ``rows``, from the report's drill-down ``sections``."""
    from grandrounds.analyses.leaderboard import run_label

    by_data = {(s.benchmark, s.dataset): s for s in sections}

    def items(row: ResultRow) -> tuple[dict[str, tuple[Sample, Grade | None]], bool]:
        sec = by_data.get((row.benchmark, str(row.fingerprint.get("dataset_sha256"))))
        out: dict[str, tuple[Sample, Grade | None]] = {}
        for item in sec.items if sec else ():
            for a in item.answers:
                if a.row.key == row.key and a.grade is not None:
                    out[item.sample.id] = (item.sample, a.grade)
        return out, len(out) >= row.n + row.n_unscored

    summaries = []
    for base, probes in stored_groups(rows):
        got = [
            (p, r, *items(r))
            for p, r in [("", base), *sorted(probes, key=lambda pr: _order(pr[0]))]
        ]
        runs = [
            ProbeRun(p, r.run_id, its, str(r.fingerprint.get("dataset_sha256", "")))
            for p, r, its, _ in got
        ]
        summaries.append(
            summarize(
                runs[0],
                runs[1:],
                benchmark=base.benchmark,
                model=base.model,
                label=run_label(base.fingerprint, with_id=False),
                seed=seed,
                n_resamples=n_resamples,
                complete=all(ok for *_, ok in got),
            )
        )
    return summaries


def _order(probe: str) -> tuple[int, int, str]:
    """Probes in the order of :data:`KINDS`, permutations by seed."""
    try:
        p = Probe.parse(probe)
    except ConfigError:
        return (len(KINDS), 0, probe)
    return (KINDS.index(p.kind), p.seed, probe)
