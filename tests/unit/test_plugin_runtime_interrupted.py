"""plugin.runtime: an interrupted session (a KeyboardInterrupt, pytest.exit()) saves no baseline and says so; the
previous baseline stays byte for byte. A stop the run asked for (``-x``) saves what ran.

pytester runs against the fake driver (see test_plugin_runtime_baselines.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fakes.fake_driver import conftest_source
from runtime_fixtures import _module_kernel_cache, _no_user_device_choice, jetmem_kernel_cache  # noqa: F401
from runtime_runs import BASE_FILE, InstallFake, baseline_doc, baseline_path, inner

NOT_SAVED = "jetmem: the session was interrupted: baseline 'main' not saved"

INTERRUPTING = """
@pytest.mark.memmode("device")
def test_zz_interrupted(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
    raise KeyboardInterrupt
"""


@pytest.fixture
def saved_baseline(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> Path:
    """BASE_FILE's timings saved as baseline ``main``; the test files to run next are the caller's."""
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b=inner(BASE_FILE))
    assert pytester.runpytest("--jetmem-save=main").ret == pytest.ExitCode.OK
    path: Path = baseline_path(pytester)
    return path


def test_a_keyboard_interrupt_saves_nothing_and_says_so(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    before = saved_baseline.read_bytes()
    install_fake_driver("orin", kernel_ms=0.2)
    pytester.makepyfile(test_b=inner(BASE_FILE + INTERRUPTING))
    result = pytester.runpytest("--jetmem-save=main", no_reraise_ctrlc=True)  # the inner run's, not ours
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert saved_baseline.read_bytes() == before  # the three tests that ran before the interrupt are not appended
    assert not saved_baseline.with_name("main.json.prev").exists()
    result.stdout.fnmatch_lines(["*jetmem runtimes*", NOT_SAVED])
    assert result.stdout.lines.count(NOT_SAVED) == 1
    assert not any("saved baseline" in line for line in result.outlines)


def test_an_interrupt_before_anything_was_measured_says_the_same(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    before = saved_baseline.read_bytes()
    pytester.makepyfile(test_b=inner("def test_a_interrupted():\n    raise KeyboardInterrupt\n" + BASE_FILE))
    result = pytester.runpytest("--jetmem-save=main", no_reraise_ctrlc=True)  # the inner run's, not ours
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert saved_baseline.read_bytes() == before
    assert [line for line in result.outlines if "baseline" in line] == [NOT_SAVED]  # not "nothing was measured"


def test_pytest_exit_is_an_interruption(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    before = saved_baseline.read_bytes()
    pytester.makepyfile(test_b=inner(BASE_FILE + "\ndef test_zz_exit():\n    pytest.exit('enough')\n"))
    result = pytester.runpytest("--jetmem-save=main", no_reraise_ctrlc=True)  # the inner run's, not ours
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert saved_baseline.read_bytes() == before
    result.stdout.fnmatch_lines([NOT_SAVED])


def test_a_stop_the_run_asked_for_saves_what_ran(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    """``-x``: the tests that ran, ran to their end; the session is appended as usual."""
    first = baseline_doc(pytester)["session"]
    failing = '\n@pytest.mark.memmode("device")\ndef test_zz_fails(jetmem):\n    jetmem.measure(fill(jetmem))\n'
    pytester.makepyfile(test_b=inner(BASE_FILE + failing + "    assert False\n"))
    result = pytester.runpytest("-x", "--jetmem-save=main")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["jetmem: saved baseline 'main' in *"])
    doc = baseline_doc(pytester)
    assert doc["session"] != first
    assert len(doc["entries"]) == 3  # the failed body's measurement was never judged, so never kept
    for entry in doc["entries"].values():
        assert entry["run_sessions"] == [first, doc["session"]]


def test_an_interrupted_xdist_worker_saves_nothing_and_the_controller_says_so(
    pytester: pytest.Pytester, saved_baseline: Path
) -> None:
    """The previous baseline (saved by a run in this process, on the same fake Orin) stays byte for byte."""
    pytest.importorskip("xdist")
    pytester.makeconftest(conftest_source("orin", kernel_ms=0.1))
    before = saved_baseline.read_bytes()
    pytester.makepyfile(test_b=inner(BASE_FILE + INTERRUPTING))
    result = pytester.runpytest_subprocess("-n", "1", "--jetmem-save=main")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert baseline_path(pytester).read_bytes() == before
    result.stdout.fnmatch_lines([NOT_SAVED])
    assert not any("saved baseline" in line for line in result.outlines)


def test_x_under_xdist_is_a_stop_the_run_asked_for(pytester: pytest.Pytester) -> None:
    """xdist ends ``-x`` with its own Interrupted and exit status 2: the workers saved, and the run says so."""
    pytest.importorskip("xdist")
    pytester.makeconftest(conftest_source("orin", kernel_ms=0.1))
    failing = '\n@pytest.mark.memmode("device")\ndef test_zz_fails(jetmem):\n    jetmem.measure(fill(jetmem))\n'
    pytester.makepyfile(test_b=inner(BASE_FILE + failing + "    assert False\n"))
    result = pytester.runpytest_subprocess("-n", "1", "-x", "--jetmem-save=main")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["jetmem: saved baseline 'main' in *"])
    assert len(baseline_doc(pytester)["entries"]) == 3  # the failed body measured, but was never judged
    assert NOT_SAVED not in result.outlines
