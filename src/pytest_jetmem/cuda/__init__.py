"""The CUDA layer: a thin, typed layer over the cuda-python driver bindings and NVRTC.

- :mod:`~pytest_jetmem.cuda.driver`: the only importer of ``cuda.bindings``; every call checked.
- :mod:`~pytest_jetmem.cuda.device`: device facts (:class:`DeviceInfo`) and the open device.
- :mod:`~pytest_jetmem.cuda.modes`: the memory modes and their registry (device, managed, zero_copy, and any
  mode registered with :func:`~pytest_jetmem.cuda.modes.register`).
- :mod:`~pytest_jetmem.cuda.buffer`, :mod:`~pytest_jetmem.cuda.launch`, :mod:`~pytest_jetmem.cuda.compiler`:
  buffers, kernel launches, NVRTC with its disk cache; :mod:`~pytest_jetmem.cuda.bundled`: the bundled sources.
- :mod:`~pytest_jetmem.cuda.session` (:class:`CudaSession`) and :mod:`~pytest_jetmem.cuda.workspace`
  (:class:`Workspace`): the session-wide and the per-test object.
- :mod:`~pytest_jetmem.cuda.attach`, :mod:`~pytest_jetmem.cuda.attachment`: stream attachment of managed memory.

Exceptions live in :mod:`pytest_jetmem.errors`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_jetmem.cuda.buffer import Buffer
    from pytest_jetmem.cuda.device import Availability, Device, DeviceInfo, open_device
    from pytest_jetmem.cuda.launch import Kernel
    from pytest_jetmem.cuda.modes import MODES, MemoryMode, default_names, get_mode, register, registered
    from pytest_jetmem.cuda.session import CudaSession
    from pytest_jetmem.cuda.workspace import WorkObserver, Workspace

# Each name is imported on first use, so that importing one module of the layer (the plugin reads the mode
# registry in every run) imports only what that module needs. name -> its module
_EXPORTS = {
    "MODES": "modes",
    "Availability": "device",
    "Buffer": "buffer",
    "CudaSession": "session",
    "Device": "device",
    "DeviceInfo": "device",
    "Kernel": "launch",
    "MemoryMode": "modes",
    "WorkObserver": "workspace",
    "Workspace": "workspace",
    "default_names": "modes",
    "get_mode": "modes",
    "open_device": "device",
    "register": "modes",
    "registered": "modes",
}

__all__ = [  # the names of _EXPORTS, spelled out for type checkers and linters
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
    "default_names",
    "get_mode",
    "open_device",
    "register",
    "registered",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
