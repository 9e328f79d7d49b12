"""What a results store holds, as Python values: a session with its records, the rows read back, an acknowledgement.

One home for these shapes; :mod:`~pytest_jetmem.history.store` writes and reads them, everything else asks it.
GPU-free and pytest-free.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pytest_jetmem.history.context import SessionContext
from pytest_jetmem.machine.fingerprint import Machine
from pytest_jetmem.measure.record import MeasurementRecord

__all__ = ["Ack", "SeriesKey", "SessionRow", "StoredSession", "commit_order"]


@dataclass(frozen=True)
class SeriesKey:
    """One measured thing, in one memory mode: a series over sessions (per device)."""

    nodeid: str
    test: str  # the node id without the memory mode (``group_name``)
    mode: str
    label: str
    scope: str

    @classmethod
    def of(cls, record: MeasurementRecord) -> SeriesKey:
        ident = record.identity
        return cls(ident.nodeid, ident.test, ident.mode, ident.label, ident.scope)

    @property
    def key(self) -> str:
        """``label:scope`` as the runtimes table shows it (``measure:scope`` without a label)."""
        return f"{self.label or 'measure'}:{self.scope}"

    @property
    def name(self) -> str:
        """``nodeid key`` as the command line shows a series."""
        return f"{self.nodeid} {self.key}"


@dataclass(frozen=True)
class StoredSession:
    """A session as the store keeps it: its id, when it started, its code and machine, its measurement records."""

    uid: str
    started: str  # ISO 8601, UTC
    context: SessionContext
    machine: Machine
    records: tuple[MeasurementRecord, ...]
    origin: str = "pytest"  # or "import:baseline", "import:benchmark-json", "import:store"
    plugin_version: str = ""
    #: what the advice needs of the device (``DeviceFacts.to_json()``: integrated, CONCURRENT_MANAGED_ACCESS,
    #: PAGEABLE_MEMORY_ACCESS); None: not known (an imported file)
    device_facts: dict[str, object] | None = None


@dataclass(frozen=True)
class SessionRow:
    """A stored session read back, without its records (``id`` is the store's own number for it)."""

    id: int
    uid: str
    started: str
    stored: str
    context: SessionContext
    machine: Machine
    origin: str
    plugin_version: str
    device_facts: dict[str, object] | None = None

    @property
    def short_commit(self) -> str:
        """The commit's first 10 hex digits, or ``unknown``."""
        return self.context.commit[:10] if self.context.commit else "unknown"


@dataclass(frozen=True)
class Ack:
    """An acknowledged change point: the series, the device, the first session after the change, and why."""

    series: SeriesKey
    device: str
    session_uid: str
    commit: str | None
    reason: str
    author: str
    created: str


def commit_order(sessions: Iterable[SessionRow]) -> list[SessionRow]:
    """The sessions in commit order: by commit time (a session of an unknown commit: by its start), then by start.

    Sessions of one commit stay together (their commit time is one); a history is read in this order.
    """
    return sorted(sessions, key=lambda s: (s.context.commit_time or s.started, s.context.commit or "", s.started, s.id))
