"""What the command groups share: how flags show, the consoles, the store and ``KEY=VALUE`` options,
one-line user errors, and the closing lines a run prints (calls made, failed, retried)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from grandrounds.core.display import SafeConsole, safe_text
from grandrounds.core.errors import ConfigError, GrandroundsError
from grandrounds.core.registry import UnknownComponent


class _PlainFlags:
    """Flags show no value type in --help: typer 0.29 prints ``<bool>`` beside every flag (--help
    included), which reads as if the flag took a value. An empty metavar leaves that column blank."""

    def get_params(self, ctx: Any) -> list[Any]:
        # typer's command class is untyped (Any) to mypy, so the super() call reads as untyped
        params = super().get_params(ctx)  # type: ignore[misc]
        for p in params:
            if getattr(p, "is_flag", False) and p.metavar is None:
                p.metavar = ""
        return params


class _Command(_PlainFlags, typer.core.TyperCommand):
    pass


class _Group(_PlainFlags, typer.core.TyperGroup):
    pass


#: Every line the commands print goes through these (or :func:`safe_text` where written plainly):
#: text from servers and data files shows as written, never as markup or an escape sequence.
console = SafeConsole()
err_console = SafeConsole(stderr=True)

INTERRUPTED = (
    "interrupted: everything finished so far is stored; run the same command again to resume\n"
)
#: Exit codes of a command stopped by Ctrl-C (SIGINT) and by SIGTERM: 128 + the signal's number, as a shell reports them.
INTERRUPTED_EXIT, TERMINATED_EXIT = 128 + signal.SIGINT, 128 + signal.SIGTERM


class _Stop:
    """Which signal stopped the command (None while none has)."""

    signal: int | None = None


def on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM (a timeout, ``docker stop``, systemd, Slurm) taken as Ctrl-C is: the SIGINT handler in
    force runs (the event loop's cancels the run, whose stores flush what finished), or, where there
    is none, KeyboardInterrupt is raised here. A second SIGTERM, like a second Ctrl-C, stops at once."""
    _Stop.signal = signal.SIGTERM
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


def handle_sigterm() -> None:
    """Install :func:`on_sigterm` (from the main thread only, where Python delivers signals)."""
    import threading

    if threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGTERM"):
        signal.signal(signal.SIGTERM, on_sigterm)


def interrupted(progress: Any = None) -> typer.Exit:
    """Say that the command was stopped, what it kept and how to resume; the exit to raise: 130
    after Ctrl-C, 143 after SIGTERM. ``progress``: the run's progress, whose counts are told."""
    kept = ""
    if progress is not None and getattr(progress, "total", None):
        kept = f" ({progress.done:,} of {progress.total:,} items of the last run started)"
    if _Stop.signal == signal.SIGTERM:
        sys.stderr.write(
            f"terminated (SIGTERM): everything finished so far is stored{kept}; run the same command again to resume\n"
        )
        return typer.Exit(TERMINATED_EXIT)
    sys.stderr.write(INTERRUPTED.replace("is stored;", f"is stored{kept};"))
    return typer.Exit(INTERRUPTED_EXIT)


StoreOpt = typer.Option(
    None, "--store", help="SQLite store (default $GRANDROUNDS_STORE or ./grandrounds.db)"
)
#: Ranges of the numeric flags: seeds as NumPy's RandomState takes them (and every provider's API),
#: temperatures as the OpenAI API accepts them.
SEED_MAX = 2**32 - 1
TEMPERATURE_MAX = 2.0
JUDGE_RPM_HELP = (
    "judge calls started per minute of each judge model at its endpoint, retries included; a judge that is the "
    "candidate's own model at the same endpoint takes the lower of --rpm and --judge-rpm"
)
JUDGE_TPM_HELP = (
    "tokens of judge calls started per minute of each judge model at its endpoint, as --tpm counts them (N, or input=N,output=N); "
    "a judge that is the candidate's own model at the same endpoint takes the lower of --tpm and --judge-tpm, limit by limit"
)


def _encoding_option(value: str | None) -> str | None:
    """``--encoding``: a text codec Python knows, checked before anything is read."""
    from grandrounds.benchmarks.readers.decoding import check_encoding

    if value:
        try:
            check_encoding(value)
        except ConfigError as e:
            raise typer.BadParameter(str(e).removeprefix(f"--encoding {value!r}: ")) from None
    return value


#: ``--encoding``, for every command that reads data files (use with ``readers.data_encoding``).
EncodingOpt = typer.Option(
    None,
    "--encoding",
    callback=_encoding_option,
    help="text encoding of the data files, e.g. cp1252, gb18030 (default: UTF-8, or GB18030 when the text is confidently Chinese)",
)


def store_path(path: Path | None) -> Path:
    return path or Path(os.environ.get("GRANDROUNDS_STORE", "grandrounds.db"))


def existing_store_path(path: Path | None) -> Path:
    """The store a read command reads; a missing one is a one-line error (never silently created empty)."""
    p = store_path(path)
    if not p.exists():
        sys.stderr.write(
            f"error: no store at {p}: nothing has been run with it yet "
            "(run `grandrounds demo` or `grandrounds run ...`, or pass --store PATH)\n"
        )
        raise typer.Exit(2)
    return p


def parse_params(items: list[str], flag: str = "--param") -> dict[str, str]:
    """``KEY=VALUE`` pairs as typed; each value is coerced later to the type its owner declares."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{flag} {item!r} must be KEY=VALUE")
        out[key.strip()] = value
    return out


@contextmanager
def user_errors() -> Iterator[None]:
    """A configuration or data error ends the command with its one-line message and exit code 2."""
    try:
        yield
    except (GrandroundsError, UnknownComponent) as e:
        sys.stderr.write(f"error: {safe_text(e)}\n")
        raise typer.Exit(2) from None


def judge_configs(specs: list[str], base_url: str, json_object: bool) -> tuple[Any, ...]:
    """``PROVIDER/MODEL[@BASE_URL]`` -> JudgeConfig; the URL is an endpoint, not part of the judge's identity.

    Generation parameters are left to the protocol (and the run's explicit judge flags)."""
    from grandrounds.providers.base import split_endpoint
    from grandrounds.run.config import JudgeConfig

    out = []
    for text in specs:
        spec, url = split_endpoint(text)
        out.append(JudgeConfig(spec=spec, base_url=url or base_url, json_object=json_object))
    return tuple(out)


#: A run where more answers than this share have no score for a reason that is not by design (a
#: failed call, an unreadable answer, a grader error) exits with NOTHING_SCORED, saying so.
MAX_LOST_SHARE = 0.5


def lost_share(extra: Mapping[str, Any]) -> float | None:
    """The share of a run's items left without a score by a failure (not by design, as MedBench's
    withheld answers are), or None where the result does not count its items."""
    n = int(extra.get("n_items") or 0)
    if n <= 0:
        return None
    lost = sum(
        int(extra.get(k) or 0) for k in ("n_answer_failed", "n_unreadable", "n_grader_error")
    )
    return lost / n


#: Exit code of ``run``/``demo`` when a run scored nothing because its calls failed.
NOTHING_SCORED = 3


def rerun_advice(extra: Mapping[str, Any], failed: bool) -> str:
    """What re-running the same command will and will not change for a run with unscored items:
    failed calls are asked again; unreadable answers are stored replies, read the same way again."""
    unreadable = int(extra.get("n_unreadable") or 0)
    parts = []
    if failed:
        parts.append("re-running the same command retries every failed call")
    if unreadable:
        parts.append(
            f"{unreadable} answer(s) could not be read, and re-running reads the same stored replies "
            "the same way (`grandrounds view` shows them; another --protocol or model may answer in a "
            "readable form)"
        )
    return "; ".join(parts) or "nothing failed and nothing was unreadable"


def any_failed(outcome: Any) -> bool:
    """Whether any answer or judge call of the run failed (as opposed to a benchmark that scores
    nothing here by design, such as MedBench without its answer key)."""
    return bool(
        outcome.answer_stats.failed
        or any(s.failed for s in outcome.judge_stats)
        or bool(outcome.counts.get("answer_failed") or outcome.counts.get("grader_error"))
    )


def call_summary(
    answers: Any, judges: Sequence[tuple[str, Any]], simulators: Sequence[tuple[str, Any]] = ()
) -> list[str]:
    """One line per executor (answers, then each judge, then an agent benchmark's simulator): calls
    made, from the store, failed, retried, and the commonest failure reasons with their counts; for a batched one a second line: its
    batches (submitted, picked up, how they ended) and the calls retried in a new batch, by cause."""
    lines = []
    executors = [("answers", answers)] if answers is not None else []
    for label, s in [
        *executors,
        *((f"judge {name}", st) for name, st in judges),
        *((f"simulator {name}", st) for name, st in simulators),
    ]:
        line = f"{label}: {s.made} calls made, {s.cached} from the store, {s.failed} failed, {s.retries} retries"
        if getattr(s, "shrunk", 0):
            line += f", {s.shrunk} shrunk to fit the context (max tokens lowered to what the server's context leaves)"
        line += concurrency_note(s)
        if s.errors:
            top = sorted(s.errors.items(), key=lambda kv: -kv[1])[:3]
            line += "; failures: " + ", ".join(f"{why} x{n}" for why, n in top)
        lines.append(line)
        if callable(
            batch_line := getattr(s, "batch_line", None)
        ):  # a batched role: its batches and calls retried
            lines.append(f"{label} {batch_line()}")
    return lines


def concurrency_note(s: Any) -> str:
    """What the call summary adds about calls at once: the server's own slots where it reported
    them, the adaptive window's back-offs, calls that timed out in the server's queue, and
    failures taken from the store because the prompt alone is over the context."""
    note = ""
    if getattr(s, "server_slots", ""):
        note += f"; the server reports {s.server_slots} slot(s)"
    if getattr(s, "backoffs", 0):
        note += f"; fewer calls at once after timeouts or 429/503 ({s.backoffs}x, down to {s.smallest_window})"
    if getattr(s, "queued", 0):
        note += (
            f"; {s.queued} timed out waiting in the server's queue (it serves {s.queued_slots} at a time, "
            f"up to {s.queued_most} were sent at once: lower --concurrency to {s.queued_slots})"
        )
    if getattr(s, "final", 0):
        note += f"; {s.final} failed as before (the prompt alone is over the model's context: not asked again)"
    return note


def stored_run(st: Any, run_id: str) -> Any:
    """The run ``run_id`` in the store, or a one-line error naming the store."""
    run_rec = st.get_run(run_id)
    if run_rec is None and len(run_id) >= 6:  # a prefix, as `runs` and the leaderboard show them
        found = [r for r in st.runs() if r.id.startswith(run_id)]
        if len(found) > 1:
            raise ConfigError(
                f"run id prefix {run_id!r} matches {len(found)} runs in {st.path}: give more characters"
            )
        run_rec = found[0] if found else None
    if run_rec is None:
        raise ConfigError(f"no run {run_id!r} in {st.path} (see `grandrounds runs`)")
    return run_rec
