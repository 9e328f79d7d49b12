"""What decides a Jetson's speed, read from files without root.

:func:`read_jetson_state` reads the L4T release, the nvpmodel power mode, the GPU devfreq clocks,
the EMC clock where one is readable, thermal zones and throttling indicators under a root directory
(``/`` by default; tests point it at recorded trees). Every source is optional: a missing,
unreadable or garbled file gives ``None`` (or an empty collection), never an exception.
:func:`timing_warnings` (from :mod:`pytest_jetmem.machine.jetson_warnings`, re-exported here) turns one
or two snapshots (before and after a timing) into plain warnings; :class:`JetsonState` lives in
:mod:`pytest_jetmem.machine.jetson_state`.

Files read, relative to ``root`` (the sources each fact was taken from are cited beside the code):

- ``etc/nv_tegra_release`` (first line), else the ``nvidia-l4t-core`` entry of
  ``var/lib/dpkg/status``: the L4T release, ``R36.4.3``.
- ``var/lib/nvpmodel/status`` (``pmode:0002 ...``) and ``etc/nvpmodel.conf``
  (``< POWER_MODEL ID=2 NAME=30W >``, ``< PM_CONFIG DEFAULT=2 >``, ``GPU MAX_FREQ ...``).
- ``sys/class/devfreq/<gpu>/{cur_freq,min_freq,max_freq,available_frequencies,governor}``.
- ``sys/class/devfreq/bwmgr/cur_freq`` or ``sys/devices/platform/bwmgr/devfreq/bwmgr/cur_freq`` (the bwmgr
  devfreq node: Thor, and Orin on Jetson Linux R39), else ``sys/kernel/debug/...emc...`` (root only): the EMC.
- ``sys/class/thermal/thermal_zone*/{type,temp}`` and ``sys/class/thermal/cooling_device*/{type,cur_state}``.
- ``sys/class/hwmon/hwmon*/`` named ``soctherm_oc``: ``oc<N>_event_cnt`` over-current throttle counters.
- ``sys/module/tegra_fuse/parameters/tegra_chip_id``, else ``sys/devices/soc*/soc_id``, else
  ``proc/device-tree/compatible``: the chip; ``proc/device-tree/model``: the board name.

Units: frequencies in Hz (devfreq reports Hz), temperatures in degrees C (thermal zones report
millidegrees).

Hand-written, not jetson-stats (jtop): its Python API is a client of the ``jtop.service`` daemon installed as root
(``/run/jtop.sock``), absent in CI containers, and it cannot read the recorded trees the tests point ``root`` at.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

from pytest_jetmem.cuda.driver import ClockState
from pytest_jetmem.machine.jetson_state import JetsonState, mhz
from pytest_jetmem.machine.jetson_warnings import timing_warnings

__all__ = ["CHIP_NAMES", "JetsonState", "for_device", "read_jetson_state", "read_jetson_state_for", "timing_warnings"]

# Tegra chip ids, from the Linux kernel's include/soc/tegra/fuse.h (TEGRA210 0x21, TEGRA186 0x18,
# TEGRA194 0x19, TEGRA234 0x23, TEGRA241 0x24, TEGRA264 0x26). The tegra_fuse module parameter
# prints the id in decimal (Orin reads "35"), as scripts that switch on it show (33 TX1/Nano,
# 24 TX2, 25 Xavier, 35 Orin); so does soc_id (fuse-tegra.c: kasprintf("%u", tegra_get_chip_id())).
CHIP_NAMES: dict[int, str] = {
    0x40: "tegra124",  # TK1
    0x21: "tegra210",  # TX1, Nano
    0x18: "tegra186",  # TX2
    0x19: "tegra194",  # Xavier
    0x23: "tegra234",  # Orin
    0x24: "tegra241",  # Grace
    0x26: "tegra264",  # Thor
}

# A frequency above this in nvpmodel.conf means "no cap" (NVIDIA's files use -1 or 2147483647).
_NO_CAP = 2_147_483_647
# jetson-stats (jtop/core/temperature.py) treats -256 C as "sensor offline"; Orin's cv*-thermal
# zones read -256000 when the engine is power-gated.
_OFFLINE_TEMP_C = -256.0


# --------------------------------------------------------------------------- file helpers


def _read_text(path: Path) -> str | None:
    """The file's text, or None if it is missing, unreadable, a directory or not UTF-8."""
    try:
        return path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _read_str(path: Path) -> str | None:
    """A one-value sysfs/device-tree string: NULs and whitespace stripped; empty -> None."""
    text = _read_text(path)
    if text is None:
        return None
    text = text.replace("\x00", " ").strip()
    return text or None


def _read_int(path: Path) -> int | None:
    """A one-integer sysfs file (decimal), or None."""
    text = _read_str(path)
    if text is None:
        return None
    try:
        return int(text, 10)
    except ValueError:
        return None


def _read_dt_strings(path: Path) -> list[str]:
    """A device-tree string-list property (NUL-separated), e.g. ``compatible``."""
    text = _read_text(path)
    if text is None:
        return []
    return [s.strip() for s in text.split("\x00") if s.strip()]


def _list_dir(path: Path) -> list[Path]:
    """Sorted entries of a directory, or [] if it cannot be listed."""
    try:
        return sorted(path.iterdir())
    except OSError:
        return []


def _natural_key(path: Path) -> tuple[str, int]:
    """Sort ``thermal_zone10`` after ``thermal_zone9``."""
    m = re.match(r"^(.*?)(\d+)$", path.name)
    return (m.group(1), int(m.group(2))) if m else (path.name, -1)


# --------------------------------------------------------------------------- L4T release

# First line of /etc/nv_tegra_release, e.g. (Orin, JetPack 6)
#   "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: ..."
# and on Thor (JetPack 7) the same shape with more lines after it:
#   "# R38 (release), REVISION: 2.0, GCID: 41844464, BOARD: generic, EABI: aarch64, DATE: ..."
#   "# KERNEL_VARIANT: oot"
# (jetson-stats jtop/core/jetson_l4t.py splits this line on ", "; Thor captures are in public repos).
_L4T_RE = re.compile(r"^#\s*R(\d+)\s*\(\w+\)\s*,\s*REVISION:\s*(\d+(?:\.\d+)*)")
# Without that file, jetson-stats falls back to the nvidia-l4t-core package version
# ("36.4.3-20250107174145"); we read it from dpkg's status database instead of running dpkg.
_DPKG_L4T_RE = re.compile(r"^Package:\s*nvidia-l4t-core\s*$", re.MULTILINE)


def _stamp(path: Path) -> tuple[int, int] | None:
    """(mtime in ns, size) of ``path``, None where it cannot be read: what a cached read of it is keyed on."""
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


def _read_l4t_release(root: Path) -> str | None:
    """The L4T release (``R36.4``), read once per version of its two files: dpkg's status file is large (a regex
    search of it took ~7 ms a read, and a Jetson's clocks are read twice per measurement)."""
    return _l4t_release(root, _stamp(root / "etc/nv_tegra_release"), _stamp(root / "var/lib/dpkg/status"))


@functools.lru_cache(maxsize=8)
def _l4t_release(root: Path, _release: tuple[int, int] | None, _status: tuple[int, int] | None) -> str | None:
    text = _read_text(root / "etc/nv_tegra_release")
    if text is not None:
        first = text.splitlines()[0] if text.splitlines() else ""
        m = _L4T_RE.match(first.strip())
        if m:
            return f"R{m.group(1)}.{m.group(2)}"
    status = _read_text(root / "var/lib/dpkg/status")
    if status is None:
        return None
    m = _DPKG_L4T_RE.search(status)
    if not m:
        return None
    stanza = status[m.end() :].split("\n\n", 1)[0]
    v = re.search(r"^Version:\s*(\d+(?:\.\d+)+)", stanza, re.MULTILINE)
    return f"R{v.group(1)}" if v else None


# --------------------------------------------------------------------------- nvpmodel

# /var/lib/nvpmodel/status is written by nvpmodel itself as "pmode:0002 fmode:quiet" (world
# readable); /etc/nvpmodel.conf holds "< POWER_MODEL ID=2 NAME=30W >" blocks whose lines such as
# "GPU MAX_FREQ 612000000" set the mode's caps (-1: no cap), and "< PM_CONFIG DEFAULT=2 >"
# (NVIDIA nvpmodel_*.conf files; the Orin template in mlcommons inference_results_v3.0).
_PMODE_RE = re.compile(r"pmode:\s*(\d+)")
_POWER_MODEL_RE = re.compile(r"<\s*POWER_MODEL\s+ID=(\d+)\s+NAME=([^\s>]+)\s*>")
_PM_DEFAULT_RE = re.compile(r"<\s*PM_CONFIG\s+DEFAULT=(\d+)\s*>")
_GPU_MAX_RE = re.compile(r"^GPU\s+MAX_FREQ\s+(-?\d+)")


@dataclass(frozen=True)
class _NvpModel:
    names: dict[int, str]
    gpu_max: dict[int, int]  # mode id -> GPU MAX_FREQ line of that mode (may be -1)
    default_id: int | None


def _parse_nvpmodel_conf(text: str) -> _NvpModel:
    names: dict[int, str] = {}
    gpu_max: dict[int, int] = {}
    default_id: int | None = None
    current: int | None = None
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("<"):
            current = None
            m = _POWER_MODEL_RE.match(line)
            if m:
                current = int(m.group(1))
                names[current] = m.group(2)
                continue
            m = _PM_DEFAULT_RE.match(line)
            if m:
                default_id = int(m.group(1))
            continue
        if current is not None:
            m = _GPU_MAX_RE.match(line)
            if m:
                gpu_max[current] = int(m.group(1))
    return _NvpModel(names, gpu_max, default_id)


def _read_nvpmodel(root: Path) -> tuple[int | None, str | None, int | None, int | None]:
    """(current id, its name, default id, the current mode's GPU MAX_FREQ or None)."""
    status = _read_text(root / "var/lib/nvpmodel/status")
    m = _PMODE_RE.search(status) if status else None
    mode_id = int(m.group(1)) if m else None
    conf_text = _read_text(root / "etc/nvpmodel.conf")
    conf = _parse_nvpmodel_conf(conf_text) if conf_text else _NvpModel({}, {}, None)
    name = conf.names.get(mode_id) if mode_id is not None else None
    gpu_cap = conf.gpu_max.get(mode_id) if mode_id is not None else None
    return mode_id, name, conf.default_id, gpu_cap


def _real_cap(gpu_cap: int | None) -> int | None:
    """The power mode's GPU MAX_FREQ where it caps the GPU (None for -1, huge or missing)."""
    return gpu_cap if gpu_cap is not None and 0 < gpu_cap < _NO_CAP else None


# --------------------------------------------------------------------------- GPU devfreq

# How the GPU's devfreq node is found under /sys/class/devfreq (first rule that matches wins,
# ties broken by name):
#  1. Thor: "gpu-gpc-<n>" (the GPC clock domain; "gpu-nvd-<n>" is the video clock, not used)
#     (jetson-stats jtop/core/thor_gpu.py and hw_detect.py).
#  2. The node's device/of_node/name is one of gv11b, gp10b, ga10b, gpu (jetson-stats
#     jtop/core/gpu.py find_igpu), or device/of_node/compatible names a Tegra GPU (nvidia,ga10b ...).
#  3. The node's own name ends in .ga10b/.gv11b/.gp10b/.gm20b/.gpu: 17000000.ga10b (Orin, L4T 35),
#     17000000.gpu (Orin, L4T 36), 17000000.gv11b (Xavier), 17000000.gp10b (TX2), 57000000.gpu
#     (Nano/TX1) (NVIDIA jetson_clocks and nvpmodel.conf GPU paths).
_THOR_GPU_RE = re.compile(r"^gpu-gpc-\d+$")
_GPU_OF_NAMES = frozenset({"gv11b", "gp10b", "ga10b", "gm20b", "gpu"})
_GPU_COMPAT_RE = re.compile(r"^nvidia,(?:tegra\d+-)?(?:ga10b|gv11b|gp10b|gm20b|gk20a|gpu)$")
_GPU_NAME_SUFFIXES = (".ga10b", ".gv11b", ".gp10b", ".gm20b", ".gpu")
# A devfreq governor name is one word: nvhost_podgov, performance, userspace, simple_ondemand ...
_GOVERNOR_RE = re.compile(r"^[\w.-]+$")


def _find_gpu_devfreq(root: Path) -> Path | None:
    nodes = _list_dir(root / "sys/class/devfreq")
    for node in nodes:
        if _THOR_GPU_RE.match(node.name):
            return node
    for node in nodes:
        of_node = node / "device/of_node"
        of_name = _read_str(of_node / "name")
        if of_name in _GPU_OF_NAMES:
            return node
        if any(_GPU_COMPAT_RE.match(c) for c in _read_dt_strings(of_node / "compatible")):
            return node
    for node in nodes:
        if node.name.endswith(_GPU_NAME_SUFFIXES):
            return node
    return None


def _read_freq_list(path: Path) -> tuple[int, ...] | None:
    """``available_frequencies``: space-separated Hz values, sorted ascending; garbled -> None."""
    text = _read_str(path)
    if text is None:
        return None
    try:
        values = sorted({int(tok, 10) for tok in text.split()})
    except ValueError:
        return None
    return tuple(values) or None


# NVIDIA's jetson_clocks pins the GPU with `cat max_freq > min_freq` (do_gpu), leaving the governor
# (nvhost_podgov) as it is; `jetson_clocks --show` under a 5 W Nano mode prints
# "GPU MinFreq=614400000 MaxFreq=614400000" although 921600000 is available. So "locked" is
# min == max, not min == max == the highest available frequency: the power mode's cap is reported
# apart (nvpmodel_gpu_max_freq_hz, and a note in timing_warnings).
def _clocks_locked(min_hz: int | None, max_hz: int | None, governor: str | None) -> bool | None:
    """Whether the GPU clock is pinned (see :class:`JetsonState`); None if it cannot be told."""
    if governor == "performance":
        return True
    if min_hz is None or max_hz is None:
        return None
    return min_hz == max_hz


@dataclass(frozen=True)
class _Devfreq:
    """What the GPU devfreq node says; every field None where the node or the file is missing."""

    node: str | None = None
    cur: int | None = None
    lo: int | None = None
    hi: int | None = None
    avail: tuple[int, ...] | None = None
    governor: str | None = None


def _read_governor(node: Path) -> str | None:
    """The devfreq governor's name, or None where it is missing or not one word."""
    governor = _read_str(node / "governor")
    return governor if governor is not None and _GOVERNOR_RE.match(governor) else None


def _read_devfreq(node: Path | None) -> _Devfreq:
    """The GPU devfreq node's clocks and governor (an empty record without a node)."""
    if node is None:
        return _Devfreq()
    return _Devfreq(
        node=node.name,
        cur=_read_int(node / "cur_freq"),
        lo=_read_int(node / "min_freq"),
        hi=_read_int(node / "max_freq"),
        avail=_read_freq_list(node / "available_frequencies"),
        governor=_read_governor(node),
    )


# --------------------------------------------------------------------------- EMC

# The EMC (DRAM) clock. Sources, in order (jetson-stats jtop/core/memory.py read_emc and NVIDIA's
# jetson_clocks do_emc):
#  - the bwmgr devfreq node, /sys/class/devfreq/bwmgr (a link to /sys/devices/platform/bwmgr/devfreq/bwmgr,
#    read there too where /sys/class is not populated): Thor exposes the EMC through it, and so does Orin on
#    Jetson Linux R39; devfreq attributes are world-readable, so this works without root wherever it exists.
#  - any other devfreq node named *emc* (upstream kernels' tegra EMC devfreq).
#  - /sys/kernel/debug/bpmp/debug/clk/emc/rate (Xavier, Orin), /sys/kernel/debug/clk/emc/clk_rate
#    (TX2), /sys/kernel/debug/clk/override.emc/clk_rate (TX1/Nano): debugfs, mode 0700 root, so
#    readable only when running as root.
# Without a bwmgr node (Xavier; Orin before R39) and without root no EMC clock is readable
# (/sys/kernel/actmon_avg_activity/mc_all is a utilisation counter, not a clock): emc_freq_hz is then None.
_BWMGR_NODES = ("sys/class/devfreq/bwmgr", "sys/devices/platform/bwmgr/devfreq/bwmgr")
_EMC_DEBUGFS = (
    "sys/kernel/debug/bpmp/debug/clk/emc/rate",
    "sys/kernel/debug/clk/emc/clk_rate",
    "sys/kernel/debug/clk/override.emc/clk_rate",
)


def _read_emc(root: Path) -> int | None:
    devfreq = root / "sys/class/devfreq"
    candidates = [root / rel for rel in _BWMGR_NODES] + [n for n in _list_dir(devfreq) if "emc" in n.name.lower()]
    for node in candidates:
        hz = _read_int(node / "cur_freq")
        if hz is not None and hz > 0:
            return hz
    for rel in _EMC_DEBUGFS:
        hz = _read_int(root / rel)
        if hz is not None and hz > 0:
            return hz
    return None


# --------------------------------------------------------------------------- thermal, throttling


def _read_thermal(root: Path) -> dict[str, float]:
    """Zone type -> degrees C; offline zones (unreadable or -256 C) are left out."""
    zones = [p for p in _list_dir(root / "sys/class/thermal") if p.name.startswith("thermal_zone")]
    out: dict[str, float] = {}
    for zone in sorted(zones, key=_natural_key):
        kind = _read_str(zone / "type")
        milli = _read_int(zone / "temp")
        if kind is None or milli is None:
            continue
        celsius = milli / 1000.0
        if celsius <= _OFFLINE_TEMP_C:
            continue
        key = kind if kind not in out else f"{kind} ({zone.name})"
        out[key] = celsius
    return out


def _read_cooling(root: Path, gpu_node: str | None) -> tuple[list[str], bool]:
    """(active throttle indicators, whether any indicator was readable).

    Throttle alerts are cooling devices whose type ends in ``-alert`` (Orin/Thor:
    cpu-throttle-alert, gpu-throttle-alert, cv0-throttle-alert, soc0-throttle-alert,
    hot-surface-alert ...): ``cur_state`` > 0 while the alert holds. ``devfreq-<gpu node>`` is the
    thermal framework's devfreq cooling device of the GPU: ``cur_state`` > 0 caps the GPU clock.
    Fans (pwm-fan) are not throttling.
    """
    active: list[str] = []
    seen = False
    devices = [p for p in _list_dir(root / "sys/class/thermal") if p.name.startswith("cooling_device")]
    for dev in sorted(devices, key=_natural_key):
        kind = _read_str(dev / "type")
        if kind is None:
            continue
        is_alert = kind.endswith("-alert")
        is_gpu_cap = gpu_node is not None and kind == f"devfreq-{gpu_node}"
        if not (is_alert or is_gpu_cap):
            continue
        state = _read_int(dev / "cur_state")
        if state is None:
            continue
        seen = True
        if state > 0:
            active.append(kind)
    return active, seen


def _read_oc_events(root: Path) -> dict[str, int]:
    """Over-current event counters of the ``soctherm_oc`` hwmon device (Orin, Thor).

    The tegra23x-oc-event driver registers hwmon "soctherm_oc" with world-readable
    ``oc<N>_event_cnt`` (cumulative since boot) and ``oc<N>_throt_en``; NVIDIA's Orin power guide
    calls oc1 under-voltage, oc2 average and oc3 instantaneous over-current.
    """
    out: dict[str, int] = {}
    for hw in _list_dir(root / "sys/class/hwmon"):
        if _read_str(hw / "name") != "soctherm_oc":
            continue
        for f in _list_dir(hw):
            m = re.match(r"^(oc\d+)_event_cnt$", f.name)
            if m:
                value = _read_int(f)
                if value is not None:
                    out[m.group(1)] = value
    return out


def _mode_allowed_freq(gpu: _Devfreq, gpu_cap: int | None) -> int | None:
    """The highest available GPU frequency the power mode allows, or None where it cannot be told.

    devfreq rounds a cap down to an available frequency, so this is the highest available frequency under the
    mode's GPU MAX_FREQ (-1 or huge: no cap).
    """
    if gpu.hi is None or not gpu.avail or gpu_cap is None:
        return None
    cap = gpu_cap if 0 < gpu_cap < _NO_CAP else max(gpu.avail)
    return max((f for f in gpu.avail if f <= cap), default=None)


def _mode_cap_reason(gpu: _Devfreq, allowed: int, mode: str) -> str | None:
    """A throttle reason when the GPU ceiling is below what the power mode allows, else None."""
    if gpu.hi is None or gpu.hi >= allowed:
        return None
    return f"GPU max_freq {mhz(gpu.hi)} MHz is below the {mhz(allowed)} MHz power mode {mode} allows"


def _throttling(root: Path, gpu: _Devfreq, gpu_cap: int | None, mode: str) -> tuple[bool | None, tuple[str, ...]]:
    """(throttled, reasons): cooling alerts, plus a GPU ceiling below the power mode's (see :class:`JetsonState`).

    A GPU ceiling below what the power mode allows means something else (thermal, a manual write) capped it.
    """
    reasons, seen = _read_cooling(root, gpu.node)
    allowed = _mode_allowed_freq(gpu, gpu_cap)
    if allowed is not None:
        seen = True
        reason = _mode_cap_reason(gpu, allowed, mode)
        reasons += [reason] if reason else []
    return (bool(reasons) if seen or reasons else None), tuple(reasons)


def sysroot() -> str:
    """Where the Jetson files are read from: ``/``, or ``$JETMEM_SYSROOT`` (recorded trees in tests)."""
    return os.environ.get("JETMEM_SYSROOT") or "/"


def gpu_clock_state(root: str | Path) -> ClockState | None:
    """The integrated GPU's clock record for one measurement, from devfreq (None: not a Jetson, or no clock).

    ``sm_mhz`` is the GPU devfreq ``cur_freq``, ``sm_max_mhz`` its ``max_freq`` (the ceiling now, under the power
    mode and any thermal cap), ``slowdowns`` the active throttle indicators (see :class:`JetsonState`) and
    ``counters`` the over-current event counters, so that events during sampling show as a slowdown; ``mem_mhz``
    the EMC (DRAM) clock, ``temperature_c`` the hottest GPU thermal zone, ``power_mode`` nvpmodel's mode name.
    """
    s = read_jetson_state(Path(root))
    if not s.is_jetson or s.gpu_cur_freq_hz is None:
        return None
    top = s.gpu_max_freq_hz or s.gpu_cur_freq_hz
    gpu_zones = [c for name, c in s.thermal.items() if "gpu" in name.lower()]
    return ClockState(
        round(s.gpu_cur_freq_hz / 1e6),
        round(top / 1e6),
        tuple(s.throttle_reasons),
        tuple(sorted(s.oc_event_counts.items())),
        mem_mhz=round(s.emc_freq_hz / 1e6) if s.emc_freq_hz else None,
        temperature_c=max(gpu_zones) if gpu_zones else None,
        power_mode=s.nvpmodel_name,
    )


# --------------------------------------------------------------------------- chip, model


def _parse_chip_id(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text, 10)
    except ValueError:
        return None


def _is_tegra_soc(soc: Path) -> bool:
    """A SoC bus device whose family is Tegra: "Tegra" (upstream) or "tegra186"-style (older L4T kernels).

    Other soc* entries (e.g. Arm SMCCC's jep106 ids) are not.
    """
    family = _read_str(soc / "family") if soc.name.startswith("soc") else None
    return bool(family and family.lower().startswith("tegra"))


def _chip_id_from_soc(root: Path) -> int | None:
    """The first readable chip id of a Tegra SoC bus device, or None."""
    for soc in filter(_is_tegra_soc, _list_dir(root / "sys/devices")):
        chip_id = _parse_chip_id(_read_str(soc / "soc_id"))
        if chip_id is not None:
            return chip_id
    return None


def _chip_name_from_dt(root: Path) -> str | None:
    """The chip name from the device tree's ``compatible`` list (``nvidia,tegra234``), or None."""
    for compat in _read_dt_strings(root / "proc/device-tree/compatible"):
        m = re.match(r"^nvidia,(tegra\d+)$", compat)
        if m:
            return m.group(1)
    return None


def _read_chip(root: Path) -> tuple[int | None, str | None]:
    """(chip id, chip name such as tegra234)."""
    chip_id = _parse_chip_id(_read_str(root / "sys/module/tegra_fuse/parameters/tegra_chip_id"))
    if chip_id is None:
        chip_id = _chip_id_from_soc(root)
    name = CHIP_NAMES.get(chip_id) if chip_id is not None else None
    return chip_id, name or _chip_name_from_dt(root)


def _read_model(root: Path) -> str | None:
    # NUL-terminated device-tree string; /proc/device-tree links to /sys/firmware/devicetree/base.
    return _read_str(root / "proc/device-tree/model") or _read_str(root / "sys/firmware/devicetree/base/model")


# --------------------------------------------------------------------------- public API


def read_jetson_state(root: Path | str = Path("/")) -> JetsonState:
    """Read the Jetson power state under ``root``; never raises.

    A machine counts as a Jetson when it has an L4T release or a Tegra chip id / compatible string;
    otherwise (a desktop) the result has ``is_jetson=False`` and nothing else set.
    """
    try:
        return _read_state(Path(root))
    except Exception:  # a reader of optional files must never fail the test session
        return JetsonState()


def for_device(state: JetsonState, integrated: bool | None) -> JetsonState:
    """``state`` where the selected device is the Jetson's own GPU (``INTEGRATED=1``), else an empty state.

    A Jetson's power mode, clocks and throttling describe its integrated GPU: a discrete GPU (on a Jetson's PCIe
    slot, or any desktop) and a device not probed yet (``None``) get nothing recorded or warned about.
    """
    return state if integrated is True else JetsonState()


def read_jetson_state_for(integrated: bool | None, root: Path | str = Path("/")) -> JetsonState:
    """:func:`read_jetson_state` for the selected device: read only where it is integrated (see :func:`for_device`)."""
    return read_jetson_state(root) if integrated is True else JetsonState()


def _read_state(root: Path) -> JetsonState:
    """The whole state under ``root`` (an empty one off a Jetson); :func:`read_jetson_state` catches what it raises."""
    l4t = _read_l4t_release(root)
    chip_id, chip = _read_chip(root)
    if l4t is None and chip is None:
        return JetsonState()
    mode_id, mode_name, default_id, gpu_cap = _read_nvpmodel(root)
    gpu = _read_devfreq(_find_gpu_devfreq(root))
    throttled, reasons = _throttling(root, gpu, gpu_cap, f"{mode_name or mode_id}")
    return JetsonState(
        is_jetson=True,
        model=_read_model(root),
        chip=chip,
        chip_id=chip_id,
        l4t_release=l4t,
        nvpmodel_id=mode_id,
        nvpmodel_name=mode_name,
        nvpmodel_default_id=default_id,
        nvpmodel_gpu_max_freq_hz=_real_cap(gpu_cap),
        gpu_devfreq_node=gpu.node,
        gpu_cur_freq_hz=gpu.cur,
        gpu_min_freq_hz=gpu.lo,
        gpu_max_freq_hz=gpu.hi,
        gpu_available_freqs_hz=gpu.avail,
        gpu_governor=gpu.governor,
        emc_freq_hz=_read_emc(root),
        clocks_locked=_clocks_locked(gpu.lo, gpu.hi, gpu.governor),
        thermal=_read_thermal(root),
        throttled=throttled,
        throttle_reasons=reasons,
        oc_event_counts=_read_oc_events(root),
    )
