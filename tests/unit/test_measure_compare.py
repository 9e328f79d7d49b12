"""Unit tests of pytest_jetmem.measure.compare (no GPU)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_jetmem.measure.compare import Comparison, Verdict, compare, compare_paired, compare_runs, compare_sessions
from pytest_jetmem.measure.stats import paired_log_test


def lognormal_pair(
    seed: int, shift: float, n: int = 50, noise: float = 0.02, median_ms: float = 0.3
) -> tuple[np.ndarray, np.ndarray]:
    """Baseline and current timings: lognormal around ``median_ms``, current ``shift`` slower (0.1 = 10%)."""
    rng = np.random.default_rng(seed)
    base = median_ms * rng.lognormal(0.0, noise, n)
    cur = median_ms * (1.0 + shift) * rng.lognormal(0.0, noise, n)
    return base, cur


def test_verdict_is_a_str_enum() -> None:
    assert Verdict.REGRESSION == "regression"
    assert Verdict("ambiguous") is Verdict.AMBIGUOUS
    assert {v.name for v in Verdict} == {"REGRESSION", "IMPROVEMENT", "UNCHANGED", "AMBIGUOUS"}


def test_no_shift_is_never_a_regression_at_5pct() -> None:
    verdicts = [compare(*lognormal_pair(seed, 0.0), threshold_pct=5).verdict for seed in range(200)]
    assert Verdict.REGRESSION not in verdicts
    assert Verdict.IMPROVEMENT not in verdicts
    assert verdicts.count(Verdict.UNCHANGED) == 200


def test_no_shift_rarely_called_even_at_zero_threshold() -> None:
    # With no threshold only the statistics stand guard: CI and rank test at 1% must both fire.
    called = sum(
        compare(*lognormal_pair(seed, 0.0), threshold_pct=0).verdict in (Verdict.REGRESSION, Verdict.IMPROVEMENT)
        for seed in range(200)
    )
    assert called <= 6


def test_ten_pct_shift_is_a_regression() -> None:
    for seed in range(20):
        c = compare(*lognormal_pair(seed, 0.10), threshold_pct=5)
        assert c.verdict is Verdict.REGRESSION, c.describe()
        assert c.ratio > 1.05 and c.ci_low > 1.0 and c.p_value < 0.01


def test_ten_pct_speedup_is_an_improvement_and_swapping_mirrors() -> None:
    for seed in range(20):
        base, cur = lognormal_pair(seed, 0.10)
        assert compare(cur, base, threshold_pct=5).verdict is Verdict.IMPROVEMENT
        c = compare(*lognormal_pair(seed, -0.10), threshold_pct=5)
        assert c.verdict is Verdict.IMPROVEMENT, c.describe()
        assert c.ci_high < 1.0


def test_three_pct_shift_below_5pct_threshold_is_not_a_regression() -> None:
    verdicts = {compare(*lognormal_pair(seed, 0.03), threshold_pct=5).verdict for seed in range(50)}
    assert Verdict.REGRESSION not in verdicts
    assert verdicts == {Verdict.UNCHANGED}


def test_three_pct_shift_is_caught_by_a_1pct_threshold() -> None:
    c = compare(*lognormal_pair(0, 0.03, n=200), threshold_pct=1)
    assert c.verdict is Verdict.REGRESSION


def test_outliers_do_not_make_a_regression() -> None:
    # Rare large outliers (20% CV in the reference run) must not move a median-based decision.
    for seed in range(50):
        base, cur = lognormal_pair(seed, 0.0, n=100)
        rng = np.random.default_rng(1000 + seed)
        hit = rng.random(cur.size) < 0.05
        cur = np.where(hit, cur * 5.0, cur)
        assert compare(base, cur, threshold_pct=5).verdict is Verdict.UNCHANGED


def test_past_threshold_but_unclear_is_ambiguous() -> None:
    # ratio of medians 1.2, but 3 samples a side: the rank test cannot get below p = 0.08
    c = compare([1.0, 1.0, 1.0], [1.2, 0.9, 1.3], threshold_pct=5)
    assert c.ratio == pytest.approx(1.2)
    assert c.p_value > 0.01
    assert c.verdict is Verdict.AMBIGUOUS
    assert c.describe().endswith(
        "> 5% threshold: AMBIGUOUS (the 99% interval of the ratio reaches 1: within the noise between samples)"
    )
    slow = compare([1.0, 1.0, 1.0], [0.8, 1.1, 0.7], threshold_pct=5)
    assert slow.verdict is Verdict.AMBIGUOUS


def test_wide_noise_with_few_samples_is_never_a_regression() -> None:
    for seed in range(50):
        c = compare(*lognormal_pair(seed, 0.10, n=5, noise=0.5), threshold_pct=5)
        # n = 5 a side: at best U = 0, z = 12 / sqrt(25 * 11 / 12) = 2.507, p = 0.0122 > alpha
        assert c.p_value > 0.012
        assert c.verdict is not Verdict.REGRESSION


def test_describe_matches_the_documented_line() -> None:
    c = Comparison(
        ratio=1.083,
        ci_low=1.061,
        ci_high=1.102,
        p_value=2e-9,
        threshold_pct=5,
        verdict=Verdict.REGRESSION,
        baseline_median=0.288,
        current_median=0.312,
    )
    assert c.describe() == (
        "median 0.312 ms vs baseline 0.288 ms: +8.3% (99% CI +6.1%..+10.2%, p=2e-9) > 5% threshold: REGRESSION"
    )


def test_describe_of_real_comparisons() -> None:
    reg = compare(*lognormal_pair(0, 0.10), threshold_pct=5).describe()
    assert re.fullmatch(
        r"median 0\.3\d\d ms vs baseline 0\.\d{3} ms: \+\d+\.\d% \(99% CI \+\d+\.\d%\.\.\+\d+\.\d%, "
        r"p=\de-\d+\) > 5% threshold: REGRESSION",
        reg,
    ), reg
    imp = compare(*lognormal_pair(0, -0.10), threshold_pct=5).describe()
    assert imp.endswith("< -4.76% threshold: IMPROVEMENT"), imp
    same = compare(*lognormal_pair(0, 0.0), threshold_pct=5).describe()
    assert same.endswith("within 5% threshold: UNCHANGED"), same
    assert "p=0." in same


def test_comparison_fields_and_to_dict() -> None:
    base, cur = lognormal_pair(3, 0.10, n=40)
    c = compare(base, cur, threshold_pct=5, confidence=0.95, alpha=0.05)
    assert c.baseline_median == pytest.approx(float(np.median(base)))
    assert c.current_median == pytest.approx(float(np.median(cur)))
    assert c.ratio == pytest.approx(c.current_median / c.baseline_median)
    assert c.change_pct == pytest.approx((c.ratio - 1) * 100)
    assert (c.n_baseline, c.n_current, c.confidence, c.alpha) == (40, 40, 0.95, 0.05)
    d = c.to_dict()
    assert d["verdict"] == "regression" and d["threshold_pct"] == 5.0
    assert "95% CI" in c.describe()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, -0.001, "5", None, True])
def test_threshold_is_validated(bad: object) -> None:
    with pytest.raises(ValueError, match="threshold_pct"):
        compare([1.0, 2.0], [1.0, 2.0], threshold_pct=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs", [{"alpha": 0.0}, {"alpha": 1.0}, {"confidence": 1.5}])
def test_alpha_and_confidence_are_validated(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        compare([1.0, 2.0], [1.0, 2.0], threshold_pct=5, **kwargs)


def test_threshold_accepts_numpy_numbers() -> None:
    assert compare([1.0] * 5, [1.0] * 5, threshold_pct=np.float32(5)).verdict is Verdict.UNCHANGED
    assert compare([1.0] * 5, [1.0] * 5, threshold_pct=np.int64(0)).threshold_pct == 0.0


durations = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(durations, min_size=1, max_size=40),
    st.lists(durations, min_size=1, max_size=40),
    st.floats(min_value=0.0, max_value=50.0),
)
def test_verdict_is_consistent_with_its_figures(b: list[float], c: list[float], t: float) -> None:
    r = compare(b, c, threshold_pct=t)
    up = 1 + t / 100
    assert r.ci_low <= r.ratio <= r.ci_high
    assert 0.0 <= r.p_value <= 1.0
    if r.verdict is Verdict.REGRESSION:
        assert r.ratio > up and r.ci_low > 1 and r.p_value < 0.01
    elif r.verdict is Verdict.IMPROVEMENT:
        assert r.ratio < 1 / up and r.ci_high < 1 and r.p_value < 0.01
    elif r.verdict is Verdict.AMBIGUOUS:
        assert r.ratio > up or r.ratio < 1 / up
        assert r.reason
    else:
        assert 1 / up <= r.ratio <= up
    assert r.describe().endswith(r.verdict.name + (f" ({r.reason})" if r.reason else ""))
    assert not math.isnan(r.ratio)


def synthetic_runs(
    rng: np.random.Generator, n_runs: int, shift: float = 1.0, between: float = 0.05, within: float = 0.005
) -> list[np.ndarray]:
    """Runs of 20 samples around ``shift`` ms: each run has its own level (lognormal, sd ``between``)."""
    return [shift * math.exp(rng.normal(0.0, between)) * (1 + within * rng.standard_normal(20)) for _ in range(n_runs)]


def verdict_rate(n_base: int, n_cur: int, shift: float, verdict: Verdict, seeds: int = 200) -> float:
    hits = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        base, cur = synthetic_runs(rng, n_base), synthetic_runs(rng, n_cur, shift)
        hits += compare_runs(base, cur, 5.0).verdict is verdict
    return hits / seeds


@pytest.mark.parametrize(("n_base", "n_cur"), [(5, 5), (10, 3), (10, 1), (3, 3)])
def test_compare_runs_a_a_false_regressions_stay_rare(n_base: int, n_cur: int) -> None:
    assert verdict_rate(n_base, n_cur, 1.0, Verdict.REGRESSION) <= 0.02
    assert verdict_rate(n_base, n_cur, 1.0, Verdict.IMPROVEMENT) <= 0.02


def test_samples_alone_would_raise_false_alarms_on_the_same_data() -> None:
    # the reason runs exist: with one run each side, samples share their run's level and the 5% between-run
    # spread looks like a change (this also shows the harness above can see false alarms)
    assert verdict_rate(1, 1, 1.0, Verdict.REGRESSION) >= 0.1


@pytest.mark.parametrize(("n_base", "n_cur", "power"), [(10, 10, 0.95), (10, 5, 0.8), (5, 5, 0.6)])
def test_compare_runs_catches_a_15pct_shift(n_base: int, n_cur: int, power: float) -> None:
    assert verdict_rate(n_base, n_cur, 1.15, Verdict.REGRESSION) >= power
    assert verdict_rate(n_base, n_cur, 1 / 1.15, Verdict.IMPROVEMENT) >= power


def test_compare_runs_with_one_run_each_is_compare_on_the_samples() -> None:
    rng = np.random.default_rng(3)
    base, cur = rng.normal(1.0, 0.01, 30), rng.normal(1.1, 0.01, 30)
    a, b = compare_runs([base], [cur], 5.0), compare(base, cur, 5.0)
    assert a == b and a.unit == "samples" and a.verdict is Verdict.REGRESSION


def test_compare_runs_describes_run_counts_and_validates() -> None:
    rng = np.random.default_rng(4)
    cmp = compare_runs(synthetic_runs(rng, 5), synthetic_runs(rng, 3, 1.3), 5.0)
    assert (cmp.unit, cmp.n_baseline, cmp.n_current, cmp.verdict) == ("runs", 5, 3, Verdict.REGRESSION)
    assert cmp.describe().endswith("over 3 vs 5 runs > 5% threshold: REGRESSION")
    with pytest.raises(ValueError, match="at least one run"):
        compare_runs([], [[1.0]], 5.0)


# -- sessions as the unit of noise, and paired rounds (issue 9) ------------------------------------------------
def session_samples(rng: np.random.Generator, shift: float, session_sd: float, n: int = 30) -> list[float]:
    """One session: a session-wide offset (allocation placement, clocks) times 0.5% sample noise."""
    offset = rng.lognormal(0.0, session_sd)
    return list(0.3 * (1.0 + shift) * offset * rng.lognormal(0.0, 0.005, n))


def test_sessions_carry_the_noise_a_single_session_cannot_know() -> None:
    rng = np.random.default_rng(7)
    alarms_one = alarms_five = 0
    for _ in range(200):  # A/A with 3% noise between sessions and 0.5% within
        sessions = [[session_samples(rng, 0.0, 0.03)] for _ in range(5)]
        current = [session_samples(rng, 0.0, 0.03)]
        alarms_one += compare_sessions(sessions[:1], current, 5, min_sessions=1).verdict is Verdict.REGRESSION
        alarms_five += compare_sessions(sessions, current, 5).verdict is Verdict.REGRESSION
    assert alarms_one > 10  # within-session statistics call the session offsets regressions
    assert alarms_five <= 2  # the spread between sessions is in the interval


def test_five_sessions_catch_a_10pct_slowdown_past_session_noise() -> None:
    rng = np.random.default_rng(8)
    caught = sum(
        compare_sessions(
            [[session_samples(rng, 0.0, 0.01)] for _ in range(5)], [session_samples(rng, 0.10, 0.01)], 5
        ).verdict
        is Verdict.REGRESSION
        for _ in range(100)
    )
    assert caught >= 95


def test_too_few_sessions_is_ambiguous_and_says_how_many_to_append() -> None:
    rng = np.random.default_rng(9)
    c = compare_sessions([[session_samples(rng, 0.0, 0.0)]] * 2, [session_samples(rng, 0.2, 0.0)], 5)
    assert c.verdict is Verdict.AMBIGUOUS
    assert c.reason == (
        "the baseline holds 2 sessions; the noise between sessions is known from 3: append 1 more session to it "
        "(--jetmem-save on the branch it gates)"
    )
    same = compare_sessions([[session_samples(rng, 0.0, 0.0)]], [session_samples(rng, 0.0, 0.0)], 5)
    assert same.verdict is Verdict.UNCHANGED and same.reason == ""


def rounds(rng: np.random.Generator, shift: float, drift: np.ndarray) -> list[list[float]]:
    return [list(0.3 * (1.0 + shift) * d * rng.lognormal(0.0, 0.003, 3)) for d in drift]


def test_paired_rounds_cancel_drift_and_catch_3pct() -> None:
    rng = np.random.default_rng(10)
    alarms = caught = 0
    for _ in range(200):
        drift = np.exp(np.cumsum(rng.normal(0.0, 0.02, 12)))  # clocks wander by far more than 3%
        alarms += compare_paired([rounds(rng, 0.0, drift)], [rounds(rng, 0.0, drift)], 2).verdict is Verdict.REGRESSION
        caught += compare_paired([rounds(rng, 0.0, drift)], [rounds(rng, 0.03, drift)], 2).verdict is Verdict.REGRESSION
    assert alarms == 0
    assert caught >= 190
    unpaired = compare(
        [v for r in rounds(rng, 0.0, drift) for v in r], [v for r in rounds(rng, 0.03, drift[::-1]) for v in r], 2
    )
    assert unpaired.verdict is not Verdict.REGRESSION or unpaired.ratio > 1.02  # what pairing is for


def test_paired_runs_are_the_units_when_there_are_several() -> None:
    rng = np.random.default_rng(11)
    drift = np.ones(8)
    base = [rounds(rng, 0.0, drift) for _ in range(3)]
    change = [rounds(rng, 0.08, drift) for _ in range(3)]
    c = compare_paired(base, change, 5)
    assert (c.unit, c.n_current, c.verdict) == ("runs", 3, Verdict.REGRESSION)
    with pytest.raises(ValueError, match="the same runs on both sides, got 3 and 2"):
        compare_paired(base, change[:2], 5)


def test_paired_log_test_with_one_value_calls_nothing() -> None:
    assert paired_log_test([0.1]) == pytest.approx((math.exp(0.1), 0.0, math.inf, 1.0))
    ratio, low, high, p = paired_log_test(np.log([1.05, 1.06, 1.04, 1.05]))
    assert low < ratio < high and p < 0.01


# -- data the plugin itself produces never crashes a comparison (issue 24) ------------------------------------------
BELOW_RESOLUTION = "the medians are 0 ms on both sides: below the timer's resolution, nothing to compare"


def test_zero_ms_on_both_sides_is_unchanged_and_says_why() -> None:
    zero_rounds = [[[0.0] * 3] * 5]
    for cmp in (
        compare_paired(zero_rounds, zero_rounds, 5),
        compare([0.0] * 10, [0.0] * 10, 5),
        compare_runs([[0.0] * 5] * 3, [[0.0] * 5] * 2, 5),
        compare_sessions([[[0.0] * 5]] * 5, [[0.0] * 5], 5),
    ):
        assert (cmp.verdict, cmp.ratio, cmp.reason) == (Verdict.UNCHANGED, 1.0, BELOW_RESOLUTION)
        assert cmp.describe().endswith(f"within 5% threshold: UNCHANGED ({BELOW_RESOLUTION})")


def test_zero_ms_on_one_side_is_ambiguous_with_its_reason() -> None:
    slower = compare_paired([[[0.0] * 3] * 5], [[[0.1] * 3] * 5], 5)
    assert (slower.verdict, slower.ratio) == (Verdict.AMBIGUOUS, math.inf)
    assert slower.reason == "the median of the base is 0 ms: below the timer's resolution, no ratio to test"
    faster = compare_paired([[[0.1] * 3] * 5], [[[0.0] * 3] * 5], 5)
    assert (faster.verdict, faster.ratio) == (Verdict.AMBIGUOUS, 0.0)
    assert faster.reason == "5 of the 10 medians of the rounds are 0 ms: below the timer's resolution, no interval"
    some = compare_sessions([[[0.1] * 5]] * 4 + [[[0.0] * 5]], [[0.1] * 5], 5)
    assert some.verdict is Verdict.UNCHANGED  # the median of the session medians is 0.1 ms on both sides
    assert some.reason == "1 of the 6 medians of the sessions are 0 ms: below the timer's resolution, no interval"


def test_one_round_gives_no_interval() -> None:
    cmp = compare_paired([[[0.1, 0.1, 0.1]]], [[[0.2, 0.2, 0.2]]], 5)
    assert (cmp.verdict, cmp.n_current, cmp.unit) == (Verdict.AMBIGUOUS, 1, "rounds")
    assert cmp.ratio == pytest.approx(2.0) and (cmp.ci_low, cmp.ci_high, cmp.p_value) == (0.0, math.inf, 1.0)
    assert cmp.reason == "one round only: no interval"
    assert compare_paired([[[0.1]]], [[[0.1]]], 5).verdict is Verdict.UNCHANGED


def test_a_side_without_rounds_or_samples_says_there_is_nothing_to_compare() -> None:
    rounds = [[[0.1, 0.1, 0.1]] * 5]
    for base, change, side in (([], rounds, "the base"), (rounds, [], "the change"), ([[]], [[]], "the base")):
        cmp = compare_paired(base, change, 5)
        assert cmp.verdict is Verdict.AMBIGUOUS and math.isnan(cmp.ratio)
        assert cmp.reason == f"{side} has no samples: nothing to compare"
    assert compare_paired([[[]] * 5], rounds, 5).reason == "the base has no samples: nothing to compare"
    assert compare_sessions([], [[0.1]], 5).reason == "the baseline has no samples: nothing to compare"
    assert compare_sessions([[[]], []], [[0.1]], 5).reason == "the baseline has no samples: nothing to compare"
    assert compare_sessions([[[0.1]]], [[]], 5).reason == "the current measurement has no samples: nothing to compare"
    assert compare([], [0.1], 5).verdict is Verdict.AMBIGUOUS


def test_equal_samples_are_exact() -> None:
    same = compare_paired([[[0.1] * 3] * 5], [[[0.1] * 3] * 5], 5)
    assert (same.verdict, same.ratio, same.p_value) == (Verdict.UNCHANGED, 1.0, 1.0)
    assert same.ci_low == same.ci_high == 1.0
    slower = compare_sessions([[[0.1] * 5]] * 5, [[0.2] * 5], 5)
    assert slower.verdict is Verdict.REGRESSION and slower.ci_low == pytest.approx(2.0)


def test_what_no_measurement_gives_still_raises() -> None:
    with pytest.raises(ValueError, match=r"baseline: -1\.0 is not a duration"):
        compare([-1.0], [1.0], 5)
    with pytest.raises(ValueError, match="change round: nan is not a duration"):
        compare_paired([[[1.0]]], [[[math.nan]]], 5)


# the shapes the plugin produces, with any non-negative durations: zeros, equal values, single and empty samples
duration_or_zero = st.one_of(st.just(0.0), st.sampled_from([0.001, 0.1, 1.0]), st.floats(min_value=0.0, max_value=1e6))
samples = st.lists(duration_or_zero, max_size=6)


@st.composite
def paired_rounds(draw: st.DrawFn) -> tuple[list[list[list[float]]], list[list[list[float]]]]:
    """Per run (as many on both sides, or none on a side), the rounds of each side (mostly as many)."""
    n_runs = draw(st.integers(min_value=0, max_value=3))
    base, change = [], []
    for _ in range(n_runs):
        n_rounds = draw(st.integers(min_value=0, max_value=5))
        base.append([draw(samples) for _ in range(n_rounds)])
        change.append([draw(samples) for _ in range(n_rounds + draw(st.sampled_from([0, 0, 0, 1])))])
    side = draw(st.sampled_from(["both", "both", "no base", "no change"]))
    return ([] if side == "no base" else base), ([] if side == "no change" else change)


def check_comparison(cmp: Comparison) -> None:
    assert isinstance(cmp, Comparison)
    assert cmp.verdict in Verdict
    assert not math.isnan(cmp.ratio) or cmp.verdict is Verdict.AMBIGUOUS
    assert cmp.verdict is not Verdict.AMBIGUOUS or cmp.reason
    assert cmp.describe() and cmp.to_dict()["verdict"] == cmp.verdict.value


@settings(max_examples=200, deadline=None)
@given(paired_rounds(), st.sampled_from([0.0, 2.0, 5.0]))
def test_paired_comparisons_of_any_durations_give_a_verdict(
    rounds: tuple[list[list[list[float]]], list[list[list[float]]]], t: float
) -> None:
    check_comparison(compare_paired(*rounds, t))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(samples, max_size=3), max_size=5),
    st.lists(samples, min_size=1, max_size=3),
    st.sampled_from([0.0, 5.0]),
    st.integers(min_value=1, max_value=4),
)
@example(sessions=[[[0.0, 4.345847379902e-311]]], current=[[0.1]], t=0.0, min_sessions=1)  # a subnormal median
def test_session_comparisons_of_any_durations_give_a_verdict(
    sessions: list[list[list[float]]], current: list[list[float]], t: float, min_sessions: int
) -> None:
    check_comparison(compare_sessions(sessions, current, t, min_sessions=min_sessions))
