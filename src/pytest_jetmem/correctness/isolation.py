"""Run a test in a fresh child process and classify how it ended.

The ``memmode_concurrency`` marker runs its test in a new interpreter (spawned, never forked after CUDA
initialisation), because on a device without concurrent managed access a CPU touch of managed memory while a
kernel runs kills the whole process. This module is the GPU-free half of that: start the child in its own
session, enforce a timeout on its whole process group, collect its output and the result it wrote, and turn
all of it into an :class:`Outcome` with a readable explanation.

Child protocol: the parent puts a file path in the environment variable :data:`CHILD_RESULT_ENV`; the child
calls :func:`write_child_result` once it knows how the test went. The file holds JSON
``{"outcome": "passed" | "failed" | "skipped", "message": str, "cuda_error": str | None}``. How the child
*ended* (exit status or signal) always wins over what it wrote: a child that writes "passed" and then dies of
SIGSEGV is a :attr:`Outcome.FAULT`.

POSIX only (process groups, ``waitid``); Jetson runs Linux.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pytest_jetmem.atomic import write_atomic
from pytest_jetmem.errors import STICKY_ERRORS

__all__ = [
    "CHILD_RESULT_ENV",
    "ChildResult",
    "Outcome",
    "child_result_path",
    "classify",
    "explain",
    "read_child_result",
    "run_child",
    "write_child_result",
]

#: Environment variable through which the parent tells the child where to write its result.
CHILD_RESULT_ENV = "PYTEST_JETMEM_CHILD_RESULT"

#: Outcomes a child may write (the values of the matching :class:`Outcome` members).
CHILD_OUTCOMES = frozenset({"passed", "failed", "skipped"})

#: The documented fault: NVIDIA's documents describe a CPU access to managed memory while the GPU is active, on a
#: device without concurrent managed access, as a segmentation fault (SIGSEGV). Any other fatal signal (SIGBUS,
#: SIGABRT, SIGILL, ...) is :attr:`Outcome.SIGNAL`: a fault of an undocumented kind, never taken for this one.
FAULT_SIGNALS = frozenset({signal.SIGSEGV})

DEFAULT_GRACE_S = 5.0
DEFAULT_TAIL_BYTES = 8192
_MAX_MESSAGE_CHARS = 16384


class Outcome(str, Enum):
    """How a child process ended, as far as the parent can tell."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    FAULT = "fault"  # killed by SIGSEGV: the documented fault
    SIGNAL = "signal"  # killed by any other signal: a fault of an undocumented kind
    CUDA_ERROR = "cuda_error"  # the child reported a CUDA error
    TIMEOUT = "timeout"  # still running at the deadline; its process group was killed
    CRASHED = "crashed"  # exited without a (valid) result, or with a status that contradicts it

    def __str__(self) -> str:
        return self.value


@dataclass
class ChildResult:
    """Everything the parent learned about one child run."""

    outcome: Outcome
    returncode: int | None
    signal_name: str | None
    message: str | None
    cuda_error_name: str | None
    duration_s: float
    stdout: str
    stderr: str
    report: dict[str, Any] | None = None


# ----------------------------------------------------------------------------------------------------------
# Child side


def child_result_path() -> str | None:
    """The result path the parent gave this process, or None when not running as an isolated child."""
    return os.environ.get(CHILD_RESULT_ENV) or None


def write_child_result(
    path: str | os.PathLike[str],
    outcome: str,
    message: str,
    cuda_error: str | None = None,
) -> None:
    """Write the child's result atomically (:func:`~pytest_jetmem.atomic.write_atomic`).

    ``outcome`` is "passed", "failed" or "skipped" (an :class:`Outcome` of those values is accepted);
    ``cuda_error`` is the CUDA error name, e.g. ``CUDA_ERROR_ILLEGAL_ADDRESS``, when one caused the failure.
    """
    value = outcome.value if isinstance(outcome, Outcome) else str(outcome)
    if value not in CHILD_OUTCOMES:
        raise ValueError(f"outcome must be one of {sorted(CHILD_OUTCOMES)}, not {outcome!r}")
    if cuda_error is not None and not isinstance(cuda_error, str):
        raise TypeError(f"cuda_error must be a str or None, not {type(cuda_error).__name__}")
    payload = {"outcome": value, "message": str(message)[:_MAX_MESSAGE_CHARS], "cuda_error": cuda_error}
    write_atomic(path, json.dumps(payload))


# ----------------------------------------------------------------------------------------------------------
# Parent side


def read_child_result(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The result a child wrote: None when there is no file; a dict with ``_error`` when it is unreadable."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return {"_error": f"cannot read the result file: {exc}"}
    try:
        data = json.loads(text)
    except ValueError as exc:
        return {"_error": f"the result file is not JSON ({exc}): {text[:200]!r}"}
    if not isinstance(data, dict):
        return {"_error": f"the result file holds {type(data).__name__}, not an object: {text[:200]!r}"}
    return data


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def classify(returncode: int | None, report: dict[str, Any] | None, timed_out: bool) -> tuple[Outcome, str | None]:
    """Decide the :class:`Outcome` of a child from its exit status, the result it wrote and the timeout.

    Precedence: timeout, then death by signal (SIGSEGV -> FAULT, any other -> SIGNAL), then the written
    result (a ``cuda_error`` -> CUDA_ERROR), then CRASHED when nothing valid was written. A written "passed"
    with a nonzero exit status is FAILED: something went wrong after the test body.
    """
    if timed_out:
        return Outcome.TIMEOUT, "the child did not finish before the timeout"
    if returncode is not None and returncode < 0:
        signum = -returncode
        name = _signal_name(signum)
        outcome = Outcome.FAULT if signum in FAULT_SIGNALS else Outcome.SIGNAL
        note = ""
        if report is not None and report.get("outcome") in CHILD_OUTCOMES:
            note = f" (after it had written {report['outcome']!r})"
        return outcome, f"the child was killed by {name}{note}"
    if returncode is None:
        return Outcome.CRASHED, "the child's exit status is unknown"

    if report is None:
        if returncode == 0:
            return Outcome.CRASHED, (
                "the child exited with status 0 but wrote no result (the test did not run, "
                "or nothing in the child reported it)"
            )
        return Outcome.CRASHED, f"the child exited with status {returncode} without writing a result"
    if "_error" in report:
        return Outcome.CRASHED, f"the child exited with status {returncode}; {report['_error']}"

    written = report.get("outcome")
    message = report.get("message")
    message = None if message is None else str(message)
    cuda_error = report.get("cuda_error")
    if written not in CHILD_OUTCOMES:
        return Outcome.CRASHED, f"the child wrote an unrecognised outcome {written!r} (status {returncode})"
    if cuda_error:
        return Outcome.CUDA_ERROR, message or str(cuda_error)
    if written == "passed" and returncode != 0:
        detail = f": {message}" if message else ""
        return Outcome.FAILED, f"the child wrote 'passed' but exited with status {returncode}{detail}"
    return Outcome(written), message


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _wait_exited(pid: int, timeout_s: float | None) -> bool:
    """Wait until ``pid`` has exited WITHOUT reaping it (so its pid, the group id, cannot be reused)."""
    deadline = None if timeout_s is None else time.monotonic() + max(timeout_s, 0.0)
    delay = 0.0005
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # already reaped elsewhere
            return True
        if info is not None:
            return True
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(delay, remaining))
        else:
            time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _tail(path: str, limit: int) -> str:
    """The last ``limit`` bytes of a file as text, marked when truncated."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            start = max(0, size - limit)
            fh.seek(start)
            data = fh.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    if start:
        text = f"[... {start} bytes truncated ...]\n" + text
    return text


def run_child(
    argv: Sequence[str],
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    *,
    grace_s: float = DEFAULT_GRACE_S,
    tail_bytes: int = DEFAULT_TAIL_BYTES,
) -> ChildResult:
    """Run ``argv`` in a new session and process group and classify how it ended.

    ``env`` is the child's whole environment (like :class:`subprocess.Popen`; None inherits this process's);
    :data:`CHILD_RESULT_ENV` is always set on top. At ``timeout_s`` the whole group gets SIGTERM, and SIGKILL
    ``grace_s`` later; when the child ends on its own, whatever it left in its group is killed too. Output
    goes to temporary files (so a leftover grandchild holding them cannot block us) and only the last
    ``tail_bytes`` of each are kept. The result file and the temporary folder are deleted.
    """
    if os.name != "posix":
        raise NotImplementedError("run_child needs POSIX process groups")
    if not argv:
        raise ValueError("argv is empty")
    workdir = tempfile.mkdtemp(prefix="jetmem-child-")
    try:
        result_path = os.path.join(workdir, "result.json")
        out_path = os.path.join(workdir, "stdout")
        err_path = os.path.join(workdir, "stderr")
        child_env = dict(os.environ if env is None else env)
        child_env[CHILD_RESULT_ENV] = result_path

        timed_out = False
        start = time.monotonic()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=child_env,
                cwd=cwd,
                start_new_session=True,  # setsid(): the child leads a new session and process group
            )
        pgid = proc.pid
        try:
            if not _wait_exited(proc.pid, timeout_s):
                timed_out = True
                _kill_group(pgid, signal.SIGTERM)
                _wait_exited(proc.pid, grace_s)
            # The leader is stopped but not reaped yet, so pgid still names its group: clear out the rest.
            _kill_group(pgid, signal.SIGKILL)
        except BaseException:
            _kill_group(pgid, signal.SIGKILL)
            proc.wait()
            raise
        returncode = proc.wait()
        duration = time.monotonic() - start

        report = read_child_result(result_path)
        outcome, message = classify(returncode, report, timed_out)
        if timed_out:
            message = (
                f"the child did not finish within {timeout_s:g} s; its process group was killed "
                f"(SIGTERM, then SIGKILL after {grace_s:g} s)"
            )
        cuda_error = report.get("cuda_error") if report else None
        return ChildResult(
            outcome=outcome,
            returncode=returncode,
            signal_name=_signal_name(-returncode) if returncode < 0 else None,
            message=message,
            cuda_error_name=str(cuda_error) if cuda_error else None,
            duration_s=duration,
            stdout=_tail(out_path, tail_bytes),
            stderr=_tail(err_path, tail_bytes),
            report=report,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# ----------------------------------------------------------------------------------------------------------
# Explanations

# The rule behind FAULT on Jetson, paraphrased from NVIDIA's documentation (stable pages; docs/concurrency.md):
# - CUDA for Tegra application note, "Effective Usage of Unified Memory on Tegra", section "Unified memory
#   where cudaDeviceProp::concurrentManagedAccess is 0":
#   https://docs.nvidia.com/cuda/cuda-for-tegra-appnote/index.html
# - CUDA Programming Guide, unified memory, the section on devices without full unified memory support
#   (concurrentManagedAccess 0: Tegra, and GPUs older than compute capability 6.x): while the GPU is active
#   (a kernel, or a memcpy/memset on a stream) it has exclusive access to managed memory, so a CPU access then
#   ends in a segmentation fault. That is the only signal the documents name, hence FAULT_SIGNALS.
#   https://docs.nvidia.com/cuda/cuda-programming-guide/04-special-topics/unified-memory.html
# - cuMemAllocManaged / cuStreamAttachMemAsync (CUDA driver API): memory attached with CU_MEM_ATTACH_HOST is
#   not accessed by any stream on a device with CONCURRENT_MANAGED_ACCESS == 0, so the CPU may use it while
#   kernels run; the attach is stream-ordered (it takes effect once earlier work in the stream completes).
#   https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__MEM.html
#   https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__STREAM.html
# - The exclusivity covers allocations the running kernel never uses (NVIDIA/cuda-python issue #1539):
#   https://github.com/NVIDIA/cuda-python/issues/1539

_TAIL_LINES = 20
_TAIL_CHARS = 2000


def _output_tail(result: ChildResult) -> str:
    """A few last lines of stderr (or stdout when stderr is empty), indented, for messages."""
    for name, text in (("stderr", result.stderr), ("stdout", result.stdout)):
        text = text.strip()
        if text:
            lines = text[-_TAIL_CHARS:].splitlines()[-_TAIL_LINES:]
            return f"\nlast lines of the child's {name}:\n" + "\n".join("    " + line for line in lines)
    return "\n(the child wrote nothing to stdout or stderr)"


def explain(result: ChildResult, concurrent_managed_access: int | None) -> str:
    """Explain ``result``; ``concurrent_managed_access`` is the device attribute, None when unknown."""
    sig = result.signal_name or "SIGSEGV"
    outcome = result.outcome
    if outcome is Outcome.FAULT:
        if concurrent_managed_access == 0:
            text = (
                f"the child was killed by {sig}: on a device without concurrent managed access "
                "(CONCURRENT_MANAGED_ACCESS=0, e.g. Jetson) the CPU touched managed memory while the GPU was "
                "busy; attach the buffer to the host with cuStreamAttachMemAsync (jetmem.attach_host(buf)) "
                "or synchronize before the CPU access. While any kernel runs, the GPU owns every managed "
                "allocation, even ones the kernel does not use."
            )
        elif concurrent_managed_access is None:
            text = (
                f"the child was killed by {sig}. CONCURRENT_MANAGED_ACCESS of this device is unknown: if it "
                "is 0 (e.g. Jetson), the CPU touching managed memory while a kernel runs kills the process; "
                "attach the buffer to the host with cuStreamAttachMemAsync (jetmem.attach_host(buf)) or "
                "synchronize before the CPU access. Otherwise it is an ordinary invalid memory access."
            )
        else:
            text = (
                f"the child was killed by {sig} on a device with concurrent managed access "
                f"(CONCURRENT_MANAGED_ACCESS={concurrent_managed_access}), where the CPU may touch managed "
                "memory while kernels run; this is an ordinary invalid memory access (a freed or bad host "
                "pointer, a bug in native code), not the managed-memory concurrency rule."
            )
        return text + _output_tail(result)
    if outcome is Outcome.SIGNAL:
        text = f"the child was killed by {result.signal_name or 'a signal'}, a fault of an undocumented kind"
        if result.signal_name == "SIGABRT":
            text += " (abort(): a failed assertion or a fatal error in native code)"
        elif result.signal_name == "SIGKILL":
            text += " (from outside: possibly the out-of-memory killer)"
        text += (
            ": NVIDIA documents a CPU access to managed memory while the GPU is active (where "
            "CONCURRENT_MANAGED_ACCESS is 0) as a segmentation fault (SIGSEGV) only, so this is not taken for it; "
            "if this device answers such an access with this signal, report it with the output below"
        )
        return text + _output_tail(result)
    if outcome is Outcome.TIMEOUT:
        return (result.message or "the child did not finish before the timeout") + _output_tail(result)
    if outcome is Outcome.CUDA_ERROR:
        name = result.cuda_error_name or "an unnamed CUDA error"
        text = f"the child failed with {name}"
        if result.message and result.message != name:
            text += f": {result.message}"
        if name in STICKY_ERRORS:
            text += " (a sticky error: the CUDA context was unusable afterwards)"
        return text
    if outcome is Outcome.CRASHED:
        return (result.message or "the child crashed without writing a result") + _output_tail(result)
    if outcome is Outcome.FAILED:
        return "the test failed in the child" + (f": {result.message}" if result.message else "")
    if outcome is Outcome.SKIPPED:
        return "the test was skipped in the child" + (f": {result.message}" if result.message else "")
    return "the test passed in the child"
