"""A managed buffer's stream association (``CU_MEM_ATTACH_*``) as a value, and streams as ints.

Value types shared by :mod:`pytest_jetmem.cuda.attach` (which makes attachments) and Tegra-strict mode
(which judges host access by them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pytest_jetmem.cuda.driver import MEM_ATTACH_GLOBAL, MEM_ATTACH_HOST, MEM_ATTACH_SINGLE

__all__ = ["GLOBAL", "Attachment", "stream_key"]

_FLAG_NAMES = {MEM_ATTACH_GLOBAL: "global", MEM_ATTACH_HOST: "host", MEM_ATTACH_SINGLE: "single"}


def stream_key(stream: Any) -> int:
    """A stream as an int (a ``CUstream`` handle's value); None and 0 are the legacy default stream."""
    return 0 if stream is None else int(stream)


@dataclass(frozen=True)
class Attachment:
    """A managed buffer's stream association: ``flags`` is one ``MEM_ATTACH_*``; ``stream`` matters for SINGLE."""

    flags: int
    stream: int | None = None

    def __post_init__(self) -> None:
        if self.flags not in _FLAG_NAMES:
            raise ValueError(f"attachment flags must be one of MEM_ATTACH_GLOBAL/HOST/SINGLE, got {self.flags!r}")
        if self.flags == MEM_ATTACH_SINGLE and self.stream is None:
            raise ValueError("a single-stream attachment needs its stream")

    @property
    def name(self) -> str:
        return _FLAG_NAMES[self.flags]

    def describe(self) -> str:
        if self.flags == MEM_ATTACH_SINGLE:
            return f"attached to stream 0x{self.stream:x} (CU_MEM_ATTACH_SINGLE)"
        how = "globally" if self.flags == MEM_ATTACH_GLOBAL else "to the host"
        return f"attached {how} (CU_MEM_ATTACH_{self.name.upper()})"

    def blocking(self, busy: Iterable[int]) -> set[int]:
        """The busy streams that forbid a CPU access under this attachment."""
        if self.flags == MEM_ATTACH_HOST:
            return set()
        if self.flags == MEM_ATTACH_GLOBAL:
            return set(busy)
        return {s for s in busy if s == self.stream}


GLOBAL = Attachment(MEM_ATTACH_GLOBAL)
