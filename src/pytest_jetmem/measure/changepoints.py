"""Change points in a series of session medians: where did a measurement step up or down, and by how much?

A series holds, in commit order, one point per pytest session: that session's median time (ms) of one
measurement on one device. Sessions are the unit of noise (as in
:func:`pytest_jetmem.measure.compare.compare_sessions`); several sessions of one commit are separate points, but a
change can only sit between two commits. :func:`detect` works in two stages, as Apache Otava (formerly Hunter) does
(Fleming et al., "Hunter: Using Change Point Detection to Hunt for Performance Regressions", ICPE 2023):

1. Candidates: PELT (Killick, Fearnhead & Eckley, "Optimal detection of changepoints with a linear computational
   cost", JASA 107(500), 2012) finds the segmentation that minimises the Gaussian change-in-mean cost (the sum of
   squared deviations from each segment's mean) plus ``penalty`` per change, on the log values divided by a robust
   noise scale sigma: 1.4826 * MAD of the first differences / sqrt(2) (the differences cancel the level, so the
   steps themselves barely move it; the standard deviation of the differences where the MAD is 0, and a floor of
   1e-9 so that identical values divide nothing by zero). The default penalty is 2 * log(n), Schwarz's criterion
   for a change in a normal mean (Yao, "Estimating the number of change-points via Schwarz' criterion", Statistics
   & Probability Letters 6(3), 1988; the "SIC" penalty of R's ``changepoint``): the t-test below decides, so the
   penalty only has to keep the candidates few, and 3 * log(n) (the modified BIC) let 1.4% of 3% steps five
   sessions long at 1% noise go by without a candidate. Interior segments hold at least ``min_size`` points (one
   outlier session is not a step); the last segment may hold one, so that a large step is seen at the first commit
   after it.
2. Confirmation: each candidate is kept where the pooled-variance two-sample Student t-test on the log values
   either side of it (back to the previous and on to the next candidate, at most ``window`` points each side)
   gives p < ``alpha``, both as they are and without the one point of each side that most favours the change
   (the larger p counts): no change in the history rests on one outlying session, which heavy-tailed noise
   otherwise turns into a short up-and-down pair. The side that holds the newest points is kept whole, so that a
   step is seen as soon as it appears. As in Otava, the weakest candidate (largest p) that fails is removed and
   its neighbours are tested again over their widened sides, until every remaining candidate passes.

Measured with the defaults on synthetic series of 1000 points ("within k": on the series cut k points after a step
at point 500, the newest change point is at 500 +- 1). Log-normal noise of 1%: 0.02 false change points per
series (the same at 0.5%: with no step, all of this is scale-free); a 10% step seen at the first point after it in
99.9% of series, 5% within 3 points in 99.8%, 3% within 5 points in 95-96% (99% within +- 5: the least-squares
placement of a 3-sigma step five points long is 2+ points off in about 4% of series). Student t noise (3 degrees of
freedom): 0.25 false change points per series; with the t scaled to a standard deviation of 1%, 10% / 5% / 3%
steps seen in 97.5% / 97.5% / 93.5%. One extreme newest session (heavy tails) is reported as a change until the
next sessions show it was none. 200 series of 1000 points take about 2 s on one core.

:func:`pelt` is the plain PELT on the values as given (no log, no scaling), the same segmentation as the reference
implementation ``ruptures`` (``Pelt(model="l2", min_size=m, jump=1)``). Pure numpy and ``math``; no scipy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from pytest_jetmem.measure.stats import MAD_TO_SIGMA, student_t_ppf, student_t_sf2

__all__ = ["CONFIDENCE", "ChangePoint", "default_penalty", "detect", "pelt"]

#: The confidence of :attr:`ChangePoint.ci`.
CONFIDENCE = 0.99
#: The noise scale's floor (log units), so that a series of identical values divides nothing by zero.
_SIGMA_FLOOR = 1e-9
#: Spread (relative to the log values' size) below which a side is taken as exactly constant.
_EXACT = 1e-12


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
    n_before: int
    n_after: int

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
    lowest of ``a``, the highest of ``b``); ``b`` as it is where it holds the ``newest`` points of the series."""
    sign = 1.0 if d >= 0 else -1.0
    if a.size >= 2:
        a = np.delete(a, int(np.argmin(sign * a)))
    if b.size >= 2 and not newest:
        b = np.delete(b, int(np.argmax(sign * b)))
    return a, b


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
    def of(cls, a: np.ndarray, b: np.ndarray, newest: bool) -> _TTest:
        """The plain test, with p the larger of its own and that of the sides less their strongest point (the
        side of the ``newest`` points kept whole)."""
        full = cls.plain(a, b)
        trimmed = cls.plain(*_less_strongest(a, b, full.d, newest))
        return replace(full, p=max(full.p, trimmed.p))

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
            self._cache[key] = _TTest.of(self.logs[lo:i], self.logs[i:hi], hi == self.logs.size)
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


def _change_point(values: np.ndarray, sides: _Sides, kept: list[int], k: int) -> ChangePoint:
    lo, i, hi = sides.bounds(kept, k)
    tt = sides.test(kept, k)
    return ChangePoint(
        index=i,
        before_ms=float(np.median(values[lo:i])),
        after_ms=float(np.median(values[i:hi])),
        ratio=_exp(tt.d),
        ci=tt.ci(),
        p_value=tt.p,
        n_before=i - lo,
        n_after=hi - i,
    )


def detect(
    values: Sequence[float] | np.ndarray,
    *,
    groups: Sequence[object] | None = None,
    alpha: float = 0.001,
    min_size: int = 3,
    window: int = 30,
    penalty: float | None = None,
) -> list[ChangePoint]:
    """The confirmed change points of a series of session medians (ms, in commit order), oldest first.

    ``groups`` holds each point's commit (equal neighbours are one commit: no change between them). Candidates come
    from PELT on the log values scaled by their robust noise scale, with ``penalty`` per change in units of the
    noise variance (default :func:`default_penalty`), interior segments of ``min_size``+ points and a last segment
    of 1+; each is kept where the t-test of its sides (at most ``window`` points each), also without the point of
    each side that most favours the change, gives p < ``alpha`` (see the module docstring). Fewer than 2 points:
    []. ValueError for a value that is not a finite time > 0 (naming its position), ``groups`` of another length,
    ``alpha`` outside (0, 1), ``min_size`` or ``window`` < 1, or a ``penalty`` not finite and > 0.
    """
    _check_detect_args(alpha, min_size, window, penalty)
    y = _durations(values)
    allowed = _commit_starts(groups, y.size)
    if y.size < 2:
        return []
    logs = _relative_logs(y)
    z = logs / _noise_sigma(logs)
    beta = default_penalty(y.size) if penalty is None else float(penalty)
    candidates = _pelt(z, beta, int(min_size), allowed, 1)
    sides = _Sides(logs, int(window))
    kept = _confirm(sides, candidates, alpha)
    return [_change_point(y, sides, kept, k) for k in range(len(kept))]
