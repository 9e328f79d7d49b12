"""The charts of the report: one per test, drawn with matplotlib (a base64 PNG ``<img>``) where it is installed,
else as plain inline SVG drawn here.

For each measurement of the test a panel of bars per mode (median) with whiskers from p5 to p95, and, where
two or more saved baselines hold the test, a panel with its median in each of them, oldest first, and in this
run. :func:`chart_backend` says which back end a page uses, :func:`draw_chart` draws one test's chart with it.
Also the markup primitives the page shares with the charts: :func:`escape`, :func:`format_ms` and
:func:`mode_color`. Nothing here is loaded from the network.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_jetmem.cuda.mode_styles import mode_style
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
def escape(x: object) -> str:
    """``str(x)`` escaped for HTML text and quoted attribute values (``& < > " '``)."""
    return html.escape(str(x), quote=True)


def format_ms(x: object, digits: int = 4) -> str:
    """``x`` with ``digits`` significant digits (``%g``) where it is a finite number (:func:`finite`), else ``""``."""
    return f"{x:.{digits}g}" if finite(x) else ""


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
def _ticks(top: float) -> list[float]:
    """Round tick values from 0 to at least ``top``: a step of 1, 2, 2.5 or 5 times a power of ten, 3 to 6 ticks."""
    if not top > 0 or not math.isfinite(top):
        return [0.0, 0.25, 0.5, 0.75, 1.0]
    raw = top / 4
    exp = 10 ** math.floor(math.log10(raw))
    step = next(m * exp for m in (1, 2, 2.5, 5, 10) if m * exp >= raw)
    n = math.ceil(top / step - 1e-9)
    return [round(step * i, 12) for i in range(n + 1)]


def _or_zero(x: float) -> float:
    """``x`` where it is finite, else 0 (a bar's height, an axis's top)."""
    return x if finite(x) else 0.0


def _trim(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


# Margins of a panel around its plotting area, in SVG units.
_LEFT, _BOTTOM, _RIGHT, _TITLE_H = 52.0, 34.0, 8.0, 22.0


@dataclass(frozen=True)
class _Plot:
    """The plotting area of one SVG panel (its top-left corner, width, height) and the value at its top."""

    x0: float
    y0: float
    w: float
    h: float
    ymax: float

    @classmethod
    def inside(cls, x0: float, y0: float, w: float, h: float, ymax: float) -> _Plot:
        """The plotting area of the panel at ``(x0, y0)`` of size ``w`` x ``h``: the panel less its margins."""
        return cls(x0 + _LEFT, y0 + _TITLE_H, w - _LEFT - _RIGHT, h - _TITLE_H - _BOTTOM, ymax)

    @property
    def bottom(self) -> float:
        """The y of the value 0 (the x axis)."""
        return self.y0 + self.h

    def y(self, v: float) -> float:
        """The y of the value ``v``."""
        return self.y0 + self.h - self.h * v / self.ymax


def _svg_title(x0: float, y0: float, w: float, text: str) -> str:
    """A panel's title, centred over it; ``text`` is markup (already escaped)."""
    return f'<text x="{x0 + w / 2:.1f}" y="{y0 + 15:.1f}" class="pt" text-anchor="middle">{text}</text>'


def _svg_grid(plot: _Plot, ticks: Sequence[float]) -> list[str]:
    """A grid line and a label on the y axis per tick."""
    out = []
    for v in ticks:
        y = plot.y(v)
        out.append(f'<line x1="{plot.x0:.1f}" y1="{y:.1f}" x2="{plot.x0 + plot.w:.1f}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{plot.x0 - 4:.1f}" y="{y + 3.5:.1f}" class="tick" text-anchor="end">{v:g}</text>')
    return out


def _svg_x_label(x: float, plot: _Plot, text: str, n: int) -> str:
    """A label under the x axis at ``x``: ``text`` cut to ``n`` characters."""
    label = escape(_trim(text, n))
    return f'<text x="{x:.1f}" y="{plot.bottom + 15:.1f}" class="tick" text-anchor="middle">{label}</text>'


def _svg_axis(plot: _Plot) -> str:
    """The x axis."""
    y = plot.bottom
    return f'<line x1="{plot.x0:.1f}" y1="{y:.1f}" x2="{plot.x0 + plot.w:.1f}" y2="{y:.1f}" class="axis"/>'


def _svg_whisker(plot: _Plot, cx: float, stats: Statistics) -> list[str]:
    """The whisker p5..p95 of a bar centred at ``cx`` (nothing where either is not a number)."""
    if not (finite(stats.p5) and finite(stats.p95)):
        return []
    ylo, yhi = plot.y(stats.p5), plot.y(stats.p95)
    caps = [
        f'<line x1="{cx - 6:.1f}" y1="{y:.1f}" x2="{cx + 6:.1f}" y2="{y:.1f}" class="whisker"/>' for y in (ylo, yhi)
    ]
    return [f'<line x1="{cx:.1f}" y1="{ylo:.1f}" x2="{cx:.1f}" y2="{yhi:.1f}" class="whisker"/>', *caps]


def _bar_tip(mode: str, key: str, stats: Statistics) -> str:
    """A bar's tooltip: the median, p5, p95, MAD and n."""
    return (
        f"{mode} {key}: median {format_ms(_or_zero(stats.median))} ms, p5 {format_ms(stats.p5)}, "
        f"p95 {format_ms(stats.p95)}, MAD {format_ms(stats.mad, 2)}, n={stats.n}"
    )


def _svg_bar(plot: _Plot, cx: float, bw: float, color: str, row: MeasurementRecord) -> list[str]:
    """One mode's bar centred at ``cx``, ``bw`` wide: the median, its whisker, its value and the mode under it."""
    stats = row.statistics
    med = _or_zero(stats.median)
    yv = plot.y(med)
    out = [
        f'<rect x="{cx - bw / 2:.1f}" y="{yv:.1f}" width="{bw:.1f}" height="{plot.bottom - yv:.1f}" '
        f'fill="{color}" class="bar"><title>{escape(_bar_tip(row.mode, row.key, stats))}</title></rect>'
    ]
    whisker = _svg_whisker(plot, cx, stats)
    label_y = (min(yv, plot.y(stats.p95)) if whisker else yv) - 4
    out += whisker
    out.append(f'<text x="{cx:.1f}" y="{label_y:.1f}" class="val" text-anchor="middle">{format_ms(med, 3)}</text>')
    out.append(_svg_x_label(cx, plot, row.mode, 14))
    return out


def _present(group: Group, key: str) -> list[MeasurementRecord]:
    """The rows of measurement ``key`` of ``group``, one per mode that has one, in the modes' order."""
    return [r for m in group.modes if (r := group.row(key, m)) is not None]


def _bars_top(rows: Sequence[MeasurementRecord]) -> float:
    """The highest p95 or median of ``rows`` (0 without a number)."""
    return max((max(_or_zero(r.statistics.p95), _or_zero(r.median)) for r in rows), default=0.0)


def _svg_bars(group: Group, key: str, x0: float, y0: float, w: float, h: float) -> list[str]:
    """One panel: a bar per mode (median) with a whisker p5..p95."""
    rows = _present(group, key)
    ticks = _ticks(_bars_top(rows) * 1.08)
    plot = _Plot.inside(x0, y0, w, h, ticks[-1])
    out = [_svg_title(x0, y0, w, escape(_trim(key, 48))), *_svg_grid(plot, ticks)]
    out.append(
        f'<text x="{x0 + 11:.1f}" y="{plot.y0 + plot.h / 2:.1f}" class="tick" text-anchor="middle" '
        f'transform="rotate(-90 {x0 + 11:.1f} {plot.y0 + plot.h / 2:.1f})">ms</text>'
    )
    slot = plot.w / max(len(rows), 1)
    bw = min(56.0, slot * 0.6)
    for i, r in enumerate(rows):
        out += _svg_bar(plot, plot.x0 + slot * (i + 0.5), bw, mode_color(r.mode, group.modes), r)
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
    plot: _Plot, xs: Mapping[str, float], mode: str, key: str, color: str, pts: Sequence[TrendPoint]
) -> list[str]:
    """One mode's line through its medians, a dot with a tooltip per point."""
    coords = [(xs[p.label], plot.y(p.median), p) for p in pts]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in coords)
    dash = mode_style(mode).dash
    dashed = f' stroke-dasharray="{dash}"' if dash else ""
    out = [f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dashed}/>']
    for x, y, p in coords:
        tip = f"{mode} {key} in {p.label} ({p.created}): median {format_ms(p.median)} ms, n={p.n}"
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}"><title>{escape(tip)}</title></circle>')
    return out


def _svg_trend(group: Group, key: str, trends: Trends, x0: float, y0: float, w: float, h: float) -> list[str]:
    """One panel: the median in each saved baseline (oldest first) and in this run, a line per mode."""
    series = _trend_series(group, key, trends)
    labels = _trend_labels(series)
    ticks = _ticks(max((p.median for pts in series.values() for p in pts), default=0.0) * 1.08)
    plot = _Plot.inside(x0, y0, w, h, ticks[-1])
    out = [_svg_title(x0, y0, w, f"{escape(_trim(key, 36))}: median per baseline"), *_svg_grid(plot, ticks)]
    step = plot.w / max(len(labels), 1)
    xs = {lab: plot.x0 + step * (i + 0.5) for i, lab in enumerate(labels)}
    out += [_svg_x_label(x, plot, lab, 20) for lab, x in xs.items()]
    for mode, pts in series.items():
        out += _svg_trend_line(plot, xs, mode, key, mode_color(mode, group.modes), pts)
    out.append(_svg_axis(plot))
    return out


def _svg_chart(group: Group, trends: Trends) -> str:
    keys = group.keys
    trend_keys = [k for k in keys if has_trend(group, k, trends)]
    pw, ph = 320.0, 230.0
    cols = max(len(keys), len(trend_keys), 1)
    width = pw * cols
    legend_h = 24.0
    height = legend_h + ph * (2 if trend_keys else 1)
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
        f'height="{height:.0f}" aria-label="{escape("timings of " + group.name)}">',
        "<style>.pt{font:bold 12px sans-serif}.tick,.val{font:11px sans-serif;fill:#333}"
        ".grid{stroke:#e3e3e3}.axis{stroke:#444}.whisker{stroke:#222;stroke-width:1.5}</style>",
    ]
    lx = 8.0
    for mode in group.modes:
        parts.append(f'<rect x="{lx:.1f}" y="6" width="12" height="12" fill="{mode_color(mode, group.modes)}"/>')
        parts.append(f'<text x="{lx + 16:.1f}" y="16" class="tick">{escape(mode)}</text>')
        lx += 24 + 7 * len(mode)
    for i, key in enumerate(keys):
        parts.extend(_svg_bars(group, key, pw * i, legend_h, pw, ph))
    for i, key in enumerate(trend_keys):
        parts.extend(_svg_trend(group, key, trends, pw * i, legend_h + ph, pw, ph))
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
