"""Leaderboard and per-sample rows as md, csv, xlsx, json or parquet.

csv and parquet are one table per file, so the per-sample rows go beside PATH as
``<stem>.samples.<ext>``; xlsx gets two sheets, json one object, md two tables.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Sequence

from grandrounds.analysis import Board

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
                    "judge": r.judge or "",
                    "flags": "; ".join(e.flags),
                    "run_id": r.run_id,
                    "grader_fp": r.grader_fp,
                }
            )
    return out


def side_path(path: Path) -> Path:
    return path.with_name(f"{path.stem}.samples{path.suffix}")


def write(fmt: str, path: Path, board: list[dict[str, Any]], samples: list[dict[str, Any]]) -> list[Path]:
    """Write ``fmt`` to ``path`` (and a side file where the format holds one table); returns paths."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "json":
        path.write_text(json.dumps({"leaderboard": board, "samples": samples}, ensure_ascii=False, indent=1), encoding="utf-8")
        return [path]
    if fmt == "md":
        path.write_text(_md(board, ["benchmark", "setting", "rank", "tied", "model", "score", "ci95_low", "ci95_high", "n", "n_unscored", "coverage", "flags"])
                        + "\n\n" + _md(samples, ["benchmark", "sample_id", "model", "value", "n_unknown", "error"]), encoding="utf-8")
        return [path]
    if fmt == "csv":
        _csv(path, board)
        _csv(side_path(path), samples)
        return [path, side_path(path)]
    if fmt == "xlsx":
        _xlsx(path, board, samples)
        return [path]
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(board), path)
        pq.write_table(pa.Table.from_pylist(samples) if samples else pa.table({}), side_path(path))
        return [path, side_path(path)]
    raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def _md(rows: list[dict[str, Any]], cols: list[str]) -> str:
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def _csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        if not rows:
            return
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _xlsx(path: Path, board: list[dict[str, Any]], samples: list[dict[str, Any]]) -> None:
    from openpyxl import Workbook

    wb = Workbook()
    wb.active.title = "leaderboard"
    for ws, rows in ((wb.active, board), (wb.create_sheet("samples"), samples)):
        if not rows:
            continue
        ws.append(list(rows[0]))
        for i, r in enumerate(rows, start=2):
            for j, v in enumerate(r.values(), start=1):
                if isinstance(v, str):
                    v = v[:32000]  # Excel's cell limit is 32,767 characters
                cell = ws.cell(row=i, column=j, value=v)
                if isinstance(v, str) and v.startswith("="):
                    cell.data_type = "s"  # model text is text, never a formula
    wb.save(path)
