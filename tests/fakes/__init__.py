"""Test doubles for CPU-only tests of pytest-jetmem (a fake at the CUDA driver boundary only)."""

from .fake_driver import PROFILES, FakeDriver, FakeFault, Launch, Profile, conftest_source

__all__ = ["PROFILES", "FakeDriver", "FakeFault", "Launch", "Profile", "conftest_source"]
