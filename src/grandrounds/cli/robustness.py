"""The ``robustness`` command: an exam unperturbed and under probes, compared item by item."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import typer
from rich.table import Table

from grandrounds.cli import common as cli
from grandrounds.cli.flags import RPM_HELP, TPM_HELP, TPM_METAVAR, tpm_option
from grandrounds.core import eventloop
from grandrounds.core.display import SafeConsole, fmt, fmt_ci
from grandrounds.core.files import write_text
from grandrounds.core.records import AnswerMode

console = SafeConsole()
err_console = SafeConsole(stderr=True)


def _signed(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.3f}"


def _signed_ci(ci: Any) -> str:
    return "n/a" if not ci else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"


def print_summary(s: Any) -> None:
    """A probe set's figures as tables: drops, consistency, position bias, the attacker's rewrites."""
    t = Table(
        title=f"Robustness: {s.benchmark} · {s.label} (unperturbed run {s.baseline_run}, paired bootstrap seed {s.seed})"
    )
    for col in (
        "probe",
        "items",
        "paired",
        "left out",
        "not applicable",
        "unperturbed",
        "probe acc",
        "drop",
        "95% CI",
        "McNemar b/c/p",
    ):
        t.add_column(col)
    for d in s.drops:
        mc = f"{d.mcnemar[0]}/{d.mcnemar[1]}/p={d.mcnemar[2]:.3g}" if d.mcnemar else "n/a"
        t.add_row(
            d.probe,
            str(d.n_items),
            str(d.n_paired),
            str(d.n_left_out),
            str(d.n_not_applicable),
            fmt(d.baseline),
            fmt(d.probed),
            _signed(d.drop),
            _signed_ci(d.ci95),
            mc,
        )
    console.print(t)
    c = s.consistency
    if c is not None:
        console.print(
            f"consistency over {c.n_orders} option orders: {c.n_consistent}/{c.n} items = {fmt(c.rate)} "
            f"95% CI {fmt_ci(c.ci95)} ({c.n_left_out} left out: no readable choice in some order)"
        )
    if s.position_bias.positions:  # questions with options (image benchmarks have none)
        _print_positions(s.position_bias)
    if s.attacker_failures or s.rewrites:
        why = Counter(s.attacker_failures.values()).most_common(3)
        console.print(
            f"attacker: {len(s.rewrites)} questions rewritten and asked, {len(s.attacker_failures)} not usable"
            + ("; " + ", ".join(f"{w} x{n}" for w, n in why) if why else "")
            + " (the rewritten questions are the rewrite run's samples: `grandrounds view`, `grandrounds report`)"
        )
    if not s.complete:
        console.print("computed over the items shown only", style="yellow")


def _print_positions(b: Any) -> None:
    pt = Table(
        title=f"Option positions over {', '.join(b.runs)} ({b.n_answers} answers, {b.n_left_out} left out)"
    )
    for col in (
        "position",
        "answers",
        "key here",
        "chosen",
        "chosen - key",
        "chosen when key elsewhere",
        "95% CI",
        "accuracy when key here",
        "95% CI ",
    ):
        pt.add_column(col)
    for p in b.positions:
        pt.add_row(
            p.position,
            str(p.n_answers),
            fmt(p.keyed),
            fmt(p.chosen),
            _signed(p.excess),
            fmt(p.attraction),
            fmt_ci(p.attraction_ci95),
            fmt(p.accuracy_keyed),
            fmt_ci(p.accuracy_keyed_ci95),
        )
    console.print(pt)


def robustness(
    benchmark: str = typer.Argument(
        ...,
        help="a multiple-choice benchmark (medqa, medmcqa, mmlu-medical, pubmedqa, cmb, demo, ...) or an image benchmark (vqa-rad, slake)",
    ),
    model: str = typer.Option(..., "--model", "-m", help="PROVIDER/MODEL"),
    probe: list[str] = typer.Option(
        [],
        "--probe",
        help="repeat: permute (option order, --seeds runs), nota (correct option -> 'None of the above'), "
        "distractors (--distractors extra options from other items), rewrite (needs --attacker); "
        "image benchmarks: blind (no image), blank (a blank image of the same size); "
        "or exact forms permute:SEED, distractors:N:SEED",
    ),
    seeds: int = typer.Option(
        3, "--seeds", min=1, help="option-order permutations for --probe permute (seeds 1..K)"
    ),
    distractors: int = typer.Option(
        2, "--distractors", min=1, help="options added by --probe distractors"
    ),
    attacker: str | None = typer.Option(
        None,
        "--attacker",
        help="PROVIDER/MODEL (or PROVIDER/MODEL@BASE_URL) that rewrites each question with clinically irrelevant, biasing details (implies --probe rewrite)",
    ),
    attacker_temperature: float = typer.Option(
        0.7, "--attacker-temperature", min=0.0, max=2.0, help="the attacker's temperature"
    ),
    attacker_max_tokens: int = typer.Option(
        1024, "--attacker-max-tokens", min=1, help="the attacker's max tokens per rewrite"
    ),
    attacker_reask: int = typer.Option(
        2, "--attacker-reask", min=0, help="re-asks of a rewrite that cannot be used"
    ),
    attacker_opt: list[str] = typer.Option(
        [], "--attacker-opt", help="attacker provider option KEY=VALUE"
    ),
    attacker_rpm: int | None = typer.Option(
        None,
        "--attacker-rpm",
        min=1,
        help="attacker calls started per minute of its model at its endpoint, retries included (the candidate's own model at its endpoint as attacker: the lower of this and --rpm holds for both; default: no limit of its own)",
    ),
    attacker_tpm: str | None = typer.Option(
        None,
        "--attacker-tpm",
        callback=tpm_option,
        metavar=TPM_METAVAR,
        help="tokens of attacker calls started per minute of its model at its endpoint, as --tpm counts them (N, or input=N,output=N; the candidate's own model at its endpoint as attacker: the lower of this and --tpm holds for both; default: no limit of its own)",
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
    rpm: int | None = typer.Option(None, "--rpm", min=1, help=RPM_HELP),
    tpm: str | None = typer.Option(
        None, "--tpm", callback=tpm_option, metavar=TPM_METAVAR, help=TPM_HELP
    ),
    timeout: float | None = typer.Option(
        None, "--timeout", min=0.001, help="seconds a call may take once sent (HTTP providers)"
    ),
    answer_mode: str = typer.Option(
        "generate", "--answer-mode", help=" | ".join(get_args(AnswerMode))
    ),
    protocol: str = typer.Option("reference", "--protocol", help="reference | grandrounds"),
    temperature: float | None = typer.Option(
        None,
        "--temperature",
        min=0.0,
        max=2.0,
        help="candidate temperature (default: the protocol's)",
    ),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", min=1, help="candidate max tokens (default: the protocol's)"
    ),
    seed: int = typer.Option(
        0, "--seed", min=0, max=2**32 - 1, help="generation seed of every run (as in `run`)"
    ),
    param: list[str] = typer.Option([], "--param", help="benchmark parameter KEY=VALUE"),
    threads: int | None = typer.Option(
        None, "--threads", min=1, help="CPU threads, for providers that take a threads option"
    ),
    model_opt: list[str] = typer.Option([], "--model-opt", help="provider option KEY=VALUE"),
    ci_seed: int = typer.Option(
        0, "--ci-seed", min=0, max=2**32 - 1, help="seed of the paired bootstrap"
    ),
    resamples: int = typer.Option(2000, "--resamples", min=100, help="paired bootstrap resamples"),
    json_out: Path | None = typer.Option(
        None, "--json", help="also write the figures to this JSON file"
    ),
    store: Path | None = cli.StoreOpt,
) -> None:
    """Run BENCHMARK unperturbed and under each --probe; print each probe's accuracy drop with a paired 95% CI,
    option-order consistency and per-position bias. Every call is stored: running again resumes."""
    from grandrounds.analyses.robustness import Attacker, expand_probes, run_probes, summarize_set
    from grandrounds.benchmarks.base import RunOptions
    from grandrounds.providers.base import split_endpoint
    from grandrounds.run.config import RunConfig
    from grandrounds.run.progress import RichProgress
    from grandrounds.store import Store

    with cli.user_errors():
        names = expand_probes(probe, seeds, distractors, attacker is not None)
        cfg = RunConfig(
            benchmark=benchmark,
            model=model,
            bench_params=cli.parse_params(param),
            data=data,
            base_url=base_url,
            # answer_mode is the typed text, checked against AnswerMode by the runner
            options=RunOptions(answer_mode=answer_mode, protocol=protocol, seed=seed),  # type: ignore[arg-type]
            gen_overrides={"temperature": temperature, "max_tokens": max_tokens},
            concurrency=concurrency,
            rpm=rpm,
            tpm=tpm,
            timeout=timeout,
            limit=limit,
            provider_options=cli.parse_params(model_opt, "--model-opt")
            | ({"threads": threads} if threads is not None else {}),
        )
        att = None
        if attacker:
            spec, url = split_endpoint(attacker)
            att = Attacker(
                spec=spec,
                base_url=url or base_url,
                options=cli.parse_params(attacker_opt, "--attacker-opt"),
                temperature=attacker_temperature,
                max_tokens=attacker_max_tokens,
                max_reask=attacker_reask,
                concurrency=concurrency,
                rpm=attacker_rpm,
                tpm=attacker_tpm,
            )
        prog = None
        try:  # this command writes runs: the store is created when missing, as by `run`
            with Store(cli.store_path(store)) as st, RichProgress(err_console) as prog:
                ps = eventloop.run(run_probes(st, cfg, names, att, prog))
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM
            raise cli.interrupted(prog) from None
    outcomes = [ps.baseline, *(o for _, o in ps.probes)]
    for o in outcomes:
        err_console.print(
            f"{o.result.benchmark} {o.run.benchmark_spec} · {o.result.model}: run {o.run.id}",
            style="dim",
        )
        for line in cli.call_summary(o.answer_stats, []):
            err_console.print(f"  {line}", style="dim")
    if ps.attacker_stats is not None and att is not None:
        for line in cli.call_summary(None, [(f"attacker {att.spec}", ps.attacker_stats)]):
            err_console.print(f"  {line.replace('judge attacker', 'attacker')}", style="dim")
    summary = summarize_set(ps, ci_seed, resamples)
    print_summary(summary)
    if json_out is not None:
        write_text(json_out, json.dumps(summary.to_json(), indent=2, ensure_ascii=False))
        err_console.print(f"wrote {json_out}")
    if (
        ps.baseline.grades
        and all(g.status != "scored" for g in ps.baseline.grades)
        and cli.any_failed(ps.baseline)
    ):
        err_console.print(
            "nothing could be scored in the unperturbed run: see the failures above; running again retries them",
            style="red",
        )
        raise typer.Exit(cli.NOTHING_SCORED)


def register(app: typer.Typer, store_path: Callable[[Path | None], Path], StoreOpt: Any) -> None:
    """Add ``robustness`` to ``app``."""
    app.command()(robustness)
