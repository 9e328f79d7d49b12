"""The planted bugs of the self-tests: a host read path that skips its synchronisation in one mode.

:func:`plant` replaces :func:`pytest_jetmem.correctness.coherence.cpu_read` (every host read of the coherence
checks and the state machine goes through it) with one that reads the host view of ``mode``'s buffers at
once, without waiting for the stream: the bug a user's code has when it forgets ``jetmem.synchronize()``.
The marker and the state machine must catch it. :func:`conftest_source` plants it in a pytest child.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_jetmem.correctness import coherence

#: The planted bugs, and the mode whose host read path each one breaks.
PLANTED_BUGS: dict[str, str] = {
    "skip_sync_on_managed_read": "managed",
    "skip_sync_on_zero_copy_read": "zero_copy",
}


def unsynchronized_cpu_read(mode: str, correct: Any = coherence.cpu_read) -> Any:
    """A ``cpu_read`` that skips the wait for buffers of ``mode`` (and is ``correct`` for the others)."""

    def cpu_read(ws: Any, buf: Any, sl: slice = slice(None)) -> np.ndarray:
        if buf.mode == mode and buf.memory_mode.has_host_view:
            words: np.ndarray = np.array(coherence.host_words(ws, buf)[sl], copy=True)
            return words
        fallback: np.ndarray = correct(ws, buf, sl)
        return fallback

    return cpu_read


def plant(monkeypatch: pytest.MonkeyPatch, bug: str) -> None:
    """Plant ``bug`` (a key of :data:`PLANTED_BUGS`) for the rest of the test."""
    monkeypatch.setattr(coherence, "cpu_read", unsynchronized_cpu_read(PLANTED_BUGS[bug]))


def conftest_source(bug: str) -> str:
    """A conftest that plants ``bug`` in the pytest process that loads it (a ``runpytest_subprocess`` child)."""
    tests_dir = str(Path(__file__).resolve().parents[1])
    return (
        "import sys\n"
        f"sys.path.insert(0, {tests_dir!r})\n"
        "from fakes.planted import unsynchronized_cpu_read\n"
        "from pytest_jetmem.correctness import coherence\n"
        f"coherence.cpu_read = unsynchronized_cpu_read({PLANTED_BUGS[bug]!r})\n"
    )
