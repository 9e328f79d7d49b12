"""Change points of a history's series (:mod:`~.timeline`), with their commit range and their cause.

A series runs across machine classes on purpose: the step that a driver, JetPack or power-mode change
causes is a change point whose cause names the fields that changed. The method is
:func:`pytest_jetmem.measure.changepoints.detect`. GPU-free and pytest-free.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from pytest_jetmem.history.context import git_output
from pytest_jetmem.history.detection_cache import DetectionCache
from pytest_jetmem.history.detections import detections
from pytest_jetmem.history.model import Ack, Reported, SeriesKey, SessionRow
from pytest_jetmem.history.store import Store
from pytest_jetmem.history.timeline import History, Series
from pytest_jetmem.measure.changepoints import ChangePoint

__all__ = ["REPORT_REACH", "Change", "analysed", "changes", "default_branch", "unreported"]


#: A change point within this many commits of one already reported (same series and device) is that one: a change
#: point's place can move by a commit or two as later sessions arrive.
REPORT_REACH = 3


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


def _near(one: Series, cp: ChangePoint, firsts: list[int]) -> str:
    """A machine change within REPORT_REACH commits of ``cp`` that it was not placed on, as ``cause_text`` says it
    (``firsts``: the index of each commit's first session)."""
    at = firsts.index(cp.index)
    around = range(max(at - REPORT_REACH, 1), min(at + REPORT_REACH + 1, len(firsts)))
    for k in sorted(around, key=lambda k: abs(k - at)):
        changed = one.session(firsts[k] - 1).machine.changes(one.session(firsts[k]).machine)
        if changed and k != at:
            return f"{abs(k - at)} commit(s) {'before' if k < at else 'after'} ({'; '.join(changed)})"
    return ""


def _firsts(commits: np.ndarray) -> list[int]:
    """The index of each commit's first session (``commits``: each session's commit number, in order)."""
    return np.flatnonzero(np.concatenate(([True], commits[1:] != commits[:-1]))).tolist() if commits.size else []


def _commit_place(firsts: Sequence[int], i: int) -> int:
    """The place of session ``i``'s commit in its series (0: the first commit; ``firsts``: :func:`_firsts`)."""
    return bisect.bisect_right(firsts, i) - 1


def analysed(history: History, *, workers: int | None = None,
             cache: DetectionCache | None = None) -> tuple[History, list[Change]]:
    """``history`` with its outlying sessions marked, and the change points of its series, acknowledged ones
    marked (:func:`~.detections.detections`: in ``workers`` processes, through ``cache``)."""
    acks = {(a.series, a.device, a.session_uid): a for a in history.acks}
    found: list[Change] = []
    marked: list[Series] = []
    causes: dict[tuple[int, int], tuple[str, ...]] = {}
    for one, detection in zip(history.series, detections(history, workers=workers, cache=cache), strict=True):
        odd = np.zeros(len(one), dtype=bool)
        odd[list(detection.outliers)] = True
        marked.append(replace(one, outlier_array=odd))
        firsts = _firsts(history.commit_numbers[one.place_array])
        for cp in detection.changes:
            before, after = one.session(cp.before_index), one.session(cp.index)
            ack = acks.get((one.key, one.device, after.uid))
            pair = (id(before.machine), id(after.machine))  # sessions of one machine class share their Machine
            if pair not in causes:
                causes[pair] = tuple(before.machine.changes(after.machine))
            cause = causes[pair]
            near = "" if cause else _near(one, cp, firsts)
            found.append(Change(one.key, one.device, cp, before, after, cause, ack, near,
                                _commit_place(firsts, cp.index)))
    return replace(history, series=tuple(marked)), found


def changes(history: History, *, workers: int | None = None, cache: DetectionCache | None = None) -> list[Change]:
    """The change points of :func:`analysed`."""
    return analysed(history, workers=workers, cache=cache)[1]


def unreported(found: Sequence[Change], history: History, reported: Sequence[Reported]) -> list[Change]:
    """The change points of ``found`` that no ``reported`` one of the same series and device lies within
    :data:`REPORT_REACH` commits of (``history``: what they were found in). A change point reported once stays
    reported while later sessions move it by a commit or two."""
    wanted = {(r.series, r.device) for r in reported} & {(c.series, c.device) for c in found}
    series = {(one.key, one.device): one for one in history.series if (one.key, one.device) in wanted}
    firsts = {k: _firsts(history.commit_numbers[one.place_array]) for k, one in series.items()}
    marks: dict[tuple[SeriesKey, str], list[int]] = {}
    for r in reported:
        one, place = series.get((r.series, r.device)), history.place.get(r.session_uid)
        if one is None or place is None:
            continue
        at = int(np.searchsorted(one.place_array, place))
        if at < len(one) and one.place_array[at] == place:  # the session is one of the series': its commit's place
            marks.setdefault((r.series, r.device), []).append(_commit_place(firsts[(r.series, r.device)], at))
    return [c for c in found if all(abs(c.position - m) > REPORT_REACH for m in marks.get((c.series, c.device), ()))]


def default_branch(store: Store, root: Path) -> str | None:
    """The branch a history is read on unless told: git's ``origin/HEAD`` where the store has sessions of it, else
    ``main``, ``master``, else the branch with the most sessions; None: the store has no session with a branch."""
    counts = Counter(store.branches())
    remote = git_output(root, "symbolic-ref", "-q", "--short", "refs/remotes/origin/HEAD")
    candidates = [remote.split("/", 1)[-1]] if remote else []
    for name in (*candidates, "main", "master"):
        if counts.get(name):
            return name
    return counts.most_common(1)[0][0] if counts else None
