"""The two sides of a :class:`~pytest_jetmem.measure.duet.Duet` run as two threads, for the duet tests.

Two threads stand in for the two pytest processes of ``--jetmem-against``; the protocol is the same as over the
named pipes between them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_jetmem.measure.duet import BASE, CHANGE, Duet

Side = Callable[[Duet], Any]


def run_sides(channel: Path, base: Side, change: Side) -> dict[int, Any]:
    """Run ``base`` and ``change`` on their ends of ``channel`` at once; side -> what its body returned, or the
    exception it raised."""
    results: dict[int, Any] = {}

    def side(index: int, body: Side) -> None:
        duet = Duet(channel, index, timeout_s=5)
        try:
            results[index] = body(duet)
        except BaseException as exc:  # looked at by the caller
            results[index] = exc
        finally:
            duet.close()

    threads = [threading.Thread(target=side, args=(i, b)) for i, b in ((BASE, base), (CHANGE, change))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def run_pair(channel: Path, base: Side, change: Side) -> tuple[Any, Any]:
    """:func:`run_sides`, raising the first side's exception (base first); (base's result, change's result)."""
    results = run_sides(channel, base, change)
    for index in (BASE, CHANGE):
        if isinstance(results.get(index), BaseException):
            raise results[index]
    return results[BASE], results[CHANGE]
