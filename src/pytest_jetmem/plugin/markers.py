"""The plugin's marker names and the one way a bad marker becomes a collection error naming the test."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

from pytest_jetmem.correctness import concurrency

MEMMODE = "memmode"
RUNTIME = "memmode_runtime"
COHERENCE = "memmode_coherence"
CONCURRENCY = concurrency.MARKER

T = TypeVar("T")


def validated(node: pytest.Item | pytest.Function, name: str, parse: Callable[[pytest.Mark, str], T]) -> T | None:
    """``parse(marker, nodeid)`` of the closest marker ``name`` (None where there is none).

    ``parse`` raises ValueError with a message that names the test and the bad argument; it fails the
    collection of ``node`` with that message and no traceback.
    """
    marker = node.get_closest_marker(name)
    if marker is None:
        return None
    error = None
    try:
        return parse(marker, node.nodeid)
    except ValueError as exc:
        error = str(exc)  # raised outside the except block: one message, no "during handling of" chain
    pytest.fail(error, pytrace=False)
