"""The ``grandrounds`` command."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
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
    SEED_MAX,
    TEMPERATURE_MAX,
    EncodingOpt,
    StoreOpt,
    _Command,
    _Group,
    call_summary,
    console,
    err_console,
    existing_store_path,
    handle_sigterm,
    interrupted,
    judge_configs,
    parse_params,
    store_path,
    stored_run,
    user_errors,
)
from grandrounds.cli.flags import RPM_HELP, TPM_HELP, TPM_METAVAR, tpm_option
from grandrounds.cli.judge_flags import (
    FlaggedOpt,
    JudgeBaseUrlOpt,
    JudgeConcurrencyOpt,
    JudgeJsonOpt,
    JudgeRpmOpt,
    JudgeTpmOpt,
    MaxReaskOpt,
    OutOpt,
    judge_max_tokens_opt,
    judge_temperature_opt,
    seed_opt,
)
from grandrounds.cli.results import print_results
from grandrounds.cli.running import engine_options, run_configs
from grandrounds.core import eventloop
from grandrounds.core.display import safe_text, styled
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
    out: Path | None = OutOpt,
    store: Path | None = StoreOpt,
    base_url: str = typer.Option(
        "", "--base-url", help="OpenAI-compatible base URL (else $OPENAI_BASE_URL)"
    ),
    concurrency: int | None = typer.Option(
        None, "--concurrency", min=1, help="answer calls in flight per endpoint"
    ),
    judge_concurrency: int | None = JudgeConcurrencyOpt,
    rpm: int | None = typer.Option(None, "--rpm", min=1, help=RPM_HELP),
    judge_rpm: int | None = JudgeRpmOpt,
    tpm: str | None = typer.Option(
        None, "--tpm", callback=tpm_option, metavar=TPM_METAVAR, help=TPM_HELP
    ),
    judge_tpm: str | None = JudgeTpmOpt,
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
    judge_base_url: str = JudgeBaseUrlOpt,
    judge_temperature: float | None = judge_temperature_opt(),
    judge_max_tokens: int | None = judge_max_tokens_opt(),
    judge_json: bool = JudgeJsonOpt,
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
    max_reask: int = MaxReaskOpt,
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
    flagged: str = FlaggedOpt,
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
                run_configs([cfg], store_path(store), out, prices)


@app.command()
def demo(
    store: Path | None = StoreOpt,
    out: Path | None = OutOpt,
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
            benchmark="demo",
            model="llamacpp/smollm2",
            options=RunOptions(answer_mode=mode, protocol="grandrounds"),
            gen_overrides={"max_tokens": 64},
            provider_options=popts,
        )
        for mode in modes
    ]
    with user_errors():
        outcomes = run_configs(cfgs, store_path(store), out)
        option_counts = [len(s.choices) for s in BENCHMARKS.get("demo")().load()]
    from grandrounds.cli.demo_notes import demo_notes

    for line in demo_notes([o.result for o in outcomes], option_counts):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


@app.command()
def regrade(
    run_id: str = typer.Option(
        ..., "--run", help="run id (printed by `run`; see `grandrounds runs`)"
    ),
    judge: list[str] = typer.Option(
        [], "--judge", help="judge PROVIDER/MODEL[@BASE_URL]; repeat for a panel"
    ),
    judge_base_url: str = JudgeBaseUrlOpt,
    judge_temperature: float | None = judge_temperature_opt("the run's protocol's"),
    judge_max_tokens: int | None = judge_max_tokens_opt("the run's protocol's"),
    judge_json: bool = JudgeJsonOpt,
    judge_mode: str | None = typer.Option(
        None, "--judge-mode", help="default: as in the run's last grading"
    ),
    judge_runs: int | None = typer.Option(
        None,
        "--judge-runs",
        min=1,
        help="judge runs per answer (default: as in the run's last grading)",
    ),
    max_reask: int = MaxReaskOpt,
    only_unknown: bool = typer.Option(
        False, "--only-unknown", help="keep known verdicts, re-ask unknown ones"
    ),
    flagged: str = FlaggedOpt,
    judge_concurrency: int | None = JudgeConcurrencyOpt,
    judge_rpm: int | None = JudgeRpmOpt,
    judge_tpm: str | None = JudgeTpmOpt,
    timeout: float | None = typer.Option(
        None,
        "--timeout",
        min=0.001,
        help="seconds a call may take once sent, judges (HTTP providers; default 120)",
    ),
    seed: int = seed_opt("the judges' calls and of bootstrap CIs"),
    batch: bool = typer.Option(
        False,
        "--batch",
        help="send the judge calls through the judge's batch API (openai/, anthropic/; half price, results within 24 h)",
    ),
    out: Path | None = OutOpt,
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
            run=run_rec,
            judges=judges,
            judge_mode=judge_mode,
            judge_runs=judge_runs,
            max_reask=max_reask,
            seed=seed,
            only_unknown=only_unknown,
            concurrency=judge_concurrency,
            timeout=timeout,
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
        with (
            user_errors(),
            Store(existing_store_path(store)) as rd,
        ):  # not read-only: see running.run_configs
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
