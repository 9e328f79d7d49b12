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
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_jetmem.history.context import git_output
from pytest_jetmem.history.model import Ack, Reported, SeriesKey, SessionRow, commit_order
from pytest_jetmem.history.store import Store
from pytest_jetmem.measure.changepoints import ChangePoint, analyse, outliers

__all__ = ["REPORT_REACH", "Change", "Series", "changes", "default_branch", "histories", "unreported"]


#: A change point within this many commits of one already reported (same series and device) is that one: a change
#: point's place can move by a commit or two as later sessions arrive.
REPORT_REACH = 3


@dataclass(frozen=True)
class Series:
    """The points of one series on one device: its sessions in commit order, their medians and MADs (ms), and per
    session whether it counts for change points: ``left_out`` (uncommitted changes, unless asked for; a 0 ms
    median) and ``outlier`` (:func:`~pytest_jetmem.measure.changepoints.outliers`)."""

    key: SeriesKey
    device: str
    sessions: tuple[SessionRow, ...]
    medians: tuple[float, ...]
    mads: tuple[float, ...]
    left_out: tuple[bool, ...] = ()
    outlier: tuple[bool, ...] = ()

    def note(self, i: int) -> str:
        """Why session ``i`` does not count (``""`` where it does)."""
        if self.left_out and self.left_out[i]:
            return "uncommitted changes: left out" if self.sessions[i].context.dirty else "0 ms: left out"
        return "outlier: left out" if self.outlier and self.outlier[i] else ""

    def commits(self) -> list[str]:
        """Each session's commit (a session of an unknown commit is a commit of its own)."""
        return [_group(row) for row in self.sessions]


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
    near: str = ""  # a machine change a few commits away the change was not placed on ("2 commit(s) before: ...")
    position: int = 0  # the commit's place in its series (for telling one change point from another)

    @property
    def regression(self) -> bool:
        """Slower after the change (the ratio's whole 99% interval above 1)."""
        return self.point.ci[0] > 1.0

    @property
    def cause_text(self) -> str:
        """``code (a1b2c3d4e5..f6a7b8c9d0)`` or the fields that changed."""
        commits = f"{self.before.short_commit}..{self.after.short_commit}"
        if not self.cause:
            return f"code ({commits})" + (f"; or the machine change {self.near}" if self.near else "")
        code = "" if self.before.context.commit == self.after.context.commit else f", and the code ({commits})"
        return "machine: " + "; ".join(self.cause) + code

    @property
    def magnitude_text(self) -> str:
        low, high = self.point.ci
        return f"{self.point.change_pct:+.1f}% [{(low - 1) * 100:+.1f}%, {(high - 1) * 100:+.1f}%]"


def _left_out(row: SessionRow, median: float, include_dirty: bool) -> bool:
    return median <= 0 or (bool(row.context.dirty) and not include_dirty)


def histories(store: Store, branch: str | None, *, include_dirty: bool = False,
              chain: Sequence[str] = ()) -> list[Series]:
    """Every series of ``branch`` (None: every branch), per device, in commit order (:func:`~.model.commit_order`
    with git's first-parent ``chain`` where given), each session marked where it does not count."""
    rows = commit_order(store.sessions(branch=branch), chain)
    position = {row.id: i for i, row in enumerate(rows)}
    by_id = {row.id: row for row in rows}
    names = store.series()
    points: dict[tuple[int, str], list[tuple[int, float, float]]] = {}
    for session_id, series_id, median, mad, _ in store.points():
        row = by_id.get(session_id)
        if row is not None:
            points.setdefault((series_id, row.machine.device), []).append((position[session_id], median, mad))
    out = []
    for (series_id, device), pts in sorted(points.items(), key=lambda kv: (names[kv[0][0]].name, kv[0][1])):
        pts.sort()
        sessions = tuple(rows[p[0]] for p in pts)
        medians = tuple(p[1] for p in pts)
        left = tuple(_left_out(r, m, include_dirty) for r, m in zip(sessions, medians, strict=True))
        series = Series(names[series_id], device, sessions, medians, tuple(p[2] for p in pts), left)
        odd = outliers(_positive(series), groups=series.commits(), exclude=left) if any(m > 0 for m in medians) \
            else [False] * len(medians)
        out.append(replace(series, outlier=tuple(bool(o) for o in odd)))
    return out


def _positive(series: Series) -> list[float]:
    """The medians with each one of 0 ms (left out) replaced by a positive stand-in, as the detector needs."""
    stand_in = next((m for m in series.medians if m > 0), 1.0)
    return [m if m > 0 else stand_in for m in series.medians]


def _group(row: SessionRow) -> str:
    """The commit of a session (a session of an unknown commit is a commit of its own)."""
    return row.context.commit or f"session:{row.uid}"


def _near(one: Series, cp: ChangePoint, firsts: list[int]) -> str:
    """A machine change within REPORT_REACH commits of ``cp`` that it was not placed on, as ``cause_text`` says it
    (``firsts``: the index of each commit's first session)."""
    at = firsts.index(cp.index)
    around = range(max(at - REPORT_REACH, 1), min(at + REPORT_REACH + 1, len(firsts)))
    for k in sorted(around, key=lambda k: abs(k - at)):
        changed = one.sessions[firsts[k] - 1].machine.changes(one.sessions[firsts[k]].machine)
        if changed and k != at:
            return f"{abs(k - at)} commit(s) {'before' if k < at else 'after'} ({'; '.join(changed)})"
    return ""


def changes(store: Store, branch: str | None, *, series: Sequence[Series] | None = None,
            include_dirty: bool = False, chain: Sequence[str] = ()) -> list[Change]:
    """The change points of every series of ``branch`` (of ``series`` where given: what :func:`histories` read
    already), acknowledged ones marked."""
    acks = {(a.series, a.device, a.session_uid): a for a in store.acks()}
    found: list[Change] = []
    for one in histories(store, branch, include_dirty=include_dirty, chain=chain) if series is None else series:
        commits = one.commits()
        classes = [row.machine.machine_class for row in one.sessions]
        detection = analyse(_positive(one), groups=commits, classes=classes, exclude=list(one.left_out) or None)
        firsts = [i for i in range(len(commits)) if i == 0 or commits[i] != commits[i - 1]]
        for cp in detection.changes:
            before, after = one.sessions[cp.before_index], one.sessions[cp.index]
            ack = acks.get((one.key, one.device, after.uid))
            cause = tuple(before.machine.changes(after.machine))
            near = "" if cause else _near(one, cp, firsts)
            found.append(Change(one.key, one.device, cp, before, after, cause, ack, near, firsts.index(cp.index)))
    return found


def _places(one: Series) -> dict[str, int]:
    """Each session's commit's place in ``one`` (0 for the first commit)."""
    commits, place, k = one.commits(), {}, -1
    for i, row in enumerate(one.sessions):
        k += i == 0 or commits[i] != commits[i - 1]
        place[row.uid] = k
    return place


def unreported(found: Sequence[Change], series: Sequence[Series], reported: Sequence[Reported]) -> list[Change]:
    """The change points of ``found`` that no ``reported`` one of the same series and device lies within
    :data:`REPORT_REACH` commits of (``series``: what they were found in). A change point reported once stays
    reported while later sessions move it by a commit or two."""
    places = {(one.key, one.device): _places(one) for one in series}
    marks: dict[tuple[SeriesKey, str], list[int]] = {}
    for r in reported:
        at = places.get((r.series, r.device), {}).get(r.session_uid)
        if at is not None:
            marks.setdefault((r.series, r.device), []).append(at)
    return [c for c in found if all(abs(c.position - m) > REPORT_REACH for m in marks.get((c.series, c.device), ()))]


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
