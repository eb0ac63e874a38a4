"""Pair two models' stored results per benchmark and compare them (the `compare` command)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grandrounds.analyses.collect import result_rows, values
from grandrounds.analyses.leaderboard import (
    COMPARABLE_FIELDS,
    Comparison,
    ResultRow,
    engine_label,
    fingerprint_diff,
    latest_comparable_pair,
    paired_compare,
    protocol_label,
)
from grandrounds.core.errors import ConfigError
from grandrounds.core.hashing import canonical_json
from grandrounds.store import Store


@dataclass(frozen=True, kw_only=True)
class ModelComparison:
    benchmark: str
    a: ResultRow
    b: ResultRow
    result: Comparison | None
    not_comparable: tuple[str, ...] = ()
    #: Why these runs and not the latest: the settings in which the latest runs differ ("" when the latest are compared).
    note: str = ""
    #: Where no run of A may be compared with a run of B: every run of both, to choose from.
    candidates: tuple[ResultRow, ...] = ()

    def verdict(self) -> str:
        if self.not_comparable:
            return (
                "not comparable: differs in "
                + ", ".join(self.not_comparable)
                + "; no run of one matches a run of the other (candidates below)"
            )
        c = self.result
        if c is None or c.diff is None:
            return "no common scored samples"
        if c.tied:
            return "tied (CI holds 0)"
        return "A better" if c.diff > 0 else "B better"

    def engines(self) -> tuple[str, str]:
        """The engine that served A and B, named as the leaderboard names it (``vllm 0.9.1``; "" for
        a model no engine served). Not a reason to refuse the comparison: the engine is part of what
        is measured, like the model."""
        return engine_label(self.a.fingerprint) or "", engine_label(self.b.fingerprint) or ""

    def cells(self) -> list[str]:
        c = self.result
        if c is None or c.diff is None or c.ci95 is None:
            return [self.benchmark, str(c.n if c else 0), "", "", "", "", "", self.verdict()]
        mc = f"{c.mcnemar[0]}/{c.mcnemar[1]}/p={c.mcnemar[2]:.3g}" if c.mcnemar else "n/a (not 0/1)"
        return [
            self.benchmark,
            str(c.n),
            f"{c.mean_a:.4f}",
            f"{c.mean_b:.4f}",
            f"{c.diff:+.4f}",
            f"[{c.ci95[0]:+.4f}, {c.ci95[1]:+.4f}]",
            mc,
            self.verdict(),
        ]


def _matches(row: ResultRow, query: str) -> bool:
    """A result is selected by its model (``provider/model`` or ``model``) or by its run id (or a
    prefix of at least 6 characters, as ``grandrounds runs`` shows them)."""
    if row.model == query or row.model.split("/", 1)[-1] == query:
        return True
    return len(query) >= 6 and row.run_id.startswith(query)


def compare_models(
    store: Store,
    model_a: str,
    model_b: str,
    benchmark: str | None = None,
    seed: int = 0,
    n_resamples: int = 2000,
) -> list[ModelComparison]:
    """A vs B on every benchmark (or one) where both have a result; newest result per model.

    Results whose comparability fields differ (judge, template, dataset...) are reported as
    not comparable instead of being compared.
    """
    rows = result_rows(store, benchmark)
    out = []
    for bench in sorted({r.benchmark for r in rows}):
        ra = [r for r in rows if r.benchmark == bench and _matches(r, model_a)]
        rb = [r for r in rows if r.benchmark == bench and _matches(r, model_b)]
        if not ra or not rb:
            continue
        a, b = ra[-1], rb[-1]
        if a.key == b.key:
            raise ConfigError(
                f"{model_a!r} and {model_b!r} select the same run ({a.run_id}) on {bench}: "
                "pass run ids (see `grandrounds runs`) to compare two runs of one model"
            )
        # Different --limit values are different item sets for a leaderboard, but a paired
        # comparison uses only the items both answered.
        diff = [f for f in fingerprint_diff(a.fingerprint, b.fingerprint) if f != "limit"]
        note = ""
        if diff:
            pair = latest_comparable_pair(ra, rb)
            if pair is None:
                out.append(
                    ModelComparison(
                        benchmark=bench,
                        a=a,
                        b=b,
                        result=None,
                        not_comparable=tuple(diff),
                        candidates=tuple(ra + rb),
                    )
                )
                continue
            note = (
                f"the latest runs ({a.run_id[:8]}, {b.run_id[:8]}) differ in {', '.join(diff)}; "
                f"compared the latest runs that match: {pair[0].run_id[:8]} and {pair[1].run_id[:8]}"
            )
            a, b = pair
        vals = values(store, [a.key, b.key])
        out.append(
            ModelComparison(
                benchmark=bench,
                a=a,
                b=b,
                result=paired_compare(vals[a.key], vals[b.key], seed=seed, n_resamples=n_resamples),
                note=note,
            )
        )
    return out


def _flat(value: Any, prefix: str) -> dict[str, str]:
    """A fingerprint field as dotted keys (two levels of nesting) -> canonical JSON of the value."""
    if isinstance(value, dict) and prefix.count(".") < 2:
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}"))
        return out
    return {prefix: canonical_json(value)}


def _short(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."


def candidate_lines(c: ModelComparison) -> list[str]:
    """One line per candidate run of a benchmark with no comparable pair: run id, model, and its
    values of the settings in which the candidates differ (nested settings by their dotted name,
    the protocol by its label as the leaderboard shows it)."""
    rows = c.candidates
    flats = [
        {
            k: v
            for f in COMPARABLE_FIELDS
            if f != "protocol"
            for k, v in _flat(r.fingerprint.get(f), f).items()
        }
        for r in rows
    ]
    keys = sorted({k for fl in flats for k in fl})
    differing = [k for k in keys if len({fl.get(k) for fl in flats}) > 1]
    protocols = {protocol_label(r.fingerprint) for r in rows}
    lines = []
    for r, fl in zip(rows, flats):
        parts = [f"{k}={_short(fl.get(k, 'absent'))}" for k in differing]
        if len(protocols) > 1:
            parts.append(f"protocol={protocol_label(r.fingerprint)}")
        lines.append(f"{r.run_id[:12]}  {r.model}  {', '.join(parts)}")
    return lines
