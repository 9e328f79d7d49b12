"""Energy per call: the work repeated in windows a power sensor can resolve, the idle power around them taken out.

A power sensor cannot see one kernel: NVML's energy counter moves every 20-100 ms, a Jetson rail averages over its
conversion time, and a board draws hundreds of watts doing nothing. So (docs/energy.md, "How it is measured"):

1. **Windows.** Each piece of work runs back to back for a window of at least :attr:`EnergyRule.periods_per_window`
   sensor update periods (and :attr:`EnergyRule.min_window_s`); the calls per window adapt to the time the last
   window took, so a window lasts about as long whatever one call costs.
2. **Idle between.** Windows go idle, A, B, ..., idle, A, B, ..., idle: every work window lies between two idle
   windows of the same length (the GPU doing nothing, the stream empty), and the mean power of those two is what the
   board would have drawn anyway; drift of the idle power (clocks, temperature) is taken out where it happens.
3. **A window's energy.** A cumulative counter (``kind == "energy"``) is read at its updates: a window ends when the
   counter next changes after its work finished, and the next window starts there, so no update is split; the
   idle power is subtracted over the whole span, tail included. An instantaneous power (``kind == "power"``) is
   read by a thread every half update period and integrated (trapezoids) between the windows' edges.
4. **Per call, with an interval.** A work window gives (energy - idle power x its span) / its calls; the estimate is
   the mean over windows with Student's t interval (99%). Windows are added until every work's interval is within
   :attr:`EnergyRule.target_rel` of its estimate (after :attr:`EnergyRule.min_windows`), or until
   :attr:`EnergyRule.max_time_s`.

Interleaving several works (a mode and its reference mode) makes drift hit them alike, as timings are sampled.
Nothing here imports CUDA: a work is a callable that runs ``calls`` calls and waits for them.

Hand-written, not Zeus: Zeus's ``ZeusMonitor`` gives one window's energy from the same NVML counter and leaves the
repetition, the idle subtraction and the interval to its user (what this module is), as another runtime dependency.
"""

from __future__ import annotations

import functools
import itertools
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_jetmem.errors import EnergyUnavailable, PowerReadError
from pytest_jetmem.measure.stats import student_t_ppf

if TYPE_CHECKING:
    from pytest_jetmem.cuda.device import Device
    from pytest_jetmem.machine.power import PowerSource, Reading, Sources

__all__ = [
    "Energy",
    "EnergyRule",
    "EnergySetup",
    "EnergyUnavailable",
    "EnergyWindows",
    "Window",
    "find_power",
    "measure_energy",
    "per_call",
    "ratio_of",
]


#: ``run(calls)``: run ``calls`` calls of the work and return once they are finished.
Work = Callable[[int], None]


@dataclass(frozen=True)
class EnergyRule:
    """How long the windows are and when to stop adding them (see the module doc)."""

    target_rel: float = 0.03
    min_windows: int = 3
    max_time_s: float = 2.0
    periods_per_window: float = 2.0
    min_window_s: float = 0.1
    confidence: float = 0.99

    def __post_init__(self) -> None:
        if not (math.isfinite(self.target_rel) and self.target_rel > 0):
            raise ValueError(f"target_rel must be finite and > 0, got {self.target_rel!r}")
        if self.min_windows < 2:
            raise ValueError(f"min_windows must be >= 2 (an interval needs two), got {self.min_windows!r}")
        if not self.max_time_s > 0:
            raise ValueError(f"max_time_s must be > 0, got {self.max_time_s!r}")
        if not (self.periods_per_window >= 1 and self.min_window_s > 0):
            raise ValueError(
                f"periods_per_window must be >= 1 and min_window_s > 0, got {self.periods_per_window!r}, "
                f"{self.min_window_s!r}"
            )
        if not 0.5 < self.confidence < 1:
            raise ValueError(f"confidence must be between 0.5 and 1, got {self.confidence!r}")

    def window_s(self, update_period_s: float) -> float:
        """The length of a window for a sensor updating every ``update_period_s`` seconds."""
        return max(self.min_window_s, self.periods_per_window * update_period_s)


@dataclass(frozen=True)
class Window:
    """One window: ``work`` is the index of the work that ran (None: idle), over ``seconds``, using ``joules``; its
    ``calls`` ran for ``busy_s`` of those seconds (the rest: waiting for the sensor's next update)."""

    work: int | None
    seconds: float
    joules: float
    calls: int = 0
    busy_s: float = 0.0

    @property
    def watts(self) -> float:
        return self.joules / self.seconds if self.seconds > 0 else math.nan


@dataclass(frozen=True)
class Energy:
    """The energy of one call of a piece of work: the estimate and its interval (J), the power drawn while its calls
    ran and idle around them (W), and how it was measured (``seconds``: the span of its windows; ``per_window``: each
    work window's joules per call)."""

    joules: float
    low: float
    high: float
    power_w: float
    idle_w: float
    windows: int
    calls: int
    seconds: float
    source: str
    covers: str
    stop_reason: str
    confidence: float = 0.99
    per_window: tuple[float, ...] = field(default=())

    @property
    def rel_halfwidth(self) -> float:
        """Half the interval's width over the estimate (inf where it has no interval, or a zero estimate)."""
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.joules == 0:
            return math.inf
        return (self.high - self.low) / 2 / abs(self.joules)

    def short(self) -> str:
        """A table cell: ``10.4 mJ ±2.9%, 424 W`` (the 99% interval's half-width; ``±?`` without an interval)."""
        spread = f"±{self.rel_halfwidth:.1%}" if math.isfinite(self.rel_halfwidth) else "±?"
        return f"{_j(self.joules)} {spread}, {self.power_w:.3g} W"

    def describe(self) -> str:
        """``1.23 mJ a call (99%: 1.20-1.26), 310 W working over 290 W idle, 6 windows; NVML energy counter, ...``."""
        interval = f"{_j(self.low)}-{_j(self.high)}" if math.isfinite(self.rel_halfwidth) else "no interval"
        return (
            f"{_j(self.joules)} a call ({self.confidence:.0%}: {interval}), {self.power_w:.4g} W working over "
            f"{self.idle_w:.4g} W idle, {self.windows} windows of {self.calls // max(self.windows, 1)} calls; "
            f"{self.source}"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict: a figure that does not exist (an interval of one window, a power without a busy time)
        is ``null``, never NaN."""
        return {
            "joules": _finite(self.joules),
            "low": _finite(self.low),
            "high": _finite(self.high),
            "power_w": _finite(self.power_w),
            "idle_w": _finite(self.idle_w),
            "windows": self.windows,
            "calls": self.calls,
            "seconds": self.seconds,
            "source": self.source,
            "covers": self.covers,
            "stop_reason": self.stop_reason,
            "confidence": self.confidence,
            "per_window": [_finite(v) for v in self.per_window],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Energy:
        """The inverse of :meth:`to_dict` (a stored record); ValueError naming the field that is missing or wrong."""
        try:
            return cls(
                joules=_float(data["joules"]),
                low=_float(data["low"]),
                high=_float(data["high"]),
                power_w=_float(data["power_w"]),
                idle_w=_float(data["idle_w"]),
                windows=int(data["windows"]),
                calls=int(data["calls"]),
                seconds=float(data["seconds"]),
                source=str(data["source"]),
                covers=str(data["covers"]),
                stop_reason=str(data["stop_reason"]),
                confidence=float(data.get("confidence", 0.99)),
                per_window=tuple(_float(v) for v in data.get("per_window", ())),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"an energy record needs joules, low, high, power_w, idle_w, ...: {exc!r}") from None


@dataclass(frozen=True)
class EnergySetup:
    """A session's energy measurement: the source it reads (None: none works, ``reason`` says why), the rule, and
    whether one is required (``--jetmem-energy=on``: a measurement without it fails)."""

    source: PowerSource | None
    rule: EnergyRule = field(default_factory=lambda: EnergyRule())
    reason: str = ""
    required: bool = False

    def usable(self, nodeid: str) -> PowerSource | None:
        """The source to read; None where there is none and none is required; :class:`EnergyUnavailable` naming the
        test, the option and why where one is required and none works."""
        if self.source is None and self.required:
            raise EnergyUnavailable(
                f"{nodeid}: --jetmem-energy=on, but this machine has no power source that works: {self.reason} "
                "(use --jetmem-energy=auto to measure energy only where a source is found)"
            )
        return self.source

    def header(self) -> str:
        """The session header's line: what energy is read from, or why it is not measured."""
        if self.source is None:
            return f"jetmem: energy: not measured: {self.reason}"
        return f"jetmem: energy per call: {self.source.name} ({self.source.includes})"


def find_power(device: Device, policy: str, sysroot: str) -> EnergySetup | None:
    """The energy setup of a session on ``device`` under ``policy`` (``--jetmem-energy``: ``auto``, ``on``; None for
    ``off``):
    the module's or board's total where the machine has one (a Jetson's input rail: what a memory mode costs shows
    in the memory and the CPU as much as in the GPU), else the GPU's (NVML's board counter on a discrete GPU)."""
    if policy == "off":
        return None
    from pytest_jetmem.machine.power import NvmlReads, find_sources

    nvml = NvmlReads(device.nvml_energy_mj, device.nvml_power_mw, device.drv.nvml_error, device.info.name)
    sources: Sources = find_sources(sysroot, nvml=nvml)
    source = sources.total or sources.gpu
    return EnergySetup(source, reason=sources.reason if source is None else "", required=policy == "on")


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _float(value: Any) -> float:
    """A stored figure: ``null`` is NaN (not measured); anything else must be a number."""
    return math.nan if value is None else float(value)


def _j(joules: float) -> str:
    """Joules with a unit that keeps 3-4 digits: ``10.4 mJ``, ``66 uJ``, ``1.2 J``."""
    for scale, unit in ((1.0, "J"), (1e-3, "mJ"), (1e-6, "uJ")):
        if abs(joules) >= 0.9995 * scale:  # 0.99996 J is "1 J", not "1e+03 mJ"
            return f"{joules / scale:.3g} {unit}"
    return f"{joules / 1e-9:.3g} nJ"


# -- the clocks: where a window's edges fall and the energy up to them ---------------------------------------------
class _CounterClock:
    """Edges at the updates of a cumulative counter: :meth:`mark` waits for the counter's next change."""

    def __init__(self, source: PowerSource, sleep: Callable[[float], None] = time.sleep) -> None:
        self.source = source
        self.sleep = sleep
        self.timeout_s = 3 * source.update_period_s + 0.05

    def mark(self) -> tuple[float, float]:
        """(time, joules) at the counter's next update after now; :class:`PowerReadError` where none comes within
        three update periods (a counter that stopped: every window would read 0 J)."""
        first = self.source.read()
        deadline = first.t + self.timeout_s
        reading = first
        while reading.value == first.value:
            if reading.t >= deadline:
                raise PowerReadError(
                    f"{self.source.name} did not change in {self.timeout_s:.2g} s (it updates every "
                    f"{self.source.update_period_s:g} s): no energy can be read from it"
                )
            self.sleep(0.0005)
            reading = self.source.read()
        return reading.t, reading.value

    def settle(self) -> None:
        """Nothing: a window ends at the counter's next update, which holds the work's last energy."""

    def close(self) -> None:
        return None


class _PowerClock:
    """A thread reads an instantaneous power every half update period; :meth:`mark` reads once more and gives the
    energy integrated (trapezoids) from the first reading to that one."""

    def __init__(self, source: PowerSource) -> None:
        self.source = source
        self.readings: list[Reading] = [source.read()]
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._poll, name="jetmem-power", daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        interval = max(self.source.update_period_s / 2, 0.001)
        while not self.stop.wait(interval):
            try:
                self._add(self.source.read())
            except BaseException as exc:  # handed to the measuring thread at its next mark
                self.error = exc
                return

    def _add(self, reading: Reading) -> None:
        with self.lock:
            if reading.t > self.readings[-1].t:
                self.readings.append(reading)

    def mark(self) -> tuple[float, float]:
        if self.error is not None:
            raise self.error
        self._add(self.source.read())
        with self.lock:
            readings = list(self.readings)
        joules = sum((b.t - a.t) * (a.value + b.value) / 2 for a, b in itertools.pairwise(readings))
        return readings[-1].t, joules

    def settle(self) -> None:
        """Wait one update period after the work: a sensor that averages over its period still reports the work's
        last stretch then, and it belongs to the work's window (its idle part is taken out over the span)."""
        time.sleep(self.source.update_period_s)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=max(1.0, 4 * self.source.update_period_s))  # a hung read never hangs the session


# -- measuring ---------------------------------------------------------------------------------------------------
class EnergyWindows:
    """The windows of one energy measurement, a step at a time: :func:`measure_energy`'s loop, and the turns of
    ``--jetmem-against``'s two processes (each its own windows, the other's turn outside them).

    Made with the works' first time guesses (each calibrated here, :func:`_calibrated`); :meth:`idle` adds an idle
    window, :meth:`work` one of work ``i``, :meth:`restart` starts the next window afresh (what ran since the last
    window ends is in none: the other process's turn); :meth:`stop_reason` says whether to stop ("interval", "time")
    or not (""); :meth:`energies` gives each work's :class:`Energy`; :meth:`close` ends the power thread.
    """

    def __init__(
        self,
        source: PowerSource,
        works: Sequence[Work],
        seconds_per_call: Sequence[float],
        rule: EnergyRule | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        if len(works) != len(seconds_per_call) or not works:
            raise ValueError(f"measure_energy: {len(works)} works and {len(seconds_per_call)} times per call")
        self.source, self.works, self.rule = source, list(works), rule or EnergyRule()
        self.sleep, self.now = sleep, now
        self.window_s = self.rule.window_s(source.update_period_s)
        # the cap leaves room for two windows of every work (their interval): a slow sensor costs more, never less
        self.cap_s = max(self.rule.max_time_s, (2 + 2 * len(works)) * self.window_s * 1.2)
        self.per_call_s = [_calibrated(w, max(t, 1e-7), now) for w, t in zip(works, seconds_per_call, strict=True)]
        self.clock: _CounterClock | _PowerClock = (
            _CounterClock(source, sleep) if source.kind == "energy" else _PowerClock(source)
        )
        self.windows: list[Window] = []
        self.spent_s = 0.0  # this measurement's own time: the steps', not what ran between them (the other's turn)
        self._edge: tuple[float, float] | None = None

    def restart(self) -> None:
        """The next window starts at the sensor's next edge from now (nothing since the last window is counted)."""
        t0 = self.now()
        self._edge = self.clock.mark()
        self.spent_s += self.now() - t0

    def idle(self) -> None:
        """An idle window (the GPU doing nothing for a window's length)."""
        self._add(None, 0, lambda: self.sleep(self.window_s))

    def work(self, i: int) -> None:
        """A window of work ``i``'s calls back to back (as many as a window's length takes, at its last pace)."""
        calls = max(1, math.ceil(self.window_s / self.per_call_s[i]))
        took: list[float] = []
        self._add(i, calls, functools.partial(_timed_run, self.works[i], calls, took, self.now, self.clock), took)
        self.per_call_s[i] = max(took[0] / calls, 1e-7)

    def _add(self, work: int | None, calls: int, run: Callable[[], None], busy: list[float] | None = None) -> None:
        if self._edge is None:
            self.restart()
        assert self._edge is not None
        t0 = self.now()
        self._edge = _window(self.clock, self.windows, work, calls, run, *self._edge, busy)
        self.spent_s += self.now() - t0

    def stop_reason(self) -> str:
        """"interval" where every work's interval is narrow (after the rule's least windows), "time" past the cap
        (with two windows of each; three caps in any case), else "". The cap counts this measurement's own steps
        (:attr:`spent_s`): in turns, the other process's turns between them are not this side's cost."""
        estimates = [per_call(self.windows, i, self.rule.confidence) for i in range(len(self.works))]
        n = min(est[3] for est in estimates)
        if n >= self.rule.min_windows and all(_narrow(est, self.rule.target_rel) for est in estimates):
            return "interval"
        spent = self.spent_s
        return "time" if (spent >= self.cap_s and n >= 2) or spent >= 3 * self.cap_s else ""

    def energies(self, reason: str) -> list[Energy]:
        """Each work's energy per call, stopped for ``reason``."""
        return [_energy(self.windows, i, self.source, reason, self.rule.confidence) for i in range(len(self.works))]

    def close(self) -> None:
        self.clock.close()


def measure_energy(
    source: PowerSource,
    works: Sequence[Work],
    seconds_per_call: Sequence[float],
    rule: EnergyRule | None = None,
    *,
    sleep: Callable[[float], None] = time.sleep,
    now: Callable[[], float] = time.monotonic,
) -> list[Energy]:
    """The energy of one call of each of ``works``, measured in turns (see the module doc).

    ``seconds_per_call``: a first guess of each work's time per call (its timing); the windows adapt to what they
    take. ``sleep`` and ``now`` are the clock (``time.sleep``, ``time.monotonic``; tests step their own).
    :class:`~pytest_jetmem.machine.power.PowerReadError` passes through where the source cannot be read.
    """
    run = EnergyWindows(source, works, seconds_per_call, rule, sleep=sleep, now=now)
    try:
        run.idle()
        cycle, reason = 0, ""
        while not reason:
            order = list(range(len(works)))
            if cycle % 2:
                order.reverse()  # A B, then B A: idle drift falls on each work from both sides alike
            for i in order:
                run.work(i)
            run.idle()
            cycle += 1
            reason = run.stop_reason()
    finally:
        run.close()
    return run.energies(reason)


def _calibrated(work: Work, guess_s: float, now: Callable[[], float]) -> float:
    """Seconds per call of ``work`` as the host paces it: a short batch (about 20 ms at ``guess_s``, the timing's
    device time, at most 1000 calls) run before the windows, the larger of its time per call and the guess (a
    launch-bound kernel runs slower back to back than its device time says)."""
    calls = max(1, min(1000, math.ceil(0.02 / guess_s)))
    t0 = now()
    work(calls)
    return max(guess_s, (now() - t0) / calls, 1e-7)


def _timed_run(
    work: Work, calls: int, took: list[float], now: Callable[[], float], clock: _CounterClock | _PowerClock
) -> None:
    t0 = now()
    work(calls)
    took.append(now() - t0)
    clock.settle()


def _window(
    clock: _CounterClock | _PowerClock,
    windows: list[Window],
    work: int | None,
    calls: int,
    run: Callable[[], None],
    t: float,
    e: float,
    busy: list[float] | None = None,
) -> tuple[float, float]:
    run()
    t2, e2 = clock.mark()
    windows.append(Window(work, t2 - t, e2 - e, calls, busy[0] if busy else 0.0))
    return t2, e2


def _narrow(estimate: tuple[float, float, float, int], target_rel: float) -> bool:
    mean, low, high, _ = estimate
    return math.isfinite(low) and mean != 0 and (high - low) / 2 <= target_rel * abs(mean)


def per_call(windows: Sequence[Window], work: int, confidence: float = 0.99) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of the joules per call of ``work`` over its windows that lie between two idle windows,
    each less the mean power of those two over its span; low and high are Student's t interval (nan with one
    window, none with none)."""
    nets = [net for net, _ in _nets(windows, work)]
    n = len(nets)
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    mean = sum(nets) / n
    if n == 1:
        return mean, math.nan, math.nan, 1
    sd = _sd(nets)
    half = student_t_ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half, n


def _nets(windows: Sequence[Window], work: int) -> list[tuple[float, float]]:
    """Each bracketed window of ``work``: (its joules less the idle watts over its span, per call; the watts drawn
    while its calls ran: the window's energy less the idle power over its wait for the sensor, over the time they
    ran)."""
    idle_at = [i for i, w in enumerate(windows) if w.work is None]
    nets = []
    for before, after in itertools.pairwise(idle_at):
        idle_w = (windows[before].watts + windows[after].watts) / 2
        for w in windows[before + 1 : after]:
            if w.work == work and w.calls > 0:
                busy_w = (w.joules - idle_w * (w.seconds - w.busy_s)) / w.busy_s if w.busy_s > 0 else math.nan
                nets.append(((w.joules - idle_w * w.seconds) / w.calls, busy_w))
    return nets


def _energy(windows: Sequence[Window], work: int, source: PowerSource, reason: str, confidence: float) -> Energy:
    mean, low, high, n = per_call(windows, work, confidence)
    mine = [w for w in windows if w.work == work]
    idle = [w for w in windows if w.work is None]
    nets = _nets(windows, work)
    return Energy(
        joules=mean,
        low=low,
        high=high,
        power_w=sum(w for _, w in nets) / len(nets) if nets else math.nan,
        idle_w=sum(w.joules for w in idle) / sum(w.seconds for w in idle),
        windows=n,
        calls=sum(w.calls for w in mine),
        seconds=sum(w.seconds for w in mine),
        source=source.name,
        covers=source.covers,
        stop_reason=reason,
        confidence=confidence,
        per_window=tuple(net for net, _ in nets),
    )


def ratio_of(a: Energy, b: Energy, confidence: float = 0.99) -> tuple[float, float, float]:
    """(ratio, low, high): ``a``'s energy per call over ``b``'s, with a ``confidence`` interval from their windows
    (the delta method on the log ratio, Student's t with the fewer windows' degrees of freedom); the interval is
    (nan, nan) where either has fewer than two windows or a mean at or below zero."""
    ratio = a.joules / b.joules if b.joules else math.nan
    va, vb = list(a.per_window), list(b.per_window)
    if len(va) < 2 or len(vb) < 2 or a.joules <= 0 or b.joules <= 0:
        return ratio, math.nan, math.nan
    rel_a = _sd(va) / math.sqrt(len(va)) / a.joules
    rel_b = _sd(vb) / math.sqrt(len(vb)) / b.joules
    half = student_t_ppf(0.5 + confidence / 2, min(len(va), len(vb)) - 1) * math.hypot(rel_a, rel_b)
    return ratio, ratio * math.exp(-half), ratio * math.exp(half)


def _sd(values: Sequence[float]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
