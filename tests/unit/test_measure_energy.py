"""Energy per call (pytest_jetmem.measure.energy): windows a sensor can resolve, idle taken out, an interval.

The counter path runs on a clock the test steps (the fake NVML counter's steps of 20-100 ms with noise, the work
and the idle waits moving the clock), so every figure is exact to compare with the energy the fake was told to use.
The power path (a thread reading an instantaneous power) runs on the real clock, with short windows.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fakes.fake_driver import FakeEnergyCounter
from pytest_jetmem.machine.power import Covers, Kind, PowerReadError, Reading
from pytest_jetmem.measure.energy import Energy, EnergyRule, EnergyWindows, Window, measure_energy, per_call


class Clock:
    """The test's clock: ``sleep`` moves it, as does the work."""

    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


@dataclass
class CounterSource:
    """The fake NVML counter as a power source stamped on the test's clock (the real NvmlEnergySource stamps with
    ``time.monotonic``)."""

    counter: FakeEnergyCounter
    clock: Clock
    update_period_s: float = 0.1
    name: str = "fake NVML energy counter"
    kind: Kind = "energy"
    covers: Covers = "gpu-board"
    includes: str = "the fake GPU board"
    period_basis: str = "the fake's slow end"

    def read(self) -> Reading:
        return Reading(self.clock.t, self.counter.energy_mj() / 1000.0)


def kernel(counter: FakeEnergyCounter, clock: Clock, load_w: float, seconds_per_call: float):  # type: ignore[no-untyped-def]
    """A work of ``seconds_per_call`` a call drawing ``load_w`` above idle while it runs."""

    def run(calls: int) -> None:
        counter.set_load(load_w)
        clock.t += calls * seconds_per_call
        counter.set_load(0.0)

    return run


def counter_setup(idle_w: float = 300.0, noise: float = 0.01, seed: int = 0) -> tuple[FakeEnergyCounter, Clock]:
    clock = Clock()
    return FakeEnergyCounter(idle_w=idle_w, noise=noise, seed=seed, clock=clock), clock


def test_a_kernel_reads_its_own_energy_with_the_idle_board_taken_out() -> None:
    counter, clock = counter_setup(idle_w=300.0)
    run = kernel(counter, clock, load_w=120.0, seconds_per_call=1e-4)  # 12 mJ a call over 300 W idle
    (energy,) = measure_energy(CounterSource(counter, clock), [run], [1e-4], sleep=clock.sleep, now=clock)
    assert energy.joules == pytest.approx(0.012, rel=0.05)
    assert energy.low <= 0.012 <= energy.high
    assert energy.idle_w == pytest.approx(300.0, rel=0.02)
    assert energy.power_w == pytest.approx(420.0, rel=0.05)
    assert energy.windows >= 3 and energy.calls >= 3 * 2000 and energy.source == "fake NVML energy counter"


def test_twice_the_work_reads_twice_the_energy_measured_in_turns() -> None:
    counter, clock = counter_setup(idle_w=250.0, seed=4)
    once = kernel(counter, clock, load_w=100.0, seconds_per_call=2e-4)
    twice = kernel(counter, clock, load_w=100.0, seconds_per_call=4e-4)
    rule = EnergyRule(max_time_s=5.0)
    source = CounterSource(counter, clock)
    a, b = measure_energy(source, [once, twice], [2e-4, 4e-4], rule, sleep=clock.sleep, now=clock)
    assert b.joules / a.joules == pytest.approx(2.0, rel=0.05)


def test_a_drifting_idle_power_is_taken_out_where_it_happens() -> None:
    """The board's idle power climbs 20% over the measurement (warming up): bracketing each window by the idle
    windows either side keeps the estimate; one idle figure for the whole run would not."""
    counter, clock = counter_setup(idle_w=200.0, noise=0.0)
    start = clock.t
    work = kernel(counter, clock, load_w=50.0, seconds_per_call=1e-3)

    def drift() -> None:
        counter.set_load(counter.load_w)  # steps due so far keep their power
        counter.idle_w = 200.0 * (1 + 0.1 * (clock.t - start))

    def run(calls: int) -> None:
        drift()
        work(calls)
        drift()

    def sleep(seconds: float) -> None:
        for _ in range(10):
            clock.sleep(seconds / 10)
            drift()

    (energy,) = measure_energy(CounterSource(counter, clock), [run], [1e-3], sleep=sleep, now=clock)
    assert energy.joules == pytest.approx(0.05, rel=0.05)
    assert counter.idle_w > 1.15 * 200.0


def test_windows_are_added_until_the_interval_is_narrow_or_the_time_is_up() -> None:
    counter, clock = counter_setup(idle_w=300.0, noise=0.0)
    quiet = kernel(counter, clock, load_w=150.0, seconds_per_call=1e-3)
    (narrow,) = measure_energy(CounterSource(counter, clock), [quiet], [1e-3], sleep=clock.sleep, now=clock)
    assert narrow.stop_reason == "interval" and narrow.rel_halfwidth <= 0.03 and narrow.windows == 3

    noisy_counter, noisy_clock = counter_setup(idle_w=300.0, noise=0.3, seed=9)
    noisy = kernel(noisy_counter, noisy_clock, load_w=15.0, seconds_per_call=1e-3)
    rule = EnergyRule(max_time_s=1.5)
    (wide,) = measure_energy(
        CounterSource(noisy_counter, noisy_clock), [noisy], [1e-3], rule, sleep=noisy_clock.sleep, now=noisy_clock
    )
    assert wide.stop_reason == "time" and wide.rel_halfwidth > 0.03
    assert wide.seconds + 0.1 * (wide.windows + 1) <= 1.5 + 4 * 0.4  # the cap, and at most one round past it


def test_in_turns_the_other_sides_turns_do_not_count_against_the_cap() -> None:
    """``--jetmem-against``'s turns: between this side's turns the other process runs its own (here 2 s of the
    clock each, as long as the whole cap); the cap counts this side's steps only, so a noisy work gets its windows
    (was: two turns, then "time": an interval over two windows too wide to judge on the H200)."""
    counter, clock = counter_setup(idle_w=300.0, noise=0.3, seed=9)
    work = kernel(counter, clock, load_w=15.0, seconds_per_call=1e-3)
    windows = EnergyWindows(CounterSource(counter, clock), [work], [1e-3], EnergyRule(max_time_s=2.0),
                            sleep=clock.sleep, now=clock)
    turns = 0
    while not windows.stop_reason():
        windows.restart()
        windows.idle()
        windows.work(0)
        windows.idle()
        turns += 1
        clock.sleep(2.0)  # the other side's turn
    (energy,) = windows.energies(windows.stop_reason())
    assert energy.stop_reason == "time" and turns >= 3 and energy.windows == turns  # wall time: 2 turns
    assert 2.0 <= windows.spent_s <= 2.0 + 0.8  # its own steps: the cap, and at most one turn past it
    assert energy.seconds <= windows.spent_s


def test_the_calls_per_window_follow_what_a_window_took() -> None:
    """A first guess 100x too fast: the first window is long, the next ones about the window's length."""
    counter, clock = counter_setup(idle_w=100.0, noise=0.0)
    run = kernel(counter, clock, load_w=50.0, seconds_per_call=1e-3)
    (energy,) = measure_energy(CounterSource(counter, clock), [run], [1e-5], sleep=clock.sleep, now=clock)
    assert energy.joules == pytest.approx(0.05, rel=0.05)
    assert energy.calls < 20000 + 3 * 400  # one long window, then windows of about 0.2 s (200 calls)


@settings(max_examples=25, deadline=None)
@given(
    idle=st.floats(20.0, 500.0),
    load=st.floats(20.0, 300.0),
    per_call_s=st.floats(5e-6, 5e-3),
    seed=st.integers(0, 2**16),
)
def test_the_estimate_holds_over_boards_and_kernels(idle: float, load: float, per_call_s: float, seed: int) -> None:
    counter, clock = counter_setup(idle_w=idle, noise=0.005, seed=seed)
    run = kernel(counter, clock, load_w=load, seconds_per_call=per_call_s)
    (energy,) = measure_energy(
        CounterSource(counter, clock), [run], [per_call_s], EnergyRule(max_time_s=4.0), sleep=clock.sleep, now=clock
    )
    truth = load * per_call_s
    # the interval is what is claimed: where it is narrow, the truth is within twice its width of the estimate
    assert abs(energy.joules - truth) <= max(2 * (energy.high - energy.low), 0.05 * truth)


# -- an instantaneous power, read by a thread ----------------------------------------------------------------------
class PowerMeter:
    """An instantaneous power on the real clock: ``idle_w``, plus ``load_w`` while ``busy`` is set."""

    kind: Kind = "power"
    covers: Covers = "gpu"
    includes = "a fake rail"
    period_basis = "the fake's"
    name = "fake rail VDD_GPU"

    def __init__(self, idle_w: float, load_w: float, update_period_s: float = 0.002, fail_after: int = 0) -> None:
        self.idle_w, self.load_w, self.update_period_s = idle_w, load_w, update_period_s
        self.busy = threading.Event()
        self.reads = 0
        self.fail_after = fail_after

    def read(self) -> Reading:
        self.reads += 1
        if self.fail_after and self.reads > self.fail_after:
            raise PowerReadError("/sys/class/hwmon/hwmon1/curr1_input: No such device")
        return Reading(time.monotonic(), self.idle_w + (self.load_w if self.busy.is_set() else 0.0))


def test_an_instantaneous_power_is_integrated_between_the_windows_edges() -> None:
    meter = PowerMeter(idle_w=5.0, load_w=10.0)

    def run(calls: int) -> None:
        meter.busy.set()
        time.sleep(calls * 1e-3)
        meter.busy.clear()

    rule = EnergyRule(min_window_s=0.05, max_time_s=1.0, target_rel=0.1)
    (energy,) = measure_energy(meter, [run], [1e-3], rule)
    # 10 mJ a call; the thread reads every 1 ms, so an edge blurs by a read or two (and a busy CI machine more)
    assert energy.joules == pytest.approx(0.010, rel=0.15)
    assert energy.idle_w == pytest.approx(5.0, rel=0.1)
    assert meter.reads > 50


def test_a_source_that_stops_reading_ends_the_measurement_with_its_reason() -> None:
    meter = PowerMeter(idle_w=5.0, load_w=10.0, fail_after=5)
    with pytest.raises(PowerReadError, match="curr1_input: No such device"):
        measure_energy(meter, [lambda calls: time.sleep(calls * 1e-3)], [1e-3], EnergyRule(min_window_s=0.02))


# -- the pieces ----------------------------------------------------------------------------------------------------
def test_a_window_is_only_counted_between_two_idle_windows() -> None:
    windows = [
        Window(None, 1.0, 100.0),
        Window(0, 1.0, 150.0, calls=10),
        Window(None, 1.0, 110.0),
        Window(0, 1.0, 160.0, calls=10),  # no idle after it (yet): not counted
    ]
    mean, low, high, n = per_call(windows, 0)
    assert (n, mean) == (1, pytest.approx((150.0 - 105.0) / 10)) and math.isnan(low) and math.isnan(high)
    assert per_call(windows, 1)[3] == 0


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("target_rel", 0.0, "target_rel must be finite and > 0"),
        ("min_windows", 1, "min_windows must be >= 2"),
        ("max_time_s", 0.0, "max_time_s must be > 0"),
        ("periods_per_window", 0.5, "periods_per_window must be >= 1"),
        ("confidence", 1.0, "confidence must be between 0.5 and 1"),
    ],
)
def test_a_rule_that_cannot_work_is_refused_by_name(field: str, value: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EnergyRule(**{field: value})  # type: ignore[arg-type]


def test_works_and_their_times_must_pair_up() -> None:
    counter, clock = counter_setup()
    with pytest.raises(ValueError, match="2 works and 1 times per call"):
        measure_energy(CounterSource(counter, clock), [lambda c: None, lambda c: None], [1e-3])


def test_an_energy_travels_as_a_dict_and_says_itself_in_a_line() -> None:
    board = "NVML energy counter, H200 board"
    energy = Energy(0.0104, 0.0101, 0.0107, 424.0, 372.0, 5, 12000, 1.2, board, "gpu-board", "interval")
    assert Energy.from_dict(energy.to_dict()) == energy
    assert energy.describe() == (
        "10.4 mJ a call (99%: 10.1 mJ-10.7 mJ), 424 W working over 372 W idle, 5 windows of 2400 calls; "
        "NVML energy counter, H200 board"
    )
    assert "1 J a call" in Energy(0.99996, 0.99, 1.01, 1.0, 1.0, 3, 3, 1.0, board, "gpu-board", "interval").describe()
    with pytest.raises(ValueError, match="an energy record needs joules"):
        Energy.from_dict({"joules": 1.0})


def test_a_counter_that_stops_changing_is_an_error_not_zero_joules() -> None:
    counter, clock = counter_setup(idle_w=0.0, noise=0.0)  # nothing is drawn: the counter never moves
    run = kernel(counter, clock, load_w=0.0, seconds_per_call=1e-3)
    with pytest.raises(PowerReadError, match=r"fake NVML energy counter did not change in 0\.35 s"):
        measure_energy(CounterSource(counter, clock), [run], [1e-3], sleep=clock.sleep, now=clock)


def test_two_works_in_turns_share_a_drifting_idle_alike() -> None:
    """Two identical works under an idle power climbing 30% over the measurement: taken in turns A B, B A, ...,
    each subtracts the drift alike, so they read the same energy (always A before B would bias their ratio)."""
    counter, clock = counter_setup(idle_w=200.0, noise=0.0)
    start = clock.t

    def drift() -> None:
        counter.set_load(counter.load_w)
        counter.idle_w = 200.0 * (1 + 0.15 * (clock.t - start))

    def work(calls: int) -> None:
        drift()
        counter.set_load(50.0)
        for _ in range(10):
            clock.t += calls * 1e-4
            drift()
        counter.set_load(0.0)

    def sleep(seconds: float) -> None:
        for _ in range(10):
            clock.sleep(seconds / 10)
            drift()

    rule = EnergyRule(min_windows=4, max_time_s=3.0)
    a, b = measure_energy(CounterSource(counter, clock), [work, work], [1e-3, 1e-3], rule, sleep=sleep, now=clock)
    assert a.joules == pytest.approx(b.joules, rel=0.02) and a.joules == pytest.approx(0.05, rel=0.05)


def test_a_figure_that_does_not_exist_is_null_in_json_and_nan_again_when_read() -> None:
    energy = Energy(math.nan, math.nan, math.nan, math.nan, 5.0, 1, 10, 0.2, "NVML", "gpu-board", "time")
    doc = energy.to_dict()
    assert (doc["joules"], doc["low"], doc["power_w"]) == (None, None, None)
    back = Energy.from_dict(doc)
    assert math.isnan(back.joules) and back.idle_w == 5.0
