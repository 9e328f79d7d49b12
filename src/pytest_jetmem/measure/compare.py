"""The regression decision: is ``current`` slower (or faster) than ``baseline``, past threshold and noise?

A change is called only when the ratio of medians is past the threshold *and* statistically clear of the
noise of the unit that varies: samples (:func:`compare`), runs (:func:`compare_runs`), sessions of a stored
baseline (:func:`compare_sessions`) or the interleaved rounds of ``--jetmem-against`` (:func:`compare_paired`).
A ratio past the threshold that is not clear of that noise is AMBIGUOUS, with its reason: reported, and
failed, warned about or passed as ``--jetmem-ambiguous`` says.
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
            head = f"median {cur} ms vs baseline {base} ms: "
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
        }


def _as_array(samples: Iterable[float]) -> np.ndarray:
    arr = samples if isinstance(samples, np.ndarray) else list(samples)
    return np.asarray(arr, dtype=np.float64).reshape(-1)


def _check_threshold(threshold_pct: float) -> float:
    if isinstance(threshold_pct, bool) or not isinstance(threshold_pct, (int, float, np.integer, np.floating)):
        raise ValueError(f"threshold_pct must be a number of percent (e.g. 5), got {threshold_pct!r}")
    value = float(threshold_pct)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"threshold_pct must be finite and >= 0 (percent, e.g. 5), got {threshold_pct!r}")
    return value


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
    limit that fails the other two tests is AMBIGUOUS; anything else is UNCHANGED.
    """
    t = _check_threshold(threshold_pct)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    base = _as_array(baseline_samples)
    cur = _as_array(current_samples)
    ratio, low, high = ratio_ci(base, cur, confidence=confidence)
    p = mann_whitney_p(base, cur)
    return _decide(ratio, low, high, p, t, confidence, alpha, base, cur, int(base.size), int(cur.size), "samples")


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
    With a single run on both sides this is :func:`compare` on the samples.
    """
    b_runs = [_as_array(r) for r in baseline_runs]
    c_runs = [_as_array(r) for r in current_runs]
    if not b_runs or not c_runs:
        raise ValueError("compare_runs needs at least one run on each side")
    if len(b_runs) < 2 and len(c_runs) < 2:
        return compare(b_runs[0], c_runs[0], threshold_pct, confidence, alpha)
    t = _check_threshold(threshold_pct)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    b_med = np.array([np.median(r) for r in b_runs])
    c_med = np.array([np.median(r) for r in c_runs])
    ratio, low, high, p = run_ratio_test(list(b_med), list(c_med), confidence)
    return _decide(ratio, low, high, p, t, confidence, alpha, b_med, c_med, len(b_runs), len(c_runs), "runs")


def _decide(
    ratio: float,
    low: float,
    high: float,
    p: float,
    t: float,
    confidence: float,
    alpha: float,
    base: np.ndarray,
    cur: np.ndarray,
    n_base: int,
    n_cur: int,
    unit: str,
) -> Comparison:
    up = 1.0 + t / 100.0
    reason = ""
    if ratio > up:
        verdict = Verdict.REGRESSION if (low > 1.0 and p < alpha) else Verdict.AMBIGUOUS
    elif ratio < 1.0 / up:
        verdict = Verdict.IMPROVEMENT if (high < 1.0 and p < alpha) else Verdict.AMBIGUOUS
    else:
        verdict = Verdict.UNCHANGED
    if verdict is Verdict.AMBIGUOUS:
        reason = f"the {confidence * 100:g}% interval of the ratio reaches 1: within the noise between {unit}"
    return Comparison(
        ratio=ratio,
        ci_low=low,
        ci_high=high,
        p_value=p,
        threshold_pct=t,
        verdict=verdict,
        baseline_median=float(np.median(base)),
        current_median=float(np.median(cur)),
        confidence=confidence,
        alpha=alpha,
        n_baseline=n_base,
        n_current=n_cur,
        unit=unit,
        reason=reason,
    )


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
    that says how many more sessions to append.
    """
    sessions = [[_as_array(r) for r in s] for s in baseline_sessions if len(s)]
    cur_runs = [_as_array(r) for r in current_runs]
    if not sessions or not cur_runs:
        raise ValueError("compare_sessions needs at least one baseline session and one current run")
    if len(sessions) < max(min_sessions, 2):  # one session has no spread between sessions to measure
        cmp = compare_runs([r for s in sessions for r in s], cur_runs, threshold_pct, confidence, alpha)
        if cmp.verdict is Verdict.UNCHANGED or len(sessions) >= min_sessions:
            return cmp
        more = min_sessions - len(sessions)
        held = f"{len(sessions)} session{'s' if len(sessions) != 1 else ''}"
        return replace(
            cmp,
            verdict=Verdict.AMBIGUOUS,
            reason=(
                f"the baseline holds {held}; the noise between sessions is known from {min_sessions}: "
                f"append {more} more session{'s' if more != 1 else ''} to it (--jetmem-save on the branch it gates)"
            ),
        )
    t = _check_threshold(threshold_pct)
    b_med = np.array([np.median(np.concatenate(s)) for s in sessions])
    c_med = np.array([np.median(np.concatenate(cur_runs))])
    ratio, low, high, p = run_ratio_test(list(b_med), list(c_med), confidence)
    return _decide(ratio, low, high, p, t, confidence, alpha, b_med, c_med, len(sessions), 1, "sessions")


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
    allocations is in the interval.
    """
    if len(base_rounds) != len(change_rounds) or not base_rounds:
        raise ValueError(
            f"compare_paired needs the same runs on both sides, got {len(base_rounds)} and {len(change_rounds)}"
        )
    per_run: list[np.ndarray] = []
    for a_run, b_run in zip(base_rounds, change_rounds, strict=True):
        a_med = np.array([np.median(_as_array(r)) for r in a_run])
        b_med = np.array([np.median(_as_array(r)) for r in b_run])
        if a_med.size != b_med.size or a_med.size == 0:
            raise ValueError(f"compare_paired: a run has {a_med.size} base and {b_med.size} change rounds")
        if np.any(a_med <= 0) or np.any(b_med <= 0):
            raise ValueError("compare_paired: round medians must be positive durations")
        per_run.append(np.log(b_med / a_med))
    t = _check_threshold(threshold_pct)
    units = np.array([d.mean() for d in per_run]) if len(per_run) > 1 else per_run[0]
    unit = "runs" if len(per_run) > 1 else "rounds"
    ratio, low, high, p = paired_log_test(units, confidence)
    base_all = np.concatenate([np.concatenate([_as_array(r) for r in run]) for run in base_rounds])
    change_all = np.concatenate([np.concatenate([_as_array(r) for r in run]) for run in change_rounds])
    return _decide(ratio, low, high, p, t, confidence, alpha, base_all, change_all, units.size, units.size, unit)
