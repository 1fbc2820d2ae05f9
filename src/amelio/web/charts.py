"""Tiny server-side SVG charts: no chart library, no script, readable without JS."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

__all__ = ["line_chart"]


def line_chart(
    points: Sequence[tuple[str, float]],
    *,
    label: str,
    max_value: float = 1.0,
    min_value: float = 0.0,
    width: int = 240,
    height: int = 70,
    percent: bool = True,
) -> str:
    """A labelled line over (x label, value) points, as an accessible inline SVG."""
    if not points:
        return ""
    pad = 18
    n = len(points)
    step = (width - 2 * pad) / max(1, n - 1)
    span = (max_value - min_value) or 1.0
    coords = [
        (pad + i * step, height - pad - (value - min_value) / span * (height - 2 * pad))
        for i, (_, value) in enumerate(points)
    ]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    last_x, last_y = coords[-1]
    last = points[-1][1]
    shown = f"{last:.0%}" if percent else f"{last:+g}"
    dots = "".join(
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5"><title>{escape(day)}: '
        f"{(v if not percent else f'{v:.0%}')}</title></circle>"
        for (x, y), (day, v) in zip(coords, points, strict=True)
    )
    return (
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(label)}"><title>{escape(label)}</title>'
        f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" '
        f'class="axis"/><polyline points="{path}" class="line"/>{dots}'
        f'<text x="{last_x:.1f}" y="{max(10.0, last_y - 6):.1f}" class="value">{shown}</text>'
        f'<text x="{pad}" y="{height - 4}" class="tick">{escape(points[0][0])}</text>'
        f'<text x="{width - pad}" y="{height - 4}" class="tick end">'
        f"{escape(points[-1][0])}</text></svg>"
    )
