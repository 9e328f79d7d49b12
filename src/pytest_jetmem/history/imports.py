"""``pytest-jetmem history import``: what was measured before there was a store, or in another store.

Sources (:func:`import_source`), told apart by their content:

- another store (a SQLite file, ``sqlite:///...`` or ``postgresql://...``): every session (records and all) and
  every acknowledgement, so runners that each kept a SQLite file are merged without a server;
- a baseline file (``--jetmem-save``): each session whose runs it holds, as one session of branch ``--branch``
  (default: the baseline's name), commit unknown unless ``--commit`` says it;
- pytest-benchmark JSON written by ``--jetmem-benchmark-json``: one session (its machine from ``machine_info``);
- a session file (:mod:`~.sessionfile`, what a session that could not reach its store wrote);
- a directory: every ``*.json`` in it.

Importing is idempotent: a session already stored (by its uid; an imported file's sessions get a uid derived from
the file's content and the session) is not stored again. GPU-free and pytest-free.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_jetmem.history.context import SessionContext
from pytest_jetmem.history.model import StoredSession
from pytest_jetmem.history.sessionfile import FORMAT as SESSION_FORMAT
from pytest_jetmem.history.sessionfile import read_session_file
from pytest_jetmem.history.store import Store, open_store
from pytest_jetmem.machine.fingerprint import Machine
from pytest_jetmem.measure.baseline import FORMAT as BASELINE_FORMAT
from pytest_jetmem.measure.baseline import Baseline, BaselineStore
from pytest_jetmem.measure.record import Conditions, Identity, Judgement, MeasurementRecord, Statistics
from pytest_jetmem.measure.stats import summarize

__all__ = ["ImportResult", "import_source"]

_SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass
class ImportResult:
    """What an import did: sessions added, sessions already there, acknowledgements added, per source."""

    added: int = 0
    skipped: int = 0
    acks: int = 0

    def line(self, source: str) -> str:
        return (f"{source}: {self.added} session(s) added, {self.skipped} already stored"
                + (f", {self.acks} acknowledgement(s)" if self.acks else ""))


def _statistics(samples: tuple[float, ...], first_call_ms: float | None, runs: int = 1) -> Statistics:
    s = summarize(samples)
    return Statistics(s.median, s.mad, s.p5, s.p95, s.min, s.n, samples, first_call_ms, runs=runs)


def _identity(nodeid: str, mode: str, key: str) -> Identity:
    """A baseline entry's or benchmark's ``label:scope`` key as an identity (``measure:scope``: no label)."""
    label, _, scope = key.rpartition(":")
    return Identity(nodeid, mode, "" if label == "measure" else label, scope or key)


def _uid(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32]


def baseline_sessions(baseline: Baseline, digest: str, branch: str | None, commit: str | None) -> list[StoredSession]:
    """The sessions a baseline file holds (each of its runs labelled with its session), oldest first."""
    order: list[str] = []
    per: dict[str, list[MeasurementRecord]] = {}
    for entry in baseline.entries.values():
        sessions = entry.run_sessions or (baseline.session,) * len(entry.run_samples)
        grouped: dict[str, list[tuple[float, ...]]] = {}
        for session, run in zip(sessions, entry.run_samples, strict=True):
            grouped.setdefault(session, []).append(run)
        for session, runs in grouped.items():
            if session not in per:
                order.append(session)
                per[session] = []
            samples = tuple(v for run in runs for v in run)
            ident = _identity(entry.nodeid, entry.mode, entry.scope)
            per[session].append(MeasurementRecord(ident, _statistics(samples, entry.first_call_ms, len(runs)),
                                                  Conditions(), Judgement()))
    context = SessionContext(commit=commit, branch=branch or baseline.name)
    return [
        StoredSession(_uid("baseline", digest, s), baseline.created, context, baseline.machine, tuple(per[s]),
                      "import:baseline")
        for s in order
    ]


def _benchmark_key(bench: Mapping[str, Any]) -> tuple[str, str]:
    """A pytest-benchmark entry's node id and ``label:scope`` key, from its ``jetmem:KEY`` group and its
    ``NODEID:KEY`` full name; ValueError where the entry is not one ``--jetmem-benchmark-json`` wrote."""
    group = str(bench.get("group", ""))
    key = group[len("jetmem:"):] if group.startswith("jetmem:") else ""
    fullname = str(bench.get("fullname", ""))
    if not key or not fullname.endswith(":" + key):
        raise ValueError(f"benchmark {bench.get('name')!r}: not one --jetmem-benchmark-json wrote (group "
                         f"{group!r})")
    return fullname[: -len(key) - 1], key


def _record_of_benchmark(bench: Mapping[str, Any]) -> MeasurementRecord:
    """The measurement record of one pytest-benchmark entry (its samples, in seconds, as ms; its memory mode from
    ``param``); ValueError / KeyError / TypeError where the entry is not one ``--jetmem-benchmark-json`` wrote."""
    nodeid, key = _benchmark_key(bench)
    samples = tuple(float(v) * 1e3 for v in bench["stats"]["data"])
    extra = bench.get("extra_info") or {}
    ident = _identity(nodeid, str(bench.get("param")), key)
    return MeasurementRecord(ident, _statistics(samples, extra.get("first_call_ms")), Conditions(), Judgement())


def _benchmark_context(doc: Mapping[str, Any], branch: str | None, commit: str | None) -> SessionContext:
    """The code of a pytest-benchmark file's session: ``commit`` and ``branch`` where given, else its
    ``commit_info``'s."""
    commit_info = doc.get("commit_info") or {}
    return SessionContext(commit=commit or commit_info.get("id"), branch=branch or commit_info.get("branch"))


def benchmark_session(doc: Mapping[str, Any], digest: str, branch: str | None, commit: str | None) -> StoredSession:
    """The session of a pytest-benchmark JSON file ``--jetmem-benchmark-json`` wrote."""
    info = doc.get("machine_info") or {}
    machine = Machine.from_dict({k[len("jetmem_"):]: v for k, v in info.items() if k.startswith("jetmem_")})
    records = [_record_of_benchmark(bench) for bench in doc.get("benchmarks") or []]
    started = str(doc.get("datetime") or "")[:19] + "Z"
    return StoredSession(_uid("benchmark-json", digest), started, _benchmark_context(doc, branch, commit), machine,
                         tuple(records), "import:benchmark-json")


def _file_sessions(path: Path, branch: str | None, commit: str | None) -> list[StoredSession]:
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a store, a baseline, a session file or benchmark JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"expected a JSON object, got {type(doc).__name__}")
    if doc.get("format") == BASELINE_FORMAT:
        name = path.name[: -len(".json")].replace("%2F", "/") if path.name.endswith(".json") else path.stem
        return baseline_sessions(BaselineStore(path.parent).load(name), digest, branch, commit)
    if doc.get("format") == SESSION_FORMAT:
        return [read_session_file(doc)]
    if "benchmarks" in doc and "machine_info" in doc:
        return [benchmark_session(doc, digest, branch, commit)]
    raise ValueError("not a store, a baseline, a session file or benchmark JSON (no format this pytest-jetmem knows)")


def _is_store(source: str, base: Path) -> bool:
    if "://" in source:
        return True
    path = Path(source) if Path(source).is_absolute() else base / source
    try:
        with path.open("rb") as fh:
            return fh.read(16) == _SQLITE_MAGIC
    except OSError:
        return False


def _sources(path: Path) -> Iterator[Path]:
    if path.is_dir():
        yield from sorted(p for p in path.iterdir() if p.suffix == ".json" and p.is_file())
    else:
        yield path


def _add_sessions(store: Store, sessions: Iterable[StoredSession], result: ImportResult) -> None:
    """Add each of ``sessions`` to ``store``, counting in ``result`` those added and those already stored."""
    for session in sessions:
        if store.add(session):
            result.added += 1
        else:
            result.skipped += 1


def _import_store(store: Store, source: str, base: str, result: ImportResult) -> None:
    """Import every session and acknowledgement of the store ``source`` into ``store``, counting in ``result``."""
    with open_store(source, base, create=False) as other:
        _add_sessions(store, (other.stored_session(row) for row in other.sessions()), result)
        for ack in other.acks():
            result.acks += store.ack(ack.series, ack.device, ack.session_uid, ack.commit, ack.reason, ack.author)


def _import_files(store: Store, path: Path, branch: str | None, commit: str | None, result: ImportResult) -> None:
    """Import the file ``path`` (or every ``*.json`` in the directory ``path``, in name order) into ``store``,
    counting in ``result``; ValueError naming the file where one is not a source this module knows."""
    for file in _sources(path):
        try:
            sessions = _file_sessions(file, branch, commit)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{file}: {exc}") from None
        _add_sessions(store, sessions, result)


def import_source(store: Store, source: str, *, base: str = ".", branch: str | None = None,
                  commit: str | None = None) -> ImportResult:
    """Import ``source`` into ``store``. ValueError / OSError / BaselineError / StoreError saying what is wrong."""
    result = ImportResult()
    if _is_store(source, Path(base)):
        _import_store(store, source, base, result)
        return result
    path = Path(source) if Path(source).is_absolute() else Path(base) / source
    if not path.exists():
        raise FileNotFoundError(f"{source}: no such file or directory")
    _import_files(store, path, branch, commit, result)
    return result
