"""The CUDA layer: a thin, typed layer over the cuda-python driver bindings and NVRTC.

- :mod:`~pytest_jetmem.cuda.driver`: the only importer of ``cuda.bindings``; every call checked.
- :mod:`~pytest_jetmem.cuda.device`: device facts (:class:`DeviceInfo`) and the open device.
- :mod:`~pytest_jetmem.cuda.modes`: the memory modes (device, managed, zero_copy).
- :mod:`~pytest_jetmem.cuda.buffer`, :mod:`~pytest_jetmem.cuda.launch`, :mod:`~pytest_jetmem.cuda.compiler`:
  buffers, kernel launches, NVRTC with its disk cache; :mod:`~pytest_jetmem.cuda.bundled`: the bundled sources.
- :mod:`~pytest_jetmem.cuda.session` (:class:`CudaSession`) and :mod:`~pytest_jetmem.cuda.workspace`
  (:class:`Workspace`): the session-wide and the per-test object.
- :mod:`~pytest_jetmem.cuda.attach`, :mod:`~pytest_jetmem.cuda.attachment`: stream attachment of managed memory.

Exceptions live in :mod:`pytest_jetmem.errors`.
"""

from __future__ import annotations

from pytest_jetmem.cuda.buffer import Buffer
from pytest_jetmem.cuda.device import Availability, Device, DeviceInfo, open_device
from pytest_jetmem.cuda.launch import Kernel
from pytest_jetmem.cuda.modes import DEFAULT_MODES, MODES, MemoryMode, get_mode
from pytest_jetmem.cuda.session import CudaSession
from pytest_jetmem.cuda.workspace import WorkObserver, Workspace

__all__ = [
    "DEFAULT_MODES",
    "MODES",
    "Availability",
    "Buffer",
    "CudaSession",
    "Device",
    "DeviceInfo",
    "Kernel",
    "MemoryMode",
    "WorkObserver",
    "Workspace",
    "get_mode",
    "open_device",
]
