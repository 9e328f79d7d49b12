"""ChildResult values as isolation.run_in_child would return them, for tests of what is made of a child's end."""

from __future__ import annotations

import signal
from typing import Any

from pytest_jetmem.correctness.isolation import ChildResult, Outcome


def child_result(outcome: Outcome, **fields: Any) -> ChildResult:
    """A child's result with ``outcome``; a FAULT is a SIGSEGV unless ``returncode`` names another signal."""
    values: dict[str, Any] = dict(
        outcome=outcome,
        returncode=0,
        signal_name=None,
        message=None,
        cuda_error_name=None,
        duration_s=0.1,
        stdout="",
        stderr="",
        report=None,
    )
    if outcome is Outcome.FAULT:
        returncode = fields.get("returncode", -signal.SIGSEGV)
        name = signal.Signals(-returncode).name
        values.update(returncode=returncode, signal_name=name, message=f"the child was killed by {name}")
    values.update(fields)
    return ChildResult(**values)
