"""Radar charts of per-dimension scores as inline SVG (drawn here; no chart library, no network)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

#: More axes than this do not read as a chart (HealthBench clusters); the report's table holds them.
MAX_RADAR_AXES = 40
COLOURS = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#7f7f7f",
    "#bcbd22",
)


def radar_svg(
    axes: Sequence[str], series: Mapping[str, Mapping[str, float | None]], size: int = 360
) -> str:
    """One polygon per series (model) over ``axes``; scores on 0-1 (or 0-100, rescaled).

    A missing score for an axis is drawn at the centre and marked with a hollow dot, so a
    gap never looks like a measured value. Fewer than 3 or more than :data:`MAX_RADAR_AXES`
    axes, or no series, draw nothing ("").
    """
    if not 3 <= len(axes) <= MAX_RADAR_AXES or not series:
        return ""
    top = 100.0 if any((v or 0) > 1.0 for s in series.values() for v in s.values()) else 1.0
    pad = 90  # room left and right for axis labels, which can be long (MedEQBench dimensions)
    width = size + 2 * pad
    c, cy, r = width / 2, size / 2, size / 2 - 70
    n = len(axes)

    def point(i: int, frac: float) -> tuple[float, float]:
        ang = -math.pi / 2 + 2 * math.pi * i / n
        return c + r * frac * math.cos(ang), cy + r * frac * math.sin(ang)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="radar" width="{width}" height="{size}" viewBox="0 0 {width} {size}" role="img">'
    ]
    for ring in (0.25, 0.5, 0.75, 1.0):
        grid = " ".join(f"{x:.1f},{y:.1f}" for x, y in (point(i, ring) for i in range(n)))
        parts.append(f'<polygon points="{grid}" fill="none" stroke="#ccc" stroke-width="1"/>')
    for i, name in enumerate(axes):
        x, y = point(i, 1.0)
        lx, ly = point(i, 1.12)
        anchor = "middle" if abs(lx - c) < 10 else ("start" if lx > c else "end")
        parts.append(f'<line x1="{c}" y1="{cy}" x2="{x:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(
            f'<text x="{lx:.1f}" y="{ly:.1f}" font-size="10" text-anchor="{anchor}">{escape(name[:28])}</text>'
        )
    for k, (label, scores) in enumerate(series.items()):
        col = COLOURS[k % len(COLOURS)]
        pts: list[tuple[float, float]] = []
        for i, name in enumerate(axes):
            v = scores.get(name)
            frac = 0.0 if v is None else max(0.0, min(1.0, float(v) / top))
            pts.append(point(i, frac))
        poly = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        parts.append(
            f'<polygon points="{poly}" fill="{col}" fill-opacity="0.12" stroke="{col}" stroke-width="2"><title>{escape(label)}</title></polygon>'
        )
        for i, (x, y) in enumerate(pts):
            hollow = scores.get(axes[i]) is None
            parts.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{"white" if hollow else col}" stroke="{col}"/>'
            )
    for k, label in enumerate(series):
        col = COLOURS[k % len(COLOURS)]
        parts.append(
            f'<rect x="6" y="{6 + 14 * k}" width="10" height="10" fill="{col}"/><text x="20" y="{15 + 14 * k}" font-size="10">{escape(label)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
