"""A results store's timings in the formats other tools read: Bencher, github-action-benchmark, Apache Otava.

:func:`export` takes an open :class:`~pytest_jetmem.history.store.Store` and the
:class:`~pytest_jetmem.history.timeline.History` read of it, and returns the text; it writes nothing. The sessions
are the history's, in commit order; "the newest session" is the last of them. A series is named
``nodeid label:scope`` (:attr:`~pytest_jetmem.history.model.SeriesKey.name`; the memory mode is in the node id);
a figure that is not finite is left out (JSON has no NaN). A store with no session gives an empty document
(``{}``, ``[]``, the CSV header alone).

``bmf``: `Bencher Metric Format <https://bencher.dev/docs/reference/bencher-metric-format/>`_ JSON of the newest
session: one report, as ``bencher run`` takes one per run::

    {"t.py::test_conv[device] conv:kernel": {"latency": {"value": 213000.0, "lower_value": 207600.0,
                                                         "upper_value": 220000.0}}}

``latency`` is Bencher's built-in measure, in nanoseconds: the median, with the 5th and 95th percentiles as its
bounds. After each CI run: ``bencher run --adapter json --file results.json --hash <commit> --testbed <device>``
(Bencher keeps the history; name the testbed after the device, as the store's series are per device).

``github-action-benchmark``: the ``customSmallerIsBetter`` JSON of the newest session (that action keeps the
history itself, in its data file): a list of ``{"name", "unit": "ms", "value": median, "range": "± MAD",
"extra": "commit ...\\ndevice ...\\nn=..."}``, sorted by name. Use it with ``tool: 'customSmallerIsBetter'``.

``otava``: CSV for `Apache Otava <https://otava.apache.org/>`_ (formerly Hunter), one row per session in commit
order: ``time`` (the commit's time, else the session's start; ISO 8601, UTC), ``commit``, ``branch``, ``device``,
``machine_class``, then one column per series (sorted by name), its median in ms, empty where that session did not
measure it. Quoted by :mod:`csv` (Otava's default quote character, ``"``). In Otava's configuration:
``type: csv``, ``time_column: time``, ``attributes: [commit, branch, device, machine_class]``, and under
``metrics`` the columns to analyse with ``direction: -1`` (smaller is better). Otava reads a metric cell as a
number, so list only series every exported session measured; Otava refuses a file of several branches unless
``--branch`` is given; and it puts every row of a column in one series, so export a store of one device.

GPU-free and pytest-free.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Iterable

from pytest_jetmem.history.model import SeriesKey, SessionRow
from pytest_jetmem.history.store import Store
from pytest_jetmem.history.timeline import History
from pytest_jetmem.measure.record import MeasurementRecord, unit_of

__all__ = ["FORMATS", "export", "to_bmf", "to_github_action_benchmark", "to_otava"]

#: The formats :func:`export` writes.
FORMATS = ("bmf", "github-action-benchmark", "otava")
#: Nanoseconds in a millisecond (Bencher's ``latency`` is in ns, the store's figures in ms).
NS_PER_MS = 1e6
#: The columns of an Otava CSV before the series.
OTAVA_ATTRIBUTES = ("time", "commit", "branch", "device", "machine_class")


def _finite(value: float) -> bool:
    return math.isfinite(value)


def _by_name(records: Iterable[MeasurementRecord]) -> dict[str, MeasurementRecord]:
    """The records by series name, sorted by name."""
    named = {SeriesKey.of(r).name: r for r in records}
    return dict(sorted(named.items()))


def _newest(store: Store, history: History) -> tuple[SessionRow, dict[str, MeasurementRecord]] | None:
    """The history's newest session (in commit order) with its records by name; None where it has none."""
    if not history.sessions:
        return None
    return history.sessions[-1], _by_name(store.records(history.sessions[-1].id))


def _json(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _bmf_metric(record: MeasurementRecord) -> dict[str, float]:
    """One ``latency`` metric: the median in ns, the 5th/95th percentiles as bounds where finite."""
    stats = record.statistics
    metric = {"value": stats.median * NS_PER_MS}
    if _finite(stats.p5):
        metric["lower_value"] = stats.p5 * NS_PER_MS
    if _finite(stats.p95):
        metric["upper_value"] = stats.p95 * NS_PER_MS
    return metric


def to_bmf(store: Store, history: History) -> str:
    """The newest session as one Bencher Metric Format JSON object (see the module's docstring)."""
    newest = _newest(store, history)
    if newest is None:
        return _json({})
    _, records = newest
    return _json({name: {"latency": _bmf_metric(r)} for name, r in records.items() if _finite(r.statistics.median)})


def _number(value: float) -> str:
    """A figure as a short label shows it (4 significant digits)."""
    return f"{value:.4g}"


def _gab_entry(name: str, record: MeasurementRecord, row: SessionRow) -> dict[str, object]:
    stats = record.statistics
    entry: dict[str, object] = {"name": name, "unit": unit_of(record.identity.scope), "value": stats.median}
    if _finite(stats.mad):
        entry["range"] = f"± {_number(stats.mad)}"
    entry["extra"] = f"commit {row.short_commit}\ndevice {row.machine.device}\nn={stats.n}"
    return entry


def to_github_action_benchmark(store: Store, history: History) -> str:
    """The newest session as github-action-benchmark's ``customSmallerIsBetter`` JSON list."""
    newest = _newest(store, history)
    if newest is None:
        return _json([])
    row, records = newest
    return _json([_gab_entry(name, r, row) for name, r in records.items() if _finite(r.statistics.median)])


def _cell(median: float | None) -> str:
    """A median in ms as Otava reads it (every digit kept); empty where not measured or not finite."""
    if median is None or not _finite(median):
        return ""
    return repr(median)


def to_otava(store: Store, history: History) -> str:
    """Every session of the history as an Apache Otava CSV, one row per session in commit order (the medians of
    the history's points: no record read)."""
    medians: list[dict[str, float]] = [{} for _ in history.sessions]
    for one in history.series:
        for place, median in zip(one.places, one.medians, strict=True):
            medians[place][one.key.name] = median
    names = sorted({name for row in medians for name in row})
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*OTAVA_ATTRIBUTES, *names])
    for row, measured in zip(history.sessions, medians, strict=True):
        ctx = row.context
        attributes = [ctx.commit_time or row.started, ctx.commit or "", ctx.branch or "", row.machine.device,
                      row.machine.machine_class]
        writer.writerow([*attributes, *(_cell(measured.get(name)) for name in names)])
    return out.getvalue()


_WRITERS: dict[str, Callable[[Store, History], str]] = {
    "bmf": to_bmf,
    "github-action-benchmark": to_github_action_benchmark,
    "otava": to_otava,
}


def export(store: Store, history: History, fmt: str) -> str:
    """The sessions of ``history`` (records read from ``store``) as format ``fmt`` (one of :data:`FORMATS`) reads
    them; ValueError naming ``fmt`` and the formats for any other."""
    writer = _WRITERS.get(fmt)
    if writer is None:
        raise ValueError(f"export format {fmt!r}: expected one of {', '.join(FORMATS)}")
    return writer(store, history)
