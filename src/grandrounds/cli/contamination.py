"""The ``contamination`` command: the masked-option guess and Min-K% probability, each against a
reworded control, stored apart from scores (:mod:`grandrounds.analyses.contamination`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from grandrounds.cli import common as cli
from grandrounds.core import eventloop
from grandrounds.core.display import SafeConsole, fmt, fmt_ci

console = SafeConsole()
err_console = SafeConsole(stderr=True)


def _signed(v: Any) -> str:
    return "n/a" if v is None else f"{v:+.3f}"


def probe_table(rows: list[dict[str, Any]], title: str) -> Table:
    """Stored probe results (as :func:`~grandrounds.analyses.contamination.stored_results` reads
    them) as one table: original, control, their paired difference and its 95% CI."""
    t = Table(title=title)
    for col in (
        "benchmark",
        "model",
        "probe",
        "unit",
        "items",
        "paired",
        "original",
        "control",
        "difference",
        "95% CI",
    ):
        t.add_column(col)
    for r in rows:
        x = r.get("extra") or {}
        t.add_row(
            str(r.get("benchmark", "")).split(":", 1)[-1],
            str(r.get("model", "")),
            str(x.get("probe", "")),
            str(x.get("unit", "")),
            str(x.get("n_items", "")),
            str(r.get("n", "")),
            fmt(x.get("original")),
            fmt(x.get("control")),
            _signed(r.get("score")),
            fmt_ci(r.get("ci95")),
        )
    return t


def print_stored(st: Any, benchmark: str | None = None) -> None:
    """The contamination section of the leaderboard: shown beside the scores, never among them."""
    from grandrounds.analyses.contamination import stored_results

    rows = stored_results(st, benchmark)
    if rows:
        console.print(
            probe_table(
                rows, "Contamination probes (not scores: original wording vs reworded control)"
            )
        )


def contamination(
    benchmark: str = typer.Argument(
        ...,
        help="a benchmark (masked-option needs a multiple-choice one: medqa, medmcqa, mmlu-medical, cmb, demo, ...)",
    ),
    model: str = typer.Option(..., "--model", "-m", help="PROVIDER/MODEL"),
    probe: list[str] = typer.Option(
        [],
        "--probe",
        help="repeat: masked-option, min-k (default: both where the provider serves log-probabilities)",
    ),
    data: Path | None = typer.Option(
        None, "--data", help="local file or directory in the original format"
    ),
    limit: int | None = typer.Option(None, "--limit", min=1, help="first N items in source order"),
    base_url: str = typer.Option(
        "", "--base-url", help="OpenAI-compatible base URL (else $OPENAI_BASE_URL)"
    ),
    concurrency: int | None = typer.Option(
        None, "--concurrency", min=1, help="calls in flight per endpoint"
    ),
    seed: int = typer.Option(
        0,
        "--seed",
        min=0,
        max=2**32 - 1,
        help="seed of the hidden-option rule, generation and the paired bootstrap",
    ),
    resamples: int = typer.Option(2000, "--resamples", min=100, help="paired bootstrap resamples"),
    model_opt: list[str] = typer.Option([], "--model-opt", help="provider option KEY=VALUE"),
    store: Path | None = cli.StoreOpt,
) -> None:
    """Probe MODEL for BENCHMARK's items seen verbatim: each probe's original and reworded-control figures and their
    paired difference with a 95% CI. Every call is stored: running again makes no call."""
    from grandrounds.analyses.contamination import ProbeConfig, run_probes
    from grandrounds.store import Store

    with cli.user_errors():
        cfg = ProbeConfig(
            benchmark=benchmark,
            model=model,
            data=data,
            base_url=base_url,
            limit=limit,
            probes=tuple(probe),
            seed=seed,
            provider_options=cli.parse_params(model_opt, "--model-opt"),
            concurrency=concurrency,
            resamples=resamples,
        )
        with Store(cli.store_path(store)) as st:
            results, stats = eventloop.run(run_probes(st, cfg))
    for line in cli.call_summary(stats, []):
        err_console.print(f"  {line}", style="dim")
    rows = [r.to_result() for r in results]
    console.print(
        probe_table(
            [
                {
                    "benchmark": r.benchmark,
                    "model": r.model,
                    "n": r.n,
                    "score": r.score,
                    "ci95": r.ci95,
                    "extra": r.extra,
                }
                for r in rows
            ],
            f"Contamination: {benchmark} · {model} (paired bootstrap seed {seed})",
        )
    )
    for r in results:
        if r.n_failed:
            err_console.print(
                f"{r.probe}: {r.n_failed} of {r.n_items} items left out (a call failed or gave no log-probabilities); running again retries them",
                style="yellow",
            )


def register(app: typer.Typer, store_path: Callable[[Path | None], Path], StoreOpt: Any) -> None:
    """Add ``contamination`` to ``app``."""
    app.command()(contamination)
