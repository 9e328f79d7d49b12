"""A branch's history, read once: its sessions in commit order, every series per device with its points, and the
acknowledgements. Each command of ``pytest-jetmem history`` reads one :class:`History` (:func:`read_history`) and
hands the same value to what it does (change points, ``show``, ``export``, the site, the fleet matrix).

A series is one measured thing (test, memory mode, label, scope) on one device, over the sessions of the branch in
commit order (:func:`~.model.commit_order`), each session's median one point: the session is the unit of noise, as
in the gate. GPU-free and pytest-free.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from pytest_jetmem.history.model import Ack, Points, SeriesKey, SessionRow, commit_order
from pytest_jetmem.history.points_cache import PointsCache
from pytest_jetmem.history.store import Store

__all__ = ["History", "Series", "commit_of", "read_history"]


def commit_of(row: SessionRow) -> str:
    """The commit of a session (a session of an unknown commit is a commit of its own)."""
    return row.context.commit or f"session:{row.uid}"


@dataclass(frozen=True, eq=False)
class Series:
    """The points of one series on one device, held as arrays (no Python object per point): its sessions' places
    among the history's sessions ``rows`` (in commit order), their medians and MADs (ms), and per session whether it
    counts for change points: ``left_array`` (uncommitted changes, unless asked for; a 0 ms median) and
    ``outlier_array`` (an outlying session, :func:`~pytest_jetmem.measure.changepoints.outliers`; None until
    :func:`~.analysis.analysed` marks them). The tuples (``sessions``, ``medians``, ...) are made when asked."""

    key: SeriesKey
    device: str
    rows: tuple[SessionRow, ...] = field(repr=False)  # the history's sessions, shared by its series
    place_array: np.ndarray = field(repr=False)  # int64, ascending
    median_array: np.ndarray = field(repr=False)  # float64, ms
    mad_array: np.ndarray = field(repr=False)  # float64, ms
    left_array: np.ndarray = field(repr=False)  # bool
    outlier_array: np.ndarray | None = field(default=None, repr=False)  # bool

    @functools.cached_property
    def sessions(self) -> tuple[SessionRow, ...]:
        """The series' sessions, in commit order."""
        return _pick(self.rows, self.places)

    def session(self, i: int) -> SessionRow:
        """The series' ``i``-th session (without making :attr:`sessions`)."""
        return self.rows[int(self.place_array[i])]

    @functools.cached_property
    def places(self) -> tuple[int, ...]:
        """Each session's place among the history's sessions."""
        return tuple(self.place_array.tolist())

    @functools.cached_property
    def medians(self) -> tuple[float, ...]:
        return tuple(self.median_array.tolist())

    @functools.cached_property
    def mads(self) -> tuple[float, ...]:
        return tuple(self.mad_array.tolist())

    @functools.cached_property
    def left_out(self) -> tuple[bool, ...]:
        return tuple(self.left_array.tolist())

    @functools.cached_property
    def outlier(self) -> tuple[bool, ...]:
        """Each session's outlier mark (``()`` until :func:`~.analysis.analysed` marks them)."""
        return () if self.outlier_array is None else tuple(self.outlier_array.tolist())

    def __len__(self) -> int:
        return int(self.place_array.size)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Series):
            return NotImplemented
        return (self.key, self.device, self.sessions) == (other.key, other.device, other.sessions) and all(
            np.array_equal(a, b) for a, b in ((self.median_array, other.median_array),
                                              (self.mad_array, other.mad_array), (self.left_array, other.left_array)))\
            and self.outlier == other.outlier

    __hash__ = None  # type: ignore[assignment]  # a value holding arrays

    @property
    def name(self) -> str:
        """``nodeid key on device``."""
        return f"{self.key.name} on {self.device}"

    def note(self, i: int) -> str:
        """Why session ``i`` does not count (``""`` where it does)."""
        if self.left_array[i]:
            return "uncommitted changes: left out" if self.session(i).context.dirty else "0 ms: left out"
        return "outlier: left out" if self.outlier_array is not None and self.outlier_array[i] else ""

    @functools.cached_property
    def notes(self) -> tuple[str, ...]:
        """:meth:`note` of every session."""
        return tuple(self.note(i) if i in self._uncounted else "" for i in range(len(self)))

    @functools.cached_property
    def _uncounted(self) -> frozenset[int]:
        odd = self.left_array if self.outlier_array is None else self.left_array | self.outlier_array
        return frozenset(np.flatnonzero(odd).tolist())

    def uncounted(self) -> list[int]:
        """The indices of the sessions that do not count for change points."""
        return sorted(self._uncounted)

    def commits(self) -> tuple[str, ...]:
        """Each session's commit (:func:`commit_of`)."""
        return tuple(commit_of(row) for row in self.sessions)


@dataclass(frozen=True, eq=False)
class History:
    """What a command reads of a store: ``branch``'s sessions in commit order (None: every branch), every series
    of them per device (sorted by name, then device) and the acknowledgements."""

    branch: str | None
    sessions: tuple[SessionRow, ...]
    series: tuple[Series, ...]
    acks: tuple[Ack, ...]

    @functools.cached_property
    def place(self) -> Mapping[str, int]:
        """A session's uid -> its place in ``sessions``."""
        return {row.uid: i for i, row in enumerate(self.sessions)}

    @functools.cached_property
    def classes(self) -> tuple[str, ...]:
        """The machine class of each session, in commit order."""
        return tuple(row.machine.machine_class for row in self.sessions)

    @functools.cached_property
    def modes(self) -> tuple[str, ...]:
        """Every memory mode of the series, sorted."""
        return tuple(sorted({s.key.mode for s in self.series}))

    @functools.cached_property
    def commit_numbers(self) -> np.ndarray:
        """Each session's commit as a number (sessions of one commit, which are neighbours, share one)."""
        return _numbers([commit_of(row) for row in self.sessions])

    @functools.cached_property
    def class_numbers(self) -> np.ndarray:
        """Each session's machine class as a number."""
        return _numbers(list(self.classes))


def _numbers(labels: Sequence[str]) -> np.ndarray:
    """Each label's number in order of first appearance (equal labels, equal numbers)."""
    seen: dict[str, int] = {}
    return np.array([seen.setdefault(label, len(seen)) for label in labels], dtype=np.int64)


def read_history(store: Store, branch: str | None, *, include_dirty: bool = False,
                 chain: Sequence[str] = (), points: PointsCache | None = None) -> History:
    """``branch``'s history (None: every branch), read from ``store`` once: sessions in commit order
    (:func:`~.model.commit_order` with git's first-parent ``chain`` where given), every series per device with
    the sessions left out marked (uncommitted changes unless ``include_dirty``, 0 ms); outliers are marked by
    :func:`~.analysis.analysed`, with the change points. ``points``: a cache of the points read before
    (:mod:`~.points_cache`), so that only sessions stored since are read from the store."""
    rows = tuple(commit_order(store.sessions(branch=branch), chain))
    names = store.series()
    read = points.points(store, rows, branch) if points is not None else store.points(branch=branch)
    series = _series_of(rows, names, read, include_dirty)
    series.sort(key=lambda s: (s.key.name, s.device))
    return History(branch, rows, tuple(series), tuple(store.acks()))


def _series_of(rows: tuple[SessionRow, ...], names: Mapping[int, SeriesKey], points: Points,
               include_dirty: bool) -> list[Series]:
    """The points grouped per series and device, each group in commit order (columns sorted at once), the
    sessions left out marked: uncommitted changes (unless ``include_dirty``), 0 ms."""
    if not rows or not len(points):
        return []
    ids = np.array([row.id for row in rows], dtype=np.int64)
    place = np.full(int(max(ids.max(), points.session_id.max())) + 1, -1, dtype=np.int64)
    place[ids] = np.arange(ids.size)
    at = place[points.session_id]
    keep = at >= 0
    devices = {name: k for k, name in enumerate(sorted({row.machine.device for row in rows}))}
    device_names = sorted(devices, key=devices.__getitem__)
    device_of = np.array([devices[row.machine.device] for row in rows], dtype=np.int64)
    at, series_id = at[keep], points.series_id[keep]
    medians, mads, device = points.median[keep], points.mad[keep], device_of[at]
    # one sort of one key (series, then device, then place; a place has one session, so the key is unique)
    order = np.argsort((series_id * len(devices) + device) * len(rows) + at, kind="stable")
    at, series_id, device, medians, mads = at[order], series_id[order], device[order], medians[order], mads[order]
    starts = np.flatnonzero(np.r_[True, (series_id[1:] != series_id[:-1]) | (device[1:] != device[:-1])])
    ends = np.r_[starts[1:], at.size]
    dirty = np.array([bool(row.context.dirty) and not include_dirty for row in rows], dtype=bool)
    left = dirty[at] | (medians <= 0)
    return [Series(names[int(series_id[a])], device_names[int(device[a])], rows, at[a:b], medians[a:b], mads[a:b],
                   left[a:b]) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]


def _pick(rows: Sequence[SessionRow], places: Sequence[int]) -> tuple[SessionRow, ...]:
    """``rows`` at ``places``, as a tuple."""
    if len(places) == 1:
        return (rows[places[0]],)
    picked: tuple[SessionRow, ...] = operator.itemgetter(*places)(rows)
    return picked


def positive(medians: Sequence[float] | np.ndarray) -> np.ndarray:
    """The medians with each one of 0 ms (left out) replaced by a positive stand-in (the first positive one, else
    1.0), as the detector needs."""
    arr = np.asarray(medians, dtype=np.float64)
    bad = ~(arr > 0)
    if not bad.any():
        return arr
    good = np.flatnonzero(~bad)
    return np.where(bad, arr[good[0]] if good.size else 1.0, arr)
