"""Hand-written SVG charts for the published history site: a series chart per test, key and device, and sparklines.

Why no JavaScript library (uPlot, about 50 kB minified; Chart.js, about 200 kB): the site must open from disk with
no network, so a library would be inlined into every page (or copied beside them), and a canvas chart draws nothing
until its script runs, is one opaque bitmap to a screen reader and cannot be read by a test without a browser. An
SVG written here is text: it needs no script, prints, scales, and every drawn thing is an element that carries its
own ``<title>`` (a tooltip, and what assistive technology reads), so a chart is ``role="img"`` labelled by a
``<title>`` and a ``<desc>`` that say what it shows in words. The cost is a few kB of markup per line of 1000
points, measured by ``benchmarks/history_publish_cost.py``.

What a chart draws (:func:`series_chart`): one line per memory mode (x: the sessions in commit order, y: the
median in ms), each mode told apart by its dash pattern and marker shape as well as its colour; every session's
spread (median +- MAD) as whiskers, or as a band where there are more sessions than whiskers can show; a vertical
line with a label where the machine class changes (a driver or JetPack upgrade); each change point as a triangle
(up: slower, down: faster) with a text label, greyed where acknowledged. Data elements carry ``class="mark"``, change
point markers ``class="changepoint"``. A line of more than :data:`MAX_POINTS` points is thinned to the first, last,
lowest and highest point of each of :data:`MAX_POINTS` / 4 buckets, and every point a change point starts at is
kept. GPU-free and pytest-free; knows nothing of stores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["MAX_POINTS", "Boundary", "Chart", "Line", "Marker", "Point", "nice_ticks", "series_chart", "sparkline",
           "thin"]

#: The most points a line keeps (about one per pixel of the plot); longer lines are thinned (:func:`thin`).
MAX_POINTS = 1000
#: Below this many points a line's spread is drawn as whiskers, above as a band.
MAX_WHISKERS = 120
#: Below this many points every point gets a marker; above, about this many evenly spaced.
MAX_MARKERS = 40

# Okabe & Ito's colours (told apart in the common colour-vision deficiencies), dash patterns, marker shapes.
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000")
DASHES = ("", "8 4", "2 3", "10 3 2 3", "5 2 1 2 1 2", "1 5")
SHAPES = ("circle", "square", "triangle", "diamond", "cross", "plus")
GREY = "#8a8a8a"

WIDTH, HEIGHT = 760, 330
LEFT, RIGHT, TOP, BOTTOM = 64, 20, 34, 72  # the plot's margins (the bottom holds the x labels and the legend)


@dataclass(frozen=True)
class Point:
    """One session of a line: its x (the session's place in the chart), median and MAD (ms), and a tooltip."""

    x: int
    median: float
    mad: float
    note: str = ""


@dataclass(frozen=True)
class Line:
    """One memory mode's series."""

    name: str
    points: tuple[Point, ...]
    style: int  # its colour, dash pattern and marker shape: the same for one mode in every chart


@dataclass(frozen=True)
class Boundary:
    """A machine-class change before session ``x``: a short label drawn, the full ``detail`` as its tooltip."""

    x: int
    label: str
    detail: str


@dataclass(frozen=True)
class Marker:
    """A change point of line ``line`` at session ``x`` (the first after the step), level ``y`` (ms) after it."""

    line: str
    x: int
    y: float
    label: str
    detail: str
    slower: bool
    acked: bool


@dataclass(frozen=True)
class Chart:
    """A series chart: ``ident`` (unique in its page) names its title and description elements; ``x_labels`` has
    one label per session (x 0..n-1)."""

    ident: str
    title: str
    desc: str
    x_labels: tuple[str, ...]
    lines: tuple[Line, ...]
    boundaries: tuple[Boundary, ...] = ()
    markers: tuple[Marker, ...] = ()
    y_label: str = "median (ms), spread: ± MAD"
    x_label: str = "session (commit order)"


def _f(v: float) -> str:
    """A coordinate: one decimal (a tenth of a pixel)."""
    return f"{v:.1f}"


def _num(v: float) -> str:
    """A tick label or figure: 4 significant digits."""
    return f"{v:.4g}"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering [lo, hi] (1, 2, 2.5 or 5 times a power of ten apart)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    n = math.floor((hi - first) / step + 1e-9) + 1
    return [round(first + i * step, 12) for i in range(n)]


def thin(points: Sequence[Point], keep: frozenset[int] = frozenset(), limit: int = MAX_POINTS) -> list[Point]:
    """``points`` where there are at most ``limit``; else the first, last, lowest and highest of each of
    ``limit // 4`` buckets, and every point whose x is in ``keep`` (the steps and extremes stay where they are)."""
    if len(points) <= limit:
        return list(points)
    buckets = max(limit // 4, 1)
    chosen: set[int] = {i for i, p in enumerate(points) if p.x in keep}
    size = len(points) / buckets
    for b in range(buckets):
        lo, hi = int(b * size), min(int((b + 1) * size), len(points))
        if lo >= hi:
            continue
        span = range(lo, hi)
        low = min(span, key=lambda i: points[i].median)
        chosen.update((lo, hi - 1, low, max(span, key=lambda i: points[i].median)))
    return [points[i] for i in sorted(chosen)]


class _Scale:
    """Maps session index and ms to plot coordinates."""

    def __init__(self, n: int, lo: float, hi: float) -> None:
        self.n, self.lo, self.hi = n, lo, hi
        self.x0, self.x1 = LEFT, WIDTH - RIGHT
        self.y0, self.y1 = HEIGHT - BOTTOM, TOP

    def x(self, i: float) -> float:
        if self.n <= 1:
            return (self.x0 + self.x1) / 2
        return self.x0 + (self.x1 - self.x0) * i / (self.n - 1)

    def y(self, v: float) -> float:
        return self.y0 + (self.y1 - self.y0) * (v - self.lo) / (self.hi - self.lo)


def _range(chart: Chart) -> tuple[float, float]:
    """The y range: every median +- MAD and change point level, padded 5%."""
    values = [v for line in chart.lines for p in line.points for v in (p.median - p.mad, p.median + p.mad)]
    values += [m.y for m in chart.markers]
    if not values:
        return 0.0, 1.0
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.05 or abs(hi) * 0.05 or 1.0
    return max(lo - pad, 0.0) if lo >= 0 else lo - pad, hi + pad


def _shape(kind: str, x: float, y: float, r: float, attrs: str, tip: str = "") -> str:
    """A marker of shape ``kind`` centred on (x, y), ``r`` its half size; ``tip`` its tooltip."""
    title = f"<title>{escape(tip)}</title>" if tip else ""
    if kind == "circle":
        return f'<circle cx="{_f(x)}" cy="{_f(y)}" r="{_f(r)}" {attrs}>{title}</circle>'
    if kind == "square":
        return (f'<rect x="{_f(x - r)}" y="{_f(y - r)}" width="{_f(2 * r)}" height="{_f(2 * r)}" {attrs}>'
                f"{title}</rect>")
    d = {
        "triangle": f"M{_f(x)} {_f(y - r * 1.2)}L{_f(x + r * 1.1)} {_f(y + r * 0.8)}H{_f(x - r * 1.1)}Z",
        "down": f"M{_f(x)} {_f(y + r * 1.2)}L{_f(x + r * 1.1)} {_f(y - r * 0.8)}H{_f(x - r * 1.1)}Z",
        "diamond": f"M{_f(x)} {_f(y - r * 1.3)}L{_f(x + r)} {_f(y)}L{_f(x)} {_f(y + r * 1.3)}L{_f(x - r)} {_f(y)}Z",
        "cross": f"M{_f(x - r)} {_f(y - r)}L{_f(x + r)} {_f(y + r)}M{_f(x - r)} {_f(y + r)}L{_f(x + r)} {_f(y - r)}",
    }.get(kind)
    if d is None:  # a plus
        d = f"M{_f(x - r)} {_f(y)}H{_f(x + r)}M{_f(x)} {_f(y - r)}V{_f(y + r)}"
    return f'<path d="{d}" {attrs}>{title}</path>'


def _style(i: int) -> tuple[str, str, str]:
    """(colour, dash pattern, marker shape) of line ``i``."""
    return COLOURS[i % len(COLOURS)], DASHES[i % len(DASHES)], SHAPES[i % len(SHAPES)]


def _axes(chart: Chart, s: _Scale) -> list[str]:
    """The frame, the y ticks and grid, the x ticks (about 6 session labels) and the axis titles."""
    out = [f'<rect x="{s.x0}" y="{s.y1}" width="{s.x1 - s.x0}" height="{s.y0 - s.y1}" class="frame" fill="none" '
           'stroke="#bbb"/>']
    for v in nice_ticks(s.lo, s.hi):
        y = _f(s.y(v))
        out.append(f'<line x1="{s.x0}" x2="{s.x1}" y1="{y}" y2="{y}" stroke="#eee"/>'
                   f'<text x="{s.x0 - 6}" y="{y}" text-anchor="end" dominant-baseline="middle">{_num(v)}</text>')
    n = len(chart.x_labels)
    step = max(1, math.ceil(n / 6))
    for i in range(0, n, step):
        x = _f(s.x(i))
        out.append(f'<line x1="{x}" x2="{x}" y1="{s.y0}" y2="{s.y0 + 4}" stroke="#888"/>'
                   f'<text x="{x}" y="{s.y0 + 16}" text-anchor="middle">{escape(chart.x_labels[i])}</text>')
    out.append(f'<text x="{(s.x0 + s.x1) / 2:.0f}" y="{s.y0 + 32}" text-anchor="middle">{escape(chart.x_label)}</text>')
    out.append(f'<text x="14" y="{(s.y0 + s.y1) / 2:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 14 {(s.y0 + s.y1) / 2:.0f})">{escape(chart.y_label)}</text>')
    return out


def _spread(points: Sequence[Point], s: _Scale, colour: str) -> str:
    """Each session's median +- MAD: whiskers (one path) for a few points, else a band."""
    if len(points) <= MAX_WHISKERS or len(points) == 1:
        d = "".join(f"M{_f(s.x(p.x))} {_f(s.y(p.median - p.mad))}V{_f(s.y(p.median + p.mad))}" for p in points)
        return f'<path class="mark spread" d="{d}" stroke="{colour}" stroke-width="1.5" fill="none"/>'
    upper = " ".join(f"{_f(s.x(p.x))},{_f(s.y(p.median + p.mad))}" for p in points)
    lower = " ".join(f"{_f(s.x(p.x))},{_f(s.y(p.median - p.mad))}" for p in reversed(points))
    return f'<polygon class="mark spread" points="{upper} {lower}" fill="{colour}" fill-opacity="0.18" stroke="none"/>'


def _line(line: Line, chart: Chart, s: _Scale) -> list[str]:
    """One mode: its spread, its polyline (dashed by mode) and its markers (shaped by mode), with tooltips."""
    colour, dash, shape = _style(line.style)
    keep = frozenset(m.x for m in chart.markers if m.line == line.name)
    points = thin(line.points, keep)
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    coords = " ".join(f"{_f(s.x(p.x))},{_f(s.y(p.median))}" for p in points)
    out = [f'<g class="series" data-mode="{escape(line.name)}">', _spread(points, s, colour),
           f'<polyline class="mark line" points="{coords}" fill="none" stroke="{colour}" stroke-width="1.6"'
           f"{dash_attr}><title>{escape(line.name)}</title></polyline>"]
    every = max(1, math.ceil(len(points) / MAX_MARKERS))
    attrs = f'class="mark point" fill="{colour}" stroke="#fff" stroke-width="0.8"'
    for p in points[::every]:
        tip = f"{line.name}: {_num(p.median)} ms ± {_num(p.mad)}" + (f" ({p.note})" if p.note else "")
        out.append(_shape(shape, s.x(p.x), s.y(p.median), 3.5, attrs, tip))
    out.append("</g>")
    return out


def _boundaries(chart: Chart, s: _Scale) -> list[str]:
    """A vertical line between the last session of a machine class and the first of the next, with its label."""
    out = []
    for k, b in enumerate(chart.boundaries):
        x = s.x(b.x - 0.5)
        y = s.y1 - 6 - 11 * (k % 2)
        # the label runs away from the nearer edge
        anchor, tx = ("start", x + 3) if x < (s.x0 + s.x1) / 2 else ("end", x - 3)
        out.append(f'<g class="boundary"><title>{escape(b.detail)}</title>'
                   f'<line x1="{_f(x)}" x2="{_f(x)}" y1="{s.y1 - 4}" y2="{s.y0}" stroke="#444" stroke-width="1.2" '
                   f'stroke-dasharray="6 2 1 2"/><text x="{_f(tx)}" y="{y}" text-anchor="{anchor}" '
                   f'class="boundary-label">{escape(b.label)}</text></g>')
    return out


#: The width of a character of a label, in user units (11 px sans-serif), for placing labels apart.
_CHAR_W = 6.2


class _Labels:
    """Places text labels so that none overlaps another: the first free row above (then below) the anchor."""

    def __init__(self, s: _Scale) -> None:
        self.s = s
        self.boxes: list[tuple[float, float, float]] = []  # (x0, x1, baseline y)

    def free(self, x0: float, x1: float, y: float) -> bool:
        return all(x1 < a or x0 > b or abs(y - by) >= 12 for a, b, by in self.boxes)

    def place(self, x: float, y: float, text: str) -> tuple[float, float, str]:
        """(x, baseline y, text-anchor) of a label of ``text`` beside the point (x, y)."""
        width = _CHAR_W * len(text)
        right = x + 8 + width <= self.s.x1
        x0, x1 = (x + 8, x + 8 + width) if right else (x - 8 - width, x - 8)
        rows = [y - 10 - 13 * k for k in range(20)] + [y + 20 + 13 * k for k in range(20)]
        inside = [r for r in rows if self.s.y1 + 10 <= r <= self.s.y0 - 3]
        ty = next((r for r in inside if self.free(x0, x1, r)), inside[0] if inside else y - 10)
        self.boxes.append((x0, x1, ty))
        return (x + 8, ty, "start") if right else (x - 8, ty, "end")


def _markers(chart: Chart, s: _Scale) -> list[str]:
    """Each change point: a triangle (up: slower, down: faster) and a text label placed clear of the others'; grey
    where acknowledged."""
    out = []
    labels = _Labels(s)
    for m in chart.markers:
        x, y = s.x(m.x), s.y(m.y)
        colour = GREY if m.acked else ("#b2182b" if m.slower else "#2166ac")
        cls = "changepoint acked" if m.acked else "changepoint"
        attrs = f'class="{cls}" fill="{colour}" stroke="#000" stroke-width="0.8"'
        tx, ty, anchor = labels.place(x, y, m.label)
        shape = _shape("triangle" if m.slower else "down", x, y, 6, attrs, m.detail)
        ink = "#666" if m.acked else "#000"
        if abs(ty - (y - 10)) > 1:  # a label moved clear of the others: a leader line to its marker
            shape += (f'<line x1="{_f(x)}" y1="{_f(y)}" x2="{_f(tx)}" y2="{_f(ty - 4)}" stroke="{ink}" '
                      'stroke-width="0.5" stroke-dasharray="1 2"/>')
        out.append(f'<g class="changepoint-group">{shape}<text x="{_f(tx)}" y="{_f(ty)}" text-anchor="{anchor}" '
                   f'fill="{ink}" class="changepoint-label">{escape(m.label)}</text></g>')
    return out


def _legend(chart: Chart) -> list[str]:
    """One entry per mode: a stretch of its dashed line with its marker, and its name; then the change point key."""
    out = ['<g class="legend">']
    x, y = LEFT, HEIGHT - 14
    for line in chart.lines:
        colour, dash, shape = _style(line.style)
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<line x1="{x}" x2="{x + 28}" y1="{y}" y2="{y}" stroke="{colour}" stroke-width="1.6"{dash_attr}/>')
        out.append(_shape(shape, x + 14, y, 3.5, f'fill="{colour}" stroke="#fff" stroke-width="0.8"'))
        out.append(f'<text x="{x + 33}" y="{y}" dominant-baseline="middle">{escape(line.name)}</text>')
        x += 45 + 7 * len(line.name)
    if chart.markers:
        out.append(_shape("triangle", x + 6, y, 5, 'fill="#b2182b" stroke="#000" stroke-width="0.8"'))
        out.append(f'<text x="{x + 14}" y="{y}" dominant-baseline="middle">change point (▼ faster; grey: '
                   "acknowledged)</text>")
    out.append("</g>")
    return out


def series_chart(chart: Chart) -> str:
    """The chart as an inline ``<svg>`` (no ``xmlns`` needed inside HTML), ``role="img"`` labelled by its title and
    description."""
    lo, hi = _range(chart)
    s = _Scale(len(chart.x_labels), lo, hi)
    ident = escape(chart.ident)
    parts = [
        f'<svg class="chart" id="{ident}" role="img" aria-labelledby="{ident}-t {ident}-d" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" font-size="11" '
        'font-family="system-ui, sans-serif">',
        f'<title id="{ident}-t">{escape(chart.title)}</title><desc id="{ident}-d">{escape(chart.desc)}</desc>',
        *_axes(chart, s),
        *_boundaries(chart, s),
    ]
    for line in chart.lines:
        parts.extend(_line(line, chart, s))
    parts.extend(_markers(chart, s))
    parts.extend(_legend(chart))
    parts.append("</svg>")
    return "\n".join(parts)


def sparkline(values: Sequence[float], marks: Sequence[int] = (), *, label: str, width: int = 120,
              height: int = 24) -> str:
    """A small line of ``values`` (thinned to about two points a pixel) with a dot at each index in ``marks``
    (change points), ``role="img"`` with ``label`` as its accessible name."""
    tip = f"<title>{escape(label)}</title>"
    head = (f'<svg class="spark" role="img" aria-label="{escape(label)}" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}">{tip}')
    if not values:
        return head + "</svg>"
    pts = thin([Point(i, v, 0.0) for i, v in enumerate(values)], frozenset(marks), limit=2 * width)
    lo, hi = min(values), max(values)
    span = (hi - lo) or abs(hi) or 1.0
    n = max(len(values) - 1, 1)

    def xy(i: int, v: float) -> tuple[str, str]:
        return _f(1 + (width - 2) * i / n), _f(height - 2 - (height - 4) * (v - lo) / span)

    coords = " ".join(",".join(xy(p.x, p.median)) for p in pts)
    dots = "".join(f'<circle class="spark-cp" cx="{xy(i, values[i])[0]}" cy="{xy(i, values[i])[1]}" r="2.2" '
                   'fill="#b2182b"/>' for i in marks if 0 <= i < len(values))
    return (head + f'<polyline class="mark" points="{coords}" fill="none" stroke="#0072B2" stroke-width="1.2"/>'
            + dots + "</svg>")
