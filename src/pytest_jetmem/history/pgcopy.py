"""PostgreSQL's binary COPY format, read as columns: how :meth:`~pytest_jetmem.history.store.Store.points` reads a
fleet's millions of points without a Python object per value (psycopg reads COPY's binary rows one by one, as
Python objects; the format: https://www.postgresql.org/docs/current/sql-copy.html). numpy only.
"""

from __future__ import annotations

import numpy as np

from pytest_jetmem.history.model import Points

__all__ = ["COPY_ROW", "SIGNATURE", "points_of_copy"]


#: A row of the points' binary COPY: the field count, then each field's length and its big-endian value.
COPY_ROW = np.dtype([("fields", ">i2"), ("l0", ">i4"), ("session_id", ">i8"), ("l1", ">i4"), ("series_id", ">i8"),
                      ("l2", ">i4"), ("median", ">f8"), ("l3", ">i4"), ("mad", ">f8")])
SIGNATURE = b"PGCOPY\n\xff\r\n\x00"


def points_of_copy(data: bytes) -> Points:
    """The :class:`Points` of a binary COPY of (session_id, series_id, median, mad); ValueError where ``data`` is
    not that (a signature, flags and header extension, the rows, the trailer -1)."""
    if not data.startswith(SIGNATURE) or len(data) < 21:
        raise ValueError("not PostgreSQL's binary COPY format")
    start = 19 + int.from_bytes(data[15:19], "big")
    body = data[start:-2]
    if data[-2:] != b"\xff\xff" or len(body) % COPY_ROW.itemsize:
        raise ValueError("binary COPY: rows of an unexpected size")
    rows = np.frombuffer(body, dtype=COPY_ROW)
    if rows.size and (np.any(rows["fields"] != 4) or any(np.any(rows[f"l{i}"] != 8) for i in range(4))):
        raise ValueError("binary COPY: rows of an unexpected shape")
    return Points(*(rows[name].astype(np.int64 if name.endswith("_id") else np.float64)
                    for name in ("session_id", "series_id", "median", "mad")))
