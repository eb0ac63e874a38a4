"""CLI commands of the reporting layer: leaderboard, compare, report, view, review-queue."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from grandrounds.core.display import SafeConsole, fmt, fmt_ci

#: Markup off and control characters escaped: sample ids, keys, model names and server text print as written.
console = SafeConsole()


StorePath = Callable[[Path | None], Path]

#: ``--store`` of the commands that read a team store too (text: a DSN is not a path).
ReaderStoreOpt = typer.Option(
    None,
    "--store",
    help="SQLite store (default $GRANDROUNDS_STORE or ./grandrounds.db), or a team store: postgresql://...",
)


def reader_store(store_path: StorePath, store: str | None) -> Any:
    """The store a read command reads, read-only: the SQLite file, or the team store its DSN names
    (``--store postgresql://...`` or ``$GRANDROUNDS_STORE``)."""
    import os

    from grandrounds.store.team.dsn import is_team_dsn

    given = store or os.environ.get("GRANDROUNDS_STORE")
    if is_team_dsn(given):
        from grandrounds.store.team.connection import TeamStore

        return TeamStore(str(given))
    from grandrounds.store import Store

    return Store(store_path(Path(store) if store else None), readonly=True)


def viewer_store(store_path: StorePath, store: str | None) -> Path | str:
    """What ``view`` serves: the SQLite file's path, or the team store's DSN."""
    import os

    from grandrounds.store.team.dsn import is_team_dsn

    given = store or os.environ.get("GRANDROUNDS_STORE")
    if is_team_dsn(given):
        return str(given)
    return store_path(Path(store) if store else None)


#: Seeds as NumPy's generators take them (the bootstrap draws from ``default_rng(seed)``).
SEED_MAX = 2**32 - 1


def _leaderboard_command(store_path: StorePath, StoreOpt: Any) -> Callable[..., None]:
    """The ``leaderboard`` command, bound to the CLI's store option."""

    def leaderboard(
        benchmark: str | None = typer.Option(None, "--benchmark", "-b", help="only this benchmark"),
        with_reviews: bool = typer.Option(
            False,
            "--with-reviews",
            help="also show mean per-answer values with clinician reviews applied, and judge-reviewer agreement",
        ),
        seed: int = typer.Option(
            0,
            "--seed",
            min=0,
            max=SEED_MAX,
            help="seed of the paired bootstrap used for tie groups",
        ),
        breakdowns: bool = typer.Option(
            True, "--breakdowns/--no-breakdowns", help="per-dimension / subject / category tables"
        ),
        rank_by: str = typer.Option(
            "score",
            "--rank-by",
            help="score | lower-bound (each headline with every unscored answer counted wrong)",
        ),
        store: str | None = ReaderStoreOpt,
    ) -> None:
        """Models x benchmarks: score, 95% CI, n, coverage; tied models grouped; incomparable settings flagged."""
        from grandrounds.analyses.leaderboard import RANK_BY

        if rank_by not in RANK_BY:
            console.print(
                f"error: --rank-by {rank_by!r}: choose one of {', '.join(RANK_BY)}", markup=False
            )
            raise typer.Exit(2)
        from grandrounds.cli.contamination import print_stored
        from grandrounds.reports import boards

        with reader_store(store_path, store) as st:
            found = boards(st, benchmark, seed, rank_by=rank_by)
            if not found:
                console.print(
                    f"no results in {st.path}" + (f" for {benchmark}" if benchmark else "")
                )
            for b in found:
                _print_board(st, b, with_reviews)
                if breakdowns:
                    _print_breakdowns(b)
            print_stored(st, benchmark)  # contamination probes: beside the scores, never among them
            if with_reviews:
                _print_agreement(st)

    return leaderboard


def _compare_command(store_path: StorePath, StoreOpt: Any) -> Callable[..., None]:
    """The ``compare`` command, bound to the CLI's store option."""

    def compare(
        model_a: str = typer.Argument(..., help="a model (provider/model or model) or a run id"),
        model_b: str = typer.Argument(
            ..., help="a model or a run id (two runs of one model: pass their ids)"
        ),
        benchmark: str | None = typer.Option(None, "--benchmark", "-b", help="only this benchmark"),
        seed: int = typer.Option(
            0, "--seed", min=0, max=SEED_MAX, help="seed of the paired bootstrap"
        ),
        resamples: int = typer.Option(2000, "--resamples", min=1, help="bootstrap resamples"),
        store: str | None = ReaderStoreOpt,
    ) -> None:
        """A - B on the samples both answered: paired bootstrap CI (seeded), exact McNemar for 0/1 scores."""
        from grandrounds.core.errors import GrandroundsError
        from grandrounds.reports.compare import compare_models

        with reader_store(store_path, store) as st:
            try:
                rows = compare_models(st, model_a, model_b, benchmark, seed, resamples)
            except GrandroundsError as e:
                console.print(f"error: {e}", markup=False)
                raise typer.Exit(2) from None
        if not rows:
            console.print(f"no benchmark has results for both {model_a!r} and {model_b!r}")
            raise typer.Exit(1)
        t = Table(title=f"{model_a} - {model_b} (paired bootstrap, seed {seed})")
        served = any(
            any(c.engines()) for c in rows
        )  # vLLM/SGLang name and version, when either side had one
        for col in (
            "benchmark",
            *(("A engine", "B engine") if served else ()),
            "n paired",
            "A",
            "B",
            "A - B",
            "95% CI",
            "McNemar b/c/p",
            "verdict",
        ):
            t.add_column(col)
        for c in rows:
            cells = c.cells()
            t.add_row(
                *cells[:1], *(c.engines() if served else ()), *cells[1:]
            )  # a version is the server's text: the console reads no markup
        console.print(t)
        _print_choices(rows, model_a, model_b)

    return compare


def _print_choices(rows: list[Any], model_a: str, model_b: str) -> None:
    """Under the comparison: which runs were compared where the latest differ, and the runs to
    choose from where no run of A matches one of B."""
    from grandrounds.core.display import safe_text
    from grandrounds.reports.compare import candidate_lines

    for c in rows:
        if c.note:
            console.print(
                safe_text(f"{c.benchmark}: {c.note}"), markup=False, highlight=False, soft_wrap=True
            )
        if c.candidates:
            console.print(
                safe_text(
                    f"{c.benchmark}: no run of {model_a} has the settings of a run of {model_b}; their runs:"
                ),
                markup=False,
                highlight=False,
                soft_wrap=True,
            )
            for line in candidate_lines(c):
                console.print("  " + safe_text(line), markup=False, highlight=False, soft_wrap=True)
            console.print(
                "  to compare them, run one model again with the settings of one of the other's runs "
                "(the values above), then `grandrounds compare` again",
                markup=False,
                highlight=False,
                soft_wrap=True,
            )


def _report_command(store_path: StorePath, StoreOpt: Any) -> Callable[..., None]:
    """The ``report`` command, bound to the CLI's store option."""

    def report(
        fmt: str = typer.Option(
            "html", "--format", "-f", help="html | md | csv | xlsx | json | parquet"
        ),
        out: Path = typer.Option(
            ...,
            "--out",
            "-o",
            help="file to write (csv and parquet also write <stem>.samples and <stem>.breakdowns beside it)",
        ),
        benchmark: str | None = typer.Option(None, "--benchmark", "-b", help="only this benchmark"),
        max_items: int | None = typer.Option(
            None, "--max-items", min=1, help="questions per benchmark in the drill-down"
        ),
        seed: int = typer.Option(
            0,
            "--seed",
            min=0,
            max=SEED_MAX,
            help="seed of the paired bootstrap used for tie groups",
        ),
        run: list[str] = typer.Option(
            [],
            "--run",
            help="only this run (id, or its first 6+ characters, as `grandrounds runs` shows); repeatable",
        ),
        store: str | None = ReaderStoreOpt,
    ) -> None:
        """Write the leaderboard and every answer to one file (HTML: self-contained, works offline)."""
        from grandrounds.cli.common import user_errors
        from grandrounds.reports import build_report

        try:
            with reader_store(store_path, store) as st:
                with user_errors():
                    run_ids = report_runs(st, run, benchmark) if run else None
                paths = build_report(st, fmt, out, benchmark, seed, max_items, run_ids=run_ids)
        except ValueError as e:
            raise typer.BadParameter(str(e)) from None
        for p in paths:
            console.print(f"wrote {p} ({p.stat().st_size / 1e6:.2f} MB)")

    return report


def report_runs(st: Any, given: list[str], benchmark: str | None) -> set[str]:
    """The full ids of the runs ``--run`` names (ids or prefixes), each with a stored result (of
    ``benchmark``, when one is given), or a one-line error naming the run and the store."""
    from grandrounds.cli.common import stored_run
    from grandrounds.core.errors import ConfigError

    ids: set[str] = set()
    for text in given:
        rec = stored_run(st, text)
        if st.latest_grader_fp(rec.id) is None:
            raise ConfigError(
                f"run {rec.id} in {st.path} has no result yet: it did not finish "
                "(run the same `grandrounds run` command again to finish it)"
            )
        if benchmark and rec.benchmark != benchmark:
            raise ConfigError(
                f"run {rec.id} in {st.path} is a {rec.benchmark} run, not {benchmark} (--benchmark)"
            )
        ids.add(rec.id)
    return ids


def _view_command(store_path: StorePath, StoreOpt: Any) -> Callable[..., None]:
    """The ``view`` command, bound to the CLI's store option."""

    def view(
        host: str = typer.Option(
            "127.0.0.1",
            "--host",
            help="address to listen on (the default serves this machine only; any other needs the access token printed at start)",
        ),
        port: int = typer.Option(
            8765, "--port", min=0, max=65535, help="port to listen on (0: any free port, printed)"
        ),
        allow_host: list[str] = typer.Option(
            [],
            "--allow-host",
            help="another name the viewer may be reached by (Host header), e.g. a DNS name of this machine; repeatable",
        ),
        store: str | None = ReaderStoreOpt,
    ) -> None:
        """Serve the local web viewer over the store (browse, filter, search, review)."""
        from grandrounds.viewer.server import serve

        serve(
            viewer_store(store_path, store),
            host,
            port,
            log=lambda msg: console.print(msg, markup=False, highlight=False, soft_wrap=True),
            allow_hosts=tuple(allow_host),
        )

    return view


def _review_queue_command(store_path: StorePath, StoreOpt: Any) -> Callable[..., None]:
    """The ``review-queue`` command, bound to the CLI's store option."""

    def review_queue(
        share: float = typer.Option(
            0.05, "--share", min=0.0, max=1.0, help="random share of the other verdicts to queue"
        ),
        seed: int = typer.Option(0, "--seed", min=0, max=SEED_MAX, help="seed of the random share"),
        show: int = typer.Option(20, "--show", min=0, help="list this many unreviewed queue items"),
        store: Path | None = StoreOpt,
    ) -> None:
        """Queue unknown verdicts, judge-panel disagreements and a seeded random share for clinician review."""
        from grandrounds.analyses.reviews import ReviewError, fill_queue, queue
        from grandrounds.store import Store

        with Store(store_path(store)) as st:
            try:
                added = fill_queue(st, share, seed)
            except ReviewError as e:
                raise typer.BadParameter(str(e)) from None
            console.print(
                "added: "
                + (", ".join(f"{k} {v}" for k, v in sorted(added.items())) or "nothing new")
            )
            items = queue(st, show)
        t = Table(title="Unreviewed queue (open them in `grandrounds view`)")
        for col in ("run", "sample", "criterion", "reason"):
            t.add_column(col)
        for q in items:
            t.add_row(q["run_id"], q["sample_id"], q["criterion_id"] or "(answer)", q["reason"])
        console.print(t)

    return review_queue


def register(app: typer.Typer, store_path: StorePath, StoreOpt: Any) -> None:
    """Add the reporting commands to ``app``."""
    app.command()(_leaderboard_command(store_path, StoreOpt))
    app.command()(_compare_command(store_path, StoreOpt))
    app.command()(_report_command(store_path, StoreOpt))
    app.command()(_view_command(store_path, StoreOpt))
    app.command("review-queue")(_review_queue_command(store_path, StoreOpt))


def _print_board(st: Any, b: Any, with_reviews: bool) -> None:
    from grandrounds.analyses.reviews import reviewed_values

    t = Table(
        title=f"{b.benchmark} ({b.metric})"
        + (f"  ⚠ {b.settings} non-comparable settings" if b.settings > 1 else "")
    )
    cols = [
        "set",
        "rank",
        "model",
        "mode",
        "run",
        "score",
        "95% CI",
        "n",
        "unscored",
        "coverage",
        "truncated",
        "protocol",
        "judge",
        "flags",
    ]
    from grandrounds.run.costs import usage_cells

    usage = [usage_cells(e.row.extra) for e in b.entries]
    if any(any(u) for u in usage):  # tokens (in+out) and cost of the calls behind each result
        cols[cols.index("truncated") + 1 : cols.index("truncated") + 1] = ["tokens", "cost"]
    agreement = _judge_agreement(st, b)
    if agreement:
        cols.insert(cols.index("judge") + 1, "judge agreement")
    if with_reviews:
        cols += ["mean (judge)", "mean (reviews)"]
    for c in cols:
        t.add_column(c)
    sizes: dict[Any, int] = {}
    for e in b.entries:
        sizes[(e.setting, e.group)] = sizes.get((e.setting, e.group), 0) + 1
    for e, (tokens, cost) in zip(b.entries, usage):
        r = e.row
        rank = (
            "-"
            if e.rank is None
            else str(e.rank) + (" tied" if sizes[(e.setting, e.group)] > 1 else "")
        )
        ci = fmt_ci(r.ci95)
        cells = [
            str(e.setting),
            rank,
            r.model,
            str(r.fingerprint.get("answer_mode") or ""),
            r.run_id[:8],
            fmt(r.score),
            ci,
            str(r.n),
            str(r.n_unscored),
            fmt(r.coverage),
            fmt(r.n_truncated),
            r.protocol,
            r.judge or "",
            "; ".join(e.flags),
        ]
        if "cost" in cols:
            cells[cols.index("tokens") : cols.index("tokens")] = [tokens, cost]
        if agreement:
            cells.insert(cols.index("judge agreement"), agreement.get(r.key, ""))
        if with_reviews:
            run = st.get_run(r.run_id)
            judge_vals = [
                v for v in st.grade_values(r.run_id, r.grader_fp).values() if v is not None
            ]
            rev = (
                [
                    v
                    for v in reviewed_values(
                        st, r.run_id, r.grader_fp, run.benchmark, run.dataset_sha256
                    ).values()
                    if v is not None
                ]
                if run
                else []
            )
            cells += [
                fmt(sum(judge_vals) / len(judge_vals) if judge_vals else None),
                fmt(sum(rev) / len(rev) if rev else None),
            ]
        t.add_row(*cells)
    console.print(t)
    if agreement:
        from grandrounds.analyses.judge_validation import AGREEMENT_LEGEND

        console.print(AGREEMENT_LEGEND, markup=False, highlight=False, style="dim")


def _judge_agreement(st: Any, b: Any) -> dict[Any, str]:
    """Each HealthBench-family result's judge agreement with physicians, where it was measured."""
    if not b.benchmark.startswith("healthbench"):
        return {}
    from grandrounds.analyses.judge_validation import agreement_by_result

    return agreement_by_result(st, [e.row for e in b.entries])


def _print_breakdowns(b: Any, max_keys: int = 40) -> None:
    """One table per breakdown family (subject, category, kind, error_type, theme, axis, ...): a row
    per key and result with score, 95% CI, n, unscored and the family's named metrics. A family
    with more than ``max_keys`` keys is named, not printed (it would not read as a table)."""
    from grandrounds.analyses.leaderboard import breakdown_tables

    for fam in breakdown_tables(b):
        if len(fam.keys) > max_keys:
            console.print(
                f"{b.benchmark} by {fam.family}: {len(fam.keys)} keys, too many to print (see `grandrounds report`)"
            )
            continue
        t = Table(title=f"{b.benchmark} by {fam.family}")
        for col in (
            fam.family,
            "model",
            "score",
            "95% CI",
            "n",
            "unscored",
            *(m.replace("_", " ") for m in fam.metrics),
        ):
            t.add_column(
                col
            )  # metric names with spaces wrap in a narrow terminal instead of being cut
        for key, e, c in fam.rows():
            model = f"{e.row.model} [{e.setting}]" if b.settings > 1 else e.row.model
            metrics = (fmt(c.metrics[m]) if m in c.metrics else "" for m in fam.metrics)
            t.add_row(
                key, model, fmt(c.score), fmt_ci(c.ci95), str(c.n), str(c.n_unscored), *metrics
            )  # keys are data: the console reads no markup
        console.print(t)


def _print_agreement(st: Any) -> None:
    from grandrounds.analyses.leaderboard import agreement
    from grandrounds.analyses.reviews import agreement_pairs

    stats = agreement(agreement_pairs(st))
    t = Table(title="Judge vs clinician reviewers (criteria rated met/unmet by both)")
    for c in ("by", "group", "n", "kappa", "macro-F1", "agreement", "judge unknown"):
        t.add_column(c)
    for by, groups in stats.items():
        for name, s in groups.items():
            t.add_row(
                by,
                name,
                str(s.n),
                fmt(s.kappa),
                fmt(s.macro_f1),
                fmt(s.agree),
                str(s.n_judge_unknown),
            )
    console.print(t)
