"""Change points in a series of session medians: where did a measurement step up or down, and by how much?

A series holds, in commit order, one value per pytest session: that session's median time (ms) of one measurement
on one device. :func:`analyse` (and :func:`detect`, its change points) works on **commits**: sessions of a tree with
uncommitted changes (``exclude``) and outlying sessions (:func:`outliers`: a Hampel filter that asks both sides, so a
step is never an outlier, stricter for a rerun that disagrees with its own commit) are left out, and each commit is
one point, the median of its sessions. Then two stages,
as Apache Otava (formerly Hunter) does (Fleming et al., "Hunter: Using Change Point Detection to Hunt for
Performance Regressions", ICPE 2023):

1. Candidates: PELT (Killick, Fearnhead & Eckley, "Optimal detection of changepoints with a linear computational
   cost", JASA 107(500), 2012) finds the segmentation that minimises the Gaussian change-in-mean cost (the sum of
   squared deviations from each segment's mean) plus ``penalty`` per change, on the log values divided by a robust
   noise scale sigma: 1.4826 * MAD of the first differences / sqrt(2) (the differences cancel the level, so the
   steps themselves barely move it; the standard deviation of the differences where the MAD is 0, and a floor of
   1e-9 so that identical values divide nothing by zero). The default penalty is 2 * log(n), Schwarz's criterion
   for a change in a normal mean (Yao, "Estimating the number of change-points via Schwarz' criterion", Statistics
   & Probability Letters 6(3), 1988; the "SIC" penalty of R's ``changepoint``): the t-test below decides, so the
   penalty only has to keep the candidates few. Interior segments hold at least ``min_size`` commits (one odd
   commit is not a step); the newest at least 2: no change rests on the newest commit alone, which one session
   cannot tell from an outlier.
2. Confirmation: each candidate is kept where the pooled-variance two-sample Student t-test on the log values
   either side of it (back to the previous and on to the next candidate, at most ``window`` commits each side)
   gives p < ``alpha``, robust to one point either side whichever way it lies: each side less its point farthest
   from its median where that lies more than 4 noise scales out (one that would inflate the variance and hide a
   change), and again less the point of each side that most favours the change (the newest side only where it
   holds 2), the larger p deciding. On plain noise nothing is trimmed, so the test keeps its level. As in Otava, the
   weakest candidate (largest p) that fails is removed and its neighbours are tested again over their widened
   sides, until every remaining candidate passes. A change within ``reach`` commits of a machine-class boundary
   (``classes``) is then placed on it where the data allow: the boundary lies in the change's 99.9% confidence set
   for its place and the change is still confirmed there.

Measured by benchmarks/history_gate_study.py (log-normal session noise, 1000 commits, 10% of commits rerun, 1% or
5% of sessions x1.2 to x3): no single session, of any size, anywhere, hides, makes or moves a change point (tested
as a property); 0 false change points per 1000 commits at 0.5-1% noise with 1% outliers; +3% within 5 commits
95.5-100%, +5% within 3 99-100%, +10% by the second commit after it 99-100% at <= 1% noise; docs/history.md has
the tables, side by side with asv and Otava.

:func:`pelt` is the plain PELT on the values as given (no log, no scaling), the same segmentation as the reference
implementation ``ruptures`` (``Pelt(model="l2", min_size=m, jump=1)``). Pure numpy and ``math``; no scipy.

Hand-written, not ruptures: it needs scipy (no dependency here), its PELT is pure Python (9.6 s against 0.03 s here,
one series of 1000 points) and it has neither per-commit starts (``allowed``) nor a shorter newest segment.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from pytest_jetmem.measure.stats import MAD_TO_SIGMA, student_t_ppf, student_t_sf2

__all__ = ["CONFIDENCE", "ChangePoint", "Detection", "analyse", "default_penalty", "detect", "outliers", "pelt"]

#: The confidence of :attr:`ChangePoint.ci`.
CONFIDENCE = 0.99
#: The noise scale's floor (log units), so that a series of identical values divides nothing by zero.
_SIGMA_FLOOR = 1e-9
#: Spread (relative to the log values' size) below which a side is taken as exactly constant.
_EXACT = 1e-12
#: A side of the confirming test of at least this many points is tested less its most extreme point, where that lies
#: more than this many noise scales from the side's median.
_TRIM_FROM = 4
_EXTREME_Z = 4.0
#: Outlier sessions: the neighbours looked at on each side, and how far (in standard deviations of the difference
#: between a session and its neighbours' median) a session must lie from both sides' medians.
_OUTLIER_REACH = 5
_OUTLIER_Z = 5.0
#: A rerun (a commit's session beside others) that disagrees with its commit's other sessions is an outlier where it
#: lies this many standard deviations from both sides' medians (on the same side), not ``_OUTLIER_Z``: its own
#: commit already says it is not that commit's level.
_RERUN_Z = 3.0
#: The longest run of consecutive sessions that can be outliers: one more is a segment (interior segments of
#: :func:`detect`'s default ``min_size``, 3, are steps or excursions of their own).
_OUTLIER_RUN = 2


@dataclass(frozen=True)
class ChangePoint:
    """A confirmed step between the points before ``index`` and the points from ``index`` on (ratios after / before).

    The sides reach back to the previous and on to the next change point, at most ``window`` points each.
    """

    index: int  # the first point after the change
    before_ms: float  # the median of the points before
    after_ms: float  # the median of the points after
    ratio: float  # after / before: exp of the difference of the log means
    ci: tuple[float, float]  # its 99% interval (t interval on the log means, pooled variance)
    p_value: float  # two-sided; the larger of the t-test's on the sides and on the sides less their strongest point
    n_before: int  # commits
    n_after: int
    before_index: int = -1  # the last counted point before the change (index - 1 where every point counts)

    @property
    def change_pct(self) -> float:
        """The step in percent (+8.3 is 8.3% slower after the change)."""
        return (self.ratio - 1.0) * 100.0


# -- PELT ------------------------------------------------------------------------------------------------------


def _finite_1d(values: Sequence[float] | np.ndarray, what: str) -> np.ndarray:
    """``values`` as a 1-D float64 array; ValueError naming the first value that is not finite."""
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"{what}[{int(bad[0])}] = {float(arr[bad[0]])!r}: expected a finite number")
    return arr


def _allowed_mask(allowed: Sequence[bool] | np.ndarray | None, n: int) -> np.ndarray:
    """``allowed`` as a bool array of length ``n`` (all True for None); ValueError for another length."""
    if allowed is None:
        return np.ones(n, dtype=bool)
    mask = np.asarray(allowed, dtype=bool).reshape(-1)
    if mask.size != n:
        raise ValueError(f"allowed has {mask.size} entries, expected one per value ({n})")
    return mask


def _check_pelt_args(penalty: float, min_size: int) -> None:
    if not (math.isfinite(penalty) and penalty >= 0):
        raise ValueError(f"penalty must be finite and >= 0, got {penalty!r}")
    if isinstance(min_size, bool) or not isinstance(min_size, (int, np.integer)) or min_size < 1:
        raise ValueError(f"min_size must be an integer >= 1, got {min_size!r}")


class _Pelt:
    """The PELT recursion over prefix sums: ``f[t]`` is the optimal penalised cost of ``x[:t]`` (inf where none).

    The admissible starts s are kept in the rows of one buffer (s; f[s] - S2[s] + penalty; S1[s], with S1 and S2
    the prefix sums of x and x^2), so that one step is a handful of numpy calls on contiguous slices.
    """

    def __init__(self, x: np.ndarray, penalty: float, min_size: int, allowed: np.ndarray) -> None:
        c = x - x.mean()  # the cost is shift-invariant; centring keeps the prefix sums small
        self.s1: list[float] = np.concatenate(([0.0], np.cumsum(c))).tolist()
        self.s2: list[float] = np.concatenate(([0.0], np.cumsum(c * c))).tolist()
        self.n, self.pen, self.min_size, self.allowed = x.size, penalty, min_size, allowed.tolist()
        self.f = [0.0] + [math.inf] * self.n
        self.back = [0] * (self.n + 1)
        self.buf = np.empty((3, self.n + 1), dtype=np.float64)
        self.pos, self.a, self.b = self.buf  # views of its rows
        self.k = 0

    def _admit(self, s: int) -> None:
        """Add start s (where a partition of x[:s] exists) to the admissible starts."""
        fs = self.f[s]
        if fs < math.inf:
            k = self.k
            self.pos[k], self.a[k], self.b[k] = s, fs - self.s2[s] + self.pen, self.s1[s]
            self.k = k + 1

    def _best(self, t: int) -> tuple[np.ndarray, float]:
        """Set f[t] and back[t] from the admissible starts; return their totals less S2[t], and the least."""
        k = self.k
        tot = np.subtract(self.s1[t], self.b[:k])
        np.multiply(tot, tot, out=tot)
        np.divide(tot, np.subtract(t, self.pos[:k]), out=tot)
        np.subtract(self.a[:k], tot, out=tot)  # f[s] + cost(x[s:t]) + penalty - S2[t]
        j = int(tot.argmin())  # the first of equal minima: the earliest start, as ruptures
        best = float(tot[j])
        self.f[t] = best + self.s2[t]
        self.back[t] = int(self.pos[j])
        return tot, best

    def _prune(self, tot: np.ndarray, limit: float) -> None:
        """Drop the starts whose total is above f[t] + penalty (Killick's rule with K = 0, as ruptures)."""
        if np.maximum.reduce(tot) > limit:
            keep = tot <= limit
            k = int(np.count_nonzero(keep))
            self.buf[:, :k] = self.buf[:, : self.k][:, keep]
            self.k = k

    def run(self) -> None:
        """Fill f[t] for every allowed end t < n."""
        m, allowed = self.min_size, self.allowed
        for t in range(m, self.n):
            self._admit(t - m)
            if allowed[t] and self.k:
                tot, best = self._best(t)
                self._prune(tot, best + self.pen)

    def finish(self, min_last: int) -> list[int]:
        """The change indices of the optimal partition of the whole series, whose last segment has ``min_last``+."""
        n = self.n
        for s in range(max(n - self.min_size, 0), n - min_last + 1):
            self._admit(s)
        if not self.k:
            return []
        self._best(n)
        out: list[int] = []
        t = int(self.back[n])
        while t > 0:
            out.append(t)
            t = int(self.back[t])
        return out[::-1]


def _pelt(x: np.ndarray, penalty: float, min_size: int, allowed: np.ndarray, min_last: int) -> list[int]:
    """PELT on ``x`` with interior segments of ``min_size``+ points and a last one of ``min_last``+ points."""
    if x.size < 2:
        return []
    run = _Pelt(x, penalty, min_size, allowed)
    run.run()
    return run.finish(min_last)


def pelt(
    values: Sequence[float] | np.ndarray,
    penalty: float,
    min_size: int = 1,
    allowed: Sequence[bool] | np.ndarray | None = None,
) -> list[int]:
    """Change indices (the first index of each new segment, ascending, without 0 and n) minimising the sum over
    segments of the squared deviations from the segment mean, plus ``penalty`` per change (PELT, Killick et al.
    2012, with ruptures' pruning rule: the same breakpoints as ``ruptures.Pelt(model="l2", min_size=min_size,
    jump=1)``, less its final n).

    Every segment has at least ``min_size`` points; ``allowed`` (one bool per value) lets index i start a segment
    only where ``allowed[i]`` (``allowed[0]`` is not read). A series shorter than ``2 * min_size`` has no change.
    With ``min_size`` 1 the pruning is exact (the optimum); above, Killick's pruning argument does not hold for
    ends less than ``min_size`` past the pruning point, and at penalties near the noise variance the result is at
    times ruptures' rather than the optimum (random series with unit noise: 11-16% of them at penalty 0.5, 3% at 2,
    none at 5 and above; :func:`detect`'s penalties are above 5 from 13 points on).
    ValueError for a value that is not finite, a ``penalty`` not finite and >= 0, ``min_size`` < 1 or an
    ``allowed`` of another length.
    """
    _check_pelt_args(penalty, min_size)
    x = _finite_1d(values, "values")
    return _pelt(x, float(penalty), int(min_size), _allowed_mask(allowed, x.size), int(min_size))


# -- detect ----------------------------------------------------------------------------------------------------


def default_penalty(n: int) -> float:
    """The default penalty of :func:`detect` for ``n`` points, in units of the noise variance: 2 * log(n)."""
    return 2.0 * math.log(max(n, 2))


def _durations(values: Sequence[float] | np.ndarray) -> np.ndarray:
    """``values`` as a float64 array; ValueError naming the first one that is not a finite time > 0."""
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    bad = np.flatnonzero(~(np.isfinite(arr) & (arr > 0)))
    if bad.size:
        i = int(bad[0])
        raise ValueError(f"values[{i}] = {float(arr[i])!r}: expected a finite time in ms > 0")
    return arr


def _relative_logs(y: np.ndarray) -> np.ndarray:
    """log(y / median(y)): scaling every value by a power of 2 changes no bit of it (log y - log median where the
    quotient leaves the range of floats)."""
    med = float(np.median(y))
    with np.errstate(over="ignore", under="ignore"):
        rel: np.ndarray = y / med
    logs: np.ndarray = np.log(rel) if np.all(np.isfinite(rel) & (rel > 0)) else np.log(y) - math.log(med)
    return logs


def _commit_starts(groups: Sequence[object] | None, n: int) -> np.ndarray:
    """allowed[i]: point i is the first of its commit (differs from point i - 1); all True without groups."""
    if groups is None:
        return np.ones(n, dtype=bool)
    g = list(groups)
    if len(g) != n:
        raise ValueError(f"groups has {len(g)} entries, expected one commit per value ({n})")
    return np.array([True] + [bool(g[i] != g[i - 1]) for i in range(1, n)], dtype=bool)


def _check_detect_args(alpha: float, min_size: int, window: int, penalty: float | None) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    for name, v in (("min_size", min_size), ("window", window)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    if penalty is not None and not (math.isfinite(penalty) and penalty > 0):
        raise ValueError(f"penalty must be None or finite and > 0, got {penalty!r}")


def _noise_sigma(logs: np.ndarray) -> float:
    """Robust noise scale of the log values: 1.4826 * MAD of the first differences / sqrt(2), floored."""
    diffs = np.diff(logs)
    if diffs.size == 0:
        return _SIGMA_FLOOR
    sigma = MAD_TO_SIGMA * float(np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2.0)
    if sigma <= 0:  # quantised values: most differences are 0
        sigma = float(np.std(diffs)) / math.sqrt(2.0)
    return max(sigma, _SIGMA_FLOOR)


def _exp(x: float) -> float:
    """``e ** x``, inf where that overflows."""
    return math.exp(x) if x < 709.0 else math.inf


@functools.lru_cache(maxsize=256)
def _t_quantile(df: int) -> float:
    return student_t_ppf(0.5 + CONFIDENCE / 2.0, float(df))


def _less_strongest(a: np.ndarray, b: np.ndarray, d: float, newest: bool) -> tuple[np.ndarray, np.ndarray]:
    """``a`` and ``b``, each side of 2+ points less the point that most favours the change ``d`` (for d >= 0: the
    lowest of ``a``, the highest of ``b``); a side of the ``newest`` points only where it holds 2 (one of 3+ is
    tested less its most extreme point instead: :func:`_less_extreme`), so that no change rests on its newest
    point."""
    sign = 1.0 if d >= 0 else -1.0
    if a.size >= 2:
        a = np.delete(a, int(np.argmin(sign * a)))
    if b.size == 2 or (b.size > 2 and not newest):
        b = np.delete(b, int(np.argmax(sign * b)))
    return a, b


def _less_extreme(side: np.ndarray, sigma: float, newest: bool = False) -> np.ndarray:
    """``side`` less its point farthest from its median where that lies more than :data:`_EXTREME_Z` noise scales
    ``sigma`` from it and the side holds :data:`_TRIM_FROM`+ points (3+ for the side of the ``newest`` points): an
    outlying point that would inflate the side's variance, or make a short newest side; as it is otherwise (on
    plain noise nothing is trimmed, so the test keeps its level)."""
    if side.size < (3 if newest else _TRIM_FROM):
        return side
    dev = np.abs(side - np.median(side))
    far = int(np.argmax(dev))
    return np.delete(side, far) if dev[far] > _EXTREME_Z * sigma else side


@dataclass(frozen=True)
class _TTest:
    """The pooled-variance two-sample t-test of ``b`` - ``a`` (log values): difference, standard error, df, p."""

    d: float
    se: float
    df: int
    p: float

    @classmethod
    def plain(cls, a: np.ndarray, b: np.ndarray) -> _TTest:
        """The test on the sides as they are."""
        ma, mb = float(a.mean()), float(b.mean())
        d, df = mb - ma, a.size + b.size - 2
        if df < 1:
            return cls(d, math.inf, 0, 1.0)
        ss = float(np.sum((a - ma) ** 2) + np.sum((b - mb) ** 2))
        se = math.sqrt(ss / df * (1.0 / a.size + 1.0 / b.size))
        scale = _EXACT * (1.0 + abs(ma) + abs(mb))
        if se <= scale:  # both sides exactly constant: an exact step, or none
            return cls(d, 0.0, df, 1.0 if abs(d) <= scale else 0.0)
        return cls(d, se, df, student_t_sf2(d / se, float(df)))

    @classmethod
    def of(cls, a: np.ndarray, b: np.ndarray, newest: bool, sigma: float) -> _TTest:
        """The test on the sides each less its most extreme point (:func:`_less_extreme`), with p the larger of its
        own and that of the sides less the point of each that most favours the change: one point on either side,
        whichever way it lies, can neither inflate the variance enough to hide a change nor make one (``sigma``: the
        series' noise scale, :func:`_noise_sigma`)."""
        a, b = _less_extreme(a, sigma), _less_extreme(b, sigma, newest)
        robust = cls.plain(a, b)
        favour = cls.plain(*_less_strongest(a, b, robust.d, newest))
        return replace(robust, p=max(robust.p, favour.p))

    def ci(self) -> tuple[float, float]:
        """The interval of exp(d) at :data:`CONFIDENCE`."""
        if self.df < 1:
            return 0.0, math.inf
        half = _t_quantile(self.df) * self.se
        return _exp(self.d - half), _exp(self.d + half)


class _Sides:
    """The points either side of each change: back to the previous change and on to the next, at most ``window``."""

    def __init__(self, logs: np.ndarray, window: int) -> None:
        self.logs, self.window, self._cache = logs, window, dict[tuple[int, int, int], _TTest]()
        self.sigma = _noise_sigma(logs)

    def bounds(self, changes: Sequence[int], k: int) -> tuple[int, int, int]:
        """(lo, index, hi) of the k-th change: its sides are [lo, index) and [index, hi)."""
        i = changes[k]
        prev = changes[k - 1] if k > 0 else 0
        nxt = changes[k + 1] if k + 1 < len(changes) else self.logs.size
        return max(prev, i - self.window), i, min(nxt, i + self.window)

    def test(self, changes: Sequence[int], k: int) -> _TTest:
        key = self.bounds(changes, k)
        if key not in self._cache:
            lo, i, hi = key
            self._cache[key] = _TTest.of(self.logs[lo:i], self.logs[i:hi], hi == self.logs.size, self.sigma)
        return self._cache[key]


def _confirm(sides: _Sides, candidates: list[int], alpha: float) -> list[int]:
    """The candidates left after removing, one at a time, the one with the largest p while that p is >= alpha."""
    kept = list(candidates)
    while kept:
        ps = [sides.test(kept, k).p for k in range(len(kept))]
        worst = int(np.argmax(ps))
        if ps[worst] < alpha:
            break
        del kept[worst]
    return kept


#: How much worse (in units of the noise variance) the least-squares fit of a change placed on a machine-class
#: boundary may be than that of the place found: the 99.9% quantile of chi-squared with one degree of freedom, so
#: the boundary is within the change's 99.9% confidence set for its place (the profile likelihood's).
_PLACE_SLACK = 10.83


def _split_cost(x: np.ndarray, i: int) -> float:
    """The squared deviations of ``x[:i]`` and ``x[i:]`` from their means."""
    return float(np.sum((x[:i] - x[:i].mean()) ** 2) + np.sum((x[i:] - x[i:].mean()) ** 2))


def _snap(sides: _Sides, kept: list[int], boundaries: Sequence[int], alpha: float, reach: int,
          sigma: float) -> list[int]:
    """``kept`` with each change moved onto a machine-class boundary within ``reach`` points of it where the data
    allow it: the fit with the change there is within :data:`_PLACE_SLACK` noise variances of the fit where it was
    found (over the points either side), and the change there (and its neighbours) is still confirmed (p <
    ``alpha``). A known cause is then the likelier one."""
    for k in range(len(kept)):
        i = kept[k]
        for b in sorted((b for b in boundaries if 0 < abs(b - i) <= reach and b not in kept), key=lambda b: abs(b - i)):
            trial = sorted([*kept[:k], b, *kept[k + 1:]])
            if trial.index(b) != k:
                continue  # it would pass a neighbouring change
            lo, _, hi = sides.bounds(kept, k)
            x = sides.logs[lo:hi]
            if min(b, i) - lo < 1 or hi - max(b, i) < 1:
                continue
            if (_split_cost(x, b - lo) - _split_cost(x, i - lo)) / sigma**2 > _PLACE_SLACK:
                continue
            if all(sides.test(trial, j).p < alpha for j in range(max(k - 1, 0), min(k + 2, len(trial)))):
                kept = trial
                break
    return kept


@dataclass(frozen=True)
class _Commits:
    """The series as one point per commit: the median of its sessions that count, and where each commit's
    sessions sit in the input (the first session, the last counted one)."""

    logs: np.ndarray
    ms: np.ndarray  # the same medians in ms
    first: np.ndarray  # input index of each commit's first session
    last: np.ndarray  # input index of each commit's last counted session
    boundary: np.ndarray  # bool: the commit's machine class differs from the previous commit's


def _runs(groups: Sequence[object] | None, n: int) -> list[tuple[int, int]]:
    """[start, end) of each run of equal neighbours in ``groups`` (each point its own run without groups)."""
    starts = np.flatnonzero(_commit_starts(groups, n)).tolist()
    return list(zip(starts, [*starts[1:], n], strict=True))


def _commits(y: np.ndarray, logs: np.ndarray, runs: Sequence[tuple[int, int]], use: np.ndarray,
             classes: Sequence[object] | None) -> _Commits:
    """One point per commit that has a counted session (``use``): the median of its counted sessions."""
    starts = np.fromiter((r[0] for r in runs), dtype=np.intp, count=len(runs))
    commit_of = np.repeat(np.arange(len(runs)), np.diff(np.append(starts, y.size)))
    idx = np.flatnonzero(use)
    owners = commit_of[idx]
    keep, first_pos, counts = np.unique(owners, return_index=True, return_counts=True)
    points, ms = logs[idx[first_pos]].copy(), y[idx[first_pos]].copy()
    for j in np.flatnonzero(counts > 1).tolist():  # commits of several sessions (reruns): their median
        members = idx[first_pos[j]: first_pos[j] + counts[j]]
        points[j], ms[j] = float(np.median(logs[members])), float(np.median(y[members]))
    last = idx[first_pos + counts - 1]
    if classes is None:
        boundary = np.zeros(keep.size, dtype=bool)
    else:
        cls = [classes[int(i)] for i in idx[first_pos]]
        boundary = np.array([False] + [cls[j] != cls[j - 1] for j in range(1, len(cls))], dtype=bool)
    return _Commits(points, ms, starts[keep], last, boundary)


def _side_medians(x: np.ndarray, reach: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For each point: the median of the ``reach`` points before it and of the ``reach`` after it (NaN where there
    are none), and how many each holds."""
    n = x.size
    counts = np.arange(n)
    n_before, n_after = np.minimum(counts, reach), np.minimum(counts[::-1], reach)
    before, after = np.full(n, np.nan), np.full(n, np.nan)
    if n > reach:  # whole windows: one vectorised median each
        windows = np.lib.stride_tricks.sliding_window_view(x, reach)
        before[reach:] = np.median(windows[: n - reach], axis=1)
        after[: n - reach] = np.median(windows[1:], axis=1)
    for i in range(min(reach, n)):  # the first and last points, with fewer neighbours one side
        if i > 0:
            before[i] = np.median(x[:i])
        j = n - 1 - i
        if i > 0 and j >= 0:
            after[j] = np.median(x[j + 1:])
    return before, after, n_before, n_after


def _short_runs(flags: np.ndarray, longest: int) -> np.ndarray:
    """``flags`` with every run of more than ``longest`` consecutive True cleared (a run that long is a segment
    of its own, an excursion the change points judge, not outliers)."""
    edges = np.diff(np.concatenate(([0], flags.astype(np.int8), [0])))
    out: np.ndarray = flags.copy()
    for start, end in zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist(), strict=True):
        if end - start > longest:
            out[start:end] = False
    return out


def outliers(values: Sequence[float] | np.ndarray, *, groups: Sequence[object] | None = None,
             exclude: Sequence[bool] | np.ndarray | None = None) -> np.ndarray:
    """One bool per value: an outlying session, left out of change points (``exclude``d values never are).

    A session is one where it lies more than ``_OUTLIER_Z`` standard deviations (of its difference from a
    neighbours' median, the noise scale as in :func:`detect`) from the median of the ``_OUTLIER_REACH`` counted
    sessions before it **and**, on the same side, from that of those after it (a Hampel filter asking both sides):
    at a step the sessions after it agree with their successors, so a step is never an outlier. The sessions of
    the newest commit are never outliers: nothing after them yet says they are not a step. The first sessions,
    with nothing before them, are judged by those after. A run of more than ``_OUTLIER_RUN`` such sessions in a
    row is no outlier but an excursion, judged as a segment. A rerun is judged more strictly (``_RERUN_Z``) where
    its commit's sessions disagree: its own commit already says it is not that commit's level
    (:func:`_reruns_disagreeing`). ValueError as :func:`detect`.
    """
    y = _durations(values)
    skip = _allowed_mask(exclude, y.size) if exclude is not None else np.zeros(y.size, dtype=bool)
    out = np.zeros(y.size, dtype=bool)
    counted = np.flatnonzero(~skip)
    if counted.size < 3:
        return out
    logs = _relative_logs(y[counted])
    sigma = _noise_sigma(logs)
    before, after, n_before, n_after = _side_medians(logs, _OUTLIER_REACH)
    spread_b = _OUTLIER_Z * sigma * np.sqrt(1.0 + math.pi / (2.0 * np.maximum(n_before, 1)))
    spread_a = _OUTLIER_Z * sigma * np.sqrt(1.0 + math.pi / (2.0 * np.maximum(n_after, 1)))
    dev_b, dev_a = logs - before, logs - after
    with np.errstate(invalid="ignore"):
        both = (dev_b * dev_a > 0) & (np.abs(dev_b) > spread_b) & (np.abs(dev_a) > spread_a)
        first = (n_before == 0) & (np.abs(dev_a) > spread_a)
    odd = _short_runs(np.where(n_before > 0, both, first) & (n_after > 0), _OUTLIER_RUN)
    runs = _runs(groups, y.size)
    newest = np.zeros(y.size, dtype=bool)
    newest[runs[-1][0]:] = True
    in_newest = newest[counted]
    out[counted] = odd & ~in_newest
    out[counted[_newest_disagreeing(logs, in_newest, before, spread_b)]] = True
    owner = np.repeat(np.arange(len(runs)), [end - start for start, end in runs])[counted]
    scale = _RERUN_Z / _OUTLIER_Z
    spreads = (scale * spread_b, scale * spread_a)
    out[counted[_reruns_disagreeing(logs, owner, in_newest, (before, after), spreads)]] = True
    return out


def _reruns_disagreeing(logs: np.ndarray, owner: np.ndarray, in_newest: np.ndarray,
                        levels: tuple[np.ndarray, np.ndarray], spreads: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The positions (in ``logs``) of an older commit's sessions left out where its sessions disagree (lie more
    than the spread apart): those beyond the spread from the median of the sessions before the commit **and**, on the
    same side, from that of the sessions after it, but the one nearest them, and at most half of the commit's. A
    rerun that reads unlike its own commit and both its neighbours cannot move the commit's median, so one session
    can make no change (``owner``: each session's commit; ``levels``/``spreads``: each session's before and after
    medians and spreads)."""
    (before, after), (spread_b, spread_a) = levels, spreads
    bounds = np.flatnonzero(np.diff(owner)) + 1
    chosen: list[int] = []
    for start, end in zip([0, *bounds.tolist()], [*bounds.tolist(), owner.size], strict=True):
        if end - start < 2 or in_newest[start]:
            continue
        level_b, level_a = before[start], after[end - 1]
        s_b, s_a = spread_b[start], spread_a[end - 1]
        x = logs[start:end]
        if np.ptp(x) <= min(s_b, s_a) or np.isnan(level_a):  # the sessions agree
            continue
        dev_b, dev_a = x - level_b, x - level_a
        far = np.abs(dev_a) > s_a
        if not np.isnan(level_b):
            far &= (dev_b * dev_a > 0) & (np.abs(dev_b) > s_b)
        far[int(np.argmin(np.abs(dev_a) + np.nan_to_num(np.abs(dev_b))))] = False
        if 2 * int(far.sum()) <= far.size:  # never the commit's majority: that is its level, its neighbours' news
            chosen.extend((start + np.flatnonzero(far)).tolist())
    return np.asarray(chosen, dtype=np.intp)


def _newest_disagreeing(logs: np.ndarray, in_newest: np.ndarray, before: np.ndarray, spread: np.ndarray) -> np.ndarray:
    """The positions (in ``logs``) of the newest commit's sessions left out where its sessions disagree: all but the
    one nearest the level before it that lie beyond ``spread`` from it. Until the next commit says which of them is
    the commit's level, the one that changes least is taken (no change rests on one session)."""
    idx = np.flatnonzero(in_newest)
    if idx.size < 2 or np.isnan(before[idx[0]]):
        return np.empty(0, dtype=np.intp)
    level = before[idx[0]]  # the median of the sessions before the newest commit
    dev = np.abs(logs[idx] - level)
    far = dev > spread[idx[0]]
    far[int(np.argmin(dev))] = False
    if np.ptp(logs[idx]) <= spread[idx[0]]:  # the sessions agree: a step (or none), not outliers
        return np.empty(0, dtype=np.intp)
    chosen: np.ndarray = idx[far]
    return chosen


@dataclass(frozen=True)
class Detection:
    """What :func:`analyse` found: the change points (oldest first) and the sessions it left out as outliers."""

    changes: tuple[ChangePoint, ...]
    outliers: tuple[int, ...]  # input indices


def analyse(
    values: Sequence[float] | np.ndarray,
    *,
    groups: Sequence[object] | None = None,
    classes: Sequence[object] | None = None,
    exclude: Sequence[bool] | np.ndarray | None = None,
    alpha: float = 0.001,
    min_size: int = 3,
    window: int = 30,
    penalty: float | None = None,
    reach: int = 3,
) -> Detection:
    """The change points of a series of session medians (ms, in commit order) and its outlying sessions.

    ``groups`` holds each point's commit (equal neighbours are one commit), ``classes`` each point's machine class
    (a change within ``reach`` commits of a class boundary is placed on it where the data allow), ``exclude`` the
    points not to count (dirty sessions). Outlying sessions (:func:`outliers`) are left out; each commit is one
    point, the median of its sessions that count. Candidates come from PELT on the commits' log values scaled by
    their robust noise scale, with ``penalty`` per change in units of the noise variance (default
    :func:`default_penalty`), interior segments of ``min_size``+ commits and a newest segment of 2+ (no change rests
    on one commit); each is kept where the t-test of its sides (at most ``window`` commits each), robust to one
    point either side (see the module docstring), gives p < ``alpha``. A change point's ``index`` is the first
    session of the first commit after it, ``before_index`` the last counted session before it.
    ValueError as :func:`detect`.
    """
    _check_detect_args(alpha, min_size, window, penalty)
    y = _durations(values)
    if y.size < 2:
        _commit_starts(groups, y.size)  # ValueError for groups of another length
        return Detection((), ())
    runs = _runs(groups, y.size)
    if classes is not None and len(classes) != y.size:
        raise ValueError(f"classes has {len(classes)} entries, expected one machine class per value ({y.size})")
    skip = _allowed_mask(exclude, y.size) if exclude is not None else np.zeros(y.size, dtype=bool)
    odd = outliers(y, groups=groups, exclude=skip if exclude is not None else None)
    logs = _relative_logs(y)
    commits = _commits(y, logs, runs, ~(skip | odd), classes)
    found = _detect_commits(commits.logs, commits.boundary, alpha, int(min_size), int(window), penalty, reach)
    changes = tuple(replace(cp, index=int(commits.first[cp.index]), before_index=int(commits.last[cp.index - 1]),
                            before_ms=float(np.median(commits.ms[cp.index - cp.n_before:cp.index])),
                            after_ms=float(np.median(commits.ms[cp.index:cp.index + cp.n_after])))
                    for cp in found)
    return Detection(changes, tuple(int(i) for i in np.flatnonzero(odd)))


def _detect_commits(logs: np.ndarray, boundary: np.ndarray, alpha: float, min_size: int, window: int,
                    penalty: float | None, reach: int) -> list[ChangePoint]:
    """The change points of one point per commit (log values); indices are commits, before_ms/after_ms unset."""
    n = logs.size
    if n < 2:
        return []
    z = logs / _noise_sigma(logs)
    beta = default_penalty(n) if penalty is None else float(penalty)
    candidates = _pelt(z, beta, min_size, np.ones(n, dtype=bool), 2)
    sides = _Sides(logs, window)
    kept = _confirm(sides, candidates, alpha)
    if reach > 0 and boundary.any():
        kept = _snap(sides, kept, np.flatnonzero(boundary).tolist(), alpha, reach, sides.sigma)
    out = []
    for k in range(len(kept)):
        lo, i, hi = sides.bounds(kept, k)
        tt = sides.test(kept, k)
        out.append(ChangePoint(index=i, before_ms=math.nan, after_ms=math.nan,
                               ratio=_exp(tt.d), ci=tt.ci(), p_value=tt.p, n_before=i - lo, n_after=hi - i,
                               before_index=i - 1))
    return out


def detect(
    values: Sequence[float] | np.ndarray,
    *,
    groups: Sequence[object] | None = None,
    alpha: float = 0.001,
    min_size: int = 3,
    window: int = 30,
    penalty: float | None = None,
) -> list[ChangePoint]:
    """The confirmed change points of a series of session medians (ms, in commit order), oldest first: the
    changes of :func:`analyse` (outlying sessions left out, one point per commit). Fewer than 2 points: [].
    ValueError for a value that is not a finite time > 0 (naming its position), ``groups`` of another length,
    ``alpha`` outside (0, 1), ``min_size`` or ``window`` < 1, or a ``penalty`` not finite and > 0.
    """
    return list(analyse(values, groups=groups, alpha=alpha, min_size=min_size, window=window,
                        penalty=penalty).changes)
