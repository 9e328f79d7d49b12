"""The HTML report: the measurement rows of a session in, one self-contained HTML file (and a JSON twin) out.

GPU-free and pytest-free: :mod:`pytest_jetmem.plugin.report` gathers the rows the runtime plugin publishes on
the test reports (``report.jetmem_rows``: one dict per test, mode and measurement) and calls
:func:`write_report` at the end of the session.

The page holds everything inline (CSS, a few lines of JS to sort the table, the charts as inline SVG or as
base64 PNG) and loads nothing from the network: it opens from a CI artifact, an e-mail or a file share.

- One table of every row: test, mode, measurement, median, MAD, p5..p95, n, the ratio to the reference mode,
  the first call, the change against the compared baseline and the verdict.
- One chart per test (a test is its node id with the memory mode taken out of the parameter id, so
  ``test_conv[15-device]`` and ``test_conv[15-zero_copy]`` are one test): for each measurement a panel of bars
  per mode (median) with whiskers from p5 to p95, and, where two or more saved baselines in the baseline
  directory hold the test, a panel with its median in each of them, oldest first, and in this run.
- Charts come from matplotlib when it is installed (the ``report`` extra), as PNG; otherwise they are drawn
  here as plain SVG, and the page says so.

The JSON twin (:func:`report_document`) holds the rows exactly as the plugin made them, the trends and the
machine, for tools.
"""

from __future__ import annotations

import base64
import contextlib
import html
import io
import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_jetmem.atomic import write_atomic
from pytest_jetmem.measure.baseline import Baseline, BaselineError, BaselineStore, Machine, entry_key

__all__ = [
    "FORMAT",
    "MODE_COLORS",
    "VERSION",
    "Group",
    "TrendPoint",
    "Trends",
    "group_name",
    "group_rows",
    "json_path_for",
    "load_trends",
    "matplotlib_available",
    "render_html",
    "report_document",
    "write_report",
]

FORMAT = "pytest-jetmem-report"
VERSION = 1
REFERENCE_MODE = "device"
MODE_ORDER = ("device", "managed", "zero_copy")
MODE_COLORS = {"device": "#1f77b4", "managed": "#ff7f0e", "zero_copy": "#2ca02c"}
_OTHER_COLORS = ("#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
NO_MATPLOTLIB_NOTE = (
    "matplotlib is not installed: the charts below are simple SVG drawn by pytest-jetmem "
    "(pip install 'pytest-jetmem[report]' for matplotlib charts)."
)


# -- grouping ------------------------------------------------------------------------------------------
def group_name(nodeid: str, mode: str) -> str:
    """The test a row belongs to: its node id with the memory mode removed from the parameter id.

    ``t.py::test_conv[15x15-device]`` -> ``t.py::test_conv[15x15]``; ``t.py::test_a[zero_copy]`` -> ``t.py::test_a``.
    """
    m = re.fullmatch(r"(.*?)\[(.*)\]", nodeid, flags=re.S)
    if not m:
        return nodeid
    parts = m.group(2).split("-")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == mode:
            del parts[i]
            break
    else:
        return nodeid
    return f"{m.group(1)}[{'-'.join(parts)}]" if parts else m.group(1)


def _mode_rank(mode: str) -> tuple[int, str]:
    return (MODE_ORDER.index(mode), "") if mode in MODE_ORDER else (len(MODE_ORDER), mode)


@dataclass
class Group:
    """The rows of one test (every mode), in the order their measurements were first seen."""

    name: str
    anchor: str
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def keys(self) -> list[str]:
        """The measurements (``label:scope``) of this test, in order of appearance."""
        return list(dict.fromkeys(str(r["key"]) for r in self.rows))

    @property
    def modes(self) -> list[str]:
        return sorted({str(r["mode"]) for r in self.rows}, key=_mode_rank)

    def row(self, key: str, mode: str) -> dict[str, Any] | None:
        """The last row of ``key`` in ``mode`` (a rerun test, e.g. with pytest-rerunfailures, reports again)."""
        found = [r for r in self.rows if r["key"] == key and r["mode"] == mode]
        return found[-1] if found else None


def group_rows(rows: Iterable[Mapping[str, Any]]) -> list[Group]:
    """Rows grouped by :func:`group_name`, groups in order of first appearance."""
    groups: dict[str, Group] = {}
    for r in rows:
        name = group_name(str(r["nodeid"]), str(r["mode"]))
        if name not in groups:
            groups[name] = Group(name, f"t{len(groups) + 1}")
        groups[name].rows.append(dict(r))
    return list(groups.values())


# -- trends across saved baselines ---------------------------------------------------------------------
@dataclass(frozen=True)
class TrendPoint:
    """The median of one measurement in one saved baseline (or in this run)."""

    label: str  # the baseline's name, or "this run"
    created: str  # ISO 8601, UTC
    median: float
    n: int
    this_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "created": self.created,
            "median": self.median,
            "n": self.n,
            "this_run": self.this_run,
        }


@dataclass
class Trends:
    """Per (nodeid, mode, key): the points of the baselines that hold it, oldest first, then this run."""

    points: dict[tuple[str, str, str], list[TrendPoint]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    baselines: list[str] = field(default_factory=list)

    def of(self, nodeid: str, mode: str, key: str) -> list[TrendPoint]:
        return self.points.get((nodeid, mode, key), [])

    def to_list(self) -> list[dict[str, Any]]:
        return [
            {"nodeid": n, "mode": m, "key": k, "points": [p.to_dict() for p in pts]}
            for (n, m, k), pts in self.points.items()
        ]


def load_trends(
    store: BaselineStore | None,
    rows: Sequence[Mapping[str, Any]],
    machine: Machine | None = None,
    session_id: str | None = None,
    now: str | None = None,
) -> Trends:
    """Read every baseline in ``store`` and collect, for each row, its median in each baseline that holds it.

    A trend is kept only where at least two baselines hold the measurement. Baselines from another machine
    fingerprint than ``machine`` are left out (their timings are not comparable), and so are unreadable files;
    ``notes`` says which. The run itself is added as the last point, unless a baseline was saved by this very
    session (``session_id``), which then stands for it.
    """
    trends = Trends()
    if store is None:
        return trends
    try:
        names = store.names()
    except OSError as exc:
        trends.notes.append(f"baseline directory {store.directory}: cannot list it ({exc})")
        return trends
    loaded: list[Baseline] = []
    unreadable: list[str] = []
    foreign: list[str] = []
    for name in names:
        try:
            base = store.load(name)
        except BaselineError:
            unreadable.append(name)
            continue
        if machine is not None and machine.mismatches(base.machine):
            foreign.append(name)
            continue
        loaded.append(base)
    loaded.sort(key=lambda b: (b.created, _mtime_ns(b.path), b.name))  # created has one-second resolution
    trends.baselines = [b.name for b in loaded]
    if unreadable:
        trends.notes.append(f"baselines that could not be read, left out of the trends: {', '.join(unreadable)}")
    if foreign:
        trends.notes.append(
            f"baselines from another machine, left out of the trends (not comparable): {', '.join(foreign)}"
        )
    stamp = now or _utc_now()
    for r in rows:
        nodeid, mode, key = str(r["nodeid"]), str(r["mode"]), str(r["key"])
        points: list[TrendPoint] = []
        saved_by_this_run = False
        for base in loaded:
            entry = base.entry(entry_key(nodeid, mode, key))
            if entry is None:
                continue
            mine = session_id is not None and base.session == session_id
            saved_by_this_run |= mine
            label = f"{base.name} (this run)" if mine else base.name
            points.append(TrendPoint(label, base.created, entry.summary.median, entry.summary.n, mine))
        if len(points) < 2:
            continue
        if not saved_by_this_run and _finite(r.get("median")):
            points.append(TrendPoint("this run", stamp, float(r["median"]), int(r.get("n") or 0), True))
        trends.points[(nodeid, mode, key)] = points
    return trends


def _mtime_ns(path: Path | None) -> int:
    try:
        return path.stat().st_mtime_ns if path is not None else 0
    except OSError:
        return 0


# -- the JSON twin -------------------------------------------------------------------------------------
def _utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _jsonable(x: Any) -> Any:
    """Plain JSON values: numpy scalars unwrapped, tuples as lists, non-finite floats as None."""
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        with contextlib.suppress(TypeError, ValueError):
            x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return str(x)


def report_document(
    rows: Sequence[Mapping[str, Any]],
    *,
    machine: Mapping[str, Any] | None = None,
    trends: Trends | None = None,
    notes: Sequence[str] = (),
    created: str | None = None,
) -> dict[str, Any]:
    """The JSON twin of the report: the rows as the plugin made them, plus machine, trends and notes."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "created": created or _utc_now(),
        "machine": _jsonable(dict(machine)) if machine else None,
        "rows": _jsonable([dict(r) for r in rows]),
        "trends": trends.to_list() if trends else [],
        "notes": [*notes, *(trends.notes if trends else [])],
    }


# -- formatting helpers --------------------------------------------------------------------------------
def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _ms(x: Any, digits: int = 4) -> str:
    return f"{x:.{digits}g}" if _finite(x) else ""


def _color(mode: str, modes: Sequence[str]) -> str:
    if mode in MODE_COLORS:
        return MODE_COLORS[mode]
    others = [m for m in modes if m not in MODE_COLORS]
    return _OTHER_COLORS[others.index(mode) % len(_OTHER_COLORS)] if mode in others else "#7f7f7f"


def _ratio_cell(row: Mapping[str, Any], group: Group) -> tuple[str, float | None, str]:
    """(text, sort value, title) of the ratio to the reference mode.

    The side-by-side ratio the runtime plugin measured (``memmode_runtime(max_ratio=..., relative_to=...)``)
    where there is one; otherwise the ratio of this row's median to the ``device`` median of the same test
    and measurement, measured separately (marked with an asterisk).
    """
    if _finite(row.get("ratio")):
        ci = row.get("ratio_ci") or []
        ci_text = f" (99% CI {ci[0]:.3f}..{ci[1]:.3f})" if len(ci) == 2 and all(map(_finite, ci)) else ""
        return (
            f"{row['ratio']:.2f}x {row.get('relative_to', '')}",
            float(row["ratio"]),
            f"measured side by side, interleaved{ci_text}",
        )
    ref = group.row(str(row["key"]), REFERENCE_MODE)
    if ref is None or not _finite(ref.get("median")) or not ref["median"] > 0 or not _finite(row.get("median")):
        return "", None, ""
    ratio = float(row["median"]) / float(ref["median"])
    return f"{ratio:.2f}x {REFERENCE_MODE}*", ratio, "ratio of medians measured one after the other"


def _baseline_cell(row: Mapping[str, Any]) -> tuple[str, float | None]:
    change = row.get("baseline_change_pct")
    verdict = str(row.get("baseline") or "")
    if change is not None and _finite(change):
        return f"{change:+.1f}% {verdict}".strip(), float(change)
    return verdict, None


def _verdict_class(verdict: str) -> str:
    if verdict.startswith("FAIL"):
        return "fail"
    if verdict == "ok":
        return "ok"
    return "info"


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


def _trim(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def _svg_bars(group: Group, key: str, x0: float, y0: float, w: float, h: float) -> list[str]:
    """One panel: a bar per mode (median) with a whisker p5..p95."""
    modes = [m for m in group.modes if group.row(key, m) is not None]
    rows = [group.row(key, m) for m in modes]
    top = max((max(r.get("p95") or 0, r.get("median") or 0) for r in rows if r), default=0.0)
    ticks = _ticks(top * 1.08)
    ymax = ticks[-1]
    left, bottom, right, title_h = 52.0, 34.0, 8.0, 22.0
    px0, py0, pw, ph = x0 + left, y0 + title_h, w - left - right, h - title_h - bottom
    out = [f'<text x="{x0 + w / 2:.1f}" y="{y0 + 15:.1f}" class="pt" text-anchor="middle">{_e(_trim(key, 48))}</text>']
    for v in ticks:
        y = py0 + ph - ph * v / ymax
        out.append(f'<line x1="{px0:.1f}" y1="{y:.1f}" x2="{px0 + pw:.1f}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{px0 - 4:.1f}" y="{y + 3.5:.1f}" class="tick" text-anchor="end">{v:g}</text>')
    out.append(
        f'<text x="{x0 + 11:.1f}" y="{py0 + ph / 2:.1f}" class="tick" text-anchor="middle" '
        f'transform="rotate(-90 {x0 + 11:.1f} {py0 + ph / 2:.1f})">ms</text>'
    )
    slot = pw / max(len(modes), 1)
    bw = min(56.0, slot * 0.6)
    for i, (mode, r) in enumerate(zip(modes, rows, strict=True)):
        assert r is not None
        cx = px0 + slot * (i + 0.5)
        med = float(r["median"]) if _finite(r.get("median")) else 0.0
        yv = py0 + ph - ph * med / ymax
        color = _color(mode, group.modes)
        tip = (
            f"{mode} {key}: median {_ms(med)} ms, p5 {_ms(r.get('p5'))}, p95 {_ms(r.get('p95'))}, "
            f"MAD {_ms(r.get('mad'), 2)}, n={r.get('n')}"
        )
        out.append(
            f'<rect x="{cx - bw / 2:.1f}" y="{yv:.1f}" width="{bw:.1f}" height="{py0 + ph - yv:.1f}" '
            f'fill="{color}" class="bar"><title>{_e(tip)}</title></rect>'
        )
        if _finite(r.get("p5")) and _finite(r.get("p95")):
            ylo = py0 + ph - ph * float(r["p5"]) / ymax
            yhi = py0 + ph - ph * float(r["p95"]) / ymax
            out.append(f'<line x1="{cx:.1f}" y1="{ylo:.1f}" x2="{cx:.1f}" y2="{yhi:.1f}" class="whisker"/>')
            for yy in (ylo, yhi):
                out.append(f'<line x1="{cx - 6:.1f}" y1="{yy:.1f}" x2="{cx + 6:.1f}" y2="{yy:.1f}" class="whisker"/>')
            label_y = min(yv, yhi) - 4
        else:
            label_y = yv - 4
        out.append(f'<text x="{cx:.1f}" y="{label_y:.1f}" class="val" text-anchor="middle">{_ms(med, 3)}</text>')
        out.append(
            f'<text x="{cx:.1f}" y="{py0 + ph + 15:.1f}" class="tick" text-anchor="middle">{_e(_trim(mode, 14))}</text>'
        )
    out.append(f'<line x1="{px0:.1f}" y1="{py0 + ph:.1f}" x2="{px0 + pw:.1f}" y2="{py0 + ph:.1f}" class="axis"/>')
    return out


def _svg_trend(group: Group, key: str, trends: Trends, x0: float, y0: float, w: float, h: float) -> list[str]:
    """One panel: the median in each saved baseline (oldest first) and in this run, a line per mode."""
    series = {m: trends.of(str(r["nodeid"]), m, key) for m in group.modes if (r := group.row(key, m)) is not None}
    series = {m: pts for m, pts in series.items() if pts}
    labels: list[str] = []
    for pts in series.values():
        for p in pts:
            if p.label not in labels:
                labels.append(p.label)
    top = max((p.median for pts in series.values() for p in pts), default=0.0)
    ticks = _ticks(top * 1.08)
    ymax = ticks[-1]
    left, bottom, right, title_h = 52.0, 34.0, 8.0, 22.0
    px0, py0, pw, ph = x0 + left, y0 + title_h, w - left - right, h - title_h - bottom
    out = [
        f'<text x="{x0 + w / 2:.1f}" y="{y0 + 15:.1f}" class="pt" text-anchor="middle">'
        f"{_e(_trim(key, 36))}: median per baseline</text>"
    ]
    for v in ticks:
        y = py0 + ph - ph * v / ymax
        out.append(f'<line x1="{px0:.1f}" y1="{y:.1f}" x2="{px0 + pw:.1f}" y2="{y:.1f}" class="grid"/>')
        out.append(f'<text x="{px0 - 4:.1f}" y="{y + 3.5:.1f}" class="tick" text-anchor="end">{v:g}</text>')
    step = pw / max(len(labels), 1)
    xs = {lab: px0 + step * (i + 0.5) for i, lab in enumerate(labels)}
    for lab, x in xs.items():
        out.append(
            f'<text x="{x:.1f}" y="{py0 + ph + 15:.1f}" class="tick" text-anchor="middle">{_e(_trim(lab, 20))}</text>'
        )
    for mode, pts in series.items():
        color = _color(mode, group.modes)
        coords = [(xs[p.label], py0 + ph - ph * p.median / ymax, p) for p in pts]
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in coords)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y, p in coords:
            tip = f"{mode} {key} in {p.label} ({p.created}): median {_ms(p.median)} ms, n={p.n}"
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}"><title>{_e(tip)}</title></circle>')
    out.append(f'<line x1="{px0:.1f}" y1="{py0 + ph:.1f}" x2="{px0 + pw:.1f}" y2="{py0 + ph:.1f}" class="axis"/>')
    return out


def _has_trend(group: Group, key: str, trends: Trends) -> bool:
    return any(trends.of(str(r["nodeid"]), m, key) for m in group.modes if (r := group.row(key, m)) is not None)


def _svg_chart(group: Group, trends: Trends) -> str:
    keys = group.keys
    trend_keys = [k for k in keys if _has_trend(group, k, trends)]
    pw, ph = 320.0, 230.0
    cols = max(len(keys), len(trend_keys), 1)
    width = pw * cols
    legend_h = 24.0
    height = legend_h + ph * (2 if trend_keys else 1)
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
        f'height="{height:.0f}" aria-label="{_e("timings of " + group.name)}">',
        "<style>.pt{font:bold 12px sans-serif}.tick,.val{font:11px sans-serif;fill:#333}"
        ".grid{stroke:#e3e3e3}.axis{stroke:#444}.whisker{stroke:#222;stroke-width:1.5}</style>",
    ]
    lx = 8.0
    for mode in group.modes:
        parts.append(f'<rect x="{lx:.1f}" y="6" width="12" height="12" fill="{_color(mode, group.modes)}"/>')
        parts.append(f'<text x="{lx + 16:.1f}" y="16" class="tick">{_e(mode)}</text>')
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
    trend_keys = [k for k in keys if _has_trend(group, k, trends)]
    cols = max(len(keys), len(trend_keys), 1)
    nrows = 2 if trend_keys else 1
    fig = Figure(figsize=(3.4 * cols, 2.7 * nrows + 0.3), dpi=96, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, cols, squeeze=False)
    for i in range(cols):
        ax = axes[0][i]
        if i >= len(keys):
            ax.set_visible(False)
            continue
        key = keys[i]
        modes = [m for m in group.modes if group.row(key, m) is not None]
        rows = [group.row(key, m) for m in modes]
        meds = [float(r["median"]) if r and _finite(r.get("median")) else 0.0 for r in rows]
        lo: list[float] = []
        hi: list[float] = []
        for med, r in zip(meds, rows, strict=True):
            lo.append(max(0.0, med - float(r["p5"])) if r and _finite(r.get("p5")) else 0.0)
            hi.append(max(0.0, float(r["p95"]) - med) if r and _finite(r.get("p95")) else 0.0)
        colors = [_color(m, group.modes) for m in modes]
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
    if trend_keys:
        for i in range(cols):
            ax = axes[1][i]
            if i >= len(trend_keys):
                ax.set_visible(False)
                continue
            key = trend_keys[i]
            labels: list[str] = []
            for m in group.modes:
                r = group.row(key, m)
                for p in trends.of(str(r["nodeid"]), m, key) if r else []:
                    if p.label not in labels:
                        labels.append(p.label)
            for m in group.modes:
                r = group.row(key, m)
                pts = trends.of(str(r["nodeid"]), m, key) if r else []
                if pts:
                    ax.plot(
                        [labels.index(p.label) for p in pts],
                        [p.median for p in pts],
                        marker="o",
                        color=_color(m, group.modes),
                        label=m,
                    )
            ax.set_xticks(range(len(labels)), [_trim(lab, 20) for lab in labels], fontsize=7, rotation=20)
            ax.set_title(f"{_trim(key, 30)}: median per baseline", fontsize=9)
            ax.set_ylabel("ms", fontsize=8)
            ax.tick_params(axis="y", labelsize=8)
            ax.set_ylim(bottom=0)
            ax.grid(axis="y", color="#e3e3e3")
            ax.legend(fontsize=7)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    alt = f"timings of {group.name}: median per mode, whiskers p5..p95"
    return f'<img class="chart" alt="{_e(alt)}" src="data:image/png;base64,{data}">'


# -- the page ------------------------------------------------------------------------------------------
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#1b1b1b;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px}h3{font-size:15px;margin:22px 0 6px;
word-break:break-all}
.meta{color:#555;margin:0 0 12px}.note{background:#fff8e1;border-left:4px solid #f0b400;padding:6px 10px;margin:8px 0}
table{border-collapse:collapse;margin:6px 0;font-size:13px}
th,td{border:1px solid #d7d7d7;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f2f4f7;cursor:pointer;user-select:none;white-space:nowrap}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.test{white-space:nowrap}.wide{overflow-x:auto}td.nw{white-space:nowrap}
.caption{color:#555;font-size:12px;margin:2px 0 0}tr:nth-child(even) td{background:#fafbfc}
.ok{color:#17692b;font-weight:600}.worse{color:#b35900;font-weight:600}.better{color:#17692b}.fail{color:#b00020;font-weight:700}.info{color:#555}
.mode{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:5px}
.chart{max-width:100%;height:auto;border:1px solid #eee;background:#fff}
.machine td:first-child{color:#555}.footnote{color:#555;font-size:12px}
"""

_JS = """
document.querySelectorAll("table.sortable th").forEach(function (th, col) {
  th.addEventListener("click", function () {
    var body = th.closest("table").tBodies[0], rows = Array.prototype.slice.call(body.rows);
    var asc = th.dataset.dir !== "asc"; th.dataset.dir = asc ? "asc" : "desc";
    rows.sort(function (a, b) {
      var x = a.cells[col].dataset.v, y = b.cells[col].dataset.v;
      if (x === undefined) { x = a.cells[col].textContent; y = b.cells[col].textContent; }
      var nx = parseFloat(x), ny = parseFloat(y);
      var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : String(x).localeCompare(String(y));
      return asc ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
"""

_COLUMNS = (
    "test",
    "mode",
    "measurement",
    "median ms",
    "MAD ms",
    "p5..p95 ms",
    "n",
    "ratio to ref.",
    "first call ms",
    "vs baseline",
    "verdict",
)


def _item_name(nodeid: str) -> str:
    """The item's name without its file (``t.py::C::test_a[x]`` -> ``C::test_a[x]``): the file is in the tooltip."""
    parts = str(nodeid).split("::")
    return "::".join(parts[1:]) if len(parts) > 1 else str(nodeid)


def _num_td(text: str, value: float | None, extra_class: str = "") -> str:
    v = f' data-v="{value!r}"' if value is not None and math.isfinite(value) else ' data-v=""'
    return f'<td class="num{" " + extra_class if extra_class else ""}"{v}>{_e(text)}</td>'


def _baseline_class(row: Mapping[str, Any]) -> str:
    verdict = str(row.get("baseline") or "")
    return {"regression": "worse", "improvement": "better"}.get(verdict, "")


def _table(groups: Sequence[Group]) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in _COLUMNS)
    body: list[str] = []
    for g in groups:
        for r in g.rows:
            mode = str(r["mode"])
            ratio_text, ratio_v, ratio_title = _ratio_cell(r, g)
            base_text, base_v = _baseline_cell(r)
            verdict = str(r.get("verdict") or "")
            spread = f"{_ms(r.get('p5'))}..{_ms(r.get('p95'))}" if _finite(r.get("p5")) else ""
            body.append(
                "<tr>"
                f'<td class="test" title="{_e(r["nodeid"])}">'
                f'<a href="#{g.anchor}">{_e(_item_name(r["nodeid"]))}</a></td>'
                f'<td class="nw"><span class="mode" style="background:{_color(mode, g.modes)}"></span>{_e(mode)}</td>'
                f'<td class="nw">{_e(r["key"])}</td>'
                + _num_td(_ms(r.get("median")), r.get("median") if _finite(r.get("median")) else None)
                + _num_td(_ms(r.get("mad"), 2), r.get("mad") if _finite(r.get("mad")) else None)
                + _num_td(spread, r.get("p5") if _finite(r.get("p5")) else None)
                + _num_td(str(r.get("n", "")), r.get("n") if _finite(r.get("n")) else None)
                + f'<td class="num" data-v="{"" if ratio_v is None else repr(ratio_v)}" title="{_e(ratio_title)}">'
                f"{_e(ratio_text)}</td>"
                + _num_td(
                    _ms(r.get("first_call_ms")), r.get("first_call_ms") if _finite(r.get("first_call_ms")) else None
                )
                + _num_td(base_text, base_v, _baseline_class(r))
                + f'<td class="{_verdict_class(verdict)}">{_e(verdict)}</td>'
                "</tr>"
            )
    return (
        f'<div class="wide"><table class="sortable" id="rows"><thead><tr>{head}</tr></thead><tbody>\n'
        + "\n".join(body)
        + "\n</tbody></table></div>"
    )


def _caption(group: Group, trends: Trends) -> str:
    text = "Bars: median per memory mode; whiskers: p5..p95 of the samples."
    if any(_has_trend(group, k, trends) for k in group.keys):
        text += " Lines: the median in each saved baseline that holds this test (oldest first) and in this run."
    return text


def _machine_table(machine: Mapping[str, Any] | None) -> str:
    if not machine:
        return '<p class="meta">machine: not known (no GPU was opened)</p>'
    cells = "".join(
        f"<tr><td>{_e(k)}</td><td>{_e(v)}</td></tr>" for k, v in machine.items() if v is not None and v != ""
    )
    return f'<table class="machine"><tbody>{cells}</tbody></table>'


def render_html(
    rows: Sequence[Mapping[str, Any]],
    *,
    machine: Mapping[str, Any] | None = None,
    trends: Trends | None = None,
    notes: Sequence[str] = (),
    title: str = "pytest-jetmem report",
    charts: str = "auto",
    created: str | None = None,
) -> str:
    """The report page. ``charts``: ``"auto"`` (matplotlib when installed, else SVG), ``"matplotlib"``, ``"svg"``."""
    if charts not in ("auto", "matplotlib", "svg"):
        raise ValueError(f"charts: expected 'auto', 'matplotlib' or 'svg', got {charts!r}")
    use_mpl = charts == "matplotlib" or (charts == "auto" and matplotlib_available())
    trends = trends or Trends()
    groups = group_rows(rows)
    all_notes = [*notes, *trends.notes]
    if not use_mpl and groups:
        all_notes.insert(0, NO_MATPLOTLIB_NOTE)
    n_fail = sum(1 for r in rows if str(r.get("verdict", "")).startswith("FAIL"))
    stamp = created or _utc_now()
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="meta">{len(groups)} tests, {len(rows)} measurements, {n_fail} failed runtime checks; '
        f"written {_e(stamp)} (UTC). Times in milliseconds: medians of the samples after warm-up; the first "
        "call is kept apart.</p>",
    ]
    out.extend(f'<p class="note">{_e(n)}</p>' for n in all_notes)
    out.append("<h2>Machine</h2>")
    out.append(_machine_table(machine))
    out.append("<h2>Measurements</h2>")
    if not rows:
        out.append('<p class="note">No test recorded a measurement (jetmem.measure) in this session.</p>')
    else:
        out.append(_table(groups))
        out.append(
            '<p class="footnote">Ratios with an asterisk are the median over the <code>device</code> median of the '
            "same test and measurement, timed one after the other; ratios without one were measured side by side "
            "(interleaved) by <code>memmode_runtime(max_ratio=..., relative_to=...)</code>. Click a column to sort.</p>"
        )
        out.append("<h2>Charts</h2>")
        for g in groups:
            out.append(f'<section id="{g.anchor}" class="test-chart"><h3>{_e(g.name)}</h3>')
            out.append(_mpl_chart(g, trends) if use_mpl else _svg_chart(g, trends))
            out.append(f'<p class="caption">{_e(_caption(g, trends))}</p>')
            out.append("</section>")
    out.append(f"<script>{_JS}</script>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# -- writing -------------------------------------------------------------------------------------------
def json_path_for(path: str | os.PathLike[str]) -> Path:
    """The JSON twin's path: ``PATH`` with the suffix ``.json`` (``report.html`` -> ``report.json``).

    A ``PATH`` that already ends in ``.json`` gets ``.json`` appended, so the twin never replaces the page.
    """
    p = Path(path)
    return p.with_name(p.name + ".json") if p.suffix.lower() == ".json" else p.with_suffix(".json")


def write_report(
    path: str | os.PathLike[str],
    rows: Sequence[Mapping[str, Any]],
    *,
    machine: Mapping[str, Any] | None = None,
    trends: Trends | None = None,
    notes: Sequence[str] = (),
    title: str = "pytest-jetmem report",
    charts: str = "auto",
) -> tuple[Path, Path]:
    """Write the HTML page to ``path`` and its JSON twin next to it (:func:`json_path_for`); returns both paths."""
    html_path = Path(path)
    json_file = json_path_for(html_path)
    created = _utc_now()
    doc = report_document(rows, machine=machine, trends=trends, notes=notes, created=created)
    page = render_html(rows, machine=machine, trends=trends, notes=notes, title=title, charts=charts, created=created)
    html_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(json_file, json.dumps(doc, indent=1, allow_nan=False) + "\n")
    write_atomic(html_path, page)
    return html_path, json_file
