"""The self-contained HTML report: leaderboard, breakdown radars and tables, per-question drill-down.

One file, no network: CSS, a few lines of JS and SVG are inline. Every string that came
from a model, a judge, a dataset or the store goes through :func:`html.escape`; the JS only
toggles classes and reads ``textContent``.
"""

from __future__ import annotations

from html import escape
from typing import Sequence

from grandrounds.analysis import Board, Entry, FamilyTable, breakdown_tables
from grandrounds.records import Grade
from grandrounds.reports.collect import Item, Section, question_text
from grandrounds.display import BASE_CSS, fmt, fmt_ci
from grandrounds.reports.radar import COLOURS, radar_svg

CSS = BASE_CSS + """
body{margin:1.5em}table{margin:.5em 0 1.2em}td,th{padding:3px 7px}.flag{color:#a33;font-size:12px}.tied{background:#fff6d5;font-size:12px;padding:0 4px}
.answers{gap:10px}details{border-bottom:1px solid #eee;padding:3px 0}summary{cursor:pointer}
.chip{font-size:12px;margin-left:6px;padding:0 4px;border-radius:3px;background:#eef}.hidden{display:none}.radars{display:flex;flex-wrap:wrap;gap:12px}
"""

JS = """
document.querySelectorAll('input.filter').forEach(function(box){
  box.addEventListener('input', function(){
    var needle = box.value.toLowerCase();
    document.querySelectorAll('#' + box.dataset.target + ' details.item').forEach(function(d){
      d.classList.toggle('hidden', needle !== '' && d.textContent.toLowerCase().indexOf(needle) < 0);
    });
  });
});
"""


def render(boards: Sequence[Board], sections: Sequence[Section], title: str = "grandrounds report") -> str:
    """The whole report as one HTML string."""
    sec_ids = {s.benchmark: f"drill-{i}" for i, s in enumerate(sections)}
    out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title><style>{CSS}</style></head><body>"]
    out.append(f"<h1>{escape(title)}</h1>")
    out.append("<h2 id='leaderboard'>Leaderboard</h2>")
    for b in boards:
        out.append(_board(b, sec_ids.get(b.benchmark)))
    for i, sec in enumerate(sections):
        out.append(_section(sec, f"drill-{i}"))
    out.append(f"<script>{JS}</script></body></html>")
    return "".join(out)


def _board(b: Board, anchor: str | None) -> str:
    h = [f"<h3>{escape(b.benchmark)} <small>({escape(b.metric)})</small></h3>"]
    if b.settings > 1:
        h.append(f"<p class='flag'>⚠ {b.settings} settings that are not comparable: ranks hold only within a setting.</p>")
    h.append("<table class='board'><tr><th>setting</th><th>rank</th><th>model</th><th>score</th><th>95% CI</th><th>n</th><th>unscored</th><th>coverage</th><th>truncated</th><th>protocol</th><th>judge</th><th>flags</th></tr>")
    group_sizes: dict[tuple[int, int | None], int] = {}
    for e in b.entries:
        group_sizes[(e.setting, e.group)] = group_sizes.get((e.setting, e.group), 0) + 1
    for e in b.entries:
        r = e.row
        ci = fmt_ci(r.ci95)
        tied = " <span class='tied'>tied</span>" if e.group is not None and group_sizes[(e.setting, e.group)] > 1 else ""
        model = escape(r.model)
        model_cell = f"<a href='#{anchor}'>{model}</a>" if anchor else model
        flags = "<br>".join(escape(f) for f in e.flags)
        h.append(
            f"<tr><td>{e.setting}</td><td>{fmt(e.rank)}{tied}</td><td>{model_cell}</td><td>{fmt(r.score)}</td><td>{ci}</td>"
            f"<td>{r.n}</td><td>{r.n_unscored}</td><td>{fmt(r.coverage)}</td><td>{fmt(r.n_truncated)}</td><td>{escape(r.protocol)}</td>"
            f"<td>{escape(r.judge or '')}</td><td class='flag'>{flags}</td></tr>"
        )
    h.append("</table>")
    h.append(_breakdowns(b))
    return "".join(h)


def _breakdowns(b: Board) -> str:
    """Per breakdown family: a radar of the cells' scores (when :func:`radar_svg` can draw its keys)
    and a collapsed table of every cell with its CI, n, unscored count and named metrics."""
    charts, tables = [], []
    for fam in breakdown_tables(b):
        series = {_label(b, e): {k: c.score for k, c in cells.items()} for e, cells in zip(fam.entries, fam.cells) if cells}
        svg = radar_svg(fam.keys, series)
        if svg:
            charts.append(f"<figure><figcaption>{escape(b.benchmark)}: {escape(fam.family)}</figcaption>{svg}</figure>")
        tables.append(_family_table(b, fam))
    radars = f"<div class='radars'>{''.join(charts)}</div>" if charts else ""
    return radars + "".join(tables)


def _label(b: Board, e: Entry) -> str:
    """A result's name in a chart legend or table: its model, and its setting when settings differ."""
    return f"{e.row.model} (setting {e.setting})" if b.settings > 1 else e.row.model


def _family_table(b: Board, fam: FamilyTable) -> str:
    """One family's cells as a table inside a closed <details>, a row per key and result."""
    heads = "".join(f"<th>{escape(h)}</th>" for h in (fam.family, "model", "score", "95% CI", "n", "unscored", *fam.metrics))
    h = [f"<details class='breakdown'><summary>{escape(b.benchmark)} by {escape(fam.family)} ({len(fam.keys)})</summary><table><tr>{heads}</tr>"]
    for key, e, c in fam.rows():  # score and metrics come from stored JSON: escaped like any text
        metrics = "".join(f"<td>{escape(fmt(c.metrics[m])) if m in c.metrics else ''}</td>" for m in fam.metrics)
        h.append(f"<tr><td>{escape(key)}</td><td>{escape(_label(b, e))}</td><td>{escape(fmt(c.score))}</td><td>{fmt_ci(c.ci95)}</td>"
                 f"<td>{c.n}</td><td>{c.n_unscored}</td>{metrics}</tr>")
    h.append("</table></details>")
    return "".join(h)


def _section(sec: Section, sid: str) -> str:
    h = [f"<h2 id='{sid}'>Questions: {escape(sec.benchmark)} <small>dataset {escape(sec.dataset[:12])}</small></h2>"]
    h.append(f"<p>Filter: <input class='filter' data-target='{sid}' placeholder='text in question, answer or verdict'></p>")
    for k, item in enumerate(sec.items):
        h.append(_item(item, f"{sid}-q{k}"))
    return "<div id='" + sid + "'>" + "".join(h) + "</div>"


def _item(item: Item, qid: str) -> str:
    s = item.sample
    chips = "".join(f"<span class='chip' style='border-left:4px solid {COLOURS[i % len(COLOURS)]}'>{fmt(_value(a.grade), 2)}</span>" for i, a in enumerate(item.answers))
    h = [f"<details class='item' id='{qid}'><summary>{escape(s.id)}: {escape(question_text(s)[:120])}{chips}</summary>"]
    for m in s.messages:
        h.append(f"<div class='q'><b>{escape(m.role)}:</b> {escape(m.content)}</div>")
    if s.target is not None:
        h.append(f"<p>Target: {escape(str(s.target))}</p>")
    cols = max(1, len(item.answers))
    h.append(f"<div class='answers' style='grid-template-columns:repeat({cols},minmax(0,1fr))'>")
    for i, a in enumerate(item.answers):
        g = a.grade
        head = f"<b style='color:{COLOURS[i % len(COLOURS)]}'>{escape(a.row.model)}</b> value {fmt(_value(g))}"
        if g is not None and g.extracted is not None:
            head += f", extracted {escape(str(g.extracted))}"
        err = (g.error if g else None) or (a.error if a.text is None else None)
        if err:
            head += f" <span class='unknown'>{escape(err)}</span>"
        h.append(f"<div><div>{head}</div><div class='ans'>{escape(a.text or '')}</div>{_votes(g)}</div>")
    h.append("</div>")
    if s.rubric:
        h.append(_rubric(item))
    h.append("</details>")
    return "".join(h)


def _votes(g: Grade | None) -> str:
    """Whole-answer judge votes (one per judge run): judge, run, score or status, explanation."""
    if g is None or not g.votes:
        return ""
    rows = "".join(
        f"<li>{escape(v.judge)} run {v.run}: <span class='{escape(v.status)}'>"
        f"{escape(fmt(v.score, 0) if v.score is not None else v.status)}</span> <small>{escape(v.explanation)}</small></li>"
        for v in g.votes
    )
    return f"<ul class='votes'>{rows}</ul>"


def _value(g: Grade | None) -> float | None:
    return g.value if g is not None else None


def _rubric(item: Item) -> str:
    heads = "".join(f"<th>{escape(a.row.model)}</th>" for a in item.answers)
    h = [f"<table class='rubric'><tr><th>criterion</th><th>points</th>{heads}</tr>"]
    verdicts = [{v.criterion_id: v for v in (a.grade.verdicts if a.grade else ())} for a in item.answers]
    for c in item.sample.rubric:
        cells = []
        for vs in verdicts:
            v = vs.get(c.id)
            if v is None:
                cells.append("<td class='unknown'>not graded</td>")
                continue
            votes = f" <small>votes {escape(', '.join(v.statuses))}</small>" if len(set(v.statuses)) > 1 else ""
            cells.append(f"<td><span class='{escape(v.status)}'>{escape(v.status)}</span>{votes}<br><small>{escape(v.explanation)}</small></td>")
        tags = f"<br><small>{escape(', '.join(c.tags))}</small>" if c.tags else ""
        h.append(f"<tr><td>{escape(c.text)}{tags}</td><td>{fmt(c.points, 1)}</td>{''.join(cells)}</tr>")
    h.append("</table>")
    return "".join(h)
