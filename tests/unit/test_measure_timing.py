"""measure.timing: the per-GPU lock that keeps processes from timing on one GPU at the same time."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_jetmem.measure.timing import gpu_lock

# -- the GPU lock -------------------------------------------------------------------------------------------------
LOCK_CHILD = """
import os, sys, time
from pathlib import Path
from pytest_jetmem.measure.timing import gpu_lock

log, go, name = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
while not go.exists():
    time.sleep(0.001)
for i in range(5):
    with gpu_lock(7):
        with open(log, "a") as fh:
            fh.write(f"enter {name}\\n")
        time.sleep(0.01)  # hold it a while: the other process is trying to get in now
        with open(log, "a") as fh:
            fh.write(f"exit {name}\\n")
"""


def test_gpu_lock_serialises_processes(tmp_path: Path) -> None:
    log, go = tmp_path / "log.txt", tmp_path / "go"
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # gpu_lock's file lands here, not in the shared /tmp
    children = [subprocess.Popen([sys.executable, "-c", LOCK_CHILD, str(log), str(go), name], env=env) for name in "AB"]
    go.touch()
    for child in children:
        assert child.wait(timeout=120) == 0
    events = log.read_text().split("\n")[:-1]
    assert len(events) == 20
    assert sorted(events) == sorted([f"{e} {n}" for n in "AB" for e in ("enter", "exit")] * 5)
    # every enter is followed by the same process's exit before anyone else enters: no overlap
    for enter, exit_ in zip(events[::2], events[1::2], strict=True):
        assert enter.startswith("enter ") and exit_ == "exit " + enter.split()[1], events
    assert (tmp_path / "pytest-jetmem-gpu7.lock").exists()


def test_gpu_lock_without_an_ordinal_locks_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with gpu_lock(None), gpu_lock(None):  # would deadlock if it took a lock
        pass
    with gpu_lock(3), gpu_lock(4):  # different GPUs: different locks
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pytest-jetmem-gpu3.lock", "pytest-jetmem-gpu4.lock"]


# -- the lock file is every user's ----------------------------------------------------------------------------------
TRY_LOCK = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    sys.exit(3)  # held by another process
"""


def _held_elsewhere(path: Path) -> bool:
    """Whether another process holds the flock on ``path`` (a process of our own tries it without waiting)."""
    code = subprocess.run([sys.executable, "-c", TRY_LOCK, str(path)], timeout=60, check=False).returncode
    assert code in (0, 3)
    return code == 3


def _permission_bits_bind(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Where these tests run as root (whom no permission bits stop), open files in ``folder`` as the kernel lets
    their owner who is not root: by the owner's read and write bits. Elsewhere the real permissions do it."""
    if os.geteuid() != 0:
        return
    import builtins

    def refused(path: object, writing: bool, reading: bool) -> bool:
        target = Path(os.fsdecode(path))  # type: ignore[arg-type]
        if target.parent != folder or not target.exists():
            return False
        mode = target.stat().st_mode
        return (writing and not mode & stat.S_IWUSR) or (reading and not mode & stat.S_IRUSR)

    real_os_open, real_open = os.open, builtins.open

    def os_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        access = flags & os.O_ACCMODE
        making = flags & os.O_CREAT and flags & os.O_EXCL  # an existing file: EEXIST comes first
        if not making and refused(path, access != os.O_RDONLY, access != os.O_WRONLY):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_os_open(path, flags, mode, dir_fd=dir_fd)

    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        writing, reading = any(c in mode for c in "wax+"), "r" in mode or "+" in mode
        if isinstance(file, (str, os.PathLike)) and refused(file, writing, reading):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(builtins, "open", open_)


def test_another_users_lock_file_that_we_cannot_write_is_locked_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recwarn: pytest.WarningsRecorder
) -> None:
    """The file another user made (here: ours, read-only): opened read-only, and flock on it still keeps other
    processes out; no file of our own, nothing said."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    path = tmp_path / "pytest-jetmem-gpu5.lock"
    path.touch()
    path.chmod(0o444)
    _permission_bits_bind(monkeypatch, tmp_path)
    with gpu_lock(5):
        assert _held_elsewhere(path)
    assert not _held_elsewhere(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pytest-jetmem-gpu5.lock"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o444 and not recwarn.list


def test_a_new_lock_file_is_every_users_whatever_the_umask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    old = os.umask(0o077)
    try:
        with gpu_lock(6):
            pass
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "pytest-jetmem-gpu6.lock").stat().st_mode) == 0o666


def test_a_lock_file_we_cannot_open_at_all_gives_a_lock_of_our_own_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    shared = tmp_path / "pytest-jetmem-gpu8.lock"
    shared.touch()
    shared.chmod(0o000)
    _permission_bits_bind(monkeypatch, tmp_path)
    own = tmp_path / f"pytest-jetmem-gpu8-{os.getuid()}.lock"
    with pytest.warns(UserWarning) as said:
        with gpu_lock(8):
            assert _held_elsewhere(own)
        with gpu_lock(8):  # again: not said again
            pass
    assert [str(w.message) for w in said] == [
        f"jetmem: cannot open the GPU lock file {shared}: Permission denied: using {own} instead, so other users' "
        "processes timing on GPU 8 are not kept apart from this one's"
    ]
