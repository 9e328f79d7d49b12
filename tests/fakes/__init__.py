"""Test doubles for CPU-only tests of pytest-jetmem (a fake at the CUDA driver boundary only).

Importing them freezes the garbage collector's view of what the process has made so far (:func:`gc.freeze`):
the modules of pytest, numpy, the plugin and the fakes live as long as the process, and a suite's child pytest (a
pytester run, a child of the plugin: each imports this through its conftest) otherwise walks them in every full
collection, pytest's own at a session's end included: 0.4 s of a trivial child session's 1.3 s of CPU here.
Objects made later are collected as before.
"""

import gc

from .fake_driver import PROFILES, FakeDriver, FakeFault, Launch, Profile, conftest_source

gc.freeze()

__all__ = ["PROFILES", "FakeDriver", "FakeFault", "Launch", "Profile", "conftest_source"]
