"""plugin.concurrency: ``memmode_concurrency`` through pytest, without a GPU.

The child processes here are real (``python -m pytest <nodeid>``) and really die of SIGSEGV (or SIGBUS, a fault
of an undocumented kind); devices come from the fake driver, installed at the driver boundary only, by a
conftest in the pytester folder (concurrency_runs.fake_conftest), so the child process gets one too.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from concurrency_runs import PLUGIN, outcomes

pytestmark = pytest.mark.skipif(os.name != "posix", reason="child processes need POSIX process groups")


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
    assert not [k for k in os.environ if k.startswith("PYTEST_JETMEM_")]  # a pytest started from here is no child
    print("child output", tmp_path)

def test_after_the_faults():
    pass
"""


def test_faults_are_classified_and_the_session_goes_on(run_fake: Callable[..., pytest.RunResult]) -> None:
    result = run_fake(FAULTS)
    assert outcomes(result) == {
        "test_segv_unexpected": "FAILED",
        "test_segv_expected": "PASSED",
        "test_sigbus_expected": "FAILED",  # SIGBUS: a fault of an undocumented kind, not the documented one
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
    result.stdout.fnmatch_lines(
        [
            "*expect='fault'): expected the documented fault (SIGSEGV), got signal; the child was killed by SIGBUS, "
            "a fault of an undocumented kind*"
        ]
    )


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
            "*expect='fault'*expected the child to be killed by SIGSEGV (the documented fault), but the test passed*",
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
    child = plugin_concurrency.concurrency_session(request.config)
    assert child.nodeid == request.node.nodeid and child.target is request.node  # the same nodeid as the parent's
    assert request.config.getoption("jetmem_tegra_strict") is True
    assert request.config.getoption("jetmem_modes") == "managed"
    assert request.config.getoption("colour") == "blue"  # another plugin's option, with its value
    assert from_plugin == "loaded"
"""

LOCAL_PLUGIN = """
import pytest

def pytest_addoption(parser):
    parser.addoption("--colour", default=None)

@pytest.fixture
def from_plugin():
    return "loaded"
"""


def test_child_gets_the_options_and_plugins(
    run_fake: Callable[..., pytest.RunResult], pytester: pytest.Pytester
) -> None:
    pytester.makepyfile(localplugin=LOCAL_PLUGIN)
    pytester.syspathinsert()
    result = run_fake(
        FORWARDED, "-p", "localplugin", "--colour", "blue", "--jetmem-tegra-strict", "--jetmem-modes", "managed"
    )
    assert outcomes(result) == {"test_sees_the_options": "PASSED"}


# ----------------------------------------------------------------------------------------------------------
# A child's measurements come back to the parent; a child never saves a baseline

MEASURED = """
import pytest

SRC = 'extern "C" __global__ void scale(float* x) { x[threadIdx.x] *= 2; }'


def timed(jetmem, label):
    x = jetmem.zeros(32)
    k = jetmem.compile(SRC, "scale")
    jetmem.measure(lambda: k.launch(1, 32, (x,)), label=label)


@pytest.mark.memmode("device")
def test_in_parent(jetmem):
    timed(jetmem, "parent")


@pytest.mark.memmode("device")
@pytest.mark.memmode_concurrency
def test_in_child(jetmem):
    timed(jetmem, "child")
"""


def _files(folder: Path) -> list[str]:
    """The baseline files in ``folder`` (not their locks)."""
    return sorted(p.name for p in folder.iterdir() if not p.name.endswith(".lock"))


def _baseline(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def _child_measurement_reaches_table_baseline_report_and_json(
    run_fake: Callable[..., pytest.RunResult], pytester: pytest.Pytester, given: str
) -> dict[str, Any]:
    """The child's row is in the parent's table, report and JSON; its entry in the parent's baseline. The child saves
    nothing, also where ``--jetmem-save`` comes from the ini file's addopts, which the child reads too. The baseline
    saved, as read back."""
    save = ["--jetmem-save=main"]
    if given == "addopts":
        pytester.makeini(f"[pytest]\naddopts = {save.pop()}\n")
    result = run_fake(
        MEASURED, *save, "--jetmem-max-time=0.05", "--jetmem-report=out/r.html",
        "--jetmem-benchmark-json=out/b.json", parent="dgpu", child="dgpu",
    )  # fmt: skip
    assert outcomes(result) == {"test_in_parent[device]": "PASSED", "test_in_child[device]": "PASSED"}
    result.stdout.fnmatch_lines(["*jetmem runtimes*", "*test_in_child?device?*device*child:kernel*"])
    baselines = pytester.path / ".jetmem" / "baselines"
    assert _files(baselines) == ["main.json"]  # the child saved nothing of its own
    base = _baseline(baselines / "main.json")
    assert sorted(e["nodeid"].rsplit("::", 1)[-1] for e in base["entries"].values()) == [
        "test_in_child[device]",
        "test_in_parent[device]",
    ]
    assert all(set(e.get("run_sessions", [base["session"]])) == {base["session"]} for e in base["entries"].values())
    assert len(json.loads((pytester.path / "out" / "r.json").read_text())["rows"]) == 2
    assert len(json.loads((pytester.path / "out" / "b.json").read_text())["benchmarks"]) == 2
    return base


def test_a_child_measurement_reaches_table_baseline_report_and_json_where_save_comes_from_addopts(
    run_fake: Callable[..., pytest.RunResult], pytester: pytest.Pytester
) -> None:
    """The child's row is in the parent's table, report and JSON; its entry in the parent's baseline. The child saves
    nothing, also where ``--jetmem-save`` comes from the ini file's addopts, which the child reads too."""
    _child_measurement_reaches_table_baseline_report_and_json(run_fake, pytester, "addopts")


def test_a_child_measurement_reaches_table_baseline_report_and_json_and_overwrite_keeps_the_real_previous_baseline(
    run_fake: Callable[..., pytest.RunResult], pytester: pytest.Pytester
) -> None:
    """``--jetmem-save`` on the command line: the child's row is in the parent's table, report and JSON, its entry in
    the parent's baseline, and the child saves nothing. Saved again with ``--jetmem-overwrite``, the previous baseline
    kept is the real one (both tests), and the new one is one session's, both tests."""
    first = _child_measurement_reaches_table_baseline_report_and_json(run_fake, pytester, "command line")
    args = ("--jetmem-save=main", "--jetmem-max-time=0.05")
    baselines = pytester.path / ".jetmem" / "baselines"
    run_fake(MEASURED, *args, "--jetmem-overwrite", parent="dgpu", child="dgpu").assert_outcomes(passed=2)
    assert _files(baselines) == ["main.json", "main.json.prev"]
    assert _baseline(baselines / "main.json.prev") == first  # the real previous baseline, both tests
    second = _baseline(baselines / "main.json")
    assert second["session"] != first["session"]
    assert len(second["entries"]) == 2
    assert all(
        set(e.get("run_sessions", [second["session"]])) == {second["session"]} for e in second["entries"].values()
    )
