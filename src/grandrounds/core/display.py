"""How numbers and pages look, written once for the CLI tables, the reports and the viewer; and how
text from outside (servers, data files, model answers) is shown on a terminal."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segment
from rich.text import Text

#: Style shared by the offline HTML report and the viewer's page (each adds a few rules of its own).
BASE_CSS = (
    "body{font:14px/1.45 system-ui,sans-serif;margin:1em 1.5em;color:#222}"
    "table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 6px;vertical-align:top}th{background:#f4f4f4}"
    ".met{color:#176b2c}.unmet{color:#a11}.unknown{color:#a60;font-weight:bold}"
    ".answers{display:grid;gap:8px}"
    ".ans{white-space:pre-wrap;overflow-wrap:anywhere;border:1px solid #ccc;padding:6px;max-height:24em;overflow:auto;margin:0}"
    ".q{white-space:pre-wrap;background:#fafafa;padding:6px}.small{font-size:12px;color:#555}"
)


def fmt(v: Any, digits: int = 3) -> str:
    """A number to ``digits`` decimals (integers as they are), "n/a" for an unknown."""
    return "n/a" if v is None else (f"{v:.{digits}f}" if isinstance(v, float) else str(v))


def fmt_ci(ci: Sequence[float] | None, digits: int = 3) -> str:
    """A 95% CI as "[lo, hi]", "n/a" when there is none; an interval of no width (a few items, all
    alike) is marked "(degenerate)": it says the sample was too small to show spread, not certainty."""
    if not ci:
        return "n/a"
    shown = f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"
    return shown + " (degenerate)" if ci[0] == ci[1] else shown


# ---- text from outside, shown on a terminal ------------------------------------------------------
# Strings from a server (error bodies, batch ids) or a data file (sample ids, tags, model answers)
# reach the terminal through :func:`safe_text` and are never read as Rich markup: every console
# the command line prints on is a :class:`SafeConsole`.

#: C0 controls but tab and newline, DEL, and C1 controls (ECMA-48: ESC starts CSI/OSC sequences,
#: and a C1 byte such as U+009B is a CSI on its own on terminals that take 8-bit controls); and lone
#: UTF-16 surrogates (a reply's ``"yes\\ud800"``), which have no UTF-8 form to print or write.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe_text(value: Any) -> str:
    """``value`` as text a terminal shows as written: each control character (C0 but tab and
    newline, DEL, C1: the start of every escape sequence that clears the screen, moves the cursor,
    sets the title or the clipboard, or opens a link) is shown escaped, ``\\x1b`` for ESC, and a
    lone surrogate as ``\\ud800``. A CR LF line end is a line end."""
    text = value if isinstance(value, str) else str(value)
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(_escaped, text.replace("\r\n", "\n"))


def styled(value: Any, style: str = "") -> Text:
    """``value`` as Rich text in ``style``: shown as written (:func:`safe_text`), never read as markup."""
    return Text(safe_text(value), style=style)


#: The widest a table is laid out where the output is not a terminal (a log's reader wraps lines).
LOG_WIDTH = 400


class SafeConsole(Console):
    """A Rich console for text from outside: markup is off unless a call asks for it (a sample id
    ``[link=...]`` stays text, in a table cell as in a line), strings are passed through
    :func:`safe_text` before layout, and every segment drawn is checked again (Rich text built
    elsewhere, a renderable's own strings), so no control character of the data reaches the
    terminal. The console's own control codes (cursor moves of a live progress bar, colours) are
    segments of another kind and pass."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("markup", False)
        super().__init__(*args, **kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(safe_text(text), **kwargs)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """Lines of text printed where the output is not a terminal (a log file, a pipe) are kept
        whole, neither broken nor cut at the 80 columns Rich assumes there: the file's reader
        wraps them. A table (any other renderable) is laid out there at its natural width, so no
        figure is cut to ``+0.5…``; a width the user set (``COLUMNS``) is kept."""
        texts = all(isinstance(o, (str, Text)) for o in objects)
        if kwargs.get("soft_wrap") is None and not self.is_terminal and texts:
            kwargs["soft_wrap"] = True
        wide = 0 if texts or self.is_terminal or self._chosen_width() else self._natural(objects)
        if wide <= self.size.width:
            super().print(*objects, **kwargs)
            return
        kept = getattr(self, "_width", None)
        self._width = wide
        try:
            super().print(*objects, **kwargs)
        finally:
            setattr(self, "_width", kept)  # noqa: B010 (None: the width Rich detects)

    def _chosen_width(self) -> bool:
        """Whether a width was chosen for this console (its ``width=`` or ``COLUMNS``)."""
        return (
            getattr(self, "_width", None) is not None
            or self._environ.get("COLUMNS", "").strip().isdigit()
        )

    def _natural(self, objects: Sequence[Any]) -> int:
        """The width ``objects`` take laid out with no wrapping (at most :data:`LOG_WIDTH`)."""
        options = self.options.update_width(LOG_WIDTH)
        return max(
            (
                Measurement.get(self, options, o).maximum
                for o in objects
                if not isinstance(o, (str, Text))
            ),
            default=0,
        )

    def render(self, renderable: Any, options: Any = None) -> Iterable[Segment]:
        for seg in super().render(renderable, options):
            if seg.control is None and _CONTROL.search(seg.text) is not None:
                seg = Segment(safe_text(seg.text), seg.style)
            yield seg


def episode_summary(extra: Any, sep: str = ", ") -> str:
    """An agent result's episodes by how they ended (commonest first) and, where there were several
    epochs, pass^k: ``episodes: finished 230, invalid action 63; pass^1 0.540, pass^2 0.410``; ""
    for a result without episodes."""
    statuses = extra.get("episodes") if isinstance(extra, Mapping) else None
    if not isinstance(statuses, Mapping) or not statuses:
        return ""
    text = "episodes: " + sep.join(
        f"{str(k).replace('_', ' ')} {int(n)}"
        for k, n in sorted(statuses.items(), key=lambda kv: -int(kv[1]))
    )
    passk = extra.get("pass_k") or {}
    if isinstance(passk, Mapping) and len(passk) > 1:
        text += "; " + sep.join(f"pass^{k} {fmt(v)}" for k, v in passk.items() if v is not None)
    unreadable = extra.get("server_data_unreadable")
    if isinstance(unreadable, Mapping) and unreadable.get("n"):
        text += (
            f"; {int(unreadable['n'])} failed on record-server data the checks cannot read, as the "
            f"reference counts them (success rate without them {fmt(unreadable.get('success_rate_without'))})"
        )
    return text + official_summary(extra.get("official"))


def official_summary(official: Any) -> str:
    """The paper's figure of an agent result, where its official code reads episodes its own way:
    ``; official (AgentClinic's ...): 11/107 = 0.103``, with the episodes it could not count."""
    if not isinstance(official, Mapping) or not isinstance(official.get("n"), int):
        return ""
    text = f"; official {official.get('reading', '')}: {int(official.get('correct') or 0)}/{official['n']}"
    if official.get("score") is not None:
        text += f" = {fmt(official['score'])}"
    if official.get("unknown"):
        text += f" ({int(official['unknown'])} episodes unknown)"
    return text


def fallback_summary(extra: Any) -> str:
    """How many right answers of the reference figure came from its random fallback (an option
    drawn for a reply it read no letter in): ``reference fallback: 12 replies read no letter, 3 right
    by the draw``; "" where there were none."""
    fb = extra.get("reference_fallback") if isinstance(extra, Mapping) else None
    if not isinstance(fb, Mapping) or not fb.get("n"):
        return ""
    text = f"reference fallback: {int(fb['n'])} replies read no letter and were scored by a random option"
    if fb.get("right") is not None:
        text += f", {int(fb['right'])} of them right by the draw"
    if fb.get("expected_right") is not None:
        text += f" ({fmt(float(fb['expected_right']), 1)} right expected by chance)"
    return text
