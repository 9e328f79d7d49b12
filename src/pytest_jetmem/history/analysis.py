"""Change points of a store's series, with their commit range and their cause.

A series is one measured thing (test, memory mode, label, scope) on one device, over the sessions of one branch in
commit order (:func:`~.model.commit_order`), each session's median one point: the session is the unit of noise,
as in the gate. It runs across machine classes on purpose: the step that a driver, JetPack or power-mode change
causes is a change point whose cause names the fields that changed. The method is
:func:`pytest_jetmem.measure.changepoints.detect`. GPU-free and pytest-free.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_jetmem.history.context import git_output
from pytest_jetmem.history.model import Ack, SeriesKey, SessionRow, commit_order
from pytest_jetmem.history.store import Store
from pytest_jetmem.measure.changepoints import ChangePoint, detect

__all__ = ["Change", "Series", "changes", "default_branch", "histories"]


@dataclass(frozen=True)
class Series:
    """The points of one series on one device: its sessions in commit order, their medians and MADs (ms)."""

    key: SeriesKey
    device: str
    sessions: tuple[SessionRow, ...]
    medians: tuple[float, ...]
    mads: tuple[float, ...]


@dataclass(frozen=True)
class Change:
    """A change point of a series: the figures, the sessions either side, its cause and any acknowledgement."""

    series: SeriesKey
    device: str
    point: ChangePoint
    before: SessionRow  # the last session before the change
    after: SessionRow  # the first session after it
    cause: tuple[str, ...]  # the machine fields that changed ("driver_version 12080 -> 13000"); (): the code
    ack: Ack | None = None

    @property
    def regression(self) -> bool:
        """Slower after the change (the ratio's whole 99% interval above 1)."""
        return self.point.ci[0] > 1.0

    @property
    def cause_text(self) -> str:
        """``code (a1b2c3d4e5..f6a7b8c9d0)`` or the fields that changed."""
        commits = f"{self.before.short_commit}..{self.after.short_commit}"
        if not self.cause:
            return f"code ({commits})"
        code = "" if self.before.context.commit == self.after.context.commit else f", and the code ({commits})"
        return "machine: " + "; ".join(self.cause) + code

    @property
    def magnitude_text(self) -> str:
        low, high = self.point.ci
        return f"{self.point.change_pct:+.1f}% [{(low - 1) * 100:+.1f}%, {(high - 1) * 100:+.1f}%]"


def histories(store: Store, branch: str | None) -> list[Series]:
    """Every series of ``branch`` (None: every branch), per device, in commit order."""
    rows = commit_order(store.sessions(branch=branch))
    position = {row.id: i for i, row in enumerate(rows)}
    by_id = {row.id: row for row in rows}
    names = store.series()
    points: dict[tuple[int, str], list[tuple[int, float, float]]] = {}
    for session_id, series_id, median, mad, _ in store.points():
        row = by_id.get(session_id)
        if row is not None and median > 0:
            points.setdefault((series_id, row.machine.device), []).append((position[session_id], median, mad))
    out = []
    for (series_id, device), pts in sorted(points.items(), key=lambda kv: (names[kv[0][0]].name, kv[0][1])):
        pts.sort()
        out.append(Series(names[series_id], device, tuple(rows[p[0]] for p in pts), tuple(p[1] for p in pts),
                          tuple(p[2] for p in pts)))
    return out


def _group(row: SessionRow) -> str:
    """The commit of a session (a session of an unknown commit is a commit of its own)."""
    return row.context.commit or f"session:{row.uid}"


def changes(store: Store, branch: str | None, *, series: Sequence[Series] | None = None) -> list[Change]:
    """The change points of every series of ``branch`` (of ``series`` where given: what :func:`histories` read
    already), acknowledged ones marked."""
    acks = {(a.series, a.device, a.session_uid): a for a in store.acks()}
    found: list[Change] = []
    for one in histories(store, branch) if series is None else series:
        groups = [_group(row) for row in one.sessions]
        for cp in detect(one.medians, groups=groups):
            before, after = one.sessions[cp.index - 1], one.sessions[cp.index]
            ack = acks.get((one.key, one.device, after.uid))
            cause = tuple(before.machine.changes(after.machine))
            found.append(Change(one.key, one.device, cp, before, after, cause, ack))
    return found


def default_branch(store: Store, root: Path) -> str | None:
    """The branch a history is read on unless told: git's ``origin/HEAD`` where the store has sessions of it, else
    ``main``, ``master``, else the branch with the most sessions; None: the store has no session with a branch."""
    counts = Counter(row.context.branch for row in store.sessions() if row.context.branch)
    remote = git_output(root, "symbolic-ref", "-q", "--short", "refs/remotes/origin/HEAD")
    candidates = [remote.split("/", 1)[-1]] if remote else []
    for name in (*candidates, "main", "master"):
        if counts.get(name):
            return name
    return counts.most_common(1)[0][0] if counts else None
