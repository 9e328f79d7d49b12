"""The regression decision: is ``current`` slower (or faster) than ``baseline``, past threshold and noise?

A change is called only when the ratio of medians is past the threshold *and* statistically clear of the
noise of the unit that varies: samples (:func:`compare`), runs (:func:`compare_runs`), sessions of a stored
baseline (:func:`compare_sessions`) or the interleaved rounds of ``--jetmem-against`` (:func:`compare_paired`).
A ratio past the threshold that is not clear of that noise is AMBIGUOUS, with its reason: reported, and
failed, warned about or passed as ``--jetmem-ambiguous`` says. Data with no interval to test (0 ms medians,
below the timer's resolution; a side without samples; a single round) gives a verdict too, never an error:
UNCHANGED within the threshold (both sides 0 ms), else AMBIGUOUS, with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum

import numpy as np

from pytest_jetmem.measure.stats import mann_whitney_p, paired_log_test, ratio_ci, run_ratio_test

__all__ = [
    "MIN_SESSIONS",
    "Comparison",
    "Verdict",
    "compare",
    "compare_paired",
    "compare_runs",
    "compare_sessions",
]

#: Sessions a stored baseline needs before its noise between sessions is known well enough to fail a test.
MIN_SESSIONS = 3


class Verdict(str, Enum):
    """Outcome of a comparison against a baseline."""

    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    UNCHANGED = "unchanged"
    AMBIGUOUS = "ambiguous"  # past the threshold, but not statistically clear of the noise (see ``reason``)

    def __str__(self) -> str:
        return self.value


def _fmt_ms(x: float) -> str:
    """Three significant digits without scientific notation (0.312, 0.0344, 35.5, 1234)."""
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(x))))
    return f"{x:.{digits}f}"


def _fmt_p(p: float) -> str:
    """p=0.34, p=0.0012, p=2e-9, p<1e-300."""
    if math.isnan(p):
        return "p=nan"
    if p <= 0:
        return "p<1e-300"
    if p >= 1e-3:
        return f"p={p:.2g}"
    mantissa, exponent = f"{p:.0e}".split("e")
    return f"p={mantissa}e{int(exponent)}"


def _fmt_pct(ratio: float) -> str:
    return f"{(ratio - 1.0) * 100.0:+.1f}%"


@dataclass(frozen=True)
class Comparison:
    """Result of :func:`compare`; ratios are current / baseline (above 1 is slower)."""

    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    threshold_pct: float
    verdict: Verdict
    baseline_median: float = math.nan
    current_median: float = math.nan
    confidence: float = 0.99
    alpha: float = 0.01
    n_baseline: int = 0
    n_current: int = 0
    unit: str = "samples"  # what n counts: "samples", "runs" (run medians), "sessions" or "rounds" (paired)
    reason: str = ""  # why an AMBIGUOUS verdict is not a call either way
    figure: str = "ms"  # the unit of the medians compared: "ms" (a time), "mJ" (an energy per call)

    def ambiguous_call(self, why: str) -> Comparison:
        """This comparison with a regression or improvement said to be ambiguous, because ``why``; else itself."""
        if self.verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT):
            return replace(self, verdict=Verdict.AMBIGUOUS, reason=why)
        return self

    @property
    def change_pct(self) -> float:
        """Relative change of the median in percent (+8.3 is 8.3% slower)."""
        return (self.ratio - 1.0) * 100.0

    def describe(self) -> str:
        """One line with the figures, e.g. ``median 0.312 ms vs baseline 0.288 ms: +8.3%
        (99% CI +6.1%..+10.2%, p=2e-9) > 5% threshold: REGRESSION`` (on one line).
        """
        up = 1.0 + self.threshold_pct / 100.0
        if self.ratio > up:
            where = f"> {self.threshold_pct:g}% threshold"
        elif self.ratio < 1.0 / up:
            where = f"< -{(1.0 - 1.0 / up) * 100.0:.3g}% threshold"
        else:
            where = f"within {self.threshold_pct:g}% threshold"
        figures = (
            f"{_fmt_pct(self.ratio)} ({self.confidence * 100:g}% CI "
            f"{_fmt_pct(self.ci_low)}..{_fmt_pct(self.ci_high)}, {_fmt_p(self.p_value)})"
        )
        head = ""
        if math.isfinite(self.baseline_median) and math.isfinite(self.current_median):
            cur, base = _fmt_ms(self.current_median), _fmt_ms(self.baseline_median)
            head = f"median {cur} {self.figure} vs baseline {base} {self.figure}: "
        if self.unit == "rounds":
            figures += f" over {self.n_current} interleaved rounds"
        elif self.unit != "samples":
            figures += f" over {self.n_current} vs {self.n_baseline} {self.unit}"
        tail = f" ({self.reason})" if self.reason else ""
        return f"{head}{figures} {where}: {self.verdict.name}{tail}"

    def to_dict(self) -> dict[str, float | int | str]:
        """Plain dict (JSON-ready) for reports."""
        return {
            "ratio": self.ratio,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "p_value": self.p_value,
            "threshold_pct": self.threshold_pct,
            "verdict": self.verdict.value,
            "baseline_median": self.baseline_median,
            "current_median": self.current_median,
            "confidence": self.confidence,
            "alpha": self.alpha,
            "n_baseline": self.n_baseline,
            "n_current": self.n_current,
            "unit": self.unit,
            "reason": self.reason,
            "figure": self.figure,
        }


def _as_array(samples: Iterable[float]) -> np.ndarray:
    arr = samples if isinstance(samples, np.ndarray) else list(samples)
    return np.asarray(arr, dtype=np.float64).reshape(-1)


def _durations(samples: Iterable[float], what: str) -> np.ndarray:
    """``samples`` as a 1-D float64 array (empty allowed); ValueError where one is not a duration (finite, >= 0)."""
    arr = _as_array(samples)
    bad = arr[~(np.isfinite(arr) & (arr >= 0))]
    if bad.size:
        raise ValueError(f"{what}: {float(bad[0])!r} is not a duration in ms (finite and >= 0)")
    return arr


def _median(arr: np.ndarray) -> float:
    """The median; NaN for no values."""
    return float(np.median(arr)) if arr.size else math.nan


def _pooled(groups: Iterable[np.ndarray]) -> np.ndarray:
    """All values of ``groups`` in one array (empty for none)."""
    arrays = list(groups)
    return np.concatenate(arrays) if arrays else np.empty(0)


def _check_threshold(threshold_pct: float) -> float:
    if isinstance(threshold_pct, bool) or not isinstance(threshold_pct, (int, float, np.integer, np.floating)):
        raise ValueError(f"threshold_pct must be a number of percent (e.g. 5), got {threshold_pct!r}")
    value = float(threshold_pct)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"threshold_pct must be finite and >= 0 (percent, e.g. 5), got {threshold_pct!r}")
    return value


@dataclass(frozen=True)
class _Rule:
    """What a comparison is asked: the threshold (percent), the interval's confidence, the significance level."""

    threshold_pct: float
    confidence: float
    alpha: float

    @classmethod
    def of(cls, threshold_pct: float, confidence: float, alpha: float) -> _Rule:
        """The rule, validated: ValueError for a threshold, confidence or alpha out of range."""
        t = _check_threshold(threshold_pct)
        if not 0 < alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
        if not 0 < confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
        return cls(t, confidence, alpha)

    def verdict(self, ratio: float, low: float, high: float, p: float) -> Verdict:
        """REGRESSION or IMPROVEMENT past the threshold and clear of the noise; AMBIGUOUS past it but not clear."""
        up = 1.0 + self.threshold_pct / 100.0
        if ratio > up:
            return Verdict.REGRESSION if (low > 1.0 and p < self.alpha) else Verdict.AMBIGUOUS
        if ratio < 1.0 / up:
            return Verdict.IMPROVEMENT if (high < 1.0 and p < self.alpha) else Verdict.AMBIGUOUS
        return Verdict.UNCHANGED


@dataclass(frozen=True)
class _Sides:
    """The values whose medians a comparison shows, how many units each side has, and what a unit is."""

    base: np.ndarray
    current: np.ndarray
    n_base: int
    n_current: int
    unit: str
    names: tuple[str, str] = ("the baseline", "the current measurement")

    @classmethod
    def units(cls, base: np.ndarray, current: np.ndarray, unit: str) -> _Sides:
        """Sides whose values are the units themselves (samples, run or session medians)."""
        return cls(base, current, int(base.size), int(current.size), unit)

    def ratio_of_medians(self) -> float:
        """median(current) / median(base): 1 where both are 0, inf where only the base's is, NaN without values."""
        base, current = _median(self.base), _median(self.current)
        if base > 0:
            return current / base
        if base == 0:
            return 1.0 if current == 0 else math.inf
        return math.nan

    def why_no_ratio(self) -> str:
        """Why the medians give no ratio to test ("" when they do): a side without values, or 0 ms medians."""
        for name, values in zip(self.names, (self.base, self.current), strict=True):
            if not values.size:
                return f"{name} has no samples: nothing to compare"
        base, current = _median(self.base), _median(self.current)
        if base == 0 and current == 0:
            return "the medians are 0 ms on both sides: below the timer's resolution, nothing to compare"
        if base == 0:
            return f"the median of {self.names[0]} is 0 ms: below the timer's resolution, no ratio to test"
        return ""

    def comparison(
        self, rule: _Rule, figures: tuple[float, float, float, float], verdict: Verdict, reason: str
    ) -> Comparison:
        """The comparison of these sides: ``figures`` are (ratio, low, high, p)."""
        ratio, low, high, p = figures
        return Comparison(
            ratio=ratio,
            ci_low=low,
            ci_high=high,
            p_value=p,
            threshold_pct=rule.threshold_pct,
            verdict=verdict,
            baseline_median=_median(self.base),
            current_median=_median(self.current),
            confidence=rule.confidence,
            alpha=rule.alpha,
            n_baseline=self.n_base,
            n_current=self.n_current,
            unit=self.unit,
            reason=reason,
        )


def _decide(rule: _Rule, sides: _Sides, figures: tuple[float, float, float, float], why: str = "") -> Comparison:
    """The comparison of ``figures`` (ratio, interval, p); an AMBIGUOUS one says ``why`` (default: the noise)."""
    verdict = rule.verdict(*figures)
    reason = ""
    if verdict is Verdict.AMBIGUOUS:
        reason = (
            why
            or f"the {rule.confidence * 100:g}% interval of the ratio reaches 1: within the noise between {sides.unit}"
        )
    return sides.comparison(rule, figures, verdict, reason)


def _without_interval(rule: _Rule, sides: _Sides, why: str) -> Comparison:
    """No interval, because ``why`` (kept as the reason): the ratio of the medians, UNCHANGED within the threshold,
    else AMBIGUOUS (also without a ratio)."""
    ratio = sides.ratio_of_medians()
    verdict = Verdict.AMBIGUOUS if math.isnan(ratio) else rule.verdict(ratio, 0.0, math.inf, 1.0)
    return sides.comparison(rule, (ratio, 0.0, math.inf, 1.0), verdict, why)


def _no_ratio(rule: _Rule, sides: _Sides) -> Comparison | None:
    """The comparison of sides whose medians give no ratio to test (None: they do)."""
    why = sides.why_no_ratio()
    return _without_interval(rule, sides, why) if why else None


def _no_log(rule: _Rule, sides: _Sides, units: tuple[np.ndarray, np.ndarray], what: str) -> Comparison | None:
    """The comparison where some of the medians of ``what`` (``units``: the base's, the current's) are 0 ms, so
    that their logarithms are not there (None: none is)."""
    zeros = sum(int(np.count_nonzero(u == 0)) for u in units)
    if not zeros:
        return None
    total = sum(u.size for u in units)
    why = f"{zeros} of the {total} medians of the {what} are 0 ms: below the timer's resolution, no interval"
    return _without_interval(rule, sides, why)


def compare(
    baseline_samples: Iterable[float],
    current_samples: Iterable[float],
    threshold_pct: float,
    confidence: float = 0.99,
    alpha: float = 0.01,
) -> Comparison:
    """Compare two timing samples (ms) and decide.

    REGRESSION needs ratio > 1 + t, the interval's lower bound > 1 and p < alpha; IMPROVEMENT needs
    ratio < 1 / (1 + t), the upper bound < 1 and p < alpha (t = threshold_pct / 100). A ratio past either
    limit that fails the other two tests is AMBIGUOUS; anything else is UNCHANGED. A side without samples, or
    a baseline median of 0 ms (below the timer's resolution), gives no interval: UNCHANGED where both medians
    are 0, else AMBIGUOUS, with the reason. ValueError only for what no measurement gives: a threshold, alpha
    or confidence out of range, a sample that is not a duration (negative, NaN, infinite).
    """
    rule = _Rule.of(threshold_pct, confidence, alpha)
    sides = _Sides.units(_durations(baseline_samples, "baseline"), _durations(current_samples, "current"), "samples")
    blocked = _no_ratio(rule, sides)
    if blocked is not None:
        return blocked
    ratio, low, high = ratio_ci(sides.base, sides.current, confidence=confidence)
    return _decide(rule, sides, (ratio, low, high, mann_whitney_p(sides.base, sides.current)))


def _each_run(runs: Iterable[Iterable[float]], what: str) -> list[np.ndarray]:
    """Each run's samples as durations (see :func:`_durations`)."""
    return [_durations(r, what) for r in runs]


def _runs_with_samples(runs: Iterable[Iterable[float]], what: str) -> list[np.ndarray]:
    """The runs that have samples."""
    return [r for r in _each_run(runs, what) if r.size]


def _run_medians(runs: list[np.ndarray]) -> np.ndarray:
    """The median of each run (each has samples)."""
    return np.array([np.median(r) for r in runs], dtype=np.float64)


def _log_units(rule: _Rule, sides: _Sides) -> Comparison:
    """Judge unit medians (runs, sessions) by :func:`run_ratio_test`; one side must have two units or more."""
    blocked = _no_ratio(rule, sides) or _no_log(rule, sides, (sides.base, sides.current), sides.unit)
    if blocked is not None:
        return blocked
    return _decide(rule, sides, run_ratio_test(list(sides.base), list(sides.current), rule.confidence))


def compare_runs(
    baseline_runs: Iterable[Iterable[float]],
    current_runs: Iterable[Iterable[float]],
    threshold_pct: float,
    confidence: float = 0.99,
    alpha: float = 0.01,
) -> Comparison:
    """Compare per-run samples: run medians are the units where either side has two runs or more.

    Samples within a run share one allocation and one process placement, so they understate how much
    a fresh session varies (zero-copy memory over PCIe moves by several percent between allocations).
    With a single run on both sides this is :func:`compare` on the samples. Runs without samples are left out;
    0 ms run medians give no interval (see :func:`compare`). ValueError where a side has no runs at all
    (:func:`compare_sessions` never passes that) and as :func:`compare` says.
    """
    b_runs, c_runs = _each_run(baseline_runs, "baseline run"), _each_run(current_runs, "current run")
    if not b_runs or not c_runs:
        raise ValueError("compare_runs needs at least one run on each side")
    b_runs, c_runs = [r for r in b_runs if r.size], [r for r in c_runs if r.size]
    if len(b_runs) < 2 and len(c_runs) < 2:
        return compare(_pooled(b_runs), _pooled(c_runs), threshold_pct, confidence, alpha)
    rule = _Rule.of(threshold_pct, confidence, alpha)
    b_med, c_med = _run_medians(b_runs), _run_medians(c_runs)
    return _log_units(rule, _Sides.units(b_med, c_med, "runs"))


def _too_few_sessions(cmp: Comparison, held: int, min_sessions: int) -> Comparison:
    """``cmp`` (on the pooled runs of ``held`` sessions), its call made AMBIGUOUS where ``held`` < ``min_sessions``."""
    if cmp.verdict is Verdict.UNCHANGED or held >= min_sessions:
        return cmp
    more = min_sessions - held
    return replace(
        cmp,
        verdict=Verdict.AMBIGUOUS,
        reason=(
            f"the baseline holds {held} session{'s' if held != 1 else ''}; the noise between sessions is known from "
            f"{min_sessions}: append {more} more session{'s' if more != 1 else ''} to it "
            "(--jetmem-save on the branch it gates)"
        ),
    )


def _sessions_with_samples(sessions: Sequence[Sequence[Iterable[float]]]) -> list[list[np.ndarray]]:
    """Each session's runs with samples; sessions without any left out."""
    kept = (_runs_with_samples(s, "baseline run") for s in sessions)
    return [runs for runs in kept if runs]


def compare_sessions(
    baseline_sessions: Sequence[Sequence[Iterable[float]]],
    current_runs: Iterable[Iterable[float]],
    threshold_pct: float,
    confidence: float = 0.99,
    alpha: float = 0.01,
    min_sessions: int = MIN_SESSIONS,
) -> Comparison:
    """Compare a session against a stored baseline whose unit of noise is the session.

    ``baseline_sessions`` holds, per stored session, the samples of each of its runs. With ``min_sessions``
    sessions or more, each session's median is a unit and the current session is judged by a prediction
    interval over them (:func:`pytest_jetmem.measure.stats.run_ratio_test`): the spread between sessions is
    in the interval. With fewer, the noise between sessions is unknown: the decision is the one of
    :func:`compare_runs` on the pooled runs, except that a call either way becomes AMBIGUOUS, with a reason
    that says how many more sessions to append. Sessions and runs without samples are left out; a side left
    without samples, or 0 ms medians, give no interval (see :func:`compare`). ValueError only as
    :func:`compare` says.
    """
    sessions = _sessions_with_samples(baseline_sessions)
    cur_runs = _runs_with_samples(current_runs, "current run")
    if not sessions or not cur_runs:
        return compare(_pooled(r for s in sessions for r in s), _pooled(cur_runs), threshold_pct, confidence, alpha)
    if len(sessions) < max(min_sessions, 2):  # one session has no spread between sessions to measure
        cmp = compare_runs([r for s in sessions for r in s], cur_runs, threshold_pct, confidence, alpha)
        return _too_few_sessions(cmp, len(sessions), min_sessions)
    rule = _Rule.of(threshold_pct, confidence, alpha)
    b_med = np.array([_median(_pooled(s)) for s in sessions])
    c_med = np.array([_median(_pooled(cur_runs))])
    return _log_units(rule, _Sides.units(b_med, c_med, "sessions"))


def _round_medians(
    base_run: Sequence[Iterable[float]], change_run: Sequence[Iterable[float]]
) -> tuple[np.ndarray, np.ndarray]:
    """The medians of a run's paired rounds (round r of each side), rounds without samples on either side left out."""
    pairs = [
        (_median(a), _median(b))
        for a, b in zip(_each_run(base_run, "base round"), _each_run(change_run, "change round"), strict=False)
        if a.size and b.size
    ]
    return np.array([a for a, _ in pairs], dtype=np.float64), np.array([b for _, b in pairs], dtype=np.float64)


#: Per run of ``--jetmem-against``, the medians of its paired rounds: (the base's, the change's).
_RunMedians = tuple[np.ndarray, np.ndarray]


def _paired_runs(
    base_rounds: Sequence[Sequence[Iterable[float]]], change_rounds: Sequence[Sequence[Iterable[float]]]
) -> list[_RunMedians]:
    """The round medians of each run with a paired round; runs without one left out."""
    runs = [_round_medians(a, b) for a, b in zip(base_rounds, change_rounds, strict=False)]
    return [(a, b) for a, b in runs if a.size]


def _all_samples(rounds: Sequence[Sequence[Iterable[float]]], what: str) -> np.ndarray:
    """Every sample of every round of every run."""
    return _pooled(_durations(r, what) for run in rounds for r in run)


def _paired_sides(
    base_rounds: Sequence[Sequence[Iterable[float]]],
    change_rounds: Sequence[Sequence[Iterable[float]]],
    runs: list[_RunMedians],
) -> _Sides:
    """The sides of a paired comparison: all samples, and the units: the runs where several, else the rounds."""
    n = len(runs) if len(runs) > 1 else sum(a.size for a, _ in runs)
    base, change = _all_samples(base_rounds, "base round"), _all_samples(change_rounds, "change round")
    return _Sides(base, change, n, n, "runs" if len(runs) > 1 else "rounds", ("the base", "the change"))


def _paired_units(runs: list[_RunMedians]) -> np.ndarray:
    """The log ratios the paired test takes: per round (one run) or each run's mean (several runs)."""
    per_run = [np.log(b) - np.log(a) for a, b in runs]
    return np.array([d.mean() for d in per_run]) if len(per_run) > 1 else per_run[0]


def _no_pairs(rule: _Rule, sides: _Sides, runs: list[_RunMedians]) -> Comparison | None:
    """The comparison where no round pairs, or where a paired round's median is 0 ms (None: neither)."""
    if not runs:
        return _without_interval(rule, sides, "no round has samples on both sides: nothing to pair")
    return _no_log(rule, sides, (_pooled(a for a, _ in runs), _pooled(b for _, b in runs)), "rounds")


def compare_paired(
    base_rounds: Sequence[Sequence[Iterable[float]]],
    change_rounds: Sequence[Sequence[Iterable[float]]],
    threshold_pct: float,
    confidence: float = 0.99,
    alpha: float = 0.01,
) -> Comparison:
    """Judge interleaved measurements (``--jetmem-against``): per run, per round, the samples of each side.

    Round ``r`` of the base and round ``r`` of the change were taken back to back on the same GPU, so their
    log ratio cancels drift. With one run, the rounds are the units of a paired t-test; with several runs
    (fresh allocations on both sides), the mean log ratio of each run is the unit, so the spread between
    allocations is in the interval. One round gives no interval; a side without samples, or 0 ms medians
    (below the timer's resolution), give none either (see :func:`compare`). ValueError only for what the plugin
    never passes: both sides with runs but not as many (it compares only runs taken in turns), and as
    :func:`compare` says.
    """
    if base_rounds and change_rounds and len(base_rounds) != len(change_rounds):
        raise ValueError(
            f"compare_paired needs the same runs on both sides, got {len(base_rounds)} and {len(change_rounds)}"
        )
    rule = _Rule.of(threshold_pct, confidence, alpha)
    runs = _paired_runs(base_rounds, change_rounds)
    sides = _paired_sides(base_rounds, change_rounds, runs)
    blocked = _no_ratio(rule, sides) or _no_pairs(rule, sides, runs)
    if blocked is not None:
        return blocked
    units = _paired_units(runs)
    why = "one round only: no interval" if units.size < 2 else ""
    return _decide(rule, sides, paired_log_test(units, confidence), why)
