"""Contamination probes: has a model seen a benchmark's items verbatim?

Two probes, each a paired comparison of the benchmark's own wording with a reworded control
built by a fixed rule of ours (:func:`reword`), reported with a paired bootstrap 95% CI
(:func:`grandrounds.scoring.stats.paired_bootstrap`), stored apart from scores and never mixed
into them (results under the benchmark name ``contamination:<benchmark>``, which
:func:`grandrounds.analyses.collect.result_rows` leaves out of every leaderboard).

**Masked-option guess** (TS-Guessing; Deng et al. 2024, "Investigating Data Contamination in
Modern Benchmarks for Large Language Models", NAACL 2024), for multiple-choice sets and any chat
model: one wrong option, chosen by a seeded rule (:func:`hidden_letter`), is hidden; the model
sees the question and the other options and is asked to write the hidden option's exact text.
A reply counts when it equals the hidden text after :func:`normalise` (case, spaces and
punctuation). The control asks the same of the item reworded by :func:`reword` (question and every
option) and compares with the reworded hidden text: an option that is easy to guess is guessed in
both, a memorised wording only in the original.

**Min-K% probability** (Shi et al. 2024, "Detecting Pretraining Data from Large Language Models",
ICLR 2024), for providers with prompt log-probabilities: the mean of the lowest k% log-probs of
the question's pieces, the original against the reworded question; a seen text has fewer
surprising pieces, so a higher score. The pieces here are words, not tokens (so every provider
gives the same pieces): one ``loglikelihood`` request per question whose context is the first
word and whose continuations are the growing prefixes of the rest (`` w2``, `` w2 w3``, ...);
each word's log-prob is the difference of two consecutive prefixes' sums. At most
:data:`MAX_WORDS` words of each question are scored.

Every call goes through the run layer's cached executor, so everything is stored and a re-run
makes no call.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from grandrounds.analyses.labels import question_of
from grandrounds.core.errors import ConfigError
from grandrounds.core.records import GenParams, Message, Request, RequestKind, Result, Sample
from grandrounds.scoring.stats import paired_bootstrap

if TYPE_CHECKING:
    from grandrounds.run.executor import Executor
    from grandrounds.store import Store

#: The prefix of the benchmark name contamination results are stored under.
PREFIX = "contamination:"
PROBES = ("masked-option", "min-k")
#: Words of a question scored by Min-K% (the cost of one question grows with the square of it).
MAX_WORDS = 64
#: The share of lowest log-probs Min-K% averages (the paper's k = 20%).
MIN_K = 0.2

#: The rewording rule of the control: each word on the left is replaced by the one on the right
#: (whole words, any case, the first letter's case kept). Meaning-preserving swaps common in exam
#: questions and options; where none applies, the control item is the original one.
CONTROL_SYNONYMS: dict[str, str] = {
    "patient": "individual",
    "patients": "individuals",
    "following": "subsequent",
    "likely": "probable",
    "presents": "comes",
    "history": "background",
    "shows": "reveals",
    "showed": "revealed",
    "reveals": "shows",
    "increased": "raised",
    "decreased": "lowered",
    "elevated": "raised",
    "treatment": "therapy",
    "therapy": "treatment",
    "diagnosis": "diagnostic conclusion",
    "symptoms": "complaints",
    "examination": "exam",
    "physician": "doctor",
    "doctor": "physician",
    "woman": "female",
    "man": "male",
    "boy": "male child",
    "girl": "female child",
    "administration": "giving",
    "which": "what",
    "most": "best",
    "appropriate": "suitable",
    "cause": "reason",
    "medication": "drug",
    "drug": "medication",
    "disease": "disorder",
    "disorder": "condition",
    "infection": "infectious process",
    "acute": "sudden-onset",
    "chronic": "long-standing",
    "severe": "serious",
    "mild": "slight",
    "pain": "discomfort",
    "normal": "unremarkable",
    "abnormal": "atypical",
    "test": "assay",
    "risk": "danger",
    "immediately": "at once",
    "and": "as well as",
    "of": "for",
    "the": "this",
    "with": "accompanied by",
    "in": "within",
}
_WORD = re.compile(r"[A-Za-z]+")
_LEADING = re.compile(
    r"^\s*(?:(?:the\s+)?hidden\s+option\s*(?:is|:)|answer\s*:|option\s*:|option\s*[A-Z]\s*[:.)]|[A-Z]\s*[:.)])\s*",
    re.I,
)


def reword(text: str) -> str:
    """``text`` reworded by :data:`CONTROL_SYNONYMS` (a fixed rule: the same text, the same result)."""

    def swap(m: re.Match[str]) -> str:
        word = m.group(0)
        new = CONTROL_SYNONYMS.get(word.lower())
        if new is None:
            return word
        return new[0].upper() + new[1:] if word[0].isupper() else new

    return _WORD.sub(swap, text)


def normalise(text: str) -> str:
    """Case-folded, punctuation dropped (Unicode P* categories), spaces collapsed."""
    kept = "".join(
        " " if unicodedata.category(c).startswith("P") else c
        for c in unicodedata.normalize("NFKC", text).casefold()
    )
    return " ".join(kept.split())


def hidden_letter(sample: Sample, seed: int = 0) -> str | None:
    """The wrong option hidden for ``sample`` (a seeded hash of its id picks among the wrong
    letters in order), or None where it has fewer than two wrong options."""
    wrong = sorted(
        k
        for k in (sample.choices or {})
        if k != sample.target and k not in str(sample.target or "")
    )
    if len(wrong) < 2:
        return None
    pick = int(hashlib.sha256(f"{seed}:{sample.id}".encode()).hexdigest(), 16) % len(wrong)
    return wrong[pick]


def guess_messages(question: str, choices: dict[str, str], hidden: str) -> tuple[Message, ...]:
    """The masked-option prompt: the question, every option but ``hidden`` shown, ``hidden`` as [MASK]."""
    lines = [f"{k}. {'[MASK]' if k == hidden else v}" for k, v in choices.items()]
    text = (
        "Complete the [MASK] in the options of this exam question: write the hidden option's exact text, "
        "and nothing else.\n\n"
        + question
        + "\n\n"
        + "\n".join(lines)
        + f"\n\nThe text of option {hidden}:"
    )
    return (Message("user", text),)


def read_guess(reply: str | None) -> str:
    """The option text a reply writes: its first non-empty line without a leading label or quotes."""
    first = next((ln for ln in (reply or "").splitlines() if ln.strip()), "")
    return _LEADING.sub("", first).strip().strip("\"'“”*`").strip()


@dataclass(frozen=True)
class ItemPair:
    """One item's figure under the original wording and under the control (None: unknown)."""

    sample_id: str
    original: float | None
    control: float | None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ProbeResult:
    """A probe's paired comparison over the items where both figures are known."""

    probe: str
    benchmark: str
    model: str
    n_items: int
    n_paired: int
    original: float | None
    control: float | None
    difference: float | None
    ci95: tuple[float, float] | None
    unit: str
    n_failed: int
    items: list[ItemPair]

    def to_result(self) -> Result:
        """As a stored Result under ``contamination:<benchmark>`` (the difference is its "score")."""
        extra = {
            k: v
            for k, v in asdict(self).items()
            if k not in ("items", "benchmark", "model", "ci95")
        }
        extra["items"] = [asdict(i) for i in self.items]
        return Result(
            benchmark=PREFIX + self.benchmark,
            model=self.model,
            judge=None,
            metric=f"{self.probe} difference ({self.unit})",
            score=self.difference,
            ci95=self.ci95,
            n=self.n_paired,
            n_unscored=self.n_items - self.n_paired,
            extra=extra,
        )


def summarize(
    probe: str,
    benchmark: str,
    model: str,
    items: Sequence[ItemPair],
    unit: str,
    seed: int = 0,
    resamples: int = 2000,
) -> ProbeResult:
    """Both means and their paired difference with a bootstrap CI over the items known both ways."""
    pairs = [
        (i.original, i.control) for i in items if i.original is not None and i.control is not None
    ]
    a = [float(x) for x, _ in pairs]
    b = [float(y) for _, y in pairs]
    diff, ci = paired_bootstrap(a, b, resamples, seed) if pairs else (None, None)
    return ProbeResult(
        probe=probe,
        benchmark=benchmark,
        model=model,
        n_items=len(items),
        n_paired=len(pairs),
        original=sum(a) / len(a) if a else None,
        control=sum(b) / len(b) if b else None,
        difference=diff,
        ci95=ci,
        unit=unit,
        n_failed=sum(1 for i in items if i.original is None or i.control is None),
        items=list(items),
    )


def _request(
    executor: Executor,
    messages: tuple[Message, ...],
    params: GenParams,
    kind: RequestKind = "chat",
    continuations: tuple[str, ...] = (),
) -> Request:
    p = executor.provider
    return Request(
        provider=p.spec.provider,
        model=p.spec.model,
        messages=messages,
        params=params,
        kind=kind,
        continuations=continuations,
        base_url=p.request_base_url(),
    )


async def masked_option(
    executor: Executor, samples: Sequence[Sample], seed: int = 0, max_tokens: int = 64
) -> list[ItemPair]:
    """The masked-option guess on every sample with a hidden option: 1.0 / 0.0 per wording."""
    params = GenParams(temperature=0.0, max_tokens=max_tokens, seed=seed)

    async def one(s: Sample, hidden: str) -> ItemPair:
        question = question_of(s)[0]
        choices = {k: str(v) for k, v in (s.choices or {}).items()}
        control = {k: reword(v) for k, v in choices.items()}
        got = []
        for q, ch in ((question, choices), (reword(question), control)):
            resp = await executor(_request(executor, guess_messages(q, ch, hidden), params))
            got.append(
                None
                if not resp.ok
                else float(normalise(read_guess(resp.text)) == normalise(ch[hidden]))
            )
        return ItemPair(
            s.id,
            got[0],
            got[1],
            {
                "hidden": hidden,
                "reworded": control[hidden] != choices[hidden] or reword(question) != question,
            },
        )

    todo = [(s, h) for s in samples if (h := hidden_letter(s, seed)) is not None]
    return list(await asyncio.gather(*(one(s, h) for s, h in todo)))


def min_k(word_logprobs: Sequence[float], k: float = MIN_K) -> float | None:
    """Mean of the lowest ``k`` share (at least one) of the log-probs (Shi et al. 2024, eq. 1)."""
    if not word_logprobs:
        return None
    low = sorted(word_logprobs)[: max(1, int(len(word_logprobs) * k))]
    return sum(low) / len(low)


def word_prefixes(text: str) -> tuple[str, tuple[str, ...]]:
    """(the first word, the growing prefixes of the next words with their leading space)."""
    words = text.split()[:MAX_WORDS]
    rest = words[1:]
    return (words[0] if words else ""), tuple(
        " " + " ".join(rest[: i + 1]) for i in range(len(rest))
    )


def word_logprobs(prefixes: Sequence[str], scores: dict[str, float]) -> list[float] | None:
    """Each word's log-prob from its prefix's sum minus the one before; None when one is missing."""
    out, before = [], 0.0
    for p in prefixes:
        total = scores.get(p)
        if total is None or not math.isfinite(total):
            return None
        out.append(total - before)
        before = total
    return out


async def min_k_probe(
    executor: Executor, samples: Sequence[Sample], k: float = MIN_K
) -> list[ItemPair]:
    """Min-K% of every sample's question, the original wording and the reworded one."""
    params = GenParams(temperature=0.0, max_tokens=1, seed=0)

    async def score(text: str) -> float | None:
        first, prefixes = word_prefixes(text)
        if not prefixes:
            return None
        resp = await executor(
            _request(executor, (Message("user", first),), params, "loglikelihood", prefixes)
        )
        lps = word_logprobs(prefixes, dict(resp.scores)) if resp.ok else None
        return None if lps is None else min_k(lps, k)

    async def one(s: Sample) -> ItemPair:
        question = question_of(s)[0]
        return ItemPair(
            s.id,
            await score(question),
            await score(reword(question)),
            {"reworded": reword(question) != question},
        )

    return list(await asyncio.gather(*(one(s) for s in samples)))


def check_probes(names: Sequence[str], kinds: frozenset[str]) -> list[str]:
    """The probes asked (all that the provider can serve when none is named); a ConfigError names what is wrong."""
    bad = [n for n in names if n not in PROBES]
    if bad:
        raise ConfigError(f"--probe {bad[0]!r}: choose from {', '.join(PROBES)}")
    if "min-k" in names and "loglikelihood" not in kinds:
        raise ConfigError(
            "--probe min-k needs prompt log-probabilities; this provider serves only "
            + ", ".join(sorted(kinds))
        )
    return list(names) or [p for p in PROBES if p != "min-k" or "loglikelihood" in kinds]


def store_result(store: Store, run_id: str, result: ProbeResult) -> None:
    """Store a probe's result under its run, as ``contamination:<benchmark>`` (never a score)."""
    store.put_result(run_id, f"{PREFIX}{result.probe}", result.to_result())


def stored_results(store: Store, benchmark: str | None = None) -> list[dict[str, Any]]:
    """Every stored probe result (``benchmark``'s only, when given), oldest first, as stored."""
    want = PREFIX + benchmark if benchmark else None
    return [
        r
        for _, fp, r in store.results()
        if fp.startswith(PREFIX)
        and str(r.get("benchmark", "")).startswith(PREFIX)
        and (want is None or r.get("benchmark") == want)
    ]


def probe_rows(
    store: Store, benchmark: str | None = None, models: Any = None
) -> list[dict[str, Any]]:
    """The stored probe results as flat rows for reports (of ``benchmark``, of the ``models`` given
    when given): the benchmark probed, the model, the probe and its unit, the items and the pairs
    compared, both rates and their paired difference with its 95% CI. Never scores."""
    out = []
    for r in stored_results(store, benchmark):
        if models is not None and r.get("model") not in models:
            continue
        x = r.get("extra") or {}
        ci = r.get("ci95")
        out.append(
            {
                "benchmark": str(r.get("benchmark", "")).removeprefix(PREFIX),
                "model": r.get("model"),
                "probe": x.get("probe"),
                "unit": x.get("unit"),
                "n_items": x.get("n_items"),
                "n_paired": r.get("n"),
                "n_failed": x.get("n_failed"),
                "original": x.get("original"),
                "control": x.get("control"),
                "difference": r.get("score"),
                "ci95_low": ci[0] if ci else None,
                "ci95_high": ci[1] if ci else None,
            }
        )
    return out


@dataclass(frozen=True, kw_only=True)
class ProbeConfig:
    """What ``grandrounds contamination`` was asked: the benchmark, the model and where its data is."""

    benchmark: str
    model: str
    data: Any = None
    base_url: str = ""
    limit: int | None = None
    probes: tuple[str, ...] = ()
    seed: int = 0
    provider_options: dict[str, Any] = field(default_factory=dict)
    concurrency: int | None = None
    resamples: int = 2000


async def run_probes(store: Store, cfg: ProbeConfig) -> tuple[list[ProbeResult], Any]:
    """Load the benchmark's items, ask each probe through the cached executor, store the results
    under a run of their own (``contamination:<benchmark>``); (the results, the executor's call stats)."""
    from grandrounds import __version__
    from grandrounds.core.hashing import content_hash
    from grandrounds.providers.base import check_model
    from grandrounds.run.config import build_benchmark, make_provider
    from grandrounds.run.executor import Executor
    from grandrounds.run.samples import limited
    from grandrounds.sources.data import resolve
    from grandrounds.store import RunRecord

    bench = build_benchmark(cfg.benchmark, {})
    options = check_model(cfg.model, cfg.provider_options, "chat")
    provider = make_provider(cfg.model, cfg.base_url, **options)
    probes = check_probes(cfg.probes, frozenset(provider.request_kinds))
    root = resolve(bench, cfg.data)
    samples = list(limited(bench.iter_samples(root), cfg.limit))
    if not any(s.choices for s in samples) and "masked-option" in probes:
        raise ConfigError(
            f"{cfg.benchmark}: the masked-option probe needs multiple-choice items (this benchmark's have no options)"
        )
    dataset = bench.dataset_hash(root)
    ident = {
        "probe": "contamination",
        "benchmark": str(bench.spec()),
        "model": str(provider.spec),
        "base_url": provider.request_base_url(),
        "dataset": dataset,
        "limit": cfg.limit,
        "seed": cfg.seed,
    }
    run = store.ensure_run(
        RunRecord(
            id=content_hash(ident)[:16],
            benchmark=PREFIX + bench.name,
            benchmark_spec=str(bench.spec()),
            model=str(provider.spec),
            options={"probes": probes, "seed": cfg.seed, "limit": cfg.limit},
            dataset_sha256=dataset,
            package_version=__version__,
            gen_params={},
            data_source=str(root),
        )
    )
    executor = Executor(store, provider, cfg.concurrency, seed=cfg.seed)
    out = []
    try:
        if "min-k" in probes:  # a server whose log-probs are not right is refused (logprob_probe)
            await provider.check_logprobs("loglikelihood")
        for probe in probes:
            items = await (
                masked_option(executor, samples, cfg.seed)
                if probe == "masked-option"
                else min_k_probe(executor, samples)
            )
            unit = "exact-match rate" if probe == "masked-option" else "Min-K% log-prob, nats"
            result = summarize(
                probe, bench.name, str(provider.spec), items, unit, cfg.seed, cfg.resamples
            )
            store_result(store, run.id, result)
            out.append(result)
    finally:
        await provider.aclose()
    return out, executor.stats
