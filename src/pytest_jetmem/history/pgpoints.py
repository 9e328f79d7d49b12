"""The points of a PostgreSQL store read as columns: how :meth:`~pytest_jetmem.history.store.Store.points` reads a
fleet's millions of points without a Python object per value. The server packs each series' points into one
``bytea`` (``int8send``/``float8send``: big-endian, https://www.postgresql.org/docs/current/functions-binarystring.html),
so a fleet's 10 million points arrive as a few hundred values that numpy reads at once (psycopg reads rows, and a
binary COPY's rows, one by one as Python objects: 2.5x slower on the fleet of docs/history.md). numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pytest_jetmem.history.model import Points

__all__ = ["PACKED", "POINT", "points_of_packed"]

#: What the server sends per series: its id and its points packed (session id, median, MAD), in no order.
PACKED = ("SELECT series_id, string_agg(int8send(session_id) || float8send(median) || float8send(mad), ''::bytea) "
          "FROM jetmem_measurements{where} GROUP BY series_id")
#: One packed point.
POINT = np.dtype([("session_id", ">i8"), ("median", ">f8"), ("mad", ">f8")])


def points_of_packed(rows: Sequence[tuple[int, bytes]]) -> Points:
    """The :class:`Points` of rows of (series id, packed points); ValueError where a value is not whole points."""
    parts = []
    for series_id, packed in rows:
        if len(packed) % POINT.itemsize:
            raise ValueError(f"series {series_id}: {len(packed)} bytes of packed points, not a multiple of "
                             f"{POINT.itemsize}")
        parts.append((int(series_id), np.frombuffer(packed, dtype=POINT)))
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return Points(empty, empty.copy(), np.zeros(0), np.zeros(0))
    return Points(np.concatenate([p["session_id"] for _, p in parts]).astype(np.int64),
                  np.concatenate([np.full(p.size, sid, dtype=np.int64) for sid, p in parts]),
                  np.concatenate([p["median"] for _, p in parts]).astype(np.float64),
                  np.concatenate([p["mad"] for _, p in parts]).astype(np.float64))
