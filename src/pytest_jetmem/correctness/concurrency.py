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
    return ConcurrencySpec(_marker_expect(marker, where), _marker_timeout(marker, where))


def _marker_expect(marker: Any, where: str) -> str:
    """The marker's ``expect`` (positional or keyword, not both), one of :data:`EXPECTS`."""
    if len(marker.args) > 1:
        raise ValueError(f"{where} takes at most one positional argument (expect), got {len(marker.args)}")
    if marker.args and "expect" in marker.kwargs:
        raise ValueError(f"{where} got expect twice (positionally and as a keyword)")
    expect = marker.args[0] if marker.args else marker.kwargs.get("expect", DEFAULT_EXPECT)
    if not isinstance(expect, str) or expect not in EXPECTS:
        raise ValueError(f"{where}: expect must be one of {', '.join(map(repr, EXPECTS))}, got {expect!r}")
    return expect


def _marker_timeout(marker: Any, where: str) -> float:
    """The marker's ``timeout``: a positive, finite number of seconds (not a bool)."""
    timeout = marker.kwargs.get("timeout", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
        raise ValueError(f"{where}: timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


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
    if result.outcome is Outcome.SKIPPED:
        return ChildVerdict("skipped", explain(result, cma))
    wanted = _wanted(expect, result, cma, tegra_strict=tegra_strict, rule_exempt=rule_exempt)
    if isinstance(wanted, ChildVerdict):
        return wanted
    want_fault, head = wanted
    emulated = strict_violation if result.outcome is Outcome.FAILED else None
    if want_fault:
        return _judge_fault(head, result, cma, emulated)
    return _judge_survival(head, result, cma, emulated)


def _wanted(
    expect: str, result: ChildResult, cma: int | None, *, tegra_strict: bool, rule_exempt: str | None
) -> tuple[bool, str] | ChildVerdict:
    """(whether the child must fault, the verdict's head saying why), or a failed verdict where "auto" cannot tell."""
    head = f"{MARKER}(expect={expect!r})"
    if expect != "auto":
        return expect == "fault", head
    if rule_exempt is not None:
        return False, f"{head} (the managed-memory rule does not apply: {rule_exempt}; so the test must not fault)"
    effective = 0 if tegra_strict else cma
    if effective is None:
        return ChildVerdict(
            "failed",
            f"{head}: cannot decide whether this device should fault: its CONCURRENT_MANAGED_ACCESS is "
            f"unknown (the child reported no device; it ended: {result.outcome}). " + explain(result, cma),
        )
    want_fault = effective == 0
    why = (
        "under --jetmem-tegra-strict Jetson's rule holds"
        if tegra_strict
        else f"CONCURRENT_MANAGED_ACCESS={effective} on this device"
    )
    return want_fault, f"{head} ({why}, so the test must {'fault' if want_fault else 'not fault'})"


def _judge_fault(head: str, result: ChildResult, cma: int | None, emulated: str | None) -> ChildVerdict:
    """The child had to fault (``emulated``: the Tegra-strict violation of a failed child, a fault on Jetson)."""
    if emulated is not None:
        return ChildVerdict("passed", f"{head}: faulted as expected; Tegra-strict caught it: {emulated}")
    if result.outcome is Outcome.FAULT:
        return ChildVerdict("passed", f"{head}: faulted as expected; {explain(result, cma)}")
    if result.outcome is Outcome.PASSED:
        return ChildVerdict(
            "failed",
            f"{head}: expected the child to be killed by SIGSEGV (the documented fault), but the test passed in it "
            f"(CONCURRENT_MANAGED_ACCESS={_cma_text(cma)}): the CPU access it makes while a kernel runs "
            "did not fault here",
        )
    return ChildVerdict(
        "failed", f"{head}: expected the documented fault (SIGSEGV), got {result.outcome}; " + explain(result, cma)
    )


def _judge_survival(head: str, result: ChildResult, cma: int | None, emulated: str | None) -> ChildVerdict:
    """The child had to survive (``emulated``: as in :func:`_judge_fault`)."""
    if result.outcome is Outcome.PASSED:
        return ChildVerdict("passed", f"{head}: the test passed in the child")
    if emulated is not None:
        return ChildVerdict("failed", f"{head}: the test would crash on Jetson: {emulated}")
    return ChildVerdict("failed", f"{head}: the test must survive on this device; " + explain(result, cma))
