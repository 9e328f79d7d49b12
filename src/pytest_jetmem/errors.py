"""Every exception pytest-jetmem raises, all deriving from :class:`JetmemError`.

Catch ``JetmemError`` for all of them; docs/reference.md lists when each is raised.
"""

from __future__ import annotations

import os
from enum import Enum
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


class BaselineErrorKind(str, Enum):
    """What went wrong with a baseline file (:attr:`BaselineError.kind`): what code decides on, never the message."""

    NOT_FOUND = "not_found"  # there is no file of that name
    UNREADABLE = "unreadable"  # it cannot be read: not UTF-8, not JSON, not a baseline, another version, malformed
    CANNOT_ADD = "cannot_add"  # saving: the file there cannot be read, so this session cannot be added to it
    EXISTS = "exists"  # saving: the file is another session's, and neither appending nor overwriting was asked
    OTHER_MACHINE = "other_machine"  # saving: the file holds runs from another machine fingerprint
    CANNOT_WRITE = "cannot_write"  # the directory, the lock, the kept copy or the file cannot be written

    def __str__(self) -> str:
        return self.value


class BaselineError(JetmemError):
    """A baseline file could not be read, written or used; the message starts with the file's path, ``kind``
    says what happened (:class:`BaselineErrorKind`)."""

    default_kind = BaselineErrorKind.UNREADABLE

    def __init__(self, path: str | os.PathLike[str], reason: str, kind: BaselineErrorKind | None = None) -> None:
        self.path = Path(path)
        self.where = os.fspath(path)  # as given: a file's path, or a results store's URL
        self.reason = reason
        self.kind = kind or self.default_kind
        super().__init__(f"{self.where}: {reason}")


class BaselineExists(BaselineError):
    """The baseline file exists from another session and overwriting was not asked for."""

    default_kind = BaselineErrorKind.EXISTS


class BaselineNotFound(BaselineError):
    """There is no baseline file of that name."""

    default_kind = BaselineErrorKind.NOT_FOUND


class RecordError(JetmemError, ValueError):
    """A measurement record's JSON object (a test report's, a child session's) is not one this pytest-jetmem reads;
    the message says which key and what is wrong (also a ``ValueError``)."""


class RecordVersionError(RecordError):
    """A measurement record of a version this pytest-jetmem does not read (``.version``; it reads ``.supported``)."""

    def __init__(self, version: object, supported: int) -> None:
        self.version = version
        self.supported = supported
        super().__init__(
            f"measurement record version {version!r}: this pytest-jetmem reads version {supported} only; "
            "run the same pytest-jetmem on both ends"
        )


class DuetError(JetmemError):
    """The other side of ``--jetmem-against`` stopped answering, or spoke out of turn."""


#: The errors pytest-jetmem raises for the user's own mistakes (a kernel that does not compile, a bad argument).
USER_ERRORS = (JetmemError, ValueError, TypeError, KeyError)


def hide_for_user_errors(excinfo: Any) -> bool:
    """A ``__tracebackhide__`` value for library frames between a user's call and the raise: pytest then shows
    the message and the user's own frames for :data:`USER_ERRORS`, and every frame for anything else (a bug)."""
    return excinfo is not None and bool(excinfo.errisinstance(USER_ERRORS))


class WireError(JetmemError, ValueError):
    """Something read from a child session (a channel line, a report's notes) is not what pytest-jetmem's
    parent-child wire (``plugin/wire.py``) sends: most often another version of pytest-jetmem on the other side."""


class StoreErrorKind(str, Enum):
    """What went wrong with a results store (:class:`StoreError`)."""

    BAD_URL = "bad_url"  # the URL names no store this pytest-jetmem can open
    CANNOT_OPEN = "cannot_open"  # the file or server cannot be opened or reached
    NOT_FOUND = "not_found"  # no store there yet: nothing has been stored there
    READ_ONLY = "read_only"  # the store can be read but not written
    CORRUPT = "corrupt"  # not a database, or not a pytest-jetmem store
    NEWER = "newer"  # written by a newer pytest-jetmem (a schema version this one does not know)
    MISSING_DRIVER = "missing_driver"  # PostgreSQL without psycopg installed
    CANNOT_WRITE = "cannot_write"  # a write failed (the transaction rolled back: the store is as it was)
    DAMAGED = "damaged"  # a stored measurement's samples or record cannot be decoded (the rest reads)
    CONFLICT = "conflict"  # a deadlock or serialization failure with another writer, still so after retries
    TIMEOUT = "timeout"  # waited too long for a lock held by another client, or a statement ran too long


class StoreError(JetmemError):
    """A results store (``--jetmem-store``, ``pytest-jetmem history``) cannot be used; ``url`` is the store as given
    (a password in it replaced by ``***``), ``kind`` a :class:`StoreErrorKind`."""

    def __init__(self, url: str, reason: str, kind: StoreErrorKind) -> None:
        self.url = url
        self.reason = reason
        self.kind = kind
        super().__init__(f"{url}: {reason}")


class PowerReadError(JetmemError):
    """A power source could not be read; the message says which file or NVML call failed, and how."""


class EnergyUnavailable(JetmemError):
    """``--jetmem-energy=on`` and this machine has no power source that works; the message names the test and why."""
