"""A sparkline: a series in 120 x 24 pixels of inline SVG, its change points and the sessions left out marked, for
the site's index, drawn with :mod:`pytest_jetmem.draw.svg`. GPU-free and pytest-free; knows nothing of stores.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pytest_jetmem.draw.svg import coord, frame
from pytest_jetmem.history.thinning import thin_indices

__all__ = ["sparkline"]


def sparkline(values: Sequence[float] | np.ndarray, marks: Sequence[int] = (), *, label: str, width: int = 120,
              height: int = 24, left_out: Sequence[int] = ()) -> str:
    """A small line of ``values`` (thinned to about two points a pixel) with a dot at each index in ``marks``
    (change points) and a hollow dot at each in ``left_out`` (sessions that do not count, off the line),
    ``role="img"`` with ``label`` as its accessible name and tooltip (:func:`~pytest_jetmem.draw.svg.frame`)."""
    head = frame(width, height, title=label, cls="spark")
    v = np.asarray(values, dtype=np.float64)
    if not v.size:
        return head + "</svg>"
    out_of = sorted({i for i in left_out if 0 <= i < v.size})
    counted = np.setdiff1d(np.arange(v.size), np.asarray(out_of, dtype=np.int64))
    if not counted.size:
        counted = np.arange(v.size)
    where = {int(i): k for k, i in enumerate(counted.tolist())} if marks else {}
    drawn = counted[thin_indices(v[counted], [where[m] for m in marks if m in where], limit=2 * width)]
    lo, hi = float(v.min()), float(v.max())
    span = (hi - lo) or abs(hi) or 1.0
    n = max(v.size - 1, 1)

    def xy(i: int) -> tuple[str, str]:
        return coord(1 + (width - 2) * i / n), coord(height - 2 - (height - 4) * (float(v[i]) - lo) / span)

    coords = " ".join(",".join(xy(i)) for i in drawn.tolist())
    dots = "".join(f'<circle class="spark-cp" cx="{xy(i)[0]}" cy="{xy(i)[1]}" r="2.2" '
                   'fill="#b2182b"/>' for i in marks if 0 <= i < v.size)
    hollow = "".join(f'<circle class="spark-left-out" cx="{xy(i)[0]}" cy="{xy(i)[1]}" '
                     'r="1.8" fill="#fff" stroke="#0072B2" stroke-width="0.8"/>' for i in out_of)
    return (head + f'<polyline class="mark" points="{coords}" fill="none" stroke="#0072B2" stroke-width="1.2"/>'
            + dots + hollow + "</svg>")
