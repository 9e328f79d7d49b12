"""The data side of the report: the session's measurement rows grouped per test, trends across saved baselines,
and the JSON twin's document. GPU-free, pytest-free, and free of markup.

A row is one :class:`~pytest_jetmem.measure.record.MeasurementRecord` per test, mode and measurement, as the
plugin publishes them on the test reports. A test is its node id with the memory mode taken out of the parameter
id (:func:`group_name`), so ``test_conv[15-device]`` and ``test_conv[15-zero_copy]`` are one :class:`Group`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from pytest_jetmem.cuda.modes import rank as mode_rank
from pytest_jetmem.measure.baseline import Baseline, BaselineError, BaselineStore, Machine, entry_key
from pytest_jetmem.measure.record import MeasurementRecord, group_name

__all__ = [
    "FORMAT",
    "REFERENCE_MODE",
    "VERSION",
    "Group",
    "TrendPoint",
    "Trends",
    "finite",
    "group_name",
    "group_rows",
    "has_trend",
    "load_trends",
    "report_document",
    "utc_now",
]

FORMAT = "pytest-jetmem-report"
VERSION = 1
REFERENCE_MODE = "device"


def finite(x: object) -> bool:
    """Whether ``x`` is a real number (int or float, not bool) that is neither infinite nor NaN."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def utc_now() -> str:
    """The time now, UTC, ISO 8601 to the second (``2030-01-01T00:00:00Z``): the report's ``created`` stamp."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- grouping ------------------------------------------------------------------------------------------
@dataclass
class Group:
    """The rows of one test (every mode), in the order their measurements were first seen."""

    name: str
    anchor: str
    rows: list[MeasurementRecord] = field(default_factory=list)

    @property
    def keys(self) -> list[str]:
        """The measurements (``label:scope``) of this test, in order of appearance."""
        return list(dict.fromkeys(r.key for r in self.rows))

    @property
    def modes(self) -> list[str]:
        return sorted({r.mode for r in self.rows}, key=mode_rank)  # registry order, then the others

    def row(self, key: str, mode: str) -> MeasurementRecord | None:
        """The last row of ``key`` in ``mode`` (a rerun test, e.g. with pytest-rerunfailures, reports again)."""
        found = [r for r in self.rows if r.key == key and r.mode == mode]
        return found[-1] if found else None


def group_rows(rows: Iterable[MeasurementRecord]) -> list[Group]:
    """Rows grouped by :func:`group_name`, groups in order of first appearance."""
    groups: dict[str, Group] = {}
    for r in rows:
        name = group_name(r.nodeid, r.mode)
        if name not in groups:
            groups[name] = Group(name, f"t{len(groups) + 1}")
        groups[name].rows.append(r)
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

    def to_dict(self) -> dict[str, object]:
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

    def to_list(self) -> list[dict[str, object]]:
        return [
            {"nodeid": n, "mode": m, "key": k, "points": [p.to_dict() for p in pts]}
            for (n, m, k), pts in self.points.items()
        ]


def has_trend(group: Group, key: str, trends: Trends) -> bool:
    """Whether measurement ``key`` of ``group`` has trend points in ``trends`` in at least one of its modes."""
    return any(trends.of(r.nodeid, m, key) for m in group.modes if (r := group.row(key, m)) is not None)


def load_trends(
    store: BaselineStore | None,
    rows: Sequence[MeasurementRecord],
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
    loaded, unreadable, foreign = _comparable_baselines(store, names, machine)
    trends.baselines = [b.name for b in loaded]
    trends.notes.extend(_left_out_notes(unreadable, foreign))
    stamp = now or utc_now()
    for r in rows:
        points = _trend_of(r, loaded, session_id, stamp)
        if points is not None:
            trends.points[(r.nodeid, r.mode, r.key)] = points
    return trends


def _comparable_baselines(
    store: BaselineStore, names: Sequence[str], machine: Machine | None
) -> tuple[list[Baseline], list[str], list[str]]:
    """(the baselines ``names`` of ``store`` that can be compared, oldest first; the names of those that could not
    be read; those from another machine than ``machine``, where it is given)."""
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
        else:
            loaded.append(base)
    loaded.sort(key=lambda b: (b.created, _mtime_ns(b.path), b.name))  # created has one-second resolution
    return loaded, unreadable, foreign


def _left_out_notes(unreadable: Sequence[str], foreign: Sequence[str]) -> list[str]:
    """The notes naming the baselines left out of the trends, and why."""
    notes = []
    if unreadable:
        notes.append(f"baselines that could not be read, left out of the trends: {', '.join(unreadable)}")
    if foreign:
        notes.append(f"baselines from another machine, left out of the trends (not comparable): {', '.join(foreign)}")
    return notes


def _saved_points(r: MeasurementRecord, loaded: Sequence[Baseline], session_id: str | None) -> list[TrendPoint]:
    """The median of row ``r``'s measurement in each baseline of ``loaded`` that holds it (oldest first); a baseline
    saved by session ``session_id`` is labelled as this run's."""
    points = []
    for base in loaded:
        entry = base.entry(entry_key(r.nodeid, r.mode, r.key))
        if entry is None:
            continue
        mine = session_id is not None and base.session == session_id
        label = f"{base.name} (this run)" if mine else base.name
        points.append(TrendPoint(label, base.created, entry.summary.median, entry.summary.n, mine))
    return points


def _trend_of(
    r: MeasurementRecord, loaded: Sequence[Baseline], session_id: str | None, stamp: str
) -> list[TrendPoint] | None:
    """Row ``r``'s trend: its saved points, then this run (stamped ``stamp``) unless a baseline of this session
    stands for it; None where fewer than two baselines hold it."""
    points = _saved_points(r, loaded, session_id)
    if len(points) < 2:
        return None
    if not any(p.this_run for p in points) and finite(r.median):
        points.append(TrendPoint("this run", stamp, r.median, r.statistics.n, True))
    return points


def _mtime_ns(path: Path | None) -> int:
    try:
        return path.stat().st_mtime_ns if path is not None else 0
    except OSError:
        return 0


# -- the JSON twin -------------------------------------------------------------------------------------
def _unwrapped(x: object) -> object:
    """A numpy scalar's Python value (``.item()``); anything else, or what ``.item()`` refuses, as it is."""
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        with contextlib.suppress(TypeError, ValueError):
            return x.item()
    return x


def _json_scalar(x: object) -> object:
    """A plain JSON scalar: numpy scalars unwrapped, non-finite floats as None, anything else not JSON as text."""
    x = _unwrapped(x)
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return str(x)


def _jsonable(x: object) -> object:
    """Plain JSON values: numpy scalars unwrapped, tuples as lists, non-finite floats as None."""
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return _json_scalar(x)


def report_document(
    rows: Sequence[MeasurementRecord],
    *,
    machine: Mapping[str, object] | None = None,
    trends: Trends | None = None,
    notes: Sequence[str] = (),
    created: str | None = None,
) -> dict[str, object]:
    """The JSON twin of the report: the rows as the plugin made them (their records' JSON objects), plus machine,
    trends and notes."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "created": created or utc_now(),
        "machine": _jsonable(dict(machine)) if machine else None,
        "rows": _jsonable([r.to_json() for r in rows]),
        "trends": trends.to_list() if trends else [],
        "notes": [*notes, *(trends.notes if trends else [])],
    }
