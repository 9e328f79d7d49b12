"""``memmode_concurrency``, ``--jetmem-tegra-strict`` and stream attachment, without a GPU.

The child processes here are real (``python -m pytest <nodeid>``) and really die of SIGSEGV/SIGBUS; devices
come from the fake driver (tests/fakes/fake_driver.py), installed at the driver boundary only, by a conftest
in the pytester folder, so the child process gets one too.
"""

from __future__ import annotations

import math
import os
import re
import textwrap
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from fakes.child_results import child_result
from fakes.fake_driver import FakeDriver
from plugin_loading import plugin_args
from pytest_jetmem.correctness import strict
from pytest_jetmem.correctness.concurrency import (
    DEFAULT_TIMEOUT_S,
    EXPECTS,
    MARKER,
    ConcurrencySpec,
    judge,
    parse_marker,
)
from pytest_jetmem.correctness.isolation import CHILD_RESULT_ENV, ChildResult, Outcome
from pytest_jetmem.correctness.strict import TegraStrict, TegraStrictError
from pytest_jetmem.cuda import attach, driver
from pytest_jetmem.cuda.attachment import Attachment
from pytest_jetmem.cuda.compiler import KernelCache
from pytest_jetmem.cuda.device import open_device
from pytest_jetmem.cuda.driver import MEM_ATTACH_GLOBAL, MEM_ATTACH_HOST, MEM_ATTACH_SINGLE
from pytest_jetmem.cuda.session import CudaSession
from pytest_jetmem.handle import Jetmem
from pytest_jetmem.plugin import concurrency as plugin_concurrency
from pytest_jetmem.plugin.child_args import child_argv, forwarded_args

pytestmark = pytest.mark.skipif(os.name != "posix", reason="child processes need POSIX process groups")

TESTS_DIR = Path(__file__).resolve().parent.parent
PLUGIN = plugin_args()


def fake_conftest(parent: str = "no_device", child: str = "orin") -> str:
    """A conftest installing a FakeDriver: profile ``child`` in the memmode_concurrency child, ``parent`` else.

    The parent of these runs has no device at all by default: it must not need one.
    """
    return textwrap.dedent(
        f"""\
        import os, sys
        if {str(TESTS_DIR)!r} not in sys.path:
            sys.path.insert(0, {str(TESTS_DIR)!r})
        from fakes.fake_driver import FakeDriver
        from pytest_jetmem.cuda import driver

        IN_CHILD = bool(os.environ.get({CHILD_RESULT_ENV!r}))
        FAKE = FakeDriver({child!r} if IN_CHILD else {parent!r})
        driver.install(FAKE)
        """
    )


@pytest.fixture
def run_fake(
    pytester: pytest.Pytester, restore_driver_backend: None, jetmem_kernel_cache: Path
) -> Callable[..., pytest.RunResult]:
    """``run_fake(source, *args, parent=..., child=...)``: write the test file and conftest, run pytest in-process."""

    def run(source: str, *args: str, parent: str = "no_device", child: str = "orin") -> pytest.RunResult:
        pytester.makeconftest(fake_conftest(parent, child))
        pytester.makepyfile(test_it=textwrap.dedent(source))
        return pytester.runpytest(*PLUGIN, "-v", *args)

    return run


def outcomes(result: pytest.RunResult) -> dict[str, str]:
    """Test name -> PASSED/FAILED/SKIPPED/XFAIL/... from the ``-v`` lines of a run."""
    out = {}
    for line in result.outlines:
        m = re.match(r"test_it\.py::(\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


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


@pytest.mark.parametrize(
    ("marker", "needle"),
    [
        ('expect="sometimes"', "expect must be one of 'ok', 'fault', 'auto', got 'sometimes'"),
        ("timeout=0", "timeout must be a positive number of seconds, got 0"),
        ("timeout=-1.5", "timeout must be a positive number of seconds, got -1.5"),
    ],
)
def test_bad_marker_fails_at_collection_naming_test_and_argument(
    pytester: pytest.Pytester, marker: str, needle: str
) -> None:
    pytester.makepyfile(
        test_bad=f"""
        import pytest

        @pytest.mark.memmode_concurrency({marker})
        def test_wrong():
            raise AssertionError("must never run")

        def test_other():
            pass
        """
    )
    result = pytester.runpytest(*PLUGIN, "--collect-only")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([f"*test_bad.py::test_wrong: @pytest.mark.memmode_concurrency*{needle}*"])
    assert "must never run" not in result.stdout.str()


def test_marker_is_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest(*PLUGIN, "--markers")
    result.stdout.fnmatch_lines(["*@pytest.mark.memmode_concurrency(expect='ok', timeout=120)*"])


# ----------------------------------------------------------------------------------------------------------
# The verdict, from every kind of child ending


PASSED, FAULT = child_result(Outcome.PASSED), child_result(Outcome.FAULT)
FAILED = child_result(Outcome.FAILED, message="assert 1 == 2")
SIGBUS = child_result(Outcome.FAULT, returncode=-7, signal_name="SIGBUS")
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
        ("fault", SIGBUS, 0, "passed"),
        ("fault", FAULT, None, "passed"),
        ("fault", FAULT, 1, "passed"),  # the test says so: it faults on purpose
        ("fault", PASSED, 1, "failed"),
        ("fault", FAILED, 0, "failed"),
        ("fault", CUDA, 0, "failed"),
        ("fault", ABORT, 0, "failed"),  # SIGABRT is no managed-memory fault
        ("fault", TIMEOUT, 0, "failed"),
        # auto: fault exactly where CONCURRENT_MANAGED_ACCESS is 0
        ("auto", FAULT, 0, "passed"),
        ("auto", SIGBUS, 0, "passed"),
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
    assert "expected the child to be killed by SIGSEGV or SIGBUS, but the test passed" in text
    assert "CONCURRENT_MANAGED_ACCESS=1" in text
    assert "got failed" in judge("fault", FAILED, 0).message
    text = judge("auto", PASSED, 0).message
    assert "CONCURRENT_MANAGED_ACCESS=0 on this device, so the test must fault" in text
    text = judge("auto", FAULT, 1).message
    assert "CONCURRENT_MANAGED_ACCESS=1 on this device, so the test must not fault" in text
    assert "cannot decide" in judge("auto", PASSED, None).message
    assert "faulted as expected" in judge("auto", SIGBUS, 0).message


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


# ----------------------------------------------------------------------------------------------------------
# The child's command line


TAKES_VALUE = {"--jetmem-modes", "--jetmem-cache-dir", "--basetemp", "--tb", "--rootdir", "-k", "--confcutdir"}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["tests", "-x", "-k", "foo"], []),
        (["-p", "myplugin", "-pother", "-p", "no:randomly"], ["-p", "myplugin", "-pother", "-p", "no:randomly"]),
        (["--jetmem-tegra-strict", "tests"], ["--jetmem-tegra-strict"]),
        (["--jetmem-modes", "managed", "t.py"], ["--jetmem-modes", "managed"]),
        (["--jetmem-modes=managed,device"], ["--jetmem-modes=managed,device"]),
        (["--basetemp", "/tmp/x", "--jetmem-cache-dir", "c"], ["--jetmem-cache-dir", "c"]),
        (
            ["-o", "xfail_strict=true", "-Werror", "-W", "ignore"],
            ["-o", "xfail_strict=true", "-Werror", "-W", "ignore"],
        ),
        (["-c", "my.ini", "--rootdir=r", "--strict-markers", "--tb", "short"], None),
        (["-v", "-q", "-s", "--lf", "--co"], []),
        (["--", "-p", "x"], []),
    ],
)
def test_forwarded_args(args: list[str], expected: list[str] | None) -> None:
    got = forwarded_args(args, lambda name: name in TAKES_VALUE)
    assert got == (args if expected is None else expected)


def test_child_argv(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makeini("[pytest]\n")
    config = pytester.parseconfigure(*PLUGIN, "--jetmem-tegra-strict", "-k", "x", "--basetemp", str(tmp_path / "b"))
    argv = child_argv(config, "sub/test_a.py::TestC::test_x[managed-1]", "/tmp/child-basetemp")
    root = str(config.rootpath)
    assert argv[1:3] == ["-m", "pytest"]
    assert argv[3] == os.path.join(root, "sub", "test_a.py") + "::TestC::test_x[managed-1]"
    assert argv[4:7] == ["-p", "no:cacheprovider", "-q"]
    assert f"--rootdir={root}" in argv
    assert argv[argv.index("-c") + 1] == str(config.inipath)
    assert "--basetemp=/tmp/child-basetemp" in argv
    assert str(tmp_path / "b") not in argv and "-k" not in argv
    assert "--jetmem-tegra-strict" in argv
    for arg in PLUGIN:
        assert arg in argv


# ----------------------------------------------------------------------------------------------------------
# End to end: real children that really fault; the session goes on


FAULTS = """
import ctypes, os, signal, pytest

@pytest.mark.memmode_concurrency(expect="ok")
def test_segv_unexpected():
    os.kill(os.getpid(), signal.SIGSEGV)

@pytest.mark.memmode_concurrency(expect="fault")
def test_segv_expected():
    os.kill(os.getpid(), signal.SIGSEGV)

@pytest.mark.memmode_concurrency(expect="fault", timeout=60)
def test_sigbus_expected():
    os.kill(os.getpid(), signal.SIGBUS)

@pytest.mark.memmode_concurrency("fault")
def test_null_write_expected():
    ctypes.memset(0, 1, 8)  # a real invalid write: the kernel sends SIGSEGV

@pytest.mark.memmode_concurrency
def test_survives(tmp_path):
    assert "PYTEST_JETMEM_CHILD_RESULT" not in os.environ  # a pytest started from here is no child
    print("child output", tmp_path)

def test_after_the_faults():
    pass
"""


def test_faults_are_classified_and_the_session_goes_on(run_fake: Callable[..., pytest.RunResult]) -> None:
    result = run_fake(FAULTS)
    assert outcomes(result) == {
        "test_segv_unexpected": "FAILED",
        "test_segv_expected": "PASSED",
        "test_sigbus_expected": "PASSED",
        "test_null_write_expected": "PASSED",
        "test_survives": "PASSED",
        "test_after_the_faults": "PASSED",
    }
    text = result.stdout.str()
    # the parent has no device; the child (a fake Orin) reported CONCURRENT_MANAGED_ACCESS=0
    result.stdout.fnmatch_lines(
        [
            "*jetmem: GPU tests will be skipped: no CUDA device*",
            "*memmode_concurrency(expect='ok'): the test must survive on this device; the child was killed by "
            "SIGSEGV: on a device without concurrent managed access (CONCURRENT_MANAGED_ACCESS=0, e.g. Jetson)*",
            "*Captured jetmem child stderr call*",
            "*Fatal Python error: Segmentation fault*",
        ]
    )
    assert re.search(r'test_it\.py", line \d+ in test_segv_unexpected', text)  # faulthandler, in the child


CHILD_ENDINGS = """
import os, time, pytest
from pytest_jetmem.errors import CudaError

@pytest.mark.memmode_concurrency(expect="fault")
def test_fault_expected_but_passes():
    pass

@pytest.mark.memmode_concurrency
def test_assertion():
    x = 41
    assert x + 1 == 43

@pytest.mark.memmode_concurrency
def test_cuda_error():
    raise CudaError("cuStreamSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS", 700)

@pytest.mark.memmode_concurrency(expect="fault")
def test_skipped_in_child():
    pytest.skip("nothing to do here")

@pytest.mark.memmode_concurrency(timeout=1)
def test_hangs():
    time.sleep(600)

@pytest.mark.memmode_concurrency
@pytest.mark.xfail(reason="known bug", strict=True)
def test_xfail_in_parent():
    assert False
"""


def test_child_endings(run_fake: Callable[..., pytest.RunResult]) -> None:
    result = run_fake(CHILD_ENDINGS, "-rs")
    assert outcomes(result) == {
        "test_fault_expected_but_passes": "FAILED",
        "test_assertion": "FAILED",
        "test_cuda_error": "FAILED",
        "test_skipped_in_child": "SKIPPED",
        "test_hangs": "FAILED",
        "test_xfail_in_parent": "XFAIL",
    }
    result.assert_outcomes(failed=4, skipped=1, xfailed=1)
    result.stdout.fnmatch_lines_random(
        [
            "*expect='fault'*expected the child to be killed by SIGSEGV or SIGBUS, but the test passed in it*",
            "*the test failed in the child:*",
            "*assert (41 + 1) == 43*",
            "*the child failed with CUDA_ERROR_ILLEGAL_ADDRESS: *",
            "*CudaError: cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)",
            "*(a sticky error: the CUDA context was unusable afterwards)",
            "*the test was skipped in the child: nothing to do here*",
            "*the child did not finish within 1 s*",
        ]
    )


# ----------------------------------------------------------------------------------------------------------
# expect="auto" against CONCURRENT_MANAGED_ACCESS 0 (Jetson Orin) and 1 (a discrete GPU), from the fake driver

PLATFORM = """
import os, signal, pytest

def jetson_touch(jetmem):
    # What Jetson's driver does to a CPU touch of managed memory while a kernel runs.
    if jetmem.device.attr("CONCURRENT_MANAGED_ACCESS") == 0:
        os.kill(os.getpid(), signal.SIGSEGV)

@pytest.mark.memmode("managed")
@pytest.mark.memmode_concurrency(expect="auto")
def test_platform_rule(jetmem):
    buf = jetmem.zeros(16)
    jetson_touch(jetmem)
    buf.host[:] = 1

@pytest.mark.memmode("managed")
@pytest.mark.memmode_concurrency(expect="auto")
def test_never_faults(jetmem):
    jetmem.zeros(16).host[:] = 1

@pytest.mark.memmode("managed")
@pytest.mark.memmode_concurrency(expect="auto")
def test_always_faults(jetmem):
    os.kill(os.getpid(), signal.SIGSEGV)
"""


def test_auto_on_jetson(run_fake: Callable[..., pytest.RunResult]) -> None:
    result = run_fake(PLATFORM, child="orin")  # the parent has no device: the child reports the attribute
    assert outcomes(result) == {
        "test_platform_rule[managed]": "PASSED",
        "test_never_faults[managed]": "FAILED",
        "test_always_faults[managed]": "PASSED",
    }
    result.stdout.fnmatch_lines(["*jetmem: GPU tests will be skipped: no CUDA device*"])  # the parent's header
    result.stdout.fnmatch_lines(
        ["*(CONCURRENT_MANAGED_ACCESS=0 on this device, so the test must fault): expected the child to be killed*"]
    )


def test_auto_on_a_discrete_gpu(run_fake: Callable[..., pytest.RunResult]) -> None:
    result = run_fake(PLATFORM, child="dgpu")
    assert outcomes(result) == {
        "test_platform_rule[managed]": "PASSED",
        "test_never_faults[managed]": "PASSED",
        "test_always_faults[managed]": "FAILED",
    }
    result.stdout.fnmatch_lines(
        [
            "*(CONCURRENT_MANAGED_ACCESS=1 on this device, so the test must not fault): the test must survive*"
            "not the managed-memory concurrency rule*"
        ]
    )


NEEDS_DEVICE = """
import pytest

@pytest.mark.memmode("managed")
@pytest.mark.memmode_concurrency(expect="auto")
def test_needs_a_device(jetmem):
    raise AssertionError("never runs without a device")
"""


def test_auto_without_any_device_skips(run_fake: Callable[..., pytest.RunResult]) -> None:
    result = run_fake(NEEDS_DEVICE, "-rs", child="no_device")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*the test was skipped in the child: jetmem: no CUDA device*"])


FORWARDED = """
import pytest
from pytest_jetmem.plugin import concurrency as plugin_concurrency

@pytest.mark.memmode_concurrency
def test_sees_the_options(request, from_plugin):
    child = plugin_concurrency.concurrency_session(request.config).child
    assert child.nodeid == request.node.nodeid and child.target is request.node  # the same nodeid as the parent's
    assert request.config.getoption("jetmem_tegra_strict") is True
    assert request.config.getoption("jetmem_modes") == "managed"
    assert from_plugin == "loaded"
"""

LOCAL_PLUGIN = """
import pytest

@pytest.fixture
def from_plugin():
    return "loaded"
"""


def test_child_gets_the_options_and_plugins(
    run_fake: Callable[..., pytest.RunResult], pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(localplugin=LOCAL_PLUGIN)
    pytester.syspathinsert()
    result = run_fake(FORWARDED, "-p", "localplugin", "--jetmem-tegra-strict", "--jetmem-modes", "managed")
    assert outcomes(result) == {"test_sees_the_options": "PASSED"}


# ----------------------------------------------------------------------------------------------------------
# Tegra-strict bookkeeping, on a real handle over the fake driver


@pytest.fixture
def fake(install_fake_driver: Callable[..., FakeDriver]) -> FakeDriver:
    return install_fake_driver("dgpu")


@pytest.fixture
def jm(fake: FakeDriver, tmp_path: Path) -> Iterator[Jetmem]:
    avail = open_device()
    assert avail.ok and avail.device is not None, avail.reason
    session = CudaSession(avail.device, KernelCache(tmp_path / "kernels"))
    handle = Jetmem(session, "managed", "test_concurrency.py::strict")
    try:
        yield handle
    finally:
        handle.close()
        session.close()


@pytest.fixture
def tracker(jm: Jetmem) -> TegraStrict:
    return strict.enable(jm)


def test_enable_is_idempotent(jm: Jetmem) -> None:
    assert strict.tracker_of(jm) is None
    t = strict.enable(jm)
    assert strict.enable(jm) is t and strict.tracker_of(jm) is t
    assert t.default_stream == jm.stream_handle and t.nodeid == jm.nodeid


def test_busy_after_launch_idle_after_synchronize(jm: Jetmem, tracker: TegraStrict) -> None:
    buf = jm.zeros(16)
    tracker.check_host_access(buf)  # nothing launched yet
    tracker.launched(jm.stream)
    tracker.launched()  # None: the handle's own stream
    assert tracker.busy_streams == {jm.stream_handle: 2} and tracker.busy
    with pytest.raises(TegraStrictError) as err:
        tracker.check_host_access(buf)
    text = str(err.value)
    assert text.startswith("test_concurrency.py::strict: Tegra-strict: host view (Buffer.host) of managed <Buffer")
    assert f"stream 0x{jm.stream_handle:x} (2 kernels)" in text
    assert "attached globally (CU_MEM_ATTACH_GLOBAL)" in text
    assert "SIGSEGV or SIGBUS" in text and "jetmem.synchronize()" in text and "jetmem.attach_host(buf)" in text
    assert tracker.violations == 1
    tracker.synchronized()
    assert not tracker.busy
    tracker.check_host_access(buf)


def test_only_managed_memory_is_checked(jm: Jetmem, tracker: TegraStrict) -> None:
    pinned = jm.zeros(16, mode="zero_copy")
    dev = jm.zeros(16, mode="device")
    tracker.launched()
    tracker.check_host_access(pinned)
    tracker.check_host_access(dev)
    assert tracker.blocking_streams(jm.zeros(16)) == {jm.stream_handle}


def test_host_attached_buffers_are_exempt(jm: Jetmem, tracker: TegraStrict, fake: FakeDriver) -> None:
    buf = jm.zeros(16)
    attach.attach_host(jm, buf)
    assert fake.allocation_at(buf.ptr).attach == MEM_ATTACH_HOST
    assert fake.calls[-2].api == "cuStreamAttachMemAsync" and fake.calls[-1].api == "cuStreamSynchronize"
    tracker.launched()
    tracker.check_host_access(buf)
    assert tracker.attachment(buf) == Attachment(MEM_ATTACH_HOST)
    attach.attach_global(jm, buf)  # waits: the stream is synchronized, so no longer busy
    assert not tracker.busy and tracker.attachment(buf) == Attachment(MEM_ATTACH_GLOBAL)
    tracker.launched()
    with pytest.raises(TegraStrictError):
        tracker.check_host_access(buf)


def test_single_stream_attachment(jm: Jetmem, tracker: TegraStrict, fake: FakeDriver) -> None:
    other = fake.stream_create()
    own, mine = jm.zeros(16), jm.zeros(16)
    attach.attach_single(jm, mine, other)
    assert fake.allocation_at(mine.ptr).attach == MEM_ATTACH_SINGLE
    tracker.launched(jm.stream)  # work on jetmem's stream does not hold a buffer attached to another one
    tracker.check_host_access(mine)
    with pytest.raises(TegraStrictError):
        tracker.check_host_access(own)  # attached globally: any busy stream holds it
    tracker.launched(other)
    with pytest.raises(TegraStrictError, match=rf"attached to stream 0x{int(other):x} \(CU_MEM_ATTACH_SINGLE\)"):
        tracker.check_host_access(mine)
    tracker.synchronized(other)
    tracker.check_host_access(mine)
    fake.stream_destroy(other)


def test_pending_attachment_takes_effect_at_synchronize(jm: Jetmem, tracker: TegraStrict) -> None:
    buf = jm.zeros(16)
    tracker.launched()
    attach.attach_host(jm, buf, wait=False)  # queued behind the kernel: not in effect yet
    assert tracker.pending_attachment(buf) == Attachment(MEM_ATTACH_HOST)
    with pytest.raises(TegraStrictError, match="queued but not known to be in effect"):
        tracker.check_host_access(buf)
    tracker.synchronized()
    assert tracker.pending_attachment(buf) is None
    tracker.launched()
    tracker.check_host_access(buf)  # host-attached now
    # and the other way round: a pending global attachment restricts at once
    attach.attach_global(jm, buf, wait=False)
    with pytest.raises(TegraStrictError):
        tracker.check_host_access(buf)
    tracker.synchronized_all()
    assert tracker.attachment(buf) == Attachment(MEM_ATTACH_GLOBAL) and not tracker.busy


def test_attach_refuses_other_modes(jm: Jetmem) -> None:
    with pytest.raises(attach.AttachError, match=r"managed memory \(cuMemAllocManaged\) only.*'zero_copy' memory"):
        attach.attach_host(jm, jm.zeros(4, mode="zero_copy"))
    with pytest.raises(attach.AttachError, match="'device' memory; device memory has no host view"):
        attach.attach_single(jm, jm.zeros(4, mode="device"))
    freed = jm.zeros(4)
    freed.free()
    with pytest.raises(attach.AttachError, match="was freed"):
        attach.attach_global(jm, freed)
    with pytest.raises(attach.AttachError, match="needs a created stream"):
        attach.attach_single(jm, jm.zeros(4), 0)
    with pytest.raises(ValueError, match="flags must be"):
        attach.attach(jm, jm.zeros(4), 0x8)
    with pytest.raises(attach.AttachError) as err:
        attach.attach_host(jm, jm.zeros(4, mode="device"))
    assert str(err.value).startswith("test_concurrency.py::strict: jetmem.attach_host(<Buffer")


def test_attach_without_strict_mode_just_attaches(jm: Jetmem, fake: FakeDriver) -> None:
    buf = jm.zeros(4)
    attach.attach_single(jm, buf)  # jetmem's own stream
    assert fake.allocation_at(buf.ptr).attach == MEM_ATTACH_SINGLE
    assert strict.tracker_of(jm) is None


def test_attachment_validation() -> None:
    with pytest.raises(ValueError, match="needs its stream"):
        Attachment(MEM_ATTACH_SINGLE)
    with pytest.raises(ValueError, match="must be one of"):
        Attachment(0)
    assert Attachment(MEM_ATTACH_SINGLE, 5).blocking({5, 6}) == {5}
    assert Attachment(MEM_ATTACH_GLOBAL).blocking({5, 6}) == {5, 6}
    assert Attachment(MEM_ATTACH_HOST).blocking({5, 6}) == set()


# -- through the handle's hooks (handle.py calls the tracker: Kernel.launch, Buffer.host, synchronize) -------


def _wired(jm: Jetmem, tracker: TegraStrict) -> bool:
    buf = jm.zeros(16)
    jm.kernel("stream_fill").launch(1, 32, (buf, np.uint64(16), np.float32(1)))
    wired = tracker.launches == 1
    jm.synchronize()
    return wired and not tracker.busy


@pytest.fixture
def wired(jm: Jetmem, tracker: TegraStrict) -> TegraStrict:
    if not _wired(jm, tracker):
        pytest.skip("handle.py does not report launches and synchronizations to the Tegra-strict tracker yet")
    return tracker


def test_raw_host_access_right_after_a_launch(jm: Jetmem, wired: TegraStrict) -> None:
    x, pinned = jm.zeros(1024), jm.zeros(1024, mode="zero_copy")
    fill = jm.kernel("stream_fill")
    fill.launch(4, 256, (x, np.uint64(x.size), np.float32(2)))
    with pytest.raises(TegraStrictError, match="Tegra-strict: host view"):
        x.host[0] = 5
    assert pinned.host[0] == 0  # zero_copy: pinned host memory, always fine
    # to_numpy() and copy_from() synchronize first: safe on Jetson too, so never an error
    np.testing.assert_array_equal(x.to_numpy(), 2)
    fill.launch(4, 256, (x, np.uint64(x.size), np.float32(3)))
    x.copy_from(np.ones(1024, np.float32))
    assert x.host[0] == 1  # synchronized by copy_from
    fill.launch(4, 256, (x, np.uint64(x.size), np.float32(3)))
    jm.synchronize()
    assert x.host[0] == 3


def test_launch_on_another_stream(jm: Jetmem, wired: TegraStrict, fake: FakeDriver) -> None:
    other = fake.stream_create()
    x, y = jm.zeros(64), jm.zeros(64)
    attach.attach_single(jm, y)  # y belongs to jetmem's stream
    jm.kernel("stream_fill").launch(1, 64, (x, np.uint64(64), np.float32(1)), stream=other)
    assert wired.busy_streams == {int(other): 1}
    _ = y.host  # jetmem's stream is idle
    with pytest.raises(TegraStrictError):
        _ = x.host  # attached globally, and a kernel may run on the other stream
    jm.synchronize()  # only jetmem's stream: the other one may still run
    with pytest.raises(TegraStrictError):
        _ = x.host
    fake.stream_synchronize(other)
    wired.synchronized(other)
    _ = x.host
    fake.stream_destroy(other)


# -- the option and the ini key, through pytest ------------------------------------------------------------

STRICT_FILE = """
import numpy as np, pytest
from pytest_jetmem.correctness import strict

@pytest.mark.memmode("managed")
def test_tracker_on(jetmem):
    assert (strict.tracker_of(jetmem) is not None) is {expected}
"""


@pytest.mark.parametrize(
    ("args", "ini", "expected"),
    [((), "", False), (("--jetmem-tegra-strict",), "", True), ((), "jetmem_tegra_strict = true", True)],
)
def test_option_and_ini_turn_strict_mode_on(
    pytester: pytest.Pytester, fake_driver: FakeDriver, args: tuple[str, ...], ini: str, expected: bool
) -> None:
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_strict=STRICT_FILE.format(expected=expected))
    result = pytester.runpytest(*PLUGIN, *args)
    result.assert_outcomes(passed=1)
    header = "jetmem: Tegra-strict mode: host access to managed memory during jetmem work raises"
    assert (header in result.stdout.str()) is expected


STRICT_IN_CHILD = """
import numpy as np, pytest

def touch_while_busy(jetmem):
    x = jetmem.zeros(64)
    jetmem.kernel("stream_fill").launch(1, 64, (x, np.uint64(64), np.float32(1)))
    x.host[0] = 2.0  # no synchronize: Jetson would kill the process here

@pytest.mark.memmode("managed")
@pytest.mark.memmode_concurrency(expect="ok")
def test_ok_but_would_crash(jetmem):
    touch_while_busy(jetmem)

@pytest.mark.memmode("managed")
@pytest.mark.memmode_concurrency(expect="fault")
def test_fault_emulated(jetmem):
    touch_while_busy(jetmem)

@pytest.mark.memmode("managed")
@pytest.mark.memmode_concurrency(expect="auto")
def test_auto_under_strict(jetmem):
    touch_while_busy(jetmem)
"""


def test_tegra_strict_in_children(run_fake: Callable[..., pytest.RunResult], wired: TegraStrict) -> None:
    result = run_fake(STRICT_IN_CHILD, "--jetmem-tegra-strict", child="dgpu")
    assert outcomes(result) == {
        "test_ok_but_would_crash[managed]": "FAILED",
        "test_fault_emulated[managed]": "PASSED",
        "test_auto_under_strict[managed]": "PASSED",
    }
    result.stdout.fnmatch_lines(["*expect='ok'): the test would crash on Jetson: *Tegra-strict: host view*"])
    # without the option the same code survives on a device with concurrent managed access
    result = run_fake(STRICT_IN_CHILD, "-k", "ok_but", child="dgpu")
    assert outcomes(result) == {"test_ok_but_would_crash[managed]": "PASSED"}


def test_driver_flags_match_cuda() -> None:
    cu = pytest.importorskip("cuda.bindings.driver")
    assert int(cu.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL) == MEM_ATTACH_GLOBAL
    assert int(cu.CUmemAttach_flags.CU_MEM_ATTACH_HOST) == MEM_ATTACH_HOST
    assert int(cu.CUmemAttach_flags.CU_MEM_ATTACH_SINGLE) == MEM_ATTACH_SINGLE


def test_module_constants() -> None:
    assert MARKER == plugin_concurrency.MARKER == "memmode_concurrency"
    assert EXPECTS == ("ok", "fault", "auto")
    assert driver.MEM_ATTACH_HOST == MEM_ATTACH_HOST
