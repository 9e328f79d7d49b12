"""A snapshot of what decides a Jetson's speed (see :mod:`pytest_jetmem.machine.jetson` for how it is read).

Units: frequencies in Hz (devfreq reports Hz), temperatures in degrees C.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

__all__ = ["JetsonState", "mhz"]


@dataclass(frozen=True)
class JetsonState:
    """A snapshot of the power state of a Jetson; every field is ``None`` where it was unreadable.

    ``clocks_locked`` is True when the GPU clock is pinned: ``min_freq == max_freq`` (what
    ``jetson_clocks`` does: it copies ``max_freq`` into ``min_freq``, so under a capped power mode
    it pins the mode's ceiling, not the chip's highest frequency) or the devfreq governor is
    ``performance`` (which always runs at ``max_freq``).
    ``throttled`` is True when an active throttle alert, a thermal cap on the GPU devfreq, or a GPU
    ``max_freq`` below what the power mode allows is seen; False when such indicators were read and
    none fired; None when none could be read. ``throttle_reasons`` names what fired.
    ``oc_event_counts`` are cumulative since boot: compare two snapshots (see :func:`timing_warnings`).
    """

    is_jetson: bool = False
    model: str | None = None
    chip: str | None = None
    chip_id: int | None = None
    l4t_release: str | None = None
    nvpmodel_id: int | None = None
    nvpmodel_name: str | None = None
    nvpmodel_default_id: int | None = None
    nvpmodel_gpu_max_freq_hz: int | None = None
    gpu_devfreq_node: str | None = None
    gpu_cur_freq_hz: int | None = None
    gpu_min_freq_hz: int | None = None
    gpu_max_freq_hz: int | None = None
    gpu_available_freqs_hz: tuple[int, ...] | None = None
    gpu_governor: str | None = None
    emc_freq_hz: int | None = None
    clocks_locked: bool | None = None
    thermal: dict[str, float] = field(default_factory=dict)
    throttled: bool | None = None
    throttle_reasons: tuple[str, ...] = ()
    oc_event_counts: dict[str, int] = field(default_factory=dict)

    @property
    def gpu_highest_freq_hz(self) -> int | None:
        """The chip's highest GPU frequency (the top of ``available_frequencies``)."""
        return max(self.gpu_available_freqs_hz) if self.gpu_available_freqs_hz else None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (tuples become lists)."""
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, tuple):
                out[key] = list(value)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JetsonState:
        """Rebuild a state from :meth:`to_dict` output; unknown keys are ignored."""
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        for key in ("gpu_available_freqs_hz", "throttle_reasons"):
            if kwargs.get(key) is not None:
                kwargs[key] = tuple(kwargs[key])
        return cls(**kwargs)


def mhz(hz: int) -> int:
    """``hz`` in whole MHz (rounded down), as the warnings print clocks."""
    return hz // 1_000_000
