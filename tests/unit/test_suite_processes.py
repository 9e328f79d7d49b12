"""What the suite's own conftest sets for the processes of a run (the root ``conftest.py``): the garbage collector
frozen once, and glibc's mmap threshold fixed for the workers and children on a machine without a GPU. Both keep an
xdist worker's memory from growing with every in-process run of the demo suite (docs/performance.md)."""

from __future__ import annotations

import ctypes
import gc
import weakref
from pathlib import Path

import numpy as np
import pytest

from fakes import freeze_once


def test_what_a_test_made_is_collected_after_the_suites_conftest_freezes_again() -> None:
    """The suite's conftest freezes the collector after its collection (``fakes.freeze_once``); an in-process run
    of the demo suite loads that conftest again. What the outer test made (a cycle, as a fake driver and its buffers
    are) must still be collected once it is dropped: frozen objects never are."""

    class Held:
        cycle: object

    freeze_once()  # the process's one freeze, wherever it came first
    held = Held()
    held.cycle = held
    ref = weakref.ref(held)
    freeze_once()  # the hook of an in-process run's conftest
    del held
    gc.collect()
    assert ref() is None


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")
    ]


def _started_with() -> set[bytes]:
    """The names in the environment this process started with (``/proc/self/environ``; what glibc read), none
    where the system does not show it."""
    try:
        return {entry.split(b"=", 1)[0] for entry in Path("/proc/self/environ").read_bytes().split(b"\0") if entry}
    except OSError:
        return set()


def _mapped_bytes() -> int:
    """glibc's count of the bytes malloc holds in mappings of their own (``mallinfo2().hblkhd``)."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2
    return int(libc.mallinfo2().hblkhd)


def test_a_worker_maps_every_large_buffer_after_a_larger_one_was_freed() -> None:
    """With the threshold fixed, a 2 MiB buffer is a mapping of its own even after a 16 MiB one was freed (glibc's
    default raises the threshold to 16 MiB there, and the 2 MiB would go to the heap and stay with the process)."""
    if b"MALLOC_MMAP_THRESHOLD_" not in _started_with():
        pytest.skip("this process did not start with MALLOC_MMAP_THRESHOLD_: the suite's conftest sets it for its "
                    "xdist workers and children on a machine without a GPU")
    try:
        _mapped_bytes()
    except (AttributeError, OSError):
        pytest.skip("no glibc 2.33+ here (mallinfo2): the threshold is glibc's")
    large = np.ones(16 << 20, dtype=np.uint8)
    del large
    before = _mapped_bytes()
    buffer = np.ones(2 << 20, dtype=np.uint8)
    assert _mapped_bytes() - before >= buffer.nbytes
