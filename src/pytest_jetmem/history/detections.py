"""The change points of many series at once: :func:`~pytest_jetmem.measure.changepoints.analyse` on each, the
unchanged ones taken from the cache (:mod:`~.detection_cache`), the rest in parallel where there are many.

A fleet's history is thousands of series of thousands of commits (the detector: about 0.1 s for 5000 commits, so
minutes on one core): the series to detect are shared out among forked processes (:mod:`~.forked`). GPU-free and
pytest-free.
"""

from __future__ import annotations

import numpy as np

from pytest_jetmem.history.detection_cache import DetectionCache, detection_key
from pytest_jetmem.history.forked import forked_map, workers_for
from pytest_jetmem.history.timeline import History, Series, positive
from pytest_jetmem.measure.changepoints import Detection, analyse

__all__ = ["PARALLEL_POINTS", "detections"]

#: Series to detect holding at least this many points in all are shared out among processes, one per CPU.
PARALLEL_POINTS = 200_000

_Job = tuple[np.ndarray, np.ndarray, np.ndarray, "np.ndarray | None"]


def _job(one: Series, history: History) -> _Job:
    """What the detector is given of ``one``: its medians (0 ms stood in for), commits and machine classes (as
    numbers), left-out marks."""
    places = one.place_array
    return (positive(one.median_array), history.commit_numbers[places], history.class_numbers[places],
            one.left_array if one.left_array.size else None)


def _detect(job: _Job) -> Detection:
    values, groups, classes, exclude = job
    return analyse(values, groups=groups.tolist(), classes=classes.tolist(), exclude=exclude)


def detections(history: History, *, workers: int | None = None,
               cache: DetectionCache | None = None) -> list[Detection]:
    """:func:`~pytest_jetmem.measure.changepoints.analyse` of each of the history's series: those ``cache`` holds
    from it, the rest detected in ``workers`` processes (None: one per CPU where they hold :data:`PARALLEL_POINTS`
    points or more, else here) and kept in it."""
    jobs = [_job(one, history) for one in history.series]
    keys = [detection_key(*job) for job in jobs] if cache is not None else []
    known = cache.get(keys) if cache is not None else {}
    todo = [i for i in range(len(jobs)) if not keys or keys[i] not in known]
    if workers is None:
        workers = workers_for(sum(len(jobs[i][0]) for i in todo), PARALLEL_POINTS)
    fresh = dict(zip(todo, forked_map(_detect, [jobs[i] for i in todo], workers), strict=True))
    if cache is not None:
        cache.put({keys[i]: d for i, d in fresh.items()})
    return [fresh[i] if i in fresh else known[keys[i]] for i in range(len(jobs))]
