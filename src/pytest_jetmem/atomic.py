"""Atomic file writes: baselines, the kernel cache, reports, benchmark JSON and child results.

A reader sees the old file or the new one, never a part: the data goes to a temporary sibling, is flushed
and fsynced, made readable (0644, not mkstemp's 0600) and renamed over the target with ``os.replace``.
On any failure the temporary file is removed and the error propagates.

Hand-written, not atomicwrites: that library is archived (last release 1.4.1, 2022), and its ``NamedTemporaryFile``
leaves the file at mode 0600; these few lines of the stdlib are its whole job.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: str | os.PathLike[str], data: bytes | str, *, sync_dir: bool = False) -> None:
    """Replace ``path`` with ``data`` (str is written as UTF-8); ``sync_dir`` also fsyncs the folder."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode("utf-8") if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync_dir:
        _fsync_dir(target.parent)


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable (best effort: some filesystems cannot fsync a folder)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
