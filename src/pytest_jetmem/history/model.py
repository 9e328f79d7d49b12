"""What a results store holds, as Python values: a session with its records, the rows read back, an acknowledgement.

One home for these shapes; :mod:`~pytest_jetmem.history.store` writes and reads them, everything else asks it.
GPU-free and pytest-free.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytest_jetmem.history.context import SessionContext
from pytest_jetmem.machine.fingerprint import Machine
from pytest_jetmem.measure.record import MeasurementRecord

__all__ = ["Ack", "Points", "Reported", "SeriesKey", "SessionRow", "StoredSession", "commit_order", "session_row"]


@dataclass(frozen=True)
class SeriesKey:
    """One measured thing, in one memory mode: a series over sessions (per device)."""

    nodeid: str
    test: str  # the node id without the memory mode (``group_name``)
    mode: str
    label: str
    scope: str

    @classmethod
    def of(cls, record: MeasurementRecord) -> SeriesKey:
        ident = record.identity
        return cls(ident.nodeid, ident.test, ident.mode, ident.label, ident.scope)

    @property
    def key(self) -> str:
        """``label:scope`` as the runtimes table shows it (``measure:scope`` without a label)."""
        return f"{self.label or 'measure'}:{self.scope}"

    @property
    def name(self) -> str:
        """``nodeid key`` as the command line shows a series."""
        return f"{self.nodeid} {self.key}"


@dataclass(frozen=True)
class StoredSession:
    """A session as the store keeps it: its id, when it started, its code and machine, its measurement records."""

    uid: str
    started: str  # ISO 8601, UTC
    context: SessionContext
    machine: Machine
    records: tuple[MeasurementRecord, ...]
    origin: str = "pytest"  # or "import:baseline", "import:benchmark-json", "import:store"
    plugin_version: str = ""
    #: what the advice needs of the device (``DeviceFacts.to_json()``: integrated, CONCURRENT_MANAGED_ACCESS,
    #: PAGEABLE_MEMORY_ACCESS); None: not known (an imported file)
    device_facts: dict[str, object] | None = None


@dataclass(frozen=True)
class SessionRow:
    """A stored session read back, without its records (``id`` is the store's own number for it)."""

    id: int
    uid: str
    started: str
    stored: str
    context: SessionContext
    machine: Machine
    origin: str
    plugin_version: str
    device_facts: dict[str, object] | None = None

    @property
    def short_commit(self) -> str:
        """The commit's first 10 hex digits, or ``unknown``."""
        return self.context.commit[:10] if self.context.commit else "unknown"


@dataclass(frozen=True, eq=False)
class Points:
    """Every stored measurement's figures as columns (one entry per measurement, in no particular order): what a
    history is made of, read without the samples and records."""

    session_id: np.ndarray  # int64: the store's number of the session
    series_id: np.ndarray  # int64: the series (:meth:`~pytest_jetmem.history.store.Store.series`)
    median: np.ndarray  # float64, ms
    mad: np.ndarray  # float64, ms

    def __len__(self) -> int:
        return int(self.session_id.size)

    @classmethod
    def of_rows(cls, rows: Sequence[Sequence[float]]) -> Points:
        """From rows of (session id, series id, median, MAD)."""
        table = np.array(rows, dtype=np.float64).reshape(-1, 4)
        return cls(table[:, 0].astype(np.int64), table[:, 1].astype(np.int64), table[:, 2].copy(), table[:, 3].copy())

    @classmethod
    def joined(cls, parts: Sequence[Points]) -> Points:
        """The points of ``parts``, one after another."""
        if not parts:
            return cls.of_rows([])
        return cls(*(np.concatenate([getattr(p, name) for p in parts])
                     for name in ("session_id", "series_id", "median", "mad")))

    def where(self, keep: np.ndarray) -> Points:
        """The points where ``keep`` (a mask or indices)."""
        return Points(self.session_id[keep], self.series_id[keep], self.median[keep], self.mad[keep])


@dataclass(frozen=True)
class Ack:
    """An acknowledged change point: the series, the device, the first session after the change, and why."""

    series: SeriesKey
    device: str
    session_uid: str
    commit: str | None
    reason: str
    author: str
    created: str


@dataclass(frozen=True)
class Reported:
    """A change point already reported: the series, the device, the first session after the change (its ``uid``
    and commit), its size in percent and when it was reported (ISO 8601, UTC)."""

    series: SeriesKey
    device: str
    session_uid: str
    commit: str | None
    change_pct: float
    reported: str


def _time_key(s: SessionRow) -> tuple[str, str, str, int]:
    return (s.context.commit_time or s.started, s.context.commit or "", s.started, s.id)


def commit_order(sessions: Iterable[SessionRow], chain: Sequence[str] = ()) -> list[SessionRow]:
    """The sessions in commit order, sessions of one commit together (by start), as a history is read.

    Git decides where it can: a commit comes after every stored commit among its stored ``parents``, and after the
    stored commits before it on ``chain`` (a branch's first-parent history, oldest first, as ``git rev-list
    --first-parent --reverse`` gives it; empty: none). Between commits git does not order (a shallow clone, a commit
    whose parent was never stored, a rebased-away commit), commit time decides, then the hash; a session of an
    unknown commit is a commit of its own, placed by its start. Commits made in one second (a rebase, ``git am``)
    thus read in git's order.
    """
    rows = sorted(sessions, key=_time_key)
    groups: dict[str, list[SessionRow]] = {}
    for row in rows:
        groups.setdefault(row.context.commit or f"session:{row.uid}", []).append(row)
    order = list(groups)
    rank = {k: i for i, k in enumerate(order)}
    after: dict[str, set[str]] = {k: set() for k in order}
    waiting = dict.fromkeys(order, 0)

    def edge(first: str, then: str) -> None:
        if first != then and then not in after[first]:
            after[first].add(then)
            waiting[then] += 1

    for k in order:
        for parent in {p for row in groups[k] for p in (row.context.parents or ())}:
            if parent in groups:
                edge(parent, k)
    on_chain = [c for c in chain if c in groups]
    for first, then in itertools.pairwise(on_chain):
        edge(first, then)
    ready = [(rank[k], k) for k in order if waiting[k] == 0]
    heapq.heapify(ready)
    out: list[str] = []
    while ready:
        _, k = heapq.heappop(ready)
        out.append(k)
        for then in after[k]:
            waiting[then] -= 1
            if waiting[then] == 0:
                heapq.heappush(ready, (rank[then], then))
    if len(out) < len(order):  # a cycle (parents that contradict the chain): the rest by time
        placed = set(out)
        out += [k for k in order if k not in placed]
    return [row for k in out for row in groups[k]]


def session_row(row: Sequence[Any], machines: dict[str, Machine],
                facts_seen: dict[str, dict[str, object]] | None = None) -> SessionRow:
    """A session's row of the store (the columns :meth:`~.store.Store.sessions` reads) as a SessionRow;
    ``machines``: the Machines decoded so far, by their JSON (a Machine is immutable: sessions of one machine share
    it); ``facts_seen``: the device facts decoded so far, by their JSON (each row gets its own copy)."""
    (id_, uid, started, stored, commit, branch, commit_time, parents, dirty, url, machine, origin, version, facts) = row
    context = SessionContext(
        commit=commit,
        branch=branch,
        commit_time=commit_time,
        parents=tuple(parents.split()) if parents is not None else None,
        dirty=None if dirty is None else bool(dirty),
        ci_url=url,
    )
    decoded = machines.get(machine)
    if decoded is None:
        decoded = machines[machine] = Machine.from_dict(json.loads(machine))
    known = facts_seen if facts_seen is not None else {}
    if facts and facts not in known:
        known[facts] = json.loads(facts)
    return SessionRow(int(id_), uid, started, stored, context, decoded, origin, version,
                      dict(known[facts]) if facts else None)
