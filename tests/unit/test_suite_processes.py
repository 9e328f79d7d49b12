"""What the suite's own conftest sets for the processes of a run (the root ``conftest.py``): the garbage collector
frozen once per process, and glibc's mmap threshold fixed for the workers and children on a machine without a GPU.
Both keep an xdist worker's memory from growing with every in-process run of the demo suite (docs/performance.md).
Each test goes through the conftest itself: its hook, its rule for a machine without a GPU."""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import weakref
from pathlib import Path
from types import ModuleType

import pytest

#: The threshold the suite's conftest gives its workers and children (bytes).
THRESHOLD = 1 << 20


def root_conftest(config: pytest.Config) -> ModuleType:
    """The suite's root conftest, as this session registered it."""
    path = Path(str(config.rootpath), "conftest.py")
    for plugin in config.pluginmanager.get_plugins():
        if isinstance(plugin, ModuleType) and Path(getattr(plugin, "__file__", "") or "") == path:
            return plugin
    raise AssertionError(f"{path} is not among this session's plugins")


def test_what_a_test_made_is_collected_after_the_suites_conftest_hook_runs_again(
    request: pytest.FixtureRequest,
) -> None:
    """An in-process run of the demo suite loads the root conftest again, and its ``pytest_collection_finish`` runs
    again. What the outer test made (a cycle, as a fake driver and its buffers are) must still be collected once it
    is dropped: an object frozen by :func:`gc.freeze` never is."""

    class Held:
        cycle: object

    held = Held()
    held.cycle = held
    ref = weakref.ref(held)
    root_conftest(request.config).pytest_collection_finish(session=request.session)
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


def started_with() -> set[bytes]:
    """The names in the environment this process started with (``/proc/self/environ``: what glibc read)."""
    entries = Path("/proc/self/environ").read_bytes().split(b"\0")
    return {entry.split(b"=", 1)[0] for entry in entries if entry}


def test_on_a_machine_without_a_gpu_the_processes_of_a_run_map_every_large_buffer(
    request: pytest.FixtureRequest,
) -> None:
    """Without a GPU, the run's processes start with ``MALLOC_MMAP_THRESHOLD_``: an xdist worker (this process,
    under xdist), and a child, which maps a 2 MiB buffer on its own even after a 16 MiB one was freed (glibc's
    default would put it in the heap, which keeps freed memory below memory still in use)."""
    if not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "mallinfo2"):
        pytest.skip("no glibc 2.33+ here (mallinfo2): the threshold is glibc's")
    if root_conftest(request.config).gpu_device_nodes():
        pytest.skip("this machine has a GPU: the suite runs in one process and leaves glibc's threshold alone")
    value = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    assert value is not None, "the suite's conftest did not set MALLOC_MMAP_THRESHOLD_ for the run's processes"
    if value != str(THRESHOLD):
        pytest.skip(f"MALLOC_MMAP_THRESHOLD_={value} was set before the run: that value stands")
    if "PYTEST_XDIST_WORKER" in os.environ:
        assert b"MALLOC_MMAP_THRESHOLD_" in started_with(), "this xdist worker started without the threshold"
    probe = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True)
    assert int(probe.stdout) >= 2 << 20, probe
