"""measure.timing: the per-GPU lock that keeps processes from timing on one GPU at the same time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
