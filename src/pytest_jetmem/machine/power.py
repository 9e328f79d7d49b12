"""Power sources: what can tell the energy a GPU, or the board around it, uses, behind one small interface.

A :class:`PowerSource` reads a cumulative energy counter (``kind == "energy"``: joules) or an instantaneous power
(``kind == "power"``: watts); each :class:`Reading` carries the ``time.monotonic()`` it was taken at. A source says
its sensor's update period (and how that was found), what it covers (:data:`Covers`) and what that includes.
:func:`find_sources` finds the usable sources of a machine and picks the GPU's and the board total's, or says in one
line why none works (:class:`Sources`).

- Jetson: the INA3221 power monitors of the module (and Thor's INA238 on the carrier's input), read straight from
  hwmon under a root directory (``/``; ``$JETMEM_SYSROOT`` and the recorded trees under ``tests/data/hwmon`` in
  tests), as the kernel's ``Documentation/hwmon/ina3221.rst`` and ``ina238.rst`` describe them: one source per
  labelled rail, P = V x I (``in<n>_input`` mV, ``curr<n>_input`` mA), or ``power1_input`` (uW) where the chip has
  it. :data:`RAIL_MAPS` says, per module family, which rail is the GPU's and which rails total the module or board;
  the family comes from the device tree model and chip as :func:`pytest_jetmem.machine.jetson.read_jetson_state`
  reads them. Sources of every rail name: docs/energy.md.
- Discrete GPUs: NVML, read by the driver backend (``nvml_total_energy_mj``, ``nvml_power_usage_mw``,
  ``nvml_error``) and handed in as callables (:class:`NvmlReads`, :func:`nvml_reads`), so that this module imports
  no ``cuda``: the energy counter where NVML supports it (:class:`NvmlEnergySource`), the power draw otherwise
  (:class:`NvmlPowerSource`).

Finding sources never raises: a missing or unreadable file, a channel without a label, a rail reading garbage, an
NVML error each become a one-line note or reason naming the file or the NVML error. :meth:`PowerSource.read` raises
:class:`PowerReadError`, with such a reason, where a later read fails.

Hand-written, not jetson-stats: its API is a client of a daemon running as root (``jtop.service``), absent in CI
containers and blind to the recorded trees the tests point ``sysroot`` at. jetson-stats' rail handling (labels
containing ``NC`` skipped, ``VDD_IN`` as the total, else the sum of the rails) is followed here and cited in
docs/energy.md.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from pytest_jetmem.errors import PowerReadError
from pytest_jetmem.machine.jetson import read_jetson_state

__all__ = [
    "INA238_CONVERSION_MS",
    "INA3221_CONVERSION_MS",
    "NVML_ENERGY_PERIOD_S",
    "NVML_POWER_PERIOD_S",
    "RAIL_MAPS",
    "Covers",
    "HwmonRail",
    "Kind",
    "NvmlBackend",
    "NvmlEnergySource",
    "NvmlPowerSource",
    "NvmlReads",
    "PowerReadError",
    "PowerSource",
    "RailMap",
    "RailSum",
    "Reading",
    "Sources",
    "family_of",
    "find_hwmon_rails",
    "find_sources",
    "nvml_reads",
]

#: ``energy``: a cumulative counter in joules; ``power``: an instantaneous power in watts.
Kind = Literal["energy", "power"]
#: What a source covers: the GPU alone; the GPU with the SoC core (Orin's VDD_GPU_SOC); the CPU, GPU and CV engines
#: (VDD_CPU_GPU_CV); a GPU board as NVML sees it (the GPU, its memory and circuitry); the module's input (every rail
#: of the module); the board's input (module and carrier); or another rail (CPU, memory, SoC, 5 V system).
Covers = Literal["gpu", "gpu+soc", "cpu+gpu+cv", "gpu-board", "module", "board", "other"]


@dataclass(frozen=True)
class Reading:
    """One reading: ``t`` is ``time.monotonic()`` (s) when it was taken, ``value`` joules (a counter) or watts."""

    t: float
    value: float


class PowerSource(Protocol):
    """Anything that reads the energy or power of a part of the machine (see the module doc)."""

    @property
    def name(self) -> str:
        """What it is, for people: ``NVML energy counter, GPU board``, ``INA3221 rail VDD_GPU_SOC``."""
        ...

    @property
    def kind(self) -> Kind:
        """``energy`` (a cumulative counter, J) or ``power`` (instantaneous, W)."""
        ...

    @property
    def covers(self) -> Covers:
        """What part of the machine it measures."""
        ...

    @property
    def includes(self) -> str:
        """What that part includes, in words (what feeds from the rail)."""
        ...

    @property
    def update_period_s(self) -> float:
        """How often the sensor's value changes, in seconds: no read resolves anything shorter."""
        ...

    @property
    def period_basis(self) -> str:
        """Where :attr:`update_period_s` comes from (a file read, a computation, a documented figure)."""
        ...

    def read(self) -> Reading:
        """Read it now; :class:`PowerReadError` saying why where it cannot be read."""
        ...


# -- hwmon files ---------------------------------------------------------------------------------------------------
def _text(path: Path) -> str:
    """A sysfs file's text, stripped; PowerReadError naming the file and the OS error (EACCES: permission denied)."""
    try:
        return path.read_bytes().decode("utf-8").replace("\x00", " ").strip()
    except FileNotFoundError:
        raise PowerReadError(f"{path}: missing") from None
    except OSError as exc:
        raise PowerReadError(f"{path}: {exc.strerror or type(exc).__name__}") from None
    except UnicodeDecodeError:
        raise PowerReadError(f"{path}: not text") from None


def _number(path: Path) -> int:
    """A one-integer sysfs file; PowerReadError naming the file where it is missing, unreadable or garbage."""
    text = _text(path)
    try:
        return int(text, 10)
    except ValueError:
        raise PowerReadError(f"{path}: not a number ({text[:40]!r})") from None


def _optional_number(path: Path) -> int | None:
    """A one-integer file that may be absent or unreadable: its value, or None."""
    try:
        return _number(path)
    except PowerReadError:
        return None


def _natural(path: Path) -> tuple[str, int]:
    """Sort ``hwmon10`` after ``hwmon9``."""
    m = re.match(r"^(.*?)(\d+)$", path.name)
    return (m.group(1), int(m.group(2))) if m else (path.name, -1)


# -- rails -------------------------------------------------------------------------------------------------------
#: The INA3221's power-on conversion time of one bus or shunt voltage, ms (TI's INA3221 data sheet: CT 1.1 ms).
INA3221_CONVERSION_MS = 1.1
#: The ina238 driver's conversion time of each of bus voltage, shunt voltage and temperature, ms (its default
#: ADC_CONFIG 0xfb6a: 1052 us each, 16 samples averaged, continuous).
INA238_CONVERSION_MS = 1.052


@dataclass(frozen=True)
class HwmonRail:
    """One rail of an INA3221 or INA238 power monitor in hwmon: a power source in watts.

    ``power_file`` (ina238's ``power1_input``, uW) where the chip computes the power itself; else the power is
    ``voltage_file`` (mV) times ``current_file`` (mA).
    """

    chip: str
    label: str
    device: str
    channel: int
    voltage_file: Path
    current_file: Path
    power_file: Path | None
    update_period_s: float
    period_basis: str
    covers: Covers = "other"
    includes: str = ""
    kind: Kind = "power"

    @property
    def name(self) -> str:
        return f"{self.chip.upper()} rail {self.label}"

    def watts(self) -> float:
        """The rail's power now, W; PowerReadError naming the file where a read fails."""
        if self.power_file is not None:
            return _number(self.power_file) / 1e6
        return _number(self.voltage_file) * _number(self.current_file) / 1e6

    def read(self) -> Reading:
        return _timed(self.watts)


@dataclass(frozen=True)
class RailSum:
    """Several rails read together as one power source, their sum: a module's total where no single rail has it."""

    parts: tuple[HwmonRail, ...]
    covers: Covers = "module"
    includes: str = ""
    kind: Kind = "power"

    @property
    def name(self) -> str:
        chip = self.parts[0].chip.upper() if self.parts else "no"
        return f"{chip} rails {' + '.join(p.label for p in self.parts)}"

    @property
    def update_period_s(self) -> float:
        return max((p.update_period_s for p in self.parts), default=0.0)

    @property
    def period_basis(self) -> str:
        return "the slowest of its rails"

    def read(self) -> Reading:
        return _timed(lambda: sum(p.watts() for p in self.parts))


def _ina3221_period(hw: Path, enabled: int) -> tuple[float, str]:
    """The INA3221's update period: ``update_interval`` (ms) where the driver has it, else computed as
    ina3221.rst gives it, enabled channels x samples x (bus + shunt conversion time)."""
    interval = _optional_number(hw / "update_interval")
    if interval is not None and interval > 0:
        return interval / 1000.0, f"{hw.name}/update_interval ({interval} ms)"
    samples = _optional_number(hw / "samples") or 1
    period_ms = enabled * samples * 2 * INA3221_CONVERSION_MS
    return period_ms / 1000.0, (
        f"computed: {enabled} channels x {samples} samples x (2 x {INA3221_CONVERSION_MS} ms, the power-on "
        f"conversion times) = {period_ms:.1f} ms (no update_interval in {hw.name})"
    )


def _ina238_period(hw: Path) -> tuple[float, str]:
    """The INA238's update period: ``update_interval`` where the driver has it, else samples x 3 conversions of
    1.052 ms (bus, shunt, temperature: the driver's default ADC configuration, 16 samples)."""
    interval = _optional_number(hw / "update_interval")
    if interval is not None and interval > 0:
        return interval / 1000.0, f"{hw.name}/update_interval ({interval} ms)"
    samples = _optional_number(hw / "samples") or 16
    period_ms = samples * 3 * INA238_CONVERSION_MS
    return period_ms / 1000.0, (
        f"computed: {samples} samples x 3 x {INA238_CONVERSION_MS} ms conversions = {period_ms:.1f} ms "
        f"(the ina238 driver's default; no update_interval in {hw.name})"
    )


@dataclass
class _Found:
    """What the hwmon walk found: usable rails, and one note per rail or device left out."""

    rails: list[HwmonRail] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    monitors: int = 0


def _ina3221_channels(hw: Path, found: _Found) -> None:
    """The labelled, enabled channels of one INA3221 (``in[123]_label``, ``in[123]_input``, ``curr[123]_input``)."""
    channels: list[tuple[int, str]] = []
    for n in (1, 2, 3):
        where = f"{hw.name} (ina3221) channel {n}"
        if _optional_number(hw / f"in{n}_enable") == 0:
            found.notes.append(f"{where}: disabled (in{n}_enable is 0)")
            continue
        try:
            label = _text(hw / f"in{n}_label")
        except PowerReadError as exc:
            found.notes.append(f"{where}: no label ({exc})")
            continue
        if not label or "NC" in label.split("_"):  # jetson-stats skips "NC" (not connected) channels too
            found.notes.append(f"{where}: not connected (label {label!r})")
            continue
        channels.append((n, label))
    enabled = sum(1 for n in (1, 2, 3) if _optional_number(hw / f"in{n}_enable") != 0)
    period, basis = _ina3221_period(hw, max(enabled, 1))
    for n, label in channels:
        found.rails.append(
            HwmonRail("ina3221", label, hw.name, n, hw / f"in{n}_input", hw / f"curr{n}_input", None, period, basis)
        )


def _ina238_channel(hw: Path, found: _Found, carrier_label: str | None) -> None:
    """The one rail of an INA238: its label, or ``carrier_label`` (Thor's carrier input, ``VIN``) without one."""
    try:
        label = _text(hw / "in1_label")
    except PowerReadError:
        label = ""
    if not label:
        if carrier_label is None:
            found.notes.append(f"{hw.name} (ina238): no in1_label, and off a Thor an unlabelled INA238 is not known")
            return
        label = carrier_label
    power = hw / "power1_input"
    period, basis = _ina238_period(hw)
    power_file = power if power.exists() else None
    found.rails.append(
        HwmonRail("ina238", label, hw.name, 1, hw / "in1_input", hw / "curr1_input", power_file, period, basis)
    )


def _hwmon_devices(root: Path, found: _Found) -> list[tuple[Path, str]]:
    """(directory, chip name) of every INA3221/INA238 under ``<root>/sys/class/hwmon``."""
    hwmon = root / "sys/class/hwmon"
    try:
        entries = sorted(hwmon.iterdir(), key=_natural)
    except FileNotFoundError:
        return []
    except OSError as exc:
        found.notes.append(f"{hwmon}: cannot be listed ({exc.strerror or type(exc).__name__})")
        return []
    devices = []
    for hw in entries:
        try:
            chip = _text(hw / "name")
        except PowerReadError as exc:
            if "missing" not in str(exc):
                found.notes.append(str(exc))
            continue
        if chip in ("ina3221", "ina238"):
            devices.append((hw, chip))
    return devices


def find_hwmon_rails(root: Path, carrier_label: str | None = None) -> tuple[list[HwmonRail], list[str], int]:
    """Every labelled INA3221/INA238 rail under ``<root>/sys/class/hwmon`` that reads a number now, the notes on
    what was left out (one line each, naming the file), and how many power monitors were found.

    ``carrier_label``: the label an unlabelled INA238 gets (``VIN`` on a Thor, where it measures the carrier's
    input); None leaves it out with a note.
    """
    found = _Found()
    for hw, chip in _hwmon_devices(root, found):
        found.monitors += 1
        if chip == "ina3221":
            _ina3221_channels(hw, found)
        else:
            _ina238_channel(hw, found, carrier_label)
    usable = []
    for rail in found.rails:
        try:
            watts = rail.watts()
        except PowerReadError as exc:
            found.notes.append(f"{rail.name} ({rail.device} channel {rail.channel}): {exc}")
            continue
        if watts == 0:
            found.notes.append(f"{rail.name} reads 0 W now (not loaded, or its supply is off)")
        usable.append(rail)
    return usable, found.notes, found.monitors


# -- rail maps ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RailMap:
    """Which rails of a module family are the GPU's and which total the module or board (sources: docs/energy.md).

    ``totals``: the ways to the total, in order of preference; each is one rail, or several whose sum is the total.
    ``includes``: what feeds from each rail, in words. ``confirmed``: whether the names were found in NVIDIA's or the
    kernel's public sources (False: only in users' published tegrastats output).
    """

    family: str
    gpu: str
    gpu_covers: Covers
    totals: tuple[tuple[str, ...], ...]
    total_covers: tuple[Covers, ...]
    includes: dict[str, str]
    confirmed: bool = True
    carrier_label: str | None = None

    def covers_of(self, label: str) -> Covers:
        """What the rail ``label`` covers on this family."""
        return self.gpu_covers if label == self.gpu else "other"


_ORIN_NX_RAILS = {
    "VDD_IN": "the module's input: everything on the module",
    "VDD_CPU_GPU_CV": "the CPU, the GPU and the CV engines (DLA, PVA)",
    "VDD_SOC": "the SoC core",
}
RAIL_MAPS: dict[str, RailMap] = {
    "AGX Orin": RailMap(
        "AGX Orin",
        gpu="VDD_GPU_SOC",
        gpu_covers="gpu+soc",
        totals=(
            ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0", "VDDQ_VDD2_1V8AO"),
            ("VDD_GPU_SOC", "VDD_CPU_CV", "VIN_SYS_5V0"),
        ),
        total_covers=("module", "module"),
        includes={
            "VDD_GPU_SOC": "the GPU and the SoC core",
            "VDD_CPU_CV": "the CPU and the CV engines (DLA, PVA)",
            "VIN_SYS_5V0": "the module's 5 V system input",
            "VDDQ_VDD2_1V8AO": "the DRAM (VDDQ, VDD2) and the 1.8 V always-on rail",
        },
    ),
    "Orin NX": RailMap("Orin NX", "VDD_CPU_GPU_CV", "cpu+gpu+cv", (("VDD_IN",),), ("module",), _ORIN_NX_RAILS),
    "Orin Nano": RailMap("Orin Nano", "VDD_CPU_GPU_CV", "cpu+gpu+cv", (("VDD_IN",),), ("module",), _ORIN_NX_RAILS),
    "Xavier AGX": RailMap(
        "Xavier AGX",
        gpu="GPU",
        gpu_covers="gpu",
        totals=(("GPU", "CPU", "SOC", "CV", "VDDRQ", "SYS5V"),),
        total_covers=("module",),
        includes={
            "GPU": "the GPU",
            "CPU": "the CPU",
            "SOC": "the SoC core",
            "CV": "the CV engines (DLA, PVA)",
            "VDDRQ": "the DRAM",
            "SYS5V": "the module's 5 V system input",
        },
    ),
    "Xavier NX": RailMap("Xavier NX", "VDD_CPU_GPU_CV", "cpu+gpu+cv", (("VDD_IN",),), ("module",), _ORIN_NX_RAILS),
    "Thor": RailMap(
        "Thor",
        gpu="VDD_GPU",
        gpu_covers="gpu",
        totals=(("VIN",), ("VDD_GPU", "VDD_CPU_SOC_MSS", "VIN_SYS_5V0")),
        total_covers=("board", "module"),
        includes={
            "VDD_GPU": "the GPU",
            "VDD_CPU_SOC_MSS": "the CPU, the SoC core and the memory subsystem (MSS)",
            "VIN_SYS_5V0": "the module's 5 V system input",
            "VIN": "the carrier board's input (INA238): module and carrier",
        },
        confirmed=False,
        carrier_label="VIN",
    ),
}

# The device tree model names the family (``/proc/device-tree/model``, read by machine/jetson.py): e.g.
# "NVIDIA Jetson AGX Orin Developer Kit", "NVIDIA Jetson Orin Nano Developer Kit", "NVIDIA Jetson AGX Thor
# Developer Kit", "NVIDIA Jetson Xavier NX Developer Kit", "Jetson-AGX" (AGX Xavier on L4T 32). First match wins.
_MODEL_FAMILIES = (
    (re.compile(r"\bThor\b", re.I), "Thor"),
    (re.compile(r"\bAGX\s+Orin\b", re.I), "AGX Orin"),
    (re.compile(r"\bOrin\s+NX\b", re.I), "Orin NX"),
    (re.compile(r"\bOrin\s+Nano\b", re.I), "Orin Nano"),
    (re.compile(r"\bXavier\s+NX\b", re.I), "Xavier NX"),
    (re.compile(r"\bAGX\s+Xavier\b|^Jetson-AGX$|\bXavier\b", re.I), "Xavier AGX"),
)


def _family_from_labels(chip: str | None, labels: Sequence[str]) -> str | None:
    """The family whose GPU rail and first total are all among ``labels`` (Orin NX and Nano, and Xavier NX, share
    theirs: the chip tells Xavier NX apart; Orin NX stands for both Orin modules)."""
    for family, rails in RAIL_MAPS.items():
        if rails.gpu in labels and all(label in labels for label in rails.totals[0]):
            return "Xavier NX" if family == "Orin NX" and chip == "tegra194" else family
    return None


def family_of(model: str | None, chip: str | None, labels: Sequence[str] = ()) -> str | None:
    """The module family (a key of :data:`RAIL_MAPS`) from the device tree model, else the chip (tegra264: Thor),
    else the rail labels found; None where none tells."""
    family = next((f for pattern, f in _MODEL_FAMILIES if model and pattern.search(model)), None)
    if family is None and chip == "tegra264":
        family = "Thor"
    return family or _family_from_labels(chip, labels)


# -- NVML ----------------------------------------------------------------------------------------------------------
#: NVML's energy counter updates every 20-100 ms (measured, arXiv 2312.02741; NVML's reference states no period):
#: the slow end is taken.
NVML_ENERGY_PERIOD_S = 0.1
#: ``nvmlDeviceGetPowerUsage`` returns power averaged over 1 s on Ampere and newer, except GA100 (NVML's reference).
NVML_POWER_PERIOD_S = 1.0


class NvmlBackend(Protocol):
    """The backend's NVML reads (:class:`pytest_jetmem.cuda.driver.DriverBackend` has them)."""

    def nvml_total_energy_mj(self, dev: Any) -> int | None: ...

    def nvml_power_usage_mw(self, dev: Any) -> int | None: ...

    def nvml_error(self, quantity: str) -> str: ...


@dataclass(frozen=True)
class NvmlReads:
    """What NVML offers for one GPU, as callables: the energy counter (mJ), the power draw (mW), each None where NVML
    cannot say, and ``error(quantity)``: why (``total_energy`` or ``power_usage``; the NVML call and error name)."""

    energy_mj: Callable[[], int | None]
    power_mw: Callable[[], int | None]
    error: Callable[[str], str]
    device: str = "GPU"


def _timed(value: Callable[[], float]) -> Reading:
    """``value()`` as a :class:`Reading` stamped at the middle of the time it took to read."""
    before = time.monotonic()
    got = value()
    return Reading((before + time.monotonic()) / 2, got)


def _nvml_units(milli: int | None, reads: NvmlReads, quantity: str, what: str) -> float:
    """An NVML reading of ``quantity`` in mJ or mW as J or W; :class:`PowerReadError` with NVML's reason (else
    "NVML gave no ``what``") where it gave none."""
    if milli is None:
        raise PowerReadError(reads.error(quantity) or f"NVML gave no {what}")
    return milli / 1000.0


def nvml_reads(backend: NvmlBackend, dev: Any, device: str = "GPU") -> NvmlReads:
    """:class:`NvmlReads` of the device ``dev`` through a driver backend."""
    return NvmlReads(
        lambda: backend.nvml_total_energy_mj(dev),
        lambda: backend.nvml_power_usage_mw(dev),
        backend.nvml_error,
        device,
    )


@dataclass(frozen=True)
class NvmlEnergySource:
    """NVML's energy counter of a GPU board (``nvmlDeviceGetTotalEnergyConsumption``, Volta and newer), in joules."""

    reads: NvmlReads
    kind: Kind = "energy"
    covers: Covers = "gpu-board"
    includes: str = "the GPU, its memory and the board's circuitry, as NVML counts them"
    update_period_s: float = NVML_ENERGY_PERIOD_S
    period_basis: str = "20-100 ms between updates (measured, arXiv 2312.02741): the slow end"

    @property
    def name(self) -> str:
        return f"NVML energy counter, {self.reads.device} board"

    def read(self) -> Reading:
        return _timed(lambda: _nvml_units(self.reads.energy_mj(), self.reads, "total_energy", "energy"))


@dataclass(frozen=True)
class NvmlPowerSource:
    """NVML's power draw of a GPU board (``nvmlDeviceGetPowerUsage``), in watts: where the counter is not supported."""

    reads: NvmlReads
    kind: Kind = "power"
    covers: Covers = "gpu-board"
    includes: str = "the GPU, its memory and the board's circuitry, as NVML counts them"
    update_period_s: float = NVML_POWER_PERIOD_S
    period_basis: str = "averaged over 1 s on Ampere and newer except GA100 (NVML's reference)"

    @property
    def name(self) -> str:
        return f"NVML power draw, {self.reads.device} board"

    def read(self) -> Reading:
        return _timed(lambda: _nvml_units(self.reads.power_mw(), self.reads, "power_usage", "power"))


def _nvml_source(nvml: NvmlReads) -> tuple[PowerSource | None, str]:
    """The NVML source of the GPU (the counter where it answers, else the power draw), or None and why not."""
    if nvml.energy_mj() is not None:
        return NvmlEnergySource(nvml), ""
    energy_error = nvml.error("total_energy")
    if nvml.power_mw() is not None:
        return NvmlPowerSource(nvml), ""
    return None, _nvml_reason(energy_error, nvml.error("power_usage"))


def _nvml_reason(energy: str, power: str) -> str:
    """One line from the two NVML errors: ``NVML reports NVML_ERROR_NOT_SUPPORTED for total energy and power``."""
    if energy == power and not energy.startswith("nvml"):
        return energy or "NVML gave no energy and no power"

    def bare(error: str) -> str:
        return error.split(": ", 1)[1] if error.startswith("nvml") and ": " in error else error or "no value"

    if bare(energy) == bare(power):
        return f"NVML reports {bare(energy)} for total energy and power"
    return f"NVML reports {bare(energy)} for total energy and {bare(power)} for power"


# -- finding them ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sources:
    """The power sources of a machine: every usable one, the GPU's and the total chosen, notes, or the reason.

    ``gpu``: the source of the GPU (NVML's for a discrete GPU where given, else the family's GPU rail); ``total``:
    the module's or board's total (a rail, or a :class:`RailSum`). ``notes``: one line per rail or device left out,
    or reading 0 W. ``reason``: why none works, in one line ("" where ``gpu`` or ``total`` is set).
    """

    family: str | None = None
    sources: tuple[PowerSource, ...] = ()
    gpu: PowerSource | None = None
    total: PowerSource | None = None
    notes: tuple[str, ...] = ()
    reason: str = ""

    @property
    def usable(self) -> bool:
        """Whether a GPU source or a total was found."""
        return self.gpu is not None or self.total is not None


def _label_rails(rails: list[HwmonRail], rail_map: RailMap | None) -> list[HwmonRail]:
    """The rails with what each covers and includes on this family."""
    if rail_map is None:
        return rails
    out = []
    for rail in rails:
        covers = rail_map.covers_of(rail.label)
        includes = rail_map.includes.get(rail.label, "")
        out.append(replace(rail, covers=covers, includes=includes))
    return out


def _total(rails: dict[str, HwmonRail], rail_map: RailMap, notes: list[str]) -> PowerSource | None:
    """The first way to the family's total whose rails are all here; a lone total reading 0 W is not one."""
    for labels, covers in zip(rail_map.totals, rail_map.total_covers, strict=True):
        if not all(label in rails for label in labels):
            continue
        if len(labels) > 1:
            return RailSum(tuple(rails[label] for label in labels), covers, f"the sum of {', '.join(labels)}")
        rail = rails[labels[0]]
        try:
            watts = rail.watts()
        except PowerReadError as exc:
            notes.append(f"{rail.name}: {exc}")
            continue
        if watts > 0:
            return replace(rail, covers=covers)
        notes.append(f"{rail.name} reads 0 W: a board's total cannot, so it is not used as the total")
    return None


def _where(root: Path) -> str:
    """How the hwmon directory is named in a reason: ``/sys/class/hwmon``, or under the sysroot."""
    return "/sys/class/hwmon" if root == Path("/") else str(root / "sys/class/hwmon")


@dataclass(frozen=True)
class _Jetson:
    family: str | None
    rails: tuple[HwmonRail, ...]
    gpu: PowerSource | None
    total: PowerSource | None
    notes: tuple[str, ...]
    reason: str


def _no_rails(root: Path, monitors: int, notes: list[str]) -> str:
    """Why no rail is usable: no power monitor (and the first note, an unreadable directory), or no usable rail."""
    if not monitors:
        return f"no INA3221/INA238 power monitor under {_where(root)}" + (f": {notes[0]}" if notes else "")
    return f"no usable rail of the power monitors: {notes[0] if notes else 'none labelled'}"


def _choose(rail_map: RailMap, found: list[HwmonRail], notes: list[str]) -> _Jetson:
    """The family's GPU rail and total among the rails found."""
    rails = tuple(_label_rails(found, rail_map))
    by_label = {r.label: r for r in rails}
    gpu = by_label.get(rail_map.gpu)
    total = _total(by_label, rail_map, notes)
    if gpu is None:
        notes.append(f"{rail_map.family}: no usable GPU rail {rail_map.gpu}")
    reason = "" if gpu or total else f"{rail_map.family}: neither the GPU rail {rail_map.gpu} nor a total is usable"
    return _Jetson(rail_map.family, rails, gpu, total, tuple(notes), reason)


def _jetson(root: Path) -> _Jetson:
    """The hwmon rails of a Jetson under ``root``, the family's GPU rail and total, and why not where missing."""
    state = read_jetson_state(root)
    early = family_of(state.model, state.chip)
    rails, notes, monitors = find_hwmon_rails(root, RAIL_MAPS[early].carrier_label if early else None)
    if not rails:
        return _Jetson(early, (), None, None, tuple(notes), _no_rails(root, monitors, notes))
    family = early or family_of(None, state.chip, [r.label for r in rails])
    if family is None:
        labels = ", ".join(r.label for r in rails)
        reason = f"rails {labels} found, but the module ({state.model or 'model unknown'}) has no known rail map"
        return _Jetson(None, tuple(rails), None, None, tuple(notes), reason)
    return _choose(RAIL_MAPS[family], rails, notes)


def _find(root: Path, nvml: NvmlReads | None) -> Sources:
    jetson = _jetson(root)
    nvml_source, nvml_reason = _nvml_source(nvml) if nvml is not None else (None, "NVML not tried")
    gpu = nvml_source or jetson.gpu
    sources: tuple[PowerSource, ...] = ((nvml_source,) if nvml_source else ()) + jetson.rails
    family = jetson.family or ("discrete GPU (NVML)" if nvml_source else None)
    if gpu is None and jetson.total is None:
        reason = f"{jetson.reason or 'no Jetson power rails'} and {nvml_reason}"
        return Sources(family, sources, None, None, jetson.notes, reason)
    return Sources(family, sources, gpu, jetson.total, jetson.notes)


def find_sources(sysroot: str | Path, *, nvml: NvmlReads | None = None) -> Sources:
    """The usable power sources of the machine whose files are under ``sysroot`` (``/``, or a recorded tree), with
    the GPU's and the total chosen; where none works, :attr:`Sources.reason` says why in one line.

    ``nvml``: NVML's reads of the GPU under test where it is discrete (:func:`nvml_reads`); then its energy counter
    (or, where that is not supported, its power draw) is the GPU's source. Never raises.
    """
    try:
        return _find(Path(sysroot), nvml)
    except Exception as exc:  # a finder of optional sensors must never fail the session: say what went wrong
        return Sources(reason=f"power sources could not be found: {type(exc).__name__}: {exc}")
