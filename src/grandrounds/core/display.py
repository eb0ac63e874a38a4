"""How numbers and pages look, written once for the CLI tables, the reports and the viewer."""

from __future__ import annotations

from typing import Any, Sequence

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
    """A 95% CI as "[lo, hi]", "n/a" when there is none."""
    return f"[{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]" if ci else "n/a"
