"""Child processes: start one in its own process group (:class:`Spawned`), and classify how a test's child ended.

Every child of pytest-jetmem is a :class:`Spawned`: a new interpreter (fork+exec, never a fork after CUDA
initialisation) leading its own session and process group, its output in files, ended with a timeout that kills
the whole group. The ``memmode_concurrency`` marker needs that most: on a device without concurrent managed
access a CPU touch of managed memory while a kernel runs kills the whole process. This module is the GPU-free
half of judging such a child: turn its exit status, the timeout and what it said of its test
(``{"outcome": "passed" | "failed" | "skipped", "message": str, "cuda_error": str | None}``, built by the plugin
from the reports the child sent) into an :class:`Outcome` with a readable explanation. How the child *ended*
(exit status or signal) always wins over what it said: a child that said "passed" and then died of SIGSEGV is a
:attr:`Outcome.FAULT`.

POSIX only (process groups, ``waitid``); Jetson runs Linux.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pytest_jetmem.errors import STICKY_ERRORS

__all__ = [
    "ChildResult",
    "Outcome",
    "Spawned",
    "child_result",
    "classify",
    "explain",
]

#: Outcomes a child may say its test had (the values of the matching :class:`Outcome` members).
CHILD_OUTCOMES = frozenset({"passed", "failed", "skipped"})

#: The documented fault: NVIDIA's documents describe a CPU access to managed memory while the GPU is active, on a
#: device without concurrent managed access, as a segmentation fault (SIGSEGV). Any other fatal signal (SIGBUS,
#: SIGABRT, SIGILL, ...) is :attr:`Outcome.SIGNAL`: a fault of an undocumented kind, never taken for this one.
FAULT_SIGNALS = frozenset({signal.SIGSEGV})

DEFAULT_GRACE_S = 5.0
DEFAULT_TAIL_BYTES = 8192


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
# How a child ended


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
        return _killed(-returncode, report)
    if returncode is None:
        return Outcome.CRASHED, "the child's exit status is unknown"
    if report is None:
        if returncode == 0:
            return Outcome.CRASHED, (
                "the child exited with status 0 but wrote no result (the test did not run, "
                "or nothing in the child reported it)"
            )
        return Outcome.CRASHED, f"the child exited with status {returncode} without writing a result"
    return _written(returncode, report)


def _killed(signum: int, report: dict[str, Any] | None) -> tuple[Outcome, str]:
    """A child killed by ``signum``: FAULT for SIGSEGV, SIGNAL for any other (saying what it had written)."""
    outcome = Outcome.FAULT if signum in FAULT_SIGNALS else Outcome.SIGNAL
    note = ""
    if report is not None and report.get("outcome") in CHILD_OUTCOMES:
        note = f" (after it had written {report['outcome']!r})"
    return outcome, f"the child was killed by {_signal_name(signum)}{note}"


def _written(returncode: int, report: dict[str, Any]) -> tuple[Outcome, str | None]:
    """A child that exited with ``returncode`` after writing ``report``: the outcome it wrote, checked."""
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


# ----------------------------------------------------------------------------------------------------------
# Starting and ending a child


class Spawned:
    """A child process that leads its own session and process group, its stdout and stderr in files.

    The one way every child of pytest-jetmem is started (``memmode_concurrency``, the two sides of
    ``--jetmem-against``, the relay after a sticky error): fork+exec (:class:`subprocess.Popen`, so nothing
    of this process's CUDA state is used in the child), ``start_new_session`` (so a signal to its group
    reaches every process it started), stdin from ``/dev/null``. :meth:`end` waits for it with a timeout
    and kills the whole group: at the deadline SIGTERM, SIGKILL ``grace_s`` later; when it ends on its own,
    whatever it left in its group is killed too. ``pass_fds`` are inherited (a driven child's pipes).
    """

    def __init__(
        self,
        argv: Sequence[str],
        out_path: str | os.PathLike[str],
        err_path: str | os.PathLike[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        pass_fds: Sequence[int] = (),
    ) -> None:
        if os.name != "posix":
            raise NotImplementedError("child processes need POSIX process groups")
        if not argv:
            raise ValueError("argv is empty")
        self.out_path = os.fspath(out_path)
        self.err_path = os.fspath(err_path)
        self.start = time.monotonic()
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=None if env is None else dict(env),
                cwd=cwd,
                pass_fds=tuple(pass_fds),
                start_new_session=True,  # setsid(): the child leads a new session and process group
            )
        self.pgid = self.process.pid
        self.timed_out = False

    @property
    def pid(self) -> int:
        return self.process.pid

    def exited(self, timeout_s: float | None = 0.0) -> bool:
        """Whether the child has exited, waiting up to ``timeout_s`` (None: for ever); it is not reaped, so
        its pid, the group's id, cannot be reused while the rest of the group is cleared out."""
        if self.process.returncode is not None:
            return True
        return _wait_exited(self.pid, timeout_s)

    def kill_group(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to the child's whole process group."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pgid, sig)

    def end(self, timeout_s: float | None, grace_s: float = DEFAULT_GRACE_S) -> int:
        """Wait up to ``timeout_s`` for the child to exit (None: for ever), else SIGTERM its group and SIGKILL
        it ``grace_s`` later; then kill what it left in its group and reap it. Its exit status (a signal:
        negative); :attr:`timed_out` says whether the deadline was reached."""
        if self.process.returncode is not None:
            return self.process.returncode
        try:
            if not self.exited(timeout_s):
                self.timed_out = True
                self.kill_group(signal.SIGTERM)
                self.exited(grace_s)
            # The leader is stopped but not reaped yet, so pgid still names its group: clear out the rest.
            self.kill_group(signal.SIGKILL)
        except BaseException:
            self.kill_group(signal.SIGKILL)
            self.process.wait()
            raise
        return self.process.wait()

    def duration_s(self) -> float:
        return time.monotonic() - self.start

    def stdout(self, limit: int = DEFAULT_TAIL_BYTES) -> str:
        """The last ``limit`` bytes of its stdout."""
        return _tail(self.out_path, limit)

    def stderr(self, limit: int = DEFAULT_TAIL_BYTES) -> str:
        """The last ``limit`` bytes of its stderr."""
        return _tail(self.err_path, limit)


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


def child_result(
    child: Spawned,
    returncode: int,
    report: dict[str, Any] | None,
    *,
    timeout_s: float,
    grace_s: float = DEFAULT_GRACE_S,
    tail_bytes: int = DEFAULT_TAIL_BYTES,
) -> ChildResult:
    """The :class:`ChildResult` of a child that has ended with ``returncode`` (:meth:`Spawned.end` with
    ``timeout_s`` and ``grace_s``) after saying ``report`` of its test (None: nothing)."""
    outcome, message = classify(returncode, report, child.timed_out)
    if child.timed_out:
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
        duration_s=child.duration_s(),
        stdout=child.stdout(tail_bytes),
        stderr=child.stderr(tail_bytes),
        report=report,
    )


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


#: Explains a child's end: (result, the device's CONCURRENT_MANAGED_ACCESS or None) -> text.
Explainer = Callable[[ChildResult, int | None], str]


def explain(result: ChildResult, concurrent_managed_access: int | None) -> str:
    """Explain ``result``; ``concurrent_managed_access`` is the device attribute, None when unknown."""
    return _EXPLAIN[result.outcome](result, concurrent_managed_access)


def _explain_fault(result: ChildResult, cma: int | None) -> str:
    """SIGSEGV: the managed-memory rule where the device has no concurrent managed access (or may lack it)."""
    sig = result.signal_name or "SIGSEGV"
    if cma == 0:
        text = (
            f"the child was killed by {sig}: on a device without concurrent managed access "
            "(CONCURRENT_MANAGED_ACCESS=0, e.g. Jetson) the CPU touched managed memory while the GPU was "
            "busy; attach the buffer to the host with cuStreamAttachMemAsync (jetmem.attach_host(buf)) "
            "or synchronize before the CPU access. While any kernel runs, the GPU owns every managed "
            "allocation, even ones the kernel does not use."
        )
    elif cma is None:
        text = (
            f"the child was killed by {sig}. CONCURRENT_MANAGED_ACCESS of this device is unknown: if it "
            "is 0 (e.g. Jetson), the CPU touching managed memory while a kernel runs kills the process; "
            "attach the buffer to the host with cuStreamAttachMemAsync (jetmem.attach_host(buf)) or "
            "synchronize before the CPU access. Otherwise it is an ordinary invalid memory access."
        )
    else:
        text = (
            f"the child was killed by {sig} on a device with concurrent managed access "
            f"(CONCURRENT_MANAGED_ACCESS={cma}), where the CPU may touch managed "
            "memory while kernels run; this is an ordinary invalid memory access (a freed or bad host "
            "pointer, a bug in native code), not the managed-memory concurrency rule."
        )
    return text + _output_tail(result)


#: What a fatal signal other than SIGSEGV usually means, where it is known.
_SIGNAL_HINTS = {
    "SIGABRT": " (abort(): a failed assertion or a fatal error in native code)",
    "SIGKILL": " (from outside: possibly the out-of-memory killer)",
}


def _explain_signal(result: ChildResult, cma: int | None) -> str:
    """Another fatal signal: never taken for the documented fault."""
    text = f"the child was killed by {result.signal_name or 'a signal'}, a fault of an undocumented kind"
    text += _SIGNAL_HINTS.get(result.signal_name or "", "")
    text += (
        ": NVIDIA documents a CPU access to managed memory while the GPU is active (where "
        "CONCURRENT_MANAGED_ACCESS is 0) as a segmentation fault (SIGSEGV) only, so this is not taken for it; "
        "if this device answers such an access with this signal, report it with the output below"
    )
    return text + _output_tail(result)


def _explain_cuda_error(result: ChildResult, cma: int | None) -> str:
    name = result.cuda_error_name or "an unnamed CUDA error"
    text = f"the child failed with {name}"
    if result.message and result.message != name:
        text += f": {result.message}"
    if name in STICKY_ERRORS:
        text += " (a sticky error: the CUDA context was unusable afterwards)"
    return text


def _with_tail(default: str) -> Explainer:
    """An explainer: the child's message (else ``default``) and the tail of its output."""
    return lambda result, cma: (result.message or default) + _output_tail(result)


def _said(text: str) -> Explainer:
    """An explainer: ``text`` and the child's message, if any."""
    return lambda result, cma: text + (f": {result.message}" if result.message else "")


_EXPLAIN: dict[Outcome, Explainer] = {
    Outcome.FAULT: _explain_fault,
    Outcome.SIGNAL: _explain_signal,
    Outcome.TIMEOUT: _with_tail("the child did not finish before the timeout"),
    Outcome.CUDA_ERROR: _explain_cuda_error,
    Outcome.CRASHED: _with_tail("the child crashed without writing a result"),
    Outcome.FAILED: _said("the test failed in the child"),
    Outcome.SKIPPED: _said("the test was skipped in the child"),
    Outcome.PASSED: lambda result, cma: "the test passed in the child",
}
