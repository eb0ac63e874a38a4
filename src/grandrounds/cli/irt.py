"""The ``irt`` command: a 2PL item response fit over every model's stored answers to a benchmark."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from grandrounds.core.display import SafeConsole, fmt, fmt_ci, safe_text, styled
from grandrounds.core.files import write_text

console = SafeConsole()

StorePath = Callable[[Path | None], Path]


def _irt_command(store_path: StorePath, StoreOpt: Any) -> Callable[..., None]:
    """The ``irt`` command, bound to the CLI's store option."""

    def irt(
        benchmark: str = typer.Argument(..., help="a benchmark with stored results, e.g. medqa"),
        threshold: float | None = typer.Option(
            None,
            "--threshold",
            min=0.0,
            max=1.0,
            help="for graded benchmarks (values in 0-1): count a value >= T as right",
        ),
        dataset: str | None = typer.Option(
            None, "--dataset", help="sha256 prefix of the dataset to fit, when results span several"
        ),
        min_respondents: int = typer.Option(
            3,
            "--min-respondents",
            min=2,
            help="refuse to fit with fewer respondents (model x answer mode x protocol)",
        ),
        show: int = typer.Option(
            15, "--show", min=0, help="rows of each item table to print (--json has every item)"
        ),
        json_out: Path | None = typer.Option(
            None,
            "--json",
            help="write every figure (abilities, all items, flags) to this JSON file",
        ),
        store: Path | None = StoreOpt,
    ) -> None:
        """Item response theory: a 2PL fit to every model's right/wrong answers on BENCHMARK; abilities with SEs, candidate wrong keys, uninformative items."""
        from grandrounds.analyses.irt import analyse, collect, key_evidence
        from grandrounds.core.errors import GrandroundsError
        from grandrounds.store import Store

        try:
            with Store(store_path(store), readonly=True) as st:
                resp = collect(st, benchmark, threshold, dataset)
                result = analyse(resp, min_respondents)
                evidence = key_evidence(st, result, [it.id for it in result.negative])
        except (
            GrandroundsError
        ) as e:  # an empty store, an unknown benchmark, too few respondents ...
            sys.stderr.write(f"error: {safe_text(e)}\n")
            raise typer.Exit(2) from None
        _print(result, evidence, show)
        if json_out is not None:
            doc = result.to_json() | {"wrong_key_evidence": evidence}
            write_text(json_out, json.dumps(doc, ensure_ascii=False, indent=1))
            console.print(f"wrote {json_out}", markup=False)

    return irt


def register(app: typer.Typer, store_path: StorePath, StoreOpt: Any) -> None:
    """Add ``irt`` to ``app``."""
    app.command("irt")(_irt_command(store_path, StoreOpt))


def _print(result: Any, evidence: dict[str, dict[str, Any]], show: int) -> None:
    f = result.fit
    counts = result.to_json()["counts"]
    console.print(
        Text.assemble(
            styled(result.benchmark, "bold"),
            f" dataset {result.dataset[:12]}: {counts['respondents']} respondents, "
            f"{counts['items']} items ({counts['fitted']} fitted, {counts['all_right']} right for all, {counts['all_wrong']} right for none, "
            f"{counts['too_few']} with fewer than 2 scored answers)",
        )
    )
    console.print(
        Text.assemble(
            f"2PL P(right) = sigmoid(a (ability - b)), joint MAP, ability ~ N(0, {f.priors.theta_sd:g}); "
            f"{f.iterations} iterations, {f.seconds:.2f} s",
            ("" if f.converged else (" (did not converge)", "red")),
        )
    )
    for note in result.notes:
        console.print(f"note: {note}", markup=False)

    t = Table(title="Ability (higher = stronger; 95% CI from the observed information)")
    for col in ("respondent", "answered", "right", "ability", "SE", "95% CI"):
        t.add_column(col)
    for a in sorted(result.abilities, key=lambda a: -(a.theta if a.theta is not None else -1e9)):
        t.add_row(
            a.respondent.label,
            str(a.n),
            str(a.n_right),
            fmt(a.theta, 2),
            fmt(a.se, 2),
            fmt_ci(a.ci95, 2),
        )
    console.print(t)

    neg = result.negative
    if neg:
        sure = sum(1 for it in neg if it.negative_95)
        t = Table(
            title=f"Candidate wrong keys: {len(neg)} item(s) with negative discrimination, {sure} below 0 with 95% confidence (*)"
        )
        for col in (
            "item",
            "discrimination",
            "SE",
            "difficulty",
            "right / answered",
            "key",
            "stronger half answered",
        ):
            t.add_column(col)
        for it in neg[:show]:
            ev = evidence.get(it.id, {})
            answered = ", ".join(
                f"{k} x{v}" for k, v in (ev.get("stronger_half_answered") or {}).items()
            )
            t.add_row(
                it.id + (" *" if it.negative_95 else ""),
                fmt(it.discrimination, 2),
                fmt(it.discrimination_se, 2),
                fmt(it.difficulty, 2),
                f"{it.n_right}/{it.n}",
                str(ev.get("key") or ""),
                answered,
            )
        console.print(t)
        _more(len(neg), show)
    else:
        console.print("No item has negative discrimination (no candidate wrong key).")

    for status, what in (
        ("all_wrong", "no respondent gets right"),
        ("all_right", "every respondent gets right"),
    ):
        items = result.by_status(status)
        if items:
            ids = ", ".join(it.id for it in items[: max(show, 1) * 4])
            more = (
                f" ... and {len(items) - max(show, 1) * 4} more"
                if len(items) > max(show, 1) * 4
                else ""
            )
            console.print(f"Uninformative: {len(items)} item(s) {what}: {ids}{more}", markup=False)

    fitted = sorted(
        (it for it in result.fitted if not it.negative), key=lambda it: it.discrimination or 0.0
    )
    for title, rows in (
        ("Least discriminating items (discrimination >= 0)", fitted[:show]),
        ("Most discriminating items", fitted[::-1][:show]),
    ):
        if not rows:
            continue
        t = Table(title=title)
        for col in ("item", "discrimination", "SE", "difficulty", "SE ", "right / answered"):
            t.add_column(col)
        for it in rows:
            t.add_row(
                it.id,
                fmt(it.discrimination, 2),
                fmt(it.discrimination_se, 2),
                fmt(it.difficulty, 2),
                fmt(it.difficulty_se, 2),
                f"{it.n_right}/{it.n}",
            )
        console.print(t)


def _more(total: int, show: int) -> None:
    if total > show:
        console.print(f"... {total - show} more (--show N, or --json PATH for every item)")
