"""The fleet matrix: which memory mode the plugin's advice picks for each test, on each machine class of a store.

:func:`fleet_matrix` reads a store's sessions of one branch (None: every branch). For each machine class
(:attr:`~pytest_jetmem.machine.fingerprint.Machine.machine_class`) and each test and measurement (``label:scope``),
the cell is the advice (:func:`pytest_jetmem.measure.advice.advise`) of the newest session of that class, in commit
order (:func:`~.model.commit_order`), that measured the test in two or more memory modes, with that session's
device facts (None where the store has none: an imported file). ``advise`` runs once per session that gives a cell,
never per cell. Only tests with an advice make a row; every machine class of the branch makes a column, in order
of device, then label.

:meth:`FleetMatrix.to_json` is documented and stable::

    {"version": 1,
     "classes": [{"machine_class": "3f09c1d2a7e4", "device": "Orin (sm_87)",
                  "label": "Orin (sm_87) · L4T 36.4.3 · MAXN · driver 12060", "sessions": 3}, ...],
     "rows": [{"test": "t.py::test_conv", "key": "conv:kernel",
               "cells": {"3f09c1d2a7e4": {"session_uid": "...", "commit": "..." or null, "pick": "managed" or null,
                                          "text": "managed (device 1.32x [1.28x, 1.36x])",
                                          "advice": {... Advice.to_json() ...}}, ...}}, ...]}

``classes`` in column order, ``rows`` in row order; a class missing from a row's ``cells``: no session of that
class measured the test in two or more modes. GPU-free and pytest-free.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pytest_jetmem.history.forked import forked_map, workers_for
from pytest_jetmem.history.model import SessionRow
from pytest_jetmem.history.store import Store
from pytest_jetmem.history.timeline import History
from pytest_jetmem.machine.fingerprint import Machine
from pytest_jetmem.measure.advice import Advice, DeviceFacts, advise
from pytest_jetmem.measure.advice_terms import times
from pytest_jetmem.measure.record import MeasurementRecord

__all__ = ["FLEET_VERSION", "FleetCell", "FleetClass", "FleetMatrix", "fleet_matrix"]

#: The version of :meth:`FleetMatrix.to_json`'s object; a change of meaning bumps it.
FLEET_VERSION = 1
#: What the text shows where no session of a class measured the test in two or more modes.
MISSING = "-"


@dataclass(frozen=True)
class FleetCell:
    """One test and measurement on one machine class: the advice of the newest session there that measured it."""

    machine_class: str
    device: str  # Machine.device of the class
    session_uid: str  # the session the advice came from
    commit: str | None
    advice: Advice  # the plugin's own advice for the test and key, from that session's records

    @property
    def pick(self) -> str | None:
        """The mode to pick; None: no clear winner."""
        return self.advice.pick

    @property
    def text(self) -> str:
        """The cell as the table shows it: ``managed (device 1.32x [1.28x, 1.36x])`` (the next mode against the pick,
        with the ratio's interval), or ``no clear winner (tied: device, managed)`` / ``(no interval)``."""
        a = self.advice
        if a.pick is not None:
            r = a.runner_up
            if r is None or r.ci is None:
                return a.pick
            return f"{a.pick} ({r.mode} {times(r.ratio)} [{times(r.ci[0])}, {times(r.ci[1])}])"
        if len(a.leaders) >= 2:
            return f"no clear winner (tied: {', '.join(a.leaders)})"
        return "no clear winner (no interval)"

    def to_json(self) -> dict[str, object]:
        return {
            "session_uid": self.session_uid,
            "commit": self.commit,
            "pick": self.pick,
            "text": self.text,
            "advice": self.advice.to_json(),
        }


@dataclass(frozen=True)
class FleetClass:
    """A column: one machine class, its device, the label that tells it apart, and its sessions on the branch."""

    machine_class: str
    device: str
    label: str  # "Orin (sm_87) · L4T 36.4.3 · MAXN · driver 12060"
    sessions: int

    def to_json(self) -> dict[str, object]:
        return {"machine_class": self.machine_class, "device": self.device, "label": self.label,
                "sessions": self.sessions}


@dataclass(frozen=True)
class FleetMatrix:
    """The advice per test and measurement (rows) and machine class (columns); a missing cell: not measured there
    in two or more modes."""

    classes: tuple[FleetClass, ...]
    rows: tuple[tuple[str, str], ...]  # (test, key), in order
    cells: Mapping[tuple[str, str, str], FleetCell]  # (test, key, machine_class) -> cell

    def text(self) -> str:
        """The terminal table: a legend of the classes, then one row per test and key, one column per class."""
        if not self.classes:
            return "jetmem fleet: no sessions stored (on this branch): no advice to show"
        lines = ["jetmem fleet: the mode to pick per machine class (from its newest session that measured the test)"]
        for i, c in enumerate(self.classes, 1):
            lines.append(f"  [{i}] {c.label}  (class {c.machine_class}, {c.sessions} session"
                         f"{'s' if c.sessions != 1 else ''}{self._sources(c.machine_class)})")
        if not self.rows:
            lines.append("no test was measured in two or more memory modes on any machine class")
            return "\n".join(lines)
        header = ["test", "key", *(f"[{i}] {c.device}" for i, c in enumerate(self.classes, 1))]
        body = [
            [test, key, *(self._cell_text(test, key, c.machine_class) for c in self.classes)]
            for test, key in self.rows
        ]
        lines.append("")
        lines.extend(_table([header, *body]))
        lines.append("")
        lines.append(f"(after a pick: the next mode, its time against the pick's [99% interval]; {MISSING}: not "
                     "measured in two or more modes on that class)")
        return "\n".join(lines)

    def _cell_text(self, test: str, key: str, machine_class: str) -> str:
        cell = self.cells.get((test, key, machine_class))
        return cell.text if cell is not None else MISSING

    def _sources(self, machine_class: str) -> str:
        """``; advice from 0000abab12`` (one session gave every cell) or ``; advice from 3 sessions``; "" without
        cells."""
        cells = [c for (_, _, m), c in self.cells.items() if m == machine_class]
        sessions = {c.session_uid: c.commit for c in cells}
        if len(sessions) == 1:
            (commit,) = sessions.values()
            return f"; advice from {commit[:10] if commit else 'an unknown commit'}"
        return f"; advice from {len(sessions)} sessions" if sessions else ""

    def to_json(self) -> dict[str, object]:
        """The documented object (see the module's docstring); the full advice JSON in every cell."""
        return {
            "version": FLEET_VERSION,
            "classes": [c.to_json() for c in self.classes],
            "rows": [
                {
                    "test": test,
                    "key": key,
                    "cells": {
                        c.machine_class: cell.to_json()
                        for c in self.classes
                        if (cell := self.cells.get((test, key, c.machine_class))) is not None
                    },
                }
                for test, key in self.rows
            ],
        }


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned columns, two spaces apart, no trailing spaces."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _labels(machines: Mapping[str, Machine]) -> dict[str, str]:
    """Each class's label: its device, then L4T, power mode and driver where known, and any fingerprint field
    (clock locking, an unknown value) where the classes of one device differ in it."""
    by_device: dict[str, list[Machine]] = {}
    for m in machines.values():
        by_device.setdefault(m.device, []).append(m)

    def varies(m: Machine, name: str) -> bool:
        return len({getattr(other, name) for other in by_device[m.device]}) > 1

    def mode(value: str) -> str:
        return f"power mode {value}" if value.isdigit() else value

    out = {}
    for cls, m in machines.items():
        parts = [m.device]
        if m.l4t_release is not None or varies(m, "l4t_release"):
            parts.append(f"L4T {m.l4t_release or 'unknown'}")
        if m.nvpmodel_mode is not None or varies(m, "nvpmodel_mode"):
            parts.append(mode(m.nvpmodel_mode) if m.nvpmodel_mode is not None else "power mode unknown")
        parts.append(f"driver {m.driver_version}")
        if varies(m, "clocks_locked"):
            locked = {True: "clocks locked", False: "clocks not locked", None: "clocks unknown"}
            parts.append(locked[m.clocks_locked])
        out[cls] = " · ".join(parts)
    return out


_Subjects = dict[int, set[tuple[str, str]]]  # session id -> (test, key) pairs


def _newest_sources(history: History) -> _Subjects:
    """Session id -> the (test, key) whose cell it gives: for each machine class and (test, key), the newest session
    (commit order) of that class that measured it in 2+ modes (from the series' places, no samples decoded)."""
    by_subject: dict[tuple[str, str], dict[str, list[np.ndarray]]] = {}
    for one in history.series:
        by_subject.setdefault((one.key.test, one.key.key), {}).setdefault(one.key.mode, []).append(one.place_array)
    class_of = history.class_numbers
    wanted: _Subjects = {}
    for subject, modes in by_subject.items():
        each = [np.unique(np.concatenate(ps)) for ps in modes.values()]
        at, count = np.unique(np.concatenate(each), return_counts=True)
        at = at[count >= 2]  # the sessions that measured it in 2+ modes
        newest: dict[int, int] = dict(zip(class_of[at].tolist(), at.tolist(), strict=True))  # the last place wins
        for place in newest.values():
            wanted.setdefault(history.sessions[place].id, set()).add(subject)
    return wanted


def _advice(job: tuple[list[MeasurementRecord], DeviceFacts | None]) -> tuple[Advice, ...]:
    records, facts = job
    return tuple(advise(records, facts).advice)


#: Sessions to advise from at or above which the advice is worked out in one process per CPU.
PARALLEL_SESSIONS = 8


def _cells(store: Store, by_class: Mapping[str, Sequence[SessionRow]], wanted: _Subjects
           ) -> dict[tuple[str, str, str], FleetCell]:
    """The cells of every class: one ``advise`` per session that gives any (its records read here, the advice
    worked out in forked processes where there are many)."""
    sources = [(cls, row) for cls, rows in by_class.items() for row in rows if row.id in wanted]
    jobs = [(store.records(row.id), DeviceFacts.from_json(row.device_facts)) for _, row in sources]
    workers = workers_for(len(jobs), PARALLEL_SESSIONS)
    cells: dict[tuple[str, str, str], FleetCell] = {}
    for (cls, row), advice in zip(sources, forked_map(_advice, jobs, workers), strict=True):
        for a in advice:
            if (a.test, a.key) in wanted[row.id]:
                cells[(a.test, a.key, cls)] = FleetCell(cls, row.machine.device, row.uid, row.context.commit, a)
    return cells


def fleet_matrix(store: Store, history: History) -> FleetMatrix:
    """The advice per test and key on each machine class of ``history``: for each class and (test, key), the
    advice of the newest session (commit order) of that class that measured it in 2+ modes (its records read from
    ``store``)."""
    by_class: dict[str, list[SessionRow]] = {}
    for row in history.sessions:
        by_class.setdefault(row.machine.machine_class, []).append(row)
    wanted = _newest_sources(history)
    cells = _cells(store, by_class, wanted)
    machines = {cls: rows[-1].machine for cls, rows in by_class.items()}
    labels = _labels(machines)
    classes = sorted(
        (FleetClass(cls, machines[cls].device, labels[cls], len(rows)) for cls, rows in by_class.items()),
        key=lambda c: (c.device, c.label, c.machine_class),
    )
    rows_out = tuple(sorted({(test, key) for test, key, _ in cells}))
    return FleetMatrix(tuple(classes), rows_out, cells)
