"""How a command prints its results: a table where the terminal is wide enough (else one block per
result), each count of what was not scored beside the score, and the warnings a result carries
(a server whose model changed within the run, a judge that saw the answer unmarked)."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from grandrounds.cli.common import console
from grandrounds.core.display import safe_text


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
        protections_off(results)
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
    protections_off(results)


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


def protections_off(results: list[Any]) -> None:
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
