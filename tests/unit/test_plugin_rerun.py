"""plugin.rerun: the test body run again with a fresh ``jetmem`` handle, for ``max_ratio``'s side-by-side
reference runs and for ``--jetmem-runs``.

pytester runs against the fake driver, whose streams carry a virtual clock that each launch advances by
``kernel_ms`` (``kind_ms`` gives launches on one kind of memory their own cost), so every CUDA-event time is
exact and can be checked figure by figure. Nothing here asserts on wall-clock time.
"""

from __future__ import annotations

import pytest

from runtime_fixtures import _module_kernel_cache, _no_user_device_choice, jetmem_kernel_cache  # noqa: F401
from runtime_runs import (
    NBYTES,
    RATIO_FILE,
    RUNS_FILE,
    InstallFake,
    baseline_doc,
    fill_kinds,
    inner,
    jittered,
    outcomes,
    row,
)


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
