"""Baselines as a view of the results store: ``--jetmem-compare=BRANCH`` with ``--jetmem-store``.

The reference is the newest ``window`` sessions of the branch, in commit order, on this machine's class (the
fingerprint: a driver, JetPack, power-mode or clock-locking change starts a new class by itself), each session
one unit of noise as in a baseline file that sessions were appended to; a session of a tree with uncommitted
changes is no reference (it measured code no commit holds), as in the change points. GPU-free and pytest-free.
"""

from __future__ import annotations

import os

from pytest_jetmem.errors import BaselineError, BaselineNotFound, StoreError, StoreErrorKind
from pytest_jetmem.history.model import SessionRow, commit_order
from pytest_jetmem.history.store import Store, open_store
from pytest_jetmem.machine.fingerprint import Machine
from pytest_jetmem.measure.baseline import Baseline, Entry, entry_key
from pytest_jetmem.measure.record import MeasurementRecord, unit_of

__all__ = ["reference_baseline", "reference_sessions"]


def reference_sessions(store: Store, branch: str, machine: Machine, window: int) -> list[SessionRow]:
    """The newest ``window`` sessions of ``branch`` on ``machine``'s class, oldest first, those of a tree with
    uncommitted changes left out."""
    rows = store.sessions(branch=branch, machine_class=machine.machine_class)
    return commit_order(row for row in rows if not row.context.dirty)[-window:]


def _why_none(store: Store, branch: str, machine: Machine) -> str:
    """Why the store has no reference for ``branch`` here: no session of it at all, or only on other classes."""
    same_device = [s for s in store.sessions(branch=branch) if s.machine.device == machine.device]
    if not same_device:
        return f"no session of branch {branch!r} on {machine.device} in this store: nothing compared"
    if all(s.context.dirty for s in same_device if s.machine.machine_class == machine.machine_class) and any(
            s.machine.machine_class == machine.machine_class for s in same_device):
        return (f"only sessions of trees with uncommitted changes of branch {branch!r} on this machine class "
                f"({machine.machine_class}): they are no reference; nothing compared")
    newest = commit_order(same_device)[-1]
    changed = newest.machine.changes(machine) or newest.machine.mismatches(machine)
    return (f"no session of branch {branch!r} on this machine class ({machine.machine_class}) yet: its sessions on "
            f"{machine.device} ran on another class ({'; '.join(changed)}); a new class starts with this session")


def _entries(store: Store, rows: list[SessionRow]) -> dict[str, Entry]:
    """The baseline entries of ``rows`` (oldest first): each key's samples per session, and the newest run's record
    (its first call and clocks). Only the records of the sessions that hold a key's newest run are read; the rest
    are read as samples."""
    names = store.series()
    runs: dict[str, list[tuple[SessionRow, tuple[float, ...]]]] = {}
    for row in rows:
        for series_id, samples in store.session_samples(row.id).items():
            k = names[series_id]
            if samples and (unit_of(k.scope) == "ms" or min(samples) > 0):  # an energy window <= 0 compares nothing
                runs.setdefault(entry_key(k.nodeid, k.mode, k.key), []).append((row, samples))
    records: dict[int, dict[str, MeasurementRecord]] = {}
    for row in {taken[-1][0].id: taken[-1][0] for taken in runs.values()}.values():
        records[row.id] = {entry_key(r.nodeid, r.mode, r.key): r for r in store.records(row.id)}
    entries: dict[str, Entry] = {}
    for key, taken in runs.items():
        newest = records[taken[-1][0].id][key]
        clocks = newest.conditions.clocks
        entries[key] = Entry(
            newest.nodeid,
            newest.mode,
            newest.key,
            tuple(v for _, samples in taken for v in samples),
            newest.statistics.first_call_ms,
            unit=unit_of(newest.identity.scope),
            runs=tuple(samples for _, samples in taken),
            run_sessions=tuple(row.uid for row, _ in taken),
            sm_mhz=clocks.median_mhz if clocks is not None else None,
        )
    return entries


def reference_baseline(
    url: str, source: str, branch: str, machine: Machine | None, window: int, *, base: str | os.PathLike[str]
) -> Baseline:
    """The reference of ``branch`` in the store ``url`` (named by setting ``source``) as a baseline.

    BaselineNotFound (nothing is compared, as for a missing baseline file) where the store has no session of the
    branch on this machine class, saying why; BaselineError where the store cannot be read.
    """
    try:
        store = open_store(url, base, create=False)
    except StoreError as exc:
        if exc.kind is StoreErrorKind.NOT_FOUND:
            raise BaselineNotFound(exc.url, f"{source}: {exc.reason}") from None
        raise BaselineError(exc.url, f"{source}: {exc.reason}") from None
    with store:
        if machine is None:
            raise BaselineNotFound(store.url, "this machine has no GPU: no machine class to compare within")
        try:
            rows = reference_sessions(store, branch, machine, window)
            if not rows:
                raise BaselineNotFound(store.url, _why_none(store, branch, machine))
            entries = _entries(store, rows)
        except StoreError as exc:  # a damaged measurement, a server gone mid-read
            raise BaselineError(exc.url, f"{source}: {exc.reason}") from None
    newest = rows[-1]
    return Baseline(name=branch, created=newest.stored, session=newest.uid, machine=newest.machine, entries=entries)
