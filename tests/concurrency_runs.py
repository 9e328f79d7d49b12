"""What the ``memmode_concurrency`` and Tegra-strict pytester runs share: a conftest installing a fake driver in
parent and child, the plugin arguments, and the outcome reader (the ``run_fake`` fixture is in tests/unit/conftest.py).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from plugin_loading import plugin_args
from pytest_jetmem.plugin.concurrency import NODEID_ENV

TESTS_DIR = Path(__file__).resolve().parent  # tests/: the child imports fakes from here
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

        IN_CHILD = bool(os.environ.get({NODEID_ENV!r}))
        FAKE = FakeDriver({child!r} if IN_CHILD else {parent!r})
        driver.install(FAKE)
        """
    )


def outcomes(result: pytest.RunResult) -> dict[str, str]:
    """Test name -> PASSED/FAILED/SKIPPED/XFAIL/... from the ``-v`` lines of a run."""
    out = {}
    for line in result.outlines:
        m = re.match(r"test_it\.py::(\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out
