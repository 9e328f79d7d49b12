"""The plugin's per-session objects, kept in ``config.stash`` with typed accessors.

The halves of the plugin meet here and nowhere else: :class:`DeviceSession` (the selected modes, the device,
the CUDA session, the stopping rule) is shared by every half; :class:`GateSession` (baselines, the rows of
measurements, the machine record) belongs to the ``memmode_runtime`` half and is read by the report.
"""

from __future__ import annotations

import signal
import sys
import threading
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import pytest

from pytest_jetmem.errors import CudaError
from pytest_jetmem.plugin import options

if TYPE_CHECKING:  # imported where used: a run without jetmem tests loads neither the CUDA layer nor numpy
    from pytest_jetmem.cuda.device import Availability, DeviceInfo
    from pytest_jetmem.cuda.session import CudaSession
    from pytest_jetmem.machine.fingerprint import Machine
    from pytest_jetmem.machine.jetson import JetsonState
    from pytest_jetmem.measure.baseline import Baseline, BaselineStore, Entry
    from pytest_jetmem.measure.energy import EnergySetup
    from pytest_jetmem.measure.record import MeasurementRecord, NotCompared
    from pytest_jetmem.measure.stats import StoppingRule

_DEVICE = pytest.StashKey["DeviceSession"]()
_GATE = pytest.StashKey["GateSession"]()


class DeviceSession:
    """The selected modes and, once probed (lazily: collection needs no GPU), the device and its CUDA session."""

    def __init__(self, config: pytest.Config, modes: tuple[str, ...] | None) -> None:
        self.config = config
        self.selected_modes = modes  # None: every mode
        self._stopping: tuple[float, float] | None = None  # (noise, time cap): the runtime half's options
        self._stopping_rule: StoppingRule | None = None
        self._availability: Availability | None = None
        self.cuda: CudaSession | None = None
        #: whether GPU tests may go on in a fresh child session after a sticky CUDA error (plugin.relay); a
        #: child that a parent drives test by test (``--jetmem-against``, the relay itself) says no
        self.relay_allowed = True
        #: in a relay, the session id of the parent (its baseline entries merge with the parent's)
        self.parent_session: str | None = None
        #: whether measurements in modes that migrate pages take CUPTI's unified-memory counters
        #: (``--jetmem-counters``: the runtime half sets it)
        self.count_unified_memory = False
        #: ``--jetmem-energy`` (auto, on, off: the runtime half sets it); the setup is found once the device is open
        self.energy_policy = "off"
        self._energy: EnergySetup | None = None
        self._energy_found = False

    @classmethod
    def from_config(cls, config: pytest.Config) -> DeviceSession:
        text, source = options.raw(config, "modes")
        modes = None
        if text is not None and (source.startswith("--") or str(text).strip()):
            from pytest_jetmem.cuda.modes import parse_mode_list

            try:
                modes = parse_mode_list(str(text), source)
            except ValueError as exc:
                raise pytest.UsageError(str(exc)) from None
        return cls(config, modes)

    def set_stopping_rule(self, *, target_rel_noise: float, max_time_s: float) -> None:
        """The stopping rule's settings (the runtime half's options); the rule is made when first used."""
        self._stopping = (target_rel_noise, max_time_s)
        self._stopping_rule = None

    @property
    def stopping_rule(self) -> StoppingRule:
        """When a measurement stops sampling (made on first use, so loading the plugin imports no numpy)."""
        if self._stopping_rule is None:
            from pytest_jetmem.measure.stats import StoppingRule

            if self._stopping is None:
                self._stopping_rule = StoppingRule()
            else:
                noise, max_time_s = self._stopping
                self._stopping_rule = StoppingRule(target_rel_noise=noise, max_time_s=max_time_s)
        return self._stopping_rule

    def availability(self) -> Availability:
        """Open the device on first use; where that fails, ``reason`` says why (GPU tests skip with it)."""
        if self._availability is None:
            from pytest_jetmem.cuda.compiler import KernelCache
            from pytest_jetmem.cuda.counters import CounterCollector
            from pytest_jetmem.cuda.device import open_device
            from pytest_jetmem.cuda.session import CudaSession

            self._availability = open_device()
            if self._availability.ok:
                device = self._availability.device
                assert device is not None
                cache = KernelCache(options.get_str(self.config, "cache_dir"))
                counters = CounterCollector(device.drv, device.info.ordinal) if self.count_unified_memory else None
                self.cuda = CudaSession(device, cache, include_dirs=include_dirs(self.config), counters=counters)
        return self._availability

    def energy(self) -> EnergySetup | None:
        """What measurements read their energy from (None: ``off``, or no device), found once per session."""
        if not self._energy_found and self.cuda is not None:
            from pytest_jetmem.machine.jetson import sysroot
            from pytest_jetmem.measure.energy import find_power

            self._energy = find_power(self.cuda.device, self.energy_policy, str(sysroot()))
            self._energy_found = True
        return self._energy

    @property
    def broken(self) -> str | None:
        """Why this process's CUDA context is unusable (a sticky error), or None; never probes the device."""
        return self.cuda.device.broken if self.cuda is not None else None

    @property
    def probed_info(self) -> DeviceInfo | None:
        """The device facts if this process already probed the device (never probes it)."""
        return self._availability.info if self._availability is not None else None

    def close(self) -> None:
        if self.cuda is not None:
            try:
                self.cuda.close()
            except CudaError as exc:
                warnings.warn(f"jetmem: closing the device: {exc}", stacklevel=1)
            self.cuda = None


def include_dirs(config: pytest.Config) -> tuple[str, ...]:
    """The ini key ``jetmem_include_dirs`` (registered by plugin.nogpu; () where that half is not loaded)."""
    try:
        return tuple(str(p) for p in config.getini("jetmem_include_dirs"))
    except ValueError:
        return ()


def device_session(config: pytest.Config) -> DeviceSession:
    """The session's :class:`DeviceSession` (made on first use)."""
    session = config.stash.get(_DEVICE, None)
    if session is None:
        session = config.stash[_DEVICE] = DeviceSession.from_config(config)
    return session


def made_device_session(config: pytest.Config) -> DeviceSession | None:
    """The session's :class:`DeviceSession` if one was made (None: none was, e.g. a bad ``--jetmem-modes`` stopped
    the run in ``pytest_configure``; unconfiguring then must not read the options again)."""
    return config.stash.get(_DEVICE, None)


@dataclass
class GateSession:
    """The ``memmode_runtime`` half's session: options, baselines, the measurement records, the machine."""

    device: DeviceSession
    session_id: str
    baseline_dir: Path
    save: str | None
    compare_name: str | None
    fail_pct: float
    strict_machine: bool
    overwrite: bool
    window: int
    ambiguous: str  # what an ambiguous comparison does: "pass", "warn" or "fail"
    runs: int
    benchmark_json: str | None
    #: ``--jetmem-energy-fail``: the energy regression threshold (percent); None: energy comparisons are not judged
    energy_fail_pct: float | None = None
    #: the results store (``--jetmem-store``): its URL and the setting it came from; None: no store
    results_store: tuple[str, str] | None = None
    #: the rootdir: a relative results store path is relative to it
    rootdir: Path = Path(".")
    jetson_before: JetsonState | None = None
    baseline: Baseline | None = None
    baseline_checked: bool = False
    #: why this session's comparisons with the baseline are not made (None: they are, or none is asked for)
    baseline_skip: NotCompared | None = None
    entries: dict[str, Entry] = field(default_factory=dict)
    rows: list[MeasurementRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: measurements that wanted unified-memory counters and got none: per reason, the count per memory mode
    #: (this process's and every xdist worker's, said in one line per reason)
    counter_misses: dict[str, dict[str, int]] = field(default_factory=dict)
    _machine: Machine | None = None
    _store: BaselineStore | None = None

    @property
    def store(self) -> BaselineStore:
        """The baselines in :attr:`baseline_dir` (made on first use: only a run that saves, compares or reports
        imports the measurement layer)."""
        if self._store is None:
            from pytest_jetmem.measure.baseline import BaselineStore

            self._store = BaselineStore(self.baseline_dir)
        return self._store

    @staticmethod
    def new_session_id(config: pytest.Config) -> str:
        """The parent's session id in a relay, the controller's on an xdist worker (their baseline entries merge),
        else a new one."""
        workerinput = getattr(config, "workerinput", None)
        session_id = workerinput.get("jetmem_session") if workerinput else None
        return device_session(config).parent_session or session_id or uuid.uuid4().hex

    def jetson_state_before(self) -> JetsonState:
        """The Jetson state before the session measured anything (:attr:`jetson_before`): read at the first test
        that takes the ``jetmem`` fixture, or where first needed, so that a run without one reads nothing."""
        if self.jetson_before is None:
            from pytest_jetmem.machine.jetson import read_jetson_state, sysroot

            self.jetson_before = read_jetson_state(sysroot())
        return self.jetson_before

    def load_baseline(self, name: str) -> Baseline:
        """The baseline ``--jetmem-compare`` names: with a results store, the newest :attr:`window` sessions of branch
        ``name`` on this machine class in it (:func:`~pytest_jetmem.history.reference.reference_baseline`), else the
        baseline file. BaselineNotFound / BaselineError as :meth:`BaselineStore.load` raises them."""
        if self.results_store is None:
            return self.store.load(name)
        from pytest_jetmem.history.reference import reference_baseline

        url, source = self.results_store
        return reference_baseline(url, source, name, self.machine(), self.window, base=self.rootdir)

    def machine(self) -> Machine | None:
        """The machine record of this session's device (None without a GPU); built once."""
        if self._machine is None:
            info = self.device.availability().info
            if info is None:
                return None
            from pytest_jetmem.machine.fingerprint import machine_of

            self._machine = machine_of(info, self.jetson_state_before())
        return self._machine


def loaded(config: pytest.Config, plugin: str) -> bool:
    """Whether ``plugin`` is loaded, by its entry point (``xdist``, ``pytest_cov``) or by its module (``-p
    xdist.plugin``, ``PYTEST_PLUGINS=pytest_cov.plugin`` where plugins do not autoload)."""
    manager = config.pluginmanager
    return manager.hasplugin(plugin) or manager.hasplugin(f"{plugin}.plugin")


def owns_session(config: pytest.Config) -> bool:
    """Whether this process owns the session, the one place that says so: it writes what a session leaves (the
    store, the report, the CI summary, ``--jetmem-benchmark-json``, the advice); not an xdist worker nor a child
    session of pytest-jetmem (both have ``config.workerinput``; their results travel to the owner)."""
    return not hasattr(config, "workerinput")


def set_gate_session(config: pytest.Config, gate: GateSession) -> None:
    config.stash[_GATE] = gate


def gate_session(config: pytest.Config) -> GateSession | None:
    """The runtime half's session, or None where that half is not loaded (``-p no:...``)."""
    return config.stash.get(_GATE, None)


# -- an interrupted session keeps nothing ------------------------------------------------------------------------
_INTERRUPTED = pytest.StashKey[str]()


class Interruptions:
    """Notes what interrupted the session (``pytest_keyboard_interrupt`` is told no config), and every Ctrl-C the
    moment it arrives: a SIGINT handler notes it before the previous handler raises ``KeyboardInterrupt``. The hook
    alone misses a second Ctrl-C that lands while pytest handles the first (the terminal formats the traceback
    before this hook runs), and then the session ends as if it had run to its end."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._previous: Callable[[int, FrameType | None], Any] | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Hear SIGINT from now on, where Python handles it (not where it is ignored) and on the main thread."""
        previous = signal.getsignal(signal.SIGINT)
        if not callable(previous) or threading.current_thread() is not threading.main_thread():
            return
        self._previous = previous
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> Any:
        note_interrupted(self.config, "KeyboardInterrupt")
        assert self._previous is not None
        return self._previous(signum, frame)  # Python's own raises KeyboardInterrupt

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """Give SIGINT back to the handler it had (where ours is still the one installed)."""
        if self._previous is not None and signal.getsignal(signal.SIGINT) == self._on_sigint:
            signal.signal(signal.SIGINT, self._previous)
        self._previous = None

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        if _is_interruption(excinfo.value):
            note_interrupted(self.config, excinfo.typename)


def _is_interruption(exc: BaseException | None) -> bool:
    """Ctrl-C raises KeyboardInterrupt itself, and ``pytest.exit()`` its exception; the runners' subclasses of
    KeyboardInterrupt (pytest's Session.Interrupted, xdist's Interrupted) are the stops a run asks for."""
    return type(exc) is KeyboardInterrupt or isinstance(exc, pytest.exit.Exception)


def session_interrupted(config: pytest.Config) -> str | None:
    """What interrupted this session, or None where it is complete enough to keep its results (a baseline; the
    results store asks the same).

    Interrupted: the session ended on a ``KeyboardInterrupt`` (Ctrl-C, or raised by a test or a plugin) or on
    ``pytest.exit()``, here or, under xdist, on a worker: the tests after it never ran, so what it measured is not
    the session it claims to be. So is a session that heard Ctrl-C at any moment (noted by the SIGINT handler, even
    where code swallowed the KeyboardInterrupt), and one whose end hooks run while a KeyboardInterrupt is in flight
    (a second one raised while pytest handled the first: pytest then ends the session with exit status 0). Not
    interrupted: a stop the run asked for (``-x``/``--maxfail``, ``--stepwise``, collection errors: pytest's
    ``Session.Interrupted`` and xdist's ``Interrupted``, whose exit status is 2 too): the tests that ran, ran to
    their end, and they are kept. Under xdist an interrupted worker keeps nothing and the controller says so;
    workers the interruption did not reach (a KeyboardInterrupt raised by one test, not Ctrl-C) end normally and
    still save theirs.
    """
    noted = config.stash.get(_INTERRUPTED, None)
    if noted is None:
        in_flight = sys.exc_info()[1]
        if _is_interruption(in_flight):
            noted = type(in_flight).__name__
            note_interrupted(config, noted)
    return noted


def note_interrupted(config: pytest.Config, what: str) -> None:
    """Say that ``what`` interrupted the session (a worker's interruption heard by the controller too)."""
    config.stash[_INTERRUPTED] = what
