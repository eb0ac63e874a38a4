"""Leaderboard, breakdown cells and per-sample rows as md, csv, xlsx, json or parquet.

csv and parquet are one table per file, so the per-sample rows go beside PATH as
``<stem>.samples.<ext>`` and the breakdown cells as ``<stem>.breakdowns.<ext>``; xlsx gets three
sheets, json one object, md three tables.

Cells hold untrusted text (model answers, sample ids, judge names, error bodies). In both, control
characters (escape sequences) are shown escaped (``core.display.safe_text``). In csv a text cell
that a spreadsheet would read as a formula is neutralised (:func:`csv_cell`); in md every character
Markdown or HTML gives a meaning to is escaped (:func:`md_cell`), so the text shows as written and
nothing in it renders or links.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from grandrounds.analyses.leaderboard import Board, breakdown_tables
from grandrounds.core.display import safe_text
from grandrounds.core.files import staged

FORMATS = ("html", "md", "csv", "xlsx", "json", "parquet")


def board_rows(boards: Sequence[Board]) -> list[dict[str, Any]]:
    """One flat row per leaderboard entry."""
    out = []
    for b in boards:
        sizes: dict[tuple[int, int | None], int] = {}
        for e in b.entries:
            sizes[(e.setting, e.group)] = sizes.get((e.setting, e.group), 0) + 1
        for e in b.entries:
            r = e.row
            out.append(
                {
                    "benchmark": b.benchmark,
                    "setting": e.setting,
                    "rank": e.rank,
                    "tie_group": e.group,
                    "tied": bool(e.group is not None and sizes[(e.setting, e.group)] > 1),
                    "model": r.model,
                    "metric": r.metric,
                    "score": r.score,
                    "ci95_low": r.ci95[0] if r.ci95 else None,
                    "ci95_high": r.ci95[1] if r.ci95 else None,
                    "n": r.n,
                    "n_unscored": r.n_unscored,
                    "coverage": r.coverage,
                    "n_truncated": r.n_truncated,
                    **_usage_columns(r.extra),
                    "protocol": r.protocol,
                    "judge": r.judge or "",
                    "flags": "; ".join(e.flags),
                    "run_id": r.run_id,
                    "grader_fp": r.grader_fp,
                }
            )
    return out


def _usage_columns(extra: Mapping[str, Any]) -> dict[str, Any]:
    """Tokens and cost of the calls behind a result (None where the result records no usage)."""
    usage = extra.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    return {
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "cost_usd": usage.get("cost_usd"),
    }


#: Columns of a breakdown row before the named metrics (which follow, one column each).
BREAKDOWN_COLUMNS = (
    "benchmark",
    "family",
    "key",
    "setting",
    "model",
    "judge",
    "score",
    "ci95_low",
    "ci95_high",
    "n",
    "n_unscored",
)


def breakdown_rows(boards: Sequence[Board]) -> list[dict[str, Any]]:
    """One flat row per breakdown cell (benchmark x family x key x result), metrics as columns.

    Every row has the same columns, a metric its cell lacks being None, as csv and parquet need;
    a metric named like a fixed column is written as ``metric_<name>``.
    """
    cells = [
        (b, fam.family, key, e, c)
        for b in boards
        for fam in breakdown_tables(b)
        for key, e, c in fam.rows()
    ]
    names = list(dict.fromkeys(m for *_, c in cells for m in c.metrics))
    columns = {m: f"metric_{m}" if m in BREAKDOWN_COLUMNS else m for m in names}
    out = []
    for b, family, key, e, c in cells:
        row: dict[str, Any] = {
            "benchmark": b.benchmark,
            "family": family,
            "key": key,
            "setting": e.setting,
            "model": e.row.model,
            "judge": e.row.judge or "",
            "score": c.score,
            "ci95_low": c.ci95[0] if c.ci95 else None,
            "ci95_high": c.ci95[1] if c.ci95 else None,
            "n": c.n,
            "n_unscored": c.n_unscored,
        }
        row.update({col: c.metrics.get(m) for m, col in columns.items()})
        out.append(row | {"run_id": e.row.run_id, "grader_fp": e.row.grader_fp})
    return out


#: Columns of a contamination probe row (:func:`grandrounds.analyses.contamination.probe_rows`).
PROBE_COLUMNS = (
    "benchmark",
    "model",
    "probe",
    "unit",
    "n_items",
    "n_paired",
    "n_failed",
    "original",
    "control",
    "difference",
    "ci95_low",
    "ci95_high",
)


def side_path(path: Path, table: str = "samples") -> Path:
    """Where a one-table format puts ``table`` beside ``path``: ``<stem>.<table><suffix>``."""
    return path.with_name(f"{path.stem}.{table}{path.suffix}")


def write(
    fmt: str,
    path: Path,
    board: list[dict[str, Any]],
    samples: list[dict[str, Any]],
    breakdowns: Sequence[dict[str, Any]] = (),
    contamination: Sequence[dict[str, Any]] = (),
) -> list[Path]:
    """Write ``fmt`` to ``path`` (and side files where the format holds one table); returns paths.

    Every file is written under a temporary name and renamed into place once all are complete
    (:func:`grandrounds.core.files.staged`), so a failure, a full disk included, leaves the
    previous report and its side files as they were."""
    if fmt not in FORMATS or fmt == "html":
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    tables = {"samples": samples, "breakdowns": list(breakdowns)}
    # contamination probes (never scores): json, md and xlsx hold them apart from the leaderboard, where there are any
    probes = {"contamination": list(contamination)} if contamination else {}
    with staged() as files:
        if fmt == "json":
            with files.open(path) as f:
                f.write(
                    json.dumps(
                        {"leaderboard": board, **tables, **probes}, ensure_ascii=False, indent=1
                    )
                )
            return [path]
        if fmt == "md":
            bd_cols = [
                c
                for c in (breakdowns[0] if breakdowns else BREAKDOWN_COLUMNS)
                if c not in ("run_id", "grader_fp")
            ]
            with files.open(path) as f:
                f.write(
                    _md(
                        board,
                        [
                            "benchmark",
                            "setting",
                            "rank",
                            "tied",
                            "model",
                            "score",
                            "ci95_low",
                            "ci95_high",
                            "n",
                            "n_unscored",
                            "coverage",
                            "n_truncated",
                            "prompt_tokens",
                            "completion_tokens",
                            "cost_usd",
                            "protocol",
                            "flags",
                        ],
                    )
                    + "\n\n"
                    + _md(
                        samples,
                        [
                            "benchmark",
                            "sample_id",
                            "model",
                            "judge",
                            "value",
                            "n_unknown",
                            "error",
                            "answer",
                        ],
                    )
                    + "\n\n"
                    + _md(tables["breakdowns"], bd_cols)
                    + (
                        "\n\n## Contamination probes (not scores)\n\n"
                        + _md(probes["contamination"], list(PROBE_COLUMNS))
                        if probes
                        else ""
                    )
                )
            return [path]
        if fmt == "xlsx":
            with files.open(path, "wb") as f:
                _xlsx(f, {"leaderboard": board, **tables, **probes})
            return [path]
        writer, mode = (_csv, "w") if fmt == "csv" else (_parquet, "wb")
        for target, rows in (
            (path, board),
            *((side_path(path, name), t) for name, t in tables.items()),
        ):
            with files.open(target, mode) as f:
                writer(f, rows)
    return [path, *(side_path(path, name) for name in tables)]


#: Leading characters that make a spreadsheet read a cell as a formula (OWASP, "CSV Injection":
#: = + - @, tab and carriage return).
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(v: Any) -> Any:
    """A value as a CSV cell: text whose first character, or first after leading white space, is one
    of :data:`FORMULA_LEADS` gets a leading ``'``, so LibreOffice, Excel and Sheets show it as text.
    Numbers (int, float; not bool) stay numbers, a negative one included: the string "-1" is text
    like any other and is neutralised too."""
    if v is None or isinstance(v, (bool, int, float)):
        return v
    text = safe_text(
        v
    )  # control characters shown escaped: no escape sequence reaches a terminal that shows the file
    if text.startswith(FORMULA_LEADS) or text.lstrip(" \t\r\n").startswith(FORMULA_LEADS):
        return "'" + text
    return text


#: Characters with a meaning in Markdown (CommonMark and GitHub tables) or HTML, backslash-escaped in
#: md cells; every one is ASCII punctuation, which CommonMark lets a backslash escape.
_MD_SPECIAL = frozenset("\\`*_[]<>#|~!&{}()")


def md_cell(v: Any) -> str:
    """A value as one Markdown table cell: numbers formatted, text with every Markdown/HTML special
    character backslash-escaped and line breaks as spaces, so it stays one cell and shows as typed
    (``<script>`` is text, ``[x](y)`` no link, ``|`` no column)."""
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4f}"
    text = safe_text(
        " ".join(str(v).replace("\r\n", "\n").splitlines()) if isinstance(v, str) else str(v)
    )
    return "".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in text)


def _md(rows: list[dict[str, Any]], cols: list[str]) -> str:
    lines = ["| " + " | ".join(md_cell(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(md_cell(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def _csv(f: IO[str], rows: list[dict[str, Any]]) -> None:
    if not rows:
        return
    fields = list(rows[0])
    w = csv.writer(f)
    w.writerow([csv_cell(c) for c in fields])
    w.writerows([csv_cell(r.get(c)) for c in fields] for r in rows)


def _parquet(f: IO[bytes], rows: list[dict[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows) if rows else pa.table({}), f)


def _xlsx(f: IO[bytes], sheets: dict[str, list[dict[str, Any]]]) -> None:
    """One sheet per table, in order; text is kept as text (never a formula) and cut to Excel's limit."""
    from openpyxl import Workbook

    wb = Workbook()
    wb.remove(wb.active)
    for name, rows in sheets.items():
        ws = wb.create_sheet(name)
        if not rows:
            continue
        ws.append(list(rows[0]))
        for i, r in enumerate(rows, start=2):
            for j, v in enumerate(r.values(), start=1):
                if isinstance(v, str):
                    # Excel's cell limit is 32,767 characters; control characters and lone
                    # surrogates (which a worksheet cannot hold) shown escaped
                    v = safe_text(v[:32000])
                cell = ws.cell(row=i, column=j, value=v)
                if isinstance(v, str) and v.startswith("="):
                    cell.data_type = "s"  # model text is text, never a formula
    wb.save(f)
