"""Measuring GPU work honestly: first call apart, warm-up, samples until a stopping rule, two scopes.

* ``kernel`` scope: device time of the work, with CUDA events on jetmem's stream. The stream is held by
  a spinning kernel while the work is queued (nvbench's blocking-kernel technique), so Python's launch
  overhead is not timed. jetmem's stream is a *blocking* stream, so work CuPy or PyTorch launch on the
  legacy default stream between the two events is ordered between them and counted too.
* ``end_to_end`` scope: wall time of the host writing the inputs, the work, and the host reading the
  outputs, with the synchronisation each mode needs: explicit copies for ``device``, direct host access
  for ``managed`` and ``zero_copy`` (the seed 001 device figures "neglected the transfer times").

In a mode whose pages the driver migrates (``MemoryMode.migrates_pages``), where the CUDA session has CUPTI's
unified-memory counters (:mod:`pytest_jetmem.cuda.counters`), the counters stay off while the first call, the
warm-up and the samples run, so every figure reported is timed as without them (while CUPTI counts, the driver
reports every fault: a migrating first call took 1.32 times as long on an H100 when it was itself counted). After
the samples comes a *cold replay*, not timed: the workspace's page-migrating buffers are put back on the host, where
they were before the first call (:meth:`~pytest_jetmem.cuda.workspace.Workspace.pages_to_host`), and one call is
counted in a span of its own (the record's ``first_call`` counters), then :data:`STEADY_CALLS` calls in another
(``steady``).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_jetmem.errors import PowerReadError
from pytest_jetmem.machine.jetson import gpu_clock_state, sysroot
from pytest_jetmem.measure.counters import CounterSample, UnifiedMemoryCounters
from pytest_jetmem.measure.energy import Energy, EnergySetup, EnergyWindows, measure_energy
from pytest_jetmem.measure.stats import StoppingRule, Summary, summarize

if TYPE_CHECKING:
    from pytest_jetmem.cuda.buffer import Buffer
    from pytest_jetmem.cuda.counters import CounterCollector
    from pytest_jetmem.cuda.device import Device
    from pytest_jetmem.cuda.driver import ClockState
    from pytest_jetmem.cuda.workspace import Workspace
    from pytest_jetmem.machine.power import PowerSource
    from pytest_jetmem.measure.duet import Duet

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

SCOPES = ("kernel", "end_to_end")

#: Calls counted after the samples, the steady state's unified-memory counters (a span of their own).
STEADY_CALLS = 3


@dataclass
class Measurement:
    """Timings of one piece of work in one memory mode (milliseconds)."""

    label: str
    mode: str
    scope: str
    samples: list[float] = field(default_factory=list)
    first_call_ms: float | None = None
    first_call_wall_ms: float | None = None
    warmup: int = 0
    stop_reason: str = ""
    flush_l2: bool = False
    #: Samples of each run when the body ran several times with fresh allocations (``--jetmem-runs``).
    runs: list[list[float]] = field(default_factory=list)
    #: Wall-clock span (``time.time()``) of the timed section, held under the per-GPU lock.
    span: tuple[float, float] | None = None
    #: Under ``--jetmem-against``: the samples of each round taken in turns with the other side, per run.
    run_rounds: list[list[list[float]]] = field(default_factory=list)
    #: The GPU's SM clock at the start and the end of sampling (MHz) and the slowdowns seen (NVML; None: unknown).
    clocks: dict[str, Any] | None = None
    #: Unified-memory counters of a cold call replayed after the samples (``first_call``: the pages put back on the
    #: host first; the first call itself is timed uncounted) and of :data:`STEADY_CALLS` calls after it (None: not
    #: counted: a mode that does not migrate pages, counters off or not available, measured in turns).
    counters: UnifiedMemoryCounters | None = None
    #: Energy per call (``--jetmem-energy``), measured after the samples in windows of back-to-back calls with the
    #: idle power between them taken out (:mod:`pytest_jetmem.measure.energy`); None: not measured.
    energy: Energy | None = None

    @property
    def throttled(self) -> list[str]:
        """The clock slowdowns (thermal, power) active while sampling; empty when none or unknown."""
        return list(self.clocks.get("slowdowns", [])) if self.clocks else []

    def add_runs(self, others: Sequence[Measurement]) -> None:
        """Fold the measurements of further runs in: ``samples`` becomes all runs' samples (the counters stay
        the first run's)."""
        self.runs = [list(self.samples), *(list(o.samples) for o in others)]
        self.samples = [v for run in self.runs for v in run]
        if self.run_rounds and all(o.run_rounds for o in others):
            self.run_rounds = [*self.run_rounds, *(r for o in others for r in o.run_rounds)]
        else:
            self.run_rounds = []  # a run measured alone: nothing to pair

    @property
    def summary(self) -> Summary:
        return summarize(self.samples)

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    @property
    def key(self) -> str:
        return f"{self.label or 'measure'}:{self.scope}"

    def describe(self) -> str:
        s = self.summary
        first = f", first call {self.first_call_ms:.4g} ms" if self.first_call_ms is not None else ""
        return (
            f"{self.mode} {self.key}: median {s.median:.4g} ms (MAD {s.mad:.2g}, p5 {s.p5:.4g}, p95 {s.p95:.4g}, "
            f"n={s.n}){first}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "mode": self.mode,
            "scope": self.scope,
            "samples": list(self.samples),
            "first_call_ms": self.first_call_ms,
            "first_call_wall_ms": self.first_call_wall_ms,
            "warmup": self.warmup,
            "stop_reason": self.stop_reason,
            "flush_l2": self.flush_l2,
            "runs": self.runs,
            "run_rounds": self.run_rounds,
            "clocks": self.clocks,
            "um_counters": self.counters.to_json() if self.counters is not None else None,
            "energy": self.energy.to_dict() if self.energy is not None else None,
            "summary": self.summary.to_dict() if self.samples else None,
        }


def validate_scope(scope: str, where: str) -> str:
    if scope not in SCOPES:
        raise ValueError(f"{where}: unknown scope {scope!r}; expected one of {', '.join(SCOPES)}")
    return scope


class Sampler:
    """Times one callable in one handle's mode, one sample per call of :meth:`sample`."""

    def __init__(
        self,
        ws: Workspace,
        fn: Callable[[], Any],
        scope: str = "kernel",
        inputs: Sequence[tuple[Buffer, np.ndarray]] = (),
        outputs: Sequence[Buffer] = (),
        flush_l2: bool = False,
        block_stream: bool = True,
    ) -> None:
        self.ws = ws
        self.fn = fn
        self.scope = validate_scope(scope, f"{ws.nodeid}: measure")
        self.inputs = [(b, np.ascontiguousarray(a, dtype=b.dtype).reshape(b.shape)) for b, a in inputs]
        self.outputs = [(b, np.empty(b.shape, b.dtype)) for b in outputs]
        self.flush_l2 = flush_l2
        self.block_stream = block_stream
        self._timer = ws.timer()

    def close(self) -> None:
        self._timer.close()

    def _device_sample(self) -> tuple[float, float]:
        """(device ms, wall ms) of one call, the stream held while the work is queued."""
        ws, timer = self.ws, self._timer
        if self.flush_l2:
            ws.flush_l2()
        blocker = ws.session.blocker() if self.block_stream else None
        t0 = time.perf_counter()
        if blocker is not None:
            blocker.hold(ws)
        timer.start()
        try:
            self.fn()
        finally:
            timer.stop()
            if blocker is not None:
                blocker.release()
        timer.wait()
        wall = (time.perf_counter() - t0) * 1e3
        return timer.elapsed_ms(), wall

    def _end_to_end_sample(self) -> float:
        ws = self.ws
        if self.flush_l2:
            ws.flush_l2()
        ws.synchronize()
        t0 = time.perf_counter()
        for buf, arr in self.inputs:
            buf.write_host(arr)  # the mode's way: a copy for device memory, a store through the view for mapped
        self.fn()
        ws.synchronize()
        for buf, out in self.outputs:
            buf.read_host(out)
        return (time.perf_counter() - t0) * 1e3

    def first(self) -> tuple[float, float]:
        """The first call: (timed figure, wall ms). Kept apart from the steady state."""
        if self.scope == "kernel":
            return self._device_sample()
        wall = self._end_to_end_sample()
        return wall, wall

    def sample(self) -> float:
        if self.scope == "kernel":
            return self._device_sample()[0]
        return self._end_to_end_sample()


def run_samples(samplers: Sequence[Sampler], rule: StoppingRule) -> list[tuple[list[float], str]]:
    """Sample every sampler in turn (A B A B ...) until each one's samples satisfy ``rule``.

    Interleaving makes drift (clocks, temperature, other tenants) hit every sampler alike, so their
    ratio holds on a noisy machine. Returns each sampler's samples and stop reason. Callers hold
    :func:`gpu_lock` around the first call, the warm-up and this, so no other process times the GPU meanwhile.
    """
    out: list[list[float]] = [[] for _ in samplers]
    reasons = [""] * len(samplers)
    t0 = time.perf_counter()
    while True:
        for i, s in enumerate(samplers):
            out[i].append(s.sample())
        elapsed = time.perf_counter() - t0
        verdicts = [rule.done(o, elapsed) for o in out]
        if all(done for done, _ in verdicts):
            reasons = [why for _, why in verdicts]
            break
    return list(zip(out, reasons, strict=False))


def measure(
    ws: Workspace,
    fn: Callable[[], Any],
    *,
    label: str = "",
    scope: str = "kernel",
    inputs: Sequence[tuple[Buffer, np.ndarray]] = (),
    outputs: Sequence[Buffer] = (),
    warmup: int = 3,
    rule: StoppingRule | None = None,
    flush_l2: bool = False,
    duet: Duet | None = None,
    energy: EnergySetup | None = None,
) -> Measurement:
    """Time ``fn`` (work queued on the workspace's stream) in ``ws``'s mode; see the module docstring.

    With ``duet`` (``--jetmem-against``), the call meets the other side and the two take turns, a batch each
    (:mod:`pytest_jetmem.measure.duet`), then energy windows in turns where both sides measure energy
    (:func:`_energy_in_turns`); no counters are taken then. With ``energy`` (and a source),
    a ``kernel``-scope measurement's energy per call is measured after the samples, under the same lock
    (:func:`energy_of`; not for ``flush_l2``: its windows would run on a warm cache). Returns the
    measurement; the caller records it.
    """
    if warmup < 0:
        raise ValueError(f"{ws.nodeid}: measure: warmup must be >= 0, got {warmup}")
    rule = rule or StoppingRule()
    sampler = Sampler(ws, fn, scope, inputs, outputs, flush_l2)
    rounds: list[list[float]] = []
    counters: UnifiedMemoryCounters | None = None
    joules: Energy | None = None
    try:
        device = ws.session.device
        warm: list[ClockState | None] = [None]  # the clocks right after the warm-up (an idle GPU clocks down)
        # energy where it means the GPU's work: a kernel-scope call on a warm cache (not flush_l2's)
        source = energy.usable(ws.nodeid) if energy is not None and scope == "kernel" and not flush_l2 else None
        if duet is not None and duet.meet(label):
            first, first_wall, samples, reason, span, rounds = _in_turns(ws, sampler, rule, warmup, duet, warm)
            after = clock_state(device)
            if rounds and energy is not None and source is not None:  # in turns to the end: the energy too
                joules = _energy_in_turns(ws, sampler, samples, duet, energy, source)
        else:
            collector = _collector(ws)
            with gpu_lock(ws.device.ordinal):
                t_start = time.time()
                first, first_wall = sampler.first()  # never counted: it is timed as without counters
                for _ in range(warmup):
                    sampler.sample()
                warm[0] = clock_state(device)
                ((samples, reason),) = run_samples([sampler], rule)
                span = (t_start, time.time())
                if collector is not None:
                    counters = _cold_replay(ws, collector, sampler)
                    if counters is None:
                        collector.miss(ws.mode)
                after = clock_state(device)  # the samples' end: before the energy windows' idle stretches
                if source is not None and energy is not None:
                    joules = energy_of(ws, sampler, samples, energy)
        clocks = clock_record(warm[0], after)
        m = Measurement(
            label=label,
            mode=ws.mode,
            scope=scope,
            samples=samples,
            first_call_ms=first,
            first_call_wall_ms=first_wall,
            warmup=warmup,
            stop_reason=reason,
            flush_l2=flush_l2,
            span=span,
            run_rounds=[rounds] if rounds else [],
            clocks=clocks,
            counters=counters,
            energy=joules,
        )
    finally:
        sampler.close()
    return m


def kernel_run(ws: Workspace, fn: Callable[[], Any]) -> Callable[[int], None]:
    """``run(calls)`` for an energy window: ``fn``'s calls back to back on the stream, then a synchronisation."""

    def run(calls: int) -> None:
        for _ in range(calls):
            fn()
        ws.synchronize()

    return run


def energy_of(ws: Workspace, sampler: Sampler, samples_ms: Sequence[float], setup: EnergySetup) -> Energy | None:
    """The energy per call of the sampler's work (:func:`~pytest_jetmem.measure.energy.measure_energy`), its calls
    back to back on the stream (no events, no blocker), then a synchronisation. Only ``kernel``-scope measurements
    have one: an ``end_to_end`` call is mostly the host's work, which the GPU's sensor does not see (on an H200 its
    intervals were 30-90% wide). A source that stops reading fails the measurement where energy is required
    (``--jetmem-energy=on``), else a warning says why it has none."""
    assert setup.source is not None
    try:
        (joules,) = measure_energy(
            setup.source, [kernel_run(ws, sampler.fn)], [float(np.median(samples_ms)) / 1e3], setup.rule
        )
    except PowerReadError as exc:
        if setup.required:
            raise
        warnings.warn(f"{ws.nodeid}: energy not measured: {exc}", stacklevel=3)
        return None
    return joules


def _energy_in_turns(
    ws: Workspace, sampler: Sampler, samples_ms: Sequence[float], duet: Duet, setup: EnergySetup, source: PowerSource
) -> Energy | None:
    """The energy per call in turns with the other side (``--jetmem-against``): where both sides measure it (a power
    source, a kernel-scope call on a warm cache: :meth:`Duet.agree`), each turn is a fresh edge, an idle window, a
    window of this side's calls and an idle window (:class:`EnergyWindows`), so neither side's windows hold the
    other's work and round r of both ran back to back; until both sides' intervals are narrow or capped. A source
    that stops reading: as :func:`energy_of` says, once the turns are over (the other side is never left waiting).
    Only a side that measures energy asks: one that does not (no source, a rerun, energy off, a pytest-jetmem
    before energy in turns) goes on to its next call, and the asking side, meeting that call, measures none."""
    if not duet.agree("energy", True):
        return None
    state: dict[str, Any] = {}

    def start() -> None:
        with gpu_lock(ws.device.ordinal):
            try:
                state["windows"] = EnergyWindows(
                    source, [kernel_run(ws, sampler.fn)], [float(np.median(samples_ms)) / 1e3], setup.rule
                )
            except PowerReadError as exc:
                state["error"] = exc

    def turn() -> bool:
        windows: EnergyWindows | None = state.get("windows")
        if windows is None or "error" in state:
            return True
        with gpu_lock(ws.device.ordinal):
            try:
                windows.restart()
                windows.idle()
                windows.work(0)
                windows.idle()
            except PowerReadError as exc:
                state["error"] = exc
                return True
        return bool(windows.stop_reason())

    try:
        duet.take_turns(start, turn)
    finally:
        if "windows" in state:
            state["windows"].close()
    if "error" in state:
        if setup.required:
            raise state["error"]
        warnings.warn(f"{ws.nodeid}: energy not measured: {state['error']}", stacklevel=3)
        return None
    windows: EnergyWindows = state["windows"]
    return windows.energies(windows.stop_reason() or "time")[0]


def _collector(ws: Workspace) -> CounterCollector | None:
    """The session's counter collector where this measurement is counted: a mode that migrates pages, and CUPTI
    available (else None; a measurement that wanted counters and cannot have them is remembered there)."""
    collector = ws.session.counters
    if collector is None or not ws.memory_mode.migrates_pages:
        return None
    return collector if collector.begin(ws.mode) else None


def _cold_replay(ws: Workspace, collector: CounterCollector, sampler: Sampler) -> UnifiedMemoryCounters | None:
    """The counters of a cold call and of :data:`STEADY_CALLS` calls, taken after the samples, each span on its own
    (the counters switched on once for both: :meth:`CounterCollector.count_each`).

    The cold call stands in for the first call, which ran uncounted: every live buffer of ``ws`` whose pages migrate
    (``MemoryMode.migrates_pages``) is put back on the host first (:meth:`Workspace.pages_to_host`), as before the
    first call, then one call is counted (``first_call``); the steady span follows. The calls' timings are dropped.
    None where the cold call's span was not counted.
    """
    ws.pages_to_host([b for b in ws.live_buffers() if b.memory_mode.migrates_pages])
    (_, cold), (_, steady) = collector.count_each(
        [sampler.sample, lambda: [sampler.sample() for _ in range(STEADY_CALLS)]]
    )
    if cold is None:
        return None
    return UnifiedMemoryCounters(
        first_call=CounterSample.of(cold, calls=1),
        steady=CounterSample.of(steady, calls=STEADY_CALLS) if steady is not None else None,
    )


def clock_state(device: Device) -> ClockState | None:
    """The GPU's clock and slowdowns now: NVML's where it answers, else on an integrated GPU (a Jetson, which
    has no NVML) the devfreq clock and throttle state (:func:`~pytest_jetmem.machine.jetson.gpu_clock_state`)."""
    state = device.clock_state()
    if state is None and device.info.integrated:
        state = gpu_clock_state(sysroot())
    return state


def clock_record(before: ClockState | None, after: ClockState | None) -> dict[str, Any] | None:
    """The clock record of a measurement from the states before and after sampling (None: unknown).

    Event counters (a Jetson's over-current events) that rose while sampling count as slowdowns. The board's state
    beside it, where known: the memory clock and power limit after sampling, the hotter of the two temperatures, the
    power mode.
    """
    if before is None or after is None:
        return None
    earlier = dict(before.counters)
    events = [f"{name} events +{n - earlier[name]}" for name, n in after.counters if n > earlier.get(name, n)]
    temperatures = [t for t in (before.temperature_c, after.temperature_c) if t is not None]
    board = {
        "mem_mhz": after.mem_mhz,
        "temperature_c": max(temperatures) if temperatures else None,
        "power_limit_w": after.power_limit_w,
        "power_mode": after.power_mode,
    }
    return {
        "sm_mhz": [before.sm_mhz, after.sm_mhz],
        "sm_max_mhz": after.sm_max_mhz,
        "slowdowns": sorted(set(before.slowdowns) | set(after.slowdowns) | set(events)),
        **{key: value for key, value in board.items() if value is not None},
    }


#: Samples per turn under ``--jetmem-against``, and the fewest rounds a paired measurement takes.
TURN_SAMPLES = 2
MIN_ROUNDS = 5  # 10 samples a side at least: the floor of a plain measurement (StoppingRule.min_samples)


def _in_turns(
    ws: Workspace, sampler: Sampler, rule: StoppingRule, warmup: int, duet: Duet, warm: list[ClockState | None]
) -> tuple[float, float, list[float], str, tuple[float, float], list[list[float]]]:
    """First call, warm-up and samples taken in turns with the other side (each turn under the GPU lock)."""
    state: dict[str, Any] = {"reason": ""}
    rounds: list[list[float]] = []

    def setup() -> None:
        with gpu_lock(ws.device.ordinal):
            state["start"] = time.time()
            state["first"] = sampler.first()
            for _ in range(warmup):
                sampler.sample()
            warm[0] = clock_state(ws.session.device)
        state["t0"] = time.perf_counter()

    def batch() -> bool:
        with gpu_lock(ws.device.ordinal):
            rounds.append([sampler.sample() for _ in range(TURN_SAMPLES)])
        done, why = rule.done([v for r in rounds for v in r], time.perf_counter() - state["t0"])
        state["reason"] = why
        return done and len(rounds) >= MIN_ROUNDS

    duet.take_turns(setup, batch)
    first, first_wall = state["first"]
    samples = [v for r in rounds for v in r]
    span = (state["start"], time.time())
    if duet.peer_left:  # the other side's test ended inside the call: these rounds pair with nothing
        return first, first_wall, samples, f"{state['reason']}, alone after the other side stopped", span, []
    return first, first_wall, samples, f"{state['reason']}, in turns", span, rounds


@dataclass(frozen=True)
class MeasureCall:
    """What a test asked :func:`measure` to time, kept so the plugin can time it again side by side."""

    label: str
    scope: str
    fn: Callable[[], Any]
    inputs: tuple[tuple[Buffer, np.ndarray], ...]
    outputs: tuple[Buffer, ...]
    flush_l2: bool
    warmup: int

    def sampler(self, ws: Workspace) -> Sampler:
        return Sampler(ws, self.fn, self.scope, self.inputs, self.outputs, self.flush_l2)


@contextlib.contextmanager
def gpu_lock(ordinal: int | None) -> Iterator[None]:
    """Hold an exclusive per-GPU file lock while timing: processes sharing a GPU (xdist workers, every user of the
    machine) never overlap. The lock file, ``pytest-jetmem-gpu{ordinal}.lock`` in the temporary folder, is made
    readable and writable by everyone (0o666, whatever the umask) and opened read-only where another user's file
    cannot be written (flock needs no write access); where it cannot be opened at all, a lock file of this user's
    own is used, said once (:func:`_open_gpu_lock`)."""
    if ordinal is None or fcntl is None:
        yield
        return
    fd = _open_gpu_lock(ordinal)
    if fd is None:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


#: The lock files already said to be unusable (said once per process).
_LOCK_PROBLEMS_SAID: set[str] = set()


def _open_lock_file(path: str) -> int:
    """A descriptor of the lock file ``path``, made 0o666 where this call creates it; opened for writing where it
    may be, else read-only. OSError where it cannot be opened at all."""
    for _ in range(3):  # made and removed by others between the calls: try again
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            pass
        else:
            with contextlib.suppress(OSError):  # the umask took bits away: every user of the machine opens it
                os.fchmod(fd, 0o666)
            return fd
        try:  # no O_CREAT: a sticky temp folder (protected_regular) may refuse it for another user's file
            return os.open(path, os.O_RDWR)
        except PermissionError:
            return os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            continue
    return os.open(path, os.O_RDONLY)


def _open_gpu_lock(ordinal: int) -> int | None:
    """The shared lock file of GPU ``ordinal``; where it cannot be opened, this user's own (said once: processes of
    other users are then not kept apart from this one's); None, said once, where neither can be opened."""
    folder = tempfile.gettempdir()
    shared = os.path.join(folder, f"pytest-jetmem-gpu{ordinal}.lock")
    try:
        return _open_lock_file(shared)
    except OSError as exc:
        problem = f"{shared}: {exc.strerror or exc}"
    own = os.path.join(folder, f"pytest-jetmem-gpu{ordinal}-{os.getuid()}.lock")
    try:
        fd = _open_lock_file(own)
    except OSError as exc:
        _say_once(shared, f"jetmem: cannot open the GPU lock file {problem}, nor {own}: {exc.strerror or exc}: "
                  f"timings on GPU {ordinal} are not kept apart from other processes' (set TMPDIR to a writable "
                  "folder)")
        return None
    _say_once(shared, f"jetmem: cannot open the GPU lock file {problem}: using {own} instead, so other users' "
              f"processes timing on GPU {ordinal} are not kept apart from this one's")
    return fd


def _say_once(key: str, text: str) -> None:
    """Warn ``text`` the first time ``key`` has a problem in this process."""
    if key not in _LOCK_PROBLEMS_SAID:
        _LOCK_PROBLEMS_SAID.add(key)
        warnings.warn(text, stacklevel=1)
