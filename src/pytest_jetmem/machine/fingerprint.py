"""The machine a measurement was taken on, and the fields whose change makes timings incomparable.

A baseline records a :class:`Machine`; comparing with one from another fingerprint is never silent.
:func:`machine_of` builds one from the device facts and the Jetson state; the Jetson state is recorded only for
the Jetson's own GPU (``INTEGRATED=1``). A Jetson fact that could not be read (in a container without the
bind mounts, say) is recorded as unknown, never guessed, and a comparison names it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, cast

from pytest_jetmem.cuda.device import DeviceInfo
from pytest_jetmem.machine.jetson import JetsonState, for_device
from pytest_jetmem.validate import expect, is_int

__all__ = ["CAUSE_FIELDS", "FINGERPRINT_FIELDS", "JETSON_SOURCES", "Machine", "machine_of"]

#: Machine fields whose change makes timings incomparable.
FINGERPRINT_FIELDS = (
    "device_name",
    "compute_capability",
    "driver_version",
    "l4t_release",
    "nvpmodel_mode",
    "clocks_locked",
)

#: The fields a results store names as the cause of a step between two sessions of one device: the fingerprint's
#: software and power fields, and the CUDA bindings and NVRTC (recorded, not part of the machine class).
CAUSE_FIELDS = (
    "driver_version",
    "l4t_release",
    "nvpmodel_mode",
    "clocks_locked",
    "cuda_bindings_version",
    "nvrtc_version",
)

#: Where each Jetson fingerprint field is read from (relative to ``/``): what a container must bind-mount.
JETSON_SOURCES: dict[str, str] = {
    "l4t_release": "/etc/nv_tegra_release",
    "nvpmodel_mode": "/var/lib/nvpmodel/status and /etc/nvpmodel.conf",
    "clocks_locked": "the GPU's devfreq node under /sys/class/devfreq",
}


# Field checks for Machine: each takes the field's label and value, raises ValueError naming both where the value
# does not fit, and returns the value as stored.


def _unknown_sources(what: str, value: Any) -> tuple[str, ...]:
    """A list of JETSON_SOURCES names, stored as a tuple."""
    ok = isinstance(value, (list, tuple)) and all(v in JETSON_SOURCES for v in value)
    expect(ok, what, value, f"a list of {', '.join(JETSON_SOURCES)}")
    return tuple(value)


def _non_empty_str(what: str, value: Any) -> str:
    """A non-empty str."""
    expect(isinstance(value, str) and value != "", what, value, "a non-empty str")
    return cast(str, value)


def _int(what: str, value: Any) -> int:
    """An int (an integral number is stored as int)."""
    expect(is_int(value), what, value, "an int")
    return int(value)


def _int_or_none(what: str, value: Any) -> int | None:
    """An int or None."""
    expect(value is None or is_int(value), what, value, "an int or None")
    return None if value is None else int(value)


def _bool_or_none(what: str, value: Any) -> bool | None:
    """A bool or None."""
    expect(value is None or isinstance(value, bool), what, value, "bool or None")
    return cast("bool | None", value)


def _str_or_none(what: str, value: Any) -> str | None:
    """A str or None."""
    expect(value is None or isinstance(value, str), what, value, "a str or None")
    return cast("str | None", value)


_FIELD_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "unknown": _unknown_sources,
    "device_name": _non_empty_str,
    "compute_capability": _non_empty_str,
    "driver_version": _int,
    "clocks_locked": _bool_or_none,
}


def _field_check(name: str) -> Callable[[str, Any], Any]:
    """The check of the Machine field ``name``: frequencies (``*_hz``) are ints or None, the rest strs or None."""
    return _FIELD_CHECKS.get(name) or (_int_or_none if name.endswith("_hz") else _str_or_none)


@dataclass(frozen=True)
class Machine:
    """The machine a baseline was measured on. ``None`` means not known or not applicable (no Jetson)."""

    device_name: str
    compute_capability: str  # "9.0"
    driver_version: int  # cuDriverGetVersion, e.g. 13000
    cuda_bindings_version: str | None = None
    nvrtc_version: str | None = None
    l4t_release: str | None = None  # "36.4.3" on Jetson
    nvpmodel_mode: str | None = None  # power mode name or id on Jetson
    gpu_cur_freq_hz: int | None = None
    gpu_max_freq_hz: int | None = None
    emc_freq_hz: int | None = None
    clocks_locked: bool | None = None
    #: Jetson fingerprint fields that could not be read on this Jetson (None there means unknown, not "no Jetson").
    unknown: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, _field_check(f.name)(f"machine.{f.name}", getattr(self, f.name)))

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field (JSON-ready)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["unknown"] = list(self.unknown)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Machine:
        """Inverse of :meth:`to_dict`; missing optional fields are None, unknown keys are ignored."""
        if not isinstance(data, Mapping):
            raise ValueError(f"machine: expected an object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        for required in ("device_name", "compute_capability", "driver_version"):
            if required not in data:
                raise ValueError(f"machine: missing {required!r}")
        return cls(**{k: v for k, v in data.items() if k in known})

    def fingerprint(self) -> dict[str, Any]:
        """The fields whose change makes timings incomparable (FINGERPRINT_FIELDS)."""
        return {name: getattr(self, name) for name in FINGERPRINT_FIELDS}

    @property
    def device(self) -> str:
        """The hardware: ``"NVIDIA H100 80GB HBM3 (sm_90)"``; a results store's series are per device, across
        driver, JetPack and power-mode changes, so that the step such a change causes is seen."""
        return f"{self.device_name} (sm_{self.compute_capability.replace('.', '')})"

    @functools.cached_property
    def machine_class(self) -> str:
        """The machine class: 12 hex digits of a hash of :meth:`fingerprint` (equal classes: comparable timings).
        A driver, JetPack, power-mode or clock-locking change starts a new class by itself. Made once per value
        (a history asks it of every session of every series)."""
        text = json.dumps(self.fingerprint(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def changed_fields(self, other: Machine) -> list[str]:
        """The :data:`CAUSE_FIELDS` whose values differ between this machine and ``other`` (a step's cause)."""
        return [name for name in CAUSE_FIELDS if getattr(self, name) != getattr(other, name)]

    def changes(self, other: Machine) -> list[str]:
        """:meth:`changed_fields` with their values, this machine's first: ``["driver_version 12060 -> 12080"]``."""
        return [f"{f} {getattr(self, f)!r} -> {getattr(other, f)!r}" for f in self.changed_fields(other)]

    def mismatches(self, other: Machine) -> list[str]:
        """Human-readable fingerprint differences, this machine's value first.

        ``["device_name: 'Orin' != 'NVIDIA H100 80GB HBM3'"]``; a value that could not be read is named as such
        (``"nvpmodel_mode: 'MAXN' != unknown (not readable on the other machine: /var/lib/nvpmodel/status and
        /etc/nvpmodel.conf)"``). Empty when the timings are comparable.
        """
        mine, theirs = self.fingerprint(), other.fingerprint()
        return [
            f"{k}: {self._shown(k, 'this machine')} != {other._shown(k, 'the other machine')}"
            for k in FINGERPRINT_FIELDS
            if mine[k] != theirs[k]
        ]

    def _shown(self, name: str, where: str) -> str:
        value = getattr(self, name)
        if value is None and name in self.unknown:
            return f"unknown (not readable on {where}: {JETSON_SOURCES[name]})"
        if value is None and name in JETSON_SOURCES:
            return "None (no Jetson)"
        return repr(value)


def machine_of(info: DeviceInfo, jetson: JetsonState | None = None) -> Machine:
    """The machine record of an open device and, where it is a Jetson's integrated GPU, its power state.

    The Jetson state is recorded only for a device with ``INTEGRATED=1``; on a Jetson, the fingerprint's Jetson
    fields that could not be read are listed in :attr:`Machine.unknown`.
    """
    js = for_device(jetson or JetsonState(), info.integrated)
    nvrtc = ".".join(map(str, info.nvrtc_version)) if info.nvrtc_version else None
    mode = js.nvpmodel_name or (str(js.nvpmodel_id) if js.nvpmodel_id is not None else None)
    values = {"l4t_release": js.l4t_release, "nvpmodel_mode": mode, "clocks_locked": js.clocks_locked}
    unknown = tuple(k for k, v in values.items() if v is None) if js.is_jetson else ()
    return Machine(
        device_name=info.name,
        compute_capability=".".join(map(str, info.compute_capability)),
        driver_version=info.driver_version,
        cuda_bindings_version=info.bindings_version or None,
        nvrtc_version=nvrtc,
        l4t_release=js.l4t_release,
        nvpmodel_mode=mode,
        gpu_cur_freq_hz=js.gpu_cur_freq_hz,
        gpu_max_freq_hz=js.gpu_max_freq_hz,
        emc_freq_hz=js.emc_freq_hz,
        clocks_locked=js.clocks_locked,
        unknown=unknown,
    )
