"""The opt-in modes ``registered`` and ``system`` through pytest, per device profile, without a GPU.

Each run is an in-process ``pytester`` run on a fake driver profile (tests/fakes/fake_driver.py: ``orin``,
``thor``, ``h100``): which modes are collected, run or skipped and why; what ``--jetmem-modes=all`` runs and what
it says it left out; and each marker in the new modes (runtime ratios, coherence after a CPU touch, concurrency,
Tegra-strict, the ``end_to_end`` scope and the benchmark JSON).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from fakes.async_fake import AsyncFake
from fakes.fake_driver import FakeDriver
from memmode_runs import results, skip_reason
from runtime_fixtures import _module_kernel_cache, _no_user_device_choice, jetmem_kernel_cache  # noqa: F401
from runtime_runs import inner, outcomes, row

InstallFake = Callable[..., FakeDriver]

TESTS = """
import numpy as np
import pytest

@pytest.mark.memmode("registered", "system")
def test_named(jetmem, memmode):
    buf = jetmem.array(np.arange(1000, dtype=np.float32))
    assert buf.memory_mode.has_host_view and (buf.host == np.arange(1000)).all()
    jetmem.kernel("stream_fill").launch(4, 256, (buf, np.uint64(1000), np.float32(2)))
    jetmem.synchronize()
    assert (buf.host == 2).all()

@pytest.mark.memmode
def test_bare(jetmem, memmode):
    assert (jetmem.array(np.ones(8, dtype=np.float32)).to_numpy() == 1).all()
"""

NO_PAGEABLE = "jetmem: system: the device reports PAGEABLE_MEMORY_ACCESS=0 (kernels cannot use pageable host memory"
DEFAULTS = ("device", "managed", "zero_copy")


def names(pytester: pytest.Pytester, *args: str) -> list[str]:
    items, reprec = pytester.inline_genitems(*args)
    assert reprec.ret == pytest.ExitCode.OK
    return [item.name for item in items]


# -- which modes run, per profile ------------------------------------------------------------------------------------
@pytest.mark.parametrize("profile", ["orin", "thor", "h100"])
def test_named_modes_run_or_skip_naming_the_attribute(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, profile: str
) -> None:
    fake = install_fake_driver(profile)
    pytester.makepyfile(test_it=TESTS)
    # a bare marker keeps the three default modes: existing suites do not grow
    assert names(pytester) == [
        "test_named[registered]",
        "test_named[system]",
        *(f"test_bare[{m}]" for m in DEFAULTS),
    ]
    got = results(pytester.inline_run())
    assert got["test_named[registered]"][0] == "passed"
    if profile == "thor":
        assert got["test_named[system]"][0] == "passed"
    else:
        outcome, text = got["test_named[system]"]
        assert outcome == "skipped" and skip_reason(text).startswith(NO_PAGEABLE), text
    assert all(got[f"test_bare[{m}]"][0] == "passed" for m in DEFAULTS)
    assert fake.leaks() == {} and fake.freed_while_registered == []


@pytest.mark.parametrize(
    ("profile", "left_out"),
    [("orin", ["system"]), ("thor", []), ("h100", ["system"])],
)
@pytest.mark.parametrize("how", ["option", "ini"])
def test_all_runs_every_supported_mode_and_says_once_what_it_left_out(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, profile: str, left_out: list[str], how: str
) -> None:
    install_fake_driver(profile)
    pytester.makepyfile(test_it=TESTS)
    if how == "ini":
        pytester.makeini("[pytest]\njetmem_modes = all\n")
    result = pytester.runpytest("-v", *(["--jetmem-modes=all"] if how == "option" else []))
    every = ("device", "managed", "zero_copy", "registered", "system")
    ran = {f"test_bare[{m}]" for m in every if m not in left_out}
    ran |= {f"test_named[{m}]" for m in ("registered", "system") if m not in left_out}
    passed = {line.split("::")[1].split()[0] for line in result.outlines if " PASSED" in line}
    assert passed == ran
    result.assert_outcomes(passed=len(ran), deselected=2 * len(left_out))
    result.stdout.fnmatch_lines([f"jetmem: modes selected: all ({', '.join(every)}: those the device supports)"])
    summary = [line for line in result.outlines if "--jetmem-modes=all left out" in line]
    if left_out:
        assert summary == [
            "jetmem: --jetmem-modes=all left out 2 test items in system, which this device cannot do: "
            "system: the device reports PAGEABLE_MEMORY_ACCESS=0 (kernels cannot use pageable host memory: no HMM, "
            "ATS or sysmem full coherency)"
        ]
    else:
        assert summary == []


def test_all_without_a_gpu_leaves_nothing_out(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    """No device: nothing to ask, so every mode is collected (and skipped here, --jetmem-arch=none)."""
    install_fake_driver("no_device")
    pytester.makepyfile(test_it=TESTS)
    result = pytester.runpytest("--jetmem-modes=all", "--jetmem-arch=none")
    result.assert_outcomes(skipped=7)
    result.stdout.no_fnmatch_line("*left out*")


def test_naming_an_opt_in_mode_adds_it_to_bare_markers(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("orin")
    pytester.makepyfile(test_it=TESTS)
    result = pytester.runpytest("-v", "--jetmem-modes=device,registered")
    passed = [line.split("::")[1].split()[0] for line in result.outlines if " PASSED" in line]
    assert passed == ["test_named[registered]", "test_bare[device]", "test_bare[registered]"]
    result.assert_outcomes(passed=3, deselected=3)  # test_named[system], test_bare[managed], test_bare[zero_copy]
    result = pytester.runpytest("-rs", "--jetmem-modes=registered,system")  # named explicitly: system skips
    result.assert_outcomes(passed=2, skipped=2, deselected=3)
    result.stdout.fnmatch_lines(
        [f"SKIPPED [[]1[]] test_it.py:4: {NO_PAGEABLE}*", f"SKIPPED [[]1[]] test_it.py:12: {NO_PAGEABLE}*"]
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("all,device", "--jetmem-modes: 'all' means every registered mode and stands alone, got 'all,device'"),
        (
            "sytem",
            "--jetmem-modes: unknown memory mode 'sytem'; expected one of device, managed, zero_copy, registered",
        ),
    ],
)
def test_a_bad_selection_is_a_usage_error(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, value: str, message: str
) -> None:
    fake = install_fake_driver("thor")
    pytester.makepyfile(test_it=TESTS)
    result = pytester.runpytest(f"--jetmem-modes={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {message}*"])
    assert fake.launches == []


# -- the markers in the new modes -------------------------------------------------------------------------------------
RATIO = """
@pytest.mark.memmode("device", "zero_copy", "registered")
@pytest.mark.memmode_runtime(max_ratio=1.5, relative_to="registered")
def test_ratio(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""


def test_a_runtime_ratio_relative_to_registered(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    install_fake_driver("h100", kernel_ms=0.1, kind_ms={"registered": 0.5, "host": 1.0})
    pytester.makepyfile(test_r=inner(RATIO))
    result = pytester.runpytest("-rA", "--jetmem-max-time=0.05")
    assert outcomes(result) == {
        "test_ratio[device]": "PASSED",  # 0.1 / 0.5
        "test_ratio[zero_copy]": "FAILED",  # twice as slow as registered memory
        "test_ratio[registered]": "PASSED",  # the reference itself
    }
    result.stdout.fnmatch_lines(["zero_copy fill:kernel: zero_copy/registered = 2.000 *> max_ratio=1.5"])
    assert row(result, "test_ratio[device]")["ratio"] == "0.20x registered"
    assert row(result, "test_ratio[registered]")["ratio"] == "1.00x registered"


COHERENCE = """
import numpy as np
import pytest

@pytest.mark.memmode("registered", "system")
@pytest.mark.memmode_coherence(rounds=3, cpu_touch=True)
def test_touch(jetmem):
    jetmem.zeros(4096, dtype=np.uint32).label = "frame"
"""


@pytest.mark.parametrize("planted", [False, True], ids=["correct", "planted-bug"])
def test_coherence_after_a_cpu_touch(
    pytester: pytest.Pytester,
    make_fake: Callable[..., AsyncFake],
    monkeypatch: pytest.MonkeyPatch,
    planted: bool,
) -> None:
    from fakes.planted import unsynchronized_cpu_read
    from pytest_jetmem.correctness import coherence

    make_fake("thor")
    if planted:  # a host read path that forgets to wait, in registered memory only
        monkeypatch.setattr(coherence, "cpu_read", unsynchronized_cpu_read("registered"))
    pytester.makepyfile(test_it=COHERENCE)
    got = results(pytester.inline_run())
    assert got["test_touch[system]"][0] == "passed"
    if planted:
        outcome, text = got["test_touch[registered]"]
        assert outcome == "failed" and "'frame' [registered]: round 1/3: the CPU read what a kernel wrote" in text
    else:
        assert got["test_touch[registered]"][0] == "passed"


STRICT = """
import numpy as np
import pytest

@pytest.mark.memmode("managed", "zero_copy", "registered", "system")
def test_peek(jetmem):
    buf = jetmem.zeros(1024)
    jetmem.kernel("stream_fill").launch(4, 256, (buf, np.uint64(1024), np.float32(1)))
    buf.host[0]  # no synchronize: Jetson's managed-memory rule forbids this for managed memory only
"""


@pytest.mark.parametrize("profile", ["orin", "thor"])
def test_tegra_strict_applies_the_rule_to_managed_memory_only(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, profile: str
) -> None:
    install_fake_driver(profile)
    pytester.makepyfile(test_it=STRICT)
    got = results(pytester.inline_run("--jetmem-tegra-strict"))
    assert got["test_peek[managed]"][0] == "failed" and "TegraStrictError" in got["test_peek[managed]"][1]
    assert got["test_peek[zero_copy]"][0] == got["test_peek[registered]"][0] == "passed"
    assert got["test_peek[system]"][0] == ("passed" if profile == "thor" else "skipped")


CONCURRENT = """
import numpy as np
import pytest

@pytest.mark.memmode("managed", "registered")
@pytest.mark.memmode_concurrency(expect="auto")
def test_cpu_reads_while_the_kernel_runs(jetmem, memmode):
    buf = jetmem.zeros(1024)
    jetmem.kernel("stream_fill").launch(4, 256, (buf, np.uint64(1024), np.float32(1)))
    buf.host[0]  # while the kernel may run
"""


def test_concurrency_auto_holds_registered_memory_to_survive(run_fake: Callable[..., pytest.RunResult]) -> None:
    """On Orin (CONCURRENT_MANAGED_ACCESS=0) managed memory must fault; registered memory is pinned host memory, not
    governed by that rule: it must survive. (The fake does not fault: managed fails, registered passes.)"""
    from concurrency_runs import outcomes as child_outcomes

    result = run_fake(CONCURRENT, child="orin")
    assert child_outcomes(result) == {
        "test_cpu_reads_while_the_kernel_runs[managed]": "FAILED",
        "test_cpu_reads_while_the_kernel_runs[registered]": "PASSED",
    }
    result.stdout.fnmatch_lines(["*(CONCURRENT_MANAGED_ACCESS=0 on this device, so the test must fault)*"])


END_TO_END = """
import numpy as np
import pytest

@pytest.mark.memmode("device", "registered", "system")
def test_frame(jetmem):
    frame = np.arange(4096, dtype=np.float32)
    buf, out = jetmem.empty(4096), jetmem.empty(4096)
    k = jetmem.kernel("stream_copy")
    jetmem.measure(
        lambda: k.launch(16, 256, (buf, out, np.uint64(4096))),
        label="copy",
        scope="end_to_end",
        inputs=[(buf, frame)],
        outputs=[out],
    )
"""


def test_end_to_end_needs_no_copies_in_the_mapped_modes(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, tmp_path: Path
) -> None:
    fake = install_fake_driver("thor")
    pytester.makepyfile(test_it=END_TO_END)
    bench = tmp_path / "bench.json"
    result = pytester.runpytest("-rA", "--jetmem-max-time=0.05", f"--jetmem-benchmark-json={bench}")
    assert outcomes(result) == {f"test_frame[{m}]": "PASSED" for m in ("device", "registered", "system")}
    copies = {"cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync"}
    by_kind: dict[str, int] = {}
    for call in fake.calls:
        if call.api in copies:
            for ptr in call.args[:2]:
                alloc = next((a for a in fake.allocations() if a.contains(int(ptr), 1)), None)
                if alloc is not None and alloc.nbytes >= 4 * 4096:
                    by_kind[alloc.kind] = by_kind.get(alloc.kind, 0) + 1
    assert by_kind.get("device", 0) > 0 and "pageable" not in by_kind  # only device memory is copied
    doc = json.loads(bench.read_text("utf-8"))
    assert {b["name"] for b in doc["benchmarks"]} == {
        f"test_frame[{m}]:copy:end_to_end" for m in ("device", "registered", "system")
    }
    assert {b["params"]["memmode"] for b in doc["benchmarks"]} == {"device", "registered", "system"}


def test_the_help_and_markers_list_the_opt_in_modes(pytester: pytest.Pytester) -> None:
    text = " ".join(" ".join(pytester.runpytest("--help").outlines).split())
    assert "device, managed, zero_copy, registered, system" in text and "'all': every mode the device" in text
    line = next(line for line in pytester.runpytest("--markers").outlines if "mark.memmode(" in line)
    assert "(device, managed, zero_copy, registered, system)" in line
    assert "every default mode (device, managed, zero_copy) the device supports, and the modes --jetmem-modes" in line
