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
from pytest_jetmem.cuda.workspace import Workspace, workspace_of
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
    assert public == documented_members(), "the handle's public names differ from docs/reference.md's jetmem table"


def test_the_handle_holds_its_workspace_and_is_not_one(jm: Jetmem) -> None:
    """The CUDA layer's plumbing (observers, teardown, launch targets) stays on the workspace; the functions below
    the handle that a user passes it to reach the workspace through the ``__jetmem_workspace__`` protocol."""
    ws = workspace_of(jm)
    assert not isinstance(jm, Workspace) and isinstance(ws, Workspace)
    assert workspace_of(ws) is ws
    assert jm.mode == ws.mode == "managed" and jm.stream_handle == ws.stream_handle and jm.device is ws.device
    buf = jm.zeros(8)
    assert buf.owner is ws and jm.live_buffers() == [buf] == ws.live_buffers()
    assert repr(jm) == repr(ws)


def test_a_workspace_method_on_the_handle_says_what_to_use(jm: Jetmem) -> None:
    buf = jm.zeros(4)
    with pytest.raises(AttributeError, match=r"no member 'free'; use buf\.free\(\) .*docs/reference\.md"):
        jm.free(buf)  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match=r"no member 'nodeid' \(its members: .*docs/reference\.md\)"):
        _ = jm.nodeid  # type: ignore[attr-defined]
    assert not hasattr(jm, "__cuda_array_interface__")  # a dunder probe gets a plain AttributeError, fast


def test_workspace_of_names_what_it_got_instead_of_a_handle() -> None:
    with pytest.raises(TypeError, match=r"expected the jetmem handle .*got 'oops' \(str\)"):
        workspace_of("oops")  # type: ignore[arg-type]


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
    sink) goes to the constructor: the observers to the workspace's, the rest to the handle's."""
    params = inspect.signature(Jetmem).parameters
    assert list(params) == ["workspace", "stopping_rule", "duet", "energy", "on_measure"]
    keywords = ("stopping_rule", "duet", "energy", "on_measure")
    assert all(params[n].kind is inspect.Parameter.KEYWORD_ONLY for n in keywords)
    assert inspect.signature(Workspace).parameters["observers"].kind is inspect.Parameter.KEYWORD_ONLY
