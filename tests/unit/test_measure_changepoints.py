"""Unit tests of pytest_jetmem.measure.changepoints (no GPU): PELT against ruptures and brute force, and detect."""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_jetmem.measure.changepoints import CONFIDENCE, ChangePoint, analyse, default_penalty, detect, outliers, pelt

# R's datasets::Nile: annual flow of the Nile at Aswan, 1871-1970 (10^8 m^3; Cobb 1978). The published change
# (the Aswan dam's construction began in 1898) puts 1899, index 28, first in the new regime.
# fmt: off
NILE = [
    1120.0, 1160.0, 963.0, 1210.0, 1160.0, 1160.0, 813.0, 1230.0, 1370.0, 1140.0,
    995.0, 935.0, 1110.0, 994.0, 1020.0, 960.0, 1180.0, 799.0, 958.0, 1140.0,
    1100.0, 1210.0, 1150.0, 1250.0, 1260.0, 1220.0, 1030.0, 1100.0, 774.0, 840.0,
    874.0, 694.0, 940.0, 833.0, 701.0, 916.0, 692.0, 1020.0, 1050.0, 969.0,
    831.0, 726.0, 456.0, 824.0, 702.0, 1120.0, 1100.0, 832.0, 764.0, 821.0,
    768.0, 845.0, 864.0, 862.0, 698.0, 845.0, 744.0, 796.0, 1040.0, 759.0,
    781.0, 865.0, 845.0, 944.0, 984.0, 897.0, 822.0, 1010.0, 771.0, 676.0,
    649.0, 846.0, 812.0, 742.0, 801.0, 1040.0, 860.0, 874.0, 848.0, 890.0,
    744.0, 749.0, 838.0, 1050.0, 918.0, 986.0, 797.0, 923.0, 975.0, 815.0,
    1020.0, 906.0, 901.0, 1170.0, 912.0, 746.0, 919.0, 718.0, 714.0, 740.0,
]
# fmt: on


def _ruptures_pelt(values: np.ndarray, penalty: float, min_size: int) -> list[int]:
    """ruptures' breakpoints, less its final n (its convention: the end of every segment)."""
    rpt: Any = pytest.importorskip("ruptures", reason="ruptures (the dev extra) is the reference PELT")
    bkps = rpt.Pelt(model="l2", min_size=min_size, jump=1).fit(values).predict(pen=penalty)
    assert bkps[-1] == len(values)
    return [int(b) for b in bkps[:-1]]


def _piecewise(seed: int, n: int, n_changes: int, noise: float = 1.0) -> np.ndarray:
    """A random piecewise-constant series (levels N(0, 3)) plus N(0, noise) noise."""
    rng = np.random.default_rng(seed)
    cps = np.sort(rng.choice(np.arange(1, n), size=min(n_changes, n - 1), replace=False))
    levels = rng.normal(0.0, 3.0, size=cps.size + 1)
    return np.repeat(levels, np.diff(np.r_[0, cps, n])) + rng.normal(0.0, noise, size=n)


def _penalised_cost(values: np.ndarray, changes: list[int], penalty: float) -> float:
    bounds = [0, *changes, len(values)]
    segs = [values[a:b] for a, b in itertools.pairwise(bounds)]
    return sum(float(np.sum((s - s.mean()) ** 2)) for s in segs) + penalty * len(changes)


def _optimal_cost(values: np.ndarray, penalty: float, allowed: list[bool]) -> float:
    """Optimal partitioning without pruning (Jackson et al. 2005), segments of 1+ starting where allowed."""
    n = len(values)
    best = [0.0] + [math.inf] * n
    for t in range(1, n + 1):
        for s in range(t):
            if s == 0 or allowed[s]:
                seg = values[s:t]
                best[t] = min(best[t], best[s] + float(np.sum((seg - seg.mean()) ** 2)) + penalty)
    return best[n] - penalty  # the first segment carries no change


def _lognormal(seed: int, n: int, sigma: float = 0.01, level: float = 1.7) -> np.ndarray:
    return level * np.exp(np.random.default_rng(seed).normal(0.0, sigma, size=n))


# --- pelt ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("min_size", [1, 2, 3, 5, 10])
@pytest.mark.parametrize("penalty", [2e4, 5e4, 1e5, 1e6, 3e6])
def test_pelt_matches_ruptures_on_the_nile(penalty: float, min_size: int) -> None:
    x = np.array(NILE)
    assert pelt(x, penalty, min_size) == _ruptures_pelt(x, penalty, min_size)


def test_pelt_nile_cases_are_not_all_alike() -> None:
    """The Nile penalties above give from many change points to none: the comparison covers both ends."""
    x = np.array(NILE)
    assert len(pelt(x, 2e4, 1)) > 10
    assert pelt(x, 1e5, 3) == [28]
    assert pelt(x, 3e6, 3) == []


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("min_size", [1, 2, 3, 5])
def test_pelt_matches_ruptures_on_random_series(seed: int, min_size: int) -> None:
    x = _piecewise(seed, n=40 + 7 * seed, n_changes=seed % 6)
    for penalty in (0.5, 3.0, 10.0, 40.0):
        assert pelt(x, penalty, min_size) == _ruptures_pelt(x, penalty, min_size), (penalty, min_size)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 90),
    n_changes=st.integers(0, 8),
    noise=st.sampled_from([0.1, 1.0, 3.0]),
    penalty=st.floats(0.1, 100.0),
    min_size=st.integers(1, 6),
)
def test_pelt_matches_ruptures_property(
    seed: int, n: int, n_changes: int, noise: float, penalty: float, min_size: int
) -> None:
    x = _piecewise(seed, max(n, min_size), n_changes, noise)
    assert pelt(x, penalty, min_size) == _ruptures_pelt(x, penalty, min_size)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 40),
    penalty=st.floats(0.1, 30.0),
    data=st.data(),
)
def test_pelt_is_optimal_where_starts_are_restricted(seed: int, n: int, penalty: float, data: st.DataObject) -> None:
    """With segments of 1+ PELT's pruning is exact: its cost is the optimum, and every change sits where allowed."""
    x = _piecewise(seed, n, n // 8)
    allowed = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    changes = pelt(x, penalty, 1, allowed)
    assert all(allowed[i] for i in changes)
    assert changes == sorted(set(changes)) and all(0 < i < n for i in changes)
    assert _penalised_cost(x, changes, penalty) == pytest.approx(_optimal_cost(x, penalty, allowed), rel=1e-9, abs=1e-9)


def test_pelt_allowed_all_true_is_no_restriction() -> None:
    x = _piecewise(3, 60, 4)
    assert pelt(x, 2.0, 2, [True] * 60) == pelt(x, 2.0, 2) != []


def test_pelt_allowed_moves_a_change_to_the_nearest_start() -> None:
    x = np.r_[np.zeros(10), np.full(10, 5.0)]
    assert pelt(x, 30.0) == [10]
    allowed = [i % 3 == 0 for i in range(20)]  # 10 is not a start; 9 and 12 are
    # at 9 one 0 joins ten 5s (SSD 250 / 11); at 12 two 5s join ten 0s (SSD 500 / 12); both (SSD 50 / 3) pay twice
    assert pelt(x, 30.0, allowed=allowed) == [9]
    assert pelt(x, 1.0, allowed=allowed) == [9, 12]


def test_pelt_min_size_and_short_series() -> None:
    x = np.r_[np.zeros(5), np.full(5, 5.0), np.zeros(5)]
    assert pelt(x, 1.0, 5) == [5, 10]
    assert pelt(x, 1.0, 6) == [9]  # segments of 6+: 9 | 6 (SSD 400 / 9 + 25 * 5 / 6) beats 6 | 9 (the mirror, later)
    assert pelt(x[:9], 1.0, 5) == []  # shorter than two segments
    assert pelt([], 1.0) == [] and pelt([4.0], 1.0) == []


def test_pelt_constant_series_and_shift() -> None:
    assert pelt([7.0] * 50, 0.0) == []
    x = _piecewise(5, 50, 3)
    assert pelt(x + 1e3, 2.0, 2) == pelt(x, 2.0, 2)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"values": [1.0, float("nan")], "penalty": 1.0}, r"values\[1\] = nan"),
        ({"values": [float("inf")], "penalty": 1.0}, r"values\[0\] = inf"),
        ({"values": [1.0, 2.0], "penalty": -1.0}, "penalty must be finite and >= 0"),
        ({"values": [1.0, 2.0], "penalty": float("nan")}, "penalty must be finite"),
        ({"values": [1.0, 2.0], "penalty": 1.0, "min_size": 0}, "min_size must be an integer >= 1"),
        ({"values": [1.0, 2.0], "penalty": 1.0, "allowed": [True]}, "allowed has 1 entries"),
    ],
)
def test_pelt_rejects_bad_input(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        pelt(**kwargs)


# --- detect ----------------------------------------------------------------------------------------------------


def test_detect_finds_the_nile_change_of_1899() -> None:
    assert len(NILE) == 100
    (cp,) = detect(NILE)
    assert cp.index == 28
    assert cp.ratio < 1 and cp.ci[1] < 1
    assert cp.ci[0] <= cp.ratio <= cp.ci[1]
    assert cp.p_value < 0.001
    assert (cp.n_before, cp.n_after) == (28, 30)  # back to the start; on for the window of 30
    assert cp.before_ms == statistics.median(NILE[:28])
    assert cp.after_ms == statistics.median(NILE[28:58])
    logs = np.log(NILE)
    after = logs[28:58]  # less its outlier, the drought of 1913 (456): one year does not make or size a change
    assert NILE[28 + int(np.argmax(np.abs(after - np.median(after))))] == 456
    after = np.delete(after, np.argmax(np.abs(after - np.median(after))))
    assert cp.ratio == pytest.approx(math.exp(after.mean() - logs[:28].mean()), rel=1e-12)
    assert cp.change_pct == pytest.approx((cp.ratio - 1) * 100)


def test_detect_figures_of_an_exact_step() -> None:
    (cp,) = detect([2.0] * 10 + [3.0] * 8)
    assert (cp.index, cp.before_ms, cp.after_ms, cp.n_before, cp.n_after) == (10, 2.0, 3.0, 10, 8)
    assert cp.ratio == pytest.approx(1.5) and cp.ci == pytest.approx((1.5, 1.5)) and cp.p_value == 0.0
    assert cp.change_pct == pytest.approx(50.0)


def test_detect_interval_is_the_pooled_t_interval() -> None:
    y = np.r_[_lognormal(1, 30), 1.1 * _lognormal(2, 20)]
    (cp,) = detect(y)
    a, b = np.log(y[:30]), np.log(y[30:])
    sp2 = (np.sum((a - a.mean()) ** 2) + np.sum((b - b.mean()) ** 2)) / 48
    se = math.sqrt(sp2 * (1 / 30 + 1 / 20))
    from pytest_jetmem.measure.stats import student_t_ppf

    half = student_t_ppf(0.5 + CONFIDENCE / 2, 48) * se
    d = b.mean() - a.mean()
    assert cp.index == 30
    assert cp.ci == pytest.approx((math.exp(d - half), math.exp(d + half)), rel=1e-9)
    assert cp.ratio == pytest.approx(math.exp(d), rel=1e-12)


def test_detect_window_bounds_the_sides() -> None:
    y = np.r_[_lognormal(3, 100), 1.2 * _lognormal(4, 100)]
    (cp,) = detect(y, window=12)
    assert (cp.index, cp.n_before, cp.n_after) == (100, 12, 12)
    assert cp.before_ms == pytest.approx(float(np.median(y[88:100])))
    assert cp.after_ms == pytest.approx(float(np.median(y[100:112])))


def test_detect_sides_stop_at_the_neighbouring_change() -> None:
    y = np.r_[_lognormal(5, 40), 1.2 * _lognormal(6, 10), 1.5 * _lognormal(7, 40)]
    first, second = detect(y)
    assert (first.index, second.index) == (40, 50)
    assert (first.n_before, first.n_after, second.n_before, second.n_after) == (30, 10, 10, 30)


def test_detect_respects_commits() -> None:
    y = np.r_[_lognormal(8, 22), 1.15 * _lognormal(9, 26)]  # the step at 22, inside the commit of points 21-23
    groups = [f"c{i // 3}" for i in range(48)]
    assert 22 in [cp.index for cp in detect(y)]
    with_groups = detect(y, groups=groups)
    assert {21, 24} & {cp.index for cp in with_groups}
    assert all(groups[cp.index] != groups[cp.index - 1] for cp in with_groups)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), sizes=st.lists(st.integers(1, 5), min_size=2, max_size=25), data=st.data())
def test_detect_never_splits_a_commit(seed: int, sizes: list[int], data: st.DataObject) -> None:
    rng = np.random.default_rng(seed)
    groups = [c for c, k in enumerate(sizes) for _ in range(k)]
    steps = data.draw(st.lists(st.sampled_from([1.0, 1.0, 1.1, 0.8]), min_size=len(sizes), max_size=len(sizes)))
    levels = np.cumprod(steps)[groups]
    y = levels * np.exp(rng.normal(0.0, 0.01, size=len(groups)))
    for cp in detect(y, groups=groups, min_size=1):
        assert groups[cp.index] != groups[cp.index - 1]


def test_detect_no_change_rests_on_the_newest_commit_alone() -> None:
    """One newest session is a step or an outlier: nothing tells them apart, so it makes no change point; the
    next commit that agrees with it does."""
    y = _lognormal(10, 60, sigma=0.01)
    assert detect(np.r_[y, 1.1 * _lognormal(11, 1, sigma=0.01)]) == []
    assert detect(np.r_[y, 3.0]) == []
    stepped = np.r_[y, 1.1 * _lognormal(11, 2, sigma=0.01)]
    cps = detect(stepped)
    assert [cp.index for cp in cps] == [60]
    assert cps[0].n_after == 2 and cps[0].ratio > 1.05
    # two sessions of the newest commit are still one commit
    assert detect(np.r_[y, 1.1 * _lognormal(12, 2, sigma=0.01)], groups=[*range(60), 60, 60]) == []
    assert detect(y) == []


def test_detect_interior_segments_need_min_size_points() -> None:
    base = _lognormal(12, 61)
    y = base.copy()
    y[30] *= 1.3  # one session off is not a step: an outlier, left out
    assert not {30, 31} & ({cp.index for cp in detect(y)} | {cp.index for cp in detect(y, min_size=1)})
    assert np.flatnonzero(outliers(y)).tolist() == [30]
    y = base.copy()
    y[30:33] *= 1.3  # three sessions: an excursion up and back down
    assert [cp.index for cp in detect(y)] == [30, 33]


def test_detect_one_outlier_does_not_make_a_short_segment() -> None:
    """Heavy tails: a segment of min_size points whose mean rests on one of them is not a step in the history."""
    y = _lognormal(13, 80, sigma=0.01)
    y[40] *= 1.3  # one session 30% off, its neighbours normal: the 3-point window around it has a mean of +10%
    assert detect(y) == []
    # at the end of the series, the newest point alone is no change either (it may be a step: the next commit says)
    assert detect(y[:41]) == []


def test_detect_ten_percent_step_at_the_second_commit_after_it() -> None:
    for seed in range(5):
        y = np.r_[_lognormal(100 + seed, 500), 1.1 * _lognormal(200 + seed, 2)]
        cps = detect(y)
        assert cps and cps[-1].index == 500, seed


def test_detect_constant_series() -> None:
    assert detect([2.5] * 200) == []
    assert detect([2.5] * 200, groups=[i // 4 for i in range(200)]) == []
    assert detect([1e-300] * 50) == []


def test_detect_values_far_apart() -> None:
    """Quotients past the range of floats give an infinite ratio, not an error or a warning."""
    (cp,) = detect([1e-300] * 5 + [1e300] * 5)
    assert (cp.index, cp.ratio, cp.ci, cp.p_value) == (5, math.inf, (math.inf, math.inf), 0.0)
    (cp,) = detect([1e-300] * 5 + [1.5e-300] * 5)
    assert cp.ratio == pytest.approx(1.5) and cp.before_ms == 1e-300


def test_detect_short_series() -> None:
    assert detect([]) == []
    assert detect([3.0]) == []
    assert detect([1.0, 2.0]) == []  # min_size 3: no first segment of 3
    assert detect([1.0, 2.0], min_size=1) == []  # one point a side: no spread to test against
    assert detect([1.0, 1.0, 1.0, 2.0]) == []  # one point after: no change rests on one commit
    assert [cp.index for cp in detect([1.0, 1.0, 1.0, 2.0, 2.0])] == [3]  # an exact step after three equal points


@pytest.mark.parametrize(
    ("values", "kwargs", "match"),
    [
        ([1.0, 0.0, 2.0], {}, r"values\[1\] = 0\.0: expected a finite time in ms > 0"),
        ([1.0, 2.0, -3.0], {}, r"values\[2\] = -3\.0"),
        ([float("nan"), 1.0], {}, r"values\[0\] = nan"),
        ([1.0, float("inf")], {}, r"values\[1\] = inf"),
        ([1.0, 2.0], {"groups": ["a"]}, "groups has 1 entries, expected one commit per value"),
        ([1.0, 2.0], {"alpha": 0.0}, r"alpha must be in \(0, 1\)"),
        ([1.0, 2.0], {"alpha": 1.0}, r"alpha must be in \(0, 1\)"),
        ([1.0, 2.0], {"min_size": 0}, "min_size must be an integer >= 1"),
        ([1.0, 2.0], {"window": 0}, "window must be an integer >= 1"),
        ([1.0, 2.0], {"penalty": 0.0}, "penalty must be None or finite and > 0"),
        ([1.0, 2.0], {"penalty": float("inf")}, "penalty must be None or finite and > 0"),
    ],
)
def test_detect_rejects_bad_input(values: list[float], kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        detect(values, **kwargs)


def test_change_point_is_frozen() -> None:
    cp = ChangePoint(3, 1.0, 2.0, 2.0, (1.5, 2.5), 1e-5, 3, 4)
    assert cp.change_pct == pytest.approx(100.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cp.index = 4  # type: ignore[misc]


def test_default_penalty_grows_with_the_series() -> None:
    assert default_penalty(1000) == pytest.approx(2 * math.log(1000))
    assert 0 < default_penalty(1) == default_penalty(2) < default_penalty(100)


steps = st.lists(st.tuples(st.integers(1, 30), st.floats(0.7, 1.5)), min_size=1, max_size=6)


def _stepped(seed: int, segments: list[tuple[int, float]], sigma: float) -> np.ndarray:
    levels = np.repeat([lv for _, lv in segments], [k for k, _ in segments])
    return 1.3 * levels * np.exp(np.random.default_rng(seed).normal(0.0, sigma, size=levels.size))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), segments=steps, sigma=st.sampled_from([0.0, 0.003, 0.02, 0.1]))
def test_detect_invariants(seed: int, segments: list[tuple[int, float]], sigma: float) -> None:
    y = _stepped(seed, segments, sigma)
    cps = detect(y)
    idx = [cp.index for cp in cps]
    assert idx == sorted(set(idx))
    assert all(b - a >= 3 for a, b in zip([0, *idx], idx, strict=False))  # every segment but the last has 3+
    for cp in cps:
        assert 0 < cp.index < len(y)
        assert cp.p_value < 0.001
        assert cp.ci[0] <= cp.ratio <= cp.ci[1]
        assert 1 <= cp.n_before <= 30 and 1 <= cp.n_after <= 30
        assert (cp.ratio > 1) == (cp.change_pct > 0)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    segments=steps,
    sigma=st.sampled_from([0.0, 0.005, 0.05]),
    power=st.integers(-20, 20),
)
def test_detect_scaling_changes_only_the_ms_figures(
    seed: int, segments: list[tuple[int, float]], sigma: float, power: int
) -> None:
    """A power of 2 scales every value exactly: the change points are the same, bit for bit, but for the ms."""
    y = _stepped(seed, segments, sigma)
    scale = 2.0**power
    plain, scaled = detect(y), detect(y * scale)
    assert [dataclasses.replace(cp, before_ms=0.0, after_ms=0.0) for cp in plain] == [
        dataclasses.replace(cp, before_ms=0.0, after_ms=0.0) for cp in scaled
    ]
    for a, b in zip(plain, scaled, strict=True):
        assert (b.before_ms, b.after_ms) == (a.before_ms * scale, a.after_ms * scale)


def test_detect_scaling_by_any_factor() -> None:
    y = np.r_[_lognormal(20, 40), 1.08 * _lognormal(21, 40), 0.9 * _lognormal(22, 40)]
    plain, scaled = detect(y), detect(y * 3.7)
    assert [cp.index for cp in plain] == [cp.index for cp in scaled] == [40, 80]
    for a, b in zip(plain, scaled, strict=True):
        assert b.ratio == pytest.approx(a.ratio, rel=1e-9) and b.p_value == pytest.approx(a.p_value, rel=1e-6)
        assert b.ci == pytest.approx(a.ci, rel=1e-9)
        assert b.before_ms == pytest.approx(3.7 * a.before_ms) and b.after_ms == pytest.approx(3.7 * a.after_ms)


# --- one session can neither hide, create nor move a change point (issue: a history gate that cannot be fooled) --


def _with_session(y: np.ndarray, at: int, factor: float) -> tuple[np.ndarray, list[int]]:
    """``y`` (one session per commit) with one more session of commit ``at`` (a rerun), ``factor`` times that commit's
    value; ``at == len(y)``: a new newest commit of one session, ``factor`` times the newest value."""
    groups = list(range(y.size))
    base = y[min(at, y.size - 1)]
    pos = min(at + 1, y.size)
    return np.insert(y, pos, base * factor), [*groups[:pos], min(at, y.size), *groups[pos:]]


def _commit_places(y: np.ndarray, groups: list[int] | None = None) -> list[tuple[int, bool]]:
    """(commit of the first session after, slower) of each change point."""
    g = groups if groups is not None else list(range(y.size))
    return [(g[cp.index], cp.ratio > 1) for cp in detect(y, groups=g)]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), step_at=st.integers(30, 70), step=st.sampled_from([0.90, 1.10, 1.5]),
       where=st.floats(0.0, 1.0), factor=st.floats(0.2, 10.0), sigma=st.sampled_from([0.005, 0.01]))
# a rerun two commits before a 1.5x step, at the level after it: the step stays where it is (a reading of each
# commit's least favourable session, tried in session 20, moved it three commits early)
@example(seed=1779, step_at=52, step=1.5, where=0.7815997074229714, factor=1.4048439510560862, sigma=0.01)
# a rerun of the step's first commit at the level before it: that commit has one session of each level
@example(seed=4520, step_at=44, step=0.9, where=0.7856925255291513, factor=1.1557501234637462, sigma=0.01)
def test_one_extra_session_anywhere_changes_no_change_point(
    seed: int, step_at: int, step: float, where: float, factor: float, sigma: float
) -> None:
    """A clear step (10 noise scales and more) with one more session of any size (x0.2 to x10) at any place: a
    rerun of an old commit, of one inside the confirmation window, of the newest commit, or a new newest commit of
    one session. The change points are those found without it, at the same commits; except where the extra session
    is of the commit just before the step and reads like the level after it (nearer the step than the level before),
    or of the step's first commit and reads like the level before it: that commit then has one session of each level,
    and a step found before it is as right as one after it."""
    n = step_at + 12
    y = _lognormal(seed, n, sigma=sigma)
    y[step_at:] *= step
    want = _commit_places(y)
    assert (step_at, step > 1) in want
    at = min(int(where * (n + 1)), n)
    extra, groups = _with_session(y, at, factor)
    got = _commit_places(extra, groups)
    if at == step_at - 1 and abs(math.log(factor / step)) < abs(math.log(factor)):
        earlier = [(step_at - 1, slower) if place == step_at else (place, slower) for place, slower in want]
        assert got in (want, earlier), (at, factor)
    elif at == step_at and abs(math.log(factor * step)) < abs(math.log(factor)):
        later = [(step_at + 1, slower) if place == step_at else (place, slower) for place, slower in want]
        assert got in (want, later), (at, factor)
    else:
        assert got == want, (at, factor)


def test_a_rerun_of_the_commit_before_a_step_at_the_level_after_it_may_move_the_step_there() -> None:
    """The case hypothesis found (seed 0, a 10% faster step at commit 30, a rerun of commit 29 at x0.89): commit 29
    has one session of each level; the step is found at 29 or 30, and nowhere else."""
    y = _lognormal(0, 42, sigma=0.005)
    y[30:] *= 0.9
    extra, groups = _with_session(y, 29, 0.890625)
    assert _commit_places(extra, groups) in ([(30, False)], [(29, False)])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), where=st.floats(0.0, 1.0),
       factor=st.one_of(st.floats(0.2, 0.95), st.floats(1.05, 10.0)))
@example(seed=3719, where=1.0, factor=0.5)  # a chance change point at 77 of 80: a slow session after it ends it
@example(seed=1628, where=0.9375, factor=0.9375)  # a rerun of commit 75 at x0.94 moved its median half way
def test_one_extra_session_makes_no_change_point_of_unchanged_code(seed: int, where: float, factor: float) -> None:
    """An outlying session (5 noise scales and more: a rerun, or a new last commit) adds no change point; it may take
    away a chance one near the end of the history, which one more session no longer supports (hypothesis found seed
    3719). A rerun that disagrees with its commit's first session and with both neighbours is left out, so it cannot
    move its commit's median towards a chance dip (seed 1628). A session within the noise is new data, not an
    outlier: like any new session it may confirm a change that was borderline."""
    y = _lognormal(seed, 80, sigma=0.01)
    want = _commit_places(y)
    extra, groups = _with_session(y, min(int(where * 81), 80), factor)
    assert set(_commit_places(extra, groups)) <= set(want)


def test_a_rerun_unlike_its_commit_and_both_neighbours_is_an_outlier() -> None:
    y = _lognormal(5, 40, sigma=0.01)
    groups = [*range(21), 20, *range(21, 40)]
    far = np.insert(y, 21, y[20] * 0.95)  # commit 20 again at x0.95: 5 noise scales, below the Hampel threshold
    assert np.flatnonzero(outliers(far, groups=groups)).tolist() == [21]
    near = np.insert(y, 21, y[20] * 1.01)  # a rerun within the noise: both sessions count
    assert not outliers(near, groups=groups).any()
    step = y.copy()
    step[21:] *= 1.10
    at_step = np.insert(step, 21, y[20] * 1.10)  # commit 20 again at the level after it: a step, not an outlier
    assert not outliers(at_step, groups=groups).any()
    majority = np.insert(y, 21, [y[20] * 1.05] * 2)  # three sessions of commit 20, two of them 5% up: its level
    assert not outliers(majority, groups=[*range(21), 20, 20, *range(21, 40)]).any()


def test_the_newest_commits_reruns_that_disagree_wait_for_the_next_commit() -> None:
    y = _lognormal(21, 60, sigma=0.005)
    y[55:] *= 1.1  # a step 5 commits ago
    groups = [*range(60), 59]
    fast = np.r_[y, y[-1] * 0.3]  # and a rerun of HEAD at x0.3 (a session that finished early)
    assert [(groups[c.index], c.ratio > 1) for c in detect(fast, groups=groups)] == [(55, True)]
    assert outliers(fast, groups=groups).tolist() == [False] * 60 + [True]
    agree = np.r_[y, y[-1] * 1.001]  # reruns that agree: none is an outlier
    assert not outliers(agree, groups=groups).any()


def test_a_change_near_a_machine_change_is_placed_on_it_where_the_data_allow() -> None:
    classes = [0] * 30 + [1] * 30
    placed = 0
    for seed in range(40):
        y = _lognormal(300 + seed, 60, sigma=0.015)
        y[30:] *= 1.05  # the driver step: 3.3 noise scales, often placed a commit or two off by least squares
        found = analyse(y, classes=classes).changes
        placed += bool(found) and found[-1].index == 30
    assert placed >= 38
    y = _lognormal(400, 60, sigma=0.004)
    y[33:] *= 1.10  # a code step three commits after the machine change: not moved onto it
    assert [c.index for c in analyse(y, classes=classes).changes] == [33]
