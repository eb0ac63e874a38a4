"""The ``grandrounds`` command."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import typer
from rich.table import Table
from rich.text import Text

from grandrounds.cli import (
    cluster,
    contamination,
    doctor,
    fetch,
    irt,
    judge_validation,
    reports,
    robustness,
    team,
)
from grandrounds.cli.common import (
    JUDGE_RPM_HELP,
    JUDGE_TPM_HELP,
    MAX_LOST_SHARE,
    NOTHING_SCORED,
    SEED_MAX,
    TEMPERATURE_MAX,
    EncodingOpt,
    StoreOpt,
    _Command,
    _Group,
    any_failed,
    call_summary,
    console,
    err_console,
    existing_store_path,
    handle_sigterm,
    interrupted,
    judge_configs,
    lost_share,
    parse_params,
    rerun_advice,
    store_path,
    stored_run,
    user_errors,
)
from grandrounds.cli.flags import RPM_HELP, TPM_HELP, TPM_METAVAR, tpm_option
from grandrounds.core import eventloop
from grandrounds.core.display import episode_summary, fallback_summary, safe_text, styled
from grandrounds.core.errors import ConfigError, GrandroundsError
from grandrounds.core.params import Param
from grandrounds.core.records import AnswerMode
from grandrounds.core.registry import BENCHMARKS, PROVIDERS, UnknownComponent

if TYPE_CHECKING:
    from grandrounds.benchmarks.base import Benchmark

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    cls=_Group,
    help="Evaluate LLMs on medical benchmarks, every answer shown.",
)


def bench_options(cls: type[Benchmark]) -> str:
    """The options a benchmark class declares, as flags (what ``run`` accepts for it)."""
    parts = []
    if cls.parameters:
        parts.append("--param " + ", ".join(p.name for p in cls.parameters))
    if cls.scoring_options:
        parts.append("--scoring " + ", ".join(p.name for p in cls.scoring_options))
    if cls.judge_modes:
        parts.append("--judge-mode " + "|".join(cls.judge_modes))
    if cls.takes_judge_runs:
        parts.append("--judge-runs")
    if cls.shuffles_options:
        parts.append("--shuffle-options")
    return "; ".join(parts)


def print_declared(title: str, params: Sequence[Param]) -> None:
    """Each declared option on its own line: name, type, default, choices, help."""
    if params:
        console.print(title, style="bold")
        for p in params:
            console.print(f"  {p.describe()}", markup=False, highlight=False)


#: The kinds `grandrounds list` groups benchmarks by, in its order.
KINDS = ("exam", "judged", "images", "agents", "other")


def benchmark_kind(cls: type[Benchmark]) -> str:
    """exam (multiple choice), judged (an LLM judge grades), images (asked with images), agents, other."""
    from grandrounds.benchmarks.mcq import MultipleChoiceBenchmark

    if cls.has_images:
        return "images"
    if cls.episodic:
        return "agents"
    if cls.needs_judge:
        return "judged"
    return "exam" if issubclass(cls, MultipleChoiceBenchmark) else "other"


@app.command("list")
def list_cmd(
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="also list every option's type, default and meaning"
    ),
    kind: str | None = typer.Option(
        None, "--kind", help=f"only benchmarks of this kind: {' | '.join(KINDS)}"
    ),
    lang: str | None = typer.Option(
        None, "--lang", help="only benchmarks in this language, e.g. en, zh, es"
    ),
) -> None:
    """Show the benchmarks (grouped by kind, filtered with --kind and --lang) and providers, with the options each accepts."""
    if kind is not None and kind not in KINDS:
        raise typer.BadParameter(f"{kind!r}: one of {', '.join(KINDS)}", param_hint="--kind")
    groups: dict[str, list[tuple[str | Text, ...]]] = {k: [] for k in KINDS}
    row: tuple[str | Text, ...]
    for name in BENCHMARKS.names():
        try:
            cls = BENCHMARKS.get(name)
            row = (
                name,
                cls.language,
                ", ".join(cls.answer_modes),
                "yes" if cls.needs_judge else "optional" if cls.takes_judge else "",
                bench_options(cls),
                cls.description,
            )
            if lang is None or cls.language == lang:
                groups[benchmark_kind(cls)].append(row)
        except Exception as e:  # a broken plugin should not hide the rest
            groups["other"].append((name, "", "", "", "", styled(f"unavailable: {e}", "red")))
    for k, rows in groups.items():
        if rows and kind in (None, k):
            t = Table(title=f"Benchmarks: {k} ({len(rows)})")
            for col in ("name", "lang", "modes", "judge", "options", "description"):
                t.add_column(col)
            for row in rows:
                t.add_row(*row)  # data, never markup: the console reads none
            console.print(t)
    if kind is None and lang is None:
        _list_providers()
    if verbose:
        _list_declared()


@app.command()
def show(
    benchmark: str = typer.Argument(..., help="a registered benchmark, e.g. healthbench"),
) -> None:
    """Show a benchmark: what it is, the files that define it (its module, its grader, the family's
    sources/ and scoring/ modules, the judge templates) and the options it accepts."""
    cls = BENCHMARKS.get(benchmark)
    from grandrounds.cli.anatomy import defining_files

    console.print(styled(f"{benchmark}: {cls.description}", "bold"))
    console.print("Defined in:")
    for f in defining_files(cls):
        console.print(styled(f"  src/grandrounds/{f}"))
    print_declared(f"{benchmark} --param", cls.parameters)
    print_declared(f"{benchmark} --scoring", cls.scoring_options)


def _list_providers() -> None:
    p = Table(title="Providers")
    p.add_column("name")
    p.add_column("spec example")
    p.add_column("options (--model-opt)")
    for name in PROVIDERS.names():
        try:
            pcls = PROVIDERS.get(name)
            p.add_row(name, pcls.example, ", ".join(o.name for o in pcls.model_options))
        except Exception as e:  # a broken plugin should not hide the rest
            p.add_row(name, styled(f"unavailable: {e}", "red"), "")
    console.print(p)


def _list_declared() -> None:
    """Every benchmark's and provider's declared options in full (broken plugins were shown above)."""
    for name in BENCHMARKS.names():
        with suppress(Exception):
            cls = BENCHMARKS.get(name)
            print_declared(f"{name} --param", cls.parameters)
            print_declared(f"{name} --scoring", cls.scoring_options)
    for name in PROVIDERS.names():
        with suppress(Exception):
            print_declared(f"{name} --model-opt", PROVIDERS.get(name).model_options)


FLAGGED_HELP = (
    "answers that address the grader (a verdict of their own, the judge's markers, words to the grader): "
    "keep (default) | exclude (unscored) | score-zero; counted in every result. Under exclude and "
    "score-zero, an answer whose judges' replies stay unreadable after every re-ask counts as flagged too"
)


@app.command()
def run(
    benchmark: str = typer.Argument(..., help="benchmark name (see `grandrounds list`)"),
    model: str = typer.Option("llamacpp/smollm2", "--model", "-m", help="PROVIDER/MODEL"),
    data: Path | None = typer.Option(
        None, "--data", help="local file or directory in the original format"
    ),
    encoding: str | None = EncodingOpt,
    limit: int | None = typer.Option(
        None,
        "--limit",
        min=1,
        help="first N questions (dialogues, cases) in source order; a question's turns count once",
    ),
    out: Path | None = typer.Option(
        None, "--out", help="write results.json and samples.jsonl here"
    ),
    store: Path | None = StoreOpt,
    base_url: str = typer.Option(
        "", "--base-url", help="OpenAI-compatible base URL (else $OPENAI_BASE_URL)"
    ),
    concurrency: int | None = typer.Option(
        None, "--concurrency", min=1, help="answer calls in flight per endpoint"
    ),
    judge_concurrency: int | None = typer.Option(
        None, "--judge-concurrency", min=1, help="judge calls in flight per judge endpoint"
    ),
    rpm: int | None = typer.Option(None, "--rpm", min=1, help=RPM_HELP),
    judge_rpm: int | None = typer.Option(None, "--judge-rpm", min=1, help=JUDGE_RPM_HELP),
    tpm: str | None = typer.Option(
        None, "--tpm", callback=tpm_option, metavar=TPM_METAVAR, help=TPM_HELP
    ),
    judge_tpm: str | None = typer.Option(
        None, "--judge-tpm", callback=tpm_option, metavar=TPM_METAVAR, help=JUDGE_TPM_HELP
    ),
    timeout: float | None = typer.Option(
        None,
        "--timeout",
        min=0.001,
        help="seconds a call may take once sent, answers and judges (HTTP providers; default 120)",
    ),
    answer_mode: str = typer.Option(
        "generate", "--answer-mode", help=" | ".join(get_args(AnswerMode))
    ),
    shuffle_options: bool = typer.Option(
        False, "--shuffle-options", help="permute options (recorded)"
    ),
    seed: int = typer.Option(
        0,
        "--seed",
        min=0,
        max=SEED_MAX,
        help="seed of option shuffling, bootstrap CIs and the seed sent with each call",
    ),
    protocol: str = typer.Option(
        "reference",
        "--protocol",
        help="reference (the official setup, default) | grandrounds (our refinements)",
    ),
    temperature: float | None = typer.Option(
        None,
        "--temperature",
        min=0.0,
        max=TEMPERATURE_MAX,
        help="candidate temperature (default: the protocol's; a change is recorded as a deviation)",
    ),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", min=1, help="candidate max tokens (default: the protocol's)"
    ),
    judge: list[str] = typer.Option(
        [],
        "--judge",
        help="judge PROVIDER/MODEL[@BASE_URL]; repeat for a panel (default: the protocol's judge, where it names one)",
    ),
    judge_base_url: str = typer.Option(
        "",
        "--judge-base-url",
        help="base URL for judges given without @BASE_URL (else $OPENAI_BASE_URL)",
    ),
    judge_temperature: float | None = typer.Option(
        None,
        "--judge-temperature",
        min=0.0,
        max=TEMPERATURE_MAX,
        help="judge temperature (default: the protocol's)",
    ),
    judge_max_tokens: int | None = typer.Option(
        None, "--judge-max-tokens", min=1, help="judge max tokens (default: the protocol's)"
    ),
    judge_json: bool = typer.Option(
        False,
        "--judge-json",
        help="ask judges for a JSON object (response_format / llama.cpp JSON grammar)",
    ),
    judge_mode: str = typer.Option(
        "default",
        "--judge-mode",
        help="for benchmarks with judge modes, e.g. per-criterion | batched (HealthBench)",
    ),
    judge_runs: int | None = typer.Option(
        None,
        "--judge-runs",
        min=1,
        help="judge runs per answer where the protocol averages runs (default: the benchmark's)",
    ),
    max_reask: int = typer.Option(
        2, "--max-reask", min=0, help="re-asks of an unparseable judge reply"
    ),
    param: list[str] = typer.Option(
        [],
        "--param",
        help="benchmark parameter KEY=VALUE, e.g. subjects=anatomy,college_medicine (see `grandrounds list`)",
    ),
    scoring: list[str] = typer.Option(
        [],
        "--scoring",
        help="scoring option KEY=VALUE recorded in the fingerprint (see `grandrounds list`)",
    ),
    flagged: str = typer.Option("keep", "--flagged", help=FLAGGED_HELP),
    guard: str | None = typer.Option(
        None,
        "--guard",
        help="PROVIDER/MODEL[@URL]: a model asked only whether each answer addresses its grader; its yes flags it (see --flagged)",
    ),
    threads: int | None = typer.Option(
        None, "--threads", min=1, help="CPU threads, for providers that take a threads option"
    ),
    model_opt: list[str] = typer.Option(
        [],
        "--model-opt",
        help="provider option KEY=VALUE, e.g. max_response_mb=16 (see `grandrounds list`)",
    ),
    judge_opt: list[str] = typer.Option(
        [],
        "--judge-opt",
        help="provider option KEY=VALUE for every judge given with --judge, e.g. endpoint_id=judge-svc",
    ),
    engine_arg: list[str] = typer.Option(
        [],
        "--engine-arg",
        help="argument passed as typed to a vllm/ or sglang/ engine, e.g. --engine-arg=--max-model-len=8192; repeatable",
    ),
    batch: str | None = typer.Option(
        None,
        "--batch",
        help="answers | judges | both: send those calls through the provider's batch API (openai/, anthropic/; half price, results within 24 h; re-running the same command picks submitted batches up)",
    ),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="print the calls, tokens and cost the run would make (less what the store holds) and exit; no call is made",
    ),
    prices: Path | None = typer.Option(
        None,
        "--prices",
        help="price table (TOML, as data/prices.toml) read over the packaged one (else $GRANDROUNDS_PRICES)",
    ),
    max_rubric_items: int = typer.Option(
        10_000,
        "--max-rubric-items",
        min=1,
        help="rubric items one sample may have (each is a judge call per judge); a sample with more is refused, one with over 1,000 is noted",
    ),
    simulator: str = typer.Option(
        "",
        "--simulator",
        help="agent benchmarks: PROVIDER/MODEL[@BASE_URL] that plays the simulated patient (AgentClinic)",
    ),
    epochs: int | None = typer.Option(
        None,
        "--epochs",
        min=1,
        help="agent benchmarks: episodes per sample; the result reports pass^k beside the mean (= --param epochs=K)",
    ),
    shard: str | None = typer.Option(
        None,
        "--shard",
        help="ask only shard I of N (0-based): I/N, auto (Slurm array, Kubernetes Indexed Job, SkyPilot) or auto/N; add :cost to balance by estimated calls",
    ),
    snapshot_to: Path | None = typer.Option(
        None,
        "--snapshot-to",
        help="folder for consistent snapshots of the store (at exit, on SIGTERM, every --snapshot-every minutes); a missing store is restored from its snapshot",
    ),
    snapshot_every: float = typer.Option(
        5.0, "--snapshot-every", min=0.0, help="minutes between snapshots (0: only at exit)"
    ),
    bundle: Path | None = fetch.BundleOpt,
    mirror: str | None = fetch.MirrorOpt,
    github_mirror: str | None = fetch.GithubMirrorOpt,
) -> None:
    """Run BENCHMARK against a model and print the result."""
    from grandrounds.benchmarks.base import RunOptions
    from grandrounds.benchmarks.readers.decoding import data_encoding
    from grandrounds.run.batches.settings import BatchSettings
    from grandrounds.run.config import RunConfig

    with user_errors():
        fetch.use_sources(mirror, github_mirror, bundle=bundle)
        cfg = RunConfig(
            benchmark=benchmark,
            model=model,
            bench_params=parse_params(param) | ({"epochs": epochs} if epochs is not None else {}),
            data=data,
            base_url=base_url,
            simulator=simulator,
            max_rubric_items=max_rubric_items,
            options=RunOptions(
                answer_mode=answer_mode,  # type: ignore[arg-type]  # checked against AnswerMode by the runner
                protocol=protocol,
                shuffle_options=shuffle_options,
                seed=seed,
                judge_mode=judge_mode,
                judge_runs=judge_runs,
                max_reask=max_reask,
                extra=parse_params(scoring, "--scoring"),
            ),
            gen_overrides={"temperature": temperature, "max_tokens": max_tokens},
            judge_overrides={"temperature": judge_temperature, "max_tokens": judge_max_tokens},
            judges=cluster.with_options(
                judge_configs(judge, judge_base_url, judge_json),
                parse_params(judge_opt, "--judge-opt"),
            ),
            concurrency=concurrency,
            judge_concurrency=judge_concurrency,
            rpm=rpm,
            judge_rpm=judge_rpm,
            tpm=tpm,
            judge_tpm=judge_tpm,
            timeout=timeout,
            limit=limit,
            batch=BatchSettings.parse(batch),
            flagged=flagged,
            guard=judge_configs([guard], judge_base_url, False)[0] if guard else None,
            provider_options=parse_params(model_opt, "--model-opt")
            | ({"threads": threads} if threads is not None else {})
            | engine_options(parse_params(model_opt, "--model-opt"), engine_arg),
        )
        with data_encoding(encoding):
            if dry_run:
                from grandrounds.run.plan import dry_run as dry_run_command
                from grandrounds.sources.downloads import DownloadError

                try:
                    dry_run_command(cfg, store_path(store), prices, out, console)
                except DownloadError as e:
                    raise DownloadError(
                        e.path,
                        e.where,
                        e.problem + "; a dry run needs the file too: it counts the tokens of "
                        "the exact prompts the run would send, which are built from it",
                    ) from None
                return
            cfg = cluster.apply_shard(cfg, shard)
            if cfg.shard is not None and out is not None:
                raise ConfigError(
                    "--out with --shard: a shard is a part of the run; merge the shards' snapshots "
                    "and run the same command without --shard to write the outputs"
                )
            with cluster.snapshots(store_path(store), snapshot_to, snapshot_every, cfg.shard):
                _execute([cfg], store_path(store), out, prices)


@app.command()
def demo(
    store: Path | None = StoreOpt,
    out: Path | None = typer.Option(
        None, "--out", help="write results.json and samples.jsonl here"
    ),
    threads: int | None = typer.Option(
        None, "--threads", min=1, help="CPU threads for the local model"
    ),
) -> None:
    """The bundled example exam on the default local model (no key, no network), scored two ways:
    next-token log-probabilities and generated answers, under our protocol with short replies
    (64 tokens, recorded as a deviation) so it runs in seconds."""
    from grandrounds.benchmarks.base import RunOptions
    from grandrounds.run.config import RunConfig

    popts = {"threads": threads} if threads is not None else {}
    modes: tuple[AnswerMode, ...] = ("next-token", "generate")
    cfgs = [
        RunConfig(
            "demo",
            "llamacpp/smollm2",
            options=RunOptions(answer_mode=mode, protocol="grandrounds"),
            gen_overrides={"max_tokens": 64},
            provider_options=popts,
        )
        for mode in modes
    ]
    with user_errors():
        outcomes = _execute(cfgs, store_path(store), out)
        option_counts = [len(s.choices) for s in BENCHMARKS.get("demo")().load()]
    from grandrounds.cli.demo_notes import demo_notes

    for line in demo_notes([o.result for o in outcomes], option_counts):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def engine_options(model_opts: dict[str, str], engine_args: list[str]) -> dict[str, str]:
    """``--engine-arg``s appended to ``--model-opt engine_args=...`` (one shell-quoted string)."""
    import shlex

    if not engine_args:
        return {}
    return {
        "engine_args": " ".join(
            x for x in (model_opts.get("engine_args", ""), shlex.join(engine_args)) if x
        )
    }


def _execute(
    cfgs: list[Any], store_file: Path, out: Path | None, prices: Path | None = None
) -> list[Any]:
    from grandrounds.run import local_time
    from grandrounds.run.costs import load_prices, usage_line, with_usage
    from grandrounds.run.outputs import stored_lines, write_outputs
    from grandrounds.run.progress import RichProgress
    from grandrounds.run.runner import run as run_async
    from grandrounds.store import Store

    table = load_prices(prices)  # a bad price file fails before any call
    outcomes = []
    prog = None
    try:
        with Store(store_file) as st, RichProgress(err_console) as prog:
            for cfg in cfgs:
                local_time.announce(cfg, st, lambda t: err_console.print(t, soft_wrap=True))
                outcome = eventloop.run(run_async(st, cfg, prog))
                assert outcome.usage is not None  # a finished run has counted its calls
                outcome.result = with_usage(
                    st, outcome.run.id, outcome.result, *outcome.usage, table, cfg.batch
                )
                outcomes.append(outcome)
    except (
        KeyboardInterrupt
    ):  # Ctrl-C or SIGTERM: leaving the block flushed what was answered before it
        raise interrupted(prog) from None
    if wholes := [o.result for o in outcomes if "shard" not in o.result.extra]:
        print_results(wholes)
    for o in outcomes:  # a shard's part is not a result: its counts, not a score
        if "shard" in o.result.extra:
            err_console.print(cluster.shard_line(o.result), markup=False, highlight=False)
    for o in outcomes:
        err_console.print(f"{o.result.benchmark} · {o.result.model}: run {o.run.id}", style="dim")
        for line in call_summary(
            o.answer_stats,
            [(j, st) for j, st in zip(o.judge_names, o.judge_stats)],
            [o.simulator] if o.simulator else (),
        ):
            err_console.print(f"  {line}", style="dim")
        if usage_line(o.result.extra):
            err_console.print(f"  {usage_line(o.result.extra)}", style="dim")
        for note in o.setup.notes:
            err_console.print(f"  note: {note}", style="yellow")
        if episode_summary(o.result.extra):
            err_console.print(f"  {episode_summary(o.result.extra)}", style="dim")
        if fallback_summary(o.result.extra):
            err_console.print(f"  {fallback_summary(o.result.extra)}", style="dim")
    if out:
        # A run keeps no per-sample records in memory: each is read back from the store a chunk at
        # a time and written out as it comes, so the output of a large run is never held whole.
        # Read through an ordinary connection, not a read-only one: another process may be running
        # on the same store, and a read-only connection can find its log locked while that process
        # opens or closes it ("database is locked" with two runs on one store).
        with Store(store_file) as rd:

            def lines() -> Iterator[dict[str, Any]]:
                for o in outcomes:
                    yield from stored_lines(o, rd)

            write_outputs(out, [o.result for o in outcomes], lines())
        err_console.print(f"wrote {out / 'results.json'} and {out / 'samples.jsonl'}")
    empty = [
        o
        for o in outcomes
        if sum(o.counts.values()) and not o.counts.get("scored") and any_failed(o)
    ]
    if any(any_failed(o) for o in outcomes) and not empty:
        err_console.print(
            "some calls failed: re-running the same command retries every failed call "
            "(answers and judge calls; what succeeded comes from the store)",
            style="yellow",
        )
    if empty:
        err_console.print(
            f"nothing could be scored in {len(empty)} run(s): see the failures above; "
            "re-running the same command retries every failed call",
            style="red",
        )
        raise typer.Exit(NOTHING_SCORED)
    mostly = [
        (o, share)
        for o in outcomes
        if (share := lost_share(o.result.extra)) is not None
        and share > MAX_LOST_SHARE
        and (any_failed(o) or o.result.extra.get("n_unreadable"))
    ]  # not answers withheld by design (MedBench)
    for o, share in mostly:
        err_console.print(
            f"{safe_text(o.result.benchmark)} · {safe_text(o.result.model)}: {share:.0%} of the answers "
            f"have no score (more than {MAX_LOST_SHARE:.0%}): "
            + ("nothing was scored" if not o.result.n else "the headline stands on the rest only")
            + "; "
            + rerun_advice(o.result.extra, any_failed(o)),
            style="red",
        )
    if mostly:
        raise typer.Exit(NOTHING_SCORED)
    return outcomes


def flagged_count(result: Any) -> str:
    """Answers that address the grader, and what ``--flagged`` made of them, each outcome counted
    ("" for results made before they were counted): ``4 (scored 0)`` only where all four were."""
    n = result.extra.get("n_flagged")
    if n is None:
        return ""
    if not n:
        return str(n)
    outcomes = result.extra.get("flag_outcomes")
    if not outcomes:  # results stored before outcomes were counted: the mode's word
        mode = result.fingerprint.get("flagged", "keep")
        return (
            f"{n} ({'kept' if mode == 'keep' else 'excluded' if mode == 'exclude' else 'scored 0'})"
        )
    parts = [(k, int(v)) for k, v in outcomes.items() if v]
    if len(parts) == 1 and parts[0][1] == n:
        return f"{n} ({parts[0][0]})"
    return f"{n} (" + ", ".join(f"{k} {v}" for k, v in parts) + ")"


def bounds_text(result: Any) -> str:
    """The headline's bounds with every unscored answer wrong / right ("" where none are stored)."""
    b = result.extra.get("bounds")
    if not b:
        return ""
    return f"{b['lower']:.3f}-{b['upper']:.3f}"


def print_results(results: list[Any]) -> None:
    """The results: a table where the terminal is wide enough, else one block per result, so model,
    mode, protocol and metric names are never cut off (80 columns)."""
    from grandrounds.analyses.leaderboard import protocol_label, result_coverage, unread_count
    from grandrounds.core.display import fmt_ci

    rows = []
    for r in results:
        truncated = r.extra.get("n_truncated")
        cov = result_coverage(r.extra)
        failed = sum(
            int(r.extra.get(k) or 0)
            for k in ("n_answer_failed", "n_grader_error", "n_judge_failed")
        )
        rows.append(
            {
                "benchmark": r.benchmark,
                "model": f"{r.model} ({r.fingerprint.get('answer_mode', '')})",
                "protocol": protocol_label(r.fingerprint),
                "judge": r.judge or "",
                "metric": r.metric,
                "score": "n/a" if r.score is None else f"{r.score:.3f}",
                "95% CI": fmt_ci(r.ci95),
                "n": str(r.n),
                "unscored": str(r.n_unscored),
                "coverage": "" if cov is None else f"{cov:.3f}",
                "unread": "" if unread_count(r.extra) is None else str(unread_count(r.extra)),
                "unknown": str(r.extra.get("n_unknown_verdicts", "")),
                "failed": str(failed),
                "truncated": "" if truncated is None else str(truncated),
                "flagged": flagged_count(r),
                "bounds": bounds_text(r),
            }
        )
    optional = {
        "judge": lambda row: row["judge"],
        "unknown": lambda row: row["unknown"] not in ("", "0"),
        "bounds": lambda row: bool(row["bounds"]),
    }
    cols = [
        c
        for c in (
            "benchmark",
            "model",
            "protocol",
            "judge",
            "metric",
            "score",
            "95% CI",
            "n",
            "unscored",
            "bounds",
            "coverage",
            "unread",
            "unknown",
            "failed",
            "truncated",
            "flagged",
        )
        if c not in optional or any(optional[c](row) for row in rows)
    ]
    needed = sum(max(len(c), *(len(row[c]) for row in rows)) + 3 for c in cols) if rows else 0
    if needed <= console.width:
        t = Table(title="Results")
        for c in cols:
            t.add_column(c)
        for row in rows:
            t.add_row(*(row[c] for c in cols))
        console.print(t)
        _protections_off(results)
        return
    console.print("Results", style="bold")
    for row in rows:
        judge = f" · judge {row['judge']}" if row["judge"] else ""
        console.print(
            f"{row['benchmark']} · {row['model']} · protocol {row['protocol']}{judge}",
            soft_wrap=True,
        )
        counts = "  ".join(
            f"{c} {row[c]}"
            for c in ("bounds", "coverage", "unread", "unknown", "failed", "truncated", "flagged")
            if c in cols and row[c]
        )
        console.print(
            f"  {row['metric']} {row['score']}  95% CI {row['95% CI']}  n {row['n']}  unscored {row['unscored']}  {counts}",
            soft_wrap=True,
        )
    _protections_off(results)


def served_changed(result: Any) -> str:
    """The line saying the server's ``system_fingerprint`` (or the model it named) changed within a
    run ("" where it had one value or said nothing)."""
    served = result.extra.get("system_fingerprints")
    if not isinstance(served, dict) or len(served) < 2:
        return ""
    seen = ", ".join(f"{v}: {n}" for v, n in served.items())
    return (
        f"{result.benchmark} · {result.model}: the server's system_fingerprint changed within this run: {seen} "
        "— the model behind the name may have changed"
    )


def _protections_off(results: list[Any]) -> None:
    """Say where a judge saw the answer unmarked (the official prompt under ``reference``)."""
    for r in results:
        if served_changed(r):
            console.print(
                safe_text(f"warning: {served_changed(r)}"),
                style="yellow",
                soft_wrap=True,
                markup=False,
            )
    off = sorted({r.benchmark for r in results if r.extra.get("answer_markers") == "off"})
    if off:
        console.print(
            safe_text(
                f"note: {', '.join(off)}: the judge saw the answer as the official prompt shows it, with no markers "
                "around it (answer markers are off under --protocol reference)"
            ),
            style="dim",
            soft_wrap=True,
            markup=False,
        )


@app.command()
def regrade(
    run_id: str = typer.Option(
        ..., "--run", help="run id (printed by `run`; see `grandrounds runs`)"
    ),
    judge: list[str] = typer.Option(
        [], "--judge", help="judge PROVIDER/MODEL[@BASE_URL]; repeat for a panel"
    ),
    judge_base_url: str = typer.Option(
        "",
        "--judge-base-url",
        help="base URL for judges given without @BASE_URL (else $OPENAI_BASE_URL)",
    ),
    judge_temperature: float | None = typer.Option(
        None,
        "--judge-temperature",
        min=0.0,
        max=TEMPERATURE_MAX,
        help="judge temperature (default: the run's protocol's)",
    ),
    judge_max_tokens: int | None = typer.Option(
        None, "--judge-max-tokens", min=1, help="default: the run's protocol's"
    ),
    judge_json: bool = typer.Option(
        False,
        "--judge-json",
        help="ask judges for a JSON object (response_format / llama.cpp JSON grammar)",
    ),
    judge_mode: str | None = typer.Option(
        None, "--judge-mode", help="default: as in the run's last grading"
    ),
    judge_runs: int | None = typer.Option(
        None,
        "--judge-runs",
        min=1,
        help="judge runs per answer (default: as in the run's last grading)",
    ),
    max_reask: int = typer.Option(
        2, "--max-reask", min=0, help="re-asks of an unparseable judge reply"
    ),
    only_unknown: bool = typer.Option(
        False, "--only-unknown", help="keep known verdicts, re-ask unknown ones"
    ),
    flagged: str = typer.Option("keep", "--flagged", help=FLAGGED_HELP),
    judge_concurrency: int | None = typer.Option(
        None, "--judge-concurrency", min=1, help="judge calls in flight per judge endpoint"
    ),
    judge_rpm: int | None = typer.Option(None, "--judge-rpm", min=1, help=JUDGE_RPM_HELP),
    judge_tpm: str | None = typer.Option(
        None, "--judge-tpm", callback=tpm_option, metavar=TPM_METAVAR, help=JUDGE_TPM_HELP
    ),
    timeout: float | None = typer.Option(
        None,
        "--timeout",
        min=0.001,
        help="seconds a call may take once sent, judges (HTTP providers; default 120)",
    ),
    seed: int = typer.Option(
        0, "--seed", min=0, max=SEED_MAX, help="seed of the judges' calls and of bootstrap CIs"
    ),
    batch: bool = typer.Option(
        False,
        "--batch",
        help="send the judge calls through the judge's batch API (openai/, anthropic/; half price, results within 24 h)",
    ),
    out: Path | None = typer.Option(
        None, "--out", help="write results.json and samples.jsonl here"
    ),
    store: Path | None = StoreOpt,
) -> None:
    """Re-judge stored answers with another judge or template, without generating again."""
    from grandrounds.run.batches.settings import BatchSettings
    from grandrounds.run.outputs import regraded_lines, write_outputs
    from grandrounds.run.progress import RichProgress
    from grandrounds.run.regrade import RegradeRequest
    from grandrounds.run.regrade import regrade as regrade_async
    from grandrounds.store import Store

    with user_errors(), Store(existing_store_path(store)) as st:
        run_rec = stored_run(st, run_id)
        judges = judge_configs(judge, judge_base_url, judge_json)
        req = RegradeRequest(
            run_rec,
            judges,
            judge_mode,
            judge_runs,
            max_reask,
            seed,
            only_unknown,
            judge_concurrency,
            timeout,
            judge_overrides={"temperature": judge_temperature, "max_tokens": judge_max_tokens},
            batch=BatchSettings.parse("judges" if batch else None),
            rpm=judge_rpm,
            tpm=judge_tpm,
            flagged=flagged,
        )
        with RichProgress(err_console) as prog:
            outcome = eventloop.run(regrade_async(st, req, progress=prog))
        from grandrounds.run.costs import load_prices, usage_line, with_usage

        assert outcome.usage is not None  # a finished grading has counted its calls
        outcome.result = with_usage(
            st, run_rec.id, outcome.result, *outcome.usage, load_prices(), req.batch
        )
    print_results([outcome.result])
    for line in call_summary(None, list(zip([j.spec for j in judges], outcome.judge_stats))):
        err_console.print(f"  {line}", style="dim")
    if usage_line(outcome.result.extra):
        err_console.print(f"  {usage_line(outcome.result.extra)}", style="dim")
    if out:
        # Read back a chunk at a time and written as it comes (the re-grade holds no sample or grade),
        # the lines as `run --out` writes them.
        with user_errors(), Store(existing_store_path(store)) as rd:  # not read-only: see _execute
            write_outputs(out, [outcome.result], regraded_lines(outcome, rd))
        err_console.print(f"wrote {out / 'results.json'} and {out / 'samples.jsonl'}")


@app.command()
def runs(store: Path | None = StoreOpt) -> None:
    """List the runs in the store."""
    from grandrounds.store import Store

    path = existing_store_path(store)
    with Store(path, readonly=True) as st:
        stored = [(r, st.run_state(r.id)) for r in st.runs()]
        judges = {r.id: _judges_of(st, state.grader_fp) for r, state in stored}
    if not stored:
        err_console.print(f"no runs in {path}")
        return
    t = Table(title=f"Runs in {path}")
    for col in (
        "run",
        "benchmark",
        "model",
        "mode",
        "protocol",
        "judge",
        "limit",
        "dataset",
        "status",
        "created",
    ):
        t.add_column(col)
    for r, state in stored:
        limit = r.options.get("limit")
        t.add_row(
            r.id,
            r.benchmark_spec,
            r.model,
            r.options.get("answer_mode", ""),
            str(r.options.get("protocol") or "grandrounds"),
            judges[r.id],
            "" if limit is None else str(limit),
            r.dataset_sha256[:12],
            state.describe(),
            r.created_at[:19].replace("T", " "),
        )
    console.print(t)


def _judges_of(st: Any, grader_fp: str | None) -> str:
    """The judges of a grading, comma-separated ("" for a benchmark graded without a judge)."""
    spec = st.grader_spec(grader_fp) if grader_fp else None
    return ", ".join(str(j.get("model")) for j in (spec or {}).get("judges") or [])


@app.command()
def submission(
    run_id: str = typer.Option(..., "--run", help="run id (see `grandrounds runs`)"),
    out: Path = typer.Option(
        ..., "--out", help="file, or directory for one file per question file"
    ),
    store: Path | None = StoreOpt,
) -> None:
    """Write a run's stored answers in its benchmark's submission format (MedBench's platform)."""
    from grandrounds.run.config import build_benchmark
    from grandrounds.store import Store

    with user_errors(), Store(existing_store_path(store), readonly=True) as st:
        run_rec = stored_run(st, run_id)
        bench = build_benchmark(run_rec.benchmark, dict(run_rec.options.get("bench_params") or {}))
        samples = st.samples(run_rec.benchmark, run_rec.dataset_sha256)
        texts = {
            sid: resp.text
            for sid, (_, resp) in st.answers(run_rec.id).items()
            if resp is not None and resp.ok and resp.text is not None
        }
    report = bench.write_submission(samples, texts, out)
    err_console.print(
        f"wrote {report['n_written']} answers to {', '.join(report['files'])}; {len(report['missing'])} without an answer"
    )


# The command groups that live in their own modules, after run's: reports and the viewer, judge
# validation, robustness, item response theory (in that order in --help).
for _group in (
    reports,
    team,
    judge_validation,
    robustness,
    contamination,
    irt,
    fetch,
    cluster,
    doctor,
):
    _group.register(app, existing_store_path, StoreOpt)


def _plain_flags(typer_app: typer.Typer) -> None:
    """Every command, extensions' included, built with :class:`_Command` (flags without ``<bool>``)."""
    for info in typer_app.registered_commands:
        if info.cls in (None, typer.core.TyperCommand):
            info.cls = _Command
    for group in typer_app.registered_groups:
        if group.typer_instance is not None:
            _plain_flags(group.typer_instance)


_plain_flags(app)


def main() -> None:
    handle_sigterm()
    try:
        app()
    except (GrandroundsError, UnknownComponent) as e:
        sys.stderr.write(
            f"error: {safe_text(e)}\n"
        )  # plain: no wrapping, no markup in file names, no escape sequence of the data
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(interrupted().exit_code)


def entry() -> None:
    """The ``grandrounds`` program (console script and ``python -m grandrounds``): :func:`main`,
    then the process ends without tearing the interpreter down.

    After a large run, Python's teardown (a last garbage collection over every object, then each
    module freed) took about 0.1 s, for nothing: the store is closed and the output written by
    then. Exit handlers still run (an engine left running is stopped by one), then standard
    output and error are flushed and the process exits with the command's code. Where a
    non-daemon thread still runs, the ordinary exit waits for it as usual.
    """
    import atexit
    import threading

    try:
        main()
        code: Any = 0
    except SystemExit as e:
        code = e.code
    if any(
        t.is_alive() and not t.daemon
        for t in threading.enumerate()
        if t is not threading.main_thread()
    ):
        sys.exit(code)
    if code is None:
        code = 0
    elif not isinstance(code, int):  # as Python does for sys.exit("message")
        sys.stderr.write(f"{code}\n")
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):  # a closed pipe: nothing more can be said
            stream.flush()
    os._exit(code & 0xFF if code >= 0 else 1)
