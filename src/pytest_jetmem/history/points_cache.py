"""A copy of a store's points on this machine, so that a history read again reads only the sessions stored since
(a fleet's 10 million points take the server seconds to send; a session's points never change once stored).

Per store, one file under the history cache folder (:func:`~.detection_cache.cache_dir`, ``JETMEM_HISTORY_CACHE``;
``off``: none) holds the points of the sessions read so far, with each session's id and uid. A read takes from it
the sessions whose id still names the same uid and asks the store for the rest (a new session, one whose id was
reused), then writes the file anew (atomically) where it learnt something. It is only a cache: a file that cannot
be read or written costs time, never a result (one line on standard error says so). GPU-free and pytest-free.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pytest_jetmem.history.detection_cache import cache_dir
from pytest_jetmem.history.model import Points, SessionRow
from pytest_jetmem.history.store import Store

__all__ = ["FORMAT", "PointsCache", "open_points_cache"]

#: The file's own format; a file of another is read as empty.
FORMAT = 1
_COLUMNS = ("session_id", "series_id", "median", "mad")


class PointsCache:
    """The points of the stores read on this machine, one file each under ``folder`` (None: keeps nothing)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder

    def _file(self, store: Store) -> Path | None:
        if self.folder is None:
            return None
        where = str(store.location.path.resolve()) if store.location.path is not None else store.location.shown
        return self.folder / f"points-{hashlib.sha256(where.encode()).hexdigest()[:32]}.npz"

    def points(self, store: Store, rows: Sequence[SessionRow], branch: str | None) -> Points:
        """The points of the sessions ``rows`` (read from ``store`` on ``branch``; None: every branch), from the
        file where it has them, from the store for the rest; points of other sessions may come with them."""
        path = self._file(store)
        if path is None:
            return store.points(branch=branch)
        ids, uids, cached = self._load(path, store.version) or (np.zeros(0, dtype=np.int64), [], Points.joined([]))
        have = dict(zip(ids.tolist(), uids, strict=True))
        need = [row for row in rows if have.get(row.id) != row.uid]
        if not need:
            return cached
        if len(need) * 2 > len(rows):  # most of it anew: the branch at once
            fresh, read = store.points(branch=branch), np.array([row.id for row in rows], dtype=np.int64)
            read_uids = [row.uid for row in rows]
        else:
            read = np.array([row.id for row in need], dtype=np.int64)
            fresh, read_uids = store.points(session_ids=read.tolist()), [row.uid for row in need]
        kept = ~np.isin(ids, read)
        merged = Points.joined([cached.where(~np.isin(cached.session_id, read)), fresh])
        all_uids = [u for u, k in zip(uids, kept.tolist(), strict=True) if k] + read_uids
        self._save(path, store.version, np.concatenate([ids[kept], read]), all_uids, merged)
        return merged

    def _load(self, path: Path, schema: int) -> tuple[np.ndarray, list[str], Points] | None:
        """The file's sessions (ids, uids) and points; None where it is absent, of another format or schema, or
        cannot be read."""
        if not path.exists():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                if int(data["format"]) != FORMAT or int(data["schema"]) != schema:
                    return None
                ids, uids = data["ids"].astype(np.int64), data["uids"].tolist()
                points = Points(*(data[name] for name in _COLUMNS))
            if len(uids) != ids.size or len({c.size for c in (points.session_id, points.series_id, points.median,
                                                                points.mad)}) != 1:
                raise ValueError("columns of different lengths")
            return ids, uids, points
        except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:
            self._say(path, f"not read ({exc})")
            return None

    def _save(self, path: Path, schema: int, ids: np.ndarray, uids: Sequence[str], points: Points) -> None:
        """Write the file anew, atomically (a reader sees the old file or the new one)."""
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                np.savez(f, format=FORMAT, schema=schema, ids=ids, uids=np.array(uids, dtype=str),
                         **{name: getattr(points, name) for name in _COLUMNS})
            os.replace(tmp, path)
            tmp = None
        except (OSError, ValueError) as exc:
            self._say(path, f"not written ({exc})")
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)

    @staticmethod
    def _say(path: Path, what: str) -> None:
        print(f"pytest-jetmem: the points cache {path} {what}: reading the store", file=sys.stderr)


def open_points_cache() -> PointsCache:
    """The points cache of this machine (:func:`~.detection_cache.cache_dir`), or one that keeps nothing."""
    return PointsCache(cache_dir())
