"""A cache of change-point detections on this machine, so that a history read again finds each unchanged series'
change points without running the detector (minutes for a fleet's thousands of long series).

An entry is keyed by a SHA-256 of everything the detection reads: the detector's own source (any change to
:mod:`~pytest_jetmem.measure.changepoints` or the statistics under it starts afresh), the series' values, where its
commits and machine classes change, and the points left out. So a hit is the detection of the same input by the
same code, bit for bit, and a series with a new session is a miss. It lives in one SQLite file under
``$JETMEM_HISTORY_CACHE`` (unset or empty: ``$XDG_CACHE_HOME/pytest-jetmem/history``, else
``~/.cache/pytest-jetmem/history``, beside the kernel cache; ``off``: no cache); entries unused for
:data:`KEEP_DAYS` days are dropped. It is only a cache: a folder that cannot be written, a damaged file or a locked
one costs time, never a result (one line on standard error says so). GPU-free and pytest-free.

Hand-written, not diskcache: a runtime dependency (last released in 2023) for one table of the stdlib's ``sqlite3``,
and it pickles any value but a number, text or bytes, where this keeps JSON: a cache file never runs code when read.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from pytest_jetmem.measure import changepoints, stats
from pytest_jetmem.measure.changepoints import ChangePoint, Detection

__all__ = ["ENV_DIR", "KEEP_DAYS", "DetectionCache", "cache_dir", "detection_key", "open_cache"]

ENV_DIR = "JETMEM_HISTORY_CACHE"
#: Entries not used for this many days are dropped.
KEEP_DAYS = 30
_FILE = "changepoints.sqlite"


def _code_digest() -> bytes:
    """A digest of the detector's code: its module and the statistics it uses."""
    h = hashlib.sha256()
    for module in (changepoints, stats):
        h.update(Path(str(module.__file__)).read_bytes())
    return h.digest()


_CODE = _code_digest()


def _codes(labels: Sequence[object] | np.ndarray) -> np.ndarray:
    """Each label's run number: where ``labels`` changes from one point to the next is all the detector reads."""
    arr = np.asarray(labels)
    if not arr.size:
        return np.zeros(0, dtype=np.int64)
    return np.cumsum(np.concatenate(([True], arr[1:] != arr[:-1])), dtype=np.int64)


def detection_key(values: Sequence[float] | np.ndarray, groups: Sequence[object] | np.ndarray,
                  classes: Sequence[object] | np.ndarray, exclude: Sequence[bool] | np.ndarray | None) -> str:
    """The cache key of ``changepoints.analyse(values, groups=, classes=, exclude=)`` with its defaults."""
    h = hashlib.sha256(_CODE)
    h.update(np.asarray(values, dtype="<f8").tobytes())
    h.update(b"|")
    h.update(_codes(groups).astype("<i8").tobytes())
    h.update(b"|")
    h.update(_codes(classes).astype("<i8").tobytes())
    h.update(b"|")
    h.update(b"" if exclude is None else np.asarray(exclude, dtype=np.uint8).tobytes())
    return h.hexdigest()


def _dump(d: Detection) -> str:
    return json.dumps([[[c.index, c.before_ms, c.after_ms, c.ratio, list(c.ci), c.p_value, c.n_before, c.n_after,
                         c.before_index] for c in d.changes], list(d.outliers)])


def _load(text: str) -> Detection:
    changes, odd = json.loads(text)
    return Detection(tuple(ChangePoint(int(i), float(b), float(a), float(r), (float(lo), float(hi)), float(p),
                                       int(nb), int(na), int(bi))
                           for i, b, a, r, (lo, hi), p, nb, na, bi in changes), tuple(int(o) for o in odd))


class DetectionCache:
    """Detections by :func:`detection_key`, in one SQLite file (None: a cache that keeps nothing)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._conn = sqlite3.connect(path, timeout=5.0, isolation_level=None)
                self._conn.execute("CREATE TABLE IF NOT EXISTS detections (key TEXT PRIMARY KEY, "
                                   "result TEXT NOT NULL, used REAL NOT NULL)")
            except (OSError, sqlite3.Error) as exc:
                self._off(exc)  # closes a connection made

    def _off(self, exc: BaseException) -> None:
        print(f"pytest-jetmem: change-point cache {self.path} not used ({exc}): detecting afresh", file=sys.stderr)
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
        self._conn = None

    def get(self, keys: Sequence[str]) -> dict[str, Detection]:
        """The cached detections of ``keys`` (those it has)."""
        if self._conn is None or not keys:
            return {}
        found: dict[str, Detection] = {}
        try:
            for start in range(0, len(keys), 500):
                chunk = list(keys[start:start + 500])
                marks = ",".join("?" * len(chunk))
                rows = self._conn.execute(f"SELECT key, result FROM detections WHERE key IN ({marks})", chunk)
                for key, result in rows:
                    with contextlib.suppress(ValueError, TypeError):
                        found[key] = _load(result)
            now = time.time()
            stale = [(now, k, now - 86400.0) for k in found]
            if stale:  # marked used, at most once a day (one transaction)
                with self._conn:
                    self._conn.execute("BEGIN IMMEDIATE")
                    self._conn.executemany("UPDATE detections SET used = ? WHERE key = ? AND used < ?", stale)
        except sqlite3.Error as exc:
            self._off(exc)
        return found

    def put(self, items: Mapping[str, Detection]) -> None:
        """Keep ``items``; drop the entries unused for :data:`KEEP_DAYS` days."""
        if self._conn is None or not items:
            return
        now = time.time()
        try:
            with self._conn:
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.executemany("INSERT OR REPLACE INTO detections (key, result, used) VALUES (?, ?, ?)",
                                       [(k, _dump(d), now) for k, d in items.items()])
                self._conn.execute("DELETE FROM detections WHERE used < ?", (now - KEEP_DAYS * 86400.0,))
        except (sqlite3.Error, ValueError) as exc:
            self._off(exc)

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None


def cache_dir() -> Path | None:
    """Where the cache lives (:data:`ENV_DIR`, else the XDG cache folder); None where it is ``off``."""
    given = (os.environ.get(ENV_DIR) or "").strip()
    if given.lower() == "off":
        return None
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pytest-jetmem" / "history"


def open_cache() -> DetectionCache:
    """The cache of this machine (:func:`cache_dir`), or one that keeps nothing."""
    folder = cache_dir()
    return DetectionCache(folder / _FILE if folder is not None else None)

