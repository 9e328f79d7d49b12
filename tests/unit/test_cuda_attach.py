"""cuda.attach: stream association of managed buffers, on a real handle over the fake driver."""

from __future__ import annotations

import os

import pytest

from fakes.fake_driver import FakeDriver
from pytest_jetmem.correctness import strict
from pytest_jetmem.cuda import attach
from pytest_jetmem.cuda.driver import MEM_ATTACH_SINGLE
from pytest_jetmem.handle import Jetmem

pytestmark = pytest.mark.skipif(os.name != "posix", reason="child processes need POSIX process groups")


def test_attach_refuses_other_modes(jm: Jetmem) -> None:
    with pytest.raises(attach.AttachError, match=r"managed memory \(cuMemAllocManaged\) only.*'zero_copy' memory"):
        attach.attach_host(jm, jm.zeros(4, mode="zero_copy"))
    with pytest.raises(attach.AttachError, match="'device' memory; device memory has no host view"):
        attach.attach_single(jm, jm.zeros(4, mode="device"))
    freed = jm.zeros(4)
    freed.free()
    with pytest.raises(attach.AttachError, match="was freed"):
        attach.attach_global(jm, freed)
    with pytest.raises(attach.AttachError, match="needs a created stream"):
        attach.attach_single(jm, jm.zeros(4), 0)
    with pytest.raises(ValueError, match="flags must be"):
        attach.attach(jm, jm.zeros(4), 0x8)
    with pytest.raises(attach.AttachError) as err:
        attach.attach_host(jm, jm.zeros(4, mode="device"))
    assert str(err.value).startswith("test_concurrency.py::strict: jetmem.attach_host(<Buffer")


def test_attach_without_strict_mode_just_attaches(jm: Jetmem, fake: FakeDriver) -> None:
    buf = jm.zeros(4)
    attach.attach_single(jm, buf)  # jetmem's own stream
    assert fake.allocation_at(buf.ptr).attach == MEM_ATTACH_SINGLE
    assert strict.tracker_of(jm) is None
