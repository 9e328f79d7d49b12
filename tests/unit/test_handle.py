"""The ``jetmem`` handle's timing helper, ``time_gpu``, on the fake driver's virtual clock.

Only the driver boundary is faked (tests/fakes/fake_driver.py); the plugin, device probing, memory modes,
buffers, the ``jetmem`` handle and kernel argument packing run for real. Each test installs a fake (the
fixtures of the repository's conftest.py) before an in-process ``pytester`` run, whose plugin opens the
device lazily and so talks to the fake; afterwards the test inspects what the fake saw.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections import Counter
from pathlib import Path

import pytest

from memmode_runs import InstallFake
from pytest_jetmem.handle import Jetmem


def test_time_gpu_counts_only_the_work_between_its_events(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    fake = install_fake_driver("orin", kernel_ms=0.5)  # the fake's virtual clock: 0.5 ms per launch
    pytester.makepyfile(
        """
        import numpy as np
        import pytest

        @pytest.mark.memmode("device")
        def test_time(jetmem):
            x = jetmem.zeros(64)
            fill = jetmem.kernel("stream_fill")
            def work():
                fill.launch(1, 64, (x, np.uint64(64), np.float32(1)))
                fill.launch(1, 64, (x, np.uint64(64), np.float32(2)))
            times = jetmem.time_gpu(work, repeats=3, warmup=1)
            np.testing.assert_array_equal(times, [1.0, 1.0, 1.0])
            np.testing.assert_array_equal(x.to_numpy(), 2)
        """
    )
    pytester.inline_run().assertoutcome(passed=1)
    kernels_launched = Counter(launch.kernel for launch in fake.launches)
    assert kernels_launched == {"stream_fill": 8, "jetmem_block_stream": 3}
    assert fake.leaks() == {}


# -- the handle's public surface is what docs/reference.md documents ----------------------------------------------

_ROOT = Path(__file__).resolve().parents[2]
_SRC = _ROOT / "src" / "pytest_jetmem"

#: Public names the handle still inherits from ``cuda.workspace.Workspace`` that are CUDA-layer plumbing
#: (what ``Buffer``, ``Kernel``, the timing code, ``cuda.attach``, ``correctness.coherence`` and
#: ``correctness.strict`` call on the workspace). Not documented for users; this list may only shrink: moving
#: them off the handle (a ``Jetmem`` that holds its ``Workspace`` instead of being one) is the follow-up.
_WORKSPACE_PLUMBING = {
    "add_observer", "allocatable", "attached", "before_launch", "buffers", "check_host_access", "close",
    "closed", "flush_l2", "free", "function", "launch_target", "memory_mode", "memset", "nodeid", "observers",
    "queued", "session", "timer",
}  # fmt: skip


def documented_members() -> set[str]:
    """The names in the member column of the ``jetmem`` table in docs/reference.md."""
    text = (_ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    section = text.split("### `jetmem`\n", 1)[1].split("\n### ", 1)[0]
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            member_cell = line.split(" | ", 1)[0]
            names |= set(re.findall(r"`([A-Za-z_]\w*)", member_cell))
    return names


def test_the_documented_table_is_found() -> None:
    assert {"mode", "array", "measure", "measurements", "stream_handle", "live_buffers"} <= documented_members()


def test_the_handle_s_public_names_are_the_documented_ones(jm: Jetmem) -> None:
    public = {n for n in dir(jm) if not n.startswith("_")}
    documented = documented_members()
    assert documented - public == set(), "documented but missing on the handle"
    assert public - documented - _WORKSPACE_PLUMBING == set(), "public on the handle but not in docs/reference.md"
    assert public >= _WORKSPACE_PLUMBING, "plumbing moved off the handle: drop it from _WORKSPACE_PLUMBING"
    assert not _WORKSPACE_PLUMBING & documented


#: Names that hold a ``jetmem`` handle (or the workspace it is) in the package's modules.
_HANDLE_NAMES = {"jetmem", "handle", "jm", "ws", "workspace", "other", "ref", "h"}


def _attribute_assignments(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id in _HANDLE_NAMES
        ):
            found.append((node.lineno, f"{node.func.id}({node.args[0].id}, ...)"))
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in _HANDLE_NAMES:
                    found.append((sub.lineno, f"{sub.value.id}.{sub.attr} = ..."))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "add_observer"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in ("jetmem", "handle", "jm")
        ):
            found.append((node.lineno, f"{node.func.value.id}.add_observer(...) after construction"))
    return found


def test_no_module_outside_handle_py_sets_attributes_on_a_handle() -> None:
    offenders = [
        f"{path.relative_to(_ROOT)}:{line}: {what}"
        for path in sorted(_SRC.rglob("*.py"))
        if path.name != "handle.py"
        for line, what in _attribute_assignments(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert offenders == [], "pass it to the constructor (Jetmem(..., observers=, duet=, on_measure=)) instead"


def test_the_scan_finds_a_patched_attribute() -> None:
    tree = ast.parse("def f(handle, d):\n    handle.duet = d\n    setattr(jm, 'x', 1)\n    jetmem.add_observer(d)\n")
    assert [what for _, what in _attribute_assignments(tree)] == [
        "handle.duet = ...",
        "setattr(jm, ...)",
        "jetmem.add_observer(...) after construction",
    ]


def test_runner_needs_are_constructor_arguments(jm: Jetmem) -> None:
    """What the plugin used to set on a handle (observers, the --jetmem-against channel, the measure calls'
    sink) goes to the constructor."""
    params = inspect.signature(Jetmem).parameters
    assert {"stopping_rule", "observers", "duet", "on_measure"} <= set(params)
    assert all(params[n].kind is inspect.Parameter.KEYWORD_ONLY for n in ("observers", "duet", "on_measure"))
