"""The charts of the report: one per test, drawn with matplotlib (a base64 PNG ``<img>``) where it is installed,
else as plain inline SVG drawn here with :mod:`pytest_jetmem.draw.svg` (the history site's scales, ticks, label
placement, markers and accessible frame).

For each measurement of the test a panel of bars per mode (median) with whiskers from p5 to p95, and, where
two or more saved baselines hold the test, a panel with its median in each of them, oldest first, and in this
run, a line per mode in its colour, dash pattern and marker shape (:mod:`pytest_jetmem.cuda.mode_styles`).
:func:`chart_backend` says which back end a page uses, :func:`draw_chart` draws one test's chart with it. Also
:func:`format_ms` and :func:`mode_color`, which the page shares with the charts, and :data:`escape` (the one
escaping rule, :func:`pytest_jetmem.draw.svg.esc`). Nothing here is loaded from the network."""

from __future__ import annotations

import base64
import io
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_jetmem.cuda.mode_styles import ModeStyle, mode_style
from pytest_jetmem.draw.svg import (
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
from pytest_jetmem.measure.record import MeasurementRecord, Statistics
from pytest_jetmem.report.rows import Group, TrendPoint, Trends, finite, has_trend

__all__ = [
    "CHART_BACKENDS",
    "NO_MATPLOTLIB_NOTE",
    "chart_backend",
    "draw_chart",
    "escape",
    "format_ms",
    "matplotlib_available",
    "mode_color",
]

CHART_BACKENDS = ("auto", "matplotlib", "svg")
NO_MATPLOTLIB_NOTE = (
    "matplotlib is not installed: the charts below are simple SVG drawn by pytest-jetmem "
    "(pip install 'pytest-jetmem[report]' for matplotlib charts)."
)


# -- markup primitives ---------------------------------------------------------------------------------
#: The one escaping rule (:func:`pytest_jetmem.draw.svg.esc`), under the name this module has always exported.
escape = esc


def format_ms(x: object, digits: int = 4) -> str:
    """``x`` with ``digits`` significant digits (``%g``) where it is a finite number (:func:`finite`), else ``""``."""
    return number(x, digits) if isinstance(x, (int, float)) and finite(x) else ""


def mode_color(mode: str, modes: Sequence[str]) -> str:
    """The colour of ``mode`` among the ``modes`` of one chart: its :func:`~pytest_jetmem.cuda.mode_styles.mode_style`
    (the history site's colour of the mode too)."""
    return mode_style(mode, modes).colour


# -- choosing the back end -----------------------------------------------------------------------------
def chart_backend(charts: str = "auto") -> str:
    """The back end ``charts`` asks for, ``"matplotlib"`` or ``"svg"``: ``"auto"`` is matplotlib where it is
    installed (:func:`matplotlib_available`), else SVG. ValueError for anything but :data:`CHART_BACKENDS`."""
    if charts not in CHART_BACKENDS:
        raise ValueError(f"charts: expected 'auto', 'matplotlib' or 'svg', got {charts!r}")
    return "matplotlib" if charts == "matplotlib" or (charts == "auto" and matplotlib_available()) else "svg"


def draw_chart(group: Group, trends: Trends, charts: str = "auto") -> str:
    """The chart of one test as an HTML fragment: a base64 PNG ``<img>`` where :func:`chart_backend` of
    ``charts`` is matplotlib, else an inline ``<svg>``. ImportError for ``"matplotlib"`` without matplotlib."""
    return _mpl_chart(group, trends) if chart_backend(charts) == "matplotlib" else _svg_chart(group, trends)


# -- charts: our own SVG -------------------------------------------------------------------------------
def _or_zero(x: float) -> float:
    """``x`` where it is finite, else 0 (a bar's height, an axis's top)."""
    return x if finite(x) else 0.0


def _trim(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# A panel's size and its margins around its plotting area, and a row of the legend, in SVG units.
_PANEL_W, _PANEL_H = 320.0, 230.0
_LEFT, _BOTTOM, _RIGHT, _TITLE_H = 52.0, 34.0, 8.0, 22.0
_LEGEND_ROW = 16.0
#: The room a panel leaves above its highest value (for the value over a bar), a share of its range (:func:`padded`).
_HEADROOM = 0.08
_STYLE = (
    "<style>.pt{font:bold 12px sans-serif}.tick,.val{font:11px sans-serif;fill:#333}"
    ".grid{stroke:#e3e3e3}.axis{stroke:#444}.whisker{stroke:#222;stroke-width:1.5}</style>"
)


@dataclass(frozen=True)
class _Plot:
    """One panel: its box (``panel``), its plotting area (from ``x0``, ``w`` wide, from ``top`` down to the x axis
    at ``bottom``), ``y`` mapping ms onto it (0 on the x axis) and ``ticks``, the ms of its grid lines."""

    panel: Box
    x0: float
    w: float
    top: float
    bottom: float
    y: Scale
    ticks: tuple[float, ...]

    @classmethod
    def inside(cls, x0: float, y0: float, highest: float) -> _Plot:
        """The panel at ``(x0, y0)``: from 0 ms to a little above ``highest`` (0 where it is not a number)."""
        lo, hi = padded(0.0, _or_zero(highest), _HEADROOM)
        top, bottom = y0 + _TITLE_H, y0 + _PANEL_H - _BOTTOM
        panel = Box(x0, y0, x0 + _PANEL_W, y0 + _PANEL_H)
        return cls(panel, x0 + _LEFT, _PANEL_W - _LEFT - _RIGHT, top, bottom, Scale(lo, hi, bottom, top),
                   tuple(nice_ticks(lo, hi)))

    def slots(self, n: int) -> Scale:
        """The x of the middle of each of ``n`` equal slots across the plot (slot 0 leftmost)."""
        return Scale(-0.5, n - 0.5, self.x0, self.x0 + self.w)


def _svg_frame(plot: _Plot, title: str) -> list[str]:
    """A panel's title (markup, already escaped) centred over it, its grid with a label per tick and the y axis
    title."""
    mid, left, right = (plot.top + plot.bottom) / 2, coord(plot.x0), coord(plot.x0 + plot.w)
    out = [f'<text x="{coord((plot.panel.x0 + plot.panel.x1) / 2)}" y="{coord(plot.panel.y0 + 15)}" class="pt" '
           f'text-anchor="middle">{title}</text>']
    for v, label in zip(plot.ticks, tick_labels(plot.ticks), strict=True):
        y = plot.y(v)
        out.append(f'<line x1="{left}" y1="{coord(y)}" x2="{right}" y2="{coord(y)}" class="grid"/>')
        out.append(f'<text x="{coord(plot.x0 - 4)}" y="{coord(y + 3.5)}" class="tick" text-anchor="end">{label}</text>')
    x = coord(plot.panel.x0 + 11)
    out.append(f'<text x="{x}" y="{coord(mid)}" class="tick" text-anchor="middle" '
               f'transform="rotate(-90 {x} {coord(mid)})">ms</text>')
    return out


def _svg_axis(plot: _Plot) -> str:
    """The x axis (drawn over the bars' feet)."""
    y = coord(plot.bottom)
    return f'<line x1="{coord(plot.x0)}" y1="{y}" x2="{coord(plot.x0 + plot.w)}" y2="{y}" class="axis"/>'


def _svg_text(placer: Placer, area: Box, text: str, spots: Sequence[tuple[float, float]], cls: str) -> list[str]:
    """``text`` centred at the first of ``spots`` (x, baseline y) where it lies inside ``area`` clear of every label
    ``placer`` placed; nothing where none is (what it labels keeps its tooltip)."""
    spot = placer.place(text, [(x, y, "middle") for x, y in spots], area)
    if spot is None:
        return []
    x, y, _ = spot
    return [f'<text x="{coord(x)}" y="{coord(y)}" class="{cls}" text-anchor="middle">{esc(text)}</text>']


def _svg_x_label(plot: _Plot, placer: Placer, x: float, text: str) -> list[str]:
    """A label under the x axis at ``x``, on the first row or, clear of its neighbours, the second."""
    area = Box(plot.panel.x0, plot.bottom, plot.panel.x1, plot.panel.y1)
    return _svg_text(placer, area, text, [(x, plot.bottom + 15), (x, plot.bottom + 28)], "tick")


def _svg_whisker(plot: _Plot, cx: float, stats: Statistics) -> list[str]:
    """The whisker p5..p95 of a bar centred at ``cx`` (nothing where either is not a number)."""
    if not (finite(stats.p5) and finite(stats.p95)):
        return []
    ylo, yhi, x = plot.y(stats.p5), plot.y(stats.p95), coord(cx)
    caps = [
        f'<line x1="{coord(cx - 6)}" y1="{coord(y)}" x2="{coord(cx + 6)}" y2="{coord(y)}" class="whisker"/>'
        for y in (ylo, yhi)
    ]
    return [f'<line x1="{x}" y1="{coord(ylo)}" x2="{x}" y2="{coord(yhi)}" class="whisker"/>', *caps]


def _bar_tip(mode: str, key: str, stats: Statistics) -> str:
    """A bar's tooltip: the median, p5, p95, MAD and n."""
    return (
        f"{mode} {key}: median {format_ms(_or_zero(stats.median))} ms, p5 {format_ms(stats.p5)}, "
        f"p95 {format_ms(stats.p95)}, MAD {format_ms(stats.mad, 2)}, n={stats.n}"
    )


def _svg_bar(plot: _Plot, placer: Placer, cx: float, bw: float, row: MeasurementRecord, color: str) -> list[str]:
    """One mode's bar centred at ``cx``, ``bw`` wide: the median, its whisker, its value over it and the mode under
    it (each label where it is clear of the others)."""
    stats = row.statistics
    med = _or_zero(stats.median)
    yv = plot.y(med)
    out = [
        f'<rect x="{coord(cx - bw / 2)}" y="{coord(yv)}" width="{coord(bw)}" height="{coord(plot.bottom - yv)}" '
        f'fill="{esc(color)}" class="bar">{tooltip(_bar_tip(row.mode, row.key, stats))}</rect>'
    ]
    whisker = _svg_whisker(plot, cx, stats)
    label_y = (min(yv, plot.y(stats.p95)) if whisker else yv) - 4
    out += whisker
    above = Box(plot.panel.x0, plot.top - 4, plot.panel.x1, plot.bottom)
    out += _svg_text(placer, above, format_ms(med, 3), [(cx, label_y)], "val")
    out += _svg_x_label(plot, placer, cx, _trim(row.mode, 14))
    return out


def _present(group: Group, key: str) -> list[MeasurementRecord]:
    """The rows of measurement ``key`` of ``group``, one per mode that has one, in the modes' order."""
    return [r for m in group.modes if (r := group.row(key, m)) is not None]


def _bars_top(rows: Sequence[MeasurementRecord]) -> float:
    """The highest p95 or median of ``rows`` (0 without a number)."""
    return max((max(_or_zero(r.statistics.p95), _or_zero(r.median)) for r in rows), default=0.0)


def _svg_bars(group: Group, key: str, x0: float, y0: float) -> list[str]:
    """One panel at ``(x0, y0)``: a bar per mode (median) with a whisker p5..p95."""
    rows = _present(group, key)
    plot = _Plot.inside(x0, y0, _bars_top(rows))
    out, placer = _svg_frame(plot, esc(_trim(key, 48))), Placer()
    slot = plot.slots(len(rows))
    bw = min(56.0, plot.w / max(len(rows), 1) * 0.6)
    for i, r in enumerate(rows):
        out += _svg_bar(plot, placer, slot(i), bw, r, mode_color(r.mode, group.modes))
    out.append(_svg_axis(plot))
    return out


def _trend_series(group: Group, key: str, trends: Trends) -> dict[str, list[TrendPoint]]:
    """Per mode of ``group`` that has trend points for ``key``: its points (oldest first)."""
    series = {r.mode: trends.of(r.nodeid, r.mode, key) for r in _present(group, key)}
    return {m: pts for m, pts in series.items() if pts}


def _trend_labels(series: Mapping[str, Sequence[TrendPoint]]) -> list[str]:
    """The baselines (and this run) of ``series``, each once, in order of first appearance."""
    return list(dict.fromkeys(p.label for pts in series.values() for p in pts))


def _svg_trend_line(
    plot: _Plot, xs: Mapping[str, float], mode: str, key: str, style: ModeStyle, pts: Sequence[TrendPoint]
) -> list[str]:
    """One mode's line through its medians (its colour and dash pattern), its marker with a tooltip per point."""
    coords = [(xs[p.label], plot.y(p.median), p) for p in pts]
    path = " ".join(f"{coord(x)},{coord(y)}" for x, y, _ in coords)
    colour = esc(style.colour)
    out = [f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash_attr(style.dash)}/>']
    for x, y, p in coords:
        tip = f"{mode} {key} in {p.label} ({p.created}): median {format_ms(p.median)} ms, n={p.n}"
        out.append(marker(style.shape, x, y, 3.5, mark_paint(style.shape, colour), tip))
    return out


def _svg_trend(group: Group, key: str, trends: Trends, x0: float, y0: float) -> list[str]:
    """One panel at ``(x0, y0)``: the median in each saved baseline (oldest first) and in this run, a line per
    mode."""
    series = _trend_series(group, key, trends)
    labels = _trend_labels(series)
    plot = _Plot.inside(x0, y0, max((p.median for pts in series.values() for p in pts), default=0.0))
    out, placer = _svg_frame(plot, f"{esc(_trim(key, 36))}: median per baseline"), Placer()
    slot = plot.slots(len(labels))
    xs = {lab: slot(i) for i, lab in enumerate(labels)}
    for lab, x in xs.items():
        out += _svg_x_label(plot, placer, x, _trim(lab, 20))
    for mode, pts in series.items():
        out += _svg_trend_line(plot, xs, mode, key, mode_style(mode, group.modes), pts)
    out.append(_svg_axis(plot))
    return out


def _svg_legend(modes: Sequence[str], width: float) -> tuple[list[str], float]:
    """A square of its colour and the name of each mode, in as many rows as ``width`` needs; the legend's height."""
    flow, out = Flow(8.0, 16.0, _LEGEND_ROW, width - 8), []
    for mode in modes:
        x, y = flow.at(24 + text_width(mode))
        colour = esc(mode_color(mode, modes))
        out.append(f'<rect x="{coord(x)}" y="{y - 10:g}" width="12" height="12" fill="{colour}"/>')
        out.append(f'<text x="{coord(x + 16)}" y="{y:g}" class="tick">{esc(mode)}</text>')
    return out, flow.y + 8


def _svg_chart(group: Group, trends: Trends) -> str:
    """The chart as an inline ``<svg>`` in :func:`~pytest_jetmem.draw.svg.frame`: the legend, a row of bar panels
    (one per measurement) and, where there are trends, a row of trend panels under it."""
    keys = group.keys
    trend_keys = [k for k in keys if has_trend(group, k, trends)]
    width = _PANEL_W * max(len(keys), len(trend_keys), 1)
    legend, legend_h = _svg_legend(group.modes, width)
    height = legend_h + _PANEL_H * (2 if trend_keys else 1)
    desc = "Bars: the median of each mode per measurement, whiskers from p5 to p95." + (
        " Lines: the median of each mode in each saved baseline, oldest first, and in this run." if trend_keys else "")
    parts = [frame(width, height, title=f"timings of {group.name}", desc=desc, ident=f"{group.anchor}-chart"),
             _STYLE, *legend]
    for i, key in enumerate(keys):
        parts.extend(_svg_bars(group, key, _PANEL_W * i, legend_h))
    for i, key in enumerate(trend_keys):
        parts.extend(_svg_trend(group, key, trends, _PANEL_W * i, legend_h + _PANEL_H))
    parts.append("</svg>")
    return "\n".join(parts)


# -- charts: matplotlib --------------------------------------------------------------------------------
def matplotlib_available() -> bool:
    """Whether matplotlib can be imported (the ``report`` extra)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _mpl_chart(group: Group, trends: Trends) -> str:
    """The chart as a base64 PNG ``<img>``, drawn with matplotlib's object API (no pyplot, no global state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    keys = group.keys
    trend_keys = [k for k in keys if has_trend(group, k, trends)]
    cols = max(len(keys), len(trend_keys), 1)
    nrows = 2 if trend_keys else 1
    fig = Figure(figsize=(3.4 * cols, 2.7 * nrows + 0.3), dpi=96, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, cols, squeeze=False)
    _mpl_row(axes[0], keys, lambda ax, key: _mpl_bars(ax, group, key))
    if trend_keys:
        _mpl_row(axes[1], trend_keys, lambda ax, key: _mpl_trend(ax, group, key, trends))
    return _png_img(fig, group)


def _mpl_row(axes: Sequence[Any], keys: Sequence[str], draw: Callable[[Any, str], None]) -> None:
    """One row of panels: ``draw(ax, key)`` for each key in turn, the panels past the last key hidden."""
    for i, ax in enumerate(axes):
        if i < len(keys):
            draw(ax, keys[i])
        else:
            ax.set_visible(False)


def _whiskers(rows: Sequence[MeasurementRecord], meds: Sequence[float]) -> tuple[list[float], list[float]]:
    """(down, up): how far each bar's whisker reaches below and above its median (0 where p5/p95 is no number)."""
    pairs = list(zip(meds, rows, strict=True))
    lo = [max(0.0, med - r.statistics.p5) if finite(r.statistics.p5) else 0.0 for med, r in pairs]
    hi = [max(0.0, r.statistics.p95 - med) if finite(r.statistics.p95) else 0.0 for med, r in pairs]
    return lo, hi


def _mpl_bars(ax: Any, group: Group, key: str) -> None:
    """One panel: a bar per mode (median) with a whisker p5..p95, its value over it."""
    rows = _present(group, key)
    modes = [r.mode for r in rows]
    meds = [_or_zero(r.median) for r in rows]
    lo, hi = _whiskers(rows, meds)
    colors = [mode_color(m, group.modes) for m in modes]
    ax.bar(range(len(modes)), meds, color=colors, yerr=[lo, hi], capsize=5, ecolor="#222")
    for x, (med, h) in enumerate(zip(meds, hi, strict=True)):
        ax.annotate(f"{med:.3g}", (x, med + h), textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)
    ax.set_xticks(range(len(modes)), modes, fontsize=8)
    ax.set_ylabel("ms", fontsize=8)
    ax.set_title(_trim(key, 48), fontsize=9)
    ax.tick_params(axis="y", labelsize=8)
    ax.set_ylim(bottom=0)
    ax.margins(y=0.15)
    ax.grid(axis="y", color="#e3e3e3")
    ax.set_axisbelow(True)


def _mpl_trend(ax: Any, group: Group, key: str, trends: Trends) -> None:
    """One panel: the median in each saved baseline (oldest first) and in this run, a line per mode."""
    series = _trend_series(group, key, trends)
    labels = _trend_labels(series)
    for m, pts in series.items():
        xs = [labels.index(p.label) for p in pts]
        ax.plot(xs, [p.median for p in pts], marker="o", color=mode_color(m, group.modes), label=m)
    ax.set_xticks(range(len(labels)), [_trim(lab, 20) for lab in labels], fontsize=7, rotation=20)
    ax.set_title(f"{_trim(key, 30)}: median per baseline", fontsize=9)
    ax.set_ylabel("ms", fontsize=8)
    ax.tick_params(axis="y", labelsize=8)
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", color="#e3e3e3")
    ax.legend(fontsize=7)


def _png_img(fig: Any, group: Group) -> str:
    """``fig`` as an ``<img>`` holding its PNG (base64), its alt text naming the test."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    alt = f"timings of {group.name}: median per mode, whiskers p5..p95"
    return f'<img class="chart" alt="{escape(alt)}" src="data:image/png;base64,{data}">'
