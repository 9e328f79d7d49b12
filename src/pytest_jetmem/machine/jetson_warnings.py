"""What a Jetson's power state means for a timing: plain warnings from one or two snapshots.

:func:`timing_warnings` runs small checks in order: each looks at one :class:`JetsonState` (or at the pair taken
before and after a timing) and gives one sentence that says what was seen and what to do, or nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from pytest_jetmem.machine.jetson_state import JetsonState, mhz

__all__ = ["timing_warnings"]


def _mode(state: JetsonState) -> str:
    """The power mode as warnings name it: ``30W (mode 2)``, ``mode 2`` or ``unknown``."""
    if state.nvpmodel_name and state.nvpmodel_id is not None:
        return f"{state.nvpmodel_name} (mode {state.nvpmodel_id})"
    if state.nvpmodel_id is not None:
        return f"mode {state.nvpmodel_id}"
    return "unknown"


_LOCK_HINT = "lock clocks with `sudo jetson_clocks` for stable figures"

_NO_DEVFREQ = "the GPU clock (devfreq) could not be read: timings cannot be checked for clock changes"


def _clock_below_max(s: JetsonState) -> str | None:
    """The GPU ran below its current ceiling while timing."""
    cur, ceiling = s.gpu_cur_freq_hz, s.gpu_max_freq_hz
    if cur is None or ceiling is None or cur >= ceiling:
        return None
    return f"GPU clock was {mhz(cur)} MHz, below its maximum {mhz(ceiling)} MHz, during timing: {_LOCK_HINT}"


def _clocks_not_locked(s: JetsonState) -> str | None:
    """The GPU clock was free to move."""
    if s.clocks_locked is not False:
        return None
    return f"clocks are not locked (governor {s.gpu_governor or 'unknown'}): {_LOCK_HINT}"


def _mode_caps_gpu(s: JetsonState) -> str | None:
    """The power mode caps the GPU below the chip's highest frequency."""
    cap, highest = s.nvpmodel_gpu_max_freq_hz, s.gpu_highest_freq_hz
    if cap is None or highest is None or cap >= highest:
        return None
    return (
        f"power mode {_mode(s)} caps the GPU at {mhz(cap)} MHz "
        f"(the chip's highest is {mhz(highest)} MHz): figures hold for this mode only; "
        "`sudo nvpmodel -m <id>` selects another"
    )


def _throttling_active(s: JetsonState) -> str | None:
    """A throttle indicator fired."""
    if not s.throttled:
        return None
    return (
        f"throttling was active during timing ({', '.join(s.throttle_reasons)}): "
        "figures are slower than the clocks suggest; let the board cool or improve cooling"
    )


_STATE_CHECKS: tuple[Callable[[JetsonState], str | None], ...] = (
    _clock_below_max,
    _clocks_not_locked,
    _mode_caps_gpu,
    _throttling_active,
)


def _state_warnings(s: JetsonState) -> list[str]:
    """The warnings one snapshot gives; without a devfreq node only that it is missing."""
    if s.gpu_devfreq_node is None:
        return [_NO_DEVFREQ]
    return [msg for check in _STATE_CHECKS if (msg := check(s)) is not None]


def _both(b: int | None, a: int | None) -> tuple[int, int] | None:
    """``(b, a)`` where both were read, else None."""
    return (b, a) if b is not None and a is not None else None


def _mode_changed(before: JetsonState, after: JetsonState) -> str | None:
    """The power mode changed between the snapshots."""
    if before.nvpmodel_id == after.nvpmodel_id:
        return None
    return f"power mode changed during timing: {_mode(before)} -> {_mode(after)}"


def _clock_changed(before: JetsonState, after: JetsonState) -> str | None:
    """The GPU clock moved between the snapshots."""
    pair = _both(before.gpu_cur_freq_hz, after.gpu_cur_freq_hz)
    if pair is None or pair[0] == pair[1]:
        return None
    return f"GPU clock changed during timing: {mhz(pair[0])} MHz -> {mhz(pair[1])} MHz"


def _max_dropped(before: JetsonState, after: JetsonState) -> str | None:
    """The GPU ceiling fell between the snapshots."""
    pair = _both(before.gpu_max_freq_hz, after.gpu_max_freq_hz)
    if pair is None or pair[1] >= pair[0]:
        return None
    return f"GPU maximum clock dropped during timing: {mhz(pair[0])} MHz -> {mhz(pair[1])} MHz (throttling?)"


def _clocks_unlocked(before: JetsonState, after: JetsonState) -> str | None:
    """Locked clocks were released between the snapshots."""
    if before.clocks_locked is True and after.clocks_locked is False:
        return "GPU clocks were unlocked during timing"
    return None


def _emc_changed(before: JetsonState, after: JetsonState) -> str | None:
    """The EMC (memory) clock moved between the snapshots."""
    pair = _both(before.emc_freq_hz, after.emc_freq_hz)
    if pair is None or pair[0] == pair[1]:
        return None
    return f"EMC (memory) clock changed during timing: {mhz(pair[0])} MHz -> {mhz(pair[1])} MHz"


def _oc_events(before: JetsonState, after: JetsonState) -> str | None:
    """Over-current counters that rose between the snapshots."""
    now = after.oc_event_counts
    deltas = {k: now[k] - v for k, v in before.oc_event_counts.items() if k in now and now[k] > v}
    if not deltas:
        return None
    counts = ", ".join(f"{k} +{d}" for k, d in sorted(deltas.items()))
    return (
        f"over-current throttling events during timing ({counts}): the power supply or the "
        "power mode's budget slowed the SoC"
    )


_PAIR_CHECKS: tuple[Callable[[JetsonState, JetsonState], str | None], ...] = (
    _mode_changed,
    _clock_changed,
    _max_dropped,
    _clocks_unlocked,
    _emc_changed,
    _oc_events,
)


def _pair_warnings(before: JetsonState, after: JetsonState | None) -> list[str]:
    """What changed between two Jetson snapshots (nothing where either is missing or not a Jetson)."""
    if after is None or not (before.is_jetson and after.is_jetson):
        return []
    return [msg for check in _PAIR_CHECKS if (msg := check(before, after)) is not None]


def timing_warnings(before: JetsonState, after: JetsonState | None = None) -> list[str]:
    """Warnings about a timing taken between ``before`` and ``after`` (each may be the only one).

    Empty when neither snapshot is of a Jetson. Each warning is one sentence that says what was
    seen and what to do; a warning both snapshots give is listed once.
    """
    states = [s for s in (before, after) if s is not None and s.is_jetson]
    found = [msg for s in states for msg in _state_warnings(s)] + _pair_warnings(before, after)
    return list(dict.fromkeys(found))
