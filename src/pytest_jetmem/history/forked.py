"""A function mapped over many jobs in forked processes: how the history's CPU-bound work (change points, the
fleet matrix's advice) uses every core of the machine that reads a fleet.

The jobs stay where the parent left them (a fork shares its memory); a child is handed only an index and sends back
only its result (pickled). Where there is one worker, or no ``fork`` (Windows, macOS's default spawn is not used), it
runs here. GPU-free and pytest-free; nothing here touches a store (a connection must not cross a fork).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

__all__ = ["forked_map", "workers_for"]

J = TypeVar("J")
R = TypeVar("R")

_WORK: tuple[Callable[[Any], Any], Sequence[Any]] | None = None  # set while the children run


def _one(i: int) -> Any:
    assert _WORK is not None
    fn, jobs = _WORK
    return fn(jobs[i])


def workers_for(amount: int, at_least: int) -> int:
    """How many processes :func:`forked_map` is given for ``amount`` of work: one per CPU from ``at_least`` on,
    else 1 (here: a small history is not worth a fork)."""
    return (os.cpu_count() or 1) if amount >= at_least else 1


def forked_map(fn: Callable[[J], R], jobs: Sequence[J], workers: int,
               done: Callable[[int, R], None] | None = None) -> list[R]:
    """``[fn(job) for job in jobs]``, computed in ``workers`` forked processes (here where that is 1 or fork is
    missing); ``fn`` a module-level function, its results picklable. ``done(k)`` is called here as the first ``k``
    results are in, with the ``k``-th (in order)."""
    global _WORK
    workers = min(workers, len(jobs))
    out: list[R] = []
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        results: Iterator[R] = (fn(job) for job in jobs)
        pool = None
    else:
        _WORK = (fn, jobs)
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
        results = pool.map(_one, range(len(jobs)), chunksize=max(1, len(jobs) // (8 * workers)))
    try:
        for result in results:
            out.append(result)
            if done is not None:
                done(len(out), result)
    finally:
        _WORK = None
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    return out
