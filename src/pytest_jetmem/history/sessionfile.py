"""A session as one JSON file: what ``--jetmem-store`` writes where the store cannot be written at the end of a
session (nothing is lost), and what ``pytest-jetmem history import`` reads back::

    {"format": "pytest-jetmem-session", "version": 1, "uid": "5f1c...", "started": "2026-11-26T13:20:00Z",
     "origin": "pytest", "plugin_version": "0.1.0", "context": {"commit": ..., "branch": ..., "commit_time": ...,
     "parents": [...] or null, "dirty": ..., "ci_url": ...}, "machine": {Machine.to_dict()},
     "records": [MeasurementRecord.to_json(), ...]}

GPU-free and pytest-free.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pytest_jetmem.history.codec import json_finite
from pytest_jetmem.history.context import SessionContext
from pytest_jetmem.history.model import StoredSession
from pytest_jetmem.machine.fingerprint import Machine
from pytest_jetmem.measure.record import MeasurementRecord

__all__ = ["FORMAT", "read_session_file", "session_file_bytes"]

FORMAT = "pytest-jetmem-session"
VERSION = 1


def session_file_bytes(session: StoredSession) -> bytes:
    """The session's file, UTF-8 JSON."""
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "uid": session.uid,
        "started": session.started,
        "origin": session.origin,
        "plugin_version": session.plugin_version,
        "context": session.context.to_dict(),
        "machine": session.machine.to_dict(),
        "device_facts": session.device_facts,
        "records": [json_finite(r.to_json()) for r in session.records],
    }
    return json.dumps(doc, indent=1, allow_nan=False).encode() + b"\n"


def _context(raw: Mapping[str, Any]) -> SessionContext:
    parents = raw.get("parents")
    dirty = raw.get("dirty")
    return SessionContext(
        commit=raw.get("commit"),
        branch=raw.get("branch"),
        commit_time=raw.get("commit_time"),
        parents=tuple(str(p) for p in parents) if isinstance(parents, list) else None,
        dirty=dirty if isinstance(dirty, bool) else None,
        ci_url=raw.get("ci_url"),
    )


def read_session_file(doc: Mapping[str, Any]) -> StoredSession:
    """The session of a decoded session file; ValueError saying what is wrong with it."""
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise ValueError(f"not a pytest-jetmem session file of version {VERSION} (format {doc.get('format')!r}, "
                         f"version {doc.get('version')!r})")
    for key in ("uid", "started"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            raise ValueError(f"{key}: expected a non-empty string, got {doc.get(key)!r}")
    context = doc.get("context")
    records = doc.get("records")
    if not isinstance(context, Mapping) or not isinstance(records, list):
        raise ValueError("expected 'context' (an object) and 'records' (a list)")
    return StoredSession(
        uid=doc["uid"],
        started=doc["started"],
        context=_context(context),
        machine=Machine.from_dict(doc.get("machine", {})),
        records=tuple(MeasurementRecord.from_json(r) for r in records),
        origin=str(doc.get("origin", "pytest")),
        plugin_version=str(doc.get("plugin_version", "")),
        device_facts=doc.get("device_facts") if isinstance(doc.get("device_facts"), dict) else None,
    )
