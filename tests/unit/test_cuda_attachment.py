"""cuda.attachment: a buffer's stream association as a value, and the ``CU_MEM_ATTACH_*`` flags."""

from __future__ import annotations

import os

import pytest

from pytest_jetmem.cuda.attachment import Attachment
from pytest_jetmem.cuda.driver import MEM_ATTACH_GLOBAL, MEM_ATTACH_HOST, MEM_ATTACH_SINGLE

pytestmark = pytest.mark.skipif(os.name != "posix", reason="child processes need POSIX process groups")


def test_attachment_validation() -> None:
    with pytest.raises(ValueError, match="needs its stream"):
        Attachment(MEM_ATTACH_SINGLE)
    with pytest.raises(ValueError, match="must be one of"):
        Attachment(0)
    assert Attachment(MEM_ATTACH_SINGLE, 5).blocking({5, 6}) == {5}
    assert Attachment(MEM_ATTACH_GLOBAL).blocking({5, 6}) == {5, 6}
    assert Attachment(MEM_ATTACH_HOST).blocking({5, 6}) == set()


def test_driver_flags_match_cuda() -> None:
    cu = pytest.importorskip("cuda.bindings.driver")
    assert int(cu.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL) == MEM_ATTACH_GLOBAL
    assert int(cu.CUmemAttach_flags.CU_MEM_ATTACH_HOST) == MEM_ATTACH_HOST
    assert int(cu.CUmemAttach_flags.CU_MEM_ATTACH_SINGLE) == MEM_ATTACH_SINGLE
