"""Stored baselines: the timing samples of a named run, with the machine they were measured on.

One baseline is one JSON file (UTF-8), ``<directory>/<name>.json``, format version 1. A name is 1-100 letters,
digits, '.', '_' or '-', with '/' between parts (a branch: ``feature/foo``), no part empty or starting with '.';
each '/' is written ``%2F`` in the file name (``feature%2Ffoo.json``), so every file is directly in the
directory and no name can reach outside it::

    {
      "format": "pytest-jetmem-baseline",      identifies the file; anything else is refused
      "version": 1,                             this module reads version 1 only
      "name": "main",                           the baseline's name (the file's stem)
      "created": "2026-11-22T10:00:00Z",        ISO 8601, UTC: when the session first wrote the file
      "session": "5f1c...",                     pytest session that wrote it (shared by xdist workers)
      "machine": {                              Machine.to_dict(): where the timings were taken
        "device_name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "driver_version": 13000,
        "cuda_bindings_version": "13.3.1", "nvrtc_version": "13.0", "l4t_release": null,
        "nvpmodel_mode": null, "gpu_cur_freq_hz": null, "gpu_max_freq_hz": null, "emc_freq_hz": null,
        "clocks_locked": null
      },
      "entries": {                              one per timed thing, keyed by entry_key(nodeid, mode, scope)
        "<key>": {
          "nodeid": "tests/test_conv.py::test_conv[managed]",
          "mode": "managed",                    memory mode
          "scope": "call",                      what was timed within the test
          "unit": "ms",                         "ms" (a time), or "mJ": an energy per call ("<label>:energy",
                                                each energy window a sample; --jetmem-energy)
          "samples": [0.312, 0.309, ...],       steady-state timings, warm-up excluded (the truth)
          "first_call_ms": 0.994,               the first (cold) call, or null
          "summary": {"n": ..., "median": ..., "mad": ..., "iqr": ..., "p5": ..., "p95": ...,
                      "min": ..., "max": ...},  derived from samples for people and tools; recomputed on load
          "runs": [[...], [...]]                optional: the samples of each run (fresh allocations, or
                                                sessions added with append); "samples" is then all of them
          "run_sessions": ["5f1c...", ...]      optional: the session of each run (sessions are the unit of
                                                noise of a comparison); absent: every run is one session's
        }
      }
    }

Readers ignore keys they do not know (additions keep version 1); a change of meaning bumps "version".
Saving merges entries into the file of the same session under an exclusive lock (``fcntl.flock`` on
``<name>.json.lock``), so pytest-xdist workers can each add theirs; every write is atomic (temporary file in
the same directory, fsync, ``os.replace``). A file from another session is replaced only on request, and
then kept as ``<name>.json.prev``. A file that cannot be read is reported and never modified by ``load``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pytest_jetmem.atomic import write_atomic
from pytest_jetmem.errors import BaselineError, BaselineErrorKind, BaselineExists, BaselineNotFound
from pytest_jetmem.machine.fingerprint import FINGERPRINT_FIELDS, Machine
from pytest_jetmem.measure.defaults import WINDOW_SESSIONS  # re-exported: the default is written there
from pytest_jetmem.measure.stats import Summary, summarize
from pytest_jetmem.validate import expect, is_int, is_number

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "FINGERPRINT_FIELDS",
    "FORMAT",
    "VERSION",
    "WINDOW_SESSIONS",
    "Baseline",
    "BaselineError",
    "BaselineErrorKind",
    "BaselineExists",
    "BaselineNotFound",
    "BaselineStore",
    "Entry",
    "Machine",
    "entry_key",
]

FORMAT = "pytest-jetmem-baseline"
VERSION = 2
#: The versions this reads: 1 (times only) and 2 (also energies, unit "mJ"). A file is written as version 1 where it
#: holds times only, so that an older pytest-jetmem still reads it; one with an energy says it is version 2.
READS = (1, 2)

#: One part of a baseline name: letters, digits, '.', '_', '-', not starting with '.' (so never '.' or '..').
_PART = r"[A-Za-z0-9_-][A-Za-z0-9._-]*"
#: A baseline name: parts joined by '/' (branch-like: ``feature/foo``), 1-100 characters in all.
_NAME_RE = re.compile(rf"(?=.{{1,100}}$){_PART}(?:/{_PART})*")
#: What a '/' of a name becomes in its file name: '%' is no character of a name, so the mapping is one to one.
SLASH = "%2F"
NAME_RULES = (
    "1-100 letters, digits, '.', '_' or '-', with '/' between parts (feature/foo); no part empty or starting with '.'"
)


#: The units of an entry's samples: a time, an energy per call.
UNITS = ("ms", "mJ")


def _is_duration(v: Any) -> bool:
    """A finite number of milliseconds >= 0 (not a bool)."""
    return is_number(v) and math.isfinite(v) and v >= 0


def _durations(raw: Any, name: str, non_empty: str) -> tuple[float, ...]:
    """``raw`` (a sequence, or an array with ``tolist``) as durations in ms; ValueError naming ``name`` where it is
    empty (``non_empty`` says what was expected) or holds anything but finite numbers >= 0."""
    values = raw.tolist() if hasattr(raw, "tolist") else list(raw)
    expect(len(values) > 0, name, values, non_empty)
    for v in values:
        expect(_is_duration(v), name, v, "finite durations >= 0")
    return tuple(float(v) for v in values)


def entry_key(nodeid: str, mode: str, scope: str) -> str:
    """The key of an entry: ``<nodeid>::<mode>::<scope>``."""
    return f"{nodeid}::{mode}::{scope}"


@dataclass(frozen=True)
class Entry:
    """The timings of one thing (``scope``) of one test item in one memory mode, in milliseconds; or its energy per
    call in millijoules (``unit`` "mJ", scope ``<label>:energy``: each energy window a sample)."""

    nodeid: str
    mode: str
    scope: str
    samples: tuple[float, ...]
    first_call_ms: float | None = None
    unit: str = "ms"
    #: Samples per run (fresh allocations or separate sessions); empty means one run, ``samples``.
    runs: tuple[tuple[float, ...], ...] = ()
    #: The session that measured each run (parallel to :attr:`run_samples`); empty: all from one session.
    run_sessions: tuple[str, ...] = ()
    #: The SM clock (MHz) while the newest session measured, where NVML could tell (None: unknown).
    sm_mhz: float | None = None

    def __post_init__(self) -> None:
        for name in ("nodeid", "mode", "scope"):
            value = getattr(self, name)
            expect(isinstance(value, str) and value != "", name, value, "a non-empty str")
        expect(self.unit in UNITS, "unit", self.unit, " or ".join(map(repr, UNITS)))
        raw = self.samples
        expect(isinstance(raw, (list, tuple)) or hasattr(raw, "tolist"), "samples", raw, "a list of numbers")
        object.__setattr__(self, "samples", _durations(raw, "samples", "at least one sample"))
        runs = tuple(_durations(run, "runs", "non-empty lists of samples") for run in self.runs)
        object.__setattr__(self, "runs", runs)
        object.__setattr__(self, "run_sessions", self._checked_sessions())
        if self.sm_mhz is not None:
            expect(is_number(self.sm_mhz) and self.sm_mhz > 0, "sm_mhz", self.sm_mhz, "a clock in MHz or None")
            object.__setattr__(self, "sm_mhz", float(self.sm_mhz))
        fc = self.first_call_ms
        if fc is not None:
            expect(_is_duration(fc), "first_call_ms", fc, "a duration or None")
            object.__setattr__(self, "first_call_ms", float(fc))

    def _checked_sessions(self) -> tuple[str, ...]:
        """:attr:`run_sessions` as a tuple: none, or one non-empty session id per run."""
        sessions = tuple(self.run_sessions)
        if sessions:
            expect(all(isinstance(s, str) and s for s in sessions), "run_sessions", sessions, "non-empty strs")
            n_runs = len(self.run_samples)
            expect(len(sessions) == n_runs, "run_sessions", sessions, f"one session per run ({n_runs})")
        return sessions

    @property
    def key(self) -> str:
        """:func:`entry_key` of this entry."""
        return entry_key(self.nodeid, self.mode, self.scope)

    @property
    def summary(self) -> Summary:
        """Robust summary of the samples."""
        return summarize(self.samples)

    @property
    def run_samples(self) -> tuple[tuple[float, ...], ...]:
        """The samples of each run (one run: the samples)."""
        return self.runs or (self.samples,)

    def sessions(self) -> list[list[tuple[float, ...]]]:
        """The runs grouped by the session that measured them, oldest session first."""
        if not self.run_sessions:
            return [list(self.run_samples)]
        grouped: dict[str, list[tuple[float, ...]]] = {}
        for session, run in zip(self.run_sessions, self.run_samples, strict=True):
            grouped.setdefault(session, []).append(run)
        return list(grouped.values())

    def to_dict(self) -> dict[str, Any]:
        """The entry's JSON object."""
        return {
            "nodeid": self.nodeid,
            "mode": self.mode,
            "scope": self.scope,
            "unit": self.unit,
            "samples": list(self.samples),
            "first_call_ms": self.first_call_ms,
            "summary": self.summary.to_dict(),
            **({"runs": [list(r) for r in self.runs]} if self.runs else {}),
            **({"run_sessions": list(self.run_sessions)} if self.run_sessions else {}),
            **({"sm_mhz": self.sm_mhz} if self.sm_mhz is not None else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Entry:
        """Inverse of :meth:`to_dict` (the stored summary is ignored: it is recomputed from the samples)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"expected an object, got {type(data).__name__}")
        for required in ("nodeid", "mode", "scope", "samples"):
            if required not in data:
                raise ValueError(f"missing {required!r}")
        return cls(
            nodeid=data["nodeid"],
            mode=data["mode"],
            scope=data["scope"],
            samples=data["samples"],
            first_call_ms=data.get("first_call_ms"),
            unit=data.get("unit", "ms"),
            runs=tuple(data.get("runs") or ()),
            run_sessions=tuple(data.get("run_sessions") or ()),
            sm_mhz=data.get("sm_mhz"),
        )


@dataclass(frozen=True)
class Baseline:
    """A loaded (or just saved) baseline."""

    name: str
    created: str
    session: str
    machine: Machine
    entries: dict[str, Entry] = field(default_factory=dict)
    path: Path | None = None

    def entry(self, key: str) -> Entry | None:
        """The entry stored under ``key``, or None when this baseline has none."""
        return self.entries.get(key)

    def to_dict(self) -> dict[str, Any]:
        """The file's JSON object (entries sorted by key)."""
        return {
            "format": FORMAT,
            "version": VERSION if any(e.unit != "ms" for e in self.entries.values()) else 1,
            "name": self.name,
            "created": self.created,
            "session": self.session,
            "machine": self.machine.to_dict(),
            "entries": {k: self.entries[k].to_dict() for k in sorted(self.entries)},
        }


def _utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse(doc: Any, name: str, path: Path) -> Baseline:
    """Validate a decoded baseline document; BaselineError naming ``path`` and the problem."""
    _check_format(doc, path)
    try:
        for key in ("created", "session"):
            expect(isinstance(doc.get(key), str) and doc[key] != "", key, doc.get(key), "a non-empty str")
        if "machine" not in doc:
            raise ValueError("missing 'machine'")
        machine = Machine.from_dict(doc["machine"])
        entries = _entries(doc.get("entries"))
    except (KeyError, TypeError, ValueError) as exc:
        raise BaselineError(path, f"malformed baseline: {exc}") from exc
    return Baseline(
        name=name, created=doc["created"], session=doc["session"], machine=machine, entries=entries, path=path
    )


def _check_format(doc: Any, path: Path) -> None:
    """BaselineError unless ``doc`` is an object of this format and version."""
    if not isinstance(doc, dict):
        raise BaselineError(path, f"not a pytest-jetmem baseline (top level is a JSON {type(doc).__name__})")
    fmt = doc.get("format")
    if fmt != FORMAT:
        raise BaselineError(path, f"not a pytest-jetmem baseline (format {fmt!r}, expected {FORMAT!r})")
    version = doc.get("version")
    if not is_int(version) or version not in READS:
        raise BaselineError(
            path,
            f"unsupported baseline format version {version!r} (this pytest-jetmem reads versions "
            f"{', '.join(map(str, READS))}); use a matching pytest-jetmem or save the baseline again",
        )


def _entries(raw_entries: Any) -> dict[str, Entry]:
    """The ``"entries"`` object's entries; ValueError naming the entry that is malformed."""
    expect(isinstance(raw_entries, dict), "entries", type(raw_entries).__name__, "an object")
    entries: dict[str, Entry] = {}
    for key, raw in raw_entries.items():
        try:
            entries[key] = Entry.from_dict(raw)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"entries[{key!r}]: {exc}") from exc
    return entries


def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (:func:`write_atomic`, the folder fsynced too)."""
    try:
        write_atomic(path, data, sync_dir=True)
    except OSError as exc:
        raise BaselineError(path, f"cannot write: {exc}", BaselineErrorKind.CANNOT_WRITE) from exc


#: Runs an entry keeps at most (the newest), whatever the window.
MAX_RUNS = 50


def _append_runs(old: Entry, new: Entry, old_session: str, new_session: str, window: int) -> Entry:
    """``old``'s runs then ``new``'s, each run labelled with its session; the newest ``window`` sessions kept."""
    runs = (*old.run_samples, *new.run_samples)
    sessions = (
        *(old.run_sessions or (old_session,) * len(old.run_samples)),
        *(new.run_sessions or (new_session,) * len(new.run_samples)),
    )
    keep = list(dict.fromkeys(sessions))[-window:]
    return _with_runs(new, [(s, r) for s, r in zip(sessions, runs, strict=True) if s in keep][-MAX_RUNS:])


def _with_runs(entry: Entry, pairs: list[tuple[str, tuple[float, ...]]]) -> Entry:
    """``entry`` holding exactly the (session, run samples) ``pairs``; ``samples`` is all of them."""
    return replace(
        entry,
        samples=tuple(v for _, run in pairs for v in run),
        runs=tuple(run for _, run in pairs),
        run_sessions=tuple(s for s, _ in pairs),
    )


def _labelled(entry: Entry, session: str) -> Entry:
    """``entry`` with every run labelled with its session (unlabelled runs: ``session``'s)."""
    if entry.run_sessions:
        return entry
    runs = entry.run_samples
    return replace(entry, runs=runs, run_sessions=(session,) * len(runs))


def _without_session(entry: Entry, session: str, file_session: str) -> Entry | None:
    """``entry`` without the runs of ``session`` (None if nothing is left)."""
    sessions = entry.run_sessions or (file_session,) * len(entry.run_samples)
    kept = [(s, r) for s, r in zip(sessions, entry.run_samples, strict=True) if s != session]
    return _with_runs(entry, kept) if kept else None


class BaselineStore:
    """The baselines in one directory, one ``NAME.json`` file each."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    @staticmethod
    def check_name(name: str) -> str:
        """``name`` if it is a valid baseline name (:data:`NAME_RULES`), else ValueError saying the rules."""
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
            raise ValueError(f"invalid baseline name {name!r}: use {NAME_RULES}")
        return name

    def path(self, name: str) -> Path:
        """The file of baseline ``name``: ``<directory>/<name>.json``, each '/' of the name written as ``%2F``.

        The file is always directly in the directory (ValueError for a name that breaks :data:`NAME_RULES`).
        """
        return self.directory / f"{self.check_name(name).replace('/', SLASH)}.json"

    def exists(self, name: str) -> bool:
        """Whether baseline ``name`` has a file."""
        return self.path(name).is_file()

    def names(self) -> list[str]:
        """Sorted names of the baselines in the directory (empty if it does not exist)."""
        if not self.directory.is_dir():
            return []
        stems = (p.name[: -len(".json")] for p in self.directory.iterdir() if p.name.endswith(".json") and p.is_file())
        return sorted(name for name in (stem.replace(SLASH, "/") for stem in stems) if _NAME_RE.fullmatch(name))

    def load(self, name: str) -> Baseline:
        """Read and check baseline ``name``; BaselineError naming the file (BaselineNotFound if missing)."""
        path = self.path(name)
        return self._read(path, name)

    @staticmethod
    def _read(path: Path, name: str) -> Baseline:
        try:
            raw = path.read_bytes()
        except FileNotFoundError as exc:
            raise BaselineNotFound(path, "no such baseline file") from exc
        except OSError as exc:
            raise BaselineError(path, f"cannot read: {exc.strerror or exc}") from exc
        try:
            doc = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise BaselineError(path, f"corrupt baseline: not UTF-8 ({exc})") from exc
        except json.JSONDecodeError as exc:
            raise BaselineError(path, f"corrupt baseline: not valid JSON ({exc})") from exc
        return _parse(doc, name, path)

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        """Hold an exclusive flock on ``<path>.lock`` (a sibling file, left in place)."""
        if fcntl is None:  # pragma: no cover - not POSIX
            raise BaselineError(
                path,
                "saving baselines needs POSIX file locks (fcntl), missing on this platform",
                BaselineErrorKind.CANNOT_WRITE,
            )
        lock_path = path.with_name(path.name + ".lock")
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise BaselineError(
                path, f"cannot open lock file {lock_path}: {exc}", BaselineErrorKind.CANNOT_WRITE
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def save(
        self,
        name: str,
        machine: Machine,
        entries: Mapping[str, Entry | Mapping[str, Any]],
        session: str,
        overwrite: bool = False,
        append: bool = False,
        window: int = WINDOW_SESSIONS,
    ) -> Baseline:
        """Merge ``entries`` into baseline ``name`` for ``session`` and return the baseline as written.

        Same session: entries are merged (a key saved again is replaced); a different machine fingerprint
        is a BaselineError. Another session's (or an unreadable) file: BaselineExists / BaselineError unless
        ``overwrite``; then it is kept as ``NAME.json.prev`` and replaced. With ``append``, another
        session's runs are added to the existing entries instead (same machine fingerprint required; the
        runs of the newest ``window`` sessions, at most ``MAX_RUNS``, are kept, each labelled with its
        session), so a baseline holds the spread between sessions.
        Safe across processes.
        """
        saving = _Saving(name, self.path(name), machine, session, _checked_entries(machine, session, entries), window)
        self._make_directory(saving.path)
        with self._locked(saving.path):
            existing, unreadable = self._existing(saving.path, name)
            if unreadable is not None and not overwrite:
                raise BaselineError(
                    saving.path,
                    f"cannot add to it ({unreadable.reason}); pass overwrite to replace it "
                    f"(the old file is kept as {saving.prev.name})",
                    BaselineErrorKind.CANNOT_ADD,
                ) from unreadable
            if existing is not None and existing.session == session:
                baseline = _merge_this_session(existing, saving)
            elif existing is not None and append:
                baseline = _append_this_session(existing, saving)
            else:
                baseline = _replace(existing, saving, overwrite=overwrite, kept=unreadable is not None)
            _atomic_write(saving.path, json.dumps(baseline.to_dict(), indent=1, allow_nan=False).encode() + b"\n")
        return baseline

    def _make_directory(self, path: Path) -> None:
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BaselineError(
                path, f"cannot create directory {self.directory}: {exc}", BaselineErrorKind.CANNOT_WRITE
            ) from exc

    def _existing(self, path: Path, name: str) -> tuple[Baseline | None, BaselineError | None]:
        """The baseline in ``path`` (None: no file), or why it cannot be read (None: it can)."""
        try:
            return self._read(path, name), None
        except BaselineNotFound:
            return None, None
        except BaselineError as exc:
            return None, exc


def _checked_entries(
    machine: Machine, session: str, entries: Mapping[str, Entry | Mapping[str, Any]]
) -> dict[str, Entry]:
    """What :meth:`BaselineStore.save` is given, checked: TypeError / ValueError naming the argument or entry."""
    if not isinstance(machine, Machine):
        raise TypeError(f"machine must be a Machine, got {type(machine).__name__}")
    if not isinstance(session, str) or not session:
        raise ValueError(f"session must be a non-empty str, got {session!r}")
    new: dict[str, Entry] = {}
    for key, value in entries.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"entry keys must be non-empty str, got {key!r}")
        try:
            new[key] = value if isinstance(value, Entry) else Entry.from_dict(value)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"entry {key!r}: {exc}") from exc
    return new


@dataclass(frozen=True)
class _Saving:
    """One save: the baseline's name and file, and what this session brings to it."""

    name: str
    path: Path
    machine: Machine
    session: str
    new: dict[str, Entry]
    window: int

    @property
    def prev(self) -> Path:
        """Where a replaced file is kept: ``NAME.json.prev``."""
        return self.path.with_name(self.path.name + ".prev")

    def baseline(self, created: str, machine: Machine, entries: dict[str, Entry]) -> Baseline:
        """The baseline this session writes."""
        return Baseline(
            name=self.name, created=created, session=self.session, machine=machine, entries=entries, path=self.path
        )

    def same_machine(self, existing: Baseline, refusal: str) -> None:
        """BaselineError (``refusal``: the differences) unless ``existing`` comes from this session's machine."""
        diffs = existing.machine.mismatches(self.machine)
        if diffs:
            raise BaselineError(self.path, refusal + "; ".join(diffs), BaselineErrorKind.OTHER_MACHINE)


def _merge_this_session(existing: Baseline, saving: _Saving) -> Baseline:
    """This session saves again (an xdist worker after another): a key saved again replaces this session's runs,
    not older ones."""
    saving.same_machine(existing, f"session {saving.session} already saved it from another machine: ")
    merged = dict(existing.entries)
    for key, entry in saving.new.items():
        old = merged.get(key)
        older = _without_session(old, saving.session, existing.session) if old is not None else None
        merged[key] = (
            entry if older is None else _append_runs(older, entry, existing.session, saving.session, saving.window)
        )
    return saving.baseline(existing.created, existing.machine, merged)


def _append_this_session(existing: Baseline, saving: _Saving) -> Baseline:
    """Another session's baseline: this session's runs added to it (the newest ``window`` sessions kept)."""
    saving.same_machine(existing, "cannot append runs from another machine: ")
    # every run labelled with its session, so that an xdist worker of this session that saves after this one
    # replaces only this session's runs
    merged = {k: _labelled(e, existing.session) for k, e in existing.entries.items()}
    for key, entry in saving.new.items():
        old = merged.get(key)
        merged[key] = (
            _labelled(entry, saving.session)
            if old is None
            else _append_runs(old, entry, existing.session, saving.session, saving.window)
        )
    return saving.baseline(existing.created, existing.machine, merged)


def _replace(existing: Baseline | None, saving: _Saving, *, overwrite: bool, kept: bool) -> Baseline:
    """A new baseline of this session's entries; another session's file is refused unless ``overwrite``, and
    then kept as ``NAME.json.prev`` (as is an unreadable one: ``kept``)."""
    if existing is not None and not overwrite:
        raise BaselineExists(
            saving.path,
            f"baseline {saving.name!r} exists from another session ({existing.session}, created "
            f"{existing.created}); pass overwrite to replace it (the old file is kept as {saving.prev.name})",
        )
    if existing is not None or kept:
        try:
            old = saving.path.read_bytes()
        except OSError as exc:
            raise BaselineError(
                saving.path, f"cannot read it to keep a copy: {exc}", BaselineErrorKind.CANNOT_WRITE
            ) from exc
        _atomic_write(saving.prev, old)
    return saving.baseline(_utc_now(), saving.machine, dict(saving.new))
