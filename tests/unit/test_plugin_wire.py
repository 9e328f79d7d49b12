"""plugin.wire: one type per message of a child's channel, one namespaced attribute on reports, and what breaks."""

from __future__ import annotations

import json
from typing import Literal

import pytest

from pytest_jetmem.plugin.wire import (
    NOTES_ATTRIBUTE,
    Collected,
    Done,
    PairSummary,
    Quit,
    ReportNotes,
    ReportSent,
    Run,
    SessionErrors,
    WireError,
    add_notes,
    decode_answer,
    decode_command,
    encode,
    notes_of,
)

COMMANDS = [
    Run("test_a.py::test_x"),
    Run("test_a.py::test_x[device]", next="test_a.py::test_y", seq=7, paired=False),
    Quit(),
]
ANSWERS = [
    Collected(("test_a.py::test_x", "test_a.py::test_y")),
    Collected(),
    ReportSent({"nodeid": "test_a.py::test_x", "when": "call", "outcome": "passed", "jetmem": {"records": []}}),
    Done("test_a.py::test_x"),
    Done("test_a.py::test_x", missing=True),
    Done("test_a.py::test_x", broken="CUDA_ERROR_ILLEGAL_ADDRESS in test_a.py::test_x", integrated=True),
    SessionErrors(("baseline 'main' could not be read",)),
    SessionErrors(),
]


@pytest.mark.parametrize("command", COMMANDS, ids=repr)
def test_a_command_comes_back_as_it_was_sent(command: Run | Quit) -> None:
    line = encode(command)
    assert line.endswith("\n") and line.count("\n") == 1
    assert json.loads(line)["type"] == command.TYPE
    assert decode_command(line) == command


@pytest.mark.parametrize("answer", ANSWERS, ids=repr)
def test_an_answer_comes_back_as_it_was_sent(answer: Collected | ReportSent | Done | SessionErrors) -> None:
    line = encode(answer)
    assert line.count("\n") == 1
    assert decode_answer(line) == answer


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("not json\n", r"not a JSON line: 'not json' \(command expected\)"),
        ("[1, 2]\n", r"not a command: '\[1, 2\]' \(a JSON object whose type is one of quit, run\)"),
        ('{"cmd": "run", "nodeid": "t.py::t"}\n', r"not a command: .*\"cmd\": \"run\""),  # the old, untyped wire
        ('{"type": "collected", "nodeids": []}\n', r"not a command: .*type is one of quit, run"),  # an answer
        ('{"type": "run"}\n', r"run: the field 'nodeid' is missing \(a string expected\)"),
        ('{"type": "run", "nodeid": 3}\n', r"run: the field 'nodeid' is 3; a string expected"),
        ('{"type": "run", "nodeid": "t", "seq": "2"}\n', r"run: the field 'seq' is '2'; an integer expected"),
        ('{"type": "run", "nodeid": "t", "seq": true}\n', r"run: the field 'seq' is True; an integer expected"),
        ('{"type": "run", "nodeid": "t", "paired": 1}\n', r"run: the field 'paired' is 1; true or false expected"),
    ],
)
def test_a_line_that_is_no_command_says_what_it_is_and_what_was_expected(line: str, match: str) -> None:
    with pytest.raises(WireError, match=match):
        decode_command(line)


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ('{"collected": ["t.py::t"]}\n', r"not a child's answer: .*type is one of collected, done, errors, report"),
        ('{"type": "run", "nodeid": "t"}\n', r"not a child's answer"),
        ('{"type": "collected", "nodeids": ["a", 2]}\n', r"collected: the field 'nodeids' is \['a', 2\]; a list of st"),
        ('{"type": "report", "report": []}\n', r"report: the field 'report' is \[\]; a JSON object expected"),
        ('{"type": "done", "nodeid": "t", "broken": 700}\n', r"done: the field 'broken' is 700; a string or null"),
        ('{"type": "errors", "errors": null}\n', r"errors: the field 'errors' is None; a list of strings expected"),
        ("\n", r"not a JSON line"),
    ],
)
def test_a_line_that_is_no_answer_says_what_it_is_and_what_was_expected(line: str, match: str) -> None:
    with pytest.raises(WireError, match=match):
        decode_answer(line)


def test_wire_errors_are_value_errors() -> None:
    """The parent's runners catch ValueError (as they did json's) and fail the test with the message."""
    assert issubclass(WireError, ValueError)


# -- the one report attribute -----------------------------------------------------------------------------------


def _report(when: Literal["setup", "call", "teardown"] = "call") -> pytest.TestReport:
    return pytest.TestReport("t.py::t", ("t.py", 0, "t"), {}, "passed", None, when)


def test_a_report_without_notes_has_empty_ones() -> None:
    report = _report()
    assert notes_of(report) == ReportNotes()
    add_notes(report, ReportNotes())  # nothing to say: nothing set
    assert not hasattr(report, NOTES_ATTRIBUTE)


def test_notes_are_one_json_object_and_each_field_added_replaces_its_own() -> None:
    report = _report("setup")
    add_notes(report, ReportNotes(concurrent_managed_access=0))
    add_notes(report, ReportNotes(cuda_error="CUDA_ERROR_ILLEGAL_ADDRESS", records=({"version": 1},)))
    add_notes(report, ReportNotes(cuda_error="CUDA_ERROR_LAUNCH_FAILED"))
    assert getattr(report, NOTES_ATTRIBUTE) == {
        "records": [{"version": 1}],
        "cuda_error": "CUDA_ERROR_LAUNCH_FAILED",
        "concurrent_managed_access": 0,
    }
    assert json.loads(json.dumps(getattr(report, NOTES_ATTRIBUTE))) == getattr(report, NOTES_ATTRIBUTE)
    assert notes_of(report) == ReportNotes(
        records=({"version": 1},), cuda_error="CUDA_ERROR_LAUNCH_FAILED", concurrent_managed_access=0
    )
    for old in ("jetmem_rows", "jetmem_entries", "jetmem_cuda_error", "jetmem_concurrent_managed_access"):
        assert not hasattr(report, old)  # one namespaced attribute, no loose ones


def test_notes_travel_with_pytests_report_serialiser(pytestconfig: pytest.Config) -> None:
    """As a child's reports come back (JSON over a pipe) and as an xdist worker's reach its controller."""
    report = _report()
    notes = ReportNotes(
        records=({"version": 1, "key": "k"},),
        entries=({"nodeid": "t.py::t", "mode": "device"},),
        strict_violation="host write to managed memory while a kernel may run",
        cuda_error="CUDA_ERROR_ILLEGAL_ADDRESS",
        concurrent_managed_access=1,
    )
    add_notes(report, notes)
    hook = pytestconfig.hook
    data = json.loads(json.dumps(hook.pytest_report_to_serializable(config=pytestconfig, report=report)))
    back = hook.pytest_report_from_serializable(config=pytestconfig, data=data)
    assert notes_of(back) == notes
    execnet = pytest.importorskip("execnet")  # pytest-xdist's channel
    over_xdist = hook.pytest_report_from_serializable(
        config=pytestconfig,
        data=execnet.loads(execnet.dumps(hook.pytest_report_to_serializable(config=pytestconfig, report=report))),
    )
    assert notes_of(over_xdist) == notes


@pytest.mark.parametrize(
    ("notes", "match"),
    [
        ([], r"the report's 'jetmem' notes: expected a JSON object, got \[\]"),
        ({"records": {"version": 1}}, r"the field 'records' is \{'version': 1\}; a list of JSON objects expected"),
        ({"concurrent_managed_access": "1"}, r"the field 'concurrent_managed_access' is '1'; an integer or null"),
    ],
)
def test_notes_that_are_not_notes_say_so(notes: object, match: str) -> None:
    report = _report()
    setattr(report, NOTES_ATTRIBUTE, notes)
    with pytest.raises(WireError, match=match):
        notes_of(report)


def test_a_pair_summary_comes_back_from_an_xdist_worker_as_it_was_sent() -> None:
    summary = PairSummary("HEAD (0123456789ab)", 3, ("t.py::new",), (), no_gpu=None)
    assert PairSummary.from_json(json.loads(json.dumps(summary.to_json()))) == summary
    with pytest.raises(WireError, match=r"the field 'judged' is '3'; an integer expected"):
        PairSummary.from_json({"label": "x", "judged": "3"})


def test_the_judging_half_reads_the_notes_under_the_wire_s_attribute() -> None:
    from pytest_jetmem.plugin import judging, wire

    assert judging.NOTES_ATTRIBUTE == wire.NOTES_ATTRIBUTE
