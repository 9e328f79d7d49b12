"""correctness.concurrency: the ``memmode_concurrency`` marker's arguments and the verdict on a child's ending."""

from __future__ import annotations

import math
import os
import warnings

import pytest

from fakes.child_results import child_result
from pytest_jetmem.correctness.concurrency import (
    DEFAULT_TIMEOUT_S,
    EXPECTS,
    MARKER,
    ConcurrencySpec,
    judge,
    parse_marker,
)
from pytest_jetmem.correctness.isolation import ChildResult, Outcome
from pytest_jetmem.cuda import driver
from pytest_jetmem.cuda.driver import MEM_ATTACH_HOST
from pytest_jetmem.plugin import concurrency as plugin_concurrency

pytestmark = pytest.mark.skipif(os.name != "posix", reason="child processes need POSIX process groups")


# ----------------------------------------------------------------------------------------------------------
# Marker validation


def mark(*args: object, **kwargs: object) -> pytest.Mark:
    with warnings.catch_warnings():  # the marker is registered by the plugin, which this session may lack
        warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
        return pytest.mark.memmode_concurrency(*args, **kwargs).mark


def test_parse_marker_defaults_and_forms() -> None:
    assert parse_marker(mark(), "t") == ConcurrencySpec("ok", DEFAULT_TIMEOUT_S)
    assert parse_marker(mark("auto"), "t") == ConcurrencySpec("auto", DEFAULT_TIMEOUT_S)
    assert parse_marker(mark(expect="fault", timeout=5), "t") == ConcurrencySpec("fault", 5.0)
    assert parse_marker(mark(timeout=0.5), "t").timeout_s == 0.5


@pytest.mark.parametrize(
    ("kwargs", "args", "needle"),
    [
        ({"expect": "maybe"}, (), "expect must be one of 'ok', 'fault', 'auto', got 'maybe'"),
        ({"expect": 1}, (), "expect must be one of 'ok', 'fault', 'auto', got 1"),
        ({"expect": "OK"}, (), "got 'OK'"),
        ({}, ("crash",), "got 'crash'"),
        ({"timeout": 0}, (), "timeout must be a positive number of seconds, got 0"),
        ({"timeout": -3}, (), "got -3"),
        ({"timeout": "10"}, (), "got '10'"),
        ({"timeout": True}, (), "got True"),
        ({"timeout": math.nan}, (), "got nan"),
        ({"timeout": math.inf}, (), "got inf"),
        ({"expct": "ok"}, (), "unknown argument(s) expct"),
        ({}, ("ok", "fault"), "at most one positional argument"),
        ({"expect": "ok"}, ("fault",), "got expect twice"),
    ],
)
def test_parse_marker_rejects(kwargs: dict, args: tuple, needle: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_marker(mark(*args, **kwargs), "test_x.py::test_bad")
    text = str(err.value)
    assert text.startswith("test_x.py::test_bad: @pytest.mark.memmode_concurrency")
    assert needle in text


# ----------------------------------------------------------------------------------------------------------
# The verdict, from every kind of child ending


PASSED, FAULT = child_result(Outcome.PASSED), child_result(Outcome.FAULT)
FAILED = child_result(Outcome.FAILED, message="assert 1 == 2")
SIGBUS = child_result(Outcome.SIGNAL, returncode=-7, signal_name="SIGBUS")  # a fault of an undocumented kind
CUDA = child_result(Outcome.CUDA_ERROR, cuda_error_name="CUDA_ERROR_ILLEGAL_ADDRESS", message="sync failed")
TIMEOUT = child_result(Outcome.TIMEOUT, message="the child did not finish within 1 s")
ABORT = child_result(Outcome.SIGNAL, returncode=-6, signal_name="SIGABRT")
CRASHED = child_result(Outcome.CRASHED, message="the child exited with status 4 without writing a result")


@pytest.mark.parametrize(
    ("expect", "result", "cma", "outcome"),
    [
        ("ok", PASSED, 1, "passed"),
        ("ok", PASSED, None, "passed"),
        ("ok", FAULT, 0, "failed"),
        ("ok", FAULT, 1, "failed"),
        ("ok", FAILED, 1, "failed"),
        ("ok", CUDA, 1, "failed"),
        ("ok", TIMEOUT, 1, "failed"),
        ("ok", ABORT, 1, "failed"),
        ("ok", CRASHED, 1, "failed"),
        ("fault", FAULT, 0, "passed"),
        ("fault", SIGBUS, 0, "failed"),  # only SIGSEGV is the documented fault
        ("fault", FAULT, None, "passed"),
        ("fault", FAULT, 1, "passed"),  # the test says so: it faults on purpose
        ("fault", PASSED, 1, "failed"),
        ("fault", FAILED, 0, "failed"),
        ("fault", CUDA, 0, "failed"),
        ("fault", ABORT, 0, "failed"),  # SIGABRT is no managed-memory fault
        ("fault", TIMEOUT, 0, "failed"),
        # auto: fault exactly where CONCURRENT_MANAGED_ACCESS is 0
        ("auto", FAULT, 0, "passed"),
        ("auto", SIGBUS, 0, "failed"),
        ("auto", PASSED, 0, "failed"),
        ("auto", FAILED, 0, "failed"),
        ("auto", PASSED, 1, "passed"),
        ("auto", FAULT, 1, "failed"),
        ("auto", FAILED, 1, "failed"),
        ("auto", PASSED, None, "failed"),  # cannot decide
        ("auto", FAULT, None, "failed"),
    ],
)
def test_judge_table(expect: str, result: ChildResult, cma: int | None, outcome: str) -> None:
    verdict = judge(expect, result, cma)
    assert verdict.outcome == outcome, verdict.message
    assert verdict.message.startswith(f"memmode_concurrency(expect={expect!r})")


def test_judge_messages() -> None:
    text = judge("ok", FAULT, 0).message
    assert "the test must survive on this device" in text
    assert "CONCURRENT_MANAGED_ACCESS=0" in text and "jetmem.attach_host(buf)" in text  # isolation.explain()
    text = judge("ok", FAULT, 1).message
    assert "not the managed-memory concurrency rule" in text
    assert "assert 1 == 2" in judge("ok", FAILED, 1).message
    assert "CUDA_ERROR_ILLEGAL_ADDRESS: sync failed" in judge("ok", CUDA, 1).message
    text = judge("fault", PASSED, 1).message
    assert "expected the child to be killed by SIGSEGV (the documented fault), but the test passed" in text
    assert "CONCURRENT_MANAGED_ACCESS=1" in text
    assert "got failed" in judge("fault", FAILED, 0).message
    text = judge("auto", PASSED, 0).message
    assert "CONCURRENT_MANAGED_ACCESS=0 on this device, so the test must fault" in text
    text = judge("auto", FAULT, 1).message
    assert "CONCURRENT_MANAGED_ACCESS=1 on this device, so the test must not fault" in text
    assert "cannot decide" in judge("auto", PASSED, None).message
    text = judge("auto", SIGBUS, 0).message
    assert "expected the documented fault (SIGSEGV), got signal" in text
    assert "killed by SIGBUS, a fault of an undocumented kind" in text


def test_judge_skipped_child_skips() -> None:
    verdict = judge("fault", child_result(Outcome.SKIPPED, message="no GPU"), None)
    assert (verdict.outcome, verdict.message) == ("skipped", "the test was skipped in the child: no GPU")


def test_judge_tegra_strict() -> None:
    violation = "t: Tegra-strict: host view (Buffer.host) of managed <Buffer ...> ..."
    strict_failed = child_result(Outcome.FAILED, message="TegraStrictError: ...")
    # a strict violation is an emulated fault
    verdict = judge("ok", strict_failed, 1, tegra_strict=True, strict_violation=violation)
    assert verdict.outcome == "failed"
    assert "would crash on Jetson" in verdict.message and violation in verdict.message
    assert judge("fault", strict_failed, 1, tegra_strict=True, strict_violation=violation).passed
    # auto under strict: the device counts as one without concurrent managed access
    assert judge("auto", strict_failed, 1, tegra_strict=True, strict_violation=violation).passed
    verdict = judge("auto", PASSED, 1, tegra_strict=True)
    assert verdict.outcome == "failed" and "--jetmem-tegra-strict" in verdict.message
    assert judge("auto", FAULT, None, tegra_strict=True).passed
    # a violation the test caught (it passed) is no fault; a plain failure is not one either
    assert judge("ok", PASSED, 1, tegra_strict=True, strict_violation=violation).passed
    assert not judge("fault", FAILED, 1, tegra_strict=True).passed


def test_judge_rejects_unknown_expect() -> None:
    with pytest.raises(ValueError, match="expect must be one of"):
        judge("sometimes", PASSED, 1)


def test_module_constants() -> None:
    assert MARKER == plugin_concurrency.MARKER == "memmode_concurrency"
    assert EXPECTS == ("ok", "fault", "auto")
    assert driver.MEM_ATTACH_HOST == MEM_ATTACH_HOST
