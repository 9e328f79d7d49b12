"""The plugin's mechanics without a GPU: pytester runs against a fake CUDA driver (tests/fakes/fake_driver.py).

Only the driver boundary is faked; the plugin, device probing, memory modes, buffers, the ``jetmem`` handle
and kernel argument packing run for real. Each test installs a :class:`FakeDriver` (the ``fake_driver`` and
``install_fake_driver`` fixtures of tests/conftest.py) before an in-process ``pytester`` run, whose plugin
opens the device lazily and so talks to the fake; afterwards the test inspects what the fake saw.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest

from fakes.fake_driver import FakeDriver, FakeFault, Launch, conftest_source, error_code, param_sizes
from pytest_jetmem import kernels
from pytest_jetmem.cuda.compiler import compile_kernel
from pytest_jetmem.errors import CudaError, CudaUnavailable

MODES = ("device", "managed", "zero_copy")
ALLOC_KIND = {"device": "device", "managed": "managed", "zero_copy": "host"}  # fake allocation kind per mode

InstallFake = Callable[..., FakeDriver]


# -- helpers -------------------------------------------------------------------------------------------
def results(reprec: pytest.HookRecorder) -> dict[str, tuple[str, str]]:
    """Test name -> (outcome, text) of its call, or of its setup where setup did not pass.

    Teardown failures are added under ``"<name> teardown"``. The text of a skip is its reason.
    """
    out: dict[str, tuple[str, str]] = {}
    for rep in reprec.getreports("pytest_runtest_logreport"):
        name = rep.nodeid.split("::", 1)[1]
        text = rep.longrepr[2] if rep.skipped and isinstance(rep.longrepr, tuple) else rep.longreprtext
        if rep.when == "call" or (rep.when == "setup" and not rep.passed):
            out[name] = (rep.outcome, text)
        elif rep.when == "teardown" and not rep.passed:
            out[f"{name} teardown"] = (rep.outcome, text)
    return out


def collected_names(pytester: pytest.Pytester, *args: str) -> list[str]:
    items, reprec = pytester.inline_genitems(*args)
    assert reprec.ret == pytest.ExitCode.OK
    return [item.name for item in items]


def skip_reason(text: str) -> str:
    return text.removeprefix("Skipped: ")


# -- parametrization -----------------------------------------------------------------------------------
def test_memmode_marker_makes_one_item_per_mode(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(
        """
        import pytest
        from pytest_jetmem.cuda import driver

        @pytest.mark.memmode
        def test_x(memmode, jetmem, request):
            assert request.node.name == f"test_x[{memmode}]"
            assert jetmem.mode == memmode
            buf = jetmem.zeros(16)
            assert buf.mode == memmode
            # what the mode asked the driver for
            assert driver.get().allocation_at(buf.ptr).kind == {kinds!r}[memmode]

        def test_plain():
            pass
        """.replace("{kinds!r}", repr(ALLOC_KIND))
    )
    assert collected_names(pytester) == ["test_x[device]", "test_x[managed]", "test_x[zero_copy]", "test_plain"]
    reprec = pytester.inline_run()
    reprec.assertoutcome(passed=4)
    # one allocation of each kind, each freed with the matching call
    assert sorted(a.kind for a in fake_driver.freed if a.nbytes == 64) == ["device", "host", "managed"]
    assert fake_driver.count("cuMemAlloc") == fake_driver.count("cuMemAllocManaged") == 1
    assert fake_driver.count("cuMemHostAlloc") == fake_driver.count("cuMemFreeHost") == 1
    assert fake_driver.count("cuMemFree") == 2


@pytest.mark.parametrize("memmode_first", [True, False], ids=["memmode-above", "memmode-below"])
def test_memmode_composes_with_parametrize(
    pytester: pytest.Pytester, fake_driver: FakeDriver, memmode_first: bool
) -> None:
    marks = ['@pytest.mark.parametrize("n", [3, 5])', "@pytest.mark.memmode"]
    if memmode_first:
        marks.reverse()
    pytester.makepyfile(
        "import pytest\n\n"
        + "\n".join(marks)
        + "\ndef test_x(n, memmode):\n    assert n in (3, 5) and memmode in ('device', 'managed', 'zero_copy')\n"
    )
    names = collected_names(pytester)
    assert sorted(names) == sorted(f"test_x[{n}-{m}]" for n in (3, 5) for m in MODES)
    pytester.inline_run().assertoutcome(passed=6)


def test_memmode_with_parametrized_fixture_and_class(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.fixture(params=["a", "b"])
        def letter(request):
            return request.param

        @pytest.mark.memmode("managed")
        class TestInClass:
            def test_one(self, memmode, letter):
                assert memmode == "managed"

            def test_two(self, memmode):
                assert memmode == "managed"
        """
    )
    assert sorted(collected_names(pytester)) == ["test_one[a-managed]", "test_one[b-managed]", "test_two[managed]"]


def test_module_level_marker(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(
        """
        import pytest

        pytestmark = pytest.mark.memmode("zero_copy", "device")

        def test_a(memmode):
            pass

        def test_b(jetmem):
            assert jetmem.mode in ("zero_copy", "device")
        """
    )
    assert collected_names(pytester) == ["test_a[zero_copy]", "test_a[device]", "test_b[zero_copy]", "test_b[device]"]
    pytester.inline_run().assertoutcome(passed=4)


def test_subsets_keep_order_and_collapse_duplicates(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.memmode("device", "managed")
        def test_pair(memmode):
            pass

        @pytest.mark.memmode("managed", "device", "managed", "device")
        def test_dupes(memmode):
            pass

        @pytest.mark.memmode(["zero_copy", "zero_copy"])
        def test_list(memmode):
            pass

        @pytest.mark.memmode()
        def test_empty_call(memmode):
            pass
        """
    )
    assert collected_names(pytester) == [
        "test_pair[device]",
        "test_pair[managed]",
        "test_dupes[managed]",
        "test_dupes[device]",
        "test_list[zero_copy]",
        "test_empty_call[device]",
        "test_empty_call[managed]",
        "test_empty_call[zero_copy]",
    ]


# -- choosing modes from the command line and the ini file ----------------------------------------------
MODE_SELECTION_TESTS = """
    import pytest

    @pytest.mark.memmode
    def test_all(memmode):
        pass

    @pytest.mark.memmode("managed", "zero_copy")
    def test_some(memmode):
        pass

    def test_plain():
        pass
"""


@pytest.mark.parametrize("value", ["device,managed", "managed, device", "device managed"])
def test_jetmem_modes_option_deselects_other_modes(
    pytester: pytest.Pytester, fake_driver: FakeDriver, value: str
) -> None:
    pytester.makepyfile(MODE_SELECTION_TESTS)
    result = pytester.runpytest(f"--jetmem-modes={value}", "-v")
    result.assert_outcomes(passed=4, deselected=2)
    passed = {line.split("::")[1].split()[0] for line in result.outlines if " PASSED" in line}
    assert passed == {"test_all[device]", "test_all[managed]", "test_some[managed]", "test_plain"}
    result.stdout.fnmatch_lines(["jetmem: modes selected: *device*"])


def test_jetmem_modes_ini_key(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(MODE_SELECTION_TESTS)
    pytester.makeini("[pytest]\njetmem_modes = zero_copy\n")
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=3, deselected=3)
    result.stdout.fnmatch_lines(["*test_all?zero_copy? PASSED*", "*test_some?zero_copy? PASSED*"])
    result.stdout.fnmatch_lines(["jetmem: modes selected: zero_copy"])


def test_jetmem_modes_option_overrides_ini(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(MODE_SELECTION_TESTS)
    pytester.makeini("[pytest]\njetmem_modes = zero_copy\n")
    result = pytester.runpytest("--jetmem-modes=device", "-v")
    result.assert_outcomes(passed=2, deselected=4)
    result.stdout.fnmatch_lines(["*test_all?device? PASSED*"])


def test_no_selection_runs_every_mode(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(MODE_SELECTION_TESTS)
    result = pytester.runpytest()
    result.assert_outcomes(passed=6)
    assert "deselected" not in result.parseoutcomes()
    result.stdout.fnmatch_lines(["jetmem: modes selected: all"])


@pytest.mark.parametrize(
    ("args", "ini", "expected"),
    [
        (["--jetmem-modes=device,gpu"], None, "--jetmem-modes: unknown memory mode 'gpu'; expected one of device*"),
        (["--jetmem-modes=devices,host"], None, "--jetmem-modes: unknown memory modes 'devices', 'host'*"),
        (["--jetmem-modes=,"], None, "--jetmem-modes: expected a list of memory modes*"),
        ([], "jetmem_modes = manged", "ini option jetmem_modes: unknown memory mode 'manged'*"),
    ],
    ids=["option", "option-two-bad", "option-empty-list", "ini"],
)
def test_unknown_mode_selection_is_a_usage_error(
    pytester: pytest.Pytester, fake_driver: FakeDriver, args: list[str], ini: str | None, expected: str
) -> None:
    pytester.makepyfile(MODE_SELECTION_TESTS)
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {expected}"])
    assert fake_driver.launches == []


# -- bad markers fail collection ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ('memmode("device", "gpu_mem")', "unknown memory mode 'gpu_mem'; expected one of device, managed, zero_copy"),
        ("memmode(3)", "@pytest.mark.memmode expects mode names (str), got 3"),
        ('memmode("device", None)', "@pytest.mark.memmode expects mode names (str), got None"),
        ('memmode(mode="device")', "@pytest.mark.memmode takes mode names only, got keyword(s) mode"),
    ],
    ids=["unknown-name", "int", "none", "keyword"],
)
def test_bad_marker_fails_collection_naming_test_and_value(
    pytester: pytest.Pytester, fake_driver: FakeDriver, marker: str, message: str
) -> None:
    pytester.makepyfile(
        test_marked=f"""
        import pytest

        @pytest.mark.{marker}
        def test_typo(memmode):
            pass

        def test_fine():
            pass
        """
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([f"*test_marked.py::test_typo: *{message}*"])
    result.stdout.fnmatch_lines(["*1 error*"])
    assert "passed" not in result.parseoutcomes()


# -- where GPU tests cannot run -------------------------------------------------------------------------
UNAVAILABLE_TESTS = """
    import pytest

    @pytest.mark.memmode
    def test_gpu(jetmem):
        jetmem.zeros(4)

    @pytest.mark.memmode("device", "managed")
    def test_mode_only(memmode):
        pass

    def test_plain():
        assert 2 + 2 == 4
"""


@pytest.mark.parametrize(
    ("profile", "reason"),
    [
        ("no_driver", "jetmem: no CUDA driver: "),
        ("no_device", "jetmem: no CUDA device: "),
        ("no_nvrtc", "jetmem: NVRTC not found"),
    ],
)
def test_unavailable_gpu_skips_every_mode_with_the_reason(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, profile: str, reason: str
) -> None:
    fake = install_fake_driver(profile)
    pytester.makepyfile(UNAVAILABLE_TESTS)
    reprec = pytester.inline_run()
    assert reprec.ret == pytest.ExitCode.OK
    outcomes = results(reprec)
    expected_skips = [f"test_gpu[{m}]" for m in MODES] + ["test_mode_only[device]", "test_mode_only[managed]"]
    assert sorted(outcomes) == sorted([*expected_skips, "test_plain"])
    for name in expected_skips:
        outcome, text = outcomes[name]
        assert outcome == "skipped", name
        assert skip_reason(text).startswith(reason), (name, text)
    assert outcomes["test_plain"][0] == "passed"
    # nothing was allocated or left behind
    assert fake.live == {}
    assert fake.count("cuMemAlloc") == fake.count("cuMemAllocManaged") == fake.count("cuMemHostAlloc") == 0
    assert fake.count("cuDevicePrimaryCtxRetain") == 0


def test_no_driver_asks_nothing_after_cuinit(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    fake = install_fake_driver("no_driver")
    pytester.makepyfile(UNAVAILABLE_TESTS)
    pytester.inline_run().assertoutcome(passed=1, skipped=5)
    assert {c.name for c in fake.calls} == {"cuInit"}


def test_failing_cuinit_is_a_skip_not_an_error(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    fake_driver.inject("cuInit", "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH")
    pytester.makepyfile(UNAVAILABLE_TESTS)
    reprec = pytester.inline_run()
    reprec.assertoutcome(passed=1, skipped=5)
    outcome, text = results(reprec)["test_gpu[device]"]
    assert outcome == "skipped"
    assert skip_reason(text) == "jetmem: no usable CUDA driver: cuInit returned CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"


@pytest.mark.parametrize(
    ("call", "error", "reason"),
    [
        (
            "cuDeviceGetAttribute(MANAGED_MEMORY)",
            "CUDA_ERROR_UNKNOWN",
            "jetmem: CUDA driver error while probing the device: cuDeviceGetAttribute(MANAGED_MEMORY) failed: "
            "CUDA_ERROR_UNKNOWN",
        ),
        (
            "cuDevicePrimaryCtxRetain",
            "CUDA_ERROR_OUT_OF_MEMORY",
            "jetmem: could not open CUDA device 0: cuDevicePrimaryCtxRetain failed: CUDA_ERROR_OUT_OF_MEMORY",
        ),
    ],
    ids=["probe", "context"],
)
def test_failing_device_open_is_a_skip_naming_the_error(
    pytester: pytest.Pytester, fake_driver: FakeDriver, call: str, error: str, reason: str
) -> None:
    fake_driver.inject(call, error)
    pytester.makepyfile(UNAVAILABLE_TESTS)
    reprec = pytester.inline_run()
    assert reprec.ret == pytest.ExitCode.OK
    outcomes = results(reprec)
    assert outcomes["test_plain"][0] == "passed"
    for mode in MODES:
        outcome, text = outcomes[f"test_gpu[{mode}]"]
        assert outcome == "skipped"
        assert skip_reason(text).startswith(reason), text


def test_unavailable_in_a_real_subprocess(pytester: pytest.Pytester) -> None:
    """The conftest route (for runpytest_subprocess): the fake is installed by the child's conftest."""
    pytester.makeconftest(conftest_source("no_device"))
    pytester.makepyfile(UNAVAILABLE_TESTS)
    result = pytester.runpytest_subprocess("-ra")
    result.assert_outcomes(passed=1, skipped=5)
    result.stdout.fnmatch_lines(["SKIPPED [[]*] *jetmem: no CUDA device: *"])
    result.stdout.fnmatch_lines(["jetmem: GPU tests will be skipped: no CUDA device: *"])


@pytest.mark.parametrize(
    ("profile", "skipped_mode", "reason"),
    [
        ("orin_no_map_host", "zero_copy", "jetmem: zero_copy: the device reports CAN_MAP_HOST_MEMORY=0"),
        ("orin_no_managed", "managed", "jetmem: managed: the device reports MANAGED_MEMORY=0"),
    ],
)
def test_unsupported_mode_is_skipped_with_the_attribute(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, profile: str, skipped_mode: str, reason: str
) -> None:
    fake = install_fake_driver(profile)
    pytester.makepyfile(
        """
        import numpy as np
        import pytest

        @pytest.mark.memmode
        def test_x(jetmem):
            np.testing.assert_array_equal(jetmem.array([1, 2, 3]).to_numpy(), [1, 2, 3])
        """
    )
    reprec = pytester.inline_run()
    outcomes = results(reprec)
    for mode in MODES:
        outcome, text = outcomes[f"test_x[{mode}]"]
        if mode == skipped_mode:
            assert outcome == "skipped"
            assert skip_reason(text).startswith(reason), text
        else:
            assert outcome == "passed", text
    assert not any(a.kind == ALLOC_KIND[skipped_mode] for a in fake.freed)


# -- teardown ---------------------------------------------------------------------------------------------
def test_teardown_frees_every_buffer_even_when_the_test_fails(
    pytester: pytest.Pytester, fake_driver: FakeDriver
) -> None:
    pytester.makepyfile(
        """
        import numpy as np
        import pytest

        @pytest.mark.memmode
        def test_fails_with_buffers(jetmem):
            a = jetmem.array(np.arange(100, dtype=np.int32))     # 400 bytes
            jetmem.zeros((4, 5), np.float64)                      # 160 bytes
            jetmem.empty_like(a)                                  # 400 bytes
            jetmem.empty(7, np.uint8, mode="device")              # another mode in the same test
            early = jetmem.zeros(3, np.float32)                   # 12 bytes, freed by the test
            early.free()
            early.free()                                          # twice is a no-op
            assert False, "boom"

        @pytest.mark.memmode
        def test_raises_midway(jetmem):
            jetmem.zeros(10)                                      # 40 bytes
            raise RuntimeError("kernel wrapper blew up")
        """
    )
    reprec = pytester.inline_run()
    reprec.assertoutcome(failed=6)
    assert not any(name.endswith("teardown") for name in results(reprec)), results(reprec)
    assert fake_driver.live == {}
    assert fake_driver.leaks() == {}
    freed = Counter(a.nbytes for a in fake_driver.freed)
    for nbytes, times in {400: 6, 160: 3, 7: 3, 12: 3, 40: 3}.items():
        assert freed[nbytes] == times, (nbytes, freed)
    # the device-mode buffers of the non-device items went through cuMemFree, not cuMemFreeHost
    assert Counter(a.kind for a in fake_driver.freed if a.nbytes == 7) == {"device": 3}


def test_teardown_error_names_the_cuda_error(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    fake_driver.inject("cuMemFree", "CUDA_ERROR_INVALID_VALUE")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.memmode("device")
        def test_x(jetmem):
            jetmem.zeros(8)
        """
    )
    reprec = pytester.inline_run()
    outcomes = results(reprec)
    assert outcomes["test_x[device]"][0] == "passed"
    outcome, text = outcomes["test_x[device] teardown"]
    assert outcome == "failed"
    assert "jetmem teardown of test_teardown_error_names_the_cuda_error.py::test_x[device]" in text
    assert "cuMemFree failed: CUDA_ERROR_INVALID_VALUE (1)" in text


def test_session_releases_stream_modules_and_context(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(
        """
        import numpy as np
        import pytest

        @pytest.mark.memmode
        def test_kernel(jetmem):
            x = jetmem.zeros(256)
            jetmem.kernel("stream_fill").launch(1, 256, (x, np.uint64(256), np.float32(1.5)))
            times = jetmem.time_gpu(lambda: None, repeats=2, warmup=0)
            assert times.shape == (2,)
        """
    )
    pytester.inline_run().assertoutcome(passed=3)
    assert fake_driver.count("cuDevicePrimaryCtxRetain") >= 1
    assert fake_driver.leaks() == {}


# -- report header ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("profile", "overrides"),
    [("orin", {}), ("dgpu", {"PAGEABLE_MEMORY_ACCESS": 1}), ("orin_no_map_host", {})],
)
def test_report_header_shows_device_and_memory_attributes(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, profile: str, overrides: dict[str, int]
) -> None:
    fake = install_fake_driver(profile, attributes=overrides)
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest()
    attrs = fake.attributes
    cc = f"{attrs['COMPUTE_CAPABILITY_MAJOR']}.{attrs['COMPUTE_CAPABILITY_MINOR']}"
    version = f"{fake.version // 1000}.{fake.version % 1000 // 10}"
    memory = ", ".join(
        f"{name}={attrs[name]}"
        for name in (
            "INTEGRATED",
            "CAN_MAP_HOST_MEMORY",
            "MANAGED_MEMORY",
            "CONCURRENT_MANAGED_ACCESS",
            "PAGEABLE_MEMORY_ACCESS",
        )
    )
    result.stdout.fnmatch_lines(
        [
            f"jetmem: device 0: {fake.device_name_str}, compute capability {cc}, *CUDA driver {version}*",
            f"jetmem: memory attributes: {memory}*",
        ]
    )
    result.stdout.no_fnmatch_line("*GPU tests will be skipped*")
    result.assert_outcomes(passed=1)


def test_report_header_values_come_from_the_driver(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    install_fake_driver(
        "orin",
        device_name="Orin (nvgpu) test",
        driver_version=13000,
        attributes={"COMPUTE_CAPABILITY_MAJOR": 11, "COMPUTE_CAPABILITY_MINOR": 0, "CONCURRENT_MANAGED_ACCESS": 1},
    )
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest()
    result.stdout.fnmatch_lines(
        [
            "jetmem: device 0: Orin (nvgpu) test, compute capability 11.0, *CUDA driver 13.0*",
            "jetmem: memory attributes: *CONCURRENT_MANAGED_ACCESS=1*",
        ]
    )


@pytest.mark.parametrize(
    ("profile", "reason"),
    [("no_driver", "no CUDA driver: "), ("no_device", "no CUDA device: "), ("no_nvrtc", "NVRTC not found")],
)
def test_report_header_says_why_gpu_tests_skip(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, profile: str, reason: str
) -> None:
    install_fake_driver(profile)
    pytester.makepyfile("def test_plain():\n    pass\n")
    result = pytester.runpytest()
    result.stdout.fnmatch_lines([f"jetmem: GPU tests will be skipped: {reason}*"])
    if profile == "no_nvrtc":  # the device was probed: its facts are still shown
        result.stdout.fnmatch_lines(["jetmem: device 0: Orin, *NVRTC missing*"])
    else:
        result.stdout.no_fnmatch_line("jetmem: memory attributes:*")


# -- allocation ---------------------------------------------------------------------------------------------
def test_allocation_larger_than_free_memory_is_refused_before_the_driver(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    fake = install_fake_driver("orin", free_mem=1 << 20)
    pytester.makepyfile(
        """
        import numpy as np
        import pytest
        from pytest_jetmem.errors import AllocationRefused

        @pytest.mark.memmode("device", "managed")
        def test_too_big(jetmem, request):
            with pytest.raises(AllocationRefused) as info:
                jetmem.empty((1 << 20,), np.float32)
            message = str(info.value)
            assert request.node.nodeid in message
            assert f"refused to allocate {4 << 20} bytes of {jetmem.mode} memory" in message
            assert "cuMemGetInfo" in message
            jetmem.empty(1000, np.float32)  # what fits is still allocated
        """
    )
    pytester.inline_run().assertoutcome(passed=2)
    sizes = [c.args[0] for c in fake.calls if c.api in ("cuMemAlloc", "cuMemAllocManaged")]
    assert sizes == [4000, 4000]
    assert fake.live == {}


@pytest.mark.parametrize(
    ("call", "failing_mode", "error"),
    [
        ("cuMemAlloc", "device", "CUDA_ERROR_OUT_OF_MEMORY"),
        ("cuMemAllocManaged", "managed", "CUDA_ERROR_NOT_SUPPORTED"),
        ("cuMemHostAlloc", "zero_copy", "CUDA_ERROR_OUT_OF_MEMORY"),
    ],
)
def test_driver_errors_carry_the_cuda_error_name(
    pytester: pytest.Pytester, fake_driver: FakeDriver, call: str, failing_mode: str, error: str
) -> None:
    fake_driver.inject(call, error, times=None)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.memmode
        def test_alloc(jetmem):
            jetmem.zeros(16)

        @pytest.mark.memmode
        def test_after(jetmem):
            jetmem.zeros(16, mode="device" if jetmem.mode != "device" else "managed")
        """
    )
    reprec = pytester.inline_run()
    outcomes = results(reprec)
    for mode in MODES:
        outcome, text = outcomes[f"test_alloc[{mode}]"]
        if mode == failing_mode:
            assert outcome == "failed"
            assert f"CudaError: {call} failed: {error} ({error_code(error)})" in text
        else:
            assert outcome == "passed", text
    assert not any(name.endswith("teardown") for name in outcomes)
    assert fake_driver.live == {}


def test_host_view_per_mode(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(
        """
        import re
        import numpy as np
        import pytest
        from pytest_jetmem.cuda.buffer import HostAccessError

        @pytest.mark.memmode
        def test_host(jetmem, memmode):
            x = jetmem.array(np.arange(8, dtype=np.float32))
            if memmode == "device":
                with pytest.raises(HostAccessError) as info:
                    x.host
                assert "memory mode 'device' has no host view; use .to_numpy() and .copy_from()" in str(info.value)
                np.testing.assert_array_equal(x.to_numpy(), np.arange(8))
            else:
                h = x.host
                h[3] = 42                      # the same memory: seen by copies, no upload needed
                assert x.to_numpy()[3] == 42
                x.copy_from(np.full(8, 7, np.float32))
                assert h[0] == 7
            x.free()
            with pytest.raises(HostAccessError, match="was freed"):
                x.host
        """
    )
    pytester.inline_run().assertoutcome(passed=3)
    # the device buffer went through explicit copies, the others through their host views
    assert fake_driver.count("cuMemcpyHtoD") == fake_driver.count("cuMemcpyDtoH") == 1


def test_cuda_array_interface(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(
        """
        import numpy as np
        import pytest
        from pytest_jetmem.cuda import driver

        @pytest.mark.memmode
        def test_cai(jetmem, memmode):
            x = jetmem.zeros((3, 4), np.int16)
            cai = x.__cuda_array_interface__
            assert cai["version"] == 3
            assert cai["shape"] == (3, 4)
            assert cai["typestr"] == np.dtype(np.int16).str
            assert cai["strides"] is None
            assert cai["data"] == (x.ptr, False)
            assert cai["stream"] == int(jetmem.stream) and cai["stream"] > 2   # 1, 2 are the CAI's default streams
            alloc = driver.get().allocation_at(cai["data"][0])
            assert alloc is not None and alloc.ptr == x.ptr and alloc.nbytes == 24
            assert alloc.kind == {kinds!r}[memmode]
            assert jetmem.zeros(5).__cuda_array_interface__["typestr"] == "<f4"
        """.replace("{kinds!r}", repr(ALLOC_KIND))
    )
    pytester.inline_run().assertoutcome(passed=3)


def test_jetmem_device_fixture(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(
        """
        import pytest

        SEEN = []

        def test_facts(jetmem_device):
            assert jetmem_device.name == "Orin"
            assert jetmem_device.compute_capability == (8, 7)
            assert jetmem_device.arch == "sm_87"
            assert jetmem_device.integrated
            assert jetmem_device.attr("CONCURRENT_MANAGED_ACCESS") == 0
            assert jetmem_device.attr("CAN_MAP_HOST_MEMORY") == 1
            assert jetmem_device.driver_version_str == "12.6"
            assert jetmem_device.total_mem == 30 << 30
            SEEN.append(jetmem_device)

        @pytest.mark.memmode("managed")
        def test_same_object(jetmem_device, jetmem):
            assert jetmem.device is jetmem_device is SEEN[0]
        """
    )
    pytester.inline_run().assertoutcome(passed=2)
    assert fake_driver.count("cuDeviceGetName") == 1  # read once per session


def test_jetmem_device_fixture_skips_without_a_device(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    install_fake_driver("no_driver")
    pytester.makepyfile("def test_facts(jetmem_device):\n    pass\n")
    reprec = pytester.inline_run()
    outcome, text = results(reprec)["test_facts"]
    assert outcome == "skipped"
    assert skip_reason(text).startswith("jetmem: no CUDA driver: ")


def test_fixtures_need_the_marker(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(
        """
        def test_no_marker(jetmem):
            pass
        """
    )
    reprec = pytester.inline_run()
    outcome, text = results(reprec)["test_no_marker"]
    assert outcome == "failed"
    assert "test_no_marker: the memmode/jetmem fixtures need @pytest.mark.memmode on the test" in text


# -- kernels through the driver ---------------------------------------------------------------------------
def test_bundled_kernel_launch_reaches_the_driver(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    pytester.makepyfile(
        """
        import numpy as np
        import pytest
        from pytest_jetmem.cuda.launch import LaunchArgumentError

        @pytest.mark.memmode
        def test_copy(jetmem):
            x = jetmem.array(np.arange(1000, dtype=np.float32))
            y = jetmem.empty_like(x)
            jetmem.kernel("stream_copy").launch((4,), 256, (x, y, np.uint64(x.size)))
            jetmem.synchronize()
            np.testing.assert_array_equal(y.to_numpy(), np.arange(1000))
            with pytest.raises(LaunchArgumentError, match="argument 2"):
                jetmem.kernel("stream_copy").launch(4, 256, (x, y, np.float32(1)))
        """
    )
    pytester.inline_run().assertoutcome(passed=3)
    launches = [launch for launch in fake_driver.launches if launch.kernel == "stream_copy"]
    assert len(launches) == 3  # the bad call never reached cuLaunchKernel
    kinds = []
    for launch in launches:
        assert (launch.grid, launch.block) == ((4, 1, 1), (256, 1, 1))
        assert launch.value(2, np.uint64) == 1000
        src, dst = (next(a for a in fake_driver.freed if a.ptr == launch.ptr(i)) for i in (0, 1))
        assert src.nbytes == dst.nbytes == 4000 and src.ptr != dst.ptr
        kinds.append(src.kind)
    assert sorted(kinds) == ["device", "host", "managed"]
    assert fake_driver.count("cuModuleLoadData") == 1  # compiled and loaded once for the session


def test_kernel_cache_is_reused_by_the_next_session(
    pytester: pytest.Pytester, install_fake_driver: InstallFake
) -> None:
    pytester.makepyfile(
        """
        import numpy as np
        import pytest

        @pytest.mark.memmode("device")
        def test_write(jetmem):
            y = jetmem.empty(100)
            jetmem.kernel("stream_write").launch(1, 128, (y, np.uint64(100), np.float32(0.5)))
            np.testing.assert_array_equal(y.to_numpy(), np.arange(100, dtype=np.float32) * np.float32(0.5))
        """
    )
    first = install_fake_driver("orin")
    pytester.inline_run().assertoutcome(passed=1)
    assert [name for name, _ in first.compiles] == ["stream.cu"]
    second = install_fake_driver("orin")
    pytester.inline_run().assertoutcome(passed=1)
    assert second.compiles == []  # the CUBIN came from the disk cache
    assert [launch.kernel for launch in second.launches] == ["stream_write"]


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


# -- sticky errors ----------------------------------------------------------------------------------------
STICKY_WAYS = {
    # a kernel writes through a freed buffer: the fault shows at the next synchronisation
    "use-after-free": """
        buf = jetmem.zeros(64)
        ptr = buf.ptr
        buf.free()
        jetmem.kernel("stream_fill").launch(1, 64, (ptr, np.uint64(64), np.float32(1)))
        jetmem.synchronize()
    """,
    "sync-returns-it": """
        jetmem.zeros(64)
        driver.get().inject("cuStreamSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS")
        jetmem.synchronize()
    """,
    "launch-returns-it": """
        x = jetmem.zeros(64)
        driver.get().inject("cuLaunchKernel", "CUDA_ERROR_LAUNCH_FAILED")
        jetmem.kernel("stream_fill").launch(1, 64, (x, np.uint64(64), np.float32(1)))
    """,
}


@pytest.mark.parametrize("way", list(STICKY_WAYS))
def test_sticky_error_skips_later_gpu_tests(pytester: pytest.Pytester, fake_driver: FakeDriver, way: str) -> None:
    body = "\n".join("    " + line.strip() for line in STICKY_WAYS[way].strip().splitlines())
    pytester.makepyfile(
        test_sticky="import numpy as np\nimport pytest\nfrom pytest_jetmem.cuda import driver\n\n\n"
        '@pytest.mark.memmode("device")\n'
        f"def test_a_faults(jetmem):\n{body}\n\n\n"
        "@pytest.mark.memmode\n"
        "def test_b_later(jetmem):\n    jetmem.zeros(4)\n\n\n"
        "def test_c_plain():\n    assert 1 + 1 == 2\n"
    )
    error = "CUDA_ERROR_LAUNCH_FAILED" if way == "launch-returns-it" else "CUDA_ERROR_ILLEGAL_ADDRESS"
    reprec = pytester.inline_run()
    assert reprec.ret == pytest.ExitCode.TESTS_FAILED  # the session ends normally
    outcomes = results(reprec)
    outcome, text = outcomes["test_a_faults[device]"]
    assert outcome == "failed"
    assert error in text
    for mode in MODES:
        outcome, text = outcomes[f"test_b_later[{mode}]"]
        assert outcome == "skipped", (mode, text)
        reason = skip_reason(text)
        assert "test_sticky.py::test_a_faults[device]" in reason, reason
        assert error in reason, reason
    assert outcomes["test_c_plain"][0] == "passed"
    assert not any(name.endswith("teardown") for name in outcomes), outcomes
    # after the fault no later test touched the device: no allocation, module load or launch
    assert fake_driver.sticky == error and fake_driver.sticky_at is not None
    later = {c.api for c in fake_driver.calls[fake_driver.sticky_at :]}
    assert later.isdisjoint({"cuMemAlloc", "cuMemAllocManaged", "cuMemHostAlloc", "cuModuleLoadData", "cuLaunchKernel"})


# -- the fake itself: it must fail where the driver would, or the tests above prove little ---------------
def test_fake_checks_arguments_like_the_driver(fake_driver: FakeDriver) -> None:
    fake = fake_driver
    with pytest.raises(CudaError) as info:
        fake.mem_alloc(16)
    assert info.value.name == "CUDA_ERROR_NOT_INITIALIZED"
    fake.init()
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_CONTEXT"):
        fake.mem_alloc(16)
    dev = fake.device_get(0)
    fake.ctx_set_current(fake.primary_ctx_retain(dev))
    ptr = fake.mem_alloc(16)
    assert ptr % 256 == 0 and fake.live[ptr].kind == "device"
    with pytest.raises(CudaError) as info:
        fake.mem_free(ptr + 8)
    assert (info.value.call, info.value.name, info.value.code) == ("cuMemFree", "CUDA_ERROR_INVALID_VALUE", 1)
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE"):
        fake.mem_free_host(ptr)  # not a host allocation
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE"):
        fake.mem_alloc(0)
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE"):
        fake.memcpy_dtoh(np.empty(4, np.uint8).ctypes.data, ptr + 14, 4)  # runs past the allocation
    fake.mem_free(ptr)
    with pytest.raises(CudaError, match="cuMemFree failed: CUDA_ERROR_INVALID_VALUE"):
        fake.mem_free(ptr)  # twice
    host = fake.mem_host_alloc(8, 0)  # not DEVICEMAP
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE"):
        fake.mem_host_get_device_pointer(host)
    fake.mem_free_host(host)
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_DEVICE"):
        fake.device_get(1)
    with pytest.raises(AttributeError):
        fake.device_attribute(dev, "NOT_AN_ATTRIBUTE")
    with pytest.raises(ValueError, match="no call"):
        fake.inject("cuMemAlocManaged", "CUDA_ERROR_OUT_OF_MEMORY")
    with pytest.raises(ValueError, match="unknown CUDA error name"):
        fake.inject("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMROY")
    assert fake.live == {}


def test_fake_memory_is_real_and_sticky_errors_last_until_reset(fake_driver: FakeDriver) -> None:
    fake = fake_driver
    fake.init()
    dev = fake.device_get(0)
    fake.ctx_set_current(fake.primary_ctx_retain(dev))
    src = np.arange(16, dtype=np.uint8)
    ptr = fake.mem_alloc(16)
    fake.memcpy_htod(ptr, src.ctypes.data, 16)
    fake.memset_d8(ptr + 8, 0xFF, 8)
    out = np.zeros(16, np.uint8)
    fake.memcpy_dtoh(out.ctypes.data, ptr, 16)
    np.testing.assert_array_equal(out, [*range(8), *[255] * 8])
    stream = fake.stream_create()
    fake.inject("cuStreamSynchronize", "CUDA_ERROR_ILLEGAL_ADDRESS")
    with pytest.raises(CudaError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        fake.stream_synchronize(stream)
    for call in (lambda: fake.mem_alloc(4), lambda: fake.mem_free(ptr), fake.ctx_synchronize):
        with pytest.raises(CudaError, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
            call()
    fake.primary_ctx_reset(dev)
    assert fake.sticky is None and fake.live == {} and [a.ptr for a in fake.reclaimed] == [ptr]
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_HANDLE"):
        fake.stream_synchronize(stream)  # streams die with the context
    fake.ctx_synchronize()
    fake.primary_ctx_release(dev)
    assert fake.leaks() == {}


def test_fake_reports_what_a_session_forgot(fake_driver: FakeDriver) -> None:
    fake = fake_driver
    fake.init()
    dev = fake.device_get(0)
    fake.ctx_set_current(fake.primary_ctx_retain(dev))
    ptr = fake.mem_alloc_managed(32)
    fake.stream_create()
    fake.primary_ctx_release(dev)  # the context goes, the leaks stay visible
    assert list(fake.live) == [ptr]
    assert set(fake.leaks()) == {"allocations", "streams"}


def test_fake_reads_kernel_parameters_from_the_cubin(fake_driver: FakeDriver) -> None:
    source = kernels.sources()["coherence_check_write"]
    compiled = compile_kernel(source, "coherence_check_write", "sm_87", drv=fake_driver)
    fake_driver.init()
    dev = fake_driver.device_get(0)
    fake_driver.ctx_set_current(fake_driver.primary_ctx_retain(dev))
    module = fake_driver.module_load_data(compiled.cubin)
    func = fake_driver.module_get_function(module, "coherence_check_write")
    # unsigned int*, unsigned long long, unsigned int, unsigned int, int, unsigned long long*
    assert func.data["params"] == [8, 8, 4, 4, 4, 8]
    with pytest.raises(CudaError, match="CUDA_ERROR_NOT_FOUND"):
        fake_driver.module_get_function(module, "stream_fill")
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_IMAGE"):
        fake_driver.module_load_data(b"not a cubin")
    assert param_sizes(b"") == []
    fake_driver.module_unload(module)
    fake_driver.primary_ctx_release(dev)


def test_fake_emulated_kernel_faults_on_unmapped_memory(fake_driver: FakeDriver) -> None:
    args = (np.uint64(64).tobytes(), np.uint64(4).tobytes(), np.float32(1).tobytes())  # out = 0x40: no allocation
    launch = Launch("stream_fill", (1, 1, 1), (32, 1, 1), 0, None, args)
    with pytest.raises(FakeFault, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        fake_driver.emulators["stream_fill"](fake_driver, launch)


def test_fake_without_nvrtc(install_fake_driver: InstallFake) -> None:
    fake = install_fake_driver("no_nvrtc")
    with pytest.raises(CudaUnavailable, match="NVRTC not found"):
        fake.nvrtc_version()
