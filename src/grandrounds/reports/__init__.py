"""Reports over the store: leaderboard, comparisons and report files (html, md, csv, xlsx, json, parquet)."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: every command loads this package, a run needs none of it
    from grandrounds.analyses import leaderboard as analysis
    from grandrounds.store import Store


def boards(
    store: Store,
    benchmark: str | None = None,
    seed: int = 0,
    run_ids: Collection[str] | None = None,
    rank_by: str = "score",
) -> list[analysis.Board]:
    """The leaderboard with paired tie groups, from everything stored (or from the runs ``run_ids``)."""
    from grandrounds.analyses import collect
    from grandrounds.analyses import leaderboard as analysis

    rows = collect.result_rows(store, benchmark, run_ids)
    return analysis.leaderboard(
        rows, collect.values(store, [r.key for r in rows]), seed=seed, rank_by=rank_by
    )


def build_report(
    store: Store,
    fmt: str,
    out: Path,
    benchmark: str | None = None,
    seed: int = 0,
    max_items: int | None = None,
    title: str = "grandrounds report",
    run_ids: Collection[str] | None = None,
) -> list[Path]:
    """Write the report in ``fmt`` to ``out`` (restricted to the runs ``run_ids`` when given); returns the files written."""
    from grandrounds.analyses import collect
    from grandrounds.analyses.contamination import probe_rows
    from grandrounds.analyses.judge_validation import agreement_by_result
    from grandrounds.reports import html, tabular

    if fmt not in tabular.FORMATS:
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(tabular.FORMATS)}")
    bs = boards(store, benchmark, seed, run_ids)
    rows = [e.row for b in bs for e in b.entries]
    sections = collect.drilldown(store, rows, max_items)
    # contamination probes beside the scores (never among them): of the report's models where runs are chosen
    probes = probe_rows(store, benchmark, {r.model for r in rows} if run_ids is not None else None)
    if fmt == "html":
        from grandrounds.core.files import staged

        images = html.ReportImages(store.image_store())  # the images the runs sent
        page = html.render(bs, sections, title, agreement_by_result(store, rows), images, probes)
        with (
            staged() as files,
            files.open(out) as f,
        ):  # atomic: a failed write leaves the previous report
            f.write(page)
        return [out]
    return tabular.write(
        fmt,
        out,
        tabular.board_rows(bs),
        collect.sample_rows(sections),
        tabular.breakdown_rows(bs),
        probes,
    )
