"""pytest-jetmem: memory-mode regression testing of CUDA code (device, managed, zero-copy memory).

Inside pytest, use the ``jetmem`` fixture with ``@pytest.mark.memmode``. Outside pytest (scripts,
notebooks, child processes), :func:`open_handle` gives the same handle.

The names below are the public face; each is imported on first use, so loading the pytest plugin does not
import hypothesis or the CUDA bindings. The layers under it are described in docs/architecture.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from pytest_jetmem import kernels
    from pytest_jetmem.correctness import strategies
    from pytest_jetmem.correctness.state_machine import CoherenceMachine, default_settings
    from pytest_jetmem.cuda import attach
    from pytest_jetmem.cuda.buffer import Buffer
    from pytest_jetmem.cuda.device import DeviceInfo
    from pytest_jetmem.cuda.launch import Kernel
    from pytest_jetmem.errors import (
        AllocationRefused,
        AttachError,
        BaselineError,
        BaselineExists,
        BaselineNotFound,
        CompileError,
        CudaError,
        CudaUnavailable,
        DeviceChoiceError,
        DuetError,
        EnergyUnavailable,
        HostAccessError,
        JetmemError,
        LaunchArgumentError,
        PowerReadError,
        RecordError,
        RecordVersionError,
        StoreError,
        TegraStrictError,
        WireError,
    )
    from pytest_jetmem.handle import Jetmem, open_handle
    from pytest_jetmem.measure.timing import Measurement

# public name -> (module, attribute or None for the module itself)
_EXPORTS: dict[str, tuple[str, str | None]] = {
    "open_handle": ("pytest_jetmem.handle", "open_handle"),
    "Jetmem": ("pytest_jetmem.handle", "Jetmem"),
    "Buffer": ("pytest_jetmem.cuda.buffer", "Buffer"),
    "Kernel": ("pytest_jetmem.cuda.launch", "Kernel"),
    "DeviceInfo": ("pytest_jetmem.cuda.device", "DeviceInfo"),
    "Measurement": ("pytest_jetmem.measure.timing", "Measurement"),
    "CoherenceMachine": ("pytest_jetmem.correctness.state_machine", "CoherenceMachine"),
    "default_settings": ("pytest_jetmem.correctness.state_machine", "default_settings"),
    "kernels": ("pytest_jetmem.kernels", None),
    "strategies": ("pytest_jetmem.correctness.strategies", None),
    "attach": ("pytest_jetmem.cuda.attach", None),
    **{
        name: ("pytest_jetmem.errors", name)
        for name in (
            "JetmemError",
            "CudaError",
            "CudaUnavailable",
            "CompileError",
            "AllocationRefused",
            "LaunchArgumentError",
            "HostAccessError",
            "AttachError",
            "TegraStrictError",
            "BaselineError",
            "BaselineNotFound",
            "BaselineExists",
            "DuetError",
            "DeviceChoiceError",
            "RecordError",
            "RecordVersionError",
            "StoreError",
            "WireError",
            "PowerReadError",
            "EnergyUnavailable",
        )
    },
}

__all__ = [  # the same names as _EXPORTS, spelled out for type checkers and linters
    "AllocationRefused",
    "AttachError",
    "BaselineError",
    "BaselineExists",
    "BaselineNotFound",
    "Buffer",
    "CoherenceMachine",
    "CompileError",
    "CudaError",
    "CudaUnavailable",
    "DeviceChoiceError",
    "DeviceInfo",
    "DuetError",
    "EnergyUnavailable",
    "HostAccessError",
    "Jetmem",
    "JetmemError",
    "Kernel",
    "LaunchArgumentError",
    "Measurement",
    "PowerReadError",
    "RecordError",
    "RecordVersionError",
    "StoreError",
    "TegraStrictError",
    "WireError",
    "__version__",
    "attach",
    "default_settings",
    "kernels",
    "open_handle",
    "strategies",
]


def __getattr__(name: str) -> Any:
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'pytest_jetmem' has no attribute {name!r}") from None
    obj = importlib.import_module(module)
    value = obj if attr is None else getattr(obj, attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
