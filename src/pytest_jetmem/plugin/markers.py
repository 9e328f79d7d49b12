"""The plugin's marker names, the memory modes they name, which items are jetmem's, and the one way a bad marker
becomes a collection error naming the test."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

from pytest_jetmem.correctness import concurrency

MEMMODE = "memmode"
RUNTIME = "memmode_runtime"
COHERENCE = "memmode_coherence"
CONCURRENCY = concurrency.MARKER
#: The fixtures that put a test on the GPU (or, without one, on the no-GPU check session).
GPU_FIXTURES = frozenset({"memmode", "jetmem", "jetmem_device"})
#: The parameter (the ``memmode`` fixture's) that carries a memmode item's memory mode.
MODE_PARAM = "memmode"

T = TypeVar("T")


def mode_names(*, default_only: bool = False) -> tuple[str, ...]:
    """The registered memory modes' names (``default_only``: the modes a bare ``memmode`` marker runs in), asked of
    the registry: :mod:`pytest_jetmem.cuda.modes` imports neither numpy nor the driver, so a run without jetmem
    tests still loads no more of the CUDA layer than that."""
    from pytest_jetmem.cuda import modes

    return modes.default_names() if default_only else modes.names()


def item_mode(item: pytest.Item) -> str | None:
    """The memory mode an item was parametrized with (None: not a memmode test)."""
    callspec = getattr(item, "callspec", None)
    return callspec.params.get(MODE_PARAM) if callspec is not None else None


def uses_jetmem(item: pytest.Item) -> bool:
    """Whether ``item`` is one of pytest-jetmem's: it takes a fixture of :data:`GPU_FIXTURES` or carries a marker."""
    if GPU_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    return any(item.get_closest_marker(name) is not None for name in (MEMMODE, RUNTIME, COHERENCE, CONCURRENCY))


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
