"""What the runs on several GPUs share (tests/unit/test_multi_gpu.py on a fake driver, tests/gpu/test_multi_gpu_gpu.py
on the GPUs): the inner test file, which logs the device each test got in its own process, and the readers of a
run (the xdist worker of each test, the logs, the "jetmem runtimes" table).

The worker that ran a test is read from the controller's ``-v`` lines (``[gw1] [ 50%] PASSED test_multi.py::...``),
not from what a child process inherited: so a child on another device than its worker is caught.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

#: The folder the inner tests write their logs to (one JSON file per test and process).
LOG_ENV = "JETMEM_MULTI_GPU_LOG"
#: Floats per buffer of ``test_timed`` (the GPU runs use more, so the A/A comparison times real work).
SIZE_ENV = "JETMEM_MULTI_GPU_N"

TESTS = f"""
import json
import os
from pathlib import Path

import numpy as np
import pytest

SRC = '''
extern "C" __global__ void scale(float* x, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= 2;
}}
'''
POKE = 'extern "C" __global__ void poke(float* p) {{ p[0] = 1.0f; }}'
LOG = Path(os.environ[{LOG_ENV!r}])
N = int(os.environ.get({SIZE_ENV!r}, "256"))


def record(request, jetmem, **extra):
    data = {{
        "test": request.node.name,
        "ordinal": jetmem.device.ordinal,
        "device": jetmem.device.name,
        "pid": os.getpid(),
        "tree": str(Path(__file__).resolve().parent),
        **extra,
    }}
    (LOG / f"{{request.node.name}}-{{os.getpid()}}.json").write_text(json.dumps(data))


@pytest.mark.memmode("device")
@pytest.mark.parametrize("i", range(8))
def test_timed(request, jetmem, i):
    x = jetmem.zeros(N)
    k = jetmem.compile(SRC, "scale")
    m = jetmem.measure(lambda: k.launch((N + 255) // 256, 256, (x, np.int32(N))), label="scale")
    record(request, jetmem, span=list(m.span))


def first_on_device_1(jetmem):
    if jetmem.device.ordinal != 1:
        return False
    try:
        os.close(os.open(LOG / "faulted", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True


@pytest.mark.memmode("device")
@pytest.mark.parametrize("i", range(12))
def test_poke(request, jetmem, i):
    x = jetmem.array(np.arange(8, dtype=np.float32) + 2)
    fault = first_on_device_1(jetmem)  # the first test on device 1 writes outside every allocation: sticky
    record(request, jetmem, fault=fault)
    jetmem.compile(POKE, "poke").launch(1, 1, (0xDEAD0000 if fault else x,))
    jetmem.synchronize()
    assert x.to_numpy()[0] == 1.0
"""

TIMED = {f"test_timed[{i}-device]" for i in range(8)}
POKED = {f"test_poke[{i}-device]" for i in range(12)}


def run(project: pytest.Pytester, *args: str) -> pytest.RunResult:
    return project.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-v", *args)


def workers(result: pytest.RunResult) -> dict[str, int]:
    """test name -> index N of the xdist worker gwN that reported it, from the controller's ``-v`` lines."""
    out = {}
    for line in result.outlines:
        m = re.match(r"\[gw(\d+)\] .*\b(?:PASSED|FAILED|ERROR|SKIPPED) test_multi\.py::(\S+)", line)
        if m:
            out[m.group(2)] = int(m.group(1))
    return out


def records(project: pytest.Pytester) -> list[dict[str, Any]]:
    """What the inner tests logged, one object per test and process."""
    return [json.loads(p.read_text()) for p in sorted((project.path / "log").glob("*.json"))]


def runtimes_table(result: pytest.RunResult) -> dict[str, str]:
    """test name -> its "vs baseline" cell, from the "jetmem runtimes" table."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if line.startswith("test ") and "vs baseline" in line)
    column, end = lines[start].index("vs baseline"), lines[start].index("verdict")
    out = {}
    for line in lines[start + 2 :]:
        if not line.strip() or line.startswith(("=", "-", "jetmem:")):
            break
        out[line.split()[0]] = line[column:end].strip()
    return out


def commit_all(path: Path, *files: str) -> None:
    """Make ``path`` a git repository whose HEAD holds ``files`` (the base of ``--jetmem-against=HEAD``)."""
    for args in (["init", "-q"], ["add", *files], ["commit", "-qm", "base"]):
        subprocess.run(["git", "-c", "user.email=t@jetmem", "-c", "user.name=t", *args], cwd=path, check=True)
