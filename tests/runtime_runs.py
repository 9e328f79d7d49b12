"""What the pytester runs of the ``memmode_runtime`` tests share: the inner test files and readers of the
run's output (outcomes, the "jetmem runtimes" table, junitxml, baselines). Their fixtures: runtime_fixtures.py.
"""

from __future__ import annotations

import json
import re
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fakes.fake_driver import FakeDriver, Launch
from pytest_jetmem.cuda.modes import default_names

InstallFake = Callable[..., FakeDriver]

MODES = default_names()  # the built-in modes: nothing else is registered when the tests import this
N = 1000  # floats per buffer in the inner tests: 4000-byte allocations, easy to pick out in the fake
NBYTES = 4 * N

# The inner test files start with this: ``fill(jetmem, launches)`` allocates one buffer in the handle's mode
# and returns work that launches the bundled stream_fill kernel on it ``launches`` times.
HEADER = f"""
import numpy as np
import pytest

N = {N}


def fill(jetmem, launches=1):
    x = jetmem.zeros(N)
    k = jetmem.kernel("stream_fill")

    def work():
        for _ in range(launches):
            k.launch(4, 256, (x, np.uint64(N), np.float32(1)))

    return work
"""


def inner(body: str) -> str:
    return HEADER + textwrap.dedent(body)


def jittered(ms: float, seed: int = 0, rel: float = 0.01) -> Callable[[Launch], float]:
    """A kernel_ms for the fake: ``ms`` with a seeded 1% normal jitter per launch (realistic, reproducible)."""
    rng = np.random.default_rng(seed)
    return lambda launch: ms * (1.0 + rel * float(rng.standard_normal()))


def outcomes(result: pytest.RunResult) -> dict[str, str]:
    """Test name -> PASSED/FAILED/ERROR/SKIPPED from the short summary (the run needs ``-rA``)."""
    out = {}
    for line in result.outlines:
        m = re.match(r"(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) \S+?::(\S+)", line)
        if m:
            out[m.group(2)] = m.group(1)
    return out


def message_lines(result: pytest.RunResult, prefix: str) -> list[str]:
    """Lines of the FAILURES section that start with ``prefix`` (the short summary is left out)."""
    lines = result.outlines
    start = next((i for i, line in enumerate(lines) if " FAILURES " in line), len(lines))
    return [line for line in lines[start:] if line.startswith(prefix)]


def table(result: pytest.RunResult) -> list[dict[str, str]]:
    """The rows of the "jetmem runtimes" section, as column -> cell (cut at the dashed line's columns)."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if "jetmem runtimes" in line)
    header, dashes = lines[start + 1], lines[start + 2]
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", dashes)]
    spans[-1] = (spans[-1][0], 10_000)
    names = [header[a:b].strip() for a, b in spans]
    rows = []
    for line in lines[start + 3 :]:
        if not line.strip() or line.startswith(("=", "jetmem:")):
            break
        rows.append({name: line[a:b].strip() for name, (a, b) in zip(names, spans, strict=True)})
    return rows


def row(result: pytest.RunResult, test: str, what: str | None = None) -> dict[str, str]:
    found = [r for r in table(result) if r["test"] == test and (what is None or r["what"] == what)]
    assert len(found) == 1, (test, table(result))
    return found[0]


def fill_kinds(fake: FakeDriver) -> list[str]:
    """The kind of memory each stream_fill launch wrote, in launch order."""
    kind_at = {a.ptr: a.kind for a in fake.allocations()}  # the fake never reuses an address
    return [kind_at[launch.ptr(0)] for launch in fake.launches if launch.kernel == "stream_fill"]


# -- inner test files that several modules run ---------------------------------------------------------
RATIO_FILE = """
@pytest.mark.memmode
@pytest.mark.memmode_runtime(max_ratio=2.0, relative_to="device")
def test_ratio(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""


RUNS_FILE = """
@pytest.mark.memmode("device")
@pytest.mark.memmode_runtime(max_ms=10)
def test_runs(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""


BASE_FILE = """
@pytest.mark.memmode("device")
@pytest.mark.memmode_runtime(max_ms=100)
def test_gated(jetmem):
    jetmem.measure(fill(jetmem), label="fill")

@pytest.mark.memmode("device")
@pytest.mark.memmode_runtime(max_ms=100, baseline=False)
def test_opted_out(jetmem):
    jetmem.measure(fill(jetmem), label="fill")

@pytest.mark.memmode("device")
def test_unmarked(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""


def baseline_path(pytester: pytest.Pytester, name: str = "main", directory: str = ".jetmem/baselines") -> Path:
    return pytester.path / directory / f"{name}.json"


def baseline_doc(pytester: pytest.Pytester, name: str = "main", directory: str = ".jetmem/baselines") -> Any:
    return json.loads(baseline_path(pytester, name, directory).read_text("utf-8"))


def junit_properties(path: Path) -> dict[str, dict[str, str]]:
    """Test name -> its junitxml properties."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        out[case.get("name", "")] = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
    return out
