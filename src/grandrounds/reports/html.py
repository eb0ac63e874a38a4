"""The self-contained HTML report: leaderboard, breakdown radars and tables, per-question drill-down.

One file, no network: CSS, a few lines of JS and SVG are inline. Every string that came
from a model, a judge, a dataset or the store goes through :func:`html.escape`; the JS only
toggles classes and reads ``textContent``.

A question's images stand beside its answers. Each distinct image is embedded once, as an SVG
``<symbol>`` holding a ``data:`` URI, and every question showing it draws it with ``<use>`` (a
thumbnail 240 px wide that a click enlarges, no JS): a VQA-RAD run's 451 questions show 203
images, 14 MB embedded once against 32 MB embedded per question. Only stored images of a shown
type whose bytes are that type and hash to their name are embedded (see
:func:`grandrounds.analyses.collect.shown_image`), and only until ``IMAGE_CAP`` characters of
them; past it a question says the image is not embedded and names the viewer.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping, Sequence
from html import escape as _escape
from typing import TYPE_CHECKING, Any

from grandrounds.analyses.collect import SHA256_HEX, ImageRefused, Item, Section, shown_image
from grandrounds.analyses.labels import shown_questions
from grandrounds.analyses.leaderboard import (
    Board,
    Entry,
    FamilyTable,
    ResultRow,
    breakdown_tables,
    run_label,
)
from grandrounds.analyses.readings import target_words
from grandrounds.core.display import BASE_CSS, episode_summary, fmt, fmt_ci
from grandrounds.core.hashing import escape_surrogates
from grandrounds.core.records import Grade, ImagePart, Message, TextPart
from grandrounds.reports.radar import COLOURS, radar_svg
from grandrounds.run.costs import usage_cells
from grandrounds.store.images import ImageStore

if TYPE_CHECKING:
    from grandrounds.analyses.irt import ItemFit

CSS = (
    BASE_CSS
    + """
body{margin:1.5em}table{margin:.5em 0 1.2em}td,th{padding:3px 7px}.flag{color:#a33;font-size:12px}.tied{background:#fff6d5;font-size:12px;padding:0 4px}
.answers{gap:10px}details{border-bottom:1px solid #eee;padding:3px 0}summary{cursor:pointer}
.chip{font-size:12px;margin-left:6px;padding:0 4px;border-radius:3px;background:#eef}.hidden{display:none}.radars{display:flex;flex-wrap:wrap;gap:12px}
.with-images{display:flex;gap:14px;align-items:flex-start}.figures{flex:0 0 auto;max-width:60%}.qa-main{flex:1 1 auto;min-width:0}
figure.fig{margin:0 0 .6em}svg.thumb{display:block;max-width:240px;height:auto;border:1px solid #ccc;cursor:zoom-in}
input.zoom{display:none}input.zoom:checked+label svg.thumb{max-width:100%;cursor:zoom-out}.imgref{color:#666}
"""
)


def escape(value: str, quote: bool = True) -> str:
    """:func:`html.escape`, with each lone surrogate (a reply's ``"yes\\ud800"``, which has no
    UTF-8 form) shown as its ``\\uXXXX`` escape and a NUL (which a browser drops or replaces) as
    ``\\x00``."""
    return escape_surrogates(_escape(value, quote)).replace("\x00", "\\x00")


#: Characters of embedded images (``data:`` URIs) a report holds at most: past it, images are named, not embedded.
IMAGE_CAP = 50_000_000
#: Pillow's name of each shown image type.
PIL_FORMATS = {"image/jpeg": "JPEG", "image/png": "PNG", "image/gif": "GIF", "image/webp": "WEBP"}

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


class ReportImages:
    """The images a report embeds: each distinct one once, as an SVG symbol, until ``cap`` characters."""

    def __init__(self, store: ImageStore | None, cap: int | None = None) -> None:
        self.store, self.cap, self.used = store, IMAGE_CAP if cap is None else cap, 0
        self.sizes: dict[
            str, tuple[int, int] | str
        ] = {}  # sha256 -> (width, height) embedded, or why not
        self.pending: list[str] = []  # symbols not yet written

    def figure(self, part: ImagePart, n: int, fid: str) -> str:
        """A question's ``n``-th image: an enlargeable thumbnail of its symbol, or why it is not shown."""
        what = f"image {n} · {escape(part.media_type)}"
        if not SHA256_HEX.fullmatch(part.sha256):
            return f"<div class='fig flag'>{what}: not a stored image</div>"
        size = self.sizes.get(part.sha256) or self._embed(part.sha256)
        caption = f"{what} · {part.sha256[:12]}"
        if isinstance(size, str):
            return f"<div class='fig'><span class='flag'>{escape(size)}</span><br><small>{caption}</small></div>"
        w, h = size
        return (
            f"<figure class='fig'><input type='checkbox' class='zoom' id='{fid}'><label for='{fid}' title='click to enlarge'>"
            f"<svg class='thumb' viewBox='0 0 {w} {h}' width='{w}' height='{h}' role='img' aria-label='image {n}'>"
            f"<use href='#im-{part.sha256}'/></svg></label><figcaption class='small'>{caption}</figcaption></figure>"
        )

    def _embed(self, sha256: str) -> tuple[int, int] | str:
        """Embed a stored image (a pending symbol); its (width, height), or why it is not embedded."""
        if self.store is None:
            return "image not embedded (no image store); see the viewer"
        try:
            got = shown_image(self.store, sha256)
            size = None if got is None else _image_size(*got)
        except ImageRefused as e:
            got, size = None, f"image not shown: {e}"
        if got is None or size is None or isinstance(size, str):
            self.sizes[sha256] = size or f"image not in the store ({self.store.root.name})"
            return self.sizes[sha256]
        uri = f"data:{got[1]};base64,{base64.b64encode(got[0]).decode('ascii')}"
        if self.used + len(uri) > self.cap:  # a smaller image may still fit; this one never will
            self.sizes[sha256] = "image not embedded (report size cap); see the viewer"
            return self.sizes[sha256]
        self.used += len(uri)
        w, h = self.sizes[sha256] = size
        self.pending.append(
            f"<symbol id='im-{sha256}' viewBox='0 0 {w} {h}'><image href='{uri}' width='{w}' height='{h}'/></symbol>"
        )
        return w, h

    def symbols(self) -> str:
        """The symbols embedded since the last call, in one hidden SVG ("" when none)."""
        out, self.pending = self.pending, []
        return (
            f"<svg class='sprites' width='0' height='0' aria-hidden='true' style='position:absolute'>{''.join(out)}</svg>"
            if out
            else ""
        )


def _image_size(data: bytes, media_type: str) -> tuple[int, int] | str:
    """(width, height) of an image Pillow reads as its media type; else why it is not shown."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data), formats=[PIL_FORMATS[media_type]]) as im:
            w, h = im.size
    except (UnidentifiedImageError, OSError, ValueError, KeyError, Image.DecompressionBombError):
        return f"image not shown: not a readable {media_type}"
    return (w, h) if w > 0 and h > 0 else f"image not shown: {w}x{h} pixels"


def render(
    boards: Sequence[Board],
    sections: Sequence[Section],
    title: str = "grandrounds report",
    agreement: Mapping[tuple[str, str], str] | None = None,
    images: ReportImages | None = None,
    contamination: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The whole report as one HTML string. ``agreement``: (run id, grader fingerprint) -> the judge's
    measured agreement with physicians, shown beside the scores that judge judged. ``images``: where
    the questions' images come from (none embedded without it). ``contamination``: the stored probe
    results (:func:`grandrounds.analyses.contamination.probe_rows`), a section of their own after the
    leaderboard, never among its scores."""
    images = images or ReportImages(None)
    sec_ids = {s.benchmark: f"drill-{i}" for i, s in enumerate(sections)}
    out = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title><style>{CSS}</style></head><body>"
    ]
    out.append(f"<h1>{escape(title)}</h1>")
    out.append("<h2 id='leaderboard'>Leaderboard</h2>")
    for b in boards:
        out.append(_board(b, sec_ids.get(b.benchmark), agreement or {}))
    out.append(_contamination(contamination))
    out.append(_robustness(boards, sections))
    out.append(_irt(sections))
    for i, sec in enumerate(sections):
        out.append(_section(sec, f"drill-{i}", images))
    out.append(f"<script>{JS}</script></body></html>")
    return "".join(out)


def _signed(v: Any) -> str:
    return "n/a" if v is None else f"{v:+.3f}"


def _contamination(rows: Sequence[Mapping[str, Any]]) -> str:
    """The contamination probes (:mod:`grandrounds.analyses.contamination`): per benchmark, model and
    probe, the original wording's figure, the reworded control's, their paired difference and its
    95% CI; nothing when the store holds none."""
    if not rows:
        return ""
    h = [
        "<h2 id='contamination'>Contamination probes (not scores)</h2><p class='small'>Has a model seen a benchmark's items "
        "verbatim? Each probe compares the benchmark's own wording with a reworded control, item by item: difference = original - "
        "control on the items known both ways, with a paired bootstrap 95% CI. A difference above zero suggests the wording was seen. "
        "These figures are not scores and are not in the leaderboard.</p>",
        "<table class='contamination'><tr><th>benchmark</th><th>model</th><th>probe</th><th>unit</th><th>items</th><th>paired</th>"
        "<th>unknown</th><th>original</th><th>control</th><th>difference</th><th>95% CI</th></tr>",
    ]
    for r in rows:
        ci = (r["ci95_low"], r["ci95_high"]) if r.get("ci95_low") is not None else None
        cells = [str(r.get(k) or "") for k in ("benchmark", "model", "probe", "unit")]
        cells += [fmt(r.get(k)) for k in ("n_items", "n_paired", "n_failed", "original", "control")]
        cells += [_signed(r.get("difference")), fmt_ci(ci)]
        h.append(
            "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>"
        )  # stored text: escaped
    h.append("</table>")
    return "".join(h)


def _robustness(boards: Sequence[Board], sections: Sequence[Section]) -> str:
    """Probe runs beside their unperturbed runs (:mod:`grandrounds.analyses.robustness`): each probe's accuracy
    drop with its paired CI, option-order consistency, per-position bias and the attacker's rewrites;
    nothing when the store holds no probe run."""
    from grandrounds.analyses.robustness import report_summaries

    def signed(v: float | None, ci: Sequence[float] | None = None) -> str:
        return (
            "n/a" if v is None else f"{v:+.3f}" + (f" [{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci else "")
        )

    summaries = report_summaries([e.row for b in boards for e in b.entries], sections)
    if not summaries:
        return ""
    h = [
        "<h2 id='robustness'>Robustness</h2><p class='small'>Each probe run against the unperturbed run of the same model "
        "and settings, item by item: drop = unperturbed - probe on the items both scored, with a paired bootstrap 95% CI and "
        "the exact McNemar test (b right to wrong, c wrong to right). Failed answers are left out and counted. A probe's "
        "items are in the drill-down under its dataset key.</p>"
    ]
    for s in summaries:
        h.append(
            f"<h3>{escape(s.benchmark)} · {escape(s.label)} <small>unperturbed run {escape(s.baseline_run)}</small></h3>"
        )
        if not s.complete:
            h.append(
                "<p class='flag'>Computed over the items in this report's drill-down only (--max-items).</p>"
            )
        h.append(
            "<table class='robustness'><tr><th>probe</th><th>dataset</th><th>items</th><th>paired</th><th>left out</th>"
            "<th>not applicable</th><th>unperturbed</th><th>probe</th><th>drop [95% CI]</th><th>McNemar b/c/p</th></tr>"
        )
        for d in s.drops:
            mc = f"{d.mcnemar[0]}/{d.mcnemar[1]}/p={d.mcnemar[2]:.3g}" if d.mcnemar else "n/a"
            h.append(
                f"<tr><td>{escape(d.probe)}</td><td>{escape(d.dataset[:12])}</td><td>{d.n_items}</td><td>{d.n_paired}</td>"
                f"<td>{d.n_left_out}</td><td>{d.n_not_applicable}</td><td>{fmt(d.baseline)}</td><td>{fmt(d.probed)}</td>"
                f"<td>{signed(d.drop, d.ci95)}</td><td>{escape(mc)}</td></tr>"
            )
        h.append("</table>")
        c = s.consistency
        if c is not None:
            h.append(
                f"<p>Consistency over {c.n_orders} option orders: {c.n_consistent}/{c.n} items chose the same option text, "
                f"{fmt(c.rate)} {fmt_ci(c.ci95)}; {c.n_left_out} left out (no readable choice in some order).</p>"
            )
        b = s.position_bias
        h.append(
            f"<table class='positions'><caption>Option positions over {escape(', '.join(b.runs))}: {b.n_answers} answers, "
            f"{b.n_left_out} left out</caption><tr><th>position</th><th>answers</th><th>key here</th><th>chosen</th>"
            "<th>chosen - key</th><th>chosen when key elsewhere [95% CI]</th><th>accuracy when key here [95% CI]</th></tr>"
        )
        for p in b.positions:
            h.append(
                f"<tr><td>{escape(p.position)}</td><td>{p.n_answers}</td><td>{fmt(p.keyed)}</td><td>{fmt(p.chosen)}</td>"
                f"<td>{signed(p.excess)}</td><td>{fmt(p.attraction)} {fmt_ci(p.attraction_ci95)}</td>"
                f"<td>{fmt(p.accuracy_keyed)} {fmt_ci(p.accuracy_keyed_ci95)}</td></tr>"
            )
        h.append("</table>")
        if s.rewrites:
            h.append(
                f"<details><summary>{len(s.rewrites)} questions rewritten by the attacker</summary>"
            )
            for r in s.rewrites:
                h.append(
                    f"<details class='rewrite'><summary>{escape(r.sample_id)}: unperturbed {fmt(r.baseline, 0)}, rewritten "
                    f"{fmt(r.probed, 0)}</summary><div class='q'><b>original:</b> {escape(r.original)}</div>"
                    f"<div class='q'><b>rewritten:</b> {escape(r.rewritten)}</div></details>"
                )
            h.append("</details>")
    return "".join(h)


def _board(b: Board, anchor: str | None, agreement: Mapping[tuple[str, str], str]) -> str:
    h = [f"<h3>{escape(b.benchmark)} <small>({escape(b.metric)})</small></h3>"]
    if b.settings > 1:
        h.append(
            f"<p class='flag'>⚠ {b.settings} settings that are not comparable: ranks hold only within a setting.</p>"
        )
    shown = any(e.row.key in agreement for e in b.entries)
    usage = [usage_cells(e.row.extra) for e in b.entries]
    costs = any(any(u) for u in usage)  # tokens (in+out) and cost of the calls behind each result
    h.append(
        "<table class='board'><tr><th>setting</th><th>rank</th><th>model</th><th>score</th><th>95% CI</th><th>n</th><th>unscored</th><th>coverage</th><th>truncated</th>"
        + ("<th>tokens</th><th>cost</th>" if costs else "")
        + "<th>protocol</th><th>judge</th>"
        + ("<th>judge agreement</th>" if shown else "")
        + "<th>flags</th></tr>"
    )
    group_sizes: dict[tuple[int, int | None], int] = {}
    for e in b.entries:
        group_sizes[(e.setting, e.group)] = group_sizes.get((e.setting, e.group), 0) + 1
    for e, (tokens, cost) in zip(b.entries, usage):
        r = e.row
        ci = fmt_ci(r.ci95)
        spent = f"<td>{escape(tokens)}</td><td>{escape(cost)}</td>" if costs else ""
        tied = (
            " <span class='tied'>tied</span>"
            if e.group is not None and group_sizes[(e.setting, e.group)] > 1
            else ""
        )
        model = escape(r.model) + f"<br><small>{escape(_run_label(r, with_model=False))}</small>"
        model_cell = f"<a href='#{anchor}'>{model}</a>" if anchor else model
        flags = "<br>".join(escape(f) for f in e.flags)
        agree = f"<td>{escape(agreement.get(r.key, ''))}</td>" if shown else ""
        h.append(
            f"<tr><td>{e.setting}</td><td>{fmt(e.rank)}{tied}</td><td>{model_cell}</td><td>{fmt(r.score)}{_episodes_note(r.extra)}</td><td>{ci}</td>"
            f"<td>{r.n}</td><td>{r.n_unscored}</td><td>{fmt(r.coverage)}</td><td>{fmt(r.n_truncated)}</td>{spent}<td>{escape(r.protocol)}</td>"
            f"<td>{escape(r.judge or '')}</td>{agree}<td class='flag'>{flags}</td></tr>"
        )
    h.append("</table>")
    if shown:
        from grandrounds.analyses.judge_validation import AGREEMENT_LEGEND

        h.append(f"<p class='flag'>{escape(AGREEMENT_LEGEND)}</p>")
    h.append(_breakdowns(b))
    return "".join(h)


def _episodes_note(extra: Mapping[str, Any]) -> str:
    """Under an agent benchmark's score: its episodes by how they ended, and pass^k over epochs."""
    text = episode_summary(extra, " · ")
    return f"<br><small class='episodes'>{escape(text)}</small>" if text else ""


def _breakdowns(b: Board) -> str:
    """Per breakdown family: a radar of the cells' scores (when :func:`radar_svg` can draw its keys)
    and a collapsed table of every cell with its CI, n, unscored count and named metrics."""
    charts, tables = [], []
    for fam in breakdown_tables(b):
        series = {
            _label(b, e): {k: c.score for k, c in cells.items()}
            for e, cells in zip(fam.entries, fam.cells)
            if cells
        }
        svg = radar_svg(fam.keys, series)
        if svg:
            charts.append(
                f"<figure><figcaption>{escape(b.benchmark)}: {escape(fam.family)}</figcaption>{svg}</figure>"
            )
        tables.append(_family_table(b, fam))
    radars = f"<div class='radars'>{''.join(charts)}</div>" if charts else ""
    return radars + "".join(tables)


def _label(b: Board, e: Entry) -> str:
    """A result's name in a chart legend or table: its model, and its setting when settings differ."""
    return f"{e.row.model} (setting {e.setting})" if b.settings > 1 else e.row.model


def _family_table(b: Board, fam: FamilyTable) -> str:
    """One family's cells as a table inside a closed <details>, a row per key and result."""
    heads = "".join(
        f"<th>{escape(h)}</th>"
        for h in (fam.family, "model", "score", "95% CI", "n", "unscored", *fam.metrics)
    )
    h = [
        f"<details class='breakdown'><summary>{escape(b.benchmark)} by {escape(fam.family)} ({len(fam.keys)})</summary><table><tr>{heads}</tr>"
    ]
    for key, e, c in fam.rows():  # score and metrics come from stored JSON: escaped like any text
        metrics = "".join(
            f"<td>{escape(fmt(c.metrics[m])) if m in c.metrics else ''}</td>" for m in fam.metrics
        )
        h.append(
            f"<tr><td>{escape(key)}</td><td>{escape(_label(b, e))}</td><td>{escape(fmt(c.score))}</td><td>{fmt_ci(c.ci95)}</td>"
            f"<td>{c.n}</td><td>{c.n_unscored}</td>{metrics}</tr>"
        )
    h.append("</table></details>")
    return "".join(h)


def _section(sec: Section, sid: str, images: ReportImages) -> str:
    h = [
        f"<h2 id='{sid}'>Questions: {escape(sec.benchmark)} <small>dataset {escape(sec.dataset[:12])}</small></h2>"
    ]
    h.append(
        f"<p>Filter: <input class='filter' data-target='{sid}' placeholder='text in question, answer or verdict'></p>"
    )
    questions = shown_questions([item.sample for item in sec.items])  # as the viewer lists them
    for k, (item, question) in enumerate(zip(sec.items, questions)):
        h.append(_item(item, f"{sid}-q{k}", question, images))
    return "<div id='" + sid + "'>" + "".join(h) + images.symbols() + "</div>"


def _message(m: Message, parts: list[ImagePart]) -> str:
    """A message as text, each image a marker ``[image n]`` (``n`` counts ``parts``, which it extends)."""
    if isinstance(m.content, str):
        return f"<div class='q'><b>{escape(m.role)}:</b> {escape(m.text)}</div>"
    shown = []
    for p in m.content:
        if isinstance(p, ImagePart):
            parts.append(p)
            shown.append(f"<span class='imgref'>[image {len(parts)}]</span> ")
        elif isinstance(p, TextPart):
            shown.append(escape(p.text))
        else:
            raise TypeError(f"a {type(p).__name__} is not part of a question")
    return f"<div class='q'><b>{escape(m.role)}:</b> {''.join(shown)}</div>"


def _item(item: Item, qid: str, question: str, images: ReportImages) -> str:
    s = item.sample
    chips = "".join(
        f"<span class='chip' style='border-left:4px solid {COLOURS[i % len(COLOURS)]}'>{fmt(_value(a.grade), 2)}</span>"
        for i, a in enumerate(item.answers)
    )
    h = [
        f"<details class='item' id='{qid}'><summary>{escape(s.id)}: {escape(question[:120])}{chips}</summary>"
    ]
    parts: list[ImagePart] = []
    h.extend(_message(m, parts) for m in s.messages)
    if parts:  # the images in a column of their own, the question and answers beside them
        figs = "".join(images.figure(p, n, f"{qid}-i{n}") for n, p in enumerate(parts, 1))
        h.insert(
            1, f"<div class='with-images'><div class='figures'>{figs}</div><div class='qa-main'>"
        )
    if s.target is not None:
        h.append(f"<p>Target: {escape(target_words(s.target))}</p>")
    cols = max(1, len(item.answers))
    h.append(f"<div class='answers' style='grid-template-columns:repeat({cols},minmax(0,1fr))'>")
    for i, a in enumerate(item.answers):
        g = a.grade
        head = f"<b style='color:{COLOURS[i % len(COLOURS)]}'>{escape(_run_label(a.row))}</b> value {fmt(_value(g))}"
        if g is not None and g.extracted is not None:
            head += f", extracted {escape(str(g.extracted))}"
        err = (g.error if g else None) or (a.error if a.text is None else None)
        if err:
            head += f" <span class='unknown'>{escape(err)}</span>"
        shown = (
            _transcript(a.episodes, g)
            if a.episodes
            else f"<div class='ans'>{escape(a.text or '')}</div>"
        )
        if a.read:  # a log-probability answer has no text: what was read from it, in words
            shown += f"<div class='read'>Read: {escape(a.read)}</div>"
        h.append(f"<div><div>{head}</div>{shown}{_votes(g)}</div>")
    h.append("</div>" + ("</div></div>" if parts else ""))
    if s.rubric:
        h.append(_rubric(item))
    h.append("</details>")
    return "".join(h)


def _transcript(episodes: Sequence[Mapping[str, Any]], g: Grade | None) -> str:
    """An agent's episodes step by step: replies, tool calls with arguments, what answered them,
    sandbox refusals; then each episode's outcome, final answer and the grader's checks."""
    outcomes = {e.get("epoch"): e for e in (g.details.get("epochs", ()) if g else ())}
    h = ["<div class='transcript'>"]
    for ep in episodes:
        out = outcomes.get(ep.get("epoch"), {})
        verdict = {True: " · success", False: " · failure"}.get(out.get("success"), "")
        h.append(
            f"<div class='epoch'>episode {int(ep.get('epoch', 0)) + 1} · {escape(str(ep.get('status')))}{verdict}</div>"
        )
        for st in ep.get("steps", ()):
            h.append(f"<div class='step'><small>step {int(st.get('step', 0)) + 1}</small>")
            if st.get("reply"):
                h.append(f"<div class='ans'>{escape(str(st['reply']))}</div>")
            h.extend(
                f"<div class='toolcall'>calls {escape(str(c.get('name')))} <code>{escape(str(c.get('arguments')))}</code></div>"
                for c in st.get("tool_calls", ())
            )
            for ev in st.get("events", ()):
                who = escape(
                    str(ev.get("actor", "environment"))
                    + (f" {ev['tool']}" if ev.get("tool") else "")
                )
                h.append(
                    f"<div class='event'><b>{who}:</b><div class='ans'>{escape(str(ev.get('text', '')))}</div></div>"
                )
                if ev.get("refused"):
                    h.append(
                        f"<div class='unknown'>sandbox refused: {escape('; '.join(map(str, ev['refused'])))}</div>"
                    )
            if st.get("error"):
                h.append(f"<div class='unknown'>{escape(str(st['error']))}</div>")
            h.append("</div>")
        if out.get("final") is not None:
            h.append(f"<div><b>final answer:</b> {escape(str(out['final']))}</div>")
        checks = "".join(_check(c) for c in out.get("checks", ()))
        if checks:
            h.append(f"<ul class='checks'>{checks}</ul>")
    h.append("</div>")
    return "".join(h)


def _check(c: Mapping[str, Any]) -> str:
    """One grader check: passed or FAILED, its name, and what it compared."""
    said = "passed" if c.get("passed") else "FAILED"
    detail = f" ({c['detail']})" if c.get("detail") else ""
    return f"<li class='{'met' if c.get('passed') else 'unmet'}'>{said}: {escape(str(c.get('name')) + detail)}</li>"


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
    heads = "".join(f"<th>{escape(_run_label(a.row))}</th>" for a in item.answers)
    h = [f"<table class='rubric'><tr><th>criterion</th><th>points</th>{heads}</tr>"]
    verdicts = [
        {v.criterion_id: v for v in (a.grade.verdicts if a.grade else ())} for a in item.answers
    ]
    for c in item.sample.rubric:
        cells = []
        for vs in verdicts:
            v = vs.get(c.id)
            if v is None:
                cells.append("<td class='unknown'>not graded</td>")
                continue
            votes = (
                f" <small>votes {escape(', '.join(v.statuses))}</small>"
                if len(set(v.statuses)) > 1
                else ""
            )
            cells.append(
                f"<td><span class='{escape(v.status)}'>{escape(v.status)}</span>{votes}<br><small>{escape(v.explanation)}</small></td>"
            )
        tags = f"<br><small>{escape(', '.join(c.tags))}</small>" if c.tags else ""
        h.append(
            f"<tr><td>{escape(c.text)}{tags}</td><td>{fmt(c.points, 1)}</td>{''.join(cells)}</tr>"
        )
    h.append("</table>")
    return "".join(h)


def _irt(sections: Sequence[Section]) -> str:
    """Item response theory (:mod:`grandrounds.analyses.irt`) for each right/wrong benchmark dataset with at
    least three respondents: abilities with their standard errors, candidate wrong keys (negative
    discrimination, with what the stronger models answered), uninformative items, every fitted
    item's parameters; nothing for graded benchmarks or too few respondents."""
    parts = [h for i, sec in enumerate(sections) if (h := _irt_section(i, sec))]
    if not parts:
        return ""
    intro = (
        "<h2 id='irt'>Item response theory</h2><p class='small'>A two-parameter logistic model, P(right) = sigmoid(a (ability - b)), "
        "fitted to the right/wrong answers of every model setting (model · answer mode · protocol; where a setting has several results, "
        "the one with the most scored answers) by joint maximum a posteriori estimation. Difficulty b and ability are on one scale "
        "(abilities ~ N(0, 1) a priori); discrimination a says how sharply an item separates strong from weak models. A negative "
        "discrimination (stronger models more often wrong) marks a candidate wrong key. Unscored answers are missing, not wrong. "
        "Standard errors come from the observed information; with few models each item is seen only a few times, so an item's "
        "discrimination is rough (see its SE).</p>"
    )
    return intro + "".join(parts)


def _irt_section(i: int, sec: Section) -> str:
    """The IRT block of the ``i``-th section; "" when it is not a right/wrong dataset with enough respondents."""
    from grandrounds.analyses.irt import (
        MIN_RESPONDENTS,
        Respondent,
        analyse,
        evidence,
        responses_from_section,
    )
    from grandrounds.analyses.irt_fit import IrtError

    try:
        resp, graded = responses_from_section(sec)
        res = analyse(resp, MIN_RESPONDENTS)
    except IrtError:
        return ""
    anchor = {item.sample.id: f"drill-{i}-q{k}" for k, item in enumerate(sec.items)}

    keys = {item.sample.id: item.sample.target for item in sec.items}

    def answer(who: Respondent, sid: str) -> tuple[float | None, str | None] | None:
        g = graded.get((who.run_id, who.grader_fp, sid))
        return None if g is None else (g.value, g.extracted)

    neg = res.negative
    ev = evidence(
        res,
        [it.id for it in neg],
        lambda sid: None if keys.get(sid) is None else str(keys[sid]),
        answer,
    )
    counts = res.to_json()["counts"]
    h = [
        f"<h3>{escape(sec.benchmark)} <small>dataset {escape(sec.dataset[:12])}: {counts['respondents']} respondents, "
        f"{counts['fitted']} of {counts['items']} items fitted ({res.fit.iterations} iterations, "
        f"{'converged' if res.fit.converged else 'not converged'})</small></h3>"
    ]
    h.extend(f"<p class='flag'>{escape(n)}</p>" for n in res.notes)
    h.append(
        "<table class='irt-ability'><tr><th>respondent</th><th>answered</th><th>right</th><th>ability</th><th>SE</th><th>95% CI</th></tr>"
    )
    for a in sorted(res.abilities, key=lambda a: -(a.theta if a.theta is not None else -1e9)):
        h.append(
            f"<tr><td>{escape(a.respondent.label)}</td><td>{a.n}</td><td>{a.n_right}</td><td>{fmt(a.theta, 2)}</td>"
            f"<td>{fmt(a.se, 2)}</td><td>{fmt_ci(a.ci95, 2)}</td></tr>"
        )
    h.append("</table>")
    h.append(_irt_wrong_keys(neg, ev, anchor))
    for status, what in (
        ("all_wrong", "no respondent gets right"),
        ("all_right", "every respondent gets right"),
        ("too_few", "fewer than 2 scored answers"),
    ):
        its = res.by_status(status)
        if its:
            h.append(
                f"<details><summary>{len(its)} item(s) {what} (not fitted: they say nothing about the model)</summary>"
                f"<p>{escape(', '.join(it.id for it in its))}</p></details>"
            )
    fitted = sorted(res.fitted, key=lambda it: it.discrimination or 0.0)
    h.append(
        f"<details><summary>All {len(fitted)} fitted items, least discriminating first</summary><table class='irt-items'>"
        "<tr><th>item</th><th>discrimination</th><th>SE</th><th>difficulty</th><th>SE</th><th>right / answered</th></tr>"
    )
    h.extend(
        f"<tr><td>{escape(it.id)}</td><td>{fmt(it.discrimination, 2)}</td><td>{fmt(it.discrimination_se, 2)}</td><td>{fmt(it.difficulty, 2)}</td>"
        f"<td>{fmt(it.difficulty_se, 2)}</td><td>{it.n_right}/{it.n}</td></tr>"
        for it in fitted
    )
    h.append("</table></details>")
    return "".join(h)


def _irt_wrong_keys(
    neg: Sequence[ItemFit], ev: Mapping[str, Mapping[str, Any]], anchor: Mapping[str, str]
) -> str:
    """The table of candidate wrong keys (items with negative discrimination), or a line saying there is none."""
    if not neg:
        return "<p>No item has negative discrimination (no candidate wrong key).</p>"
    sure = sum(1 for it in neg if it.negative_95)
    h = [
        f"<table class='irt-wrong-keys'><caption>Candidate wrong keys: {len(neg)} item(s) with negative discrimination, "
        f"{sure} below 0 with 95% confidence (*)</caption><tr><th>item</th><th>discrimination</th><th>SE</th><th>difficulty</th>"
        "<th>right / answered</th><th>key</th><th>stronger half answered</th></tr>"
    ]
    for it in neg:
        e = ev.get(it.id, {})
        said = ", ".join(f"{k} ×{v}" for k, v in (e.get("stronger_half_answered") or {}).items())
        link = (
            f"<a href='#{anchor[it.id]}'>{escape(it.id)}</a>" if it.id in anchor else escape(it.id)
        )
        h.append(
            f"<tr><td>{link}{' *' if it.negative_95 else ''}</td><td>{fmt(it.discrimination, 2)}</td><td>{fmt(it.discrimination_se, 2)}</td>"
            f"<td>{fmt(it.difficulty, 2)}</td><td>{it.n_right}/{it.n}</td><td>{escape(str(e.get('key') or ''))}</td><td>{escape(said)}</td></tr>"
        )
    h.append("</table>")
    return "".join(h)


def _run_label(row: ResultRow, with_model: bool = True) -> str:
    """What tells one result of a model from another: answer mode, protocol, judge, limit, run id."""
    label = run_label(dict(row.fingerprint) | {"model": row.model, "run_id": row.run_id}, row.judge)
    return label if with_model else label.split(" · ", 1)[-1]
