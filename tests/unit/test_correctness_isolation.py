"""Tests of pytest_jetmem.correctness.isolation with real child processes (no GPU)."""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import pytest_jetmem
from fakes.child_results import child_result
from pytest_jetmem.correctness.isolation import (
    DEFAULT_GRACE_S,
    DEFAULT_TAIL_BYTES,
    ChildResult,
    Outcome,
    Spawned,
    classify,
    explain,
)
from pytest_jetmem.correctness.isolation import child_result as result_of

pytestmark = pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX only")

SRC = str(Path(pytest_jetmem.__file__).resolve().parent.parent)
TIMEOUT_S = 30.0  # generous: only the timeout test relies on the deadline


def child_env() -> dict[str, str]:
    """This environment with pytest_jetmem importable in the child."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
    return env


def run_argv(
    argv: list[str],
    timeout_s: float = TIMEOUT_S,
    said: dict[str, Any] | None = None,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    grace_s: float = DEFAULT_GRACE_S,
    tail_bytes: int = DEFAULT_TAIL_BYTES,
) -> ChildResult:
    """Run ``argv`` as a :class:`Spawned` child to its end; its result, as if it had said ``said`` of its test."""
    with tempfile.TemporaryDirectory() as folder:
        child = Spawned(argv, Path(folder, "out"), Path(folder, "err"), env=env or child_env(), cwd=cwd)
        returncode = child.end(timeout_s, grace_s)
        return result_of(child, returncode, said, timeout_s=timeout_s, grace_s=grace_s, tail_bytes=tail_bytes)


def run_py(code: str, timeout_s: float = TIMEOUT_S, said: dict[str, Any] | None = None, **kwargs: Any) -> ChildResult:
    """Run a Python snippet as the child."""
    return run_argv([sys.executable, "-c", textwrap.dedent(code)], timeout_s, said, **kwargs)


def said(outcome: str, message: str = "", cuda_error: str | None = None) -> dict[str, Any]:
    """What a child says of its test."""
    return {"outcome": outcome, "message": message, "cuda_error": cuda_error}


def gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (absent, or a zombie waiting for a reaper)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def live_members(pgid: int) -> list[int]:
    """Pids of the running (not zombie) processes in group ``pgid``; needs Linux /proc."""
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc")
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(entry))
    return found


def wait_gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.02)
    return gone(pid)


# -- signals ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("signame", "outcome"),
    [("SIGSEGV", Outcome.FAULT), ("SIGBUS", Outcome.SIGNAL), ("SIGABRT", Outcome.SIGNAL)],
)
def test_killed_by_signal(signame: str, outcome: Outcome) -> None:
    r = run_py(f"import os, signal; os.kill(os.getpid(), signal.{signame})")
    assert r.outcome is outcome
    assert r.returncode == -getattr(signal, signame)
    assert r.signal_name == signame
    assert r.message == f"the child was killed by {signame}"
    assert r.report is None


def test_fault_after_writing_passed_is_still_fault() -> None:
    r = run_py("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", said=said("passed", "all good"))
    assert r.outcome is Outcome.FAULT
    assert r.signal_name == "SIGSEGV"
    assert r.report == {"outcome": "passed", "message": "all good", "cuda_error": None}
    assert "after it had written 'passed'" in (r.message or "")


# -- written results ----------------------------------------------------------------------------------------


def test_passed() -> None:
    r = run_py("pass", said=said("passed"))
    assert r.outcome is Outcome.PASSED
    assert r.returncode == 0
    assert r.signal_name is None


def test_failed_carries_message() -> None:
    r = run_py("raise SystemExit(1)", said=said("failed", "assert 1 == 2"))
    assert r.outcome is Outcome.FAILED
    assert r.message == "assert 1 == 2"
    assert r.returncode == 1
    assert r.cuda_error_name is None


def test_skipped() -> None:
    r = run_py("pass", said=said("skipped", "no GPU"))
    assert (r.outcome, r.message) == (Outcome.SKIPPED, "no GPU")


def test_cuda_error() -> None:
    r = run_py("exit(1)", said=said("failed", "cuStreamSynchronize failed", "CUDA_ERROR_ILLEGAL_ADDRESS"))
    assert r.outcome is Outcome.CUDA_ERROR
    assert r.cuda_error_name == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert r.message == "cuStreamSynchronize failed"


def test_raise_without_result_is_crashed() -> None:
    r = run_py("raise RuntimeError('boom in the child')")
    assert r.outcome is Outcome.CRASHED
    assert r.returncode == 1
    assert r.report is None
    assert "RuntimeError: boom in the child" in r.stderr
    assert "status 1 without writing a result" in (r.message or "")


def test_clean_exit_without_result_is_crashed() -> None:
    r = run_py("pass")
    assert r.outcome is Outcome.CRASHED
    assert "wrote no result" in (r.message or "")


def test_passed_then_nonzero_exit_is_failed() -> None:
    r = run_py("raise SystemExit(3)", said=said("passed"))
    assert r.outcome is Outcome.FAILED
    assert "status 3" in (r.message or "")


# -- process handling ---------------------------------------------------------------------------------------

HANG = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # force the SIGKILL escalation
grandchild = subprocess.Popen(
    [sys.executable, "-c", "import signal as s, time; s.signal(s.SIGTERM, s.SIG_IGN); time.sleep(600)"]
)
print(os.getpid(), grandchild.pid, os.getpgid(0), flush=True)
time.sleep(600)
"""


def test_timeout_kills_the_whole_group() -> None:
    r = run_py(HANG, timeout_s=1.0, grace_s=0.5)
    assert r.outcome is Outcome.TIMEOUT
    assert r.signal_name == "SIGKILL"  # SIGTERM was ignored
    assert "within 1 s" in (r.message or "")
    child_pid, grandchild_pid, pgid = map(int, r.stdout.split())
    assert pgid == child_pid  # its own process group
    assert pgid != os.getpgid(0)
    assert wait_gone(grandchild_pid), "the grandchild survived the timeout"
    assert live_members(pgid) == []


def test_timeout_sigterm_suffices() -> None:
    r = run_py("import time; time.sleep(600)", timeout_s=1.0, grace_s=10.0)
    assert r.outcome is Outcome.TIMEOUT
    assert r.signal_name == "SIGTERM"


def test_leftover_grandchild_killed_after_normal_exit() -> None:
    code = """
    import subprocess, sys
    g = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(g.pid, flush=True)
    """
    r = run_py(code, said=said("passed"))
    assert r.outcome is Outcome.PASSED
    assert wait_gone(int(r.stdout.split()[0]))


def test_output_is_captured_and_tail_truncated(tmp_path: Path) -> None:
    code = """
    import os, sys
    sys.stdout.write("A" * 10000 + "END-OUT")
    sys.stderr.write("to stderr")
    print(os.getcwd(), file=sys.stderr)
    """
    r = run_py(code, cwd=tmp_path, tail_bytes=1000)
    assert r.stdout.endswith("END-OUT")
    assert r.stdout.startswith("[... 9007 bytes truncated ...]\n")
    assert "to stderr" in r.stderr
    assert str(tmp_path) in r.stderr
    assert r.duration_s >= 0


def test_env_is_whole_environment() -> None:
    code = "import os; print(sorted(k for k in os.environ if k.startswith('JETMEM_T')))"
    # the caller's own JETMEM_T* variables (CI sets JETMEM_TEST_POSTGRES) left out: the child sees exactly this env
    env = {**{k: v for k, v in child_env().items() if not k.startswith("JETMEM_T")}, "JETMEM_TEST_X": "1"}
    r = run_argv([sys.executable, "-c", code], env=env)
    assert r.stdout.strip() == "['JETMEM_TEST_X']"


def test_missing_executable_raises() -> None:
    with pytest.raises(FileNotFoundError):
        run_argv(["/nonexistent/jetmem-child"])


# -- classify -----------------------------------------------------------------------------------------------

P = {"outcome": "passed", "message": "", "cuda_error": None}
F = {"outcome": "failed", "message": "assert x", "cuda_error": None}
S = {"outcome": "skipped", "message": "why", "cuda_error": None}
C = {"outcome": "failed", "message": "boom", "cuda_error": "CUDA_ERROR_ILLEGAL_ADDRESS"}


@pytest.mark.parametrize(
    ("returncode", "report", "timed_out", "outcome"),
    [
        (0, P, False, Outcome.PASSED),
        (1, F, False, Outcome.FAILED),
        (0, F, False, Outcome.FAILED),
        (0, S, False, Outcome.SKIPPED),
        (1, C, False, Outcome.CUDA_ERROR),
        (0, C, False, Outcome.CUDA_ERROR),
        (-signal.SIGSEGV, None, False, Outcome.FAULT),
        (-signal.SIGBUS, None, False, Outcome.SIGNAL),  # only SIGSEGV is documented
        (-signal.SIGSEGV, P, False, Outcome.FAULT),  # the signal wins over what was written
        (-signal.SIGBUS, C, False, Outcome.SIGNAL),
        (-signal.SIGILL, None, False, Outcome.SIGNAL),
        (-signal.SIGABRT, None, False, Outcome.SIGNAL),
        (-signal.SIGKILL, P, False, Outcome.SIGNAL),
        (-signal.SIGTERM, None, True, Outcome.TIMEOUT),
        (-signal.SIGKILL, P, True, Outcome.TIMEOUT),
        (0, P, True, Outcome.TIMEOUT),
        (1, None, False, Outcome.CRASHED),
        (0, None, False, Outcome.CRASHED),
        (None, None, False, Outcome.CRASHED),
        (2, P, False, Outcome.FAILED),  # wrote passed, then exited badly
        (0, {"outcome": "maybe"}, False, Outcome.CRASHED),
        (0, {}, False, Outcome.CRASHED),
        (1, {"_error": "not JSON"}, False, Outcome.CRASHED),
    ],
)
def test_classify_table(returncode: int | None, report: dict | None, timed_out: bool, outcome: Outcome) -> None:
    got, message = classify(returncode, report, timed_out)
    assert got is outcome
    if outcome not in (Outcome.PASSED, Outcome.SKIPPED):
        assert message


def test_classify_messages() -> None:
    assert classify(1, F, False) == (Outcome.FAILED, "assert x")
    assert classify(1, C, False) == (Outcome.CUDA_ERROR, "boom")
    assert classify(-signal.SIGSEGV, None, False) == (Outcome.FAULT, "the child was killed by SIGSEGV")
    assert classify(-64, None, False)[0] is Outcome.SIGNAL  # a real-time signal has a name or a number


# -- explain ------------------------------------------------------------------------------------------------


JETSON_TEXT = (
    "the child was killed by SIGSEGV: on a device without concurrent managed access "
    "(CONCURRENT_MANAGED_ACCESS=0, e.g. Jetson) the CPU touched managed memory while the GPU was busy; "
    "attach the buffer to the host with cuStreamAttachMemAsync (jetmem.attach_host(buf)) "
    "or synchronize before the CPU access"
)


def test_explain_fault_on_jetson() -> None:
    r = child_result(Outcome.FAULT, returncode=-11, signal_name="SIGSEGV", stderr="Fatal Python error: x\nline 2\n")
    text = explain(r, 0)
    assert text.startswith(JETSON_TEXT)
    assert "    line 2" in text  # stderr tail


def test_explain_sigbus_is_a_fault_of_an_undocumented_kind() -> None:
    r = child_result(Outcome.SIGNAL, returncode=-7, signal_name="SIGBUS")
    text = explain(r, 0)
    assert text.startswith("the child was killed by SIGBUS, a fault of an undocumented kind: NVIDIA documents")
    assert "as a segmentation fault (SIGSEGV) only" in text and "report it" in text


def test_explain_fault_with_concurrent_access() -> None:
    text = explain(child_result(Outcome.FAULT, returncode=-11, signal_name="SIGSEGV"), 1)
    assert "CONCURRENT_MANAGED_ACCESS=1" in text
    assert "not the managed-memory concurrency rule" in text
    assert "jetmem.attach_host" not in text


def test_explain_fault_unknown_attribute() -> None:
    text = explain(child_result(Outcome.FAULT, returncode=-11, signal_name="SIGSEGV"), None)
    assert "unknown" in text and "jetmem.attach_host(buf)" in text


def test_explain_signal_shows_stderr_tail() -> None:
    stderr = "\n".join(f"line {i}" for i in range(100)) + "\nAborted (core dumped)\n"
    text = explain(child_result(Outcome.SIGNAL, returncode=-6, signal_name="SIGABRT", stderr=stderr), 0)
    assert text.startswith("the child was killed by SIGABRT")
    assert "Aborted (core dumped)" in text
    assert "line 0\n" not in text  # only the tail


def test_explain_crashed_falls_back_to_stdout() -> None:
    r = child_result(Outcome.CRASHED, returncode=1, message="exited with status 1", stdout="E   ImportError: nope")
    text = explain(r, 0)
    assert "exited with status 1" in text and "stdout" in text and "ImportError: nope" in text


def test_explain_timeout_cuda_failed_skipped_passed() -> None:
    assert "within 1 s" in explain(child_result(Outcome.TIMEOUT, message="did not finish within 1 s"), 0)
    cuda = child_result(Outcome.CUDA_ERROR, cuda_error_name="CUDA_ERROR_ILLEGAL_ADDRESS", message="sync failed")
    text = explain(cuda, 0)
    assert "CUDA_ERROR_ILLEGAL_ADDRESS: sync failed" in text and "sticky" in text
    failed = child_result(Outcome.FAILED, message="assert 1 == 2")
    assert explain(failed, 0) == "the test failed in the child: assert 1 == 2"
    assert "no GPU" in explain(child_result(Outcome.SKIPPED, message="no GPU"), 0)
    assert explain(child_result(Outcome.PASSED), 1) == "the test passed in the child"


def test_explain_real_fault_end_to_end() -> None:
    r = run_py("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert explain(r, 0).startswith(JETSON_TEXT)
