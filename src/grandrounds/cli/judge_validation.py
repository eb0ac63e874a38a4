"""CLI command of judge validation: ``grandrounds validate-judge healthbench-meta --judge SPEC``."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from grandrounds.cli.flags import TPM_METAVAR, tpm_option
from grandrounds.cli.judge_flags import (
    JudgeBaseUrlOpt,
    JudgeConcurrencyOpt,
    JudgeJsonOpt,
    MaxReaskOpt,
    judge_max_tokens_opt,
    judge_temperature_opt,
    seed_opt,
)
from grandrounds.core import eventloop
from grandrounds.core.display import SafeConsole, fmt, fmt_ci
from grandrounds.core.files import write_text

console = SafeConsole()
err_console = SafeConsole(stderr=True)

StorePath = Callable[[Path | None], Path]
#: Validation suites ``validate-judge`` knows.
SUITES = ("healthbench-meta",)
#: Exit code when no row could be judged because the judge's calls failed (as ``run``).
NOTHING_JUDGED = 3


def _validate_judge_command(StoreOpt: Any) -> Callable[..., None]:
    def validate_judge(
        suite: str = typer.Argument(
            ...,
            help="validation set: healthbench-meta (HealthBench's physician-labelled meta-evaluation)",
        ),
        judge: str | None = typer.Option(
            None, "--judge", help="judge PROVIDER/MODEL[@BASE_URL] (default: the protocol's judge)"
        ),
        judge_base_url: str = JudgeBaseUrlOpt,
        data: Path | None = typer.Option(
            None,
            "--data",
            help="local copy of the meta-eval JSONL (default: download and cache the public file)",
        ),
        limit: int | None = typer.Option(
            None,
            "--limit",
            min=1,
            help="N rows, the ones simple-evals' num_examples=N picks (random.Random(0).sample)",
        ),
        protocol: str = typer.Option(
            "reference",
            "--protocol",
            help="reference (the official grader prompt and settings) | grandrounds",
        ),
        judge_temperature: float | None = judge_temperature_opt(),
        judge_max_tokens: int | None = judge_max_tokens_opt(),
        judge_json: bool = JudgeJsonOpt,
        judge_concurrency: int | None = JudgeConcurrencyOpt,
        judge_rpm: int | None = typer.Option(
            None,
            "--judge-rpm",
            min=1,
            help="judge calls started per minute, retries included (vendor rate limits; default: no limit)",
        ),
        judge_tpm: str | None = typer.Option(
            None,
            "--judge-tpm",
            callback=tpm_option,
            metavar=TPM_METAVAR,
            help="tokens of judge calls started per minute, retries included: N counts prompt + max tokens (corrected to reported usage); input=N,output=N sets separate limits, as Anthropic's (default: no limit)",
        ),
        max_reask: int = MaxReaskOpt,
        seed: int = seed_opt("the bootstraps and of the judge's calls"),
        out: Path | None = typer.Option(
            None, "--out", help="write every figure as JSON to this file"
        ),
        store: Path | None = StoreOpt,
    ) -> None:
        """Measure a judge's agreement with physicians: pairwise precision, recall and balanced F1 of the
        judge and of the physicians, overall and per category (HealthBench meta-evaluation)."""
        from grandrounds.analyses.judge_validation import ValidateConfig, validate
        from grandrounds.cli.common import call_summary, interrupted, store_path, user_errors
        from grandrounds.core.errors import ConfigError
        from grandrounds.run.progress import RichProgress
        from grandrounds.store import Store

        with user_errors():
            if suite not in SUITES:
                raise ConfigError(f"unknown validation set {suite!r} (known: {', '.join(SUITES)})")
            cfg = ValidateConfig(
                judge=judge,
                base_url=judge_base_url,
                protocol=protocol,
                data=data,
                limit=limit,
                judge_overrides={"temperature": judge_temperature, "max_tokens": judge_max_tokens},
                json_object=judge_json,
                concurrency=judge_concurrency,
                rpm=judge_rpm,
                tpm=judge_tpm,
                max_reask=max_reask,
                seed=seed,
            )
            try:
                with Store(store_path(store)) as st, RichProgress(err_console) as prog:
                    outcome = eventloop.run(validate(st, cfg, prog))
            except KeyboardInterrupt:  # Ctrl-C or SIGTERM
                raise interrupted() from None
        print_agreement(outcome.record.summary, outcome.record.metrics, outcome.record.judge)
        for line in call_summary(None, [(outcome.judge.spec, outcome.judge_stats)]):
            err_console.print(f"  {line}", style="dim")
        if out:
            doc = {
                "judge": outcome.record.judge,
                "protocol": outcome.record.protocol,
                "summary": outcome.record.summary,
                "metrics": outcome.record.metrics,
                "verdicts": outcome.record.verdicts,
            }
            write_text(out, json.dumps(doc, indent=1, ensure_ascii=False))
            err_console.print(f"wrote {out}")
        s = outcome.record.summary
        if s["n_unknown"]:
            err_console.print(
                f"{s['n_unknown']} of {s['n_rows']} rows have no judge label ({s['n_failed']} failed calls, "
                f"{s['n_unknown'] - s['n_failed']} unreadable replies): left out of the judge's figures; "
                "re-running the same command retries failed calls",
                style="yellow",
            )
        if s["n_judged"] == 0 and s["n_failed"]:
            err_console.print(
                "no row could be judged: the judge's calls failed (see above)", style="red"
            )
            raise typer.Exit(NOTHING_JUDGED)

    return validate_judge


def print_agreement(summary: Mapping[str, Any], metrics: Mapping[str, Any], judge: str) -> None:
    """The judge's and the physicians' figures: overall, then balanced F1 per category."""
    phys = metrics["physicians"]["summary"]
    mine, theirs = metrics["judge"]["overall"], phys["overall"]
    t = Table(title=f"{judge} vs physicians: pairwise agreement (HealthBench meta-evaluation)")
    for col in ("figure", "judge", f"physicians (mean of {phys['n_physicians']})"):
        t.add_column(col)
    for metric in ("precision", "recall", "f1"):
        for cls in ("pos", "neg", "balanced"):
            name = f"{metric}_{cls}"
            label = f"{'F1' if metric == 'f1' else metric} {cls}"
            t.add_row(
                label,
                fmt((mine.get(name) or {}).get("value")),
                fmt((theirs.get(name) or {}).get("mean")),
            )
    t.add_row("F1 balanced 95% CI", fmt_ci(metrics["judge_ci95"]["overall"]), "")
    console.print(t)
    c = Table(title="balanced F1 by category")
    c.add_column("category", overflow="fold")  # category names are long: wrapped, never cut
    for col in ("judge", "95% CI", "physicians (mean)", "judge pairs"):
        c.add_column(col)
    cats = metrics["judge"]["by_category"]
    for cat in sorted(set(cats) | set(phys["by_category"])):
        figs = cats.get(cat, {})
        pairs = sum((figs.get(k) or {}).get("n", 0) for k in ("precision_pos", "precision_neg"))
        c.add_row(
            cat,
            fmt((figs.get("f1_balanced") or {}).get("value")),
            fmt_ci(metrics["judge_ci95"]["by_category"].get(cat)),
            fmt((phys["by_category"].get(cat, {}).get("f1_balanced") or {}).get("mean")),
            str(int(pairs)),
        )
    console.print(c)
    below, n_phys = summary.get("physicians_below_judge"), summary.get("n_physicians_compared")
    standing = (
        f"; the judge's balanced F1 is above {below} of {n_phys} physicians'"
        if below is not None and n_phys
        else ""
    )
    console.print(
        f"rows {summary['n_rows']}: judged {summary['n_judged']}, unknown {summary['n_unknown']} "
        f"(failed calls {summary['n_failed']}); judge said met on {fmt(summary.get('judge_predicted_positive'))} of judged rows{standing}",
        markup=False,
        highlight=False,
    )


def register(app: typer.Typer, store_path: StorePath, StoreOpt: Any) -> None:
    """Add ``validate-judge`` to ``app`` (it creates the store if needed, so ``store_path`` is not used)."""
    app.command("validate-judge")(_validate_judge_command(StoreOpt))
