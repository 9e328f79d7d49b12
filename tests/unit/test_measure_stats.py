"""Unit tests of pytest_jetmem.measure.stats (no GPU)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_jetmem.measure import stats as stats_module
from pytest_jetmem.measure.stats import (
    StoppingRule,
    Summary,
    mann_whitney_p,
    median_rel_noise,
    ratio_ci,
    run_ratio_test,
    student_t_ppf,
    student_t_sf2,
    summarize,
)

durations = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False, allow_infinity=False)
sample_lists = st.lists(durations, min_size=1, max_size=60)


# --- summarize ---------------------------------------------------------------------------------------------


def test_summarize_hand_computed() -> None:
    s = summarize([3.0, 1.0, 100.0, 2.0, 4.0])
    # sorted 1 2 3 4 100; |x - 3| = 2 1 0 1 97 -> MAD 1; linear percentiles at index q * 4
    assert s.n == 5
    assert s.median == 3.0
    assert s.mad == pytest.approx(1.4826)
    assert s.iqr == pytest.approx(4.0 - 2.0)  # p75 index 3 -> 4, p25 index 1 -> 2
    assert s.p5 == pytest.approx(1.2)  # index 0.2: 1 + 0.2 * (2 - 1)
    assert s.p95 == pytest.approx(80.8)  # index 3.8: 4 + 0.8 * (100 - 4)
    assert (s.min, s.max) == (1.0, 100.0)


def test_summarize_even_count_and_numpy_input() -> None:
    s = summarize(np.array([[1.0, 2.0], [3.0, 10.0]]))
    assert s.n == 4
    assert s.median == 2.5
    # |x - 2.5| = 1.5 0.5 0.5 7.5 -> median 1.0
    assert s.mad == pytest.approx(1.4826)


def test_summary_to_dict_is_plain_and_complete() -> None:
    d = summarize([1.0, 2.0, 3.0]).to_dict()
    assert set(d) == {"n", "median", "mad", "iqr", "p5", "p95", "min", "max"}
    assert d["n"] == 3 and d["median"] == 2.0
    assert Summary(**d) == summarize([1.0, 2.0, 3.0])


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [float("inf"), 1.0], [-float("inf")]])
def test_summarize_rejects_empty_and_non_finite(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        summarize(bad)


@settings(max_examples=200, deadline=None)
@given(sample_lists)
def test_summary_invariants(xs: list[float]) -> None:
    s = summarize(xs)
    assert s.n == len(xs)
    eps = 1e-9 * s.max
    assert s.min - eps <= s.p5 <= s.median + eps
    assert s.median - eps <= s.p95 <= s.max + eps
    assert s.min == min(xs) and s.max == max(xs)
    assert s.mad >= 0 and s.iqr >= 0
    assert s.iqr <= s.max - s.min + eps


@settings(max_examples=100, deadline=None)
@given(sample_lists, st.floats(min_value=0.1, max_value=10.0), st.floats(min_value=-5.0, max_value=5.0))
def test_summary_is_affine_equivariant(xs: list[float], k: float, c: float) -> None:
    s = summarize(xs)
    t = summarize([k * x + c for x in xs])
    tol = 1e-9 * (k * s.max + abs(c) + 1)
    assert t.median == pytest.approx(k * s.median + c, abs=tol)
    assert t.mad == pytest.approx(k * s.mad, abs=tol)
    assert t.iqr == pytest.approx(k * s.iqr, abs=tol)


# --- median_rel_noise -------------------------------------------------------------------------------------


def test_median_rel_noise_hand_computed() -> None:
    # MAD (unscaled) 1, n 5, median 3
    expected = 1.2533 * 1.4826 * 1.0 / math.sqrt(5) / 3.0
    assert median_rel_noise([3.0, 1.0, 100.0, 2.0, 4.0]) == pytest.approx(expected)


def test_median_rel_noise_edges() -> None:
    assert median_rel_noise([1.0]) == math.inf
    assert median_rel_noise([1.0, 2.0]) == math.inf
    assert median_rel_noise([2.0, 2.0, 2.0, 2.0]) == 0.0
    assert median_rel_noise([0.0, 0.0, 0.0]) == math.inf  # no relative noise around a zero median
    with pytest.raises(ValueError):
        median_rel_noise([])


def test_median_rel_noise_shrinks_with_more_samples() -> None:
    rng = np.random.default_rng(1)
    x = np.exp(rng.normal(0.0, 0.05, 4000))
    assert median_rel_noise(x) < median_rel_noise(x[:100]) / 3  # ~ 1/sqrt(40) ratio


# --- StoppingRule -----------------------------------------------------------------------------------------


def test_stopping_rule_waits_for_min_samples_even_past_the_time_budget() -> None:
    rule = StoppingRule(min_samples=10)
    assert rule.done([1.0] * 9, elapsed_s=100.0) == (False, "")


def test_stopping_rule_stops_on_noise() -> None:
    rule = StoppingRule(target_rel_noise=0.01, min_samples=10)
    assert rule.done([1.0] * 10, elapsed_s=0.0) == (True, "noise")


def test_stopping_rule_stops_on_samples_then_time() -> None:
    noisy = list(np.exp(np.random.default_rng(0).normal(0.0, 1.0, 50)))
    assert median_rel_noise(noisy) > 0.01
    rule = StoppingRule(target_rel_noise=0.01, min_samples=10, max_samples=50, max_time_s=2.0)
    assert rule.done(noisy, elapsed_s=0.0) == (True, "samples")
    assert rule.done(noisy[:30], elapsed_s=0.5) == (False, "")
    assert rule.done(noisy[:30], elapsed_s=2.0) == (True, "time")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"target_rel_noise": -0.1},
        {"target_rel_noise": float("nan")},
        {"min_samples": 0},
        {"min_samples": 20, "max_samples": 10},
        {"max_time_s": float("nan")},
        {"max_time_s": -1.0},
    ],
)
def test_stopping_rule_validates(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        StoppingRule(**kwargs)


# --- ratio_ci ---------------------------------------------------------------------------------------------


def test_ratio_ci_constant_samples_is_exact() -> None:
    assert ratio_ci([2.0] * 10, [3.0] * 7) == (1.5, 1.5, 1.5)


def test_ratio_ci_point_is_ratio_of_medians() -> None:
    ratio, low, high = ratio_ci([1.0, 2.0, 9.0], [2.0, 4.0, 4.0, 100.0])
    assert ratio == pytest.approx(4.0 / 2.0)
    assert low <= ratio <= high


def test_ratio_ci_is_deterministic_and_seeded() -> None:
    rng = np.random.default_rng(3)
    b, c = rng.lognormal(0, 0.2, 40), rng.lognormal(0.1, 0.2, 40)
    assert ratio_ci(b, c, seed=7) == ratio_ci(list(b), list(c), seed=7)
    assert ratio_ci(b, c, seed=7) != ratio_ci(b, c, seed=8)


def test_ratio_ci_narrows_with_lower_confidence() -> None:
    rng = np.random.default_rng(4)
    b, c = rng.lognormal(0, 0.1, 60), rng.lognormal(0.05, 0.1, 60)
    r99, lo99, hi99 = ratio_ci(b, c, confidence=0.99)
    r50, lo50, hi50 = ratio_ci(b, c, confidence=0.50)
    assert r99 == r50
    assert lo99 <= lo50 <= hi50 <= hi99
    assert hi99 - lo99 > hi50 - lo50


def test_ratio_ci_covers_known_shift() -> None:
    # 10% slower, 2% lognormal noise, 50 samples: the 99% interval should hold 1.10 nearly always.
    hits = 0
    for seed in range(100):
        rng = np.random.default_rng(seed)
        b = 0.3 * rng.lognormal(0.0, 0.02, 50)
        c = 0.33 * rng.lognormal(0.0, 0.02, 50)
        _, low, high = ratio_ci(b, c, seed=seed)
        hits += low <= 1.10 <= high
    assert hits >= 90


def test_ratio_ci_handles_zero_durations() -> None:
    ratio, low, high = ratio_ci([0.0, 1.0, 1.0, 1.0, 1.0], [1.0] * 5)
    assert ratio == 1.0
    assert low <= 1.0 <= high
    assert not math.isnan(low) and not math.isnan(high)


@pytest.mark.parametrize(
    ("base", "cur", "kwargs"),
    [
        ([], [1.0], {}),
        ([1.0], [], {}),
        ([1.0, float("nan")], [1.0], {}),
        ([1.0], [-1.0, 1.0, 2.0], {}),
        ([0.0, 0.0, 1.0], [1.0], {}),
        ([1.0], [1.0], {"confidence": 1.0}),
        ([1.0], [1.0], {"confidence": 0.0}),
        ([1.0], [1.0], {"n_boot": 0}),
    ],
)
def test_ratio_ci_validates(base: list[float], cur: list[float], kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ratio_ci(base, cur, **kwargs)


@settings(max_examples=100, deadline=None)
@given(sample_lists, sample_lists, st.integers(0, 2**32 - 1))
def test_ratio_ci_brackets_the_point_ratio(b: list[float], c: list[float], seed: int) -> None:
    ratio, low, high = ratio_ci(b, c, n_boot=200, seed=seed)
    assert ratio == pytest.approx(float(np.median(c)) / float(np.median(b)))
    assert low <= ratio <= high
    assert min(c) / max(b) * (1 - 1e-12) <= low and high <= max(c) / min(b) * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(st.lists(durations, min_size=1, max_size=300), st.integers(0, 2**32 - 1), st.integers(1, 700))
def test_bootstrap_medians_are_numpys_medians_of_the_same_resamples(values: list[float], seed: int,
                                                                    n_boot: int) -> None:
    arr = np.array(values)
    fast = stats_module._boot_medians(arr, n_boot, np.random.default_rng(seed))
    rng, rows = np.random.default_rng(seed), max(1, stats_module._BOOT_CHUNK // arr.size)
    plain = np.concatenate([np.median(arr[rng.integers(0, arr.size, size=(min(rows, n_boot - start), arr.size))],
                                      axis=1) for start in range(0, n_boot, rows)]) if arr.size > 1 \
        else np.full(n_boot, arr[0])
    assert np.array_equal(fast, plain)  # bit for bit


@settings(max_examples=50, deadline=None)
@given(sample_lists, sample_lists, st.floats(min_value=0.5, max_value=4.0))
def test_ratio_ci_scales_with_current(b: list[float], c: list[float], k: float) -> None:
    r, lo, hi = ratio_ci(b, c, n_boot=200, seed=1)
    rk, lok, hik = ratio_ci(b, [k * x for x in c], n_boot=200, seed=1)
    assert (rk, lok, hik) == pytest.approx((k * r, k * lo, k * hi), rel=1e-9)


# --- mann_whitney_p ---------------------------------------------------------------------------------------


def test_mann_whitney_separated_hand_computed() -> None:
    # U = 0, mean 4.5, var 3*3/12*7 = 5.25, z = (4.5 - 0.5)/sqrt(5.25) = 1.7457 -> p = 0.080856
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.0808556, rel=1e-5)


def test_mann_whitney_ties_hand_computed() -> None:
    # combined: 1a 2a 2a 2b 3a 3b 3b 4b; tied ranks 2 -> 3, 3 -> 6; R_a = 1+3+3+6 = 13, U = 13 - 10 = 3
    # mean 8, tie groups 1,3,3,1 -> sum(t^3 - t) = 48, var = 16/12 * (9 - 48/56)
    z = (abs(3 - 8) - 0.5) / math.sqrt(16 / 12 * (9 - 48 / 56))
    expected = math.erfc(z / math.sqrt(2))
    assert expected == pytest.approx(0.172, abs=1e-3)
    assert mann_whitney_p([1, 2, 2, 3], [2, 3, 3, 4]) == pytest.approx(expected, rel=1e-12)


def test_mann_whitney_degenerate_cases() -> None:
    assert mann_whitney_p([5.0] * 4, [5.0] * 7) == 1.0
    assert mann_whitney_p([1.0], [2.0]) == 1.0  # |U - mu| = 0.5: nothing left after continuity correction
    with pytest.raises(ValueError):
        mann_whitney_p([], [1.0])
    with pytest.raises(ValueError):
        mann_whitney_p([1.0, float("nan")], [1.0])


def test_mann_whitney_detects_a_large_shift() -> None:
    rng = np.random.default_rng(0)
    a = rng.lognormal(0.0, 0.02, 50)
    assert mann_whitney_p(a, 1.1 * rng.lognormal(0.0, 0.02, 50)) < 1e-10
    assert mann_whitney_p(a, rng.lognormal(0.0, 0.02, 50)) > 0.001


def _reference_p(a: list[float], b: list[float]) -> float:
    """Independent reference: U by pair counting, tie term by Counter."""
    u = sum((x > y) + 0.5 * (x == y) for x in a for y in b)
    n1, n2 = len(a), len(b)
    big = n1 + n2
    ties = sum(t**3 - t for t in Counter(a + b).values())
    var = n1 * n2 / 12 * ((big + 1) - ties / (big * (big - 1)))
    if var <= 0:
        return 1.0
    z = (abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(var)
    return 1.0 if z <= 0 else min(1.0, math.erfc(z / math.sqrt(2)))


small_ints = st.lists(st.integers(0, 6).map(float), min_size=1, max_size=25)


@settings(max_examples=200, deadline=None)
@given(small_ints, small_ints)
def test_mann_whitney_matches_pair_counting_reference(a: list[float], b: list[float]) -> None:
    assert mann_whitney_p(a, b) == pytest.approx(_reference_p(a, b), rel=1e-9, abs=1e-15)


@settings(max_examples=200, deadline=None)
@given(sample_lists, sample_lists)
def test_mann_whitney_p_in_unit_interval_symmetric_and_rank_based(a: list[float], b: list[float]) -> None:
    p = mann_whitney_p(a, b)
    assert 0.0 <= p <= 1.0
    assert mann_whitney_p(b, a) == p
    # only ranks matter: exact monotone maps (scaling by 4, reflection for a two-sided test) keep p
    assert mann_whitney_p([4 * x for x in a], [4 * x for x in b]) == p
    assert mann_whitney_p([-x for x in a], [-x for x in b]) == p


# -- statistics: Student's t ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("q", "df", "table_value"),
    [
        (0.975, 4, 2.776),
        (0.995, 10, 3.169),
        (0.95, 1, 6.314),
        (0.995, 2, 9.925),
        (0.9, 5, 1.476),
        (0.975, 30, 2.042),
        (0.995, 120, 2.617),
        (0.975, 1e7, 1.960),
    ],
)
def test_student_t_quantiles_match_the_table(q: float, df: float, table_value: float) -> None:
    t = student_t_ppf(q, df)
    assert t == pytest.approx(table_value, abs=1.5e-3)
    assert student_t_sf2(t, df) == pytest.approx(2 * (1 - q), rel=1e-6)


@pytest.mark.parametrize("t", [0.0, 0.3, 1.0, 2.5, 10.0])
def test_student_t_sf2_closed_forms(t: float) -> None:
    assert student_t_sf2(t, 1) == pytest.approx(1 - 2 * math.atan(t) / math.pi, abs=1e-12)  # Cauchy
    assert student_t_sf2(t, 2) == pytest.approx(1 - t / math.sqrt(2 + t * t), abs=1e-12)
    assert student_t_sf2(-t, 7) == student_t_sf2(t, 7)


def test_student_t_sf2_table_and_edges() -> None:
    assert student_t_sf2(2.776, 4) == pytest.approx(0.05, abs=2e-4)
    assert student_t_sf2(3.169, 10) == pytest.approx(0.01, abs=1e-4)
    assert student_t_sf2(math.inf, 5) == 0.0
    assert student_t_sf2(0.0, 5) == 1.0
    assert student_t_sf2(40.0, 3) < 1e-4


# -- statistics: run-level comparison ------------------------------------------------------------------------------
def test_run_ratio_test_two_sided_welch_by_hand() -> None:
    b, c = [1.0, 1.1, 0.9, 1.05], [1.2, 1.3, 1.15]
    lb, lc = np.log(b), np.log(c)
    vb, vc = lb.var(ddof=1) / len(b), lc.var(ddof=1) / len(c)
    df = (vb + vc) ** 2 / (vb**2 / (len(b) - 1) + vc**2 / (len(c) - 1))
    d, se = lc.mean() - lb.mean(), math.sqrt(vb + vc)
    half = student_t_ppf(0.995, df) * se
    ratio, lo, hi, p = run_ratio_test(b, c)
    assert ratio == pytest.approx(math.exp(d))
    assert (lo, hi) == (pytest.approx(math.exp(d - half)), pytest.approx(math.exp(d + half)))
    assert p == pytest.approx(student_t_sf2(d / se, df))
    # geometric: swapping the sides inverts the ratio and the interval, and keeps p
    r2, lo2, hi2, p2 = run_ratio_test(c, b)
    assert (r2, lo2, hi2, p2) == (
        pytest.approx(1 / ratio),
        pytest.approx(1 / hi),
        pytest.approx(1 / lo),
        pytest.approx(p),
    )


def _prediction_case() -> tuple[list[float], float, float, float, int]:
    rng = np.random.default_rng(11)
    base = list(np.exp(rng.normal(0.0, 0.05, 10)))
    current = 1.15
    lb = np.log(base)
    d = math.log(current) - lb.mean()
    se = lb.std(ddof=1) * math.sqrt(1 + 1 / len(base))  # one new run: its variance is the baseline runs'
    return base, current, d, se, len(base)


def test_run_ratio_test_one_current_run_is_a_prediction_interval() -> None:
    base, current, d, se, n = _prediction_case()
    ratio, lo, hi, p = run_ratio_test(base, [current])
    assert ratio == pytest.approx(math.exp(d))
    half = math.log(hi) - d
    assert d - math.log(lo) == pytest.approx(half)  # symmetric on the log scale
    # the half-width is a t quantile times the prediction standard error s * sqrt(1 + 1/n), not s / sqrt(n)
    assert student_t_ppf(0.995, 1e7) * se <= half <= student_t_ppf(0.995, n - 1) * se * (1 + 1e-9)
    assert 0.0 < p < 0.05
    with pytest.raises(ValueError, match="at least two runs"):
        run_ratio_test([1.0], [1.1])


def test_run_ratio_test_prediction_interval_has_n_minus_1_degrees_of_freedom() -> None:
    base, current, d, se, n = _prediction_case()
    _, lo, hi, p = run_ratio_test(base, [current])
    half = student_t_ppf(0.995, n - 1) * se
    assert (lo, hi) == (pytest.approx(math.exp(d - half), rel=1e-6), pytest.approx(math.exp(d + half), rel=1e-6))
    assert p == pytest.approx(student_t_sf2(d / se, n - 1), rel=1e-6)
