"""Which points of a long line a chart draws: the first, last, lowest and highest of each bucket, and the points
asked for (:func:`thin_indices`), on arrays, so that a series of thousands of sessions is drawn from about a
thousand points without a Python object per point. numpy only.

Hand-written, not tsdownsample (its ``M4Downsampler``, the same rule): a compiled dependency for these few lines of
numpy, and it has no points to keep (``keep``: where the change points start).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["MAX_POINTS", "thin_indices"]

#: The most points a line keeps (about one per pixel of a chart's plot); longer lines are thinned.
MAX_POINTS = 1000


def thin_indices(values: Sequence[float] | np.ndarray, keep: Iterable[int] = (), limit: int = MAX_POINTS
                 ) -> np.ndarray:
    """The indices of ``values`` that a chart draws, ascending: all where there are at most ``limit``; else the
    first, last, lowest and highest of each of ``limit // 4`` buckets, and every index in ``keep`` (the steps and
    extremes stay where they are). On arrays: no Python object per point."""
    v = np.asarray(values, dtype=np.float64)
    n = int(v.size)
    if n <= limit:
        return np.arange(n, dtype=np.int64)
    buckets = max(limit // 4, 1)
    size = n / buckets
    chosen = {i for i in keep if 0 <= i < n}
    for b in range(buckets):
        lo, hi = int(b * size), min(int((b + 1) * size), n)
        if lo < hi:
            seg = v[lo:hi]
            chosen.update((lo, hi - 1, lo + int(seg.argmin()), lo + int(seg.argmax())))
    return np.array(sorted(chosen), dtype=np.int64)
