"""Hand-written SVG charts for the published history site: a series chart per test, key and device (its
sparklines: :mod:`~.sparkline`).

Hand-written, not uPlot (about 50 kB minified) or Chart.js (about 200 kB): the site must open from disk with
no network, so a library would be inlined into every page (or copied beside them), and a canvas chart draws nothing
until its script runs, is one opaque bitmap to a screen reader and cannot be read by a test without a browser. An
SVG written here is text: it needs no script, prints, scales, and every drawn thing is an element that carries its
own ``<title>`` (a tooltip, and what assistive technology reads), so a chart is ``role="img"`` labelled by a
``<title>`` and a ``<desc>`` that say what it shows in words. The cost is a few kB of markup per line of 1000
points, measured by ``benchmarks/history_publish_cost.py``.

What a chart draws (:func:`series_chart`): one line per memory mode (x: the sessions in commit order, y: the
median in ms), each mode told apart by its dash pattern and marker shape as well as its colour (the mode's style,
:mod:`pytest_jetmem.cuda.mode_styles`, as in the session report); a line whose points
lie on an earlier line's is drawn a few pixels to the right, and its legend entry says so; every session's spread
(median +- MAD) as whiskers, or as a band where there are more sessions than whiskers can show; a session that does
not count for change points (:attr:`Point.left_out`) as a hollow ring off the line (``class="left-out"``), its
reason in its tooltip; a vertical line with a label where the machine class changes (a driver or JetPack upgrade);
each change point as a triangle (up: slower, down: faster) with a text label, greyed where acknowledged. Data
elements carry ``class="mark"``, change point markers ``class="changepoint"``.

Layout: every text stays inside the ``viewBox``, and no two labels (x ticks, boundary labels, change point labels)
overlap each other, a boundary line or a change point marker, by their estimated boxes
(:func:`~pytest_jetmem.draw.svg.text_width`, placed by :class:`~pytest_jetmem.draw.svg.Placer`): a
change point label goes to the nearest free row above or below its marker; where none is free within a few rows,
the marker gets a number (``#1``) and the label goes to a numbered key under the legend, which, like the legend,
wraps onto as many rows as it needs (the chart grows downwards). A line of more than
:data:`MAX_POINTS` points is thinned to the first, last, lowest and highest point of each of :data:`MAX_POINTS` / 4
buckets (:mod:`~.thinning`), and every point a change point starts at is kept.

The drawing itself (scales, ticks and their labels, text widths, label placement, marker shapes, escaping, the
accessible frame) is :mod:`pytest_jetmem.draw.svg`'s, the session report's too; this module holds what is a
history chart's own: its model, its layout, dodged lines, boundaries, change point labels, the legend and the
numbered key. GPU-free and pytest-free; knows nothing of stores.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pytest_jetmem.cuda.mode_styles import GREY, ModeStyle
from pytest_jetmem.draw.svg import (
    FONT,
    FONT_ATTRS,
    Box,
    Flow,
    Placer,
    Scale,
    coord,
    dash_attr,
    esc,
    frame,
    mark_paint,
    marker,
    nice_ticks,
    number,
    padded,
    text_width,
    tick_labels,
    tooltip,
)
from pytest_jetmem.history.thinning import MAX_POINTS, thin_indices

__all__ = ["FONT", "MAX_POINTS", "Boundary", "Chart", "Line", "Marker", "Point", "nice_ticks", "series_chart",
           "text_width", "thin"]

#: Below this many points a line's spread is drawn as whiskers, above as a band.
MAX_WHISKERS = 120
#: Below this many points every point gets a marker; above, about this many evenly spaced.
MAX_MARKERS = 40


#: The distance between two rows of labels (a line of 11 px text is about 12.8 px high).
ROW = 14.0
#: How far a line whose points lie on an earlier line's is drawn to the right, in user units.
DODGE = 3.0

WIDTH = 760
MIN_LEFT, RIGHT, TOP, PLOT_H = 64, 20, 34, 224  # the plot's margins and height (TOP holds two rows of labels)
_NEAR_ROWS = 3  # a change point label farther than this many rows from its marker is a number and a key entry


@dataclass(frozen=True)
class Point:
    """One session of a line: its x (the session's place in the chart), median and MAD (ms), a tooltip, and why
    it does not count for change points (``""``: it counts; else drawn hollow, off the line)."""

    x: int
    median: float
    mad: float
    note: str = ""
    left_out: str = ""


@dataclass(frozen=True)
class Line:
    """One memory mode's series."""

    name: str
    points: tuple[Point, ...]
    style: ModeStyle  # its colour, dash pattern and marker shape: the mode's in every chart
    unit: str = "ms"  # of its medians: ms, or mJ for an energy series

    @functools.cached_property
    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The points' x, median and MAD as arrays."""
        return (np.array([p.x for p in self.points], dtype=np.float64),
                np.array([p.median for p in self.points], dtype=np.float64),
                np.array([p.mad for p in self.points], dtype=np.float64))


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


def thin(points: Sequence[Point], keep: frozenset[int] = frozenset(), limit: int = MAX_POINTS) -> list[Point]:
    """The ``points`` :func:`thin_indices` keeps of their medians, ``keep`` naming x positions."""
    if len(points) <= limit:
        return list(points)
    chosen = thin_indices([p.median for p in points], [i for i, p in enumerate(points) if p.x in keep], limit)
    return [points[i] for i in chosen.tolist()]


# -- the numbered key ----------------------------------------------------------------------------------------------


class _Key:
    """The numbered key under the legend: the labels that did not fit beside what they label, each as its number
    (``#1``, ``#2``, in the order they were given), its label and the tooltip of what it labels."""

    def __init__(self) -> None:
        self.entries: list[tuple[str, str, str]] = []  # (number, label, tooltip)

    def add(self, label: str, detail: str) -> str:
        """The number of a new entry, drawn where the label would have been."""
        tag = f"#{len(self.entries) + 1}"
        self.entries.append((tag, label, detail))
        return tag


# -- the chart -----------------------------------------------------------------------------------------------------


class _Plot:
    """The plot's place in the chart: it spans ``x0``..``x1`` (``left`` to the right margin) and ``y1``..``y0`` (top
    to bottom, :data:`TOP` down :data:`PLOT_H`), whatever the legend's height; ``x`` maps session indices (0..n-1)
    and ``y`` ms (``lo``..``hi``, upwards) onto it."""

    def __init__(self, n: int, lo: float, hi: float, left: float) -> None:
        self.x0, self.x1 = left, WIDTH - RIGHT
        self.y0, self.y1 = TOP + PLOT_H, TOP
        self.x = Scale(0.0, float(max(n - 1, 0)), self.x0, self.x1)
        self.y = Scale(lo, hi, self.y0, self.y1)

    def pairs(self, xs: Sequence[float] | np.ndarray, ys: Sequence[float] | np.ndarray, dx: float = 0.0) -> str:
        """``x,y x,y ...`` of the points at session indices ``xs`` and values ``ys`` (as :attr:`x` and :attr:`y`
        place them, to a tenth of a pixel), ``dx`` to the right: on arrays, one string a point."""
        px, py = self.x(np.asarray(xs, dtype=np.float64)), self.y(np.asarray(ys, dtype=np.float64))
        return " ".join([f"{x:.1f},{y:.1f}" for x, y in zip((px + dx).tolist(), py.tolist(), strict=True)])


def _range(chart: Chart) -> tuple[float, float]:
    """The y range: every median +- MAD and change point level, padded 5%."""
    lows = [float((line.columns[1] - line.columns[2]).min()) for line in chart.lines if line.points]
    highs = [float((line.columns[1] + line.columns[2]).max()) for line in chart.lines if line.points]
    marks = [m.y for m in chart.markers]
    if not (lows or marks):
        return 0.0, 1.0
    return padded(min(lows + marks), max(highs + marks), 0.05)


def _left(ticks: Sequence[float]) -> float:
    """The plot's left edge: room for the widest y tick label (6 units from the plot) and, left of it, the y axis
    title (rotated, centred 14 units from the edge: 30 units in all)."""
    return max(MIN_LEFT, math.ceil(30 + 6 + max(map(text_width, tick_labels(ticks)), default=0.0)))


def _axes(chart: Chart, s: _Plot, ticks: Sequence[float]) -> list[str]:
    """The frame, the y ticks and grid, the x ticks and the axis titles."""
    out = [f'<rect x="{s.x0}" y="{s.y1}" width="{s.x1 - s.x0}" height="{s.y0 - s.y1}" class="frame" fill="none" '
           'stroke="#bbb"/>']
    for v, label in zip(ticks, tick_labels(ticks), strict=True):
        y = coord(s.y(v))
        out.append(f'<line x1="{s.x0}" x2="{s.x1}" y1="{y}" y2="{y}" stroke="#eee"/>'
                   f'<text x="{s.x0 - 6}" y="{y}" text-anchor="end" dominant-baseline="middle" class="y-tick">'
                   f"{label}</text>")
    out.extend(_session_labels(chart, s))
    out.append(f'<text x="{(s.x0 + s.x1) / 2:.0f}" y="{s.y0 + 32}" text-anchor="middle">{esc(chart.x_label)}</text>')
    out.append(f'<text x="14" y="{(s.y0 + s.y1) / 2:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 14 {(s.y0 + s.y1) / 2:.0f})">{esc(chart.y_label)}</text>')
    return out


def _session_labels(chart: Chart, s: _Plot) -> list[str]:
    """About 6 session labels, the first and the last always: each inside the chart (moved in from the edge where
    it would cross it, its tick where the session is), one that would overlap a placed one left out."""
    n = len(chart.x_labels)
    step = max(1, math.ceil(n / 6))
    wanted = dict.fromkeys([0, n - 1, *range(step, n - 1, step)]) if n else {}
    placer, area = Placer(), Box(0, 0, WIDTH, s.y0 + 20)
    out = []
    for i in wanted:
        x, text = s.x(i), chart.x_labels[i]
        half = text_width(text) / 2 + 2
        cx = min(max(x, half), WIDTH - half)
        if placer.place(text, [(cx, s.y0 + 16, "middle")], area) is None:
            continue
        out.append(f'<line x1="{coord(x)}" x2="{coord(x)}" y1="{s.y0}" y2="{s.y0 + 4}" stroke="#888"/>'
                   f'<text x="{coord(cx)}" y="{s.y0 + 16}" text-anchor="middle" class="x-tick">{esc(text)}</text>')
    return out


def _spread(points: Sequence[Point], s: _Plot, colour: str, dx: float) -> str:
    """Each session's median +- MAD: whiskers (one path) for a few points, else a band."""
    if len(points) <= MAX_WHISKERS or len(points) == 1:
        d = "".join(f"M{coord(s.x(p.x) + dx)} {coord(s.y(p.median - p.mad))}V{coord(s.y(p.median + p.mad))}"
                    for p in points)
        return f'<path class="mark spread" d="{d}" stroke="{colour}" stroke-width="1.5" fill="none"/>'
    xs, medians, mads = (np.array([getattr(p, name) for p in points], dtype=np.float64)
                         for name in ("x", "median", "mad"))
    upper, lower = s.pairs(xs, medians + mads, dx), s.pairs(xs[::-1], (medians - mads)[::-1], dx)
    return f'<polygon class="mark spread" points="{upper} {lower}" fill="{colour}" fill-opacity="0.18" stroke="none"/>'


def _tip(line: Line, p: Point) -> str:
    """A point's tooltip: ``managed: 1.234 ms ± 0.01 (a1b2c3d4e5 2026-11-01T00:30; outlier: left out)``."""
    extra = "; ".join(t for t in (p.note, p.left_out) if t)
    return f"{line.name}: {number(p.median)} {line.unit} ± {number(p.mad)}" + (f" ({extra})" if extra else "")


def _line(line: Line, chart: Chart, s: _Plot, dx: float) -> list[str]:
    """One mode: its spread, its polyline (dashed by mode) and its markers (shaped by mode), with tooltips; the
    sessions left out as hollow rings off the line; everything ``dx`` to the right."""
    colour, dash, shape = line.style.colour, line.style.dash, line.style.shape
    keep = frozenset(m.x for m in chart.markers if m.line == line.name)
    counted = [p for p in line.points if not p.left_out]
    left_out = thin([p for p in line.points if p.left_out])
    points = thin(counted or line.points, keep)
    coords = s.pairs([p.x for p in points], [p.median for p in points], dx)
    out = [f'<g class="series" data-mode="{esc(line.name)}">', _spread(points, s, colour, dx),
           f'<polyline class="mark line" points="{coords}" fill="none" stroke="{colour}" stroke-width="1.6"'
           f"{dash_attr(dash)}><title>{esc(line.name)}</title></polyline>"]
    if counted:
        every = max(1, math.ceil(len(points) / MAX_MARKERS))
        attrs = f'class="mark point" {mark_paint(shape, colour)}'
        out.extend(marker(shape, s.x(p.x) + dx, s.y(p.median), 3.5, attrs, _tip(line, p)) for p in points[::every])
    out.extend(_left_out_mark(shape, s.x(p.x) + dx, s.y(p.median), colour, _tip(line, p)) for p in left_out)
    out.append("</g>")
    return out


def _left_out_mark(shape: str, x: float, y: float, colour: str, tip: str = "", cls: str = "mark left-out") -> str:
    """A session left out of change points: a hollow ring around a small outline of the mode's marker shape."""
    return (f'<g class="{cls}">{tooltip(tip)}<circle cx="{coord(x)}" cy="{coord(y)}" r="5.5" fill="#fff" '
            f'stroke="{colour}" stroke-width="1.3"/>'
            + marker(shape, x, y, 2.2, f'fill="none" stroke="{colour}" stroke-width="1"') + "</g>")


def _dodges(chart: Chart, s: _Plot) -> dict[str, float]:
    """How far right each line is drawn: 0, or :data:`DODGE` more than each earlier line whose points it lies on
    (at half or more of the sessions both have, within 2 px)."""
    out: dict[str, float] = {}
    ys = [s.y(line.columns[1]) for line in chart.lines]
    for j, line in enumerate(chart.lines):
        shift = 0.0
        for i in range(j):
            _, at_i, at_j = np.intersect1d(chart.lines[i].columns[0], line.columns[0], return_indices=True)
            if at_i.size and 2 * int(np.count_nonzero(np.abs(ys[i][at_i] - ys[j][at_j]) < 2)) >= at_i.size:
                shift = max(shift, out[chart.lines[i].name] + DODGE)
        out[line.name] = shift
    return out


def _same_as(chart: Chart, dodges: dict[str, float]) -> dict[str, str]:
    """For each line drawn to the right, the legend's note: ``same values as device: drawn 3 px right``."""
    notes = {}
    for j, line in enumerate(chart.lines):
        if dodges[line.name]:
            under = next(other.name for other in chart.lines[:j] if dodges[other.name] < dodges[line.name])
            notes[line.name] = f"same values as {under}: drawn {dodges[line.name]:g} px right"
    return notes


def _boundary_line(s: _Plot, b: Boundary) -> tuple[float, Box]:
    """The x of a boundary's line, half way between the sessions either side, and the box no label may cross: from
    4 units above the plot (pointing at its label) to the plot's bottom."""
    x = s.x(b.x - 0.5)
    return x, Box(x - 1, s.y1 - 4, x + 1, s.y0)


def _boundaries(chart: Chart, s: _Plot, placer: Placer, key: _Key) -> list[str]:
    """A vertical line between the last session of a machine class and the first of the next, with its label in
    one of the two rows above the plot (or its number there, the label in the key)."""
    out = []
    area = Box(0, 0, WIDTH, s.y1)
    rows = (s.y1 - 5, s.y1 - 5 - ROW)
    for b in chart.boundaries:
        x, _ = _boundary_line(s, b)
        sides = [(x + 3, "start"), (x - 3, "end")]
        if x > (s.x0 + s.x1) / 2:  # the label runs away from the nearer edge first
            sides.reverse()
        candidates = [(tx, ty, anchor) for ty in rows for tx, anchor in sides]
        text = b.label
        spot = placer.place(text, candidates, area)
        if spot is None:
            text = key.add(b.label, b.detail)
            spot = placer.place(text, candidates, area)
        label = ""
        if spot is not None:
            tx, ty, anchor = spot
            label = (f'<text x="{coord(tx)}" y="{coord(ty)}" text-anchor="{anchor}" class="boundary-label">'
                     f"{esc(text)}</text>")
        out.append(f'<g class="boundary"><title>{esc(b.detail)}</title><line x1="{coord(x)}" x2="{coord(x)}" '
                   f'y1="{s.y1 - 4}" y2="{s.y0}" stroke="#444" stroke-width="1.2" stroke-dasharray="6 2 1 2"/>'
                   f"{label}</g>")
    return out


def _label_spots(x: float, y: float, s: _Plot, rows: int) -> list[tuple[float, float, str]]:
    """Where a change point's label may go, nearest first: rows above and below the marker, right and left."""
    right_first = x < (s.x0 + s.x1) / 2 or x + 8 + 60 <= s.x1
    sides = [(x + 8, "start"), (x - 8, "end")] if right_first else [(x - 8, "end"), (x + 8, "start")]
    levels = sorted([y - 10 - ROW * k for k in range(rows)] + [y + 20 + ROW * k for k in range(rows)],
                    key=lambda ty: (abs(ty - y + 4), ty))
    return [(tx, ty, anchor) for ty in levels for tx, anchor in sides]


def _markers(chart: Chart, s: _Plot, dodges: dict[str, float], placer: Placer, key: _Key) -> list[str]:
    """Each change point: a triangle (up: slower, down: faster) and a text label placed clear of every other label,
    marker and boundary line (else its number there and the label in the key); grey where acknowledged."""
    at = [(s.x(m.x) + dodges.get(m.line, 0.0), s.y(m.y)) for m in chart.markers]
    placer.taken.extend(Box(x - 7, y - 7.5, x + 7, y + 7.5) for x, y in at)
    area = Box(s.x0 + 1, s.y1 + 1, s.x1 - 1, s.y0 - 1)
    everywhere = math.ceil(PLOT_H / ROW)
    out = []
    for m, (x, y) in zip(chart.markers, at, strict=True):
        colour = GREY if m.acked else ("#b2182b" if m.slower else "#2166ac")
        cls = "changepoint acked" if m.acked else "changepoint"
        attrs = f'class="{cls}" fill="{colour}" stroke="#000" stroke-width="0.8"'
        shape = marker("triangle" if m.slower else "down", x, y, 6, attrs, m.detail)
        text = m.label
        spot = placer.place(text, _label_spots(x, y, s, _NEAR_ROWS), area)
        if spot is None:
            text = key.add(m.label, m.detail)
            spot = placer.place(text, _label_spots(x, y, s, everywhere), area)
        if spot is None:  # not even a number fits: the marker's tooltip and the key say it
            out.append(f'<g class="changepoint-group">{shape}</g>')
            continue
        tx, ty, anchor = spot
        ink = "#666" if m.acked else "#000"
        if abs(ty - (y - 10)) > 1:  # a label moved clear of the others: a leader line to its marker
            shape += (f'<line x1="{coord(x)}" y1="{coord(y)}" x2="{coord(tx)}" y2="{coord(ty - 4)}" stroke="{ink}" '
                      'stroke-width="0.5" stroke-dasharray="1 2"/>')
        out.append(f'<g class="changepoint-group">{shape}<text x="{coord(tx)}" y="{coord(ty)}" text-anchor="{anchor}" '
                   f'fill="{ink}" class="changepoint-label">{esc(text)}</text></g>')
    return out


def _legend_label(x: float, y: float, text: str) -> str:
    """A legend entry's text, its left end at ``x``, its middle at ``y``."""
    return f'<text x="{coord(x)}" y="{coord(y)}" dominant-baseline="middle" class="legend-label">{esc(text)}</text>'


def _legend(chart: Chart, s: _Plot, notes: dict[str, str]) -> tuple[list[str], float]:
    """One entry per mode: a stretch of its dashed line with its marker, and its name (and where it is drawn
    offset, why); the hollow marker's meaning where a session is left out; the change point key. Its last row's y."""
    out = ['<g class="legend">']
    flow = Flow(s.x0, s.y0 + 54, ROW + 4, WIDTH - 4)
    for line in chart.lines:
        colour, dash, shape = line.style.colour, line.style.dash, line.style.shape
        name = line.name + (f" ({notes[line.name]})" if line.name in notes else "")
        x, y = flow.at(33 + text_width(name) + 14)
        out.append(f'<line x1="{coord(x)}" x2="{coord(x + 28)}" y1="{coord(y)}" y2="{coord(y)}" stroke="{colour}" '
                   f'stroke-width="1.6"{dash_attr(dash)}/>')
        out.append(marker(shape, x + 14, y, 3.5, mark_paint(shape, colour)))
        out.append(_legend_label(x + 33, y, name))
    if any(p.left_out for line in chart.lines for p in line.points):
        text = "hollow ring: left out of change points"
        x, y = flow.at(14 + text_width(text) + 14)
        out.append(_left_out_mark("circle", x + 6, y, GREY, cls="legend-ring"))
        out.append(_legend_label(x + 14, y, text))
    if chart.markers:
        text = "change point (▼ faster; grey: acknowledged)"
        x, y = flow.at(14 + text_width(text) + 14)
        out.append(marker("triangle", x + 6, y, 5, 'fill="#b2182b" stroke="#000" stroke-width="0.8"'))
        out.append(_legend_label(x + 14, y, text))
    out.append("</g>")
    return out, flow.y


def _key(key: _Key, s: _Plot, y: float) -> tuple[list[str], float]:
    """The numbered key's entries from baseline ``y`` on (nothing where it is empty), and the last row's y."""
    if not key.entries:
        return [], y - ROW
    out = ['<g class="key">']
    flow = Flow(s.x0, y, ROW, WIDTH - 4)
    for tag, label, detail in key.entries:
        text = f"{tag} {label}"
        x, ty = flow.at(text_width(text) + 16)
        out.append(f'<text x="{coord(x)}" y="{coord(ty)}" class="key-entry"><title>{esc(detail)}</title>'
                   f"{esc(text)}</text>")
    out.append("</g>")
    return out, flow.y


def series_chart(chart: Chart) -> str:
    """The chart as an inline ``<svg>`` (no ``xmlns`` needed inside HTML), ``role="img"`` labelled by its title and
    description; as tall as its legend and key need."""
    lo, hi = _range(chart)
    ticks = nice_ticks(lo, hi)
    s = _Plot(len(chart.x_labels), lo, hi, _left(ticks))
    dodges = _dodges(chart, s)
    placer, key = Placer(), _Key()
    placer.taken.extend(_boundary_line(s, b)[1] for b in chart.boundaries)
    drawn = [*_axes(chart, s, ticks), *_boundaries(chart, s, placer, key)]
    for line in chart.lines:
        drawn.extend(_line(line, chart, s, dodges[line.name]))
    drawn.extend(_markers(chart, s, dodges, placer, key))
    legend, last = _legend(chart, s, _same_as(chart, dodges))
    keyed, last = _key(key, s, last + ROW + 6)
    height = math.ceil(last + 14)
    head = frame(WIDTH, height, title=chart.title, desc=chart.desc, ident=chart.ident, attrs=FONT_ATTRS)
    return "\n".join([head, *drawn, *legend, *keyed, "</svg>"])
