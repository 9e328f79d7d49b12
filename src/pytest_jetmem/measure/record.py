"""One measurement's record: what was measured, its figures, the conditions, and how it was judged.

A :class:`MeasurementRecord` is made for every ``jetmem.measure`` of a test, in one place: the
:class:`RecordBuilder` (from a :class:`~pytest_jetmem.measure.timing.Measurement`, or from a record a child
session sent, to judge it anew), filled in by the runtime half and ``--jetmem-against``. Every reader takes the
record: the "jetmem runtimes" table, the JUnit properties, the HTML report and its JSON twin, pytest-benchmark's
JSON, the demo's tables. It travels (on the test reports, to an xdist controller, from a relay or an against
child) as its JSON object, :meth:`MeasurementRecord.to_json`, read back with :meth:`MeasurementRecord.from_json`.

The JSON object is flat, the row the report's JSON twin has always held, with a ``"version"``::

    {"version": 1, "nodeid": "t.py::test_conv[device]", "mode": "device", "key": "conv:kernel",
     "label": "conv", "scope": "kernel", "median": 0.213, "mad": 0.0039, "p5": 0.2076, "p95": 0.22,
     "min": 0.2054, "n": 10, "first_call_ms": 0.2126, "first_call_wall_ms": 0.695, "stop_reason": "noise",
     "runs": 1, "samples": [...], "verdict": "ok"}

and, where they apply: ``run_rounds`` (measured in turns), ``clocks`` and ``throttled`` (the conditions),
``ratio``, ``ratio_ci``, ``relative_to``, ``reference_median`` (a side-by-side ratio), ``energy_ratio``,
``energy_ratio_ci``, ``energy_relative_to``, ``energy_reference_joules`` (an energy ratio), ``baseline`` with
``baseline_change_pct``, ``baseline_ci``, ``baseline_unit``, ``baseline_reason`` (a comparison) or with
``baseline_note`` (why nothing was compared: :class:`NotComparedWhy`), the same under ``energy_baseline`` (the
energy per call against the baseline's), ``against`` and ``base_samples``
(``--jetmem-against``), ``um_counters`` (unified-memory counters, :mod:`pytest_jetmem.measure.counters`),
``energy`` (energy per call, :mod:`pytest_jetmem.measure.energy`).
Readers ignore keys they do not know; a change of meaning bumps :data:`RECORD_VERSION`.
An object without ``"version"`` (written before records were versioned) holds version 1's keys.

GPU-free and pytest-free.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import Enum
from statistics import median as _median
from typing import TYPE_CHECKING, TypeVar

from pytest_jetmem.errors import RecordError, RecordVersionError
from pytest_jetmem.measure.compare import Comparison, Verdict
from pytest_jetmem.measure.counters import UnifiedMemoryCounters
from pytest_jetmem.measure.energy import Energy
from pytest_jetmem.validate import is_int, is_number

if TYPE_CHECKING:
    from pytest_jetmem.measure.timing import Measurement

__all__ = [
    "ENERGY_SCOPE",
    "RECORD_VERSION",
    "Against",
    "BaselineComparison",
    "Clocks",
    "Conditions",
    "EnergyRatio",
    "Identity",
    "Judgement",
    "MeasurementRecord",
    "NotCompared",
    "NotComparedWhy",
    "RecordBuilder",
    "RecordVerdict",
    "SideBySide",
    "Statistics",
    "energy_series",
    "group_name",
    "unit_of",
]

#: The version of the record's JSON object this module writes and the only one it reads.
RECORD_VERSION = 1

#: A JSON object as read: keys are strings, values anything JSON holds.
JsonObject = Mapping[str, object]
_E = TypeVar("_E", bound=Enum)


class RecordVerdict(str, Enum):
    """What became of a measurement: the table's and the JUnit property's "verdict"."""

    OK = "ok"  # judged (``memmode_runtime``), passed
    REPORTED = "reported"  # not judged
    REFERENCE = "reference, not judged"  # in its ``max_ratio``'s reference mode, and nothing else judged it
    AMBIGUOUS = "ambiguous"  # an ambiguous comparison, warned about (``--jetmem-ambiguous=warn``)
    FAIL_MAX_MS = "FAIL max_ms"
    FAIL_RATIO = "FAIL ratio"
    FAIL_ENERGY_RATIO = "FAIL energy ratio"
    FAIL_REGRESSION = "FAIL regression"
    FAIL_ENERGY_REGRESSION = "FAIL energy regression"  # the energy against the baseline (``--jetmem-energy-fail``)
    FAIL_AMBIGUOUS = "FAIL ambiguous"  # an ambiguous comparison under ``--jetmem-ambiguous=fail``

    @property
    def failed(self) -> bool:
        """Whether this verdict failed the test."""
        return self.value.startswith("FAIL")

    def __str__(self) -> str:
        return self.value


class NotComparedWhy(str, Enum):
    """Why a measurement was not compared with the baseline (``--jetmem-compare``) or the base
    (``--jetmem-against``); the record's ``baseline_note``."""

    NEW = "new"  # the baseline does not hold it
    NO_BASELINE = "no_baseline"  # the baseline named does not exist
    OTHER_MACHINE = "other_machine"  # the baseline comes from another machine fingerprint
    ONLY_IN_CHANGE = "only_in_change"  # the base has no such test
    BASE_NOT_PASSED = "base_not_passed"  # the base's test failed or was skipped
    NO_FIGURE = "no_figure"  # the measurement has no figure to compare (an energy of one window, or one <= 0)
    NOT_IN_BASE = "not_in_base"  # the base's test did not take this measurement
    NOT_IN_TURNS = "not_in_turns"  # measured alone, not in turns with the base

    def __str__(self) -> str:
        return self.value


# -- the parts ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Identity:
    """Which measurement: the test, the memory mode, the measure call's label and scope."""

    nodeid: str
    mode: str
    label: str
    scope: str

    @property
    def key(self) -> str:
        """``label:scope`` (``measure:scope`` without a label), as :attr:`Measurement.key`."""
        return f"{self.label or 'measure'}:{self.scope}"

    @property
    def test(self) -> str:
        """The test measured, in every mode: its node id without the memory mode (:func:`group_name`)."""
        return group_name(self.nodeid, self.mode)


def group_name(nodeid: str, mode: str) -> str:
    """The test a measurement belongs to: its node id with the memory mode removed from the parameter id.

    ``t.py::test_conv[15x15-device]`` -> ``t.py::test_conv[15x15]``; ``t.py::test_a[zero_copy]`` -> ``t.py::test_a``.
    """
    m = re.fullmatch(r"(.*?)\[(.*)\]", nodeid, flags=re.S)
    if not m:
        return nodeid
    parts = m.group(2).split("-")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] == mode:
            del parts[i]
            break
    else:
        return nodeid
    return f"{m.group(1)}[{'-'.join(parts)}]" if parts else m.group(1)


@dataclass(frozen=True)
class Statistics:
    """The figures, in milliseconds: the summary of the steady-state samples, the samples, the first call."""

    median: float
    mad: float
    p5: float
    p95: float
    min: float
    n: int
    samples: tuple[float, ...]
    first_call_ms: float | None = None
    first_call_wall_ms: float | None = None
    stop_reason: str = ""
    runs: int = 1  # runs with fresh allocations (``--jetmem-runs``)
    #: Under ``--jetmem-against``: per run, the samples of each round taken in turns with the other side.
    run_rounds: tuple[tuple[tuple[float, ...], ...], ...] = ()


@dataclass(frozen=True)
class Clocks:
    """The SM clock at the start and the end of sampling, its ceiling (MHz) and the slowdowns seen."""

    sm_mhz: tuple[float, ...]
    sm_max_mhz: float | None = None
    slowdowns: tuple[str, ...] = ()
    #: The board's state, where known: memory clock (MHz; a Jetson's EMC), GPU temperature (C), enforced power
    #: limit (W), a Jetson's power mode.
    mem_mhz: float | None = None
    temperature_c: float | None = None
    power_limit_w: float | None = None
    power_mode: str | None = None

    @property
    def median_mhz(self) -> float | None:
        """The clock the measurement ran at (the median of the readings); None: unknown."""
        return float(_median(self.sm_mhz)) if self.sm_mhz else None

    def describe(self) -> str:
        """``SM 1980 of 1980 MHz, memory 3201 MHz, 41 C, limit 700 W, mode MAXN; throttled: SW thermal slowdown``."""
        median = self.median_mhz
        top = f" of {self.sm_max_mhz:.0f}" if self.sm_max_mhz else ""
        parts = [f"SM {median:.0f}{top} MHz"] if median else []
        if self.mem_mhz is not None:
            parts.append(f"memory {self.mem_mhz:.0f} MHz")
        if self.temperature_c is not None:
            parts.append(f"{self.temperature_c:.0f} C")
        if self.power_limit_w is not None:
            parts.append(f"limit {self.power_limit_w:.0f} W")
        if self.power_mode is not None:
            parts.append(f"mode {self.power_mode}")
        text = ", ".join(parts) or "clocks not known"
        return f"{text}; throttled: {', '.join(self.slowdowns)}" if self.slowdowns else text

    def to_json(self) -> dict[str, object]:
        board = {
            "mem_mhz": self.mem_mhz,
            "temperature_c": self.temperature_c,
            "power_limit_w": self.power_limit_w,
            "power_mode": self.power_mode,
        }
        return {
            "sm_mhz": list(self.sm_mhz),
            "sm_max_mhz": self.sm_max_mhz,
            "slowdowns": list(self.slowdowns),
            **{key: value for key, value in board.items() if value is not None},
        }

    @classmethod
    def from_json(cls, data: object) -> Clocks:
        obj = _object(data, "clocks")
        mode = obj.get("power_mode")
        return cls(
            sm_mhz=_numbers(obj.get("sm_mhz", []), "clocks.sm_mhz"),
            sm_max_mhz=_optional_number(obj.get("sm_max_mhz"), "clocks.sm_max_mhz"),
            slowdowns=_strs(obj.get("slowdowns", []), "clocks.slowdowns"),
            mem_mhz=_optional_number(obj.get("mem_mhz"), "clocks.mem_mhz"),
            temperature_c=_optional_number(obj.get("temperature_c"), "clocks.temperature_c"),
            power_limit_w=_optional_number(obj.get("power_limit_w"), "clocks.power_limit_w"),
            power_mode=_any_str(mode, "clocks.power_mode") if mode is not None else None,
        )


@dataclass(frozen=True)
class Conditions:
    """Under what the measurement ran: its clocks (None: unknown) and the slowdowns that make it incomparable."""

    clocks: Clocks | None = None
    #: Clock slowdowns (thermal, power) while sampling; under ``--jetmem-against`` either side's.
    throttled: tuple[str, ...] = ()


@dataclass(frozen=True)
class SideBySide:
    """``memmode_runtime(max_ratio=..., relative_to=...)``: the ratio to the reference mode, measured interleaved."""

    ratio: float
    ci: tuple[float, float]  # its 99% interval
    relative_to: str
    reference_median: float


@dataclass(frozen=True)
class EnergyRatio:
    """``memmode_runtime(max_energy_ratio=..., relative_to=...)``: the energy per call over the reference mode's,
    measured in turns (their windows interleaved)."""

    ratio: float
    ci: tuple[float, float]  # its 99% interval
    relative_to: str
    reference_joules: float


@dataclass(frozen=True)
class BaselineComparison:
    """The comparison with the baseline (``--jetmem-compare``) or the base (``--jetmem-against``)."""

    verdict: Verdict
    change_pct: float
    ci: tuple[float, float]  # the interval of the ratio current / baseline
    unit: str  # what the comparison counted: "samples", "runs", "sessions" or "rounds"
    reason: str = ""  # why an ambiguous verdict is not a call either way

    @classmethod
    def of(cls, cmp: Comparison) -> BaselineComparison:
        return cls(cmp.verdict, float(cmp.change_pct), (float(cmp.ci_low), float(cmp.ci_high)), cmp.unit, cmp.reason)

    @property
    def text(self) -> str:
        """The change and the verdict as a table cell shows them (``+3.2% regression``); the verdict alone where the
        change has no finite figure (a 0 ms baseline, no samples on a side)."""
        if not math.isfinite(self.change_pct):
            return self.verdict.value
        return f"{self.change_pct:+.1f}% {self.verdict.value}"


@dataclass(frozen=True)
class NotCompared:
    """Why nothing was compared: the kind (what code decides on) and the sentence (what people read)."""

    why: NotComparedWhy
    text: str


@dataclass(frozen=True)
class Against:
    """``--jetmem-against``: the base the change was measured against, and the base's samples where paired."""

    label: str
    base_samples: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Judgement:
    """How the measurement was judged: its verdict, a side-by-side ratio, the comparison or why there was none."""

    verdict: RecordVerdict = RecordVerdict.REPORTED
    ratio: SideBySide | None = None
    baseline: BaselineComparison | NotCompared | None = None
    against: Against | None = None
    energy_ratio: EnergyRatio | None = None
    #: the energy per call against the baseline's (``--jetmem-compare``), or why it was not compared
    energy_baseline: BaselineComparison | NotCompared | None = None


# -- the record --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MeasurementRecord:
    """One measurement of one test in one memory mode, as every reader of the session's timings takes it."""

    identity: Identity
    statistics: Statistics
    conditions: Conditions
    judgement: Judgement
    #: Unified-memory counters (bytes migrated, page faults) where they were measured; None: not measured.
    counters: UnifiedMemoryCounters | None = None
    #: Energy per call (``--jetmem-energy``) where it was measured; None: not measured.
    energy: Energy | None = None

    @property
    def nodeid(self) -> str:
        return self.identity.nodeid

    @property
    def mode(self) -> str:
        return self.identity.mode

    @property
    def key(self) -> str:
        return self.identity.key

    @property
    def median(self) -> float:
        return self.statistics.median

    @property
    def verdict(self) -> RecordVerdict:
        return self.judgement.verdict

    def to_json(self) -> dict[str, object]:
        """The record's JSON object (see the module's docstring); :meth:`from_json` reads it back."""
        return {
            "version": RECORD_VERSION,
            **_identity_json(self.identity),
            **_statistics_json(self.statistics),
            **_conditions_json(self.conditions),
            **({"um_counters": self.counters.to_json()} if self.counters is not None else {}),
            **({"energy": self.energy.to_dict()} if self.energy is not None else {}),
            **_judgement_json(self.judgement),
        }

    @classmethod
    def from_json(cls, data: object) -> MeasurementRecord:
        """The record of a JSON object :meth:`to_json` wrote; :class:`RecordError` saying what is wrong with it,
        :class:`RecordVersionError` for a version this pytest-jetmem does not read."""
        obj = _object(data, "a measurement record")
        _check_version(obj)
        identity = _identity(obj)
        stats = _statistics(obj)
        conditions = _conditions(obj)
        raw_counters = obj.get("um_counters")
        counters = UnifiedMemoryCounters.from_json(raw_counters) if raw_counters is not None else None
        return cls(identity, stats, conditions, _judgement(obj), counters, _energy(obj))


# -- the record as JSON, part by part (in the object's key order) -----------------------------------------------
def _identity_json(ident: Identity) -> dict[str, object]:
    return {"nodeid": ident.nodeid, "mode": ident.mode, "key": ident.key, "label": ident.label, "scope": ident.scope}


def _statistics_json(stats: Statistics) -> dict[str, object]:
    """The figures; ``run_rounds`` only where the runs were taken in turns."""
    out: dict[str, object] = {
        "median": stats.median,
        "mad": stats.mad,
        "p5": stats.p5,
        "p95": stats.p95,
        "min": stats.min,
        "n": stats.n,
        "first_call_ms": stats.first_call_ms,
        "first_call_wall_ms": stats.first_call_wall_ms,
        "stop_reason": stats.stop_reason,
        "runs": stats.runs,
        "samples": list(stats.samples),
    }
    if stats.run_rounds:
        out["run_rounds"] = [[list(r) for r in run] for run in stats.run_rounds]
    return out


def _conditions_json(cond: Conditions) -> dict[str, object]:
    """``clocks`` where known, ``throttled`` where any slowdown was seen."""
    out: dict[str, object] = {}
    if cond.clocks is not None:
        out["clocks"] = cond.clocks.to_json()
    if cond.throttled:
        out["throttled"] = list(cond.throttled)
    return out


def _ratio_json(ratio: SideBySide | None) -> dict[str, object]:
    if ratio is None:
        return {}
    return {
        "ratio": ratio.ratio,
        "ratio_ci": list(ratio.ci),
        "relative_to": ratio.relative_to,
        "reference_median": ratio.reference_median,
    }


def _energy_ratio_json(ratio: EnergyRatio | None) -> dict[str, object]:
    if ratio is None:
        return {}
    return {
        "energy_ratio": ratio.ratio,
        "energy_ratio_ci": list(ratio.ci),
        "energy_relative_to": ratio.relative_to,
        "energy_reference_joules": ratio.reference_joules,
    }


def _against_json(against: Against | None) -> dict[str, object]:
    if against is None:
        return {}
    out: dict[str, object] = {"against": against.label}
    if against.base_samples is not None:
        out["base_samples"] = list(against.base_samples)
    return out


def _baseline_json(baseline: BaselineComparison | NotCompared | None, key: str = "baseline") -> dict[str, object]:
    """A comparison's figures, or why nothing was compared (``key`` holds the sentence, ``<key>_note`` the kind);
    nothing where neither applies. ``key``: ``baseline`` (the time's), ``energy_baseline`` (the energy's)."""
    if isinstance(baseline, NotCompared):
        return {key: baseline.text, f"{key}_note": baseline.why.value}
    if baseline is None:
        return {}
    out: dict[str, object] = {
        key: baseline.verdict.value,
        f"{key}_change_pct": baseline.change_pct,
        f"{key}_ci": list(baseline.ci),
        f"{key}_unit": baseline.unit,
    }
    if baseline.reason:
        out[f"{key}_reason"] = baseline.reason
    return out


def _judgement_json(judge: Judgement) -> dict[str, object]:
    return {
        **_ratio_json(judge.ratio),
        **_energy_ratio_json(judge.energy_ratio),
        **_against_json(judge.against),
        **_baseline_json(judge.baseline),
        **_baseline_json(judge.energy_baseline, "energy_baseline"),
        "verdict": judge.verdict.value,
    }


# -- the record from JSON, part by part (in the order the parts are checked) -------------------------------------
def _check_version(obj: JsonObject) -> None:
    """:class:`RecordVersionError` unless the object is of :data:`RECORD_VERSION` (no ``"version"``: version 1)."""
    version = obj.get("version", RECORD_VERSION)
    if not is_int(version) or version != RECORD_VERSION:
        raise RecordVersionError(version, RECORD_VERSION)


def _identity(obj: JsonObject) -> Identity:
    """The identity, with ``key`` (where given) checked against ``label:scope``."""
    label = obj.get("label")
    identity = Identity(
        nodeid=_str(obj, "nodeid"),
        mode=_str(obj, "mode"),
        label=_any_str("" if label is None else label, "label"),
        scope=_str(obj, "scope"),
    )
    key = obj.get("key", identity.key)
    if key != identity.key:
        raise RecordError(f"key: expected {identity.key!r} (label:scope), got {key!r}")
    return identity


def _count(obj: JsonObject, key: str, default: object, minimum: int, expected: str) -> int:
    """The integer at ``key`` (not a bool), at least ``minimum``; ``expected`` words the error."""
    value = obj.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise RecordError(f"{key}: expected {expected}, got {value!r}")
    return value


def _statistics(obj: JsonObject) -> Statistics:
    n = _count(obj, "n", None, 0, "a count")
    runs = _count(obj, "runs", 1, 1, "a count >= 1")
    stop_reason = obj.get("stop_reason", "")
    return Statistics(
        median=_number(obj, "median"),
        mad=_number(obj, "mad"),
        p5=_number(obj, "p5"),
        p95=_number(obj, "p95"),
        min=_number(obj, "min"),
        n=n,
        samples=_numbers(obj.get("samples"), "samples"),
        first_call_ms=_optional_number(obj.get("first_call_ms"), "first_call_ms"),
        first_call_wall_ms=_optional_number(obj.get("first_call_wall_ms"), "first_call_wall_ms"),
        stop_reason=_any_str(stop_reason if stop_reason is not None else "", "stop_reason"),
        runs=runs,
        run_rounds=_run_rounds(obj.get("run_rounds", [])),
    )


def _conditions(obj: JsonObject) -> Conditions:
    raw_clocks = obj.get("clocks")
    return Conditions(
        clocks=Clocks.from_json(raw_clocks) if raw_clocks else None,
        throttled=_strs(obj.get("throttled", []), "throttled"),
    )


def _member(kind: type[_E], value: object, key: str, choices: str) -> _E:
    """The member of enum ``kind`` whose value is ``value``; a :class:`RecordError` listing ``choices``."""
    try:
        return kind(value)
    except ValueError:
        raise RecordError(f"{key}: expected one of {choices}, got {value!r}") from None


def _side_by_side(obj: JsonObject) -> SideBySide | None:
    if obj.get("ratio") is None:
        return None
    return SideBySide(
        ratio=_number(obj, "ratio"),
        ci=_pair(obj.get("ratio_ci"), "ratio_ci"),
        relative_to=_str(obj, "relative_to"),
        reference_median=_number(obj, "reference_median", nan_for_none=True),
    )


def _comparison(obj: JsonObject, key: str) -> BaselineComparison:
    verdict = _member(Verdict, obj.get(key), key, ", ".join(v.value for v in Verdict))
    reason = obj.get(f"{key}_reason", "")
    return BaselineComparison(
        verdict=verdict,
        change_pct=_number(obj, f"{key}_change_pct", nan_for_none=True),
        ci=_pair(obj.get(f"{key}_ci"), f"{key}_ci"),
        unit=_str(obj, f"{key}_unit"),
        reason=_any_str(reason if reason is not None else "", f"{key}_reason"),
    )


def _not_compared(obj: JsonObject, key: str) -> NotCompared:
    choices = ", ".join(w.value for w in NotComparedWhy)
    why = _member(NotComparedWhy, obj.get(f"{key}_note"), f"{key}_note", choices)
    return NotCompared(why, _str(obj, key))


def _baseline(obj: JsonObject, key: str = "baseline") -> BaselineComparison | NotCompared | None:
    """A comparison where the object has its figures (under ``key``: see :func:`_baseline_json`), else why nothing
    was compared, else None."""
    if f"{key}_change_pct" in obj:
        return _comparison(obj, key)
    if obj.get(key) is not None:
        return _not_compared(obj, key)
    return None


def _against(obj: JsonObject) -> Against | None:
    if obj.get("against") is None:
        return None
    base_samples = obj.get("base_samples")
    return Against(
        label=_str(obj, "against"),
        base_samples=_numbers(base_samples, "base_samples") if base_samples is not None else None,
    )


def _energy(obj: JsonObject) -> Energy | None:
    raw = obj.get("energy")
    if raw is None:
        return None
    try:
        return Energy.from_dict(dict(_object(raw, "energy")))
    except ValueError as exc:
        raise RecordError(f"energy: {exc}") from None


def _judgement(obj: JsonObject) -> Judgement:
    ratio = _side_by_side(obj)
    baseline = _baseline(obj)
    against = _against(obj)
    choices = ", ".join(repr(v.value) for v in RecordVerdict)
    verdict = _member(RecordVerdict, obj.get("verdict", RecordVerdict.REPORTED.value), "verdict", choices)
    return Judgement(verdict, ratio, baseline, against, _energy_ratio(obj), _baseline(obj, "energy_baseline"))


def _energy_ratio(obj: JsonObject) -> EnergyRatio | None:
    if obj.get("energy_ratio") is None:
        return None
    return EnergyRatio(
        ratio=_number(obj, "energy_ratio"),
        ci=_pair(obj.get("energy_ratio_ci"), "energy_ratio_ci"),
        relative_to=_str(obj, "energy_relative_to"),
        reference_joules=_number(obj, "energy_reference_joules", nan_for_none=True),
    )


# -- the builder -------------------------------------------------------------------------------------------------
@dataclass
class RecordBuilder:
    """A record being judged: the measured parts fixed, the judgement filled in step by step, then :meth:`build`.

    The one way a :class:`MeasurementRecord` is made: by the runtime half from a measurement of this session
    (:meth:`measured`), and by ``--jetmem-against`` from the record a child session sent (:meth:`judging`).
    """

    identity: Identity
    statistics: Statistics
    conditions: Conditions
    verdict: RecordVerdict | None = None  # None: not decided yet, build's default
    ratio: SideBySide | None = None
    baseline: BaselineComparison | NotCompared | None = None
    against: Against | None = None
    counters: UnifiedMemoryCounters | None = None
    energy: Energy | None = None
    energy_ratio: EnergyRatio | None = None
    energy_baseline: BaselineComparison | NotCompared | None = None

    @classmethod
    def measured(cls, nodeid: str, m: Measurement) -> RecordBuilder:
        """The record of measurement ``m`` of test ``nodeid``, not judged yet."""
        s = m.summary
        clocks = Clocks.from_json(m.clocks) if m.clocks else None
        return cls(
            Identity(nodeid, m.mode, m.label or "", m.scope),
            Statistics(
                median=float(s.median),
                mad=float(s.mad),
                p5=float(s.p5),
                p95=float(s.p95),
                min=float(s.min),
                n=int(s.n),
                samples=tuple(float(v) for v in m.samples),
                first_call_ms=_float_or_none(m.first_call_ms),
                first_call_wall_ms=_float_or_none(m.first_call_wall_ms),
                stop_reason=m.stop_reason,
                runs=len(m.runs) or 1,
                run_rounds=tuple(tuple(tuple(float(v) for v in r) for r in run) for run in m.run_rounds),
            ),
            Conditions(clocks, tuple(m.throttled)),
            counters=m.counters,
            energy=m.energy,
        )

    @classmethod
    def judging(cls, record: MeasurementRecord, nodeid: str | None = None) -> RecordBuilder:
        """``record`` (a child session's) to be judged anew here, under ``nodeid`` (default: its own); what it
        was judged there stands until it is decided otherwise."""
        identity = record.identity if nodeid is None else replace(record.identity, nodeid=nodeid)
        judge = record.judgement
        return cls(
            identity,
            record.statistics,
            record.conditions,
            judge.verdict,
            judge.ratio,
            judge.baseline,
            judge.against,
            record.counters,
            record.energy,
            judge.energy_ratio,
            judge.energy_baseline,
        )

    def build(self, default: RecordVerdict = RecordVerdict.REPORTED) -> MeasurementRecord:
        """The record, with verdict ``default`` where none was decided."""
        judgement = Judgement(
            self.verdict or default, self.ratio, self.baseline, self.against, self.energy_ratio, self.energy_baseline
        )
        return MeasurementRecord(
            self.identity, self.statistics, self.conditions, judgement, self.counters, self.energy
        )


# -- reading JSON values -----------------------------------------------------------------------------------------
def _object(data: object, what: str) -> JsonObject:
    if not isinstance(data, Mapping) or not all(isinstance(k, str) for k in data):
        raise RecordError(f"{what}: expected a JSON object, got {type(data).__name__}")
    return data


def _any_str(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise RecordError(f"{what}: expected a string, got {value!r}")
    return value


def _str(obj: JsonObject, key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise RecordError(f"{key}: expected a non-empty string, got {value!r}")
    return value


def _number(obj: JsonObject, key: str, *, nan_for_none: bool = False) -> float:
    value = obj.get(key)
    if value is None and nan_for_none:  # a report's JSON twin writes a non-finite figure as null
        return math.nan
    if not is_number(value) or not isinstance(value, (int, float)):
        raise RecordError(f"{key}: expected a number, got {value!r}")
    return float(value)


def _optional_number(value: object, what: str) -> float | None:
    if value is None:
        return None
    if not is_number(value) or not isinstance(value, (int, float)):
        raise RecordError(f"{what}: expected a number or null, got {value!r}")
    return float(value)


def _float_or_none(value: float | None) -> float | None:
    return None if value is None else float(value)


def _numbers(value: object, what: str) -> tuple[float, ...]:
    if not isinstance(value, (list, tuple)):
        raise RecordError(f"{what}: expected a list of numbers, got {value!r}")
    out: list[float] = []
    for v in value:
        if not is_number(v) or not isinstance(v, (int, float)):
            raise RecordError(f"{what}: expected a list of numbers, got {v!r} in it")
        out.append(v)  # an int stays one (clocks in MHz)
    return tuple(out)


def _pair(value: object, what: str) -> tuple[float, float]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise RecordError(f"{what}: expected [low, high], got {value!r}")
    low, high = _numbers([math.nan if v is None else v for v in value], what)  # null: not finite (JSON twin)
    return (float(low), float(high))


def _strs(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise RecordError(f"{what}: expected a list of strings, got {value!r}")
    return tuple(str(v) for v in value)


def _run_rounds(value: object) -> tuple[tuple[tuple[float, ...], ...], ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(run, (list, tuple)) for run in value):
        raise RecordError(f"run_rounds: expected per run a list of rounds of samples, got {value!r}")
    return tuple(tuple(_numbers(r, "run_rounds") for r in run) for run in value)


# -- energy as a series of its own ---------------------------------------------------------------------------------
#: The scope of an energy series: the energy per call of a ``kernel`` measurement, in millijoules (its samples: the
#: joules per call of each energy window), stored beside the timing so change points and the fleet apply to it.
ENERGY_SCOPE = "energy"


def unit_of(scope: str) -> str:
    """The unit of a series' figures: ``mJ`` for an energy series, ``ms`` for a timing."""
    return "mJ" if scope == ENERGY_SCOPE else "ms"


def energy_series(record: MeasurementRecord) -> MeasurementRecord | None:
    """The energy series' record of ``record`` (its measure call's label, scope :data:`ENERGY_SCOPE`, figures in mJ:
    the windows' joules per call as samples), judged as the timing was not (``reported``); None without energy, or
    with fewer than two windows."""
    energy = record.energy
    if energy is None or len(energy.per_window) < 2:
        return None
    from pytest_jetmem.measure.stats import summarize  # the one summary of samples, as a timing's

    values = tuple(v * 1e3 for v in energy.per_window)
    s = summarize(values)
    stats = Statistics(s.median, s.mad, s.p5, s.p95, s.min, s.n, values, stop_reason=energy.stop_reason)
    identity = replace(record.identity, scope=ENERGY_SCOPE)
    return MeasurementRecord(identity, stats, record.conditions, Judgement())
