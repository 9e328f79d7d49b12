"""Test doubles for CPU-only tests of pytest-jetmem (a fake at the CUDA driver boundary only).

Importing them freezes the garbage collector's view of what the process has made so far (:func:`gc.freeze`):
the modules of pytest, numpy, the plugin and the fakes live as long as the process, and a suite's child pytest (a
pytester run, a child of the plugin: each imports this through its conftest) otherwise walks them in every full
collection, pytest's own at a session's end included: 0.4 s of a trivial child session's 1.3 s of CPU here.
Objects made later are collected as before.
"""

import functools
import gc

from .fake_driver import PROFILES, FakeDriver, FakeFault, Launch, Profile, conftest_source

gc.freeze()


@functools.cache
def freeze_once() -> None:
    """:func:`gc.freeze` once more, the first time a process asks (the suite's conftest, after its collection).

    Never again in that process: a frozen object is never collected, and an in-process pytester run of the demo
    suite loads the suite's conftest afresh, whose hook would otherwise freeze what the outer test had made (its
    fake driver with every buffer) for the rest of the process (a worker grew by ~250 MiB a demo run; checked in
    ``tests/unit/test_suite_processes.py``)."""
    gc.freeze()


__all__ = ["PROFILES", "FakeDriver", "FakeFault", "Launch", "Profile", "conftest_source", "freeze_once"]
