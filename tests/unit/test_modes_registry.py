"""The memory-mode registry: a mode registered through the public API is known everywhere, no other file changed.

Two modes are registered here, on top of the five built-in ones, with :func:`pytest_jetmem.cuda.modes.using`
(which unregisters them afterwards):

- ``pinned_staging`` (a default mode): device memory (``cuMemAlloc``) whose host reads and writes go through a
  pinned host staging area (``HostAccess.STAGED``): no host view;
- ``write_combined`` (not a default mode): write-combined pinned host memory mapped into the GPU, a zero-copy
  mode, so it crosses PCIe on a discrete GPU.

Each is checked where a mode matters: the bare marker and a named marker, ``--jetmem-modes``, ``--help`` and
``--markers``, the "jetmem runtimes" table, the HTML report, the demo's tables, the gate's PCIe judgement, host
access through buffers and the coherence round trips. The plugin-level checks are in-process ``pytester`` runs
on the fake driver (tests/fakes), which share this process's registry.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import ClassVar

import numpy as np
import pytest

from fakes.async_fake import AsyncFake, handle
from fakes.fake_driver import FakeDriver
from fakes.records import record
from pytest_jetmem.correctness import coherence
from pytest_jetmem.cuda import driver, modes
from pytest_jetmem.cuda.device import DeviceInfo
from pytest_jetmem.cuda.mode_styles import COLOURS, GREY, mode_style
from pytest_jetmem.cuda.modes import Allocation, HostAccess, MemoryMode, Pool, ZeroCopyMode
from pytest_jetmem.demo.tables import format_tables
from pytest_jetmem.errors import HostAccessError
from pytest_jetmem.measure.compare import MIN_SESSIONS
from pytest_jetmem.report import charts
from runtime_fixtures import _module_kernel_cache, _no_user_device_choice, jetmem_kernel_cache  # noqa: F401
from runtime_runs import InstallFake, inner, jittered, outcomes, row, table

BUILT_IN = ("device", "managed", "zero_copy", "registered", "system")
DEFAULTS = ("device", "managed", "zero_copy")  # the built-in modes a bare marker runs
MEMHOSTALLOC_WRITECOMBINED = 0x4  # cuMemHostAlloc's CU_MEMHOSTALLOC_WRITECOMBINED


class PinnedStaging(MemoryMode):
    name = "pinned_staging"
    description = "cuMemAlloc with a pinned host staging area: the host reads and writes through copies"
    host_access = HostAccess.STAGED

    def allocate(self, drv: driver.DriverBackend, nbytes: int) -> Allocation:
        ptr = drv.mem_alloc(nbytes)
        try:
            staging = drv.mem_host_alloc(nbytes, driver.MEMHOSTALLOC_PORTABLE)
        except Exception:
            drv.mem_free(ptr)
            raise
        return Allocation(ptr, staging, nbytes)

    def free(self, drv: driver.DriverBackend, alloc: Allocation) -> None:
        drv.mem_free(alloc.ptr)
        assert alloc.host_ptr is not None
        drv.mem_free_host(alloc.host_ptr)


class WriteCombined(ZeroCopyMode):
    name = "write_combined"
    description = "cuMemHostAlloc(DEVICEMAP | WRITECOMBINED): zero-copy memory the CPU writes fast, reads slowly"
    default = False
    host_note = ""  # not zero_copy's sentence: the one made from host_access

    def host_alloc_flags(self) -> int:
        return super().host_alloc_flags() | MEMHOSTALLOC_WRITECOMBINED


@pytest.fixture
def extra_modes() -> Iterator[tuple[MemoryMode, ...]]:
    with modes.using(PinnedStaging(), WriteCombined()) as added:
        yield added
    assert modes.names() == BUILT_IN


def info(**attributes: int) -> DeviceInfo:
    return DeviceInfo(
        ordinal=0,
        name="fake",
        compute_capability=(9, 0),
        driver_version=12060,
        total_mem=1 << 30,
        attributes=attributes,
    )


# -- the registry --------------------------------------------------------------------------------------------------
def test_registered_modes_are_listed_in_registry_order(extra_modes: tuple[MemoryMode, ...]) -> None:
    staging, wc = extra_modes
    assert modes.names() == (*BUILT_IN, "pinned_staging", "write_combined")
    assert modes.registered() == (*(modes.get_mode(n) for n in BUILT_IN), staging, wc)
    assert modes.default_names() == (*DEFAULTS, "pinned_staging")  # write_combined is not a default mode
    assert [m.order for m in modes.registered()] == [0, 1, 2, 3, 4, 5, 6]
    assert sorted(["write_combined", "mystery", "pinned_staging", "zero_copy", "device"], key=modes.rank) == [
        "device",
        "zero_copy",
        "pinned_staging",
        "write_combined",
        "mystery",  # not registered: after the registered ones
    ]
    assert modes.find_mode("pinned_staging") is staging and modes.find_mode("mystery") is None
    assert modes.parse_mode_list("write_combined pinned_staging", "--jetmem-modes") == (
        "write_combined",
        "pinned_staging",
    )


def test_a_mode_owns_its_facts(extra_modes: tuple[MemoryMode, ...]) -> None:
    staging, wc = extra_modes
    assert (staging.host_access, staging.has_host_view, staging.is_managed, staging.crosses_pcie) == (
        HostAccess.STAGED,
        False,
        False,
        False,
    )
    assert (staging.pool, staging.default, dict(staging.requires)) == (Pool.DEVICE, True, {})
    assert staging.unsupported_reason(info()) is None
    assert staging.host_rule == "pinned_staging memory has no host view: copy with to_numpy() and copy_from()"

    assert (wc.host_access, wc.has_host_view, wc.is_managed, wc.crosses_pcie, wc.pool) == (
        HostAccess.MAPPED,
        True,
        False,
        True,
        Pool.HOST,
    )
    # unsupported_reason follows from the attributes the mode requires
    assert wc.unsupported_reason(info(CAN_MAP_HOST_MEMORY=1)) is None
    assert wc.unsupported_reason(info(CAN_MAP_HOST_MEMORY=0)) == (
        "write_combined: the device reports CAN_MAP_HOST_MEMORY=0 (cannot map host memory)"
    )
    assert wc.host_rule.startswith("write_combined memory is seen by the host through .host")


def test_register_checks_names_and_required_attributes() -> None:
    class Bad(PinnedStaging):
        name = "pinned-staging"

    with pytest.raises(ValueError, match="'pinned-staging': expected a Python identifier"):
        modes.register(Bad())

    class Unprobed(PinnedStaging):
        name = "unprobed"
        requires: ClassVar[Mapping[str, str]] = {"NOT_AN_ATTRIBUTE": "never"}

    with pytest.raises(ValueError, match=r"requires device attribute\(s\) NOT_AN_ATTRIBUTE that the device probe"):
        modes.register(Unprobed())
    with pytest.raises(TypeError, match="expected a MemoryMode instance"):
        modes.register(PinnedStaging)  # type: ignore[arg-type]  # the class, not an instance
    assert modes.names() == BUILT_IN


def test_unregister_and_using_leave_the_registry_as_it_was() -> None:
    mode = modes.register(PinnedStaging())
    try:
        assert modes.get_mode("pinned_staging") is mode
        with pytest.raises(ValueError, match="already registered"):
            modes.register(PinnedStaging())
    finally:
        assert modes.unregister("pinned_staging") is mode
    with pytest.raises(ValueError, match="unknown memory mode 'pinned_staging'"):
        modes.unregister("pinned_staging")
    with pytest.raises(RuntimeError, match="boom"), modes.using(PinnedStaging()):
        assert "pinned_staging" in modes.names()
        raise RuntimeError("boom")
    with pytest.raises(ValueError, match="already registered"), modes.using(PinnedStaging(), PinnedStaging()):
        pass
    assert modes.names() == BUILT_IN


# -- host access: buffers and the coherence round trips -------------------------------------------------------------
def test_a_staged_mode_reads_and_writes_through_its_staging_area(
    afake: AsyncFake, extra_modes: tuple[MemoryMode, ...]
) -> None:
    with handle("pinned_staging") as jm:
        data = np.arange(100, dtype=np.float32)
        buf = jm.array(data)
        assert buf.allocation.host_ptr is not None  # the staging area
        with pytest.raises(HostAccessError, match="memory mode 'pinned_staging' has no host view"):
            _ = buf.host
        np.testing.assert_array_equal(buf.to_numpy(), data)
        jm.copy(buf, jm.array(data * 2, mode="device"))  # a GPU-side write, seen by the host through the staging
        np.testing.assert_array_equal(buf.to_numpy(), data * 2)
        # the coherence helpers go through the mode too, also for partial and strided slices
        for sl in (slice(None), slice(10, 30), slice(5, 95, 7), slice(None, None, -3)):
            seed = coherence.cpu_touch(jm, buf, 0x1234, sl)
            assert coherence.gpu_touch(jm, buf, expect_seed=seed, new_seed=0x55, sl=sl).mismatches == 0
            assert coherence.cpu_check(jm, buf, 0x55, sl).mismatches == 0
        assert coherence.check_round_trips(jm, buf) == []
        staging = buf.allocation.host_ptr
        buf.free()
    assert any(a.kind == "host" and a.ptr == staging for a in afake.freed)  # the staging area was freed too
    assert not afake.live, afake.live


def test_attach_refuses_a_mode_that_is_not_managed_saying_how_the_host_may_touch_it(
    afake: AsyncFake, extra_modes: tuple[MemoryMode, ...]
) -> None:
    from pytest_jetmem.cuda.attach import attach_host
    from pytest_jetmem.errors import AttachError

    with handle("write_combined") as jm:
        buf = jm.zeros(16)
        with pytest.raises(AttachError, match="'write_combined' memory; write_combined memory is seen by the host"):
            attach_host(jm, buf)


# -- the plugin: collection, options, help -----------------------------------------------------------------------------
MARKED = """
import numpy as np
import pytest

@pytest.mark.memmode
def test_bare(jetmem, memmode):
    buf = jetmem.array(np.arange(8, dtype=np.float32))
    assert jetmem.mode == memmode and buf.mode == memmode
    assert (buf.to_numpy() == np.arange(8)).all()

@pytest.mark.memmode("write_combined", "device")
def test_named(jetmem, memmode):
    buf = jetmem.array(np.arange(8, dtype=np.float32))
    assert buf.memory_mode.has_host_view is (memmode == "write_combined")
    assert (buf.to_numpy() == np.arange(8)).all()
"""


def collected(pytester: pytest.Pytester, *args: str) -> list[str]:
    items, reprec = pytester.inline_genitems(*args)
    assert reprec.ret == pytest.ExitCode.OK
    return [item.name for item in items]


def test_the_bare_marker_runs_the_default_modes_and_a_named_mode_runs_anyway(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, extra_modes: tuple[MemoryMode, ...]
) -> None:
    fake: FakeDriver = install_fake_driver("dgpu")
    pytester.makepyfile(test_it=MARKED)
    assert collected(pytester) == [
        *(f"test_bare[{m}]" for m in (*DEFAULTS, "pinned_staging")),  # registry order, default modes only
        "test_named[write_combined]",
        "test_named[device]",
    ]
    pytester.inline_run().assertoutcome(passed=6)
    assert not any(fake.leaks().values()), fake.leaks()
    flags = [a.flags for a in fake.freed if a.kind == "host" and a.nbytes == 32]
    assert 0x7 in flags  # write_combined's allocation: DEVICEMAP | PORTABLE | WRITECOMBINED
    assert driver.MEMHOSTALLOC_PORTABLE in flags  # pinned_staging's staging area


def passed(result: pytest.RunResult) -> list[str]:
    return [line.split("::")[1].split()[0] for line in result.outlines if " PASSED" in line]


def test_jetmem_modes_accepts_a_registered_mode(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, extra_modes: tuple[MemoryMode, ...]
) -> None:
    install_fake_driver("dgpu")
    pytester.makepyfile(test_it=MARKED)
    result = pytester.runpytest("-v", "--jetmem-modes=pinned_staging,write_combined")
    result.assert_outcomes(passed=3, deselected=4)  # the bare marker runs the named non-default mode too
    assert passed(result) == ["test_bare[pinned_staging]", "test_bare[write_combined]", "test_named[write_combined]"]
    pytester.makeini("[pytest]\njetmem_modes = write_combined\n")
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=2, deselected=5)
    assert passed(result) == ["test_bare[write_combined]", "test_named[write_combined]"]
    result = pytester.runpytest("--jetmem-modes=pinned-staging")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = " ".join(result.stderr.str().split())
    assert "expected one of device, managed, zero_copy, registered, system, pinned_staging, write_combined" in text


def test_help_and_markers_list_the_registered_modes(
    pytester: pytest.Pytester, extra_modes: tuple[MemoryMode, ...]
) -> None:
    text = " ".join(" ".join(pytester.runpytest("--help").outlines).split())
    every = "device, managed, zero_copy, registered, system, pinned_staging, write_combined"
    assert f"(comma or space separated: {every}" in text
    line = next(line for line in pytester.runpytest("--markers").outlines if "mark.memmode(" in line)
    assert f"({every})" in line
    assert "every default mode (device, managed, zero_copy, pinned_staging)" in line


# -- the runtimes table, the report, the demo's tables -------------------------------------------------------------
MEASURED = """
@pytest.mark.memmode
def test_bare(jetmem):
    jetmem.measure(fill(jetmem), label="fill")

@pytest.mark.memmode("write_combined", "pinned_staging", "zero_copy", "device")
def test_named(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""


def test_the_runtimes_table_and_the_report_show_the_modes_in_registry_order(
    pytester: pytest.Pytester,
    install_fake_driver: InstallFake,
    extra_modes: tuple[MemoryMode, ...],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(charts, "matplotlib_available", lambda: False)  # the SVG charts: their legend is text
    install_fake_driver("dgpu", kernel_ms=jittered(0.1, seed=2))
    pytester.makepyfile(test_t=inner(MEASURED))
    out = pytester.path / "report.html"
    result = pytester.runpytest("-rA", "--jetmem-max-time=0.05", f"--jetmem-report={out}")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    bare = [r["mode"] for r in table(result) if r["test"].startswith("test_bare[")]
    assert bare == [*DEFAULTS, "pinned_staging"]
    assert row(result, "test_named[write_combined]")["what"] == "fill:kernel"

    page = out.read_text(encoding="utf-8")
    legends = re.findall(r'<svg class="chart".*?</svg>', page, flags=re.S)
    assert len(legends) == 2
    named = next(svg for svg in legends if "test_named" in svg)
    legend = re.findall(r'<text x="[\d.]+" y="\d+" class="tick">(\w+)</text>', named)
    assert legend == ["device", "zero_copy", "pinned_staging", "write_combined"]  # rows came in the reverse order
    assert f'fill="{COLOURS[6 % len(COLOURS)]}"' in named  # write_combined's colour: its place in the registry
    assert charts.mode_color("zero_copy", legend) == COLOURS[2]
    assert charts.mode_color("mystery", [*legend, "mystery"]) == COLOURS[7 % len(COLOURS)]
    assert mode_style("mystery", [*legend, "mystery"]) not in {mode_style(m) for m in legend}  # dash, shape differ
    assert charts.mode_color("mystery", legend) == GREY  # in no chart's modes


def test_the_demo_tables_order_a_registered_mode_after_the_built_in_ones(
    extra_modes: tuple[MemoryMode, ...],
) -> None:
    rows = [
        record(f"test_x.py::test_x[{m}]", m, "conv2d/15x15", ms, first_call_ms=ms)
        for m, ms in [("mystery", 5.0), ("pinned_staging", 1.0), ("zero_copy", 4.0), ("device", 1.02)]
    ]
    lines = format_tables(rows)
    header = next(i for i, line in enumerate(lines) if "median ms" in line)
    listed = [line.split()[0] for line in lines[header + 1 : header + 5]]
    assert listed == ["device", "zero_copy", "pinned_staging", "mystery"], lines
    assert "    no clear winner: device and pinned_staging are tied" in "\n".join(lines), lines


# -- the gate: PCIe judgement from the mode's attribute ----------------------------------------------------------------
GATED = """
@pytest.mark.memmode("device", "pinned_staging", "write_combined")
@pytest.mark.memmode_runtime(max_ms=100)
def test_gated(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""


def test_the_gate_reports_a_mode_that_crosses_pcie_instead_of_judging_it(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, extra_modes: tuple[MemoryMode, ...]
) -> None:
    install_fake_driver("dgpu", kernel_ms=jittered(0.1, seed=6))
    pytester.makepyfile(test_b=inner(GATED))
    for _ in range(MIN_SESSIONS):
        assert pytester.runpytest("--jetmem-save=main").ret == pytest.ExitCode.OK
    install_fake_driver("dgpu", kernel_ms=jittered(0.12, seed=7))  # 20% slower everywhere
    result = pytester.runpytest("-rA", "--jetmem-compare=main")
    assert outcomes(result) == {
        "test_gated[device]": "FAILED",
        "test_gated[pinned_staging]": "FAILED",  # device memory: judged
        "test_gated[write_combined]": "PASSED",  # crosses_pcie on a discrete GPU: reported, not judged
    }
    assert row(result, "test_gated[write_combined]")["verdict"] == "ambiguous"
    assert row(result, "test_gated[pinned_staging]")["verdict"] == "FAIL regression"
    assert "zero-copy memory over PCIe" in " ".join(result.stdout.str().split())


def test_over_pcie_asks_the_mode(extra_modes: tuple[MemoryMode, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_jetmem.measure.compare import Comparison, Verdict
    from pytest_jetmem.plugin.judging import over_pcie

    cmp = Comparison(ratio=1.2, ci_low=1.15, ci_high=1.25, p_value=1e-4, threshold_pct=5.0, verdict=Verdict.REGRESSION)
    assert over_pcie(cmp, "write_combined", integrated=False).verdict is Verdict.AMBIGUOUS
    assert over_pcie(cmp, "write_combined", integrated=True) is cmp  # no PCIe on a Jetson
    assert over_pcie(cmp, "pinned_staging", integrated=False) is cmp
    assert over_pcie(cmp, "mystery", integrated=False) is cmp  # not registered here: judged as usual
    monkeypatch.setattr(WriteCombined, "crosses_pcie", False)
    assert over_pcie(cmp, "write_combined", integrated=False) is cmp


def test_nothing_is_left_registered() -> None:
    assert modes.names() == BUILT_IN
