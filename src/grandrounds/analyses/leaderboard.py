"""Pure analysis over stored results: leaderboard, breakdown tables, comparability, paired comparison, agreement.

Nothing here reads the store; :mod:`grandrounds.analyses.collect` turns the store into the
plain rows these functions take. Every random number comes from an explicit seed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from grandrounds.core.hashing import canonical_json
from grandrounds.core.records import Breakdown, Cell
from grandrounds.scoring.stats import cohen_kappa, macro_f1, mcnemar_exact, paired_bootstrap

#: Fingerprint fields that must agree before two results may be ranked in one column.
COMPARABLE_FIELDS: tuple[str, ...] = (
    "benchmark",  # benchmark spec: subset, language, variant parameters
    "dataset_sha256",
    "grader",  # grader spec: name and typed parameters (judge mode, judge runs, panel vote ...)
    "templates",  # judge prompt templates
    "prompt_templates",  # the benchmark's own prompt templates
    "judges",  # judge models and their generation parameters
    "scoring",
    "answer_mode",
    "shuffle_options",
    "protocol",  # reference or grandrounds, with every setting it fixes and any deviation
    "simulator",  # an agent benchmark's simulated patient: its model and prompts (absent elsewhere)
    "limit",  # --limit N: the first N items are another item set than the whole benchmark
)
# Not "engine" (vLLM/SGLang name and version): it is part of what is measured, like the model, not
# of the setting it is measured in; a vLLM-served model and an API model are ranked in one column.
# Two engine versions of one model are two entries of that column (see latest_per_model), never
# one model's re-runs, and each entry names its engine (run_label, flags).

#: sample id -> per-answer value (None = unscored)
Values = Mapping[str, "float | None"]


@dataclass(frozen=True, kw_only=True)
class ResultRow:
    """One stored Result (run x grader) with the coverage of its verdicts."""

    run_id: str
    grader_fp: str
    benchmark: str
    model: str
    metric: str
    score: float | None
    ci95: tuple[float, float] | None
    n: int
    n_unscored: int
    coverage: float | None
    judge: str | None = None
    breakdown: Breakdown = field(default_factory=dict)
    fingerprint: Mapping[str, Any] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: complete | with failures (...) | interrupted: see :class:`grandrounds.store.RunState`.
    status: str = "complete"

    @property
    def key(self) -> tuple[str, str]:
        return (self.run_id, self.grader_fp)

    @property
    def protocol(self) -> str:
        return protocol_label(self.fingerprint)

    @property
    def n_truncated(self) -> int | None:
        """Answers cut off by the token limit (None: not recorded for this result)."""
        value = self.extra.get("n_truncated")
        return None if value is None else int(value)


def result_coverage(extra: Mapping[str, Any]) -> float | None:
    """The share of a result that was actually judged or read: the benchmark's verdict coverage
    where it reports one, else the answers neither failed, unreadable nor lost to a grader error.
    None when the result does not record it (stored before these counts existed)."""
    if extra.get("coverage") is not None:
        return float(extra["coverage"])
    n = extra.get("n_items")
    if not n:
        return None
    lost = sum(
        int(extra.get(k) or 0) for k in ("n_answer_failed", "n_unreadable", "n_grader_error")
    )
    return (int(n) - lost) / int(n)


#: Where a benchmark counts answers it scored wrong because no answer could be read from the reply
#: (the official readings count them wrong; the count keeps "wrong" and "unreadable" apart).
READ_NOTHING_KEYS = ("n_unextracted", "n_unextractable")


def unread_count(extra: Mapping[str, Any]) -> int | None:
    """Replies from which no answer was read: those left unscored (``n_unreadable``) and those the
    protocol scored wrong for it; None where the result counts neither."""
    keys = ("n_unreadable", *READ_NOTHING_KEYS)
    if not any(k in extra for k in keys):
        return None
    return sum(int(extra.get(k) or 0) for k in keys)


def protocol_label(fingerprint: Mapping[str, Any]) -> str:
    """The protocol's name, with ``*`` when a flag deviated from it; results stored before protocols
    existed were produced our way (``grandrounds``)."""
    proto = fingerprint.get("protocol")
    if not isinstance(proto, Mapping):
        return "grandrounds"
    return str(proto.get("name", "?")) + ("*" if proto.get("deviations") else "")


def engine_label(fingerprint: Mapping[str, Any]) -> str | None:
    """The engine that served the model, e.g. ``vllm 0.9.1`` (None: not an engine-served model)."""
    engine = fingerprint.get("engine")
    if not isinstance(engine, Mapping) or not engine.get("name"):
        return None
    return f"{engine['name']} {engine.get('version') or '?'}"


def run_label(
    fingerprint: Mapping[str, Any], judge: str | None = None, *, with_id: bool = True
) -> str:
    """What tells one result apart from another of the same model: engine and its version, answer
    mode, protocol, judge, limit and the run id, e.g. ``llamacpp/smollm2 · next-token · reference ·
    limit 20 · 3f2a9c1e`` or ``vllm/qwen · vllm 0.9.1 · generate · reference · 5be01d2a``."""
    parts = [str(fingerprint.get("model") or "?")]
    if engine_label(fingerprint):
        parts.append(str(engine_label(fingerprint)))
    if fingerprint.get("answer_mode"):
        parts.append(str(fingerprint["answer_mode"]))
    parts.append(protocol_label(fingerprint))
    if judge:
        parts.append(f"judge {judge}")
    if fingerprint.get("limit") is not None:
        parts.append(f"limit {fingerprint['limit']}")
    if with_id and fingerprint.get("run_id"):
        parts.append(str(fingerprint["run_id"])[:8])
    return " · ".join(parts)


def comparability(fingerprint: Mapping[str, Any]) -> str:
    """Canonical text of the fingerprint fields that decide whether scores are comparable."""
    return canonical_json({f: fingerprint.get(f) for f in COMPARABLE_FIELDS})


def fingerprint_diff(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Names of the comparability fields in which two fingerprints differ."""
    return [f for f in COMPARABLE_FIELDS if canonical_json(a.get(f)) != canonical_json(b.get(f))]


def latest_comparable_pair(
    ra: Sequence[ResultRow], rb: Sequence[ResultRow], ignore: tuple[str, ...] = ("limit",)
) -> tuple[ResultRow, ResultRow] | None:
    """Of two models' results (each oldest first), the pair that may be compared (the same
    comparability fields but ``ignore``) made of the newest runs: the pair whose older run is the
    newest, then whose newer run is; None when no run of one matches a run of the other."""
    best: tuple[tuple[int, int], ResultRow, ResultRow] | None = None
    for i, a in enumerate(ra):
        for j, b in enumerate(rb):
            if a.key == b.key or [
                f for f in fingerprint_diff(a.fingerprint, b.fingerprint) if f not in ignore
            ]:
                continue
            # positions from the end: 0 is a model's latest run
            rank = (max(len(ra) - 1 - i, len(rb) - 1 - j), min(len(ra) - 1 - i, len(rb) - 1 - j))
            if best is None or rank < best[0]:
                best = (rank, a, b)
    return None if best is None else (best[1], best[2])


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """A paired comparison of A and B on the samples both answered (diff = A - B)."""

    n: int
    mean_a: float | None
    mean_b: float | None
    diff: float | None
    ci95: tuple[float, float] | None
    tied: bool
    mcnemar: tuple[int, int, float] | None = None
    seed: int = 0


def paired_compare(a: Values, b: Values, seed: int = 0, n_resamples: int = 2000) -> Comparison:
    """Mean difference with a seeded paired bootstrap CI; exact McNemar when both are 0/1.

    Only samples both scored are used, so a failed call on either side never counts as wrong.
    "tied" means the 95% CI holds 0 (the two cannot be told apart on these samples).
    """
    ids = sorted(sid for sid in a.keys() & b.keys() if a[sid] is not None and b[sid] is not None)
    if not ids:
        return Comparison(n=0, mean_a=None, mean_b=None, diff=None, ci95=None, tied=True, seed=seed)
    xa = [float(v) for s in ids if (v := a[s]) is not None]  # (none is: ids has both known)
    xb = [float(v) for s in ids if (v := b[s]) is not None]
    diff, ci = paired_bootstrap(xa, xb, n_resamples=n_resamples, seed=seed)
    exact = all(v in (0.0, 1.0) for v in xa + xb)
    mc = mcnemar_exact([v == 1.0 for v in xa], [v == 1.0 for v in xb]) if exact else None
    tied = ci[0] <= 0.0 <= ci[1]
    return Comparison(
        n=len(ids),
        mean_a=sum(xa) / len(xa),
        mean_b=sum(xb) / len(xb),
        diff=diff,
        ci95=ci,
        tied=tied,
        mcnemar=mc,
        seed=seed,
    )


@dataclass(frozen=True, kw_only=True)
class Entry:
    """A result placed on a leaderboard: its setting (column), rank, tie group and flags."""

    row: ResultRow
    setting: int
    rank: int | None
    group: int | None
    flags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Board:
    """One benchmark: entries ranked only within a setting of identical comparability fields."""

    benchmark: str
    metric: str
    settings: int
    entries: tuple[Entry, ...]


#: What a leaderboard ranks by: the headline, or its lower bound (every unscored answer wrong).
RANK_BY = ("score", "lower-bound")


def ranked_value(r: ResultRow, rank_by: str = "score") -> float | None:
    """The figure ``r`` is ranked by: its score, or under ``lower-bound`` the bound stored beside
    it where answers were left unscored (its score where none were)."""
    if rank_by == "lower-bound" and r.score is not None:
        bounds = r.extra.get("bounds") or {}
        if bounds.get("lower") is not None:
            return float(bounds["lower"])
    return r.score


def leaderboard(
    rows: Sequence[ResultRow],
    values: Mapping[tuple[str, str], Values] | None = None,
    seed: int = 0,
    rank_by: str = "score",
) -> list[Board]:
    """Models x benchmarks, ranked within comparable settings, with tie groups and flags.

    Results whose comparability fields differ go to separate settings; every entry of a
    benchmark with more than one setting carries a flag naming what differs, so no reader
    ranks them in one column unawares. Within a setting, consecutive models whose paired
    CI against the group's leader holds 0 share a group ("tied"); without paired values
    (no common samples) overlapping 95% CIs are used instead and the flag says so.
    ``rank_by="lower-bound"`` orders by each result's lower bound (every unscored answer wrong),
    so unscored answers never lift a rank.
    """
    by_bench: dict[str, list[ResultRow]] = defaultdict(list)
    for r in rows:
        by_bench[r.benchmark].append(r)
    boards = []
    for bench in sorted(by_bench):
        settings: dict[str, list[ResultRow]] = {}
        for r in by_bench[bench]:
            settings.setdefault(comparability(r.fingerprint), []).append(r)
        settings = {k: latest_per_model(v) for k, v in settings.items()}
        ordered = sorted(settings.values(), key=lambda rs: -len(rs))
        ref = ordered[0][0].fingerprint
        entries: list[Entry] = []
        for i, group_rows in enumerate(ordered, start=1):
            flags: list[str] = []
            if len(ordered) > 1:
                if i == 1:
                    flags.append(f"setting 1 of {len(ordered)}: other settings are not comparable")
                else:
                    diff = ", ".join(fingerprint_diff(ref, group_rows[0].fingerprint))
                    flags.append(f"setting {i} of {len(ordered)}: differs from setting 1 in {diff}")
            entries.extend(_rank(group_rows, i, flags, values or {}, seed, rank_by))
        boards.append(Board(bench, ordered[0][0].metric, len(ordered), tuple(entries)))
    return boards


def latest_per_model(rows: Sequence[ResultRow]) -> list[ResultRow]:
    """One result per model (and engine version) in a setting: its latest complete one (else its
    latest), so a model is never ranked against itself. ``rows`` are oldest first; the kept row
    notes how many it hides. Runs of one model on two engine versions are two entries, each
    noting its engine: an upgrade of vLLM is a different thing measured, not a re-run."""
    by_model: dict[tuple[str, str | None], list[ResultRow]] = defaultdict(list)
    for r in rows:
        by_model[(r.model, engine_label(r.fingerprint))].append(r)
    engines: dict[str, int] = defaultdict(int)
    for model, _ in by_model:
        engines[model] += 1
    out = []
    for (model, engine), model_rows in by_model.items():
        complete = [r for r in model_rows if r.status == "complete"]
        keep = (complete or model_rows)[-1]
        hidden = len(model_rows) - 1
        if hidden:
            note = f"latest {'complete ' if complete else ''}of {len(model_rows)} runs of this model in this setting ({hidden} not ranked)"
            keep = replace(
                keep, extra=dict(keep.extra) | {"superseded": hidden, "superseded_note": note}
            )
        if engines[model] > 1:
            note = f"served by {engine}" if engine else "not served by an engine"
            keep = replace(
                keep,
                extra=dict(keep.extra)
                | {
                    "engine_note": f"{note}: ranked apart from this model's runs on other engine versions"
                },
            )
        out.append(keep)
    return out


def _rank(
    rows: list[ResultRow],
    setting: int,
    flags: list[str],
    values: Mapping[tuple[str, str], Values],
    seed: int,
    rank_by: str = "score",
) -> list[Entry]:
    scored = sorted(
        (r for r in rows if r.score is not None),
        key=lambda r: (-float(ranked_value(r, rank_by) or 0), r.model),
    )
    out: list[Entry] = []
    group, leader = 0, None
    for rank, r in enumerate(scored, start=1):
        extra: list[str] = [
            r.extra[k] for k in ("engine_note", "superseded_note") if r.extra.get(k)
        ]
        if r.status != "complete":
            extra.append(r.status)
        if rank_by == "lower-bound" and ranked_value(r, rank_by) != r.score:
            extra.append(f"ranked by its lower bound {ranked_value(r, rank_by):.3f}")
        if leader is None or not _tied(leader, r, values, seed, extra):
            group, leader = group + 1, r
        out.append(
            Entry(row=r, setting=setting, rank=rank, group=group, flags=tuple(flags + extra))
        )
    out.extend(
        Entry(
            row=r,
            setting=setting,
            rank=None,
            group=None,
            flags=tuple(
                flags + [r.extra[k] for k in ("engine_note",) if r.extra.get(k)] + ["no score"]
            ),
        )
        for r in rows
        if r.score is None
    )
    return out


def _tied(
    leader: ResultRow,
    r: ResultRow,
    values: Mapping[tuple[str, str], Values],
    seed: int,
    notes: list[str],
) -> bool:
    va, vb = values.get(leader.key), values.get(r.key)
    if va is not None and vb is not None:
        cmp = paired_compare(va, vb, seed=seed)
        if cmp.n:
            return cmp.tied
    notes.append("tie judged by CI overlap (no paired samples)")
    if leader.ci95 is None or r.ci95 is None:
        return False
    return leader.ci95[0] <= r.ci95[1] and r.ci95[0] <= leader.ci95[1]


@dataclass(frozen=True, kw_only=True)
class FamilyTable:
    """One breakdown family of a board, aligned over its entries: keys down, results across.

    ``cells[i]`` holds entry i's cells of this family (a key it lacks has no cell, never a
    guessed one); ``keys`` and ``metrics`` (every named metric any cell carries) are in
    first-seen order, so a benchmark's own order (an exam's subjects) is kept.
    """

    family: str
    keys: tuple[str, ...]
    metrics: tuple[str, ...]
    entries: tuple[Entry, ...]
    cells: tuple[Mapping[str, Cell], ...]

    def rows(self) -> Iterator[tuple[str, Entry, Cell]]:
        """(key, entry, cell) for every cell, grouped by key, entries in board order."""
        for key in self.keys:
            for entry, cells in zip(self.entries, self.cells):
                if key in cells:
                    yield key, entry, cells[key]


def breakdown_tables(board: Board) -> list[FamilyTable]:
    """The breakdown families of a board's results, in first-seen order, one table each."""
    families: dict[str, None] = {}
    for e in board.entries:
        families.update(dict.fromkeys(e.row.breakdown))
    out = []
    for fam in families:
        cells = tuple(e.row.breakdown.get(fam, {}) for e in board.entries)
        keys = tuple(dict.fromkeys(k for c in cells for k in c))
        metrics = tuple(
            dict.fromkeys(m for c in cells for cell in c.values() for m in cell.metrics)
        )
        out.append(
            FamilyTable(family=fam, keys=keys, metrics=metrics, entries=board.entries, cells=cells)
        )
    return out


@dataclass(frozen=True)
class AgreementPair:
    """A judge verdict and a reviewer verdict on the same criterion of the same answer."""

    benchmark: str
    dimensions: tuple[str, ...]
    judge: str
    reviewer: str


@dataclass(frozen=True, kw_only=True)
class AgreementStat:
    n: int
    kappa: float | None
    macro_f1: float | None
    agree: float | None
    n_judge_unknown: int


def agreement(pairs: Sequence[AgreementPair]) -> dict[str, dict[str, AgreementStat]]:
    """Judge-vs-reviewer agreement overall, by benchmark and by dimension.

    Cohen's kappa and macro-F1 (reviewer as reference) over criteria both rated met/unmet;
    criteria the judge left unknown are counted apart, never folded into a label.
    """
    groups: dict[str, dict[str, list[AgreementPair]]] = {
        "overall": defaultdict(list),
        "benchmark": defaultdict(list),
        "dimension": defaultdict(list),
    }
    for p in pairs:
        groups["overall"]["all"].append(p)
        groups["benchmark"][p.benchmark].append(p)
        for d in p.dimensions:
            groups["dimension"][d].append(p)
    return {name: {k: _agree(v) for k, v in sorted(g.items())} for name, g in groups.items()}


def _agree(pairs: Sequence[AgreementPair]) -> AgreementStat:
    known = [p for p in pairs if p.judge in ("met", "unmet") and p.reviewer in ("met", "unmet")]
    unknown = sum(1 for p in pairs if p.judge not in ("met", "unmet"))
    if not known:
        return AgreementStat(n=0, kappa=None, macro_f1=None, agree=None, n_judge_unknown=unknown)
    j = [p.judge for p in known]
    r = [p.reviewer for p in known]
    agree = sum(1 for x, y in zip(j, r) if x == y) / len(known)
    return AgreementStat(
        n=len(known),
        kappa=cohen_kappa(r, j),
        macro_f1=macro_f1(r, j),
        agree=agree,
        n_judge_unknown=unknown,
    )
