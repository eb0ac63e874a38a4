"""Running one or more configured runs on a store for the ``run`` and ``demo`` commands: progress,
the printed results and call counts, the outputs written a chunk at a time, and the exit code when
nothing (or too little) could be scored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from grandrounds.cli import cluster
from grandrounds.cli.common import (
    MAX_LOST_SHARE,
    NOTHING_SCORED,
    any_failed,
    call_summary,
    err_console,
    interrupted,
    lost_share,
    rerun_advice,
)
from grandrounds.cli.results import print_results
from grandrounds.core import eventloop
from grandrounds.core.display import episode_summary, fallback_summary, safe_text


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


def run_configs(
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
