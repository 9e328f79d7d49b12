"""Every exception pytest-jetmem raises, all deriving from :class:`JetmemError`.

Catch ``JetmemError`` for all of them; docs/reference.md lists when each is raised.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


class JetmemError(Exception):
    """Base class of every pytest-jetmem error."""


class CudaError(JetmemError):
    """A CUDA driver or NVRTC call returned an error code.

    ``name`` is the CUDA error name (``CUDA_ERROR_OUT_OF_MEMORY``), ``call`` the API call.
    """

    def __init__(self, call: str, name: str, code: int, detail: str = "") -> None:
        self.call = call
        self.name = name
        self.code = code
        self.detail = detail
        msg = f"{call} failed: {name}" + ("" if name.endswith(f" error {code}") else f" ({code})")  # "CUDA error 12345"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)

    @property
    def sticky(self) -> bool:
        """True for errors that corrupt the CUDA context until it is reset."""
        return self.name in STICKY_ERRORS


# Errors after which the context is unusable and the process must be restarted (CUDA driver API,
# CUresult: "the process must be terminated and relaunched").
STICKY_ERRORS = frozenset(
    {
        "CUDA_ERROR_ILLEGAL_ADDRESS",
        "CUDA_ERROR_LAUNCH_FAILED",
        "CUDA_ERROR_ILLEGAL_INSTRUCTION",
        "CUDA_ERROR_MISALIGNED_ADDRESS",
        "CUDA_ERROR_INVALID_ADDRESS_SPACE",
        "CUDA_ERROR_INVALID_PC",
        "CUDA_ERROR_HARDWARE_STACK_ERROR",
        "CUDA_ERROR_ASSERT",
        "CUDA_ERROR_LAUNCH_TIMEOUT",
        "CUDA_ERROR_ECC_UNCORRECTABLE",
    }
)


class CudaUnavailable(JetmemError):
    """No CUDA driver, no device or no NVRTC: GPU tests skip with ``reason``."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class DeviceChoiceError(CudaUnavailable):
    """``JETMEM_DEVICE`` names no device of this machine: a configuration mistake, so the plugin stops with a
    usage error instead of skipping every GPU test."""


class CompileError(JetmemError):
    """NVRTC rejected a kernel; the message holds the kernel name and the NVRTC log."""


class ModeUnsupported(JetmemError):
    """The device cannot do this memory mode (reason says which attribute)."""


class AllocationRefused(JetmemError):
    """An allocation was refused before the driver was asked (larger than free memory)."""


class LaunchArgumentError(JetmemError, TypeError):
    """A kernel launch argument does not fit the kernel's parameter (also a ``TypeError``)."""


class HostAccessError(JetmemError):
    """The buffer's memory mode has no host view, or the buffer was freed."""


class AttachError(JetmemError):
    """A stream attachment was asked of memory that cannot have one (not managed, freed, a bad stream)."""


class TegraStrictError(JetmemError):
    """A host access that would kill the process on Jetson (``CONCURRENT_MANAGED_ACCESS=0``)."""


class BaselineError(JetmemError):
    """A baseline file could not be read, written or used; the message starts with the file's path."""

    def __init__(self, path: str | os.PathLike[str], reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class BaselineExists(BaselineError):
    """The baseline file exists from another session and overwriting was not asked for."""


class BaselineNotFound(BaselineError):
    """There is no baseline file of that name."""


class DuetError(JetmemError):
    """The other side of ``--jetmem-against`` stopped answering, or spoke out of turn."""


#: The errors pytest-jetmem raises for the user's own mistakes (a kernel that does not compile, a bad argument).
USER_ERRORS = (JetmemError, ValueError, TypeError, KeyError)


def hide_for_user_errors(excinfo: Any) -> bool:
    """A ``__tracebackhide__`` value for library frames between a user's call and the raise: pytest then shows
    the message and the user's own frames for :data:`USER_ERRORS`, and every frame for anything else (a bug)."""
    return excinfo is not None and bool(excinfo.errisinstance(USER_ERRORS))
