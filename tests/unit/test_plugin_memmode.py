"""plugin.memmode: the ``memmode`` marker's parametrization, ``--jetmem-modes``, the fixtures, the report header.

Only the driver boundary is faked (tests/fakes/fake_driver.py); the plugin, device probing, memory modes,
buffers, the ``jetmem`` handle and kernel argument packing run for real. Each test installs a fake (the
fixtures of the repository's conftest.py) before an in-process ``pytester`` run, whose plugin opens the
device lazily and so talks to the fake; afterwards the test inspects what the fake saw.
"""

from __future__ import annotations

import pytest

from fakes.fake_driver import FakeDriver
from memmode_runs import ALLOC_KIND, MODES, InstallFake, results, skip_reason


def collected_names(pytester: pytest.Pytester, *args: str) -> list[str]:
    items, reprec = pytester.inline_genitems(*args)
    assert reprec.ret == pytest.ExitCode.OK
    return [item.name for item in items]


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


def test_subsets_keep_order(pytester: pytest.Pytester, fake_driver: FakeDriver) -> None:
    """A repeated mode is a collection error (tests/unit/test_first_hour_silent.py), no longer collapsed."""
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.memmode("device", "managed")
        def test_pair(memmode):
            pass

        @pytest.mark.memmode("managed", "device")
        def test_reversed(memmode):
            pass

        @pytest.mark.memmode(["zero_copy"])
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
        "test_reversed[managed]",
        "test_reversed[device]",
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
    result.stdout.fnmatch_lines(["jetmem: modes selected: as marked"])


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


# -- report header ----------------------------------------------------------------------------------------
#: A file with one jetmem test: the device lines come after collection, where a collected test is jetmem's.
JETMEM_AND_PLAIN = """
import pytest

@pytest.mark.memmode("device")
def test_gpu(memmode):
    pass

def test_plain():
    pass
"""


@pytest.mark.parametrize(
    ("profile", "overrides"),
    [("orin", {}), ("dgpu", {"PAGEABLE_MEMORY_ACCESS": 1}), ("orin_no_map_host", {})],
)
def test_report_header_shows_device_and_memory_attributes(
    pytester: pytest.Pytester, install_fake_driver: InstallFake, profile: str, overrides: dict[str, int]
) -> None:
    fake = install_fake_driver(profile, attributes=overrides)
    pytester.makepyfile(JETMEM_AND_PLAIN)
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
    result.assert_outcomes(passed=2)


def test_report_header_values_come_from_the_driver(pytester: pytest.Pytester, install_fake_driver: InstallFake) -> None:
    install_fake_driver(
        "orin",
        device_name="Orin (nvgpu) test",
        driver_version=13000,
        attributes={"COMPUTE_CAPABILITY_MAJOR": 11, "COMPUTE_CAPABILITY_MINOR": 0, "CONCURRENT_MANAGED_ACCESS": 1},
    )
    pytester.makepyfile(JETMEM_AND_PLAIN)
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
    pytester.makepyfile(JETMEM_AND_PLAIN)
    result = pytester.runpytest()
    result.stdout.fnmatch_lines([f"jetmem: GPU tests will be skipped: {reason}*"])
    if profile == "no_nvrtc":  # the device was probed: its facts are still shown
        result.stdout.fnmatch_lines(["jetmem: device 0: Orin, *NVRTC missing*"])
    else:
        result.stdout.no_fnmatch_line("jetmem: memory attributes:*")


def test_the_device_is_said_after_collection_and_only_for_jetmem_tests(
    pytester: pytest.Pytester, fake_driver: FakeDriver
) -> None:
    """The header names the modes; the device is opened, and said, after collection where a test is jetmem's."""
    pytester.makepyfile(test_plain="def test_plain():\n    pass\n")
    result = pytester.runpytest("test_plain.py")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["jetmem: modes selected: as marked"])
    result.stdout.no_fnmatch_line("jetmem: device 0:*")
    assert fake_driver.count("cuInit") == 0  # a run without jetmem tests never opens the device
    pytester.makepyfile(test_gpu=JETMEM_AND_PLAIN)
    result = pytester.runpytest("test_gpu.py")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["jetmem: modes selected: as marked", "collected 2 items", "jetmem: device 0: Orin, *"])
    quiet = pytester.runpytest("-q", "test_gpu.py")  # -q shows no header: no device lines either
    quiet.stdout.no_fnmatch_line("jetmem: device 0:*")


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
