"""memmode_runtime, baselines and the regression gate without a GPU: pytester runs against the fake driver.

The fake's streams carry a virtual clock that each launch advances by ``kernel_ms`` (``kind_ms`` gives
launches on one kind of memory their own cost), so every CUDA-event time is exact and the judging,
ratios, baselines and reports can be checked figure by figure. Nothing here asserts on wall-clock time.
The same features on a real GPU: tests/gpu/test_runtime_gpu.py.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fakes.fake_driver import FakeDriver, Launch, conftest_source
from pytest_jetmem.cuda.device import open_device, select_ordinal
from pytest_jetmem.errors import CudaUnavailable
from pytest_jetmem.measure.compare import Verdict, compare, compare_runs
from pytest_jetmem.measure.stats import run_ratio_test, student_t_ppf, student_t_sf2
from pytest_jetmem.measure.timing import gpu_lock

InstallFake = Callable[..., FakeDriver]

MODES = ("device", "managed", "zero_copy")
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


@pytest.fixture(autouse=True)
def _no_user_device_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner runs open the fake's device 0; a JETMEM_DEVICE in the caller's environment must not move them."""
    monkeypatch.delenv("JETMEM_DEVICE", raising=False)


@pytest.fixture(scope="module")
def _module_kernel_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("jetmem-kernel-cache-runtime")


@pytest.fixture
def jetmem_kernel_cache(_module_kernel_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One NVRTC cache for this module's runs (they compile the same two kernels), never the user's."""
    monkeypatch.setenv("JETMEM_CACHE_DIR", str(_module_kernel_cache))
    return _module_kernel_cache


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


# -- the fake's per-kind cost (what the tests below lean on) ---------------------------------------------
def test_fake_kind_ms_charges_launches_by_the_memory_they_touch() -> None:
    fake = FakeDriver("orin", kernel_ms=0.1, kind_ms={"host": 0.5, "managed": 0.2})
    fake.init()
    dev = fake.device_get(0)
    fake.ctx_set_current(fake.primary_ctx_retain(dev))
    dptr, mptr = fake.mem_alloc(64), fake.mem_alloc_managed(64)
    hptr = fake.mem_host_alloc(64, 0x2)  # DEVICEMAP
    for ptr, want in ((dptr, {"device"}), (mptr, {"managed"}), (hptr, {"host"})):
        args = (np.uint64(ptr).tobytes(), np.uint64(16).tobytes(), np.float32(1).tobytes())
        assert fake.launch_kinds(Launch("stream_fill", (1, 1, 1), (1, 1, 1), 0, None, args)) == want
    assert [a.kind for a in fake.allocations()] == ["device", "managed", "host"]
    assert [a.kind for a in fake.allocations("host")] == ["host"]
    with pytest.raises(ValueError, match="unknown allocation kind"):
        FakeDriver("orin", kind_ms={"zero_copy": 1.0})


# -- marker validation ------------------------------------------------------------------------------------
BAD_MARKERS = [
    ("max_mss=1.0", " got unknown argument(s) max_mss; expected max_ms, max_ratio, relative_to"),
    ("1.0", " takes keyword arguments only (max_ms, max_ratio"),
    ("max_ms=-1", "(max_ms=...) expects a positive number, got -1"),
    ("max_ms=0", "(max_ms=...) expects a positive number, got 0"),
    ("max_ms=float('nan')", "(max_ms=...) expects a positive number, got nan"),
    ("max_ms=float('inf')", "(max_ms=...) expects a positive number, got inf"),
    ("max_ms='5'", "(max_ms=...) expects a positive number, got '5'"),
    ("max_ms=True", "(max_ms=...) expects a positive number, got True"),
    ("max_ratio=-2, relative_to='device'", "(max_ratio=...) expects a positive number, got -2"),
    ("max_ratio=0.0, relative_to='device'", "(max_ratio=...) expects a positive number, got 0.0"),
    ("max_ratio=float('nan'), relative_to='device'", "(max_ratio=...) expects a positive number, got nan"),
    ("max_ratio='1.1', relative_to='device'", "(max_ratio=...) expects a positive number, got '1.1'"),
    ("max_ratio=False, relative_to='device'", "(max_ratio=...) expects a positive number, got False"),
    ("max_ratio=1.1", "(max_ratio=...) needs relative_to='<mode>'"),
    ("relative_to='device'", "(relative_to=...) needs max_ratio=<number>"),
    (
        "max_ratio=1.1, relative_to='gpu'",
        "(relative_to='gpu'): unknown memory mode; expected one of device, managed, zero_copy",
    ),
    ("scope='wall'", "(scope='wall'): unknown scope; expected one of kernel, end_to_end"),
    ("baseline='yes'", "(baseline=...) expects True or False, got 'yes'"),
    ("baseline=1", "(baseline=...) expects True or False, got 1"),
    ("runs=0", "(runs=...) expects an integer >= 1, got 0"),
    ("runs=-3", "(runs=...) expects an integer >= 1, got -3"),
    ("runs=2.0", "(runs=...) expects an integer >= 1, got 2.0"),
    ("runs=True", "(runs=...) expects an integer >= 1, got True"),
    ("label=3", "(label=...) expects a string, got 3"),
]


@pytest.mark.parametrize(("args", "expected"), BAD_MARKERS, ids=[a for a, _ in BAD_MARKERS])
def test_bad_marker_is_a_collection_error_naming_test_and_argument(
    pytester: pytest.Pytester, fake_driver: FakeDriver, args: str, expected: str
) -> None:
    pytester.makepyfile(
        test_bad=inner(
            f"""
            @pytest.mark.memmode("device")
            @pytest.mark.memmode_runtime({args})
            def test_marked(jetmem):
                jetmem.measure(fill(jetmem))

            def test_plain():
                pass
            """
        )
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert result.parseoutcomes().get("errors") == 1
    assert f"test_bad.py::test_marked: @pytest.mark.memmode_runtime{expected}" in result.stdout.str()
    assert fake_driver.launches == []  # nothing ran


def test_valid_markers_collect(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(
        test_ok=inner(
            """
            @pytest.mark.memmode("device", "zero_copy")
            @pytest.mark.memmode_runtime(max_ms=5, max_ratio=1, relative_to="device", scope="kernel",
                                         baseline=False, label="fill", runs=1)
            def test_all(jetmem):
                pass

            @pytest.mark.memmode_runtime
            def test_bare():
                pass
            """
        )
    )
    pytester.runpytest().assert_outcomes(passed=3)


def test_relative_to_needs_the_memmode_marker(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(
        test_nomm="""
        import pytest

        @pytest.mark.memmode_runtime(max_ratio=1.5, relative_to="device")
        def test_lonely():
            pass
        """
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert (
        "test_nomm.py::test_lonely: @pytest.mark.memmode_runtime(relative_to=...) needs @pytest.mark.memmode"
        in result.stdout.str()
    )


# -- max_ms -----------------------------------------------------------------------------------------------
def test_max_ms_passes_and_fails_with_the_figures(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    install_fake_driver("orin", kernel_ms=0.5)
    pytester.makepyfile(
        test_ms=inner(
            """
            @pytest.mark.memmode("device")
            @pytest.mark.memmode_runtime(max_ms=1.0)
            def test_under(jetmem):
                jetmem.measure(fill(jetmem), label="fill")

            @pytest.mark.memmode("device")
            @pytest.mark.memmode_runtime(max_ms=0.75)
            def test_over(jetmem):
                jetmem.measure(fill(jetmem, launches=2), label="fill")
            """
        )
    )
    result = pytester.runpytest("-rA")
    assert outcomes(result) == {"test_under[device]": "PASSED", "test_over[device]": "FAILED"}
    result.stdout.fnmatch_lines(
        [
            "device fill:kernel: median 1 ms (MAD 0, p5 1, p95 1, n=10), first call 1 ms: median above max_ms=0.75",
        ]
    )
    assert row(result, "test_under[device]")["verdict"] == "ok"
    over = row(result, "test_over[device]")
    assert (over["median ms"], over["n"], over["verdict"]) == ("1", "10", "FAIL max_ms")


def test_max_ms_judges_only_the_selected_label_and_scope(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("orin", kernel_ms=0.5)
    pytester.makepyfile(
        test_sel=inner(
            """
            def two(jetmem):
                jetmem.measure(fill(jetmem), label="fast")        # 0.5 ms
                jetmem.measure(fill(jetmem, 4), label="slow")     # 2 ms

            @pytest.mark.memmode("device")
            @pytest.mark.memmode_runtime(max_ms=1.0, label="fast")
            def test_fast_only(jetmem):
                two(jetmem)

            @pytest.mark.memmode("device")
            @pytest.mark.memmode_runtime(max_ms=1.0, label="slow")
            def test_slow_only(jetmem):
                two(jetmem)

            @pytest.mark.memmode("device")
            @pytest.mark.memmode_runtime(max_ms=1.0, scope="end_to_end")
            def test_other_scope(jetmem):
                two(jetmem)

            @pytest.mark.memmode("device")
            @pytest.mark.memmode_runtime(max_ms=1.0)
            def test_everything(jetmem):
                two(jetmem)
            """
        )
    )
    result = pytester.runpytest("-rA")
    assert outcomes(result) == {
        "test_fast_only[device]": "PASSED",
        "test_slow_only[device]": "FAILED",
        "test_other_scope[device]": "PASSED",
        "test_everything[device]": "FAILED",
    }
    text = result.stdout.str()
    # One failure message each for test_slow_only and test_everything (counted in the FAILURES
    # section: the short summary repeats it in full only where pytest sees a CI variable).
    assert len(message_lines(result, "device slow:kernel: median 2 ms")) == 2
    assert "device fast:kernel: median" not in text
    assert row(result, "test_fast_only[device]", "slow:kernel")["verdict"] == "reported"
    assert row(result, "test_other_scope[device]", "slow:kernel")["verdict"] == "reported"
    assert row(result, "test_slow_only[device]", "slow:kernel")["verdict"] == "FAIL max_ms"


# -- max_ratio --------------------------------------------------------------------------------------------
RATIO_FILE = """
@pytest.mark.memmode
@pytest.mark.memmode_runtime(max_ratio=2.0, relative_to="device")
def test_ratio(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""


def test_max_ratio_fails_the_slow_mode_with_its_figures(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, tmp_path: Path
) -> None:
    install_fake_driver("orin", kernel_ms=0.1, kind_ms={"host": 0.5})  # zero-copy kernels take 5x longer
    pytester.makepyfile(test_r=inner(RATIO_FILE))
    junit = tmp_path / "junit.xml"
    result = pytester.runpytest("-rA", f"--junitxml={junit}")
    assert outcomes(result) == {
        "test_ratio[device]": "PASSED",
        "test_ratio[managed]": "PASSED",
        "test_ratio[zero_copy]": "FAILED",
    }
    result.stdout.fnmatch_lines(
        [
            "zero_copy fill:kernel: zero_copy/device = 5.000 (99% CI 5.000..5.000; medians 0.5 vs 0.1 ms, "
            "10 interleaved samples each) > max_ratio=2",
        ]
    )
    assert row(result, "test_ratio[device]")["ratio"] == "1.00x device"  # the reference mode itself: 1.0
    assert row(result, "test_ratio[managed]")["ratio"] == "1.00x device"
    zc = row(result, "test_ratio[zero_copy]")
    assert (zc["ratio"], zc["median ms"], zc["verdict"]) == ("5.00x device", "0.5", "FAIL ratio")
    props = junit_properties(junit)
    assert props["test_ratio[device]"]["jetmem:device:fill:kernel:ratio_to_device"] == "1.0"
    assert props["test_ratio[zero_copy]"]["jetmem:zero_copy:fill:kernel:ratio_to_device"] == "5.0"
    assert props["test_ratio[zero_copy]"]["jetmem:zero_copy:fill:kernel:verdict"] == "FAIL ratio"


def test_max_ratio_reference_really_runs_in_the_reference_mode_interleaved(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    fake = install_fake_driver("orin", kernel_ms=0.1, kind_ms={"host": 0.5})
    pytester.makepyfile(test_r=inner(RATIO_FILE))
    result = pytester.runpytest("-rA", "-k", "zero_copy")  # the device item does not run at all
    assert outcomes(result) == {"test_ratio[zero_copy]": "FAILED"}
    # the body ran in zero_copy (host memory), then again with a fresh handle in device memory
    assert [a.kind for a in fake.allocations() if a.nbytes == NBYTES] == ["host", "device"]
    kinds = fill_kinds(fake)
    assert kinds.count("device") > 0
    # after the first runs (zero_copy: 1 + 3 warm-up + 10; device: the same), both are sampled side by side:
    # 3 warm-up pairs, then 10 interleaved samples each
    assert kinds[:14] == ["host"] * 14 and kinds[14:28] == ["device"] * 14
    assert kinds[28:] == ["host", "device"] * 13
    costs = [
        cost for launch, cost in zip(fake.launches, fake.launch_costs, strict=True) if launch.kernel == "stream_fill"
    ]
    assert set(zip(kinds, costs, strict=True)) == {("host", 0.5), ("device", 0.1)}  # what kind_ms charged
    assert fake.leaks() == {}  # the reference handle's buffer was freed too


def test_max_ratio_reference_mode_unsupported_fails_clearly(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("orin_no_managed", kernel_ms=0.1)
    pytester.makepyfile(
        test_r=inner(
            """
            @pytest.mark.memmode("device", "managed")
            @pytest.mark.memmode_runtime(max_ratio=2.0, relative_to="managed")
            def test_vs_managed(jetmem):
                jetmem.measure(fill(jetmem), label="fill")
            """
        )
    )
    result = pytester.runpytest("-rA")
    result.assert_outcomes(failed=1, skipped=1)  # managed itself is skipped: the device has no managed memory
    assert outcomes(result) == {"test_vs_managed[device]": "FAILED"}
    result.stdout.fnmatch_lines(
        ["test_r.py::test_vs_managed[[]device[]]: cannot time the reference mode for max_ratio: *managed*"]
    )


def test_max_ratio_with_a_fixture_that_depends_on_jetmem_fails_clearly(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(
        test_fx=inner(
            """
            @pytest.fixture
            def buf(jetmem):
                return jetmem.zeros(N)

            @pytest.fixture
            def wrapped(buf):
                return [buf]

            @pytest.mark.memmode("device", "zero_copy")
            @pytest.mark.memmode_runtime(max_ratio=10, relative_to="device")
            def test_fx(jetmem, wrapped):
                jetmem.measure(fill(jetmem), label="fill")
            """
        )
    )
    result = pytester.runpytest("-rA")
    assert outcomes(result)["test_fx[zero_copy]"] == "FAILED"
    result.stdout.fnmatch_lines(
        [
            "test_fx.py::test_fx[[]zero_copy[]]: reference run in device re-runs the test body with a fresh jetmem "
            "handle, but fixture(s) buf, wrapped depend on jetmem/memmode and would keep the first run's buffers; "
            "allocate in the body",
        ]
    )


def test_max_ratio_with_unequal_measure_counts_fails_clearly(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(
        test_cnt=inner(
            """
            @pytest.mark.memmode("device", "zero_copy")
            @pytest.mark.memmode_runtime(max_ratio=10, relative_to="device")
            def test_count(jetmem, memmode):
                work = fill(jetmem)
                jetmem.measure(work, label="a")
                if memmode == "zero_copy":
                    jetmem.measure(work, label="b")
            """
        )
    )
    result = pytester.runpytest("-rA")
    assert outcomes(result) == {"test_count[device]": "PASSED", "test_count[zero_copy]": "FAILED"}
    result.stdout.fnmatch_lines(
        [
            "test_cnt.py::test_count[[]zero_copy[]]: the body called jetmem.measure 2 times in zero_copy but 1 times "
            "in device: max_ratio pairs them by call order",
        ]
    )


# -- unmarked tests are reported, never failed ------------------------------------------------------------
def test_unmarked_measurements_are_reported_never_failed(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, tmp_path: Path
) -> None:
    install_fake_driver("orin", kernel_ms=0.1, kind_ms={"host": 50.0})
    pytester.makepyfile(
        test_u=inner(
            """
            @pytest.mark.memmode("device", "zero_copy")
            def test_plain(jetmem):
                jetmem.measure(fill(jetmem), label="fill")
                jetmem.measure(fill(jetmem, 3), label="three")
            """
        )
    )
    junit = tmp_path / "junit.xml"
    result = pytester.runpytest("-rA", f"--junitxml={junit}")
    assert outcomes(result) == {"test_plain[device]": "PASSED", "test_plain[zero_copy]": "PASSED"}
    rows = table(result)
    assert [(r["test"], r["what"], r["median ms"], r["verdict"]) for r in rows] == [
        ("test_plain[device]", "fill:kernel", "0.1", "reported"),
        ("test_plain[device]", "three:kernel", "0.3", "reported"),
        ("test_plain[zero_copy]", "fill:kernel", "50", "reported"),
        ("test_plain[zero_copy]", "three:kernel", "150", "reported"),
    ]
    props = junit_properties(junit)["test_plain[zero_copy]"]
    assert props["jetmem:zero_copy:three:kernel:median_ms"] == "150.0"
    assert props["jetmem:zero_copy:three:kernel:samples"] == "10"
    assert props["jetmem:zero_copy:three:kernel:verdict"] == "reported"


def test_no_table_without_measurements(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(test_n=inner('@pytest.mark.memmode("device")\ndef test_x(jetmem):\n    jetmem.zeros(4)\n'))
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert "jetmem runtimes" not in result.stdout.str()


# -- several runs with fresh allocations -------------------------------------------------------------------
RUNS_FILE = """
@pytest.mark.memmode("device")
@pytest.mark.memmode_runtime(max_ms=10)
def test_runs(jetmem):
    jetmem.measure(fill(jetmem), label="fill")
"""


def test_jetmem_runs_repeats_the_body_with_fresh_allocations(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    fake = install_fake_driver("orin", kernel_ms=jittered(0.1))
    pytester.makepyfile(test_n=inner(RUNS_FILE))
    result = pytester.runpytest("-rA", "--jetmem-runs=3", "--jetmem-save=main")
    assert outcomes(result) == {"test_runs[device]": "PASSED"}
    allocs = [a for a in fake.allocations("device") if a.nbytes == NBYTES]
    assert len(allocs) == 3 and {a.serial for a in allocs} <= {a.serial for a in fake.freed}  # each run freed its own
    assert row(result, "test_runs[device]")["n"] == "30"
    entry = baseline_doc(pytester)["entries"]["test_n.py::test_runs[device]::device::fill:kernel"]
    assert [len(r) for r in entry["runs"]] == [10, 10, 10]
    assert entry["samples"] == [v for r in entry["runs"] for v in r]
    assert entry["summary"]["n"] == 30


def test_marker_runs_overrides_the_option(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    fake = install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_n=inner(RUNS_FILE.replace("max_ms=10", "max_ms=10, runs=2")))
    result = pytester.runpytest("-rA", "--jetmem-runs=4")
    assert outcomes(result) == {"test_runs[device]": "PASSED"}
    assert len([a for a in fake.allocations("device") if a.nbytes == NBYTES]) == 2
    assert row(result, "test_runs[device]")["n"] == "20"


def test_jetmem_runs_with_unequal_measure_counts_fails_clearly(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(
        test_n=inner(
            """
            CALLS = []

            @pytest.mark.memmode("device")
            @pytest.mark.memmode_runtime(max_ms=10)
            def test_grows(jetmem):
                CALLS.append(1)
                work = fill(jetmem)
                for i in range(len(CALLS)):
                    jetmem.measure(work, label=f"m{i}")
            """
        )
    )
    result = pytester.runpytest("-rA", "--jetmem-runs=2")
    assert outcomes(result) == {"test_grows[device]": "FAILED"}
    result.stdout.fnmatch_lines(
        ["test_n.py::test_grows[[]device[]]: run 2 called jetmem.measure 2 times, run 1 1 times"]
    )


def test_jetmem_runs_never_fails_an_unmarked_test(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(
        test_n=inner(
            """
            @pytest.fixture
            def buf(jetmem):
                return jetmem.zeros(N)

            @pytest.mark.memmode("device")
            def test_unmarked(jetmem, buf):
                jetmem.measure(fill(jetmem), label="fill")
            """
        )
    )
    result = pytester.runpytest("-rA", "--jetmem-runs=2")
    assert outcomes(result) == {"test_unmarked[device]": "PASSED"}


# -- baselines: save, refuse, overwrite, append --------------------------------------------------------
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
KEYS = [f"test_b.py::{t}[device]::device::fill:kernel" for t in ("test_gated", "test_opted_out", "test_unmarked")]


def baseline_path(pytester: pytest.Pytester, name: str = "main", directory: str = ".jetmem/baselines") -> Path:
    return pytester.path / directory / f"{name}.json"


def baseline_doc(pytester: pytest.Pytester, name: str = "main", directory: str = ".jetmem/baselines") -> Any:
    return json.loads(baseline_path(pytester, name, directory).read_text("utf-8"))


@pytest.fixture
def saved_baseline(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> Path:
    """BASE_FILE's timings (0.1 ms a launch, 1% jitter) saved as baseline ``main`` in the default directory."""
    install_fake_driver("orin", kernel_ms=jittered(0.1, seed=1))
    pytester.makepyfile(test_b=inner(BASE_FILE))
    result = pytester.runpytest("-rA", "--jetmem-save=main")
    assert result.ret == pytest.ExitCode.OK
    return baseline_path(pytester)


def test_save_writes_the_documented_json(pytester: pytest.Pytester, saved_baseline: Path) -> None:
    doc = json.loads(saved_baseline.read_text("utf-8"))
    assert set(doc) >= {"format", "version", "name", "created", "session", "machine", "entries"}
    assert (doc["format"], doc["version"], doc["name"]) == ("pytest-jetmem-baseline", 1, "main")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["created"])
    assert re.fullmatch(r"[0-9a-f]{32}", doc["session"])
    machine = doc["machine"]
    assert (machine["device_name"], machine["compute_capability"], machine["driver_version"]) == ("Orin", "8.7", 12060)
    assert "fake driver" in machine["cuda_bindings_version"]
    assert sorted(doc["entries"]) == sorted(KEYS)
    entry = doc["entries"][KEYS[0]]
    assert (entry["nodeid"], entry["mode"], entry["scope"], entry["unit"]) == (
        "test_b.py::test_gated[device]",
        "device",
        "fill:kernel",
        "ms",
    )
    assert len(entry["samples"]) == 10 and all(0.09 < v < 0.11 for v in entry["samples"])
    assert entry["summary"]["median"] == pytest.approx(float(np.median(entry["samples"])))
    assert entry["first_call_ms"] == pytest.approx(0.1, rel=0.1)
    assert "runs" not in entry  # one run: samples are the truth


def test_save_again_is_refused_and_leaves_the_file_byte_identical(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    before = saved_baseline.read_bytes()
    install_fake_driver("orin", kernel_ms=0.2)
    result = pytester.runpytest("-rA", "--jetmem-save=main")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            f"jetmem: error: --jetmem-save: {saved_baseline}: baseline 'main' exists from another session (*); "
            "pass overwrite to replace it (the old file is kept as main.json.prev) (pass --jetmem-append to add "
            "this session's runs, or --jetmem-overwrite to replace it)",
        ]
    )
    assert "jetmem: saved baseline" not in result.stdout.str()
    assert saved_baseline.read_bytes() == before
    assert not saved_baseline.with_name("main.json.prev").exists()


def test_overwrite_keeps_the_previous_file(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    before = saved_baseline.read_bytes()
    install_fake_driver("orin", kernel_ms=0.2)
    result = pytester.runpytest("--jetmem-save=main", "--jetmem-overwrite")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"jetmem: saved baseline 'main' in {saved_baseline.parent}"])
    assert saved_baseline.with_name("main.json.prev").read_bytes() == before
    old, new = json.loads(before), baseline_doc(pytester)
    assert new["session"] != old["session"]
    assert new["entries"][KEYS[0]]["summary"]["median"] == pytest.approx(0.2)


def test_append_adds_this_sessions_runs(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    old = json.loads(saved_baseline.read_bytes())
    install_fake_driver("orin", kernel_ms=0.2)
    result = pytester.runpytest("--jetmem-save=main", "--jetmem-append")
    assert result.ret == pytest.ExitCode.OK
    new = baseline_doc(pytester)
    assert new["created"] == old["created"]
    for key in KEYS:
        runs = new["entries"][key]["runs"]
        assert len(runs) == 2
        assert runs[0] == old["entries"][key]["samples"]
        assert runs[1] == pytest.approx([0.2] * 10)
        assert new["entries"][key]["samples"] == runs[0] + runs[1]


# -- baselines: compare ---------------------------------------------------------------------------------
def test_compare_same_timings_is_no_regression(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    before = saved_baseline.read_bytes()
    install_fake_driver("orin", kernel_ms=jittered(0.1, seed=2))
    result = pytester.runpytest("-rA", "--jetmem-compare=main")
    assert set(outcomes(result).values()) == {"PASSED"} and len(outcomes(result)) == 3
    for r in table(result):
        assert re.fullmatch(r"[+-]\d\.\d% unchanged", r["vs baseline"]), r
    assert saved_baseline.read_bytes() == before  # comparing never writes


def test_compare_20pct_slower_fails_only_the_gated_item(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path, tmp_path: Path
) -> None:
    install_fake_driver("orin", kernel_ms=jittered(0.12, seed=3))
    junit = tmp_path / "junit.xml"
    result = pytester.runpytest("-rA", "--jetmem-compare=main", f"--junitxml={junit}")
    assert outcomes(result) == {
        "test_gated[device]": "FAILED",
        "test_opted_out[device]": "PASSED",
        "test_unmarked[device]": "PASSED",
    }
    result.stdout.fnmatch_lines(
        [
            "device fill:kernel: median 0.1* ms vs baseline 0.* ms: +*% (99% CI +*%..+*%, p=*) "
            "> 5% threshold: REGRESSION",
        ]
    )
    verdicts = message_lines(result, "device ")  # only the gated item carries a verdict message
    assert len(verdicts) == 1 and verdicts[0].endswith("REGRESSION"), verdicts
    gated, opted, unmarked = (
        row(result, t) for t in ("test_gated[device]", "test_opted_out[device]", "test_unmarked[device]")
    )
    assert gated["verdict"] == "FAIL regression"
    assert (opted["verdict"], unmarked["verdict"]) == ("ok", "reported")
    for r in (gated, opted, unmarked):
        change = float(r["vs baseline"].split("%")[0])
        assert 15 < change < 25 and r["vs baseline"].endswith("regression"), r
    props = junit_properties(junit)
    assert props["test_unmarked[device]"]["jetmem:device:fill:kernel:baseline_verdict"] == "regression"
    assert 15 < float(props["test_gated[device]"]["jetmem:device:fill:kernel:baseline_change_pct"]) < 25


def test_compare_threshold_option(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    install_fake_driver("orin", kernel_ms=jittered(0.12, seed=3))
    result = pytester.runpytest("-rA", "--jetmem-compare=main", "--jetmem-fail=30")
    assert set(outcomes(result).values()) == {"PASSED"}
    assert row(result, "test_gated[device]")["vs baseline"].endswith("unchanged")


def test_compare_runs_enter_the_regression_test(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    install_fake_driver("orin", kernel_ms=jittered(0.1, seed=4))
    pytester.makepyfile(test_b=inner(BASE_FILE))
    assert pytester.runpytest("--jetmem-save=main", "--jetmem-runs=3").ret == pytest.ExitCode.OK
    install_fake_driver("orin", kernel_ms=jittered(0.12, seed=5))
    result = pytester.runpytest("-rA", "--jetmem-compare=main")
    assert outcomes(result)["test_gated[device]"] == "FAILED"
    # one current run judged against the baseline's three run medians
    result.stdout.fnmatch_lines(["device fill:kernel: median * > 5% threshold: REGRESSION"])
    assert "over 1 vs 3 runs" in result.stdout.str()


def test_missing_baseline_is_a_note_and_nothing_is_compared(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_b=inner(BASE_FILE))
    result = pytester.runpytest("-rA", "--jetmem-compare=nope")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"jetmem: no baseline 'nope' ({baseline_path(pytester, 'nope')}): nothing compared"])
    assert all(r["vs baseline"].startswith("no baseline 'nope'") for r in table(result))
    assert not (pytester.path / ".jetmem").exists()


def test_new_test_not_in_the_baseline(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    install_fake_driver("orin", kernel_ms=0.1)
    pytester.makepyfile(test_new=inner(RUNS_FILE))
    result = pytester.runpytest("-rA", "--jetmem-compare=main", "test_new.py")
    assert outcomes(result) == {"test_runs[device]": "PASSED"}
    assert row(result, "test_runs[device]")["vs baseline"] == "new (not in baseline)"


def test_corrupt_baseline_is_reported_and_left_untouched(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    saved_baseline.write_bytes(b'{"format": "pytest-jetmem-baseline", "version": 1, truncated')
    before = saved_baseline.read_bytes()
    install_fake_driver("orin", kernel_ms=0.2)
    result = pytester.runpytest("-rA", "--jetmem-compare=main", "--jetmem-save=main")
    assert result.ret == pytest.ExitCode.USAGE_ERROR  # stopped before any test ran
    assert f"--jetmem-compare: {saved_baseline}: corrupt baseline: not valid JSON" in result.stderr.str()
    assert saved_baseline.read_bytes() == before


def test_corrupt_baseline_is_a_usage_error(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    saved_baseline.write_bytes(b"\x00 not json")
    install_fake_driver("orin", kernel_ms=0.2)
    result = pytester.runpytest("--jetmem-compare=main")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --jetmem-compare: {saved_baseline}: corrupt baseline*"])


def _move_to_another_machine(path: Path) -> None:
    doc = json.loads(path.read_text("utf-8"))
    doc["machine"]["device_name"] = "Xavier"
    path.write_text(json.dumps(doc), "utf-8")


def test_baseline_from_another_machine_warns_and_is_not_compared(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    _move_to_another_machine(saved_baseline)
    install_fake_driver("orin", kernel_ms=0.2)  # twice as slow: compared, it would fail test_gated
    result = pytester.runpytest("-rA", "--jetmem-compare=main")
    assert set(outcomes(result).values()) == {"PASSED"}
    note = "baseline 'main' comes from another machine (device_name: 'Orin' != 'Xavier'): not compared"
    result.stdout.fnmatch_lines([f"jetmem: {note}"])
    assert f"UserWarning: jetmem: {note}" in result.stdout.str()
    assert "regression" not in result.stdout.str()


@pytest.mark.parametrize("how", ["option", "ini"])
def test_strict_machine_fails_the_marked_items(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path, how: str
) -> None:
    _move_to_another_machine(saved_baseline)
    install_fake_driver("orin", kernel_ms=0.1)
    if how == "ini":
        pytester.makeini("[pytest]\njetmem_strict_machine = true\n")
    result = pytester.runpytest(
        "-rA", "--jetmem-compare=main", *(["--jetmem-strict-machine"] if how == "option" else [])
    )
    assert outcomes(result)["test_gated[device]"] == "FAILED"
    assert outcomes(result)["test_unmarked[device]"] == "PASSED"
    result.stdout.fnmatch_lines(
        [
            "jetmem: baseline 'main' comes from another machine (device_name: 'Orin' != 'Xavier'): "
            "failing its comparisons (--jetmem-strict-machine)",
        ]
    )


def test_strict_machine_spares_items_that_opted_out_of_baselines(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path
) -> None:
    _move_to_another_machine(saved_baseline)
    install_fake_driver("orin", kernel_ms=0.1)
    result = pytester.runpytest("-rA", "--jetmem-compare=main", "--jetmem-strict-machine")
    assert outcomes(result)["test_opted_out[device]"] == "PASSED"


# -- ini keys and option validation -------------------------------------------------------------------------
def test_ini_keys(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    pytester.makepyfile(test_b=inner(BASE_FILE))
    pytester.makeini("[pytest]\njetmem_baseline_dir = perf/base\njetmem_runs = 2\n")
    fake = install_fake_driver("orin", kernel_ms=jittered(0.1, seed=6))
    assert pytester.runpytest("--jetmem-save=ci").ret == pytest.ExitCode.OK
    assert not (pytester.path / ".jetmem").exists()
    doc = baseline_doc(pytester, "ci", "perf/base")
    assert all(len(e["runs"]) == 2 for e in doc["entries"].values())  # jetmem_runs = 2
    assert len([a for a in fake.allocations("device") if a.nbytes == NBYTES]) == 6  # 3 tests x 2 runs

    # jetmem_compare picks the baseline without an option; 20% slower fails the gated test
    pytester.makeini("[pytest]\njetmem_baseline_dir = perf/base\njetmem_compare = ci\n")
    install_fake_driver("orin", kernel_ms=jittered(0.12, seed=7))
    result = pytester.runpytest("-rA")
    assert outcomes(result)["test_gated[device]"] == "FAILED"
    result.stdout.fnmatch_lines(["*> 5% threshold: REGRESSION"])

    # jetmem_fail = 30: the same slowdown is within the threshold
    pytester.makeini("[pytest]\njetmem_baseline_dir = perf/base\njetmem_compare = ci\njetmem_fail = 30\n")
    install_fake_driver("orin", kernel_ms=jittered(0.12, seed=7))
    result = pytester.runpytest("-rA")
    assert set(outcomes(result).values()) == {"PASSED"}
    assert row(result, "test_gated[device]")["vs baseline"].endswith("unchanged")


def test_option_beats_ini(pytester: pytest.Pytester, install_fake_driver: InstallFake, saved_baseline: Path) -> None:
    pytester.makeini("[pytest]\njetmem_fail = 30\njetmem_compare = nope\n")
    install_fake_driver("orin", kernel_ms=jittered(0.12, seed=8))
    result = pytester.runpytest("-rA", "--jetmem-fail=5", "--jetmem-compare=main")
    assert outcomes(result)["test_gated[device]"] == "FAILED"


@pytest.mark.parametrize(
    ("args", "ini", "expected"),
    [
        (["--jetmem-fail=-1"], "", "ERROR: --jetmem-fail: expected a percentage >= 0, got -1.0"),
        (["--jetmem-fail=nan"], "", "ERROR: --jetmem-fail: expected a percentage >= 0, got nan"),
        ([], "jetmem_fail = five", "ERROR: ini option jetmem_fail: expected a percentage >= 0, got 'five'"),
        ([], "jetmem_fail = -3", "ERROR: ini option jetmem_fail: expected a percentage >= 0, got -3.0"),
        (["--jetmem-runs=0"], "", "ERROR: --jetmem-runs: expected an integer >= 1, got 0"),
        ([], "jetmem_runs = 0", "ERROR: ini option jetmem_runs: expected an integer >= 1, got 0"),
        (["--jetmem-max-time=0"], "", "ERROR: --jetmem-max-time: expected seconds > 0, got 0.0"),
    ],
    ids=["fail-negative", "fail-nan", "ini-fail-word", "ini-fail-negative", "runs-zero", "ini-runs-zero", "max-time"],
)
def test_bad_options_are_usage_errors(
    pytester: pytest.Pytester, fake_driver: FakeDriver, args: list[str], ini: str, expected: str
) -> None:
    pytester.makepyfile(test_b=inner(BASE_FILE))
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([expected])
    assert fake_driver.launches == []


def test_fractional_ini_runs_is_a_usage_error(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(test_b=inner(BASE_FILE))
    pytester.makeini("[pytest]\njetmem_runs = 2.5\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: ini option jetmem_runs: expected an integer >= 1, got*2.5*"])


# -- reports: pytest-benchmark JSON and junitxml --------------------------------------------------------------
def junit_properties(path: Path) -> dict[str, dict[str, str]]:
    """Test name -> its junitxml properties."""
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        out[case.get("name", "")] = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
    return out


def pytest_benchmark_cli() -> list[str]:
    script = Path(sys.executable).with_name("pytest-benchmark")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from pytest_benchmark.cli import main; sys.exit(main())"]


def test_benchmark_json_is_read_by_pytest_benchmark_compare(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, tmp_path: Path
) -> None:
    install_fake_driver("orin", kernel_ms=0.1, kind_ms={"host": 0.5})
    pytester.makepyfile(test_r=inner(RATIO_FILE))
    bench = tmp_path / "out" / "bench.json"
    result = pytester.runpytest("-rA", f"--jetmem-benchmark-json={bench}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # zero_copy's ratio; the file is written all the same
    doc = json.loads(bench.read_text("utf-8"))
    assert {b["name"] for b in doc["benchmarks"]} == {f"test_ratio[{m}]:fill:kernel" for m in MODES}
    by_mode = {b["params"]["memmode"]: b for b in doc["benchmarks"]}
    assert by_mode["zero_copy"]["stats"]["median"] == pytest.approx(0.5e-3)  # seconds, as pytest-benchmark has it
    assert by_mode["device"]["stats"]["rounds"] == 10
    assert by_mode["zero_copy"]["extra_info"]["ratio"] == pytest.approx(5.0)
    assert by_mode["zero_copy"]["extra_info"]["verdict"] == "FAIL ratio"
    assert doc["machine_info"]["jetmem_device_name"] == "Orin"

    cli = subprocess.run(
        [*pytest_benchmark_cli(), "compare", str(bench), "--columns=min,median"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    # "test_ratio[zero_copy]:fill:kernel (h)     500.0000 (5.00)     500.0000 (5.00)": name, min, median in us
    lines = {
        line.split()[0]: [float(t) for t in line.split()[1:] if re.fullmatch(r"[\d.]+", t)]
        for line in cli.stdout.splitlines()
        if line.startswith("test_ratio[")
    }
    assert set(lines) == {f"test_ratio[{m}]:fill:kernel" for m in MODES}, cli.stdout
    assert lines["test_ratio[zero_copy]:fill:kernel"] == [pytest.approx(500.0)] * 2
    assert lines["test_ratio[device]:fill:kernel"] == [pytest.approx(100.0)] * 2
    assert "Median" in cli.stdout and "Max" not in cli.stdout


# -- pytest-xdist ---------------------------------------------------------------------------------------------
def test_xdist_workers_save_one_baseline_and_the_controller_lists_every_row(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(conftest_source("orin", kernel_ms=0.1, kind_ms={"host": 0.2}))
    pytester.makepyfile(
        test_x=inner(
            """
            import os
            from pathlib import Path

            @pytest.mark.memmode
            @pytest.mark.parametrize("k", [1, 2])
            def test_many(jetmem, k):
                with open(Path(__file__).with_name("workers.txt"), "a") as fh:
                    fh.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
                jetmem.measure(fill(jetmem, k), label="fill")
            """
        )
    )
    result = pytester.runpytest_subprocess("-n", "2", "-rA", "--jetmem-save=par")
    result.assert_outcomes(passed=6)
    assert set((pytester.path / "workers.txt").read_text().split()) == {"gw0", "gw1"}
    doc = baseline_doc(pytester, "par")
    names = {f"test_many[{k}-{m}]" for k in (1, 2) for m in MODES}
    assert {e["nodeid"].split("::")[1] for e in doc["entries"].values()} == names
    assert len(doc["entries"]) == 6
    rows = table(result)
    assert {r["test"] for r in rows} == names and len(rows) == 6
    medians = {r["test"]: r["median ms"] for r in rows}
    assert medians["test_many[2-zero_copy]"] == "0.4" and medians["test_many[1-device]"] == "0.1"
    result.stdout.fnmatch_lines(["jetmem: saved baseline 'par' in *"])


def test_xdist_save_refusal_reaches_the_controller(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makeconftest(conftest_source("orin", kernel_ms=0.1))
    pytester.makepyfile(test_x=inner("@pytest.mark.memmode\ndef test_m(jetmem):\n    jetmem.measure(fill(jetmem))\n"))
    assert pytester.runpytest_subprocess("-n", "2", "--jetmem-save=par").ret == pytest.ExitCode.OK
    before = baseline_path(pytester, "par").read_bytes()
    result = pytester.runpytest_subprocess("-n", "2", "--jetmem-save=par")
    assert baseline_path(pytester, "par").read_bytes() == before  # holds today: the workers refused
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["jetmem: error: --jetmem-save: *exists from another session*"])


# -- the GPU lock -------------------------------------------------------------------------------------------------
LOCK_CHILD = """
import os, sys, time
from pathlib import Path
from pytest_jetmem.measure.timing import gpu_lock

log, go, name = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
while not go.exists():
    time.sleep(0.001)
for i in range(5):
    with gpu_lock(7):
        with open(log, "a") as fh:
            fh.write(f"enter {name}\\n")
        time.sleep(0.01)  # hold it a while: the other process is trying to get in now
        with open(log, "a") as fh:
            fh.write(f"exit {name}\\n")
"""


def test_gpu_lock_serialises_processes(tmp_path: Path) -> None:
    log, go = tmp_path / "log.txt", tmp_path / "go"
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # gpu_lock's file lands here, not in the shared /tmp
    children = [subprocess.Popen([sys.executable, "-c", LOCK_CHILD, str(log), str(go), name], env=env) for name in "AB"]
    go.touch()
    for child in children:
        assert child.wait(timeout=120) == 0
    events = log.read_text().split("\n")[:-1]
    assert len(events) == 20
    assert sorted(events) == sorted([f"{e} {n}" for n in "AB" for e in ("enter", "exit")] * 5)
    # every enter is followed by the same process's exit before anyone else enters: no overlap
    for enter, exit_ in zip(events[::2], events[1::2], strict=True):
        assert enter.startswith("enter ") and exit_ == "exit " + enter.split()[1], events
    assert (tmp_path / "pytest-jetmem-gpu7.lock").exists()


def test_gpu_lock_without_an_ordinal_locks_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with gpu_lock(None), gpu_lock(None):  # would deadlock if it took a lock
        pass
    with gpu_lock(3), gpu_lock(4):  # different GPUs: different locks
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pytest-jetmem-gpu3.lock", "pytest-jetmem-gpu4.lock"]


# -- device selection -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("count", "env", "expected"),
    [
        (4, {}, 0),
        (4, {"JETMEM_DEVICE": "2"}, 2),
        (4, {"JETMEM_DEVICE": " 3 "}, 3),
        (4, {"JETMEM_DEVICE": "1", "PYTEST_XDIST_WORKER": "gw2"}, 1),  # explicit choice wins
        (4, {"JETMEM_DEVICE": "", "PYTEST_XDIST_WORKER": "gw2"}, 2),
        (2, {"PYTEST_XDIST_WORKER": "gw0"}, 0),
        (2, {"PYTEST_XDIST_WORKER": "gw3"}, 1),
        (3, {"PYTEST_XDIST_WORKER": "gw7"}, 1),
        (1, {"PYTEST_XDIST_WORKER": "gw5"}, 0),
        (0, {"PYTEST_XDIST_WORKER": "gw5"}, 0),
        (4, {"PYTEST_XDIST_WORKER": "master"}, 0),
        (4, {"PYTEST_XDIST_WORKER": "gwx"}, 0),
    ],
)
def test_select_ordinal(count: int, env: dict[str, str], expected: int) -> None:
    assert select_ordinal(count, env) == expected


@pytest.mark.parametrize("value", ["gpu1", "1.5", "cuda:0"])
def test_select_ordinal_bad_jetmem_device_is_a_clear_error(value: str) -> None:
    with pytest.raises(CudaUnavailable, match=re.escape(f"JETMEM_DEVICE={value!r}: expected a device ordinal")):
        select_ordinal(4, {"JETMEM_DEVICE": value, "PYTEST_XDIST_WORKER": "gw1"})


def test_select_ordinal_negative_jetmem_device_is_a_clear_error() -> None:
    with pytest.raises(CudaUnavailable, match="JETMEM_DEVICE='-1'"):
        select_ordinal(4, {"JETMEM_DEVICE": "-1"})


def test_open_device_uses_the_xdist_worker_number(
    install_fake_driver: InstallFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = install_fake_driver("orin", devices=2)
    monkeypatch.delenv("JETMEM_DEVICE", raising=False)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    avail = open_device(fake)
    assert avail.ok and avail.info is not None and avail.device is not None
    assert avail.info.ordinal == 1
    assert [c.ordinal for c in fake._contexts.values() if c.refcount] == [1]  # the context is on GPU 1
    avail.device.close()
    assert fake.leaks() == {}


@pytest.mark.parametrize(
    ("value", "reason"),
    [("abc", "JETMEM_DEVICE='abc': expected a device ordinal"), ("5", "no CUDA device 5: only 1 device(s) present")],
)
def test_bad_jetmem_device_skips_gpu_tests_with_the_reason(
    pytester: pytest.Pytester, fake_driver: FakeDriver, monkeypatch: pytest.MonkeyPatch, value: str, reason: str
) -> None:
    monkeypatch.setenv("JETMEM_DEVICE", value)
    pytester.makepyfile(test_d=inner('@pytest.mark.memmode("device")\ndef test_x(jetmem):\n    pass\n'))
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([f"SKIPPED *jetmem: {reason}*"])
    assert fake_driver.count("cuDevicePrimaryCtxRetain") == 0


# -- statistics: Student's t ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("q", "df", "table_value"),
    [
        (0.975, 4, 2.776),
        (0.995, 10, 3.169),
        (0.95, 1, 6.314),
        (0.995, 2, 9.925),
        (0.9, 5, 1.476),
        (0.975, 30, 2.042),
        (0.995, 120, 2.617),
        (0.975, 1e7, 1.960),
    ],
)
def test_student_t_quantiles_match_the_table(q: float, df: float, table_value: float) -> None:
    t = student_t_ppf(q, df)
    assert t == pytest.approx(table_value, abs=1.5e-3)
    assert student_t_sf2(t, df) == pytest.approx(2 * (1 - q), rel=1e-6)


@pytest.mark.parametrize("t", [0.0, 0.3, 1.0, 2.5, 10.0])
def test_student_t_sf2_closed_forms(t: float) -> None:
    assert student_t_sf2(t, 1) == pytest.approx(1 - 2 * math.atan(t) / math.pi, abs=1e-12)  # Cauchy
    assert student_t_sf2(t, 2) == pytest.approx(1 - t / math.sqrt(2 + t * t), abs=1e-12)
    assert student_t_sf2(-t, 7) == student_t_sf2(t, 7)


def test_student_t_sf2_table_and_edges() -> None:
    assert student_t_sf2(2.776, 4) == pytest.approx(0.05, abs=2e-4)
    assert student_t_sf2(3.169, 10) == pytest.approx(0.01, abs=1e-4)
    assert student_t_sf2(math.inf, 5) == 0.0
    assert student_t_sf2(0.0, 5) == 1.0
    assert student_t_sf2(40.0, 3) < 1e-4


# -- statistics: run-level comparison ------------------------------------------------------------------------------
def test_run_ratio_test_two_sided_welch_by_hand() -> None:
    b, c = [1.0, 1.1, 0.9, 1.05], [1.2, 1.3, 1.15]
    lb, lc = np.log(b), np.log(c)
    vb, vc = lb.var(ddof=1) / len(b), lc.var(ddof=1) / len(c)
    df = (vb + vc) ** 2 / (vb**2 / (len(b) - 1) + vc**2 / (len(c) - 1))
    d, se = lc.mean() - lb.mean(), math.sqrt(vb + vc)
    half = student_t_ppf(0.995, df) * se
    ratio, lo, hi, p = run_ratio_test(b, c)
    assert ratio == pytest.approx(math.exp(d))
    assert (lo, hi) == (pytest.approx(math.exp(d - half)), pytest.approx(math.exp(d + half)))
    assert p == pytest.approx(student_t_sf2(d / se, df))
    # geometric: swapping the sides inverts the ratio and the interval, and keeps p
    r2, lo2, hi2, p2 = run_ratio_test(c, b)
    assert (r2, lo2, hi2, p2) == (
        pytest.approx(1 / ratio),
        pytest.approx(1 / hi),
        pytest.approx(1 / lo),
        pytest.approx(p),
    )


def _prediction_case() -> tuple[list[float], float, float, float, int]:
    rng = np.random.default_rng(11)
    base = list(np.exp(rng.normal(0.0, 0.05, 10)))
    current = 1.15
    lb = np.log(base)
    d = math.log(current) - lb.mean()
    se = lb.std(ddof=1) * math.sqrt(1 + 1 / len(base))  # one new run: its variance is the baseline runs'
    return base, current, d, se, len(base)


def test_run_ratio_test_one_current_run_is_a_prediction_interval() -> None:
    base, current, d, se, n = _prediction_case()
    ratio, lo, hi, p = run_ratio_test(base, [current])
    assert ratio == pytest.approx(math.exp(d))
    half = math.log(hi) - d
    assert d - math.log(lo) == pytest.approx(half)  # symmetric on the log scale
    # the half-width is a t quantile times the prediction standard error s * sqrt(1 + 1/n), not s / sqrt(n)
    assert student_t_ppf(0.995, 1e7) * se <= half <= student_t_ppf(0.995, n - 1) * se * (1 + 1e-9)
    assert 0.0 < p < 0.05
    with pytest.raises(ValueError, match="at least two runs"):
        run_ratio_test([1.0], [1.1])


def test_run_ratio_test_prediction_interval_has_n_minus_1_degrees_of_freedom() -> None:
    base, current, d, se, n = _prediction_case()
    _, lo, hi, p = run_ratio_test(base, [current])
    half = student_t_ppf(0.995, n - 1) * se
    assert (lo, hi) == (pytest.approx(math.exp(d - half), rel=1e-6), pytest.approx(math.exp(d + half), rel=1e-6))
    assert p == pytest.approx(student_t_sf2(d / se, n - 1), rel=1e-6)


def synthetic_runs(
    rng: np.random.Generator, n_runs: int, shift: float = 1.0, between: float = 0.05, within: float = 0.005
) -> list[np.ndarray]:
    """Runs of 20 samples around ``shift`` ms: each run has its own level (lognormal, sd ``between``)."""
    return [shift * math.exp(rng.normal(0.0, between)) * (1 + within * rng.standard_normal(20)) for _ in range(n_runs)]


def verdict_rate(n_base: int, n_cur: int, shift: float, verdict: Verdict, seeds: int = 200) -> float:
    hits = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        base, cur = synthetic_runs(rng, n_base), synthetic_runs(rng, n_cur, shift)
        hits += compare_runs(base, cur, 5.0).verdict is verdict
    return hits / seeds


@pytest.mark.parametrize(("n_base", "n_cur"), [(5, 5), (10, 3), (10, 1), (3, 3)])
def test_compare_runs_a_a_false_regressions_stay_rare(n_base: int, n_cur: int) -> None:
    assert verdict_rate(n_base, n_cur, 1.0, Verdict.REGRESSION) <= 0.02
    assert verdict_rate(n_base, n_cur, 1.0, Verdict.IMPROVEMENT) <= 0.02


def test_samples_alone_would_raise_false_alarms_on_the_same_data() -> None:
    # the reason runs exist: with one run each side, samples share their run's level and the 5% between-run
    # spread looks like a change (this also shows the harness above can see false alarms)
    assert verdict_rate(1, 1, 1.0, Verdict.REGRESSION) >= 0.1


@pytest.mark.parametrize(("n_base", "n_cur", "power"), [(10, 10, 0.95), (10, 5, 0.8), (5, 5, 0.6)])
def test_compare_runs_catches_a_15pct_shift(n_base: int, n_cur: int, power: float) -> None:
    assert verdict_rate(n_base, n_cur, 1.15, Verdict.REGRESSION) >= power
    assert verdict_rate(n_base, n_cur, 1 / 1.15, Verdict.IMPROVEMENT) >= power


def test_compare_runs_with_one_run_each_is_compare_on_the_samples() -> None:
    rng = np.random.default_rng(3)
    base, cur = rng.normal(1.0, 0.01, 30), rng.normal(1.1, 0.01, 30)
    a, b = compare_runs([base], [cur], 5.0), compare(base, cur, 5.0)
    assert a == b and a.unit == "samples" and a.verdict is Verdict.REGRESSION


def test_compare_runs_describes_run_counts_and_validates() -> None:
    rng = np.random.default_rng(4)
    cmp = compare_runs(synthetic_runs(rng, 5), synthetic_runs(rng, 3, 1.3), 5.0)
    assert (cmp.unit, cmp.n_baseline, cmp.n_current, cmp.verdict) == ("runs", 5, 3, Verdict.REGRESSION)
    assert cmp.describe().endswith("over 3 vs 5 runs > 5% threshold: REGRESSION")
    with pytest.raises(ValueError, match="at least one run"):
        compare_runs([], [[1.0]], 5.0)
