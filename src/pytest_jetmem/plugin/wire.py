"""What crosses between a parent session and its children: one frozen type per message, one attribute on reports.

A child session's channel (:mod:`~pytest_jetmem.plugin.children`) carries JSON lines, one message a line, each
an object with its ``type`` and its fields (:func:`encode`):

- the parent's commands (:data:`Command`): :class:`Run` one test, :class:`Quit`;
- the child's answers (:data:`Answer`): :class:`Collected` first, then per test each :class:`ReportSent` as it is
  made and :class:`Done`, and :class:`SessionErrors` when its session ends.

:func:`decode_command` and :func:`decode_answer` read a line back; a line that is not JSON, names another type or
has a field missing or of the wrong type raises :class:`WireError` (a child of another pytest-jetmem version, say).

What the plugin adds to a test report travels in one namespaced attribute, ``report.jetmem``
(:data:`NOTES_ATTRIBUTE`): a JSON-able object made from :class:`ReportNotes` (:func:`add_notes`, read with
:func:`notes_of`). pytest's report serialiser copies a report's attributes, so the notes come along wherever a
report goes: from a child, and from an xdist worker to its controller.

An xdist worker hands its controller the summary of its ``--jetmem-against`` pair as a :class:`PairSummary`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from pytest_jetmem.errors import WireError

__all__ = [
    "AGAINST_OUTPUT",
    "NOTES_ATTRIBUTE",
    "Answer",
    "Collected",
    "Command",
    "Done",
    "PairSummary",
    "Quit",
    "ReportNotes",
    "ReportSent",
    "Run",
    "SessionErrors",
    "WireError",
    "add_notes",
    "decode_answer",
    "decode_command",
    "encode",
    "notes_of",
]


class _Fields:
    """A message's fields as JSON gave them, read with the type each must have (:class:`WireError` otherwise)."""

    def __init__(self, what: str, data: object) -> None:
        if not isinstance(data, Mapping):
            raise WireError(f"{what}: expected a JSON object, got {data!r}")
        self.what = what
        self.data: Mapping[str, object] = data

    def _get(self, name: str, kinds: tuple[type, ...], expected: str, default: object) -> Any:
        value = self.data.get(name, default)
        if value is _REQUIRED:
            raise WireError(f"{self.what}: the field {name!r} is missing ({expected} expected)")
        if value is not default and (not isinstance(value, kinds) or (bool not in kinds and isinstance(value, bool))):
            raise WireError(f"{self.what}: the field {name!r} is {value!r}; {expected} expected")
        return value

    def text(self, name: str) -> str:
        return str(self._get(name, (str,), "a string", _REQUIRED))

    def optional_text(self, name: str) -> str | None:
        value: str | None = self._get(name, (str,), "a string or null", None)
        return value

    def flag(self, name: str, default: bool) -> bool:
        return bool(self._get(name, (bool,), "true or false", default))

    def optional_flag(self, name: str) -> bool | None:
        value: bool | None = self._get(name, (bool,), "true, false or null", None)
        return value

    def integer(self, name: str, default: int) -> int:
        return int(self._get(name, (int,), "an integer", default))

    def optional_integer(self, name: str) -> int | None:
        value: int | None = self._get(name, (int,), "an integer or null", None)
        return value

    def texts(self, name: str) -> tuple[str, ...]:
        values = self._get(name, (list, tuple), "a list of strings", ())
        if not all(isinstance(v, str) for v in values):
            raise WireError(f"{self.what}: the field {name!r} is {values!r}; a list of strings expected")
        return tuple(values)

    def objects(self, name: str) -> tuple[dict[str, Any], ...]:
        values = self._get(name, (list, tuple), "a list of JSON objects", ())
        if not all(isinstance(v, Mapping) for v in values):
            raise WireError(f"{self.what}: the field {name!r} is {values!r}; a list of JSON objects expected")
        return tuple(dict(v) for v in values)

    def obj(self, name: str) -> dict[str, Any]:
        return dict(self._get(name, (Mapping,), "a JSON object", _REQUIRED))


_REQUIRED = object()


def _json(message: object) -> dict[str, Any]:
    """A dataclass's fields as JSON values (tuples as lists)."""
    out: dict[str, Any] = {}
    for f in fields(message):  # type: ignore[arg-type]
        value = getattr(message, f.name)
        out[f.name] = list(value) if isinstance(value, tuple) else value
    return out


# -- the parent's commands --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """Run the test ``nodeid`` (``next``: the test after it, for its fixtures' teardown; None: none or unknown).

    ``seq`` and ``paired`` are ``--jetmem-against``'s: the test's number in the session (the two sides meet on
    it) and whether the other side runs it too.
    """

    TYPE: ClassVar[str] = "run"
    nodeid: str
    next: str | None = None
    seq: int = 0
    paired: bool = True

    @classmethod
    def from_json(cls, data: object) -> Run:
        f = _Fields(cls.TYPE, data)
        return cls(f.text("nodeid"), f.optional_text("next"), f.integer("seq", 0), f.flag("paired", True))


@dataclass(frozen=True)
class Quit:
    """End the session (closing the command pipe says so too)."""

    TYPE: ClassVar[str] = "quit"

    @classmethod
    def from_json(cls, data: object) -> Quit:
        _Fields(cls.TYPE, data)
        return cls()


# -- the child's answers ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Collected:
    """The node ids the child collected, its first answer."""

    TYPE: ClassVar[str] = "collected"
    nodeids: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: object) -> Collected:
        return cls(_Fields(cls.TYPE, data).texts("nodeids"))


@dataclass(frozen=True)
class ReportSent:
    """One of the test's reports, as pytest's ``pytest_report_to_serializable`` made it."""

    TYPE: ClassVar[str] = "report"
    report: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: object) -> ReportSent:
        return cls(_Fields(cls.TYPE, data).obj("report"))


@dataclass(frozen=True)
class Done:
    """The test ``nodeid`` has run (``missing``: the child has no such test, nothing ran).

    ``broken``: the sticky CUDA error that left the child's context unusable (None: none); ``integrated``:
    whether its GPU is integrated (None: not probed).
    """

    TYPE: ClassVar[str] = "done"
    nodeid: str
    missing: bool = False
    broken: str | None = None
    integrated: bool | None = None

    @classmethod
    def from_json(cls, data: object) -> Done:
        f = _Fields(cls.TYPE, data)
        return cls(f.text("nodeid"), f.flag("missing", False), f.optional_text("broken"), f.optional_flag("integrated"))


@dataclass(frozen=True)
class SessionErrors:
    """The child session's errors (``GateSession.errors``), its last answer."""

    TYPE: ClassVar[str] = "errors"
    errors: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, data: object) -> SessionErrors:
        return cls(_Fields(cls.TYPE, data).texts("errors"))


Command = Run | Quit
Answer = Collected | ReportSent | Done | SessionErrors
_COMMANDS: dict[str, type[Command]] = {t.TYPE: t for t in (Run, Quit)}
_ANSWERS: dict[str, type[Answer]] = {t.TYPE: t for t in (Collected, ReportSent, Done, SessionErrors)}


def encode(message: Command | Answer) -> str:
    """``message`` as one line of JSON (with its newline)."""
    return json.dumps({"type": message.TYPE, **_json(message)}) + "\n"


def _decode(line: str, types: Mapping[str, type[Any]], what: str) -> Any:
    try:
        data = json.loads(line)
    except ValueError:
        raise WireError(f"not a JSON line: {line.strip()[:200]!r} ({what} expected)") from None
    kind = data.get("type") if isinstance(data, dict) else None
    message_type = types.get(kind) if isinstance(kind, str) else None
    if message_type is None:
        known = ", ".join(sorted(types))
        raise WireError(f"not a {what}: {line.strip()[:200]!r} (a JSON object whose type is one of {known})")
    return message_type.from_json({k: v for k, v in data.items() if k != "type"})


def decode_command(line: str) -> Command:
    """The parent's command on ``line``; :class:`WireError` where it is none."""
    command: Command = _decode(line, _COMMANDS, "command")
    return command


def decode_answer(line: str) -> Answer:
    """The child's answer on ``line``; :class:`WireError` where it is none."""
    answer: Answer = _decode(line, _ANSWERS, "child's answer")
    return answer


# -- the one report attribute -----------------------------------------------------------------------------------

#: The attribute of a test report that holds its notes (:class:`ReportNotes`, as a JSON-able object).
NOTES_ATTRIBUTE = "jetmem"


@dataclass(frozen=True)
class ReportNotes:
    """What the plugin says on a test report, beyond pytest's own fields.

    - ``records``: the measurement records of a call report (:meth:`MeasurementRecord.to_json` objects);
    - ``entries``: in a child, the baseline entries of its call report's measurements (``Entry.to_dict``), for
      the parent to save;
    - ``strict_violation``: in a ``memmode_concurrency`` child, the Tegra-strict violation the phase raised;
    - ``cuda_error``: there, the name of the CUDA error that failed the phase;
    - ``concurrent_managed_access``: there, on the setup report, the device's CONCURRENT_MANAGED_ACCESS.
    """

    records: tuple[dict[str, Any], ...] = ()
    entries: tuple[dict[str, Any], ...] = ()
    strict_violation: str | None = None
    cuda_error: str | None = None
    concurrent_managed_access: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The notes as a JSON object: the fields that say something (empty lists and nulls left out)."""
        return {k: v for k, v in _json(self).items() if v not in (None, [])}

    @classmethod
    def from_json(cls, data: object) -> ReportNotes:
        f = _Fields(f"the report's {NOTES_ATTRIBUTE!r} notes", data)
        return cls(
            records=f.objects("records"),
            entries=f.objects("entries"),
            strict_violation=f.optional_text("strict_violation"),
            cuda_error=f.optional_text("cuda_error"),
            concurrent_managed_access=f.optional_integer("concurrent_managed_access"),
        )


def notes_of(report: object) -> ReportNotes:
    """The notes on ``report`` (empty where it has none); :class:`WireError` where they are not notes."""
    data = getattr(report, NOTES_ATTRIBUTE, None)
    return ReportNotes() if data is None else ReportNotes.from_json(data)


def add_notes(report: object, notes: ReportNotes) -> None:
    """Add ``notes`` to those on ``report``: each of its fields that says something (not empty, not None) replaces
    the report's."""
    given = notes.to_json()
    if given:
        setattr(report, NOTES_ATTRIBUTE, {**notes_of(report).to_json(), **given})


# -- xdist: what a worker hands its controller ------------------------------------------------------------------

#: The key of a worker's ``workeroutput`` that holds its ``--jetmem-against`` pair's :class:`PairSummary`.
AGAINST_OUTPUT = "jetmem_against"


@dataclass(frozen=True)
class PairSummary:
    """What the terminal summary says of one ``--jetmem-against`` pair: the base's label, how many measurements it
    compared, the tests only one side has, and why no GPU could be used (None: one could)."""

    label: str
    judged: int = 0
    only_in_change: tuple[str, ...] = ()
    only_in_base: tuple[str, ...] = ()
    no_gpu: str | None = None

    def to_json(self) -> dict[str, Any]:
        return _json(self)

    @classmethod
    def from_json(cls, data: object) -> PairSummary:
        f = _Fields("a --jetmem-against pair's summary", data)
        only = f.texts("only_in_change"), f.texts("only_in_base")
        return cls(f.text("label"), f.integer("judged", 0), *only, no_gpu=f.optional_text("no_gpu"))
