"""What the suite's own conftest sets for the processes of a run (the root ``conftest.py``): the garbage collector
frozen once, and glibc's mmap threshold fixed for the workers and children on a machine without a GPU. Both keep an
xdist worker's memory from growing with every in-process run of the demo suite (docs/performance.md)."""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import weakref

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


#: A child process's probe: frees a 16 MiB buffer (glibc's default threshold rises to 16 MiB there), then prints how
#: many of the next 2 MiB buffer's bytes malloc mapped on their own (0 where they went to the heap).
_PROBE = """
import ctypes
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.free(libc.malloc(16 << 20))
before = libc.mallinfo2().hblkhd
buffer = libc.malloc(2 << 20)
print(libc.mallinfo2().hblkhd - before)
libc.free(buffer)
"""


def test_the_processes_of_a_run_map_every_large_buffer_after_a_larger_one_was_freed() -> None:
    """A process the run starts (an xdist worker, a child) maps a 2 MiB buffer on its own even after a 16 MiB one was
    freed: glibc's default would put it in the heap, which keeps freed memory below memory still in use."""
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        pytest.skip("MALLOC_MMAP_THRESHOLD_ is not set: the suite's conftest sets it for a run on a machine without a "
                    "GPU")
    if not hasattr(ctypes.CDLL(None), "mallinfo2"):
        pytest.skip("no glibc 2.33+ here (mallinfo2): the threshold is glibc's")
    probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True)
    assert int(probe.stdout) >= 2 << 20, probe
