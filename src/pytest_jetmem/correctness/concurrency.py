"""The ``memmode_concurrency`` marker's arguments and verdict: how a test's child process ended, judged (GPU-free).

The parent runs the test in a child (:class:`pytest_jetmem.correctness.isolation.Spawned`, its end classified by
:func:`~pytest_jetmem.correctness.isolation.classify`) and decides with :func:`judge` whether that end is what
``expect`` asked for on this device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pytest_jetmem.correctness.isolation import ChildResult, Outcome, explain

__all__ = [
    "DEFAULT_EXPECT",
    "DEFAULT_TIMEOUT_S",
    "EXPECTS",
    "MARKER",
    "ChildVerdict",
    "ConcurrencySpec",
    "judge",
    "parse_marker",
]

MARKER = "memmode_concurrency"
EXPECTS = ("ok", "fault", "auto")
DEFAULT_EXPECT = "ok"
DEFAULT_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class ConcurrencySpec:
    """What a ``memmode_concurrency`` marker asks for."""

    expect: str = DEFAULT_EXPECT
    timeout_s: float = DEFAULT_TIMEOUT_S


def parse_marker(marker: Any, test_name: str) -> ConcurrencySpec:
    """Validate a ``memmode_concurrency`` marker (its ``args`` and ``kwargs``); a ValueError names the test."""
    where = f"{test_name}: @pytest.mark.{MARKER}"
    unknown = sorted(set(marker.kwargs) - {"expect", "timeout"})
    if unknown:
        raise ValueError(f"{where} got unknown argument(s) {', '.join(unknown)}; it takes expect= and timeout=")
    if len(marker.args) > 1:
        raise ValueError(f"{where} takes at most one positional argument (expect), got {len(marker.args)}")
    if marker.args and "expect" in marker.kwargs:
        raise ValueError(f"{where} got expect twice (positionally and as a keyword)")
    expect = marker.args[0] if marker.args else marker.kwargs.get("expect", DEFAULT_EXPECT)
    if not isinstance(expect, str) or expect not in EXPECTS:
        raise ValueError(f"{where}: expect must be one of {', '.join(map(repr, EXPECTS))}, got {expect!r}")
    timeout = marker.kwargs.get("timeout", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(f"{where}: timeout must be a positive number of seconds, got {timeout!r}")
    return ConcurrencySpec(expect, float(timeout))


# ----------------------------------------------------------------------------------------------------------
# The verdict (pure: the parent's decision from what the child did)


@dataclass(frozen=True)
class ChildVerdict:
    """``outcome`` is "passed", "failed" or "skipped"; ``message`` says why."""

    outcome: str
    message: str

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"


def _cma_text(cma: int | None) -> str:
    return "unknown" if cma is None else str(cma)


def judge(
    expect: str,
    result: ChildResult,
    concurrent_managed_access: int | None,
    *,
    tegra_strict: bool = False,
    strict_violation: str | None = None,
    rule_exempt: str | None = None,
) -> ChildVerdict:
    """Decide the item's outcome from the child's ``result``.

    ``concurrent_managed_access`` is the device attribute (None: unknown). ``strict_violation`` is the text
    of a :class:`~pytest_jetmem.errors.TegraStrictError` the child raised: with the child failed, it counts
    as an emulated fault. Under ``tegra_strict``, ``expect="auto"`` treats the device as one without
    concurrent managed access. ``rule_exempt``: why the managed-memory rule does not govern the item's memory
    (its mode is not managed memory, ``MemoryMode.is_managed``; the mode's ``host_rule``): ``expect="auto"``
    then wants the test to survive on every device.
    """
    if expect not in EXPECTS:
        raise ValueError(f"expect must be one of {EXPECTS}, got {expect!r}")
    cma = concurrent_managed_access
    head = f"{MARKER}(expect={expect!r})"
    outcome = result.outcome
    if outcome is Outcome.SKIPPED:
        return ChildVerdict("skipped", explain(result, cma))
    emulated = strict_violation is not None and outcome is Outcome.FAILED
    faulted = outcome is Outcome.FAULT or emulated

    if expect == "auto" and rule_exempt is not None:
        want_fault = False
        head = f"{head} (the managed-memory rule does not apply: {rule_exempt}; so the test must not fault)"
    elif expect == "auto":
        effective = 0 if tegra_strict else cma
        if effective is None:
            return ChildVerdict(
                "failed",
                f"{head}: cannot decide whether this device should fault: its CONCURRENT_MANAGED_ACCESS is "
                f"unknown (the child reported no device; it ended: {outcome}). " + explain(result, cma),
            )
        want_fault = effective == 0
        why = (
            "under --jetmem-tegra-strict Jetson's rule holds"
            if tegra_strict
            else f"CONCURRENT_MANAGED_ACCESS={effective} on this device"
        )
        head = f"{head} ({why}, so the test must {'fault' if want_fault else 'not fault'})"
    else:
        want_fault = expect == "fault"

    if want_fault:
        if faulted:
            how = f"Tegra-strict caught it: {strict_violation}" if emulated else explain(result, cma)
            return ChildVerdict("passed", f"{head}: faulted as expected; {how}")
        if outcome is Outcome.PASSED:
            return ChildVerdict(
                "failed",
                f"{head}: expected the child to be killed by SIGSEGV (the documented fault), but the test passed in it "
                f"(CONCURRENT_MANAGED_ACCESS={_cma_text(cma)}): the CPU access it makes while a kernel runs "
                "did not fault here",
            )
        return ChildVerdict(
            "failed", f"{head}: expected the documented fault (SIGSEGV), got {outcome}; " + explain(result, cma)
        )

    if outcome is Outcome.PASSED:
        return ChildVerdict("passed", f"{head}: the test passed in the child")
    if emulated:
        return ChildVerdict(
            "failed",
            f"{head}: the test would crash on Jetson: {strict_violation}",
        )
    return ChildVerdict("failed", f"{head}: the test must survive on this device; " + explain(result, cma))
