"""The report page: the measurement rows of a session in, one self-contained HTML file (and a JSON twin) out.

GPU-free and pytest-free: :mod:`pytest_jetmem.plugin.report` gathers the rows the plugin publishes on the test
reports (one :class:`~pytest_jetmem.measure.record.MeasurementRecord` per test, mode and measurement) and calls
:func:`write_report` at the end of the session.

The page holds everything inline (CSS, a few lines of JS to sort the table, the charts as inline SVG or as
base64 PNG) and loads nothing from the network: it opens from a CI artifact, an e-mail or a file share. Its frame
and its escaping rule are :mod:`pytest_jetmem.draw.page`'s, as the history site's are.

- One table of every row: test, mode, measurement, median, MAD, p5..p95, n, the ratio to the reference mode,
  the first call, the change against the compared baseline and the verdict.
- One chart per test (:mod:`pytest_jetmem.report.charts`; the rows grouped per test by
  :mod:`pytest_jetmem.report.rows`): from matplotlib when it is installed (the ``report`` extra), as PNG;
  otherwise plain SVG, and the page says so.

The JSON twin (:func:`pytest_jetmem.report.rows.report_document`) holds the rows exactly as the plugin made
them, the trends and the machine, for tools.
"""

from __future__ import annotations

import errno
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_jetmem.atomic import write_atomic
from pytest_jetmem.draw.page import Markup, esc, join, mode_swatch, page
from pytest_jetmem.measure.advice import Advice, RuleVerdict, SessionAdvice, advice_header, advice_lines
from pytest_jetmem.measure.record import BaselineComparison, MeasurementRecord
from pytest_jetmem.report.charts import NO_MATPLOTLIB_NOTE, chart_backend, draw_chart, format_ms
from pytest_jetmem.report.rows import (
    REFERENCE_MODE,
    Group,
    Trends,
    finite,
    group_rows,
    has_trend,
    report_document,
    utc_now,
)

__all__ = ["json_path_for", "render_html", "write_report"]


# -- table cells ---------------------------------------------------------------------------------------
def _ratio_cell(row: MeasurementRecord, group: Group) -> tuple[str, float | None, str]:
    """(text, sort value, title) of the ratio to the reference mode.

    The side-by-side ratio the runtime plugin measured (``memmode_runtime(max_ratio=..., relative_to=...)``)
    where there is one; otherwise the ratio of this row's median to the ``device`` median of the same test
    and measurement, measured separately (marked with an asterisk).
    """
    side = row.judgement.ratio
    if side is not None and finite(side.ratio):
        ci = side.ci
        ci_text = f" (99% CI {ci[0]:.3f}..{ci[1]:.3f})" if all(map(finite, ci)) else ""
        return (
            f"{side.ratio:.2f}x {side.relative_to}",
            side.ratio,
            f"measured side by side, interleaved{ci_text}",
        )
    ref = group.row(row.key, REFERENCE_MODE)
    if ref is None or not finite(ref.median) or not ref.median > 0 or not finite(row.median):
        return "", None, ""
    ratio = row.median / ref.median
    return f"{ratio:.2f}x {REFERENCE_MODE}*", ratio, "ratio of medians measured one after the other"


def _baseline_cell(row: MeasurementRecord) -> tuple[str, float | None]:
    cmp = row.judgement.baseline
    if isinstance(cmp, BaselineComparison):
        return cmp.text, cmp.change_pct if finite(cmp.change_pct) else None
    return (cmp.text if cmp is not None else ""), None


def _verdict_class(verdict: str) -> str:
    if verdict.startswith("FAIL"):
        return "fail"
    if verdict == "ok":
        return "ok"
    return "info"


# -- the page ------------------------------------------------------------------------------------------
#: The report's own rules, after the frame's (:data:`~pytest_jetmem.draw.page.BASE_CSS`).
_CSS = """
body{margin:24px}h1{margin:0 0 4px}h3{word-break:break-all}
.meta{color:#555;margin:0 0 12px}.note{background:#fff8e1;border-left:4px solid #f0b400;padding:6px 10px;margin:8px 0}
table{margin:6px 0;font-size:13px}th{cursor:pointer;user-select:none;white-space:nowrap}
td.num{white-space:nowrap}td.test{white-space:nowrap}.wide{overflow-x:auto}
.caption{color:#555;font-size:12px;margin:2px 0 0}tr:nth-child(even) td{background:#fafbfc}
.ok{color:#17692b;font-weight:600}.worse{color:#b35900;font-weight:600}.better{color:#17692b}.fail{color:#b00020;font-weight:700}.info{color:#555}
.chart{border:1px solid #eee;background:#fff}
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


def _sort_value(value: float | None) -> str:
    """A cell's ``data-v``: ``repr`` of a finite number, else ``""``."""
    return repr(value) if value is not None and math.isfinite(value) else ""


def _num_td(text: str, value: float | None, extra_class: str = "") -> Markup:
    cls = f"num {extra_class}" if extra_class else "num"
    return Markup(f'<td class="{esc(cls)}" data-v="{esc(_sort_value(value))}">{esc(text)}</td>')


def _baseline_class(row: MeasurementRecord) -> str:
    cmp = row.judgement.baseline
    verdict = cmp.verdict.value if isinstance(cmp, BaselineComparison) else ""
    return {"regression": "worse", "improvement": "better"}.get(verdict, "")


def _finite_or_none(x: float | None) -> float | None:
    """``x`` where it is a finite number (a cell's sort value), else None."""
    return x if finite(x) else None


def _figure_cells(r: MeasurementRecord) -> list[Markup]:
    """The median, MAD, p5..p95 and n cells of a row."""
    stats = r.statistics
    spread = f"{format_ms(stats.p5)}..{format_ms(stats.p95)}" if finite(stats.p5) else ""
    return [
        _num_td(format_ms(stats.median), _finite_or_none(stats.median)),
        _num_td(format_ms(stats.mad, 2), _finite_or_none(stats.mad)),
        _num_td(spread, _finite_or_none(stats.p5)),
        _num_td(str(stats.n), stats.n),
    ]


def _ratio_td(r: MeasurementRecord, g: Group) -> Markup:
    """The cell of the ratio to the reference mode (see :func:`_ratio_cell`)."""
    text, value, title = _ratio_cell(r, g)
    sort = "" if value is None else repr(value)
    return Markup(f'<td class="num" data-v="{esc(sort)}" title="{esc(title)}">{esc(text)}</td>')


def _counters_td(r: MeasurementRecord) -> Markup:
    """The unified-memory counters' cell (empty where the row was not counted)."""
    return Markup(f"<td>{esc(r.counters.summary() if r.counters is not None else '')}</td>")


def _board(r: MeasurementRecord) -> str:
    """The board's state while ``r`` was measured (clocks, temperature, power limit, power mode, throttling)."""
    clocks = r.conditions.clocks
    return f"board: {clocks.describe()}" if clocks is not None else "board: not known"


def _energy_td(r: MeasurementRecord) -> Markup:
    """The energy-per-call cell (empty where the row has none), its full account in the tooltip."""
    e = r.energy
    if e is None:
        return Markup("<td></td>")
    compared = r.judgement.energy_baseline
    text = e.short() + (f"; vs baseline {compared.text}" if compared is not None else "")
    return Markup(f'<td class="num" data-v="{esc(repr(e.joules))}" title="{esc(e.describe())}">{esc(text)}</td>')


def _table_row(r: MeasurementRecord, g: Group, counted: bool, energy: bool = False) -> Markup:
    """One ``<tr>`` of the table: the row ``r`` of test ``g``; ``counted``: with the counters' column; ``energy``:
    with the energy column."""
    base_text, base_v = _baseline_cell(r)
    verdict = r.verdict.value
    first = r.statistics.first_call_ms
    return join([
        Markup(f'<tr><td class="test" title="{esc(r.nodeid)}"><a href="#{esc(g.anchor)}">'
               f"{esc(_item_name(r.nodeid))}</a></td>"
               f'<td class="nw" title="{esc(_board(r))}">{esc(mode_swatch(r.mode, g.modes))}{esc(r.mode)}</td>'
               f'<td class="nw">{esc(r.key)}</td>'),
        *_figure_cells(r),
        _ratio_td(r, g),
        _num_td(format_ms(first), _finite_or_none(first)),
        _num_td(base_text, base_v, _baseline_class(r)),
        Markup(f'<td class="{esc(_verdict_class(verdict))}">{esc(verdict)}</td>'),
        *((_counters_td(r),) if counted else ()),
        *((_energy_td(r),) if energy else ()),
        Markup("</tr>"),
    ])


def _table(groups: Sequence[Group]) -> Markup:
    counted = any(r.counters is not None for g in groups for r in g.rows)  # no column where nothing was counted
    energy = any(r.energy is not None for g in groups for r in g.rows)  # nor where no energy was measured
    extra = (*(("unified memory",) if counted else ()), *(("energy / call",) if energy else ()))
    head = join(Markup(f"<th>{esc(c)}</th>") for c in (*_COLUMNS, *extra))
    body = join((_table_row(r, g, counted, energy) for g in groups for r in g.rows), "\n")
    return Markup(f'<div class="wide"><table class="sortable" id="rows"><thead><tr>{esc(head)}</tr></thead><tbody>\n'
                  f"{esc(body)}\n</tbody></table></div>")


def _caption(group: Group, trends: Trends) -> str:
    text = "Bars: median per memory mode; whiskers: p5..p95 of the samples."
    if any(has_trend(group, k, trends) for k in group.keys):
        text += " Lines: the median in each saved baseline that holds this test (oldest first) and in this run."
    return text


def _machine_table(machine: Mapping[str, object] | None) -> Markup:
    if not machine:
        return Markup('<p class="meta">machine: not known (no GPU was opened)</p>')
    cells = join(
        Markup(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>") for k, v in machine.items() if v is not None and v != ""
    )
    return Markup(f'<table class="machine"><tbody>{esc(cells)}</tbody></table>')


def _advice_paragraph(line: str, verdict_class: str) -> Markup:
    """One line of an advice block as a paragraph; the note's verdict in its class (ok, worse or info)."""
    if line.startswith("the note") and verdict_class:
        return Markup(f'<p class="{esc(verdict_class)}">{esc(line)}</p>')
    return Markup(f"<p>{esc(line)}</p>")


def _advice_block(a: Advice) -> Markup:
    """One test's advice: the pick or "no clear winner", the other modes, the reasons, the note's verdict."""
    lines = advice_lines(a, indent="", rule_text=False)
    head, rest = lines[0], lines[1:]
    items = [ln[4:] for ln in rest if ln.startswith("  - ")]
    others = [ln for ln in rest if not ln.startswith("  - ") and ln != "why:"]
    verdict_class = {RuleVerdict.AGREES: "ok", RuleVerdict.DISAGREES: "worse"}.get(a.rule.verdict, "info")
    out = [
        Markup(f'<section class="advice"><h3>{esc(a.test)} <span class="info">{esc(a.key)}</span></h3>'),
        Markup(f'<p class="{"ok" if a.pick else "info"}">{esc(head)}</p>'),
        *(_advice_paragraph(line, verdict_class) for line in others),
    ]
    if items:
        out.append(Markup(f"<ul>{esc(join(Markup(f'<li>{esc(i)}</li>') for i in items))}</ul>"))
    out.append(Markup("</section>"))
    return join(out, "\n")


def _advice_section(advice: SessionAdvice) -> list[Markup]:
    """The page's advice: the device and the note's rule once, then one block per test and measurement."""
    out = [Markup("<h2>Advice</h2>")]
    for line in advice_header(advice):  # the note's address as text: the page holds no URL a browser would follow
        out.append(Markup(f'<p class="meta">{esc(line.replace("https://", ""))}</p>'))
    out.extend(_advice_block(a) for a in advice.advice)
    return out


_FOOTNOTE = Markup(
    '<p class="footnote">Ratios with an asterisk are the median over the <code>device</code> median of the '
    "same test and measurement, timed one after the other; ratios without one were measured side by side "
    "(interleaved) by <code>memmode_runtime(max_ratio=..., relative_to=...)</code>. Click a column to sort.</p>"
)


def _page_top(title: str, groups: Sequence[Group], rows: Sequence[MeasurementRecord], stamp: str) -> list[Markup]:
    """The page up to its notes: the title and the counts."""
    n_fail = sum(1 for r in rows if r.verdict.failed)
    return [
        Markup(f"<h1>{esc(title)}</h1>"),
        Markup(f'<p class="meta">{len(groups):d} tests, {len(rows):d} measurements, {n_fail:d} failed runtime checks; '
               f"written {esc(stamp)} (UTC). Times in milliseconds: medians of the samples after warm-up; the first "
               "call is kept apart.</p>"),
    ]


def _chart_section(group: Group, trends: Trends, backend: str) -> list[Markup]:
    """One test's chart, under its name, with its caption."""
    return [
        Markup(f'<section id="{esc(group.anchor)}" class="test-chart"><h3>{esc(group.name)}</h3>'),
        Markup(draw_chart(group, trends, backend)),
        Markup(f'<p class="caption">{esc(_caption(group, trends))}</p>'),
        Markup("</section>"),
    ]


def _measurements(groups: Sequence[Group], trends: Trends, backend: str, advice: SessionAdvice | None) -> list[Markup]:
    """The table of every row, its footnote, the advice (where there is some) and the charts."""
    out = [_table(groups), _FOOTNOTE]
    if advice is not None and advice.advice:
        out.extend(_advice_section(advice))
    out.append(Markup("<h2>Charts</h2>"))
    for g in groups:
        out.extend(_chart_section(g, trends, backend))
    return out


def render_html(
    rows: Sequence[MeasurementRecord],
    *,
    machine: Mapping[str, object] | None = None,
    trends: Trends | None = None,
    notes: Sequence[str] = (),
    title: str = "pytest-jetmem report",
    charts: str = "auto",
    created: str | None = None,
    advice: SessionAdvice | None = None,
) -> str:
    """The report page (in the frame of :func:`pytest_jetmem.draw.page.page`). ``charts``: ``"auto"`` (matplotlib
    when installed, else SVG), ``"matplotlib"``, ``"svg"``; ``advice``: the "Advice" section (which mode to pick for
    each test measured in two or more modes), if any."""
    backend = chart_backend(charts)
    trends = trends or Trends()
    groups = group_rows(rows)
    all_notes = [*notes, *trends.notes]
    if backend == "svg" and groups:
        all_notes.insert(0, NO_MATPLOTLIB_NOTE)
    out = _page_top(title, groups, rows, created or utc_now())
    out.extend(Markup(f'<p class="note">{esc(n)}</p>') for n in all_notes)
    out += [Markup("<h2>Machine</h2>"), _machine_table(machine), Markup("<h2>Measurements</h2>")]
    if rows:
        out.extend(_measurements(groups, trends, backend, advice))
    else:
        out.append(Markup('<p class="note">No test recorded a measurement (jetmem.measure) in this session.</p>'))
    return page(title, out, generator="pytest-jetmem --jetmem-report", css=_CSS, script=_JS)


# -- writing -------------------------------------------------------------------------------------------
def json_path_for(path: str | os.PathLike[str]) -> Path:
    """The JSON twin's path: ``PATH`` with the suffix ``.json`` (``report.html`` -> ``report.json``).

    A ``PATH`` that already ends in ``.json`` gets ``.json`` appended, so the twin never replaces the page.
    """
    p = Path(path)
    return p.with_name(p.name + ".json") if p.suffix.lower() == ".json" else p.with_suffix(".json")


def write_report(
    path: str | os.PathLike[str],
    rows: Sequence[MeasurementRecord],
    *,
    machine: Mapping[str, object] | None = None,
    trends: Trends | None = None,
    notes: Sequence[str] = (),
    title: str = "pytest-jetmem report",
    charts: str = "auto",
    advice: SessionAdvice | None = None,
) -> tuple[Path, Path]:
    """Write the HTML page to ``path`` and its JSON twin next to it (:func:`json_path_for`); returns both paths.
    ``advice``: the page's "Advice" section and the twin's ``advice`` key (null without it)."""
    html_path = Path(path)
    json_file = json_path_for(html_path)
    created = utc_now()
    doc = report_document(rows, machine=machine, trends=trends, notes=notes, created=created)
    doc["advice"] = advice.to_json() if advice is not None else None
    page = render_html(
        rows, machine=machine, trends=trends, notes=notes, title=title, charts=charts, created=created, advice=advice
    )
    for target in (html_path, json_file):  # neither is written where one of them cannot be: no stray twin
        if target.is_dir():
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(target))
    html_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(html_path, page)
    write_atomic(json_file, json.dumps(doc, indent=1, allow_nan=False) + "\n")
    return html_path, json_file
