"""The demo suite: the forum scenarios this project answers, run in every memory mode on this machine.

``pytest-jetmem-demo`` (or ``python -m pytest_jetmem.demo``) runs the test files shipped in this
package with pytest: the seed 001 2D convolution (640x480, kernel sizes 3, 15 and 45) and the seed
000 tiled matrix product (n = 1024), each checked against its numpy reference and timed in the
``device``, ``managed`` and ``zero_copy`` modes. At the end it prints one table per scenario
(median ms, ratio to ``device``, the winning mode). Extra arguments go to pytest unchanged, e.g.
``pytest-jetmem-demo -k conv2d --jetmem-modes device,zero_copy``.

Exit status: 0 when every demo test passed or was skipped (no GPU here is not a failure: the tests
skip and one line says why), pytest's status otherwise.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
MODE_ORDER = ("device", "managed", "zero_copy")

__all__ = ["HERE", "main"]


class _NoGpuNotice:
    """Says, in one line before any test runs, that the demo tests will skip and why."""

    def __init__(self, what: str) -> None:
        self.what = what

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not session.items:
            return  # nothing selected: pytest says so itself
        modes = {getattr(item, "callspec", None) and item.callspec.params.get("memmode") for item in session.items}
        names = [m for m in MODE_ORDER if m in modes] + sorted(m for m in modes if m and m not in MODE_ORDER)
        over = f" over {', '.join(names)}" if names else ""
        line = f"pytest-jetmem demo: {self.what}: the {len(session.items)} demo tests{over} are skipped"
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(line)
        else:
            print(line, flush=True)


def _gpu_problem() -> str | None:
    """None where the demo can use a GPU, else a short phrase saying why not."""
    from ..device import open_device

    avail = open_device()
    if avail.device is not None:
        avail.device.close()  # the plugin opens its own
    if avail.ok:
        return None
    if avail.info is None:
        return f"no GPU here ({avail.reason})"
    return f"the GPU here ({avail.info.name}) cannot be used ({avail.reason})"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo suite; return 0 when everything passed or was skipped, non-zero on failures."""
    args = list(sys.argv[1:] if argv is None else argv)
    problem = _gpu_problem()
    plugins: list[object] = [] if problem is None else [_NoGpuNotice(problem)]
    # pytest_jetmem is imported already (this module is in it): pytest cannot rewrite its asserts, and says so.
    quiet = ["-W", "ignore:Module already imported so cannot be rewritten:pytest.PytestAssertRewriteWarning"]
    code = pytest.main([str(HERE), "-p", "no:cacheprovider", "-q", "-rfEs", *quiet, *args], plugins=plugins)
    return int(code)
