"""The demo suite: the forum scenarios this project answers, run in every memory mode on this machine.

``pytest-jetmem-demo`` (or ``python -m pytest_jetmem.demo``) runs the test files shipped in this package
with pytest. They are written as a user of the plugin would write them (``@pytest.mark.memmode`` and
``jetmem.measure(..., scope=...)``), check every result against a numpy reference, and time it:

- seed 001: a 640x480 float32 convolution with kernel sizes 3x3 to 45x45, kernel time and end to end;
- seed 001's unified-memory experiment: 10 launches of the 45x45 convolution, the CPU writing the input
  before each of the first 5, the kernel time of each launch;
- seed 000: a 2048x2048 tiled matrix product;
- seed 003: a 1920x1080 RGBA camera frame written by the CPU and read once by a grayscale kernel, end to
  end and kernel time: the case where zero-copy memory wins or ties.

It runs every memory mode the device supports (``--jetmem-modes=all``; ``--jetmem-modes device,zero_copy`` picks
fewer). At the end it prints the plugin's "jetmem runtimes" table and one table per scenario (median, ratio to
``device``, first call, the winning mode where the figures support one) with its advice: which mode to pick and
why, and NVIDIA's rule for this device (:mod:`pytest_jetmem.measure.advice`). Extra arguments go to pytest
unchanged, e.g. ``pytest-jetmem-demo -k conv2d`` or ``--jetmem-report demo.html``. Each measurement samples for at
most ``MAX_TIME_S`` seconds (``--jetmem-max-time`` overrides it).

Exit status: 0 when every demo test passed or was skipped, pytest's status otherwise. Where no GPU can be
used, the whole output is one line saying why (the suite still runs, to prove it collects and skips cleanly).
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
MAX_TIME_S = 0.2  # sampling cap per measurement: the demo takes about 10 s of pytest time on an H100

__all__ = ["HERE", "MAX_TIME_S", "main", "pytest_args"]


class _NoGpuNotice:
    """Counts the demo tests that will skip, for the one line printed where no GPU can be used."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.items = 0
        self.modes: list[str] = []

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        from pytest_jetmem.cuda.modes import rank  # not at import: the command's no-GPU line stays cheap

        modes = {_mode_of(item) for item in session.items}
        self.items = len(session.items)
        self.modes = sorted((m for m in modes if m), key=rank)  # registry order, then the others

    def line(self) -> str:
        over = f" over {', '.join(self.modes)}" if self.modes else ""
        return f"pytest-jetmem demo: {self.what}: the {self.items} demo tests{over} are skipped"


def _gpu_problem() -> str | None:
    """None where the demo can use a GPU, else a short phrase saying why not."""
    from pytest_jetmem.cuda.device import open_device

    avail = open_device()
    if avail.device is not None:
        avail.device.close()  # the plugin opens its own
    if avail.ok:
        return None
    if avail.info is None:
        return f"no GPU here ({avail.reason})"
    return f"the GPU here ({avail.info.name}) cannot be used ({avail.reason})"


def pytest_args(args: Sequence[str] = ()) -> list[str]:
    """The pytest command line of the demo: its folder, quiet output, then ``args``; as ini values (which an option
    in ``args`` overrides): the sampling cap, every mode the device supports (``jetmem_modes = all``), and no
    plugin "jetmem advice" section (the demo's tables carry the advice per scenario)."""
    # pytest_jetmem is imported already (this module is in it): pytest cannot rewrite its asserts, and says so.
    quiet = ["-W", "ignore:Module already imported so cannot be rewritten:pytest.PytestAssertRewriteWarning"]
    ini = ["-o", f"jetmem_max_time={MAX_TIME_S}", "-o", "jetmem_modes=all", "-o", "jetmem_advice=off"]
    return [str(HERE), "-p", "no:cacheprovider", "-q", "-rfEs", *quiet, *ini, *args]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo suite; return 0 when everything passed or was skipped, non-zero on failures."""
    args = pytest_args(sys.argv[1:] if argv is None else argv)
    problem = _gpu_problem()
    if problem is None:
        return int(pytest.main(args))
    # No usable GPU: the suite still runs (it must collect and skip cleanly), but its output is one line.
    notice = _NoGpuNotice(problem)
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        code = int(pytest.main(args, plugins=[notice]))
    if code == 0 and notice.items:
        print(notice.line(), flush=True)
    else:  # something went wrong (or nothing was selected): show what pytest said
        sys.stdout.write(captured.getvalue())
        sys.stdout.flush()
    return code


def _mode_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("memmode") if callspec is not None else None
