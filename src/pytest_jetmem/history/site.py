"""``pytest-jetmem history publish DIR``: a results store as a static site that opens from disk.

:func:`publish` writes, for one branch (None: every branch):

- ``index.html``: every change point, the newest unacknowledged first, each with its series' sparkline, its magnitude
  and 99% interval, its commit range and its cause (the code, or the machine fields that changed); then the
  acknowledged ones, greyed, with their reason; then the series without a change point; each series with how many
  of its sessions are left out of change points (outliers, uncommitted changes, 0 ms), where any is; links to every
  test page and to the fleet page;
- one page per test (the node id without the memory mode, :attr:`~.model.SeriesKey.test`), named by a slug of it
  and 8 hex digits of its hash: for each measurement key and device, a chart of each memory mode's series
  (:mod:`~pytest_jetmem.history.svg`: medians over the sessions in commit order, each session's spread, the
  machine-class boundaries, the change points; a session that does not count for change points, :meth:`Series.note
  <pytest_jetmem.history.analysis.Series.note>`, hollow, with its reason), the list of those sessions, then a table
  of the modes and a table of the change points;
- ``fleet.html`` (the fleet matrix, :func:`~pytest_jetmem.history.fleet.fleet_matrix`, as a table with
  ``id="fleet"``) and ``fleet.json`` (:meth:`~pytest_jetmem.history.fleet.FleetMatrix.to_json`).

Nothing is fetched: no script, no font, no stylesheet but the one inline in each page (commit links go to
``{repo_url}/commit/{sha}`` where ``repo_url`` is given). UTF-8 HTML5, in the frame and with the one escaping rule
of :mod:`pytest_jetmem.draw.page` (the report's too). The points come from
:meth:`~pytest_jetmem.history.store.Store.points` (no samples decoded).

Written atomically: the site goes to a new folder beside ``out_dir``, which then replaces ``out_dir`` (two renames);
a publish that fails leaves the old site as it was. ``out_dir`` must be absent, empty, or a site published before
(it holds :data:`MARKER`): a folder of other files is never replaced. GPU-free and pytest-free.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pytest_jetmem.cuda.mode_styles import mode_style
from pytest_jetmem.draw.page import Markup, esc, join, page
from pytest_jetmem.history.analysis import Change
from pytest_jetmem.history.context import utc_iso
from pytest_jetmem.history.fleet import FleetCell, FleetMatrix, fleet_matrix
from pytest_jetmem.history.forked import forked_map, workers_for
from pytest_jetmem.history.model import SeriesKey, SessionRow
from pytest_jetmem.history.sparkline import sparkline
from pytest_jetmem.history.store import Store
from pytest_jetmem.history.svg import Boundary, Chart, Line, Marker, Point, series_chart
from pytest_jetmem.history.thinning import thin_indices
from pytest_jetmem.history.timeline import History, Series
from pytest_jetmem.machine.fingerprint import FINGERPRINT_FIELDS, Machine
from pytest_jetmem.measure.advice_terms import times
from pytest_jetmem.measure.record import unit_of

__all__ = ["MARKER", "page_name", "publish"]

#: The file that says a folder is a site :func:`publish` wrote (and may replace).
MARKER = ".jetmem-site"
_SHORT_FIELDS = {"device_name": "device", "compute_capability": "sm", "driver_version": "driver",
                 "l4t_release": "L4T", "nvpmodel_mode": "power mode", "clocks_locked": "clocks locked"}
#: The site's own rules, after the frame's (:data:`~pytest_jetmem.draw.page.BASE_CSS`).
_CSS = """
body{margin:1.5rem auto;max-width:1180px;padding:0 1rem}table{margin:.5rem 0 1.5rem}
tr.acked td{color:#666;background:#f6f6f6}tr.acked svg{opacity:.55}
.slower{color:#b2182b;font-weight:600}.faster{color:#2166ac;font-weight:600}
svg.chart{display:block}nav{margin-bottom:1rem}nav a{margin-right:1rem}
.pick{font-weight:600}.note{color:#555;font-size:12.5px}ul.left-out{margin:.25rem 0 1rem;padding-left:1.25rem}
"""
_NOTHING = Markup("")
_NAV = Markup('<nav><a href="index.html">All series</a><a href="fleet.html">Fleet</a></nav>')


# -- the data ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Data:
    """What the pages show: the history (sessions in commit order, series) and its change points."""

    history: History
    changes: tuple[Change, ...]

    @functools.cached_property
    def _by_series(self) -> dict[tuple[SeriesKey, str], list[Change]]:
        out: dict[tuple[SeriesKey, str], list[Change]] = {}
        for c in self.changes:
            out.setdefault((c.series, c.device), []).append(c)
        return out

    @property
    def rows(self) -> tuple[SessionRow, ...]:
        return self.history.sessions

    def prepare(self) -> None:
        """Work out what every page reads of this value (its cached parts)."""
        _ = self._by_series, self.tips, self.place, self.classes, self.modes, self.history.commit_numbers

    @functools.cached_property
    def tips(self) -> tuple[str, ...]:
        """Each session's tooltip in a chart: its commit and start."""
        return tuple(f"{row.short_commit} {row.started[:16]}" for row in self.history.sessions)

    @property
    def tracks(self) -> tuple[Series, ...]:
        return self.history.series

    @property
    def place(self) -> Mapping[str, int]:
        return self.history.place

    @property
    def branch(self) -> str | None:
        return self.history.branch

    @property
    def modes(self) -> tuple[str, ...]:
        return self.history.modes

    @property
    def classes(self) -> tuple[str, ...]:
        return self.history.classes

    def changes_of(self, track: Series) -> list[Change]:
        return self._by_series.get((track.key, track.device), [])


# -- shared HTML ---------------------------------------------------------------------------------------------------


def page_name(test: str) -> str:
    """The file name of ``test``'s page: ``test-`` + a slug of it (at most 60 characters) + 8 hex digits of its
    SHA-1 + ``.html`` (two tests with one slug get two names)."""
    slug = re.sub(r"[^A-Za-z0-9_]+", "-", test).strip("-")[:60].strip("-") or "test"
    return f"test-{slug}-{hashlib.sha1(test.encode()).hexdigest()[:8]}.html"


def _anchor(key: str, device: str) -> str:
    """The id of a chart in its test page."""
    return "c-" + hashlib.sha1(f"{key}\n{device}".encode()).hexdigest()[:10]


def _page(title: str, body: Iterable[Markup]) -> str:
    """A page of the site in the frame (:func:`~pytest_jetmem.draw.page.page`): the navigation bar, ``body`` in
    ``<main>``, the footer."""
    foot = Markup(f'</main>\n<footer class="note">Published {esc(utc_iso())}.</footer>')
    return page(title, [_NAV, Markup("<main>"), *body, foot], generator="pytest-jetmem history publish", css=_CSS)


def _commit(row: SessionRow, repo_url: str | None) -> Markup:
    """A session's short commit, linked to the repository where known."""
    sha = row.context.commit
    if sha is None:
        return Markup("<code>unknown</code>")
    short = Markup(f"<code>{esc(row.short_commit)}</code>")
    if repo_url:
        return Markup(f'<a href="{esc(repo_url.rstrip("/"))}/commit/{esc(sha)}" title="{esc(sha)}">{esc(short)}</a>')
    return Markup(f'<span title="{esc(sha)}">{esc(short)}</span>')


def _range(change: Change, repo_url: str | None) -> Markup:
    return Markup(f"{esc(_commit(change.before, repo_url))}..{esc(_commit(change.after, repo_url))}")


def _direction(change: Change) -> Markup:
    """``▲ slower`` / ``▼ faster`` (shape and word, not colour alone)."""
    slower = change.point.ratio > 1.0
    return Markup(f'<span class="{"slower" if slower else "faster"}">{"▲ slower" if slower else "▼ faster"}</span>')


def _ack_text(change: Change) -> Markup:
    if change.ack is None:
        return Markup("unacknowledged")
    return Markup(f"acknowledged: {esc(change.ack.reason)} ({esc(change.ack.author)}, {esc(change.ack.created)})")


_ARROW = re.compile(r"\S+ (?:->|→) \S+")


def _nowrap(text: str) -> Markup:
    """``text`` as HTML with each ``a -> b`` (or ``a → b``) in a span that never breaks (``.nw``)."""
    out, end = [], 0
    for m in _ARROW.finditer(text):
        out += [esc(text[end:m.start()]), Markup(f'<span class="nw">{esc(m.group())}</span>')]
        end = m.end()
    return join([*out, esc(text[end:])])


_WHY = {"uncommitted changes": "with uncommitted changes", "0 ms": "at 0 ms"}


def _counts(notes: Iterable[str]) -> str:
    """``1 outlier, 2 with uncommitted changes`` from the notes of the sessions left out (``""``: none)."""
    tally = Counter(note.removesuffix(": left out") for note in notes if note)
    return ", ".join(f"{n} {_WHY.get(why, why)}" for why, n in sorted(tally.items()))


def _left_out_note(track: Series) -> str:
    """``2 of 60 session(s) left out of change points (1 outlier, 1 with uncommitted changes)``; ``""`` where none
    is."""
    n = len(track.uncounted())
    return (f"{n} of {len(track.notes)} session(s) left out of change points ({_counts(track.notes)})"
            if n else "")


def _table(caption: str, header: Sequence[str], rows: Iterable[Markup], attrs: Markup = _NOTHING, *,
           shown: bool = True) -> Markup:
    """A table of ``rows`` (each a ``<tr>``), with ``attrs`` in its tag, a caption (for screen readers alone unless
    ``shown``) and a header row."""
    head = join(Markup(f'<th scope="col">{esc(h)}</th>') for h in header)
    cap = Markup("<caption>") if shown else Markup('<caption class="sr">')
    body = join(rows, "\n")
    return Markup(f"<table{esc(attrs)}>{esc(cap)}{esc(caption)}</caption><thead><tr>{esc(head)}</tr></thead><tbody>\n"
                  f"{esc(body)}\n</tbody></table>")


# -- the index -----------------------------------------------------------------------------------------------------


def _spark(track: Series, data: _Data) -> Markup:
    at = {p: i for i, p in enumerate(track.place_array.tolist())}
    marks = [at[data.place[c.after.uid]] for c in data.changes_of(track) if data.place.get(c.after.uid) in at]
    left_out = _left_out_note(track)
    label = (f"{track.name}: {len(track.medians)} sessions, latest median {track.medians[-1]:.4g} ms, "
             f"{len(marks)} change point(s)" + (f", {left_out} (hollow rings)" if left_out else ""))
    return Markup(sparkline(track.median_array, marks, label=label, left_out=track.uncounted()))


def _series_cell(track: Series) -> Markup:
    """The series' link to its chart, and how many of its sessions are left out, where any is."""
    key = track.key
    href = f"{page_name(key.test)}#{_anchor(key.key, track.device)}"
    link = Markup(f'<a href="{esc(href)}"><code>{esc(key.nodeid)}</code></a> <code>{esc(key.key)}</code>')
    left_out = _left_out_note(track)
    note = Markup(f'<br><span class="note left-out">{esc(left_out)}</span>') if left_out else _NOTHING
    return Markup(f"<td>{esc(link)}{esc(note)}</td>")


def _tr(change: Change) -> Markup:
    """The row's opening tag: greyed (``acked``) where ``change`` is acknowledged."""
    return Markup("<tr>") if change.ack is None else Markup('<tr class="acked">')


def _change_row(change: Change, track: Series, spark: Markup, repo_url: str | None) -> Markup:
    return Markup(f"{esc(_tr(change))}{esc(_series_cell(track))}<td>{esc(change.device)}</td>"
                  f"<td>{esc(spark)}</td><td>{esc(_direction(change))} {esc(change.magnitude_text)}</td>"
                  f"<td>{esc(_range(change, repo_url))}</td><td>{esc(_nowrap(change.cause_text))}</td>"
                  f"<td>{esc(_ack_text(change))}</td></tr>")


def _quiet_row(track: Series, spark: Markup) -> Markup:
    return Markup(f"<tr>{esc(_series_cell(track))}<td>{esc(track.device)}</td><td>{esc(spark)}</td>"
                  f'<td class="num">{len(track.medians):d}</td><td class="num">{track.medians[-1]:.4g}</td></tr>')


def _section(heading: str, header: Sequence[str], rows: Sequence[Markup], table_id: str) -> Markup:
    """A heading and its table (there even when empty, so that its id always resolves), ``None.`` when empty."""
    table = _table(heading, header, rows, Markup(f' id="{esc(table_id)}"'), shown=False)
    empty = _NOTHING if rows else Markup("\n<p>None.</p>")
    return Markup(f'<h2 id="{esc(table_id)}-heading">{esc(heading)}</h2>\n{esc(table)}{esc(empty)}')


def _index(data: _Data, repo_url: str | None) -> str:
    """The index page: unacknowledged change points (newest first), acknowledged ones, series without any."""
    sparks = {(t.key, t.device): _spark(t, data) for t in data.tracks}
    tracks = {(t.key, t.device): t for t in data.tracks}
    newest = sorted(data.changes, key=lambda c: (-data.place[c.after.uid], c.series.name, c.device))
    rows = {acked: [_change_row(c, tracks[(c.series, c.device)], sparks[(c.series, c.device)], repo_url)
                    for c in newest if (c.ack is not None) == acked] for acked in (False, True)}
    with_changes = {(c.series, c.device) for c in data.changes}
    quiet = [_quiet_row(t, sparks[(t.key, t.device)]) for t in data.tracks if (t.key, t.device) not in with_changes]
    header = ["series", "device", "history", "change [99% interval]", "commits", "cause", "status"]
    branch = data.branch if data.branch is not None else "every branch"
    with_left_out = sum(1 for t in data.tracks if t.uncounted())
    left_out = Markup(f"{with_left_out:d} series have sessions left out of change points (outliers, uncommitted "
                      "changes, 0 ms: hollow rings on their charts). ") if with_left_out else _NOTHING
    body = [
        Markup(f"<h1>jetmem history: {esc(branch)}</h1>"),
        Markup(f"<p>{len(data.rows):d} session(s), {len(data.tracks):d} series, {len(data.changes):d} change "
               f"point(s): {len(rows[False]):d} unacknowledged, {len(rows[True]):d} acknowledged. {esc(left_out)}"
               '<a href="fleet.html">The fleet: the mode to pick per machine class</a>.</p>'),
        _section("Unacknowledged change points (newest first)", header, rows[False], "changes"),
        _section("Acknowledged change points", header, rows[True], "acked"),
        _section("Series without change points", ["series", "device", "history", "sessions", "latest median (ms)"],
                 quiet, "quiet-series"),
    ]
    return _page(f"jetmem history: {branch}", body)


# -- a test page ---------------------------------------------------------------------------------------------------


def _class_change(old: Machine, new: Machine) -> tuple[str, str]:
    """(short label, full detail) of a machine-class change: the fingerprint fields that differ."""
    diffs = [(f, getattr(old, f), getattr(new, f)) for f in FINGERPRINT_FIELDS if getattr(old, f) != getattr(new, f)]
    short = ", ".join(f"{_SHORT_FIELDS[f]} {a}→{b}" for f, a, b in diffs) or "new machine class"
    detail = (f"machine class {old.machine_class} -> {new.machine_class}: "
              + "; ".join(f"{f} {a!r} -> {b!r}" for f, a, b in diffs))
    return short, detail


def _boundaries(places: Sequence[int], data: _Data) -> list[Boundary]:
    """A boundary before each session (of ``places``) whose machine class is not the one before's."""
    out = []
    for x in range(1, len(places)):
        if data.classes[places[x - 1]] != data.classes[places[x]]:
            out.append(Boundary(x, *_class_change(data.rows[places[x - 1]].machine, data.rows[places[x]].machine)))
    return out


def _marker(change: Change, x: int) -> Marker:
    mode = change.series.mode or "-"
    label = f"{mode} {change.point.change_pct:+.1f}%" + (" (acknowledged)" if change.ack is not None else "")
    detail = (f"{mode}: {change.magnitude_text} between {change.before.short_commit} and {change.after.short_commit};"
              f" cause: {change.cause_text}")
    if change.ack is not None:
        detail += f"; acknowledged: {change.ack.reason} ({change.ack.author})"
    return Marker(mode, x, change.point.after_ms, label, detail, change.point.ratio > 1.0, change.ack is not None)


def _points(track: Series, x_of: dict[int, int], data: _Data, starts: Iterable[int]) -> tuple[Point, ...]:
    """A track's points at their places in a chart, each with its commit and start as its tooltip and why it does
    not count, where it does not; only those the chart draws (:func:`~.svg.thin_indices` of the counted ones, the
    places change points start at ``starts`` kept, and every one left out), made without a Python object per point
    of a long series."""
    uncounted = np.asarray(track.uncounted(), dtype=np.int64)
    counted = np.setdiff1d(np.arange(len(track)), uncounted) if uncounted.size else np.arange(len(track))
    if not counted.size:
        counted, uncounted = uncounted, uncounted[:0]
    at = {p: k for k, p in enumerate(track.place_array[counted].tolist())}
    chosen = np.union1d(counted[thin_indices(track.median_array[counted], [at[p] for p in starts if p in at])],
                        uncounted)
    places, medians, mads = (a[chosen].tolist() for a in (track.place_array, track.median_array, track.mad_array))
    notes, tips = track.notes, data.tips
    return tuple(Point(x_of[p], m, d, tips[p], notes[i]) for i, p, m, d in zip(chosen.tolist(), places, medians, mads,
                                                                               strict=True))


def _chart(test: str, key: str, device: str, tracks: Sequence[Series], data: _Data) -> tuple[Chart, list[Change]]:
    """The chart of one test, key and device (one line per mode) and its change points."""
    places = np.unique(np.concatenate([t.place_array for t in tracks])).tolist()
    x_of = {p: x for x, p in enumerate(places)}
    found = [c for t in tracks for c in data.changes_of(t)]  # the first session after a change is one of its track
    starts = {c.after.uid for c in found}
    unit = unit_of(tracks[0].key.scope)  # one key per chart: timings in ms, an energy series in mJ
    lines = tuple(Line(t.key.mode or "-", _points(t, x_of, data, [data.place[u] for u in starts]),
                       mode_style(t.key.mode, data.modes), unit) for t in tracks)
    markers = tuple(_marker(c, x_of[data.place[c.after.uid]]) for c in found)
    bounds = tuple(_boundaries(places, data))
    x_labels = tuple(data.rows[p].short_commit[:7] for p in places)
    chart = Chart(_anchor(key, device), f"{test} {key} on {device}", _desc(key, device, tracks, found, bounds),
                  x_labels, lines, bounds, markers, y_label=f"median ({unit}), spread: ± MAD")
    return chart, found


def _desc(key: str, device: str, tracks: Sequence[Series], found: Sequence[Change],
          bounds: Sequence[Boundary]) -> str:
    """The chart's description in words: per mode its sessions, latest median, change points and the sessions left
    out of change points (hollow rings); the class changes."""
    parts = [f"Median time of {key} on {device} per session, in commit order, one line per memory mode."]
    for t in tracks:
        n_changes = sum(1 for c in found if c.series == t.key)
        left_out = f", {len(t.uncounted())} left out of change points ({_counts(t.notes)}; hollow rings)" \
            if t.uncounted() else ""
        parts.append(f"{t.key.mode or '-'}: {len(t.medians)} session(s), latest median {t.medians[-1]:.4g} ms "
                     f"(MAD {t.mads[-1]:.3g}), {n_changes} change point(s){left_out}.")
    parts.extend(f"Machine class changes before session {b.x + 1}: {b.label}." for b in bounds)
    return " ".join(parts)


def _mode_rows(tracks: Sequence[Series], found: Sequence[Change]) -> list[Markup]:
    return [
        Markup(f"<tr><td>{esc(t.key.mode or '-')}</td><td>{esc(t.key.nodeid)}</td>"
               f'<td class="num">{len(t.medians):d}</td><td>{esc(_counts(t.notes) or "none")}</td>'
               f'<td class="num">{t.medians[0]:.4g}</td><td class="num">{t.medians[-1]:.4g} ± {t.mads[-1]:.3g}</td>'
               f'<td class="num">{sum(1 for c in found if c.series == t.key):d}</td></tr>')
        for t in tracks
    ]


#: The most sessions left out that a chart lists by name; the rest are counted.
LIST_LEFT_OUT = 25


def _left_out_list(tracks: Sequence[Series], data: _Data, repo_url: str | None) -> Markup:
    """The sessions of a chart left out of change points (its hollow rings): mode, commit, start, median and why;
    ``""`` where none is."""
    items = sorted((p, t.key.mode or "-", m, note) for t in tracks
                   for p, m, note in zip(t.places, t.medians, t.notes, strict=True) if note)
    if not items:
        return _NOTHING
    lines = [Markup(f"<li>{esc(mode)}, {esc(_commit(data.rows[p], repo_url))} {esc(data.rows[p].started[:16])}: "
                    f"{m:.4g} ms: {esc(note)}</li>") for p, mode, m, note in items[:LIST_LEFT_OUT]]
    if len(items) > LIST_LEFT_OUT:
        lines.append(Markup(f"<li>and {len(items) - LIST_LEFT_OUT:d} more</li>"))
    return Markup(f'<p class="note">Sessions left out of change points (hollow rings), {len(items):d}:</p>\n'
                  f'<ul class="left-out note">{esc(join(lines))}</ul>')


def _change_rows(found: Sequence[Change], repo_url: str | None) -> list[Markup]:
    return [
        Markup(f"{esc(_tr(c))}<td>{esc(c.series.mode or '-')}</td><td>{esc(_range(c, repo_url))}</td>"
               f"<td>{esc(_direction(c))} {esc(c.magnitude_text)}</td>"
               f'<td class="num"><span class="nw">{c.point.before_ms:.4g} → {c.point.after_ms:.4g}</span></td>'
               f"<td>{esc(_nowrap(c.cause_text))}</td><td>{esc(_ack_text(c))}</td></tr>")
        for c in found
    ]


def _test_page(test: str, tracks: Sequence[Series], data: _Data, repo_url: str | None) -> str:
    """One test's page: a section per measurement key and device with its chart and tables."""
    groups: dict[tuple[str, str], list[Series]] = {}
    for t in tracks:
        groups.setdefault((t.key.key, t.device), []).append(t)
    body = [Markup(f"<h1><code>{esc(test)}</code></h1>")]
    for (key, device), group in sorted(groups.items()):
        group.sort(key=lambda t: data.modes.index(t.key.mode))
        chart, found = _chart(test, key, device, group, data)
        found.sort(key=lambda c: (data.place[c.after.uid], c.series.mode))
        body.append(Markup(f"<section><h2><code>{esc(key)}</code> on {esc(device)}</h2>"))
        body.append(Markup(series_chart(chart)))
        body.append(_left_out_list(group, data, repo_url))
        body.append(_table("Memory modes", ["mode", "node id", "sessions", "left out of change points",
                                            "first median (ms)", "latest median ± MAD (ms)", "change points"],
                           _mode_rows(group, found)))
        body.append(_table("Change points", ["mode", "commits", "change [99% interval]", "median before → after (ms)",
                                             "cause", "status"], _change_rows(found, repo_url),
                           Markup(' class="changes"')) if found else Markup("<p>No change points.</p>"))
        body.append(Markup("</section>"))
    return _page(f"{test}: jetmem history", body)


# -- the fleet -----------------------------------------------------------------------------------------------------


def _fleet_cell(cell: FleetCell | None) -> Markup:
    """A fleet cell: its text once (``managed (device 1.32x [...])``, the pick in bold; or ``no clear winner
    (tied: ...)``), then each mode's time against the fastest."""
    if cell is None:
        return Markup('<td class="note">not measured in two or more modes</td>')
    text = cell.text
    if cell.pick and text.startswith(cell.pick):
        said = Markup(f'<span class="pick">{esc(cell.pick)}</span>{esc(text[len(cell.pick):])}')
    else:
        said = esc(text)
    ratios = ", ".join(f"{s.mode} {times(s.ratio)}" + (f" [{times(s.ci[0])}, {times(s.ci[1])}]" if s.ci else "")
                       for s in cell.advice.standings)
    return Markup(f'<td title="{esc(cell.advice.summary())}">{esc(said)}<br><span class="note">{esc(ratios)}</span>'
                  "</td>")


def _fleet_table(matrix: FleetMatrix, pages: dict[str, str]) -> Markup:
    """The fleet matrix as a table (``id="fleet"``): one row per test and key, one column per machine class."""
    if not matrix.rows:
        return Markup('<table id="fleet"><caption>No test was measured in two or more memory modes on any machine '
                      "class.</caption><tbody></tbody></table>")
    head = join(Markup(f'<th scope="col">{esc(c.label)}<br><span class="note">class {esc(c.machine_class)}, '
                       f"{c.sessions:d} session(s)</span></th>") for c in matrix.classes)
    rows = []
    for test, key in matrix.rows:
        name = Markup(f"<code>{esc(test)}</code>")
        link = Markup(f'<a href="{esc(pages[test])}">{esc(name)}</a>') if test in pages else name
        cells = join(_fleet_cell(matrix.cells.get((test, key, c.machine_class))) for c in matrix.classes)
        rows.append(Markup(f'<tr><th scope="row">{esc(link)}</th><td><code>{esc(key)}</code></td>{esc(cells)}</tr>'))
    body = join(rows, "\n")
    return Markup(f'<table id="fleet"><caption>Advice per test and machine class</caption><thead><tr>'
                  f'<th scope="col">test</th><th scope="col">key</th>{esc(head)}</tr></thead><tbody>\n'
                  f"{esc(body)}\n</tbody></table>")


def _fleet(matrix: FleetMatrix, pages: dict[str, str], data: _Data) -> str:
    """The fleet page: the fleet matrix (:func:`_fleet_table`) under what it says."""
    branch = data.branch if data.branch is not None else "every branch"
    body = [
        Markup(f"<h1>The fleet: the memory mode to pick per machine class ({esc(branch)})</h1>"),
        Markup("<p>Each cell is the plugin's advice from the newest session of that machine class that measured the "
               "test in two or more memory modes: the pick, or no clear winner, and each mode's time against the "
               'fastest [99% interval]. <a href="fleet.json">fleet.json</a> holds the same, with the full advice.</p>'),
        _fleet_table(matrix, pages),
    ]
    return _page(f"jetmem fleet: {branch}", body)


# -- writing -------------------------------------------------------------------------------------------------------


def _check_target(out_dir: Path) -> None:
    """ValueError where ``out_dir`` may not be replaced: a file, or a folder of other things than a site."""
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise ValueError(f"publish {out_dir}: not a folder: expected a new, empty or published site folder")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / MARKER).is_file():
        raise ValueError(f"publish {out_dir}: a folder of other files (no {MARKER} in it): expected a new, empty or "
                         "published site folder, which publish replaces whole")


def _swap(new: Path, out_dir: Path) -> None:
    """Put the folder ``new`` where ``out_dir`` is: the old one renamed aside, ``new`` renamed in, the old removed."""
    if not out_dir.exists():
        os.replace(new, out_dir)
        return
    old = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.old-"))
    os.replace(out_dir, old / "site")
    try:
        os.replace(new, out_dir)
    except BaseException:
        os.replace(old / "site", out_dir)
        raise
    finally:
        shutil.rmtree(old, ignore_errors=True)


#: Histories of at least this many points have their pages made in one process per CPU (:mod:`~.forked`).
PARALLEL_POINTS = 200_000


def _render(job: tuple[str, Callable[[], str]]) -> str:
    return job[1]()


def _write(folder: Path, pages: Sequence[tuple[str, Callable[[], str]]],
           progress: Callable[[int, int], None] | None, workers: int) -> list[str]:
    """Make the pages (in ``workers`` forked processes) and write each here as it comes, in order."""

    def written(done: int, text: str) -> None:
        (folder / pages[done - 1][0]).write_text(text, encoding="utf-8")
        if progress is not None:
            progress(done, len(pages))

    forked_map(_render, pages, workers, done=written)
    return [name for name, _ in pages]


def publish(store: Store, history: History, found: Sequence[Change], out_dir: Path, *,
            repo_url: str | None = None, progress: Callable[[int, int], None] | None = None) -> list[Path]:
    """Write the site of ``history`` and its change points ``found`` (:func:`~.analysis.analysed`; ``store``, of
    which the history was read, gives the fleet matrix its records) into ``out_dir``, replacing it whole; the files
    written (``index.html`` first, then the test pages, ``fleet.html`` and ``fleet.json``). ``progress(done,
    total)`` is called after each file. ValueError where ``out_dir`` is not a new, empty or published site folder;
    on any error the old site stays."""
    out_dir = Path(out_dir)
    _check_target(out_dir)
    data = _Data(history, tuple(found))
    matrix = fleet_matrix(store, history)
    by_test: dict[str, list[Series]] = {}
    for t in data.tracks:
        by_test.setdefault(t.key.test, []).append(t)
    pages = {test: page_name(test) for test in sorted(by_test)}
    jobs: list[tuple[str, Callable[[], str]]] = [("index.html", lambda: _index(data, repo_url))]
    jobs += [(pages[test], functools.partial(_test_page, test, by_test[test], data, repo_url)) for test in pages]
    jobs.append(("fleet.html", lambda: _fleet(matrix, pages, data)))
    jobs.append(("fleet.json", lambda: json.dumps(matrix.to_json(), indent=1, ensure_ascii=False) + "\n"))
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f".{out_dir.name}.new-"))
    try:
        (tmp / MARKER).write_text("a site written by pytest-jetmem history publish; it replaces this folder whole\n",
                                  encoding="utf-8")
        data.prepare()  # made once here, not in each process
        names = _write(tmp, jobs, progress, workers_for(sum(len(t) for t in data.tracks), PARALLEL_POINTS))
        tmp.chmod(0o755)
        _swap(tmp, out_dir)
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(tmp)
        raise
    return [out_dir / name for name in names]
